"""Blocks of sequences -> --jobs (identical results), --shard + merge (exact sums), early stop, Ray."""

import dataclasses
import json

import numpy as np
import pytest
from click.testing import CliRunner
from scenario_texts import ZIPF_V64 as ZIPF
from scipy import stats as sps

import specaudit
from specaudit.chains.lazy import ZipfChain
from specaudit.cli import main
from specaudit.engine.settings import RunSettings
from specaudit.engine.tasks import resolve_scenarios
from specaudit.errors import ExitCode, UsageError
from specaudit.results import Status
from specaudit.simulate import blocks
from specaudit.stats import sequential

#: One scenario per sink kind: joint counts, greedy matches, a draft tree, prefix + PIT counts.
MIXED = ["markov-v4", "sampling-greedy", "ragged-v4"]


def _key(result):
    """Every number a run decided on: statistics, raw and adjusted p-values, verdicts, observed counts."""
    return [
        (s.name, s.samples, c.name, c.statistic, c.pvalue, c.adjusted_pvalue, c.status, c.data.get("observed"))
        for s in result.scenarios for c in s.checks
    ]


def test_blocks_cover_the_samples_and_have_independent_seeds():
    rng = np.random.default_rng(20)
    n = int(rng.integers(1, 10 * blocks.BLOCK))
    sizes = blocks.block_sizes(n)
    assert sum(sizes) == n and all(0 < s <= blocks.BLOCK for s in sizes) and sizes[:-1] == [blocks.BLOCK] * (len(sizes) - 1)
    states = {tuple(ss.generate_state(2)) for b in range(4) for ss in blocks.block_seeds(7, b)}
    assert len(states) == 12  # harness, verifier and PIT streams of 4 blocks: all distinct


def test_jobs_two_equals_jobs_one_across_blocks(tmp_path):
    rng = np.random.default_rng(21)
    seed = int(rng.integers(1000))
    zipf = tmp_path / "zipf.yaml"
    zipf.write_text(ZIPF)
    kw = dict(seed=seed, samples=2 * blocks.BLOCK + 500, diagnose=False, power=False, suspect_level=0.0)
    one = specaudit.run("specaudit.verifiers.reference:verify", MIXED, jobs=1, **kw)
    two = specaudit.run("specaudit.verifiers.reference:verify", MIXED, jobs=2, **kw)
    assert _key(one) == _key(two) and len(_key(one)) >= 9
    assert all(s.samples == 2 * blocks.BLOCK + 500 for s in one.scenarios)
    lazy = dict(kw, samples=blocks.BLOCK + 300)
    a = specaudit.run("specaudit.verifiers.reference:verify", [str(zipf)], jobs=1, **lazy)
    b = specaudit.run("specaudit.verifiers.reference:verify", [str(zipf)], jobs=2, **lazy)
    lazy_checks = [c.name for c in a.scenarios[0].checks]
    assert _key(a) == _key(b) and lazy_checks[:2] == ["per-prefix", "pit"]
    assert "adversarial-uniforms" in lazy_checks  # a lazy scenario is probed too (fewer rows per probe)
    tree = dict(kw, samples=blocks.BLOCK + 200)  # draft trees: the tree simulator, blocked alike
    t1 = specaudit.run("specaudit.verifiers.tree:verify", ["tree-iid-v4"], jobs=1, **tree)
    t2 = specaudit.run("specaudit.verifiers.tree:verify", ["tree-iid-v4"], jobs=2, **tree)
    assert _key(t1) == _key(t2) and t1.exit_code() == ExitCode.OK


PID_LOGGER = """
import os
from specaudit.verifiers.reference import verify as _reference

def verify(draft, q, p, num_draft, rng):
    with open(os.environ["PID_LOG"], "a") as log:
        log.write(f"{os.getpid()} {p.shape[-1]}\\n")
    return _reference(draft, q, p, num_draft, rng)
"""


def test_jobs_two_runs_every_scenarios_blocks_on_one_pool(tmp_path, monkeypatch):
    # a pool per scenario left a core idle at each scenario's end (1.45x for --jobs 2 on the default suite); the
    # supervised child now runs one pool for all: the same two workers (and the child, for the probes) call the
    # verifier in every scenario, with the same results as --jobs 1 (test above)
    target = tmp_path / "logged.py"
    target.write_text(PID_LOGGER)
    log = tmp_path / "pids.txt"
    monkeypatch.setenv("PID_LOG", str(log))
    result = specaudit.run(f"{target}:verify", ["markov-v4", "peaked-v8", "seed-context-free"], jobs=2, seed=1,
                           samples=3 * blocks.BLOCK, diagnose=False, power=False, suspect_level=0.0)
    assert result.exit_code() == ExitCode.OK
    calls = [line.split() for line in log.read_text().splitlines()]
    assert {v for _, v in calls} == {"4", "8"}
    assert len({pid for pid, _ in calls}) <= 3, sorted({pid for pid, _ in calls})


