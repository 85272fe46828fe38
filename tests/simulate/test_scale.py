"""Large vocabularies: the lean simulator, lazy large-V chains, per-prefix and PIT checks, --jobs, --max-memory."""

import numpy as np
import pytest
from click.testing import CliRunner
from scenario_texts import ZIPF_V64 as ZIPF
from scipy import stats as sps

import specaudit
from specaudit.chains.lazy import ZipfChain
from specaudit.chains.tabular import first_order
from specaudit.checks.pit import PitCounts, pit_test
from specaudit.checks.prefix import PrefixCounts, prefix_tests
from specaudit.cli import main
from specaudit.errors import ExitCode
from specaudit.results import Status
from specaudit.scenarios.loading import parse_scenario
from specaudit.simulate.chain import JointCounts, Plan, RoundStats, alias_tables, rows_within, simulate
from specaudit.simulate.tables import CALL_BYTES
from specaudit.verifiers import reference


def test_alias_tables_reproduce_the_law_and_never_draw_zero_mass():
    rng = np.random.default_rng(1)
    dist = rng.dirichlet(np.ones(6), size=3)
    dist[:, 2] = 0.0
    dist /= dist.sum(axis=1, keepdims=True)
    thr, ali = alias_tables(dist)
    # exact law implied by the tables: column j keeps thr, gives 1 - thr to its alias
    implied = np.zeros_like(dist)
    for s in range(3):
        for j in range(6):
            implied[s, j] += thr[s * 6 + j] / 6
            implied[s, ali[s * 6 + j]] += (1 - thr[s * 6 + j]) / 6
    np.testing.assert_allclose(implied, dist, atol=1e-12)
    assert np.all(thr.reshape(3, 6)[:, 2] == 0) and np.all(ali != 2)


def test_simulator_keeps_ragged_garbage_and_bonus_behaviour():
    rng = np.random.default_rng(2)
    target = first_order(rng.dirichlet(np.ones(4), size=4), 0)
    draft = first_order(rng.dirichlet(np.ones(4), size=4), 0)
    law = np.full(4, 0.25)
    seen = []

    def spy(d, q, p, nd, r):
        b = np.arange(len(nd))
        pad_q = np.arange(3)[None, :] >= nd[:, None]
        pad_p = np.arange(4)[None, :] > nd[:, None]
        assert np.all(q[pad_q] > 0) and np.all(p[pad_p] > 0)  # garbage, never zeros
        np.testing.assert_allclose(p[~pad_p].sum(axis=-1), 1.0)
        seen.append(q[pad_q][:1].copy())
        assert np.all(p[b, nd].sum(axis=-1) > 0)  # the bonus position is a real law
        return reference.verify(d, q, p, nd, r)

    stats = simulate(spy, target, draft, Plan(5, 3000, 256, law), np.random.default_rng(3), np.random.default_rng(4))
    assert stats.sequences == 3000 and stats.accept_all.sum() == stats.moments[0]  # one histogram entry per round
    garbage = np.concatenate([s for s in seen if s.size])
    assert not np.allclose(garbage[0], garbage[-1])  # padding changes between calls


def _counts(seed, batch=512, max_memory=None):
    rng = np.random.default_rng(5)
    target = first_order(rng.dirichlet(np.ones(4), size=4), 0)
    draft = first_order(rng.dirichlet(np.ones(4), size=4), 1)
    joint = JointCounts(4, 3)
    kw = {} if max_memory is None else {"max_memory": max_memory}
    stats = simulate(reference.verify, target, draft, Plan(3, 4000, batch, np.array([0.2, 0.3, 0.5, 0.0])),
                     np.random.default_rng(seed), np.random.default_rng(seed + 1), [joint], **kw)
    return joint.counts, stats


def test_simulation_is_deterministic_for_a_seed_and_differs_across_seeds():
    a, sa = _counts(6)
    b, sb = _counts(6)
    c, _ = _counts(7)
    assert np.array_equal(a, b) and np.array_equal(sa.accept_all, sb.accept_all)
    assert not np.array_equal(a, c)
    assert a.sum() == 4000


