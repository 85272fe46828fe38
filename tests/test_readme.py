"""The README and the docs are the truth: every command in their fenced bash blocks runs and exits as they say.

The files read are README.md and every ``docs/*.md`` page (the MkDocs site), as one text: "the
README" below means all of them. A bash block that appears twice, word for word (the quick start
is in README.md and in docs/index.md), runs once.

Each ``bash`` block is read line by line. A line is a shell command, ``&&`` chains included, with an
optional ``# comment``; the comment states the exit code of a command that does not exit 0
(``# exits 1: ...``), and a line without one must exit 0. The lines of one block run in order in one
fresh folder that stands for the user's project: ``mypkg/spec.py`` and ``path/to/verifier.py`` hold
the reference verifier (the user's verifier, installed: the folder is on ``sys.path``) and
``my-scenario.yaml`` is the README's example scenario. ``specaudit ...`` runs through click's
``CliRunner`` on ``specaudit.cli:main``, the console script's entry point, in this process (the
imports are paid once, which keeps the whole file near a minute of CPU); ``>`` redirects its stdout
into a file.

What is not executed, and why:

- ``pip install`` segments are checked, not run (``test_install_lines_install_this_project``): each
  installs this checkout, never the unrelated package named ``specaudit`` on the public index;
- lines that need a GPU, a package that is not installed or code the user has not shown
  (``mymod``) are separate tests that skip with that reason;
- sizes: every ``specaudit run`` line runs with ``--samples`` :data:`RUN_SAMPLES` (one block per
  scenario) and a few lines with the sizes of :data:`SMALLER` (the README states the full figures);
  ``test_what_runs_is_the_readme_line_but_for_sizes`` checks that nothing else differs. The default
  suite at full size runs in ``tests/test_workflow.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from specaudit.cli import main
from specaudit.errors import ExitCode

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SOURCES = [README, *sorted((ROOT / "docs").glob("*.md"))]
TEXTS = {path.relative_to(ROOT).as_posix(): path.read_text() for path in SOURCES}
TEXT = "\n".join(TEXTS.values())
DIST_NAME = "specaudit-verifiers"  # [project] name in pyproject.toml: free on PyPI, checked 2026-12-01

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
EXIT = re.compile(r"\bexits (\d)\b")

# Every `specaudit run` line that sets no --samples runs with RUN_SAMPLES sequences per scenario (one
# block of 15,000), and the lines below with these flags set or replaced: the README's own figures
# are the shipped scenarios' sizes (300,000 for markov-v4), and test_workflow.py runs the default suite
# at full size. Only these flags differ between a README line and what runs (``argv``).
RUN_SAMPLES = "15000"
SMALLER: dict[str, dict[str, str]] = {
    # blocks of 15,000: two per scenario, so that both processes, both looks, both shards have one
    "specaudit run mypkg.spec:verify --jobs 2": {"--samples": "30000"},
    "specaudit run mypkg.spec:verify --early-stop": {"--samples": "30000"},
    "specaudit run mypkg.spec:verify --seed 1 --shard 0/2 --json s0.json": {"--samples": "30000"},
    "specaudit run mypkg.spec:verify --seed 1 --shard 1/2 --json s1.json": {"--samples": "30000"},
    # --samples is the cap of --certify-tv: this is the cap the README line gets on its own (4x the plan for
    # markov-v4 at 0.005); it certifies at 960,000 sequences (about 3 s of CPU on the 2-core machine, 2026-12-01)
    "specaudit run specaudit.verifiers.reference:verify -s markov-v4 --certify-tv 0.005": {"--samples": "2881536"},
    # the same cap: a smaller one is refused when 0.005 is below its least bound; the mutant fails at its first look
    "specaudit run specaudit.verifiers.zoo.chain:resample_from_p -s markov-v4 --certify-tv 0.005": {"--samples": "2881536"},
    # its own cap: 0.012 is above the least bound at 30,000 (0.011) and below what the plug-in TV reaches there
    "specaudit run specaudit.verifiers.reference:verify -s markov-v4 --certify-tv 0.012 --samples 30000": {"--samples": "30000"},
    # V = 32,768 at 20,000 sequences: minutes (83 s of CPU at 15,000 on the 2-core machine, 2026-12-01)
    "specaudit run mypkg.spec:verify -s zipf-v32k --max-memory 2": {"--samples": "1000"},
    # V = 128,256 at 20,000 sequences: minutes (benchmarks/scale.py's gate); 200 runs the same code
    "specaudit run mypkg.spec:verify -s llama3-v128k -s llama3-v128k-sparse": {"--samples": "200"},
    # the default suite through torch tensors: 26 s of CPU at 15,000 (2-core machine, 2026-12-01)
    "specaudit run specaudit.adapters.torch_reference:verify --adapter torch --dtype float32": {"--samples": "3000"},
    # HF's _speculative_sampling is batch-1 (under 3,000 sequences/s; 42 s of CPU for the suite at 2,000
    # on the 2-core machine, 2026-12-01): 500 per scenario. 5.24.0 exits 1 at any size (exact probes: r <= p/q)
    "specaudit run hf-transformers@5.24.0": {"--samples": "500"},
    "specaudit run hf-transformers@5.25.0": {"--samples": "500"},
    "specaudit run hf-transformers@5.25.0 --adapter-arg assistant_ensemble_weight=0.5": {"--samples": "500"},
    # SGLang's Triton kernel in Triton's interpreter: ~10 ms a row (31 s for markov-v4 at 500, 2-core machine, 2026-12-06)
    "specaudit run sglang@0.5.23 -s markov-v4 --samples 500": {"--samples": "500"},
    "specaudit run sglang@0.5.23 -s block-extreme --adapter-arg block_verification=true --samples 500": {"--samples": "500"},
    # transformers' generate loop is batch-1 (a few ms a continuation): 100 per configuration, one block in-process
    "specaudit run hf-generate -s sampled -s greedy --json hf.json --junit hf.xml": {"--samples": "100"},
    "specaudit run hf-generate --jobs 2": {"--samples": "100"},
    # the default suite with 20 seeds, the law stage and the zoo in full (README); 10 seeds of markov-v4
    # here, with the law stage at its default size (markov-v4 + the per-prefix/PIT coverage scenario)
    "specaudit selftest": {"--seeds": "10", "-s": "markov-v4"},
    # vLLM's Triton kernels in Triton's interpreter: 300 is what a run takes there by default (docs/engine-vllm.md)
    "specaudit run vllm@0.34.0 -s markov-v4 --samples 300": {"--samples": "300"},
    "specaudit run vllm@0.33.0 -s markov-v4 --samples 300": {"--samples": "300"},
    "specaudit run vllm@0.34.0 -s markov-v4 --samples 300 --adapter-arg mode=fly": {"--samples": "300"},
    # the suspect on purpose of docs/troubleshooting.md: its seed and size are what make it suspect
    "specaudit run mypkg.spec:verify -s markov-v4 --samples 15000 --seed 1 --alpha 0.1 --suspect-level 0.9":
        {"--samples": "15000"},
}

# Lines too heavy for every CI run: each runs alone, in its own project folder, under -m slow.
SLOW = {
    # a local Ray instance: 70 s of CPU and 412 s wall at --samples 15000 on the 2-core development
    # machine under load (2026-12-01); tests/engine/test_blocks.py runs --backend ray in every CI run
    "pip install -e '.[ray]' && specaudit run mypkg.spec:verify --backend ray [--ray-address ADDR]",
    # 22 s of CPU even at --samples 500 (HF's exact probes run batch-1); the line above already runs
    # the HF suite in every CI run, and tests/adapters/test_hf.py runs this lossy weight
    "specaudit run hf-transformers@5.25.0 --adapter-arg assistant_ensemble_weight=0.5",
    # vLLM in Triton's interpreter: 58 s, 14 s and 47 s wall on the 2-core machine (2026-12-07);
    # tests/engines/test_vllm.py pins the same verdicts in every CI run
    "specaudit run vllm@0.34.0 -s markov-v4 --samples 300",
    "specaudit run vllm@0.33.0 -s markov-v4 --samples 300",
    "specaudit run vllm@0.34.0 -s markov-v4 --samples 300 --adapter-arg mode=fly",
    # SGLang's Triton kernels in the interpreter: 37 s for the two lines on the 2-core machine (2026-12-07);
    # tests/engines/test_sglang_flashinfer.py pins the same verdicts (chain and block mode) in every CI run
    "specaudit run sglang@0.5.23 -s markov-v4 --samples 500",
    "specaudit run sglang@0.5.23 -s block-extreme --adapter-arg block_verification=true --samples 500",
    # fetches flashinfer-python's wheel from the package index when it is not cached (4 s when it is);
    # tests/engines/test_sglang_flashinfer.py pins the same refusal in every CI run
    "specaudit run flashinfer@0.7.4 -s markov-v4",
}

# Python packages a line needs (checked with importlib.util.find_spec); a line is skipped without them.
NEEDS = {"--backend ray": "ray", "hf-transformers": "torch", "hf-generate": "transformers", "--adapter torch": "torch", "sglang@": "triton",
         "vllm@": "triton", "flashinfer@": "torch"}


def _cuda() -> bool:
    """Return whether torch sees a CUDA device (False without torch)."""
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


@dataclass(frozen=True)
class Line:
    """One command line of a bash block."""

    number: int  # line number in its file
    text: str  # the command, without its comment
    comment: str
    path: str = "README.md"  # the file, relative to the repository root

    @property
    def where(self) -> str:
        """Return ``path:line`` for messages and test ids."""
        return f"{self.path}:{self.number}"

    @property
    def exit_code(self) -> int:
        """Return the exit code the README states for this line (0 when it states none)."""
        m = EXIT.search(self.comment)
        return int(m.group(1)) if m else 0

    def skip_reason(self) -> str | None:
        """Return why this line cannot run here, or None."""
        if "--device cuda" in self.text:
            return "needs a CUDA GPU (and FlashInfer), and `mymod` is the user's module"
        if "sglang-tree" in self.text:
            return "needs a CUDA GPU and sgl-kernel (the tree op is CUDA-only; tests/laws cover the adapter)"
        if "flashinfer@" in self.text and _cuda():
            return "states the refusal on a machine without CUDA; this one has a CUDA device"
        if "--adapter vllm" in self.text:
            return "needs vLLM and the user's `mymod:rejection_sample` (tests/adapters cover the adapter)"
        if self.text.split("&&")[-1].split()[:3] == ["python", "-m", "pytest"]:
            return "the test suite itself: .ci/run runs it"
        for flag, module in NEEDS.items():
            if flag in self.text and importlib.util.find_spec(module) is None:
                return f"needs the optional package {module!r}, not installed here"
        return None


@dataclass(frozen=True)
class Block:
    """A fenced block of README.md or of a docs page."""

    number: int  # line number of the opening fence
    lang: str
    body: str
    path: str = "README.md"

    @property
    def where(self) -> str:
        """Return ``path:line`` of the opening fence."""
        return f"{self.path}:{self.number}"

    def lines(self) -> list[Line]:
        """Return the command lines of a bash block."""
        out = []
        for i, raw in enumerate(self.body.splitlines()):
            if not raw.strip():
                continue
            command, _, comment = raw.partition("  #") if "  #" in raw else (raw, "", "")
            out.append(Line(self.number + 1 + i, command.strip(), comment.strip(), self.path))
        return out


def blocks(lang: str) -> list[Block]:
    """Return the fenced blocks of one language of README.md and the docs pages, in that order."""
    return [Block(text[: m.start()].count("\n") + 1, m.group(1), m.group(2), path)
            for path, text in TEXTS.items() for m in FENCE.finditer(text) if m.group(1) == lang]


BASH = blocks("bash")
# a block repeated word for word (README.md's quick start is docs/index.md's) runs at its first place only
UNIQUE_BASH = [b for i, b in enumerate(BASH) if all(b.body != a.body for a in BASH[:i])]


def scenario_example() -> str:
    """Return the README's example scenario (the yaml block with ``schema: 1``)."""
    (body,) = [b.body for b in blocks("yaml") if b.body.startswith("schema: 1\n")]
    return body


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user's project folder: the reference verifier as mypkg.spec:verify and a file, the example scenario."""
    verifier = "from specaudit.verifiers.reference import verify  # stands for the user's verifier\n"
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "spec.py").write_text(verifier)
    (tmp_path / "path" / "to").mkdir(parents=True)
    (tmp_path / "path" / "to" / "verifier.py").write_text(verifier)
    (tmp_path / "my-scenario.yaml").write_text(scenario_example())
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # the user's package, installed
    for var in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)
    yield tmp_path
    for name in [n for n in sys.modules if n == "mypkg" or n.startswith("mypkg.")]:
        del sys.modules[name]


