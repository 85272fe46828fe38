"""Real-size vocabularies: sparse high-id Zipf chains, the lean simulator path, float32 payloads, the shipped scenarios.

The lean path (lazy chains): drafts capped at the tokens a sequence still needs, calls as wide as
their longest draft, padding slots that keep their garbage, the batch sized to --max-memory in the
payload's dtype. The sparse variants put the mass on high ids (>= 2^15 and V-1): a bug at V-1 that
a dense row hides fails there, while the reference passes.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

import specaudit
from specaudit.chains.lazy import ZipfChain
from specaudit.chains.tabular import first_order
from specaudit.errors import ExitCode
from specaudit.results import Status
from specaudit.scenarios.catalogue import default_suite, resolve
from specaudit.scenarios.loading import parse_scenario
from specaudit.simulate import tables
from specaudit.simulate.chain import JointCounts, Plan, simulate
from specaudit.verifiers import reference

ROOT = Path(__file__).resolve().parents[2]

#: A sparse high-id scenario small enough for a test: 8 ids, all >= 2^15, the last one V-1.
SPARSE = """
schema: 1
name: sparse-v40k
tags: [large]
vocab: 40000
k: 4
length: 3
samples: 1500
target: {kind: zipf, exponent: 1.1, seed: 7, support: 8, lowest: 32768, dtype: float32}
draft: {kind: zipf, exponent: 0.8, seed: 7, support: 8, lowest: 32768, dtype: float32}
"""
DENSE = SPARSE.replace(", support: 8, lowest: 32768", "").replace("sparse-v40k", "dense-v40k")


def last_id_masked(draft, q, p, num_draft, rng):
    """A vocabulary mask off by one at the end (``[..., V-1:]`` masked, meant ``[..., V:]``): id V-1 is never emitted."""
    p, q = p.copy(), q.copy()
    p[..., -1] = 0.0
    q[..., -1] = 0.0
    return reference.verify(draft, q, p, num_draft, rng)


def ids_through_int16(draft, q, p, num_draft, rng):
    """Output ids stored in an int16 buffer: ids >= 2^15 wrap to negative numbers."""
    out, n_out = reference.verify(draft, q, p, num_draft, rng)
    return out.astype(np.int16), n_out


# ---- the sparse Zipf chain -------------------------------------------------------------------


def test_sparse_zipf_rows_are_laws_on_high_ids_and_agree_with_cdf_and_sampling():
    rng = np.random.default_rng(30)
    chain = ZipfChain(300, 1.2, 9, support=12, lowest=200)
    assert chain.ids.size == 12 and chain.ids[-1] == 299 and chain.ids.min() >= 200
    assert np.all(np.diff(chain.ids) > 0)
    states = chain.advance(chain.start_states(5), rng.integers(300, size=5))
    rows = chain.probs(states)
    np.testing.assert_allclose(rows.sum(axis=1), 1.0)
    off = np.setdiff1d(np.arange(300), chain.ids)
    assert np.all(rows[:, off] == 0) and np.all(rows[:, chain.ids] > 0)
    into = np.full((5, 300), 7.0)  # stale contents must be cleared
    chain.payload_into(states, into)
    np.testing.assert_array_equal(into, rows)
    x = np.array([chain.ids[0], 0, 299, chain.ids[5], 250])  # in and out of the support
    below, prob = chain.cdf_at(states, x)
    np.testing.assert_allclose(prob, rows[np.arange(5), x])
    np.testing.assert_allclose(below, np.cumsum(rows, axis=1)[np.arange(5), x] - prob, atol=1e-12)
    s = np.repeat(states[:1], 40000)
    drawn = chain.sample(s, rng.random(s.size))
    assert np.isin(drawn, chain.ids).all()
    obs = np.bincount(drawn, minlength=300)[chain.ids]
    expected = rows[0, chain.ids] * s.size
    stat = ((obs - expected) ** 2 / expected).sum()
    assert sps.chi2.sf(stat, chain.ids.size - 1) > 1e-4  # Pearson against the row (scipy chi2 tail)


def test_dense_zipf_is_unchanged_by_the_sparse_option():
    dense = ZipfChain(64, 1.1, 1)
    assert dense.ids is None
    states = dense.advance(dense.start_states(3), np.array([1, 2, 3]))
    # the dense ranking is the one drawn before the sparse option existed: permutation(V) of the same seed
    perm = np.random.default_rng(np.random.SeedSequence([1, 0x5A1F])).permutation(64)
    np.testing.assert_array_equal(dense._perm, perm)
    assert dense.probs(states).shape == (3, 64)


def test_float32_payload_rows_are_the_float64_law_rounded():
    chain = ZipfChain(1000, 1.1, 2, dtype="float32")
    states = chain.advance(chain.start_states(4), np.array([3, 1, 4, 1]))
    exact = chain.probs(states)
    assert exact.dtype == np.float64 and chain.payload(states).dtype == np.float32
    out = np.empty((4, 1000), dtype=np.float32)
    chain.payload_into(states, out)
    np.testing.assert_array_equal(out, exact.astype(np.float32))


# ---- the lean simulator path -----------------------------------------------------------------


def _lean_run(verify, chain_kw=None, samples=600, k=8, length=3, max_memory=None, batch=64):
    kw = chain_kw or {}
    target, draft = ZipfChain(50, 1.1, 3, **kw), ZipfChain(50, 0.8, 3, **kw)
    law = np.zeros(k + 1)
    law[k] = 1.0
    extra = {} if max_memory is None else {"max_memory": max_memory}
    joint = JointCounts(50, length)
    stats = simulate(verify, target, draft, Plan(length, samples, batch, law), np.random.default_rng(31),
                     np.random.default_rng(32), [joint], **extra)
    return stats, joint


def test_lean_calls_draft_only_what_a_sequence_needs_and_are_as_wide_as_the_longest_draft():
    calls = []

    def spy(d, q, p, nd, rng):
        calls.append((d.shape, q.shape, p.shape, nd.copy(), p.flags.c_contiguous and q.flags.c_contiguous))
        return reference.verify(d, q, p, nd, rng)

    stats, joint = _lean_run(spy)
    assert stats.sequences == 600 and joint.counts.sum() == 600
    for d_shape, q_shape, p_shape, nd, contiguous in calls:
        width = int(nd.max())
        assert width <= 2  # L = 3: at most L - 1 drafts, whatever K (= 8) says
        assert d_shape[1] == q_shape[1] == width and p_shape[1] == width + 1 and contiguous
    assert {int(c[3].max()) for c in calls} >= {1, 2}  # ragged: sequences at different positions share calls


def test_padding_slots_hold_garbage_and_keep_it_while_they_stay_padding():
    seen = []

    def spy(d, q, p, nd, rng):
        seen.append((p.copy(), nd.copy()))
        return reference.verify(d, q, p, nd, rng)

    _lean_run(spy, samples=400)
    weights = np.sort(ZipfChain(50, 1.1, 3)._weights)
    kept = fresh = 0
    for (p0, nd0), (p1, nd1) in zip(seen, seen[1:]):
        if p0.shape[1:] != p1.shape[1:]:
            continue  # a new layout: nothing is held
        rows = min(len(nd0), len(nd1))
        for i in range(rows):
            for j in range(p1.shape[1]):
                if j <= nd1[i]:  # a valid row: the target's law in its context (a permutation of the Zipf weights)
                    np.testing.assert_allclose(np.sort(p1[i, j]), weights)
                    continue
                assert np.all(p1[i, j] > 0)  # garbage, never zeros, never a real row
                assert not np.allclose(np.sort(p1[i, j]), weights)
                if j > nd0[i]:
                    np.testing.assert_array_equal(p1[i, j], p0[i, j])  # already garbage: left as it was
                    kept += 1
                else:
                    fresh += 1
    assert kept > 0 and fresh > 0


def test_max_memory_sizes_the_lean_batch_in_the_payload_dtype():
    widths = {}
    for dtype, itemsize in (("float64", 8), ("float32", 4)):
        first = []

        def spy(d, q, p, nd, rng, first=first):
            first.append((len(nd), p.dtype, q.dtype))
            return reference.verify(d, q, p, nd, rng)

        # 10 rows of (2 K' + 1) V entries, K' = min(K, L - 1) = 2, at 3 items of working set per entry
        budget = 3 * 8 * 50 * 5 * 10
        _lean_run(spy, {"dtype": dtype}, samples=200, max_memory=budget, batch=1000)
        widths[dtype] = first[0][0]
        assert first[0][1] == first[0][2] == np.dtype(dtype)
        assert widths[dtype] == tables.rows_within(budget, 50, 2, itemsize)
    assert widths == {"float64": 10, "float32": 20}


def test_tables_too_large_to_hold_go_through_the_row_path_with_the_same_law(monkeypatch):
    rng = np.random.default_rng(33)
    target = first_order(rng.dirichlet(np.ones(4), size=4), 0)
    draft = first_order(rng.dirichlet(np.ones(4), size=4), 1)
    law = np.array([0.2, 0.3, 0.5, 0.0])

    widths = set()

    def spy(d, q, p, nd, rng):
        widths.add((d.shape[1], q.shape[1], p.shape[1]))
        return reference.verify(d, q, p, nd, rng)

    def counts(seed):
        joint = JointCounts(4, 3)
        simulate(spy, target, draft, Plan(3, 6000, 512, law), np.random.default_rng(seed),
                 np.random.default_rng(seed + 1), [joint])
        return joint.counts

    tabular = counts(34)
    monkeypatch.setattr(tables, "TABLE_ENTRIES", 0)  # no chain is small enough: rows on demand (_Pair)
    assert not tables.tabular(target) and not tables.lazy(target)  # tables exist, so no capped drafts
    rows = counts(34)
    assert not np.array_equal(tabular, rows)  # another path, other draws
    keep = (tabular + rows) > 0
    _, pvalue, _, _ = sps.chi2_contingency(np.stack([tabular[keep], rows[keep]]))
    assert pvalue > 1e-4  # the same law (scipy chi-square test of homogeneity)
    assert widths == {(3, 3, 4)}  # tabular chains keep K every call: their round laws assume it


# ---- scenarios ---------------------------------------------------------------------------------


def test_real_size_scenarios_ship_tagged_large_outside_the_default_suite():
    default = {s.name for s in default_suite()}
    for name, vocab in (("llama3-v128k", 128256), ("qwen-v152k", 151936), ("llama3-v128k-sparse", 128256),
                        ("qwen-v152k-sparse", 151936)):
        (loaded,) = resolve([name])
        spec = loaded.spec
        assert spec.vocab == vocab and spec.k == 8 and spec.lazy and spec.tags == ["large"] and name not in default
        target, draft = spec.chains()
        if name.endswith("sparse"):
            assert target.ids.size == 64 and target.ids.min() >= 2**15 and target.ids[-1] == vocab - 1
            np.testing.assert_array_equal(target.ids, draft.ids)
            assert (target.ids >= 2**16).any()
        else:
            assert target.ids is None
    assert {s.name for s in resolve(["tag:large"])} >= {"llama3-v128k", "qwen-v152k", "zipf-v32k"}


def test_new_zipf_keys_keep_content_hashes_when_left_at_their_defaults():
    (v32k,) = resolve(["zipf-v32k"])
    assert v32k.spec.content_hash() == "d6b3cb972c87ad59"  # the hash before support, lowest and dtype existed
    explicit = parse_scenario(DENSE.replace("dtype: float32", "dtype: float64"), "d.yaml").spec
    implicit = parse_scenario(DENSE.replace(", dtype: float32", ""), "d.yaml").spec
    assert explicit.content_hash() == implicit.content_hash()
    assert parse_scenario(DENSE, "d.yaml").spec.content_hash() != implicit.content_hash()


@pytest.mark.parametrize("old, new, message", [
    ("lowest: 32768", "lowest: 39995", "support = 8 tokens at or above lowest = 39995; allowed with vocab 40000"),
    ("lowest: 32768", "lowest: 40000", "lowest <= 39999"),
    ("dtype: float32", "dtype: float16", "dtype"),
    ("support: 8", "support: -1", "support"),
])
def test_bad_zipf_keys_are_scenario_errors_naming_the_rule(old, new, message, cli, tmp_path):
    text = SPARSE.replace(old, new, 1)
    with pytest.raises(specaudit.ScenarioError, match=message):
        parse_scenario(text, "bad.yaml")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = cli("run", "specaudit.verifiers.reference:verify", "-s", str(path))
    assert result.exit_code == ExitCode.USAGE_ERROR and "bad.yaml" in result.output and message.split()[0] in result.output


# ---- what the real sizes catch -------------------------------------------------------------------


def _run(verify, text):
    spec = parse_scenario(text, "s.yaml")
    return specaudit.run(verify, [spec], seed=2, diagnose=False, power=False).scenarios[0]


def test_a_bug_at_the_last_id_fails_the_sparse_variant_while_the_reference_passes():
    ok = _run(reference.verify, SPARSE)
    assert ok.status is Status.PASSED, [c.summary for c in ok.checks]
    bad = _run(last_id_masked, SPARSE)
    assert bad.check("per-prefix").status is Status.FAILED, bad.check("per-prefix").summary
    assert "39999" in bad.check("per-prefix").summary  # the worst token is V-1
    # a dense row puts ~1/V of the mass at V-1: the same bug goes unseen there
    assert _run(last_id_masked, DENSE).check("per-prefix").status is Status.PASSED


def test_ids_stored_in_int16_break_the_contract_only_past_2_to_the_15():
    bad = _run(ids_through_int16, SPARSE)  # every id >= 2^15
    assert bad.error is not None and bad.error.clause == "vocab-range", bad.error
    small = SPARSE.replace("vocab: 40000", "vocab: 30000").replace("lowest: 32768", "lowest: 20000")
    assert _run(ids_through_int16, small).error is None  # ids < 2^15 fit in int16


# ---- the benchmark ----------------------------------------------------------------------------------


def test_scale_benchmark_runs_in_quick_mode():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scale.py"), "--quick"], capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    for line in ("overhead", "default suite", "first verifier call", "copy bandwidth", "--jobs 2", "llama3-v128k",
                 "qwen-v152k", "zipf-v32k"):
        assert line in out.stdout, (line, out.stdout)
    assert out.stdout.count("goal") >= 6


def test_scale_benchmark_runs_its_jobs_line_alone():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scale.py"), "--quick", "--jobs-only"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "--jobs 2" in out.stdout and "identical results: True" in out.stdout and "overhead" not in out.stdout, out.stdout
