"""Sharded CI gates once: a shard job passes unless it errored; the merge never passes a SUSPECT."""

import json
from pathlib import Path

from click.testing import CliRunner

from specaudit.cli import main
from specaudit.errors import ExitCode

HOSTILE = Path(__file__).parents[1] / "verifiers" / "hostile" / "calls.py"

# seed 9 of markov-v4 at 15,001 sequences with --suspect-level 0.5: the first look is SUSPECT on two
# checks and the re-run (fresh seed, 4x samples) passes (found by running the unsharded run, seeds 0..11)
ARGS = ["-s", "markov-v4", "--samples", "15001", "--seed", "9", "--suspect-level", "0.5", "--no-power", "-q"]


def _shards(runner, tmp_path, target):
    paths = []
    for i in (0, 1):
        path = tmp_path / f"s{i}.json"
        res = runner.invoke(main, ["run", target, *ARGS, "--shard", f"{i}/2", "--json", str(path)])
        paths.append((res, path))
    return paths


def test_a_merge_with_a_suspect_exits_1_unless_rerun_settles_it_as_run_would(tmp_path):
    runner = CliRunner()
    whole = runner.invoke(main, ["run", "reference", *ARGS, "--json", str(tmp_path / "whole.json")])
    doc = json.loads((tmp_path / "whole.json").read_text())
    assert doc["scenarios"][0]["rerun"] is not None  # the unsharded run looked twice ...
    assert whole.exit_code == ExitCode.OK  # ... and passed on the second look
    shards = _shards(runner, tmp_path, "reference")
    for res, _ in shards:  # provisional verdicts: a shard job gates nothing but its own errors
        assert res.exit_code == ExitCode.OK, res.output
        assert "provisional" in res.output
    paths = [str(p) for _, p in shards]
    plain = runner.invoke(main, ["merge", *paths, "--json", str(tmp_path / "m.json")])
    assert plain.exit_code == ExitCode.CHECKS_FAILED, plain.output
    assert "suspect: re-run with more samples (markov-v4)" in plain.output
    assert json.loads((tmp_path / "m.json").read_text())["scenarios"][0]["rerun"] is None
    again = runner.invoke(main, ["merge", *paths, "--rerun", "reference", "--json", str(tmp_path / "r.json")])
    assert again.exit_code == whole.exit_code == ExitCode.OK, again.output
    merged = json.loads((tmp_path / "r.json").read_text())["scenarios"][0]
    first = doc["scenarios"][0]
    assert merged["rerun"]["seed"] == first["rerun"]["seed"] and merged["rerun"]["samples"] == first["rerun"]["samples"]
    assert [c["pvalue"] for c in merged["rerun"]["checks"]] == [c["pvalue"] for c in first["rerun"]["checks"]]
    # the re-run says what it will cost before it starts, as `run` does
    assert (f"specaudit: markov-v4 is SUSPECT: re-running it on a fresh seed with {first['rerun']['samples']:,} "
            "sequences (about ") in again.output


def test_a_shard_job_fails_only_when_it_errored(tmp_path):
    # negative control: a mutant makes shards that FAIL provisionally (exit 0) and a merge that fails (exit 1)
    runner = CliRunner()
    shards = _shards(runner, tmp_path, "mutant:resample_from_p")
    assert [res.exit_code for res, _ in shards] == [ExitCode.OK, ExitCode.OK]
    merged = runner.invoke(main, ["merge", *[str(p) for _, p in shards]])
    assert merged.exit_code == ExitCode.CHECKS_FAILED, merged.output
    # an ERROR in a shard (the verifier crashed) fails that job at once
    crashed = runner.invoke(main, ["run", f"{HOSTILE}:exit1", "-s", "peaked-v8", "--samples", "2000",
                                   "--shard", "0/2", "--no-power", "-q"])
    assert crashed.exit_code == ExitCode.CHECKS_FAILED, crashed.output