def argv(line: Line) -> list[list[str]]:
    """Split a line into its ``&&`` segments, optional ``[...]`` arguments dropped, smaller sizes set."""
    words = shlex.split(re.sub(r"\[--[^]]*\]", "", line.text))
    segments: list[list[str]] = [[]]
    for w in words:
        if w == "&&":
            segments.append([])
        else:
            segments[-1].append(w)
    last = segments[-1]
    flags = dict(SMALLER.get(line.text, {}))
    if last[:2] == ["specaudit", "run"] or last[:4] == ["python", "-m", "specaudit", "run"]:
        flags.setdefault("--samples", RUN_SAMPLES)
    for flag, value in flags.items():
        if flag in last:
            last[last.index(flag) + 1] = value
        else:
            last += [flag, value]
    return segments


def run_specaudit(words: list[str], line: Line) -> int:
    """Run one ``specaudit ...`` segment through the console script's entry point; return its exit code.

    A ``python -m specaudit ...`` segment runs as written, in a subprocess (the user's folder and
    this checkout importable).
    """
    if words[:3] == ["python", "-m", "specaudit"]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), str(ROOT)])}
        proc = subprocess.run([sys.executable, *words[1:]], env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == line.exit_code, (
            f"{line.where}: `{line.text}` exited {proc.returncode}, the docs say {line.exit_code}\n"
            f"{(proc.stdout + proc.stderr)[-3000:]}")
        return proc.returncode
    assert words[0] == "specaudit", f"{line.where}: {words[0]!r} is not a specaudit command"
    out_file = None
    if ">" in words:
        i = words.index(">")
        words, out_file = words[:i], words[i + 1]
    if any(w.startswith("sglang@") for w in words):  # Triton's interpreter is chosen before triton is imported: a fresh process
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1]), env.get("PYTHONPATH", "")])
        proc = subprocess.run([sys.executable, "-c", "from specaudit.cli import main; main()", *words[1:]],
                              capture_output=True, text=True, env=env, timeout=1200)
        code, stdout, output = proc.returncode, proc.stdout, proc.stdout + proc.stderr
    else:
        res = CliRunner().invoke(main, words[1:], catch_exceptions=False)
        code, stdout, output = res.exit_code, res.stdout, res.output
    if out_file is not None:
        Path(out_file).write_text(stdout)
    expected = line.exit_code
    assert code == expected, (
        f"{line.where}: `{line.text}` exited {code}, the docs say {expected}\n{output[-3000:]}")
    return code


