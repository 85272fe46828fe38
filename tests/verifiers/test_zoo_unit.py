"""Unit tests for the mutant zoo, run directly on canonical inputs (no runner).

The base case is context-free: V = 4, K = 2, the same target P and draft law Q at every position,
with a p = 0 token (1) and p < q tokens (1, 3). For a lossless verifier the generated sequence is
i.i.d. P, so the first emitted token has law P and the first two generated tokens (a second call
supplies the next token when a step emits one) have law P x P. Reference laws are computed here
from P and Q with numpy (theory.md closed forms), never by a verifier.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from scipy import stats

from specaudit.verifiers import reference
from specaudit.verifiers.zoo import chain as mutants
from specaudit.verifiers.zoo.chain import MUTANTS

V, K, N = 4, 2, 200_000
P = np.array([0.5, 0.0, 0.3, 0.2])
Q = np.array([0.2, 0.4, 0.1, 0.3])
ALPHA = np.minimum(P, Q).sum()  # beta = 1 - TV(P, Q) = 0.5 (theory.md)
# i.i.d. acceptance: P(accepted = n) = alpha^n (1 - alpha) for n < K, alpha^K for n = K.
N_OUT_LAW = np.array([ALPHA**n * (1 - ALPHA) for n in range(K)] + [ALPHA**K])
PASS, FAIL = 1e-3, 1e-6


class ConstRNG:
    """A fake generator whose every uniform is ``value`` (a boundary probe)."""

    def __init__(self, value: float):
        self.value = value

    def random(self, size=None):
        return np.full(size, self.value)


def verifier(name: str):
    """Return the reference verifier or a registered mutant's function."""
    return reference.verify if name == "reference" else MUTANTS[name].func


def case(rng, n=N, num_draft=K, garbage=None):
    """Build n identical context-free rows with drafts drawn from Q; ``garbage`` fills p padding."""
    draft = rng.choice(V, size=(n, K), p=Q)
    q = np.broadcast_to(Q, (n, K, V))
    p = np.broadcast_to(P, (n, K + 1, V))
    nd = np.full(n, num_draft, dtype=np.int64)
    if garbage is not None:
        p = p.copy()
        p[:, num_draft + 1 :] = garbage  # positions past the bonus position num_draft
    return draft, q, p, nd


def gof(codes: np.ndarray, probs: np.ndarray) -> float:
    """Return the chi-square p-value of ``codes`` against ``probs``; 0 on an impossible cell."""
    if codes.min() < 0 or codes.max() >= probs.size:
        return 0.0
    counts = np.bincount(codes, minlength=probs.size)
    support = probs > 0
    if counts[~support].any():
        return 0.0
    return stats.chisquare(counts[support], codes.size * probs[support]).pvalue


def first_token_pvalue(name, rng):
    """Test the law of out[:, 0] against P."""
    out, _ = verifier(name)(*case(rng), rng)
    return gof(out[:, 0], P)


def pair_pvalue(name, rng):
    """Test the law of the first two generated tokens against P x P."""
    verify = verifier(name)
    out, n_out = verify(*case(rng), rng)
    nxt, _ = verify(*case(rng), rng)  # the next step, for rows whose step emitted one token
    second = np.where(n_out >= 2, out[:, 1], nxt[:, 0])
    return gof(out[:, 0] * (V + 1) + second, np.outer(P, np.r_[P, 0.0]).ravel())


def n_out_pvalue(name, rng):
    """Test the law of n_out against the chain rule's (accepted ~ truncated geometric)."""
    _, n_out = verifier(name)(*case(rng), rng)
    return gof(n_out - 1, N_OUT_LAW)


def bonus_pvalue(name, rng):
    """Test out[:, 0] against P on rows with no drafts whose p padding is a one-hot on token 1."""
    garbage = np.eye(V)[1]  # p = 0 under P: one emitted 1 is a failure
    out, _ = verifier(name)(*case(rng, num_draft=0, garbage=garbage), rng)
    return gof(out[:, 0], P)


LOSSLESS = ["reference", "leq_ratio", "recovered_id_eq_v", "no_bonus", "sample_and_match",
            "ignore_drafts", "shared_uniform"]  # shared_uniform: right first token, wrong pairs


@pytest.mark.parametrize("name", LOSSLESS)
def test_first_token_law_passes(name):
    rng = np.random.default_rng(101)
    assert first_token_pvalue(name, rng) > PASS


