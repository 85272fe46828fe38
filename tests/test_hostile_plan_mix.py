"""Hostile inputs to ``run`` (a batch mix of one class), ``plan`` and ``selftest``: exit codes and messages.

Reference numbers come from independent computations: the one-class mix's counts by hand
(``np.bincount`` of the sequence digits), a mutant's exact mix law against its own simulation
(scipy's chi-square test on counts of :func:`specaudit.simulate.blocks.run_blocks`).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import scipy.stats as sps

from specaudit.analysis import mutant_laws
from specaudit.cli import _POWER, _ST_DRAWS, _ST_SAMPLES, _ST_SEEDS
from specaudit.engine import selftest
from specaudit.errors import ExitCode, UsageError
from specaudit.laws import chain as exact
from specaudit.scenarios.catalogue import resolve
from specaudit.simulate.blocks import run_blocks
from specaudit.simulate.tallies import JointCounts
from specaudit.verifiers.zoo import chain as chain_zoo

REFERENCE = "specaudit.verifiers.reference:verify"

_PAIR = """schema: 1
name: {name}
vocab: 6
k: 3
drafts: uniform
length: 3
samples: 2000
target: {{kind: logits, scale: 2.0, seed: 171}}
draft: {{kind: logits, scale: 2.0, seed: 172}}
"""
#: A batch mix of one class (weight 1): a legitimate batch whose requests all share one parameter set.
ONE_CLASS = _PAIR.format(name="one-class") + "mix:\n- {name: a, weight: 1.0, target: {temperature: 0.7}}\n"
#: A mix of one greedy class (temperature 0; ties broken by the first index).
ONE_GREEDY = _PAIR.format(name="one-greedy") + "mix:\n- {name: g, weight: 1.0, target: {temperature: 0}}\n"
#: One row of explicit logits (a context-free target), a -inf logit, one class.
ONE_ROW = """schema: 1
name: one-row
vocab: 6
k: 3
length: 3
samples: 2000
target: {kind: logits, matrix: [[-.inf, 0.0, 0.5, 1.0, 0.2, 0.1]]}
draft: {kind: logits, matrix: [[0.3, 0.0, 0.5, 1.0, 0.2, 0.1]]}
mix:
- {name: x, weight: 1.0, target: {temperature: 0.7}}
"""


def _write(tmp_path, text: str, name: str = "s.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _joint_status(path) -> str:
    doc = json.loads(path.read_text())
    return next(c["status"] for c in doc["scenarios"][0]["checks"] if c["name"] == "joint-law")


# ---- 1. a batch mix of one class runs -------------------------------------------------------


def test_joint_counts_of_a_one_class_mix_take_the_class_column():
    rng = np.random.default_rng(3101)
    seqs = rng.integers(0, 3, size=(50, 2))
    rows = np.column_stack((np.zeros(50, dtype=np.int64), seqs))  # what the simulator hands a mix's sinks
    joint = JointCounts(3, 2, 1, mixed=True)
    joint.observe(rows)
    # independent: the cell is the base-3 number of the two tokens (class 0 adds nothing)
    np.testing.assert_array_equal(joint.counts, np.bincount(seqs[:, 0] * 3 + seqs[:, 1], minlength=9))
    plain = JointCounts(3, 2)  # positive control: no mix, no column
    plain.observe(seqs)
    np.testing.assert_array_equal(plain.counts, joint.counts)
    with pytest.raises(ValueError, match="rows of a class column, then 2 tokens; got rows of 2 columns"):
        JointCounts(3, 2, 1, mixed=True).observe(seqs)
    with pytest.raises(ValueError, match="need the class column"):
        JointCounts(3, 2, 2, mixed=False)


@pytest.mark.parametrize("text", [ONE_CLASS, ONE_GREEDY, ONE_ROW], ids=["one-class", "one-greedy", "one-row"])
def test_a_one_class_mix_passes_with_the_reference(tmp_path, cli, text):
    rng = np.random.default_rng(3102)
    seed = int(rng.integers(2**31))
    res = cli("run", REFERENCE, "-s", _write(tmp_path, text), "--samples", 2000, "--no-power", "--seed", seed,
              "--json", tmp_path / "r.json")
    assert res.exit_code == ExitCode.OK, res.output
    assert "PASSED" in res.output and "internal error" not in res.output
    assert _joint_status(tmp_path / "r.json") == "passed"


def test_a_one_class_mix_fails_with_a_mutant(tmp_path, cli):
    rng = np.random.default_rng(3103)
    seed = int(rng.integers(2**31))
    path = _write(tmp_path, ONE_CLASS)
    res = cli("run", "mutant:resample_from_p", "-s", path, "--samples", 2000, "--no-power", "--seed", seed,
              "--json", tmp_path / "m.json")
    assert res.exit_code == ExitCode.CHECKS_FAILED, res.output
    assert "FAILED" in res.output and _joint_status(tmp_path / "m.json") == "failed"


def test_a_one_class_mix_under_the_logits_contract_and_in_two_processes(tmp_path, cli):
    rng = np.random.default_rng(3104)
    seed = int(rng.integers(2**31))
    path = _write(tmp_path, ONE_CLASS)
    common = ("--contract", "logits", "-s", path, "--samples", 2000, "--no-power", "--seed", seed)
    ok = cli("run", "reference-logits", *common, "--jobs", 2)
    assert ok.exit_code == ExitCode.OK and "PASSED" in ok.output, ok.output
    # the target processed, the drafter not: the joint law of the one class is off
    bad = cli("run", "specaudit.verifiers.zoo.logits:temperature_target_only", *common, "--json", tmp_path / "b.json")
    assert bad.exit_code == ExitCode.CHECKS_FAILED, bad.output
    assert "FAILED" in bad.output


# ---- 2. plan on a batch mix: (class, sequence) cells ----------------------------------------


def test_plan_of_a_mix_mutant_uses_class_sequence_cells(cli):
    res = cli("plan", "-s", "serving-mix", "--mutant", "resample_from_p", "--samples", 2000)
    assert res.exit_code == ExitCode.OK, res.output
    assert "to catch resample_from_p (law exact" in res.output and "power against resample_from_p" in res.output
    for extra in (("--samples", 2000), ("--tv", 0.01)):
        other = cli("plan", "-s", "serving-mix", *extra)
        assert other.exit_code == ExitCode.OK and "joint-law check over 139 cells" in other.output, other.output


@pytest.mark.parametrize("name", ["resample_from_p", "lenient"])
def test_a_mix_mutant_law_matches_its_simulation(name):
    rng = np.random.default_rng(3105)
    spec = resolve(["serving-mix"])[0].spec
    law = mutant_laws.mutant_law(spec, name)
    target, _ = spec.chains()
    probs = exact.joint_probabilities(target, spec.length)
    assert law.method == "exact" and law.probs.shape == probs.shape == (3 * 6**3,)
    # independent: simulate the mutant over the scenario's blocks, the class as a leading column
    joint = JointCounts(spec.vocab, spec.length, 3, mixed=True)
    run_blocks(chain_zoo.get(name).func, dataclasses.replace(spec, samples=30_000), int(rng.integers(2**31)), [joint])
    pos = law.probs > 0
    assert joint.counts[~pos].sum() == 0
    n = joint.counts.sum()
    assert sps.chisquare(joint.counts[pos], n * law.probs[pos] / law.probs[pos].sum()).pvalue > 1e-3
    # negative control: the same counts are far from the target's law
    tpos = probs > 0
    assert joint.counts[~tpos].sum() > 0 or sps.chisquare(joint.counts[tpos], n * probs[tpos]).pvalue < 1e-6


# ---- 3/4. scenarios with nothing to plan ----------------------------------------------------


@pytest.mark.parametrize(("args", "says"), [
    (("-s", "bad-rows", "--samples", 2000), "mode: exact runs exact probes only"),
    (("-s", "corners", "--samples", 2000), "mode: exact runs exact probes only"),
    (("-s", "greedy-ties", "--mutant", "resample_from_p"), "mode: greedy checks every sequence for equality"),
])
def test_plan_refuses_a_scenario_that_runs_no_joint_law(cli, args, says):
    res = cli("plan", *args)
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    assert says in res.output and "no sample size to plan" in res.output and "allowed: a mode: sample" in res.output


def test_plan_of_a_tag_skips_what_it_cannot_plan(cli):
    res = cli("plan", "-s", "tag:sampling", "--samples", 2000)
    assert res.exit_code == ExitCode.OK, res.output
    assert "skipped scenario sampling-greedy: no joint-law check to plan for: mode: greedy" in res.output
    assert "sampling-top-k: joint-law check over" in res.output  # positive control: the rest is planned


def test_plan_of_a_lazy_chain_says_it_is_lazy(tmp_path, cli):
    text = ("schema: 1\nname: lazy-small\nvocab: 1000\nk: 2\nlength: 2\nsamples: 2000\n"
            "target: {kind: zipf, exponent: 1.1, seed: 1}\ndraft: {kind: zipf, exponent: 0.8, seed: 1}\n")
    res = cli("plan", "-s", _write(tmp_path, text))
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    assert "its chains are lazy (kind zipf" in res.output
    assert "cells >" not in res.output  # 1,000,000 cells are not more than 1,048,576
    big = cli("plan", "-s", "markov-v4", "-s", "zipf-v32k")
    assert big.exit_code == ExitCode.USAGE_ERROR and "scenario zipf-v32k" in big.output and "lazy" in big.output


# ---- 5/6. plan's options -------------------------------------------------------------------


@pytest.mark.parametrize(("mutant", "zoo"), [
    ("seeded_rows_shared_stream", "a seeded mutant"),
    ("tree_leq_ratio", "a tree/block mutant"),
    ("unprocessed_q", "a logits mutant"),
])
def test_plan_says_a_zoo_mutant_is_not_plannable(cli, mutant, zoo):
    res = cli("plan", "-s", "markov-v4", "--mutant", mutant)
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    assert f"--mutant: {mutant} is {zoo}" in res.output and "unknown mutant" not in res.output
    assert "plan answers for chain mutants on probs-contract scenarios and draft-vocabulary mutants; allowed: resample_from_p" in res.output
    unknown = cli("plan", "-s", "markov-v4", "--mutant", "resample_from_q")  # a typo is still unknown
    assert unknown.exit_code == ExitCode.USAGE_ERROR and "did you mean 'resample_from_p'" in unknown.output


def test_plan_power_gives_a_power_as_example(cli):
    res = cli("plan", "-s", "markov-v4", "--power", 1)
    assert res.exit_code == ExitCode.USAGE_ERROR
    assert "'--power': 1; allowed: a number 0 < x < 1, e.g. 0.99" in res.output and "1e-3" not in res.output
    assert _POWER.example == "0.99"
    assert cli("plan", "-s", "markov-v4", "--power", 0.9, "--samples", 2000).exit_code == ExitCode.OK


# ---- 7. selftest's options state their whole allowed set at once ----------------------------


@pytest.mark.parametrize(("option", "values", "says"), [
    ("--seeds", (0, 1, 9), "allowed: an integer 10 .. 1,000,000 (1e6)"),
    ("--draws", (1, 999, -1), "allowed: 0 (off) or an integer 1,000 .. 10,000,000 (1e7)"),
    ("--samples", (0, 99), "allowed: an integer 100 .. 1,000,000,000 (1e9)"),
])
def test_selftest_options_state_their_range_once(cli, option, values, says):
    base = {"--seeds": "10", "--draws": "0", "--samples": "2000"}
    for value in values:
        args = {**base, option: str(value)}
        res = cli("selftest", "-s", "markov-v4", "--no-mutants", *[x for kv in args.items() for x in kv])
        assert res.exit_code == ExitCode.USAGE_ERROR, res.output
        assert f"'{option}': {value}; {says}" in res.output


def test_selftest_cli_ranges_are_the_library_ones():
    assert (_ST_SEEDS.lo, _ST_SEEDS.hi) == (selftest.MIN_SEEDS, selftest.MAX_SEEDS)
    assert (_ST_DRAWS.least, _ST_DRAWS.hi) == (selftest.MIN_DRAWS, selftest.MAX_DRAWS)
    assert _ST_SAMPLES.lo == selftest.MIN_SAMPLES
    with pytest.raises(UsageError, match=r"seeds = 3; allowed: an integer 10 \.\. 1,000,000"):
        selftest.selftest(["markov-v4"], seeds=3)
    with pytest.raises(UsageError, match=r"draws = 50; allowed: 0 \(no law stage\) or an integer 1,000 \.\. 10,000,000"):
        selftest.selftest(["markov-v4"], draws=50)