def runnable(block: Block) -> list[Line]:
    """Return the lines of a block that run here with the block (not skipped, not slow)."""
    return [ln for ln in block.lines() if ln.skip_reason() is None and ln.text not in SLOW]


@pytest.mark.parametrize("block", [b for b in UNIQUE_BASH if runnable(b)], ids=lambda b: b.where)
def test_readme_bash_block_runs_and_exits_as_stated(block: Block, project: Path) -> None:
    for line in runnable(block):
        for words in argv(line):
            if words[:2] == ["pip", "install"]:
                continue  # checked by test_install_lines_install_this_project; this checkout is installed
            run_specaudit(words, line)
        check_artefacts(line, project)


@pytest.mark.slow
@pytest.mark.parametrize("line", [ln for b in UNIQUE_BASH for ln in b.lines()
                                  if ln.text in SLOW and ln.skip_reason() is None], ids=lambda ln: ln.where)
def test_readme_slow_line_runs_and_exits_as_stated(line: Line, project: Path) -> None:
    for words in argv(line):
        if words[:2] != ["pip", "install"]:
            run_specaudit(words, line)


def check_artefacts(line: Line, project: Path) -> None:
    """Check the files a line says it writes (a usage error writes none)."""
    words = line.text.split()
    if line.exit_code == ExitCode.USAGE_ERROR:
        for flag in ("--json", "--junit", "--html"):
            if flag in words:
                assert not (project / words[words.index(flag) + 1]).exists(), line.text
        return
    for flag in ("--json", "--junit"):
        if flag in words:
            assert (project / words[words.index(flag) + 1]).stat().st_size > 0, line.text
    if "--html" in words:
        i = words.index("--html")
        target = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("-") else "reports"
        path = project / target
        files = sorted(path.glob("*.html")) if path.is_dir() else [path]
        assert files and all(f.read_bytes()[:15].lower() == b"<!doctype html>" for f in files), (line.text, files)
    if "report r.json --html r2.html" in line.text:  # "re-render from the JSON alone (same bytes)"
        assert (project / "r2.html").read_bytes() == (project / "r.html").read_bytes()
    if "schema >" in line.text:
        assert "vocab" in json.loads((project / "scenario.schema.json").read_text())["properties"]


