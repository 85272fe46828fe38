"""Input hygiene: every malformed input is a usage error (exit 4) naming the file and the reason.

Each case goes through the CLI (click's CliRunner) and asserts the exit code and the message;
each group has a positive control beside it (a well-formed input of the same kind is accepted).
"""

import json
import os
import stat

import numpy as np
import pytest

from specaudit.analysis import mutant_laws
from specaudit.errors import ExitCode
from specaudit.results import cache
from specaudit.scenarios.catalogue import shipped
from specaudit.scenarios.loading import MAX_SCENARIO_BYTES

REFERENCE = "specaudit.verifiers.reference:verify"

SCENARIO = """\
schema: 1
name: {name}
vocab: {vocab}
k: 2
length: 2
samples: 2000
target:
  kind: dirichlet
  seed: 1
draft:
  kind: dirichlet
  seed: 2
"""


def _scenario(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


# --- scenario files ----------------------------------------------------------------------------


def test_duplicate_yaml_key_names_the_key_and_both_lines(tmp_path, cli):
    good = _scenario(tmp_path, SCENARIO.format(name="dup", vocab=4), "good.yaml")
    assert cli("validate", good).exit_code == ExitCode.OK  # positive control
    bad = _scenario(tmp_path, SCENARIO.format(name="dup", vocab=4) + "vocab: 8\n")
    for args in (("validate", bad), ("run", REFERENCE, "-s", bad)):
        res = cli(*args)
        assert res.exit_code == ExitCode.USAGE_ERROR, res.output
        assert f"{bad}:13: vocab: duplicate key (first given at line 3)" in res.output
    nested = _scenario(tmp_path, SCENARIO.format(name="dup", vocab=4).replace("  seed: 2\n", "  seed: 2\n  seed: 3\n"))
    res = cli("validate", nested)
    assert res.exit_code == ExitCode.USAGE_ERROR and f"{nested}:13: seed: duplicate key (first given at line 12)" in res.output


def test_two_scenarios_of_one_name_in_a_run_are_refused(tmp_path, cli):
    mine = _scenario(tmp_path, SCENARIO.format(name="markov-v4", vocab=4), "mine.yaml")
    res = cli("run", REFERENCE, "-s", "markov-v4", "-s", mine)
    assert res.exit_code == ExitCode.USAGE_ERROR
    assert f"{mine}:2: name: scenario name 'markov-v4' is already used in this run by" in res.output
    assert "rename one (e.g. name: markov-v4-2)" in res.output
    # the same scenario asked twice (by name, and in a tag) is one scenario, not a clash
    res = cli("plan", "-s", "markov-v4", "-s", "markov-v4", "--samples", "1000")
    assert res.exit_code == ExitCode.OK, res.output
    assert res.output.count("markov-v4") == 1


def test_scenario_file_that_is_not_utf8(tmp_path, cli):
    bad = _scenario(tmp_path, "schema: 1\nname: caf\xe9\n".encode("latin-1"))
    for args in (("validate", bad), ("run", REFERENCE, "-s", bad)):
        res = cli(*args)
        assert res.exit_code == ExitCode.USAGE_ERROR
        assert f"{bad}:2: not UTF-8 text (byte 0xe9 at offset 19); save the scenario file as UTF-8" in res.output


def test_oversized_scenario_file_is_refused_before_parsing(tmp_path, cli):
    bad = tmp_path / "huge.yaml"
    with bad.open("wb") as fh:  # 50 MB, sparse: the guard must refuse it from its size, never parse it
        fh.write(SCENARIO.format(name="huge", vocab=4).encode())
        fh.truncate(50 << 20)
    res = cli("validate", bad)
    assert res.exit_code == ExitCode.USAGE_ERROR
    assert f"{bad}: scenario file larger than {MAX_SCENARIO_BYTES >> 20} MiB (the limit)" in res.output
    assert "kind: dirichlet, logits or zipf" in res.output
    fits = _scenario(tmp_path, SCENARIO.format(name="fits", vocab=4) + "#" * 1000 + "\n", "fits.yaml")
    assert cli("validate", fits).exit_code == ExitCode.OK  # positive control: a comment does not trip it


# --- memory preflight ----------------------------------------------------------------------------


def test_vocabulary_too_large_for_tables_is_refused_by_validate_and_run(tmp_path, cli):
    big = _scenario(tmp_path, SCENARIO.format(name="big", vocab=65536))
    for args in (("validate", big), ("run", REFERENCE, "-s", big)):
        res = cli(*args)
        assert res.exit_code == ExitCode.USAGE_ERROR, res.output
        # tables: 6 arrays of 65,536^2 x 8 bytes (192 GiB) + 2 while drawing (64 GiB) = 256 GiB
        assert f"{big}:3: vocab: needs " in res.output and "GiB for dirichlet chains at V = 65,536" in res.output
        assert "the chain tables (6 arrays of 65,536 x 65,536 x 8 bytes): 256.0 GiB" in res.output
        assert "use `kind: zipf` for target and draft" in res.output
    zipf = _scenario(tmp_path, SCENARIO.format(name="big", vocab=65536).replace("dirichlet", "zipf"), "zipf.yaml")
    assert cli("validate", zipf).exit_code == ExitCode.OK  # the fix the message names passes


def test_memory_figures_follow_the_allocation_sizes():
    from specaudit.engine.tasks import preflight
    from specaudit.errors import ScenarioError
    from specaudit.scenarios.loading import parse_scenario

    loaded = parse_scenario(SCENARIO.format(name="m", vocab=48))
    needs = dict((what.split(" (")[0], n) for n, what in loaded.spec.memory_needs())
    joint = 48 * 48  # joint states of two first-order chains
    assert needs["the exact round law"] == (2 + 7) * 8 * joint**2 + 4 * 8 * joint * 48
    assert needs["the chain tables"] == 2 * 3 * 8 * 48 * 48 + 2 * 8 * 48 * 48
    preflight(loaded, limit=sum(needs.values()))  # exactly enough: accepted
    with pytest.raises(ScenarioError, match=r"<string>:3: vocab: needs 0\.4 GiB .* vocab <= 4[0-9] with these kinds"):
        preflight(loaded, limit=sum(needs.values()) - 1)


# --- results files -----------------------------------------------------------------------------

RESULTS = [
    (b"not json\n", "bad.json: Expecting value at line 1 column 1: not JSON"),
    (b'{"schema_version": 1, "tool"', "bad.json: Expecting ':' delimiter at line 1 column 29: the JSON ends early (a truncated file?)"),
    (b"\xff\xfe{}", "bad.json: not UTF-8 text (byte 0xff at offset 0)"),
    (b'{"a": 1}', "bad.json: not a specaudit results file (schema_version None; this specaudit reads 1 and 2)"),
    (b"[1, 2]", "bad.json: not a specaudit results file (expected a JSON object, got a list)"),
    (b'{"schema_version": 1, "target": "t", "alpha": "x", "scenarios": []}',
     "bad.json: not a specaudit results file: alpha: expected a number, got a string 'x'"),
    (b"[" * 100_000, "bad.json: JSON nested too deeply"),
]


@pytest.mark.parametrize(("content", "message"), RESULTS)
@pytest.mark.parametrize("command", ["report", "merge"])
def test_malformed_results_file(tmp_path, cli, command, content, message):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    res = cli(command, bad)
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    where = "cannot read results file " if "schema_version" not in message and "expected" not in message else ""
    assert f"specaudit: error: {where}{tmp_path}/{message}" in res.output


def test_results_field_of_the_wrong_type(tmp_path, cli):
    out = tmp_path / "good.json"
    res = cli("run", REFERENCE, "-s", "markov-v4", "--samples", "2000", "--no-power", "-q", "--json", out)
    assert res.exit_code == ExitCode.OK, res.output
    assert cli("report", out).exit_code == ExitCode.OK  # positive control
    doc = json.loads(out.read_text())
    doc["scenarios"][0]["checks"][0]["pvalue"] = "small"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    res = cli("report", bad)
    assert res.exit_code == ExitCode.USAGE_ERROR
    assert "scenarios[0].checks[0].pvalue: expected a number or null, got a string 'small'" in res.output


# --- option values -----------------------------------------------------------------------------

OPTIONS = [
    (("--seed", "-1"), "Invalid value for '--seed': -1; allowed: an integer 0 .. 18,446,744,073,709,551,615"),
    (("--samples", "1e14"), "Invalid value for '--samples': 1e14; allowed: an integer 1 .. 1,000,000,000 (1e9), e.g. 200000"),
    (("--samples", "0"), "Invalid value for '--samples': 0; allowed: an integer 1 .. 1,000,000,000"),
    (("--samples", "2.5e3x"), "'2.5e3x' is not a whole number; allowed: an integer 1 .. 1,000,000,000"),
    (("--max-memory", "inf"), "Invalid value for '--max-memory': inf; allowed: a number 0 < x <= 1,048,576"),
    (("--timeout", "nan"), "Invalid value for '--timeout': nan; allowed: a number 0 <= x <= 604,800"),
    (("--jobs", "100000"), "100000; allowed: an integer 1 .. 4,096"),
    (("--import-timeout", "-1"), "Invalid value for '--import-timeout': -1; allowed: a number 0 <= x <= 604,800"),
    (("--ray-address", "127.0.0.1:1", "--backend", "ray", "--timeout", "abc"),
     "Invalid value for '--timeout': abc; allowed: a number 0 <= x <= 604,800"),
]


@pytest.mark.parametrize(("args", "message"), OPTIONS)
def test_absurd_option_values_state_the_range(cli, args, message):
    res = cli("run", REFERENCE, "-s", "markov-v4", *args)
    assert res.exit_code == ExitCode.USAGE_ERROR
    assert message in " ".join(res.output.split())


def test_plan_and_selftest_options_state_the_range(cli):
    res = cli("plan", "-s", "markov-v4", "--tv", "2")
    assert res.exit_code == ExitCode.USAGE_ERROR and "'--tv': 2; allowed: a number 0 < x <= 1" in res.output
    res = cli("selftest", "-s", "markov-v4", "--seeds", "0")
    assert res.exit_code == ExitCode.USAGE_ERROR and "'--seeds': 0; allowed: an integer 10 .. 1,000,000" in res.output
    # positive control: numbers written as 2e3 or 2_000 are whole numbers
    assert cli("plan", "-s", "markov-v4", "--samples", "2e3").exit_code == ExitCode.OK
    assert cli("plan", "-s", "markov-v4", "--samples", "2_000").exit_code == ExitCode.OK


def test_api_seed_and_samples_are_checked():
    import specaudit

    with pytest.raises(specaudit.UsageError, match=r"seed = -1; allowed: an integer 0 \.\. 2\*\*64 - 1"):
        specaudit.run(REFERENCE, "markov-v4", seed=-1)
    with pytest.raises(specaudit.UsageError, match=r"samples = 100000000000000; allowed: >= 1 and <= 1,000,000,000"):
        specaudit.run(REFERENCE, "markov-v4", samples=10**14)


# --- TARGET ------------------------------------------------------------------------------------


def test_target_path_with_a_name_longer_than_name_max(tmp_path, cli):
    target = f"{tmp_path}/{'a' * 300}.py:verify"
    res = cli("run", target, "-s", "markov-v4")
    assert res.exit_code == ExitCode.USAGE_ERROR
    assert "a name in the path is 303 bytes long; allowed: at most 255 (NAME_MAX) per name" in res.output


def test_target_that_is_a_folder_or_not_python(tmp_path, cli, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "verify.txt").write_text("def verify(*a):\n    pass\n")
    monkeypatch.chdir(tmp_path)
    cases = [
        ("pkg/:verify", "TARGET file 'pkg/' is a folder; name a Python file in it (path/to/file.py:attr)"),
        ("pkg:verify", "module 'pkg' not found (is it installed, or on PYTHONPATH?); for a file write path/to/file.py:attr; "
                       "'pkg' here is a folder"),
        ("./verify.txt:verify", "TARGET file './verify.txt' is not a Python file (.py); write path/to/file.py:attr"),
        ("verify.txt:verify", "'verify.txt' here is a file but not a Python file (.py)"),
    ]
    for target, message in cases:
        res = cli("run", target, "-s", "markov-v4")
        assert res.exit_code == ExitCode.USAGE_ERROR, (target, res.output)
        assert message in res.output, (target, res.output)


# --- the law cache -----------------------------------------------------------------------------


def _cache_files(spec, cells):
    return [mutant_laws._cache_file(spec, name, mutant_laws.LAW_SAMPLES, mutant_laws.LAW_SEED)
            for name in ("shared_uniform", "count_after_reject", "bonus_from_last")]


def test_bad_cache_files_are_ignored_and_recomputed(tmp_path, cli, monkeypatch):
    spec = next(s.spec for s in shipped() if s.name == "markov-v4")
    cells = spec.joint_cells
    monkeypatch.setenv("SPECAUDIT_CACHE", str(tmp_path / "cache"))  # a cache of this test's own
    monkeypatch.setattr(mutant_laws, "_LAWS", {})  # laws an earlier test of this process computed stay in memory
    paths = _cache_files(spec, cells)
    paths[0].parent.mkdir(parents=True)
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1, dtype=np.int64))
    header["shape"] = (10**11,)  # claims 800 GB of counts
    claim = paths[0]
    with claim.open("wb") as fh:
        np.lib.format.write_array_header_1_0(fh, header)
        fh.write(b"\0" * 64)
    paths[1].write_bytes(b"\x93NUMPY")  # truncated in the magic string
    res = cli("run", REFERENCE, "-s", "markov-v4", "--samples", "2000", "--seed", "1")
    assert res.exit_code == ExitCode.OK, res.output
    assert res.output.count("specaudit: warning: ignored cache file") == 2, res.output
    assert f"ignored cache file {claim} (header claims int64 of shape (100000000000,); expected int64 of shape ({cells},))" in res.output
    for path in paths:  # recomputed and rewritten whole: read back with their checksum
        counts = mutant_laws._load_array(path, cells)
        assert counts is not None and counts.sum() == mutant_laws.LAW_SAMPLES
    data = bytearray(paths[2].read_bytes())
    data[-cache.TRAILER_BYTES - 1] ^= 1  # one flipped bit in the last count: the checksum catches it
    paths[2].write_bytes(bytes(data))
    assert mutant_laws._load_array(paths[2], cells) is None