# Each distribution mutant with the check, on the base case, that exposes it.
DETECTORS = {
    "resample_from_p": first_token_pvalue,  # law min(p, q) + (1 - beta) p = [.45, 0, .25, .3]
    "unclamped_residual": first_token_pvalue,  # [.2, 0, .2, .6]; see the test below
    "shared_uniform": pair_pvalue,  # P(3, 3) = .06 instead of .04
    "reused_uniforms": first_token_pvalue,  # one coin for all rows: counts overdispersed
    "count_after_reject": first_token_pvalue,
    "bonus_from_last": bonus_pvalue,
    "accept_all": first_token_pvalue,  # [.44, 0, .26, .3]
    "lenient": first_token_pvalue,  # [.44, 0, .26, .3]
}


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_distribution_mutant_fails_and_reference_passes(name):
    rng = np.random.default_rng(202)
    check = DETECTORS[name]
    assert check("reference", rng) > PASS  # positive control, same check, same seed stream
    assert check(name, rng) < FAIL


def test_unclamped_residual_has_the_documented_law():
    rng = np.random.default_rng(212)
    # Signed inverse CDF over p - q = [.3, -.4, .2, -.1] (cum [.3, -.1, .1, 0], Z = .5) draws
    # 2 for uZ in [0, .1), 3 for uZ in [.1, .5) (count 4 clamped to 3): residual law
    # [0, 0, .2, .8]; first token = min(P, Q) + (1 - alpha) * that, worked by hand.
    law = np.minimum(P, Q) + (1 - ALPHA) * np.array([0.0, 0.0, 0.2, 0.8])
    out, _ = mutants.unclamped_residual(*case(rng), rng)
    assert gof(out[:, 0], law) > PASS
    assert P[3] < Q[3] and (out[:, 0] == 3).mean() > P[3] + 0.3  # a p < q token over-drawn


@pytest.mark.parametrize("name", ["reference", "no_bonus", "sample_and_match", "ignore_drafts"])
def test_pair_law_passes(name):
    rng = np.random.default_rng(303)
    assert pair_pvalue(name, rng) > PASS


def test_n_out_law_reference_passes():
    rng = np.random.default_rng(404)
    assert n_out_pvalue("reference", rng) > PASS


@pytest.mark.parametrize("name", ["no_bonus", "sample_and_match", "ignore_drafts"])
def test_lossless_controls_fail_tokens_per_step(name):
    rng = np.random.default_rng(505)
    assert MUTANTS[name].kind == "lossless-control"
    assert n_out_pvalue(name, rng) < FAIL
    _, n_out = verifier(name)(*case(rng, n=20_000), rng)
    # E[tokens/step] = (1 - alpha^(K+1)) / (1 - alpha) = 1.75 for the chain rule (theory.md).
    assert n_out.mean() < (1 - ALPHA ** (K + 1)) / (1 - ALPHA) - 0.1


def test_core_with_defaults_is_the_reference():
    rng = np.random.default_rng(550)
    batch = ragged(rng)
    want = reference.verify(*batch, np.random.default_rng(5))
    got = mutants._chain(*batch, np.random.default_rng(5))
    assert all(np.array_equal(x, y) for x, y in zip(want, got))


@pytest.mark.parametrize("name", ["leq_ratio", "recovered_id_eq_v"])
def test_boundary_mutants_match_reference_with_real_uniforms(name):
    rng = np.random.default_rng(560)
    batch = case(rng, n=20_000)
    want = reference.verify(*batch, np.random.default_rng(6))
    got = verifier(name)(*batch, np.random.default_rng(6))
    assert all(np.array_equal(x, y) for x, y in zip(want, got))


def test_leq_ratio_accepts_p_zero_draft_at_u_zero():
    rng = np.random.default_rng(606)
    draft, q, p, nd = case(rng, n=8)
    draft[:, 0] = 1  # P[1] = 0: must never be emitted
    out, n_out = mutants.leq_ratio(draft, q, p, nd, ConstRNG(0.0))
    assert (out[:, 0] == 1).all() and (n_out >= 2).all()
    out, _ = reference.verify(draft, q, p, nd, ConstRNG(0.0))
    assert (out[:, 0] != 1).all()