SKIPPED = [ln for b in UNIQUE_BASH for ln in b.lines() if ln.skip_reason() is not None]


@pytest.mark.parametrize("line", SKIPPED, ids=lambda ln: ln.where)
def test_readme_line_that_cannot_run_here(line: Line) -> None:
    pytest.skip(f"{line.where} `{line.text}`: {line.skip_reason()}")


def test_smaller_runs_name_readme_lines() -> None:
    """Every SMALLER and SLOW entry is a README line (a stale entry would silently run the full figure)."""
    lines = {ln.text for b in BASH for ln in b.lines()}
    assert set(SMALLER) | SLOW <= lines, (set(SMALLER) | SLOW) - lines


@pytest.mark.parametrize("line", [ln for b in BASH for ln in b.lines()], ids=lambda ln: ln.where)
def test_what_runs_is_the_readme_line_but_for_sizes(line: Line) -> None:
    """``argv`` changes nothing but --samples / --seeds / the selftest's -s of the README line."""
    sized = {"--samples", "--seeds"} | ({"-s"} if line.text in SMALLER and "-s" in SMALLER[line.text] else set())

    def strip(words: list[str]) -> list[str]:
        out, skip = [], False
        for w in words:
            if skip:
                skip = False
            elif w in sized:
                skip = True
            else:
                out.append(w)
        return out

    readme = shlex.split(re.sub(r"\[--[^]]*\]", "", line.text))
    assert strip([w for seg in argv(line) for w in [*seg, "&&"]][:-1]) == strip(readme)