def test_max_memory_and_the_call_size_bound_the_batch():
    assert rows_within(1 << 29, 32768, 8) == (1 << 29) // (24 * 32768 * 17) == 40  # --max-memory binds
    # the call size binds: 60 rows of K = 8 (160 within 2 GiB), 204 of K' = 2 (a lazy chain of L = 3; 546)
    assert rows_within(2 << 30, 32768, 8) == CALL_BYTES // (8 * 32768 * 17) == 60
    assert rows_within(2 << 30, 32768, 2) == CALL_BYTES // (8 * 32768 * 5) == 204
    assert rows_within(2 << 30, 32768, 2, itemsize=4) == CALL_BYTES // (4 * 32768 * 5)
    assert rows_within(1, 32768, 8) == 1
    _, stats = _counts(6, batch=512, max_memory=24 * 4 * 7 * 16)  # 16 rows per call
    assert stats.calls >= 4000 / 16


def test_round_stats_and_joint_counts_are_additive():
    a, sa = _counts(8)
    b, sb = _counts(9)
    joint = JointCounts(4, 3)
    joint.counts += a
    other = JointCounts(4, 3)
    other.counts += b
    other.load(JointCounts(4, 3).to_dict())  # loading an empty shard adds nothing
    joint.merge(other)
    assert np.array_equal(joint.counts, a + b)
    merged = RoundStats.from_dict(sa.to_dict())
    merged.merge(sb)
    assert merged.sequences == 8000
    np.testing.assert_array_equal(merged.accept_all, sa.accept_all + sb.accept_all)


def test_zipf_chain_rows_are_laws_and_sampling_follows_them():
    rng = np.random.default_rng(10)
    chain = ZipfChain(48, 1.2, 3)  # V not a power of two
    states = chain.advance(chain.start_states(3), np.array([0, 5, 47]))
    rows = chain.probs(states)
    np.testing.assert_allclose(rows.sum(axis=1), 1.0)
    assert np.all(np.sort(rows, axis=1)[:, ::-1] == np.sort(chain._weights)[::-1])  # a permutation of Zipf
    assert not np.allclose(rows[0], rows[1])  # contexts differ
    s = np.repeat(states[:1], 60000)
    x = chain.sample(s, rng.random(s.size))
    expected = rows[0] * 60000
    obs = np.bincount(x, minlength=48)
    big = expected >= 5
    stat = ((obs[big] - expected[big]) ** 2 / expected[big]).sum()
    assert sps.chi2.sf(stat, big.sum() - 1) > 1e-4  # Pearson against the row (scipy chi2 tail)


def test_prefix_counts_locate_nodes_and_merge():
    rng = np.random.default_rng(11)
    seqs = rng.integers(3, size=(500, 3))
    a, b, whole = PrefixCounts(3), PrefixCounts(3), PrefixCounts(3)
    a.observe(seqs[:200])
    b.observe(seqs[200:])
    whole.observe(seqs)
    a.merge(PrefixCounts.from_dict(b.to_dict()))
    for t in range(3):
        for x in (seqs[0], seqs[1]):
            from specaudit.checks.prefix import prefix_keys

            h = int(prefix_keys(x[None, :])[0, t])
            np.testing.assert_array_equal(a.node_counts(t, h, 3), whole.node_counts(t, h, 3))
    h1 = int(prefix_keys(np.array([[2, 0, 0]]))[0, 1])
    assert whole.node_counts(1, h1, 3).sum() == (seqs[:, 0] == 2).sum()