# --- output files, the numpy fallback ----------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_report_files_honour_the_umask(tmp_path, cli, umask):
    out = tmp_path / "r.json"
    old = os.umask(umask)
    try:
        assert cli("run", REFERENCE, "-s", "markov-v4", "--samples", "2000", "--no-power", "-q",
                   "--json", out).exit_code == ExitCode.OK
        assert cli("report", out, "--html", tmp_path / "r.html", "--junit", tmp_path / "r.xml").exit_code == ExitCode.OK
    finally:
        os.umask(old)
    for name in ("r.json", "r.html", "r.xml"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask, name


def test_numpy_fallback_is_announced_once(cli, monkeypatch):
    from specaudit.simulate import kernels

    args = ("run", REFERENCE, "-s", "markov-v4", "--samples", "2000", "--no-power", "-q")
    if kernels.load() is not None:  # positive control where the C kernels are built: nothing said
        res = cli(*args)
        assert res.exit_code == ExitCode.OK and "numpy simulator" not in res.output
    monkeypatch.setattr(kernels, "load", lambda: None)
    res = cli(*args)
    assert res.exit_code == ExitCode.OK, res.output
    assert res.output.count("the numpy simulator runs instead (same results, slower)") == 1
    assert "the C extension is not built (no C compiler at install time)" in res.output


QUICK = ("-s", "markov-v4", "--samples", "2000", "--no-power")


def test_a_report_to_a_device_is_written_through_never_replaced(cli):
    # os.replace onto /dev/null put a regular file in its place (run as root: the system's /dev/null)
    res = cli("run", "reference", *QUICK, "--html", "/dev/null", "--junit", "/dev/null")
    assert res.exit_code == ExitCode.OK, res.output
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    if os.path.exists("/dev/full"):  # any other device: a usage error before the run, the device kept
        res = cli("run", "reference", *QUICK, "--json", "/dev/full")
        assert res.exit_code == ExitCode.USAGE_ERROR
        assert "--json /dev/full: not a regular file (a character device)" in res.output
        assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_an_html_folder_holding_a_folder_of_the_reports_name_is_a_usage_error(tmp_path, cli):
    (tmp_path / "specaudit-reference.html").mkdir()  # the file --html FOLDER/ picks for target "reference"
    res = cli("run", "reference", *QUICK, "--html", f"{tmp_path}/")
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output  # exit 3 (IsADirectoryError) before
    assert "specaudit-reference.html: is a folder; give a file name" in res.output  # before the run, as any report path


def test_a_baseline_path_with_an_escape_sequence_is_shown_escaped(tmp_path, cli):
    first = tmp_path / "r.json"
    assert cli("run", "reference", *QUICK, "--json", str(first)).exit_code == ExitCode.OK
    base = tmp_path / "b\x1b[2J.json"
    base.write_bytes(first.read_bytes())
    res = cli("report", str(first), "--baseline", str(base))
    assert res.exit_code == ExitCode.OK, res.output
    assert "\x1b" not in res.output and "against baseline" in res.output
    assert r"b\x1b[2J.json" in "".join(res.output.split())  # the title may wrap a long path