def test_install_lines_install_this_project() -> None:
    """Every `pip install` of the README installs this checkout (or the distribution name, which is ours)."""
    installs = [(b.where, cmd) for b in blocks("bash") + blocks("yaml")
                for cmd in re.findall(r"pip install [^&#\n]*", b.body)]
    installs += [("inline", cmd) for cmd in re.findall(r"`(pip install [^`]*)`", TEXT)]
    assert len(installs) >= 4
    for number, cmd in installs:
        words = shlex.split(cmd)[2:]
        specs = [w for w in words if not w.startswith("-")]
        assert specs, cmd
        for spec in specs:
            this = re.fullmatch(r"\.(\[[\w,-]+\])?|\./[\w.-]+(\[[\w,-]+\])?", spec) or spec.startswith(DIST_NAME)
            assert this, f"{number}: `{cmd}` installs {spec!r}, not this project"
    assert not re.search(r"pip install '?specaudit[\[' ]", TEXT), "`pip install specaudit` is someone else's package"


def test_no_install_hint_names_the_public_specaudit() -> None:
    """The package's own messages never tell a user to install the unrelated `specaudit` of PyPI."""
    bad = re.compile(r"pip install '?specaudit(\[|'|\s|$)")
    hits = [f"{path.relative_to(ROOT)}:{i}" for path in sorted((ROOT / "specaudit").rglob("*.py"))
            for i, text in enumerate(path.read_text().splitlines(), 1) if bad.search(text)]
    assert not hits, hits