def test_merge_rerun_target_is_checked_before_the_merge(tmp_path):
    runner = CliRunner()
    small = ["-s", "markov-v4", "--samples", "2000", "--seed", "1", "--no-power", "-q"]
    paths = []
    for i in (0, 1):
        paths.append(str(tmp_path / f"s{i}.json"))
        assert runner.invoke(main, ["run", "reference", *small, "--shard", f"{i}/2", "--json", paths[-1]]).exit_code == 0
    for target, message in (
        ("no.such.module:verify", "module 'no.such.module' not found"),
        (str(tmp_path / "absent.py") + ":verify", "absent.py' not found"),
        ("mutant:no_such_bug", "unknown mutant 'no_such_bug'"),
        ("no-colon", "must look like 'package.module:function'"),
    ):
        out = tmp_path / "m.json"
        res = runner.invoke(main, ["merge", *paths, "--rerun", target, "--json", str(out)])
        # a typo is a usage error at once, even though no scenario is SUSPECT (nothing would load it)
        assert res.exit_code == ExitCode.USAGE_ERROR, (target, res.output)
        assert message in res.output and not out.exists(), (target, res.output)
    ok = runner.invoke(main, ["merge", *paths, "--rerun", "reference"])
    assert ok.exit_code == ExitCode.OK, ok.output


FLAKY = '''
import os

from specaudit.verifiers.reference import verify as reference


def verify(draft, q, p, num_draft, rng):
    # raises once per marker file on a call whose rows all have no drafts (the corner-zero-drafts probe)
    if len(num_draft) and not num_draft.any() and not os.path.exists(os.environ["FLAKY_MARKER"]):
        open(os.environ["FLAKY_MARKER"], "w").close()
        raise RuntimeError("first zero-draft call failed")
    return reference(draft, q, p, num_draft, rng)
'''


def test_a_probe_error_in_one_shard_fails_the_merge(tmp_path, monkeypatch):
    # the merge kept shard 0's probes: shard 1's probe error vanished and the gate passed
    target = tmp_path / "flaky.py"
    target.write_text(FLAKY)
    marker = tmp_path / "marker"
    monkeypatch.setenv("FLAKY_MARKER", str(marker))
    runner = CliRunner()
    args = ["run", f"{target}:verify", "-s", "markov-v4", "--samples", "30000", "--seed", "1", "--no-power", "-q"]
    marker.touch()  # shard 0: never raises
    zero = runner.invoke(main, [*args, "--shard", "0/2", "--json", str(tmp_path / "s0.json")])
    marker.unlink()  # shard 1: its first zero-draft probe call raises
    one = runner.invoke(main, [*args, "--shard", "1/2", "--json", str(tmp_path / "s1.json")])
    assert zero.exit_code == ExitCode.OK, zero.output
    assert marker.exists() and one.exit_code == ExitCode.CHECKS_FAILED, one.output
    merged = runner.invoke(main, ["merge", str(tmp_path / "s0.json"), str(tmp_path / "s1.json")])
    assert merged.exit_code == ExitCode.CHECKS_FAILED, merged.output
    assert "ERROR (1 error)" in merged.output and "determinism" in merged.output, merged.output


def test_a_shard_holding_values_no_run_writes_is_a_usage_error_naming_the_files(tmp_path):
    # the merge reads each shard's tallies, scenario and settings itself: a hand-edited one ended it with exit 3
    runner = CliRunner()
    paths = [path for _, path in _shards(runner, tmp_path, "reference")]
    good = json.loads(paths[0].read_text())
    for edit in (lambda d: d["scenarios"][0]["info"].__setitem__("tally", "x"),
                 lambda d: d["scenarios"][0]["info"]["scenario"].__setitem__("vocab", "x"),
                 lambda d: d["scenarios"][0].__setitem__("seconds", "inf")):
        doc = json.loads(json.dumps(good))
        edit(doc)
        paths[0].write_text(json.dumps(doc))
        res = runner.invoke(main, ["merge", *map(str, paths)])
        assert res.exit_code == ExitCode.USAGE_ERROR, res.output
        assert "the shards cannot be merged: a value no specaudit run writes" in res.output and "s0.json" in res.output