def test_two_shards_merge_to_the_unsharded_run(tmp_path):
    zipf = tmp_path / "zipf.yaml"
    zipf.write_text(ZIPF)
    args = ["run", "specaudit.verifiers.zoo.chain:resample_from_p", "-s", "markov-v4", "-s", "sampling-greedy", "-s", "corners",
            "-s", str(zipf), "--samples", str(2 * blocks.BLOCK + 700), "--seed", "5", "-q"]
    runner = CliRunner()
    whole = runner.invoke(main, [*args, "--json", str(tmp_path / "whole.json")])
    assert whole.exit_code == ExitCode.CHECKS_FAILED, whole.output  # negative control: the mutant is caught
    for i in (1, 0):
        shard = runner.invoke(main, [*args, "--shard", f"{i}/2", "--json", str(tmp_path / f"s{i}.json")])
        assert shard.exit_code in (ExitCode.OK, ExitCode.CHECKS_FAILED), shard.output
    merged = runner.invoke(main, ["merge", str(tmp_path / "s0.json"), str(tmp_path / "s1.json"),
                                  "--json", str(tmp_path / "merged.json"), "-q"])
    assert merged.exit_code == whole.exit_code, merged.output
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("whole.json", "merged.json"))
    s0 = json.loads((tmp_path / "s0.json").read_text())["scenarios"][0]
    assert s0["info"]["shard"]["blocks"] == [0, 2] and s0["samples"] == blocks.BLOCK + 700  # shard 0 holds blocks 0, 2
    assert len(a["scenarios"]) == len(b["scenarios"]) == 4 and a["status"] == b["status"] == "failed"
    for x, y in zip(a["scenarios"], b["scenarios"]):
        assert (x["name"], x["samples"], x["error"]) == (y["name"], y["samples"], y["error"])
        for c, d in zip(x["checks"], y["checks"], strict=True):
            assert (c["name"], c["statistic"], c["pvalue"], c["adjusted_pvalue"], c["status"]) == \
                   (d["name"], d["statistic"], d["pvalue"], d["adjusted_pvalue"], d["status"])
            assert c["data"].get("observed") == d["data"].get("observed")  # the joint counts themselves
    assert b["scenarios"][0]["checks"][0]["data"]["n"] == 2 * blocks.BLOCK + 700


