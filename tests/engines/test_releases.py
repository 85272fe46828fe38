"""``ENGINE@VERSION`` targets as inputs: fetching, the cache, and every way a release can be refused.

A made-up engine (``fakeengine``) is served from a folder of wheels built here (``pip download
--no-index --find-links``), so every path runs without the package index: a release that moved its
verifier, one with no wheel, a garbled cache entry, an offline index, a malformed or uncovered
version, an unknown engine. Each asserts the exit code and the message.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from specaudit import engines
from specaudit.engines import ENGINES, Engine, Layout
from specaudit.engines.fetch import MANIFEST, EngineError, IndexUnreachable, cached, fetch, release_folder
from specaudit.errors import ExitCode

#: A verifier file of the made-up engine: the reference rule, reading module-level ``np`` only.
GOOD = '''
import numpy as np


def verify(draft, q, p, num_draft, rng):
    b, k = draft.shape
    out = np.full((b, k + 1), -1, dtype=np.int64)
    n_out = np.zeros(b, dtype=np.int64)
    for r in range(b):
        n = 0
        while n < num_draft[r]:
            x = draft[r, n]
            if rng.random() * q[r, n, x] < p[r, n, x]:
                out[r, n] = x
                n += 1
                continue
            resid = np.maximum(p[r, n] - q[r, n], 0.0)
            out[r, n] = rng.choice(len(resid), p=resid / resid.sum())
            break
        else:
            out[r, n] = rng.choice(p.shape[2], p=p[r, n])
        n_out[r] = n + 1
    return out, n_out
'''

#: The same file reading a module-level helper it defines itself: cannot be compiled alone.
HELPER = "import numpy as np\n\nSCALE = 1.0\n\n\ndef verify(draft, q, p, num_draft, rng):\n    return SCALE\n"

FAKE = Engine(
    name="fakeengine",
    distribution="fakeengine",
    summary="a made-up engine served from a local folder of wheels",
    layouts=(
        Layout(">=1.0,<2.0", ("fakeengine/verify.py",), "fakeengine/verify.py:verify", adapter=None),
        Layout(">=2.0", ("fakeengine/v2/verify.py",), "fakeengine/v2/verify.py:verify", adapter=None),
    ),
)


def _wheel(folder: Path, version: str, files: dict[str, str]) -> None:
    name = f"fakeengine-{version}"
    with zipfile.ZipFile(folder / f"fakeengine-{version}-py3-none-any.whl", "w") as whl:
        for member, text in files.items():
            whl.writestr(member, text)
        whl.writestr(f"{name}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: fakeengine\nVersion: {version}\n")
        whl.writestr(f"{name}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{name}.dist-info/RECORD", "")


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Serve fakeengine 1.0 (good), 1.1 (helper), 2.0 (the file moved away) from a local folder, no index."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "1.0", {"fakeengine/verify.py": GOOD, "fakeengine/other.py": "x = 1\n"})
    _wheel(wheels, "1.1", {"fakeengine/verify.py": HELPER})
    _wheel(wheels, "2.0", {"fakeengine/verify.py": GOOD})  # 2.x layout wants fakeengine/v2/verify.py
    for key in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("SPECAUDIT_CACHE", str(tmp_path / "cache"))
    ENGINES.register("fakeengine", FAKE, replace=True)
    engines._LOADED.clear()
    yield wheels
    engines._LOADED.clear()
    ENGINES._entries.pop("fakeengine", None)


def test_a_release_is_fetched_once_its_files_only_and_runs(index: Path, cli) -> None:
    got = fetch(FAKE, "1.0")
    assert sorted(p.name for p in got.folder.rglob("*") if p.is_file()) == [MANIFEST, "verify.py"]  # only the layout's
    assert not list(got.folder.parent.glob("*.whl"))  # the wheel is not kept
    assert cached(FAKE, "1.0") == got
    res = cli("run", "fakeengine@1.0", "-s", "markov-v4", "--samples", "2000", "--no-power")
    assert res.exit_code == ExitCode.OK, res.output
    assert "[fakeengine 1.0 (fakeengine-1.0-py3-none-any.whl (sha256 " in res.output


def test_the_function_is_compiled_alone_from_the_release_file(index: Path) -> None:
    loaded = engines.load("fakeengine@1.0")
    assert loaded.verifier.__code__.co_filename == str(loaded.fetched.folder / "fakeengine/verify.py")
    out, n_out = loaded.verifier(np.zeros((1, 1), np.int64), np.full((1, 1, 2), 0.5), np.full((1, 2, 2), 0.5),
                                 np.array([1]), np.random.default_rng(0))
    assert n_out.tolist() == [2]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("fakeengine@2.0", r"its wheel fakeengine-2\.0-py3-none-any\.whl has no fakeengine/v2/verify\.py: this release "
                           r"moved its verifier away from the layout specaudit knows for >=2\.0"),
        ("fakeengine@1.5", r"fakeengine 1\.5 has no wheel on the package index \(no such release"),
        ("fakeengine@0.9", r"specaudit drives fakeengine releases >=1\.0,<2\.0, >=2\.0 only; 0\.9 is outside them"),
        ("fakeengine@one", r"'one' is not a version \(PEP 440\)"),
        ("fakeengine@", r"'' is not a version"),
        ("fakeengin@1.0", r"unknown engine 'fakeengin' \(did you mean 'fakeengine'\?\)"),
        ("fakeengine@1.1", r"verify in verify\.py reads module-level SCALE, which specaudit cannot bind"),
    ],
)
def test_a_release_that_cannot_be_driven_is_a_usage_error_naming_why(index: Path, cli, target: str, message: str) -> None:
    res = cli("run", target, "-s", "markov-v4", "--samples", "200")
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    assert __import__("re").search(message, " ".join(res.output.split())), res.output
    assert "Traceback" not in res.output


def test_offline_is_a_usage_error_naming_the_cache_and_the_prefetch_command(index: Path, cli,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIP_NO_INDEX")
    monkeypatch.delenv("PIP_FIND_LINKS")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on the discard port
    monkeypatch.setenv("PIP_RETRIES", "0")
    with pytest.raises(IndexUnreachable):
        fetch(FAKE, "1.0")
    res = cli("run", "fakeengine@1.0", "-s", "markov-v4")
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    text = " ".join(res.output.split())
    assert "the package index cannot be reached (offline?)" in text
    assert f"the cache folder is {release_folder(FAKE, '1.0')}" in text
    assert "specaudit engines --fetch fakeengine@1.0" in text


@pytest.mark.parametrize("damage", ["flip a byte of the file", "delete the file", "garble the manifest",
                                    "truncate the manifest", "manifest is a folder", "file is a link"])
def test_a_damaged_cache_entry_is_fetched_again(index: Path, damage: str) -> None:
    first = fetch(FAKE, "1.0")
    member = first.folder / "fakeengine/verify.py"
    manifest = first.folder / MANIFEST
    if damage == "flip a byte of the file":
        member.write_text(GOOD.replace("<", "<="))  # the classic boundary bug, planted in the cache
    elif damage == "delete the file":
        member.unlink()
    elif damage == "garble the manifest":
        manifest.write_bytes(b"\x00garbage")
    elif damage == "truncate the manifest":
        manifest.write_bytes(manifest.read_bytes()[:20])
    elif damage == "manifest is a folder":
        manifest.unlink()
        manifest.mkdir()
    else:
        member.unlink()
        member.symlink_to(Path("/etc/hostname"))
    assert cached(FAKE, "1.0") is None
    again = fetch(FAKE, "1.0")
    assert member.read_text() == GOOD and not member.is_symlink()
    assert json.loads(json.dumps(again.files)) == first.files


def test_a_cache_that_cannot_be_written_is_a_usage_error(index: Path, cli, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SPECAUDIT_CACHE", str(blocker / "cache"))
    res = cli("run", "fakeengine@1.0", "-s", "markov-v4")
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    assert "cannot write the cache folder" in res.output


def test_with_the_cache_off_a_release_is_fetched_into_a_temporary_folder(index: Path, cli,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECAUDIT_CACHE", "off")
    got = fetch(FAKE, "1.0")
    assert "specaudit-engines-" in str(got.folder)
    res = cli("run", "fakeengine@1.0", "-s", "markov-v4", "--samples", "500", "--no-power")
    assert res.exit_code == ExitCode.OK, res.output


def test_engines_lists_layouts_and_what_is_cached_and_fetch_prefetches(index: Path, cli) -> None:
    res = cli("engines", "--fetch", "fakeengine@1.0")
    assert res.exit_code == 0, res.output
    assert "fetched fakeengine@1.0: fakeengine-1.0-py3-none-any.whl" in res.output
    res = cli("engines")
    assert res.exit_code == 0, res.output
    assert ">=1.0,<2.0: fakeengine/verify.py:verify (canonical contract)" in res.output
    assert "cached: 1.0 (in " in res.output
    res = cli("engines", "--fetch", "fakeengine@2.0")
    assert res.exit_code == ExitCode.USAGE_ERROR and "moved its verifier" in res.output
    res = cli("engines", "--fetch", "not-a-spec")
    assert res.exit_code == ExitCode.USAGE_ERROR and "expected ENGINE@VERSION" in res.output


def test_a_file_target_with_an_at_sign_is_still_a_file(tmp_path: Path, cli) -> None:
    path = tmp_path / "v@1.py"
    path.write_text("from specaudit.verifiers.reference import verify\n")
    res = cli("run", f"{path}:verify", "-s", "markov-v4", "--samples", "500", "--no-power")
    assert res.exit_code == ExitCode.OK, res.output
    assert engines.split(f"{path}:verify") is None


def test_engine_error_is_a_usage_error() -> None:
    assert EngineError("x").exit_code == ExitCode.USAGE_ERROR


def test_engines_latest_reads_the_newest_release_and_says_whether_it_is_drivable(index: Path, cli,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # the newest local release is 2.0, whose verifier moved: "drivable: no" with the reason
    res = cli("engines", "--latest")
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if "latest:" in x and "moved" in x)
    assert "2.0, drivable: no (" in line and "has no fakeengine/v2/verify.py" in line
    (index / "fakeengine-2.0-py3-none-any.whl").unlink()
    _wheel(index, "2.1", {"fakeengine/v2/verify.py": GOOD})
    res = cli("engines", "--latest")
    assert "latest: 2.1, drivable: yes (layout >=2.0)" in res.output, res.output