def test_pit_is_uniform_for_exact_draws_and_not_for_wrong_ones():
    rng = np.random.default_rng(12)
    chain = ZipfChain(32, 1.0, 4)

    def draw(c, n):
        st = c.start_states(n)
        out = np.empty((n, 4), dtype=np.int64)
        for t in range(4):
            out[:, t] = c.sample(st, rng.random(n))
            st = c.advance(st, out[:, t])
        return out

    right, wrong = PitCounts(chain, 4, rng), PitCounts(chain, 4, rng)
    right.observe(draw(chain, 8000))
    wrong.observe(draw(ZipfChain(32, 0.7, 4), 8000))  # same ranks, flatter
    assert min(pit_test(right.hist, right.pairs)[1::2]) > 1e-3
    assert pit_test(wrong.hist, wrong.pairs)[1] < 1e-6


def test_large_scenario_runs_per_prefix_and_pit_reference_passes_mutant_fails():
    loaded = parse_scenario(ZIPF, "zipf.yaml")
    ok = specaudit.run("specaudit.verifiers.reference:verify", [loaded], seed=1, diagnose=False)
    bad = specaudit.run("specaudit.verifiers.zoo.chain:lenient", [loaded], seed=1, diagnose=False)
    names = [c.name for c in ok.scenarios[0].checks]
    assert names[:2] == ["per-prefix", "pit"]  # no joint test, no tabular efficiency checks; then the probes
    assert "joint-law" not in names and "tokens-per-step" not in names and "adversarial-uniforms" in names
    assert ok.exit_code() == ExitCode.OK, [c.summary for c in ok.scenarios[0].checks]
    prefix = bad.scenarios[0].check("per-prefix")
    assert bad.exit_code() == ExitCode.CHECKS_FAILED and prefix.status is Status.FAILED
    assert prefix.summary.count("position ") and "after prefix [" in prefix.summary and "observed" in prefix.summary
    assert bad.scenarios[0].check("pit").status is Status.FAILED


def test_prefix_tests_choose_nodes_by_expected_count_only():
    chain = ZipfChain(16, 1.5, 2)
    empty, full = PrefixCounts(2), PrefixCounts(2)
    empty.n = full.n = 1000
    full.observe(np.zeros((10, 2), dtype=np.int64))
    full.n = 1000
    nodes_a = [(t.position, t.prefix) for t in prefix_tests(chain, empty, 2)]
    nodes_b = [(t.position, t.prefix) for t in prefix_tests(chain, full, 2)]
    assert nodes_a == nodes_b and len(nodes_a) > 1


def test_zipf_kind_validation_names_the_fix():
    bad = ZIPF.replace("draft: {kind: zipf, exponent: 0.8, seed: 1}", "draft: {kind: dirichlet, seed: 2}")
    with pytest.raises(specaudit.ScenarioError, match="zipf pairs only with zipf"):
        parse_scenario(bad, "bad.yaml")


def test_jobs_two_gives_identical_results():
    kw = dict(seed=4, samples=5000, diagnose=False)
    one = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4", "ragged-v4", "seed-context-free"], jobs=1, **kw)
    two = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4", "ragged-v4", "seed-context-free"], jobs=2, **kw)
    def key(r):
        return [(s.name, c.name, c.statistic, c.pvalue, c.adjusted_pvalue) for s in r.scenarios for c in s.checks]

    assert key(one) == key(two)


def test_cli_jobs_and_max_memory():
    runner = CliRunner()
    ok = runner.invoke(main, ["run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "--samples", "3000",
                              "--jobs", "2", "--max-memory", "0.01", "-q"])
    assert ok.exit_code == ExitCode.OK, ok.output
    bad = runner.invoke(main, ["run", "specaudit.verifiers.reference:verify", "--max-memory", "-1"])
    assert bad.exit_code == ExitCode.USAGE_ERROR and "--max-memory" in bad.output


def test_a_run_imports_neither_scipy_stats_nor_csgraph():
    """scipy.stats (~0.4 s) and scipy.sparse.csgraph (~0.2 s) would be paid by every CLI call."""
    import subprocess
    import sys

    code = ("import sys, specaudit; "
            "specaudit.run('specaudit.verifiers.reference:verify', ['markov-v4', 'corners', 'sampling-mixed'], samples=2000, seed=1); "
            "print(sorted(m for m in ('scipy.stats', 'scipy.sparse.csgraph') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