def test_merge_refuses_incomplete_or_mixed_shards(tmp_path):
    runner = CliRunner()
    base = ["run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "--samples", "2000", "-q", "--no-power"]
    for name, extra in (("a", ["--shard", "0/2"]), ("b", ["--shard", "0/3"]), ("c", [])):
        assert runner.invoke(main, [*base, *extra, "--json", str(tmp_path / f"{name}.json")]).exit_code == ExitCode.OK
    missing = runner.invoke(main, ["merge", str(tmp_path / "a.json")])
    assert missing.exit_code == ExitCode.USAGE_ERROR and "missing shard(s) 1/2" in missing.output
    mixed = runner.invoke(main, ["merge", str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert mixed.exit_code == ExitCode.USAGE_ERROR and "different splits" in mixed.output
    twice = runner.invoke(main, ["merge", str(tmp_path / "a.json"), str(tmp_path / "a.json")])
    assert twice.exit_code == ExitCode.USAGE_ERROR and "given twice" in twice.output
    plain = runner.invoke(main, ["merge", str(tmp_path / "c.json")])
    assert plain.exit_code == ExitCode.USAGE_ERROR and "not a shard" in plain.output
    both = runner.invoke(main, [*base, "--shard", "0/2", "--early-stop"])
    assert both.exit_code == ExitCode.USAGE_ERROR and "--shard" in both.output
    bad = runner.invoke(main, [*base, "--shard", "2/2"])
    assert bad.exit_code == ExitCode.USAGE_ERROR and "0 <= i < n" in bad.output


def test_spending_schedule_sums_to_one_and_keeps_half_for_the_last_look():
    assert sequential.look_schedule(20) == [1, 2, 4, 8, 16, 20] and sequential.look_schedule(1) == [1]
    for looks in (1, 2, 6):
        w = sequential.spending(looks)
        assert len(w) == looks and sum(w) == pytest.approx(1.0) and w[-1] >= 0.5


def test_early_stop_stops_a_broken_verifier_and_runs_a_correct_one_to_n():
    kw = dict(seed=3, diagnose=False, power=False, early_stop=True)
    bad = specaudit.run("specaudit.verifiers.zoo.chain:count_after_reject", ["markov-v4"], **kw)
    s = bad.scenarios[0]
    assert bad.exit_code() == ExitCode.CHECKS_FAILED and s.info["early_stop"]["stopped"]
    assert s.info["early_stop"]["sequences"] <= 2 * blocks.BLOCK < s.samples
    assert s.check("joint-law").status is Status.FAILED
    assert s.check("joint-law").pvalue <= s.info["early_stop"]["level"]  # decisive: Holm rejects it whatever else
    good = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4"], samples=3 * blocks.BLOCK, **kw)
    g = good.scenarios[0]
    assert good.exit_code() == ExitCode.OK and not g.info["early_stop"]["stopped"]
    assert g.info["early_stop"]["looks"] == [blocks.BLOCK, 2 * blocks.BLOCK, 3 * blocks.BLOCK]
    seq = g.check("joint-law").data["sequential"]
    assert g.check("joint-law").pvalue == pytest.approx(min(1.0, min(p / w for p, w in zip(seq["pvalues"], seq["weights"]))))


def test_early_stop_level_bounds_the_holm_family_with_exact_scenarios():
    # the stop is decisive only if alpha / M <= alpha / m: exact-mode probes add p-values to m too
    from specaudit.analysis import power

    corners = resolve_scenarios(["corners"])[0].spec
    loaded = [dataclasses.replace(corners, name=f"corners-{i}") for i in range(8)] + resolve_scenarios(["markov-v4"])
    alpha = 1e-3
    r = specaudit.run("specaudit.verifiers.reference:verify", loaded, samples=2000, seed=1, diagnose=False, power=False,
                      suspect_level=0.0)
    family = power.family_size(r.scenarios)
    assert family > 8  # one simulated scenario's checks plus every probe's p-value
    assert RunSettings(alpha=alpha, early_stop=True).stop_level(len(loaded)) <= alpha / family


def test_early_stop_keeps_family_wise_alpha_under_the_null(monkeypatch):
    # small blocks so that N = 2000 has five looks (125, 250, 500, 1000, 2000)
    monkeypatch.setattr(blocks, "BLOCK", 125)
    alpha, runs = 0.05, 150
    rejected, stopped_early, pseq = 0, 0, []
    for seed in range(runs):
        r = specaudit.run("specaudit.verifiers.reference:verify", ["seed-context-free"], samples=2000, seed=seed, alpha=alpha,
                          early_stop=True, diagnose=False, power=False, suspect_level=0.0)
        s = r.scenarios[0]
        rejected += s.status is Status.FAILED
        stopped_early += s.info["early_stop"]["stopped"]
        pseq.append(s.check("joint-law").pvalue)
    # family-wise error <= alpha: binomial upper tail (scipy) at 1e-3 as the bound
    assert rejected <= sps.binom.isf(1e-3, runs, alpha), rejected
    assert stopped_early <= rejected
    assert np.mean(np.array(pseq) <= 0.2) <= sps.binom.isf(1e-3, runs, 0.2) / runs  # sequential p: super-uniform


def test_zipf_rows_windows_and_cdf_agree():
    rng = np.random.default_rng(22)
    chain = ZipfChain(40, 1.3, 5)
    states = chain.advance(chain.start_states(6), rng.integers(40, size=6))
    rows = chain.probs(states)
    into = np.empty_like(rows)
    chain.payload_into(states, into)
    np.testing.assert_array_equal(rows, into)
    x = rng.integers(40, size=6)
    below, prob = chain.cdf_at(states, x)
    np.testing.assert_allclose(prob, rows[np.arange(6), x])
    np.testing.assert_allclose(below, np.cumsum(rows, axis=1)[np.arange(6), x] - prob, atol=1e-12)


def test_unknown_backend_is_a_usage_error():
    with pytest.raises(UsageError, match="backend"):
        specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4"], samples=100, backend="dask", power=False)


def test_ray_backend_matches_local_processes():
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")
    kw = dict(seed=8, samples=blocks.BLOCK + 400, diagnose=False, power=False, suspect_level=0.0)
    local = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4", "sampling-greedy"], **kw)
    try:
        remote = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4", "sampling-greedy"], backend="ray", jobs=2, **kw)
    finally:
        if ray.is_initialized():
            ray.shutdown()
    assert _key(remote) == _key(local)
    bad = specaudit.run("specaudit.verifiers.zoo.chain:lenient", ["markov-v4"], backend="ray", **kw)
    assert bad.exit_code() == ExitCode.CHECKS_FAILED  # negative control through Ray