def test_recovered_id_eq_v_at_top_uniform():
    rng = np.random.default_rng(707)
    top = ConstRNG(1 - 2**-53)  # the largest double numpy's random() can return
    draft, q, p, nd = case(rng, n=8)
    draft[:, 0] = 1  # rejected at u < 1 (p = 0): the recovered token is sampled
    nd[4:] = 0  # no drafts: the bonus token is sampled
    out, n_out = mutants.recovered_id_eq_v(draft, q, p, nd, top)
    assert (n_out == 1).all() and (out[:, 0] == V).all()
    out, _ = reference.verify(draft, q, p, nd, top)
    assert ((out[:, 0] >= 0) & (out[:, 0] < V)).all()


def ragged(rng, b=64, k=3, v=5, fill=None):
    """Build a random ragged batch; padding is ``fill`` (NaN / -1 ids) or random garbage."""
    p = rng.dirichlet(np.ones(v), size=(b, k + 1))
    q = rng.dirichlet(np.ones(v), size=(b, k))
    draft = np.stack([[rng.choice(v, p=q[i, j]) for j in range(k)] for i in range(b)])
    nd = rng.integers(0, k + 1, size=b)
    pad_q = np.arange(k)[None, :] >= nd[:, None]
    pad_p = np.arange(k + 1)[None, :] > nd[:, None]
    if fill == "nan":
        draft[pad_q], q[pad_q], p[pad_p] = -1, np.nan, np.nan
    else:
        draft[pad_q] = rng.integers(0, v, size=pad_q.sum())
        q[pad_q] = rng.dirichlet(np.ones(v), size=pad_q.sum())
        p[pad_p] = rng.dirichlet(np.ones(v), size=pad_p.sum())
    return draft, q, p, nd


@pytest.mark.parametrize("name", ["reference", *MUTANTS])
def test_contract_shaped_on_ragged_batch(name):
    rng = np.random.default_rng(808)
    draft, q, p, nd = ragged(rng)
    b, k, v = q.shape
    out, n_out = verifier(name)(draft, q, p, nd, rng)
    assert out.shape == (b, k + 1) and out.dtype == np.int64
    assert n_out.shape == (b,) and n_out.dtype == np.int64
    assert ((n_out >= 1) & (n_out <= nd + 1)).all()
    emitted = np.arange(k + 1)[None, :] < n_out[:, None]
    assert (out[~emitted] == -1).all()
    assert ((out[emitted] >= 0) & (out[emitted] < v)).all()
    out0, n0 = verifier(name)(draft[:0], q[:0], p[:0], nd[:0], rng)  # empty batch
    assert out0.shape == (0, k + 1) and n0.shape == (0,)
    out1, n1 = verifier(name)(draft[:, :0], q[:, :0], p[:, :1], 0 * nd, rng)  # K = 0
    assert out1.shape == (b, 1) and (n1 == 1).all() and ((out1 >= 0) & (out1 < v)).all()


@pytest.mark.parametrize("name", ["reference", *(n for n in MUTANTS if n != "global_generator")])  # not rng-driven
def test_padding_is_never_read_except_by_bonus_from_last(name):
    rng = np.random.default_rng(909)
    nan_batch = ragged(rng, fill="nan")
    junk = ragged(np.random.default_rng(909))  # same valid entries, different padding
    a = verifier(name)(*nan_batch, np.random.default_rng(1))
    b = verifier(name)(*junk, np.random.default_rng(1))
    same = all(np.array_equal(x, y) for x, y in zip(a, b))
    assert same != (name == "bonus_from_last")


def test_registry_metadata_and_import_paths():
    rng = np.random.default_rng(1010)
    assert len(MUTANTS) >= 12
    # A statistical negative control for every distribution mutant (a mutant nobody can catch
    # would be a defect of this file).
    assert set(DETECTORS) == {n for n, m in MUTANTS.items() if m.kind == "distribution"}
    batch = case(rng, n=16)
    for name, m in MUTANTS.items():
        assert m.name == name == m.func.__name__
        assert m.description and "\n" not in m.description
        assert m.mirrors
        assert m.kind in mutants.KINDS
        module, attr = f"specaudit.verifiers.zoo.chain:{name}".split(":")
        assert getattr(importlib.import_module(module), attr) is m.func
        assert m.func.mutant is m
        assert mutants.get(name) is m
        out, n_out = m(*batch, rng)  # Mutant.__call__ delegates to func
        assert out.shape == (16, K + 1) and n_out.shape == (16,)
    assert {m.kind for m in MUTANTS.values()} == set(mutants.KINDS)