def test_distribution_name_is_ours() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DIST_NAME
    assert project["scripts"] == {"specaudit": "specaudit.cli:script"}  # the command keeps its name


def test_readme_python_api_example(project: Path) -> None:
    (block,) = [b for b in blocks("python") if "specaudit.run(" in b.body]
    namespace: dict[str, object] = {}
    exec(compile(block.body, block.where, "exec"), namespace)  # the README's own code
    codes, statuses = eval(block.body.strip().splitlines()[-1], namespace)
    assert codes == ExitCode.OK
    assert statuses == [("markov-v4", namespace["specaudit"].Status.PASSED)]  # type: ignore[attr-defined]


def test_readme_pytest_example(project: Path) -> None:
    """The pytest example runs as a test file of the user's project, through the plugin, and passes."""
    (block,) = [b for b in blocks("python") if "pytest.mark.specaudit" in b.body]
    (project / "test_verifier.py").write_text(block.body)
    env = {**os.environ, "PYTHONPATH": str(project)}  # mypkg, installed; specaudit's plugin loads by its entry point
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_verifier.py"],
                         cwd=project, capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "2 passed" in res.stdout


def test_readme_routed_example(project: Path) -> None:
    """The `routed` wrapper of the README runs a verifier that draws from numpy's global RNG."""
    import numpy as np

    from specaudit.verifiers.reference import verify as reference

    (block,) = [b for b in blocks("python") if "with routed(rng)" in b.body]

    def my_verifier(draft, q, p, num_draft):  # a verifier that takes no rng: numpy's global one
        return reference(draft, q, p, num_draft, np.random.default_rng(np.random.randint(2**31)))

    namespace: dict[str, object] = {"my_verifier": my_verifier}
    exec(compile(block.body, block.where, "exec"), namespace)
    rng = np.random.default_rng(5)
    q = rng.dirichlet(np.ones(4), size=(2, 3))
    p = rng.dirichlet(np.ones(4), size=(2, 4))
    draft = np.array([[0, 1, 2], [3, 2, 1]])
    args = (draft, q, p, np.array([3, 2]))
    first = namespace["verify"](*args, np.random.default_rng(1))  # type: ignore[operator]
    again = namespace["verify"](*args, np.random.default_rng(1))  # type: ignore[operator]
    assert all(np.array_equal(a, b) for a, b in zip(first, again))  # routed: the run's rng decides


def test_readme_batch1_example_is_tested_elsewhere() -> None:
    source = (ROOT / "tests" / "adapters" / "test_per_row.py").read_text()
    assert "test_readme_batch1_example_runs_and_passes" in source
    assert "**A batch-1 verifier**" in TEXT
