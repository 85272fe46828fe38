"""Per-request seeds (specaudit.checks.seeded, contract.chain.RowGenerators), scenario serving-seeded."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import specaudit
from specaudit.checks import CHECKS
from specaudit.checks.seeded import NAME, applies, run_seeded
from specaudit.cli import main
from specaudit.contract.chain import RowGenerators, SeededRequests, draw_uniforms, row_generators, takes_row_generators
from specaudit.contract.guard import guarded
from specaudit.engine.bench import Bench
from specaudit.errors import ExitCode
from specaudit.results import Status
from specaudit.scenarios.catalogue import default_suite, resolve
from specaudit.verifiers import block, greedy, logits, reference
from specaudit.verifiers.zoo import chain as chain_zoo
from specaudit.verifiers.zoo import seeded as seeded_zoo

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = ("seeded_rows_shared_stream", "zero_draft_advances_generator", "unseeded_reads_seeded")


def _run(target, samples=2000, seed=1, **kw):
    return specaudit.run(target, ["serving-seeded"], samples=samples, seed=seed, diagnose=False, power=False, **kw)


def _batch(rng, batch=6, k=3, v=5):
    p = rng.dirichlet(np.ones(v), size=(batch, k + 1))
    q = rng.dirichlet(np.ones(v), size=(batch, k))
    return rng.integers(v, size=(batch, k)), q, p, rng.integers(0, k + 1, size=batch)


def test_scenario_is_shipped_tagged_and_outside_the_default_suite():
    (loaded,) = resolve(["serving-seeded"])
    assert {"serving", "seeded"} <= set(loaded.spec.tags) and applies(loaded.spec)
    assert loaded.spec.draft_law[0] > 0  # zero-draft rows occur (vllm-ascend #13608)
    assert "serving-seeded" not in [s.name for s in default_suite()]
    assert CHECKS.get(NAME).kind == "seeded-probe" and CHECKS.get(NAME).gate


def test_row_generators_index_rows():
    shared, own = np.random.default_rng(1), np.random.default_rng(2)
    rows = RowGenerators(shared, {2: own}, 4)
    assert len(rows) == 4 and rows[2] is own and rows[0] is rows[3] is shared and rows[-2] is own
    assert rows[1:3] == [shared, own]
    with pytest.raises(IndexError, match="row 4 of a batch of 4"):
        rows[4]


def test_draw_uniforms_from_one_generator_is_the_old_draw():
    nd = np.array([0, 3, 1])
    u, v = draw_uniforms(np.random.default_rng(7), nd, 3)
    rng = np.random.default_rng(7)
    assert np.array_equal(u, rng.random((3, 3))) and np.array_equal(v, rng.random(3))


def test_draw_uniforms_per_row_own_draws_and_shared_fill():
    nd = np.array([0, 3, 2, 1])
    u, v = draw_uniforms(RowGenerators(np.random.default_rng(7), {0: np.random.default_rng(10),
                                                                  2: np.random.default_rng(12)}, 4), nd, 3)
    fill = np.random.default_rng(7)
    fu, fv = fill.random((4, 3)), fill.random(4)
    for b in (1, 3):  # unseeded rows: the shared fill, as if no row were seeded
        assert np.array_equal(u[b], fu[b]) and v[b] == fv[b]
    assert v[0] == np.random.default_rng(10).random(1)[0]  # a zero-draft row draws one uniform
    own = np.random.default_rng(12).random(3)
    assert np.array_equal(u[2, :2], own[:2]) and v[2] == own[2]


def test_references_and_mutants_are_marked_and_draw_as_before_from_one_generator():
    rng = np.random.default_rng(31)
    for verify in (reference.verify, block.verify, greedy.verify,
                   logits.verify_reference, *(m.func for m in seeded_zoo.MUTANTS.values())):
        assert takes_row_generators(verify) and takes_row_generators(guarded(verify))
    assert not takes_row_generators(chain_zoo.MUTANTS["lenient"].func)
    for _ in range(20):  # with one Generator every seeding mutant is the reference, draw for draw
        batch = _batch(rng)
        want = reference.verify(*batch, np.random.default_rng(5))
        for m in seeded_zoo.MUTANTS.values():
            got = m.func(*batch, np.random.default_rng(5))
            assert all(np.array_equal(a, b) for a, b in zip(want, got)), m.name


def test_simulation_hands_marked_verifiers_per_request_generators():
    seen = []

    @row_generators
    def recording(draft, q, p, num_draft, rng):
        seen.append(rng)
        return reference.verify(draft, q, p, num_draft, rng)

    spec = dataclasses.replace(resolve(["serving-seeded"])[0].spec, samples=500)
    Bench(guarded(recording), spec).run(seed=1, block=0)
    sims = [r for r in seen if isinstance(r, RowGenerators) and r.batch > 10]
    assert len(sims) == len([r for r in seen if r.batch > 10])
    seen.clear()  # a scenario not tagged seeded: one Generator, as before
    Bench(guarded(recording), dataclasses.replace(resolve(["ragged-v4"])[0].spec, samples=100)).run(1, 0)
    assert seen and all(type(r) is np.random.Generator for r in seen)
    assert sims and all(0 < len(r.seeded) < r.batch for r in sims)
    first = sims[0]  # a seeded slot keeps its generator from call to call
    later = [r for r in sims[1:] if r.shared is first.shared]
    assert later and any(r.seeded.get(b) is g for r in later for b, g in first.seeded.items())


def test_seeded_requests_restart_with_each_block():
    calls = []
    wrapped = SeededRequests(lambda *args: calls.append(args[-1]))
    batch = _batch(np.random.default_rng(3), batch=8)
    for seed in (1, 1):
        shared = np.random.default_rng(seed)
        wrapped(*batch, shared)
        wrapped(*batch, shared)
    a, b, c, d = calls
    assert a.seeded.keys() == c.seeded.keys()  # a new block (a new shared generator): the same slots again
    assert all(a.seeded[i] is b.seeded[i] for i in a.seeded) and all(a.seeded[i] is not c.seeded[i] for i in a.seeded)


def test_unmarked_verifier_is_not_applicable():
    result = _run("mutant:lenient", samples=500)
    check = result.scenarios[0].check(NAME)
    assert check.status is Status.SKIPPED and "does not take per-request generators" in check.summary


def test_greedy_reference_is_not_applicable():
    spec = resolve(["serving-seeded"])[0].spec
    done = run_seeded(guarded(greedy.verify), spec, seed=1)
    (check,) = done.checks
    assert check.status is Status.SKIPPED and "drew nothing" in check.summary and done.calls > 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reference_passes_every_check(seed):
    result = _run("reference", samples=3000, seed=seed)
    scenario = result.scenarios[0]
    assert scenario.check(NAME).status is Status.PASSED
    assert all(c.status is Status.PASSED for c in scenario.checks if c.gate), scenario.checks


def test_block_and_logits_references_pass_the_probe():
    spec = resolve(["serving-seeded"])[0].spec
    for verify, contract in ((block.verify, "probs"),
                             (logits.verify_reference, "logits")):
        (check,) = run_seeded(guarded(verify), spec, seed=4, contract=contract).checks
        assert check.status is Status.PASSED, check


@pytest.mark.parametrize(("name", "says"), [
    ("seeded_rows_shared_stream", "its tokens depend on the batch"),
    ("zero_draft_advances_generator", "num_draft 0 then 3"),
    ("unseeded_reads_seeded", "unseeded rows read the seeded rows' draws (vllm-ascend PR #4908)"),
])
def test_each_mutant_fails_the_probe(name, says):
    result = _run(f"mutant:{name}", samples=3000)
    check = result.scenarios[0].check(NAME)
    assert check.status is Status.FAILED and check.gate
    assert any(says in f for f in check.data["failures"]), check.data["failures"]
    if name != "unseeded_reads_seeded":  # the law holds: only the probe sees these
        assert result.scenarios[0].check("joint-law").status is Status.PASSED


def test_zero_draft_mutant_is_caught_by_generator_state():
    # K drafts then 0: the second step's tokens can agree; the generator's state after it cannot
    spec = resolve(["serving-seeded"])[0].spec
    (check,) = run_seeded(guarded(seeded_zoo.zero_draft_advances_generator), spec, seed=1).checks
    assert any("generator's state after 2 steps differs" in f for f in check.data["failures"])


def test_crash_on_row_generators_is_an_error_not_an_internal_error():
    @row_generators
    def wrong(draft, q, p, num_draft, rng):
        return reference.verify(draft, q, p, num_draft, rng.shared.random)  # not a generator

    result = _run(wrong, samples=200)
    error = result.scenarios[0].error
    assert error is not None and error.kind == "crash" and "has no attribute 'random'" in error.message
    assert result.exit_code() == ExitCode.CHECKS_FAILED  # the verifier's crash, not specaudit's (3)


def test_cli_exit_codes():
    runner = CliRunner()
    ok = runner.invoke(main, ["run", "reference", "-s", "serving-seeded", "--samples", "2000", "--no-power"])
    assert ok.exit_code == 0, ok.output
    assert "seeded-rows" in ok.output
    bad = runner.invoke(main, ["run", "mutant:zero_draft_advances_generator", "-s", "serving-seeded", "--samples",
                               "2000", "--no-power"])
    assert bad.exit_code == 1, bad.output
    assert "per-request seed violations" in " ".join(bad.output.split())


def test_seeded_simulation_is_the_same_in_one_process_or_two():
    # SeededRequests restarts its slots with each block: a block's result does not depend on what ran before it
    one, two = (_run("reference", samples=30000, seed=3, jobs=jobs).scenarios[0].check("joint-law") for jobs in (1, 2))
    assert one.statistic == two.statistic and one.pvalue == two.pvalue


def test_user_scenario_tagged_seeded_exact_mode_and_tree(tmp_path):
    exact = tmp_path / "exact-seeded.yaml"
    exact.write_text((ROOT / "scenarios" / "bad-rows.yaml").read_text().replace("name: bad-rows", "name: exact-seeded")
                     .replace("tags: [serving, bad-rows]", "tags: [seeded]"))
    result = specaudit.run("reference", [str(exact)], seed=1, diagnose=False, power=False)
    assert result.scenarios[0].check(NAME).status is Status.PASSED  # the probe alone, no simulation
    tree = tmp_path / "tree-seeded.yaml"
    tree.write_text((ROOT / "scenarios" / "tree-iid-v4.yaml").read_text().replace("name: tree-iid-v4", "name: tree-seeded")
                    .replace("tags: [tree]", "tags: [tree, seeded]"))
    done = specaudit.run("reference-tree", [str(tree)], samples=500, seed=1, diagnose=False, power=False)
    check = done.scenarios[0].check(NAME)
    assert check.status is Status.SKIPPED and "not applicable" in check.summary and "tree" in check.summary


def test_a_peaked_batch_mix_does_not_hide_a_seeding_bug(tmp_path):
    # serving-mix with the seeded tag: its first class is greedy and its rows peaked, so the probe's requests
    # take flat rows of their own; before, the shared-stream mutant passed it ("drew nothing": not applicable)
    from specaudit.scenarios.loading import load_scenario

    path = tmp_path / "seeded-mix.yaml"
    path.write_text((ROOT / "scenarios" / "serving-mix.yaml").read_text()
                    .replace("name: serving-mix", "name: seeded-mix").replace("tags: [serving]", "tags: [serving, seeded]"))
    spec = load_scenario(path).spec
    assert applies(spec) and spec.mix[0].target.temperature == 0
    rng = np.random.default_rng(171)
    for seed in rng.integers(0, 2**31, size=4).tolist():
        (ok,) = run_seeded(guarded(reference.verify), spec, seed=seed).checks
        assert ok.status is Status.PASSED, ok
        for m in seeded_zoo.MUTANTS.values():
            (check,) = run_seeded(guarded(m.func), spec, seed=seed).checks
            assert check.status is Status.FAILED, (m.name, seed, check)


def test_a_seeded_request_reading_the_shared_stream_alone_fails():
    spec = resolve(["serving-seeded"])[0].spec
    (check,) = run_seeded(guarded(seeded_zoo.seeded_rows_shared_stream), spec, seed=2).checks
    assert any("with only the shared generator changed" in f for f in check.data["failures"]), check.data


def _shared_above(rows: int, seeded: int):
    """A verifier whose seeded rows read the shared stream once a batch has more than ``rows`` rows or ``seeded`` seeded."""

    def draw(rng, num_draft, k):
        if isinstance(rng, RowGenerators) and (num_draft.shape[0] > rows or len(rng.seeded) > seeded):
            return draw_uniforms(rng.shared, num_draft, k)
        return draw_uniforms(rng, num_draft, k)

    @row_generators
    def verify(draft, q, p, num_draft, rng):
        return reference.verify(draft, q, p, num_draft, rng, draw=draw)

    return verify


@pytest.mark.parametrize(("rows", "seeded"), [(16, 10**6), (10**6, 7)])
def test_a_seeding_bug_that_needs_a_large_batch_fails(rows, seeded):
    # the probe's batches had at most 10 rows, 7 of them seeded: a kernel switching at 16 rows passed
    spec = resolve(["serving-seeded"])[0].spec
    rng = np.random.default_rng(16)
    for seed in rng.integers(0, 2**31, size=3).tolist():
        (check,) = run_seeded(guarded(_shared_above(rows, seeded)), spec, seed=seed).checks
        assert check.status is Status.FAILED and "most seeded" in check.data["failures"][0], check
        (ok,) = run_seeded(guarded(_shared_above(10**6, 10**6)), spec, seed=seed).checks
        assert ok.status is Status.PASSED, ok