def test_get_suggests_close_name():
    rng = np.random.default_rng(1111)
    for name in MUTANTS:
        i = rng.integers(len(name))
        typo = name[:i] + ("x" if name[i] != "x" else "y") + name[i + 1 :]  # one substitution
        with pytest.raises(KeyError, match=f"did you mean '{name}'"):
            mutants.get(typo)
    with pytest.raises(KeyError, match="did you mean 'resample_from_p'"):
        mutants.get("resample_from_q")
    with pytest.raises(KeyError, match="unknown mutant 'zzz'"):
        mutants.get("zzz")


def test_one_registry_holds_every_zoo():
    from specaudit.verifiers import zoo
    from specaudit.verifiers.zoo import logits as logits_zoo
    from specaudit.verifiers.zoo import loop as loop_zoo
    from specaudit.verifiers.zoo import seeded as seeded_zoo
    from specaudit.verifiers.zoo import stops as stops_zoo
    from specaudit.verifiers.zoo import tree as tree_zoo
    from specaudit.verifiers.zoo import vocab as vocab_zoo

    families = {"chain": MUTANTS, "logits": logits_zoo.MUTANTS, "loop": loop_zoo.MUTANTS, "seeded": seeded_zoo.MUTANTS,
                "stops": stops_zoo.MUTANTS, "tree": tree_zoo.MUTANTS, "draft-vocab": vocab_zoo.MUTANTS}
    assert list(zoo.MUTANTS) == [name for fam in families.values() for name in fam]  # definition order
    for family, members in families.items():
        assert zoo.family(family) == members
        for name, m in members.items():
            assert zoo.get(name) is m and zoo.get(name, family) is m and m.zoo == family
            assert isinstance(m, zoo.Mutant) and m.func.mutant is m
    assert {m.contract for m in logits_zoo.MUTANTS.values()} == {"logits"}
    # a processing mismatch names its hypothesis; the per-row (serving) mutants have none
    from specaudit.laws.processing import HYPOTHESES

    serving = {"penalties_without_drafts", "mask_target_only", "bias_draft_only", "batch_params_row0", "greedy_rows_sampled"}
    # ... nor does the filter-order mutant (its p is another engine's processing, not one wrong quantity), nor the
    # logprobs mutant (its tokens are right: the logprobs check finds it)
    assert {n for n, m in logits_zoo.MUTANTS.items() if m.diverges is None} == serving | {"sglang_speculative_order",
                                                                                          "logprobs_processed_as_raw"}
    assert {m.contract for m in vocab_zoo.MUTANTS.values()} == {"draft-vocab"} and len(vocab_zoo.MUTANTS) == 2
    assert all(m.diverges in HYPOTHESES for m in logits_zoo.MUTANTS.values() if m.diverges is not None)
    assert {m.algorithm for m in tree_zoo.MUTANTS.values()} == {"tree", "block"}
    assert len(seeded_zoo.MUTANTS) == 3 and all(m.seeded for m in seeded_zoo.MUTANTS.values())
    assert {m.contract for m in stops_zoo.MUTANTS.values()} == {"stops"} and all(m.func.stops for m in stops_zoo.MUTANTS.values())
    assert len(loop_zoo.MUTANTS) == 6 and all(m.func.specaudit_contract == "loop" for m in loop_zoo.MUTANTS.values())
    # a zoo-restricted lookup names only that zoo's mutants, as power and diagnosis need
    with pytest.raises(KeyError, match=r"unknown mutant 'unprocessed_q'; known: resample_from_p, "):
        mutants.get("unprocessed_q")
    with pytest.raises(KeyError, match=r"unknown logits mutant 'unprocessed_p' \(did you mean 'unprocessed_q'\?\)"):
        logits_zoo.get("unprocessed_p")


def test_registry_type():
    from specaudit.registry import Registry

    reg: Registry[int] = Registry("number")

    @reg.register("two")
    def _two() -> int:
        return 2

    reg.register("one", 1)
    reg.lazy("pi", "math:pi")
    assert reg.names() == ["two", "one", "pi"] and list(reg) == reg.names() and len(reg) == 3
    assert reg.spec("pi") == "math:pi" and reg.get("pi") == pytest.approx(3.14159) and reg.spec("pi") is None
    assert reg["one"] == 1 and "one" in reg and "three" not in reg
    assert reg.select(lambda v: v == 1) == {"one": 1}
    with pytest.raises(KeyError, match=r"unknown number 'onee' \(did you mean 'one'\?\); known: two, one, pi"):
        reg.get("onee")
    with pytest.raises(ValueError, match="already registered"):
        reg.register("one", 3)
