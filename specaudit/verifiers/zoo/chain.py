"""The mutant zoo: broken verifiers in the canonical contract, each mirroring a filed bug.

Every mutant has the signature of :func:`specaudit.verifiers.reference.verify`::

    verify(draft[B, K], q[B, K, V], p[B, K+1, V], num_draft[B], rng) -> (out[B, K+1], n_out[B])

and is a module-level function, so ``specaudit.verifiers.zoo.chain:NAME`` works as an import path. Most are
thin wrappers over one private core, :func:`_chain`, which is the reference algorithm (Leviathan
et al. 2023, Alg. 1) with switches; each switch away from the default is one bug, commented at
the place where it bites. The two lossless controls use different (correct) algorithms.

Kinds
-----
``distribution``
    The output law is wrong; a joint-law or goodness-of-fit check with ordinary uniforms must fail.
``boundary``
    Lossless almost surely; the bug shows only with adversarial uniforms (``u = 0`` or
    ``u = 1 - 2**-53``), so only a boundary probe can catch it; ``nan_rows_token0`` is lossless on
    valid rows and its bug shows only on NaN / inf / all-zero rows (the ``bad-rows`` probe).
``lossless-control``
    The output law is right but fewer tokens are emitted per step than the chain rule allows:
    the distribution checks must pass and the tokens/step check must fail.

Attributes
----------
MUTANTS : dict[str, Mutant]
    The chain mutants, keyed by name, in definition order (their entries of the one zoo
    registry, :data:`specaudit.verifiers.zoo.MUTANTS`). Each function also carries its entry
    as ``func.mutant``; :func:`get` looks a chain mutant up by name.

Notes
-----
A mutant never crashes and always returns contract-shaped output: ``out`` is int64 [B, K+1],
padded with -1 after ``n_out[b]`` tokens, ``1 <= n_out[b] <= num_draft[b] + 1``. Apart from
``bonus_from_last`` (whose bug is reading padding), no mutant reads draft ids, q rows or p rows
past ``num_draft[b]`` / the bonus position ``p[b, num_draft[b]]``. ``recovered_id_eq_v`` can
emit the id ``V``: that is its bug.

References
----------
Leviathan, Kalman, Matias 2023, "Fast Inference from Transformers via Speculative Decoding".
Bug reports are cited per mutant (``Mutant.mirrors``); see ``notes/peers.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

from specaudit.chains.sampling import sample_rows
from specaudit.contract.chain import assemble, chain_inputs
from specaudit.verifiers.zoo import mutant as zoo
from specaudit.verifiers.zoo.mutant import KINDS, Kind, Mutant, Verifier

__all__ = ["KINDS", "MUTANTS", "Mutant", "get"]


def get(name: str) -> Mutant:
    """Return the chain mutant ``name``; raise KeyError with the closest name otherwise."""
    return zoo.get(name, "chain")


def _register(kind: Kind, mirrors: str) -> Callable[[Verifier], Verifier]:
    """Register a chain-rule mutant (canonical contract, chain algorithm)."""
    return zoo.register(kind, mirrors)


# ---------------------------------------------------------------------------------------------
# Samplers and helpers
# ---------------------------------------------------------------------------------------------


def _sample_signed(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Draw by inverse CDF over the SIGNED cumulative sum of unclamped weights (a bug)."""
    # The residual p - q sums to 0, so "normalise by its sum" is 0/0; we take the normaliser the
    # correct code uses, Z = sum(max(p - q, 0)), and keep sample_rows' counting rule
    # idx = #{j : cum_j <= u Z}. cum is not monotone, so idx is no longer "the first j whose
    # cumulative weight exceeds u Z": tokens with p < q are drawn, residual tokens are missed.
    # E.g. p - q = [.3, -.4, .2, -.1]: cum = [.3, -.1, .1, 0], law [0, 0, .2, .8] instead of
    # [.6, 0, .4, 0]. The count can reach V; clamp it to V - 1 so this mutant is a pure law bug,
    # separate from recovered_id_eq_v.
    cum = np.cumsum(weights, axis=-1)
    total = np.maximum(weights, 0.0).sum(axis=-1)
    idx = (cum <= (u * total)[..., None]).sum(axis=-1)
    return np.minimum(idx, weights.shape[-1] - 1)


def _sample_unclamped(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Draw by inverse CDF at a float32 uniform with no clamp: id == V when u rounds to 1."""
    # vLLM #20531 / GHSA-8wr5-jm2h-8r4f: the recovered id came out == vocab_size. Symptom mirrored
    # here: GPU kernels draw float32 uniforms (torch.rand's default dtype); 1 - 2**-53 rounds to
    # 1.0f, u * total == total, every cumulative weight is <= the threshold and the count is V.
    # With real uniforms this needs u >= 1 - 2**-25: probability 3e-8 per draw.
    u32 = np.asarray(u).astype(np.float32).astype(np.float64)
    cum = np.cumsum(weights, axis=-1)
    return (cum <= (u32 * cum[..., -1])[..., None]).sum(axis=-1)  # missing: np.minimum(idx, V-1)


@chain_inputs
def _chain(
    draft: np.ndarray,
    q: np.ndarray,
    p: np.ndarray,
    num_draft: np.ndarray,
    rng: np.random.Generator,
    *,
    uniforms: Literal["position", "row", "batch", "zero"] = "position",
    leq: bool = False,
    leniency: float = 1.0,
    count: Literal["prefix", "all"] = "prefix",
    residual: Literal["clamped", "target", "signed", "fmax"] = "clamped",
    bonus: Literal["num_draft", "last", "none"] = "num_draft",
    sampler: Callable[[np.ndarray, np.ndarray], np.ndarray] = sample_rows,
) -> tuple[np.ndarray, np.ndarray]:
    """Run chain verification with the reference's defaults; every other switch value is a bug."""
    batch: int
    batch, k = draft.shape
    rows = np.arange(batch)
    valid = np.arange(k)[None, :] < num_draft[:, None]
    safe = np.where(valid, draft, 0)  # padding ids may be garbage: never index with them

    if uniforms == "position":
        u = rng.random((batch, k))
    elif uniforms == "row":
        u = np.broadcast_to(rng.random((batch, 1)), (batch, k))  # one coin for the whole row
    elif uniforms == "batch":
        u = np.broadcast_to(rng.random((1, k)), (batch, k))  # one coin per column, all rows
    else:
        u = np.zeros((batch, k))  # vllm-ascend #13766: kernel hard-codes u = 0
    p_x = np.take_along_axis(p[:, :k], safe[..., None], axis=2)[..., 0]
    q_x = np.take_along_axis(q, safe[..., None], axis=2)[..., 0]
    q_x = leniency * q_x  # lenient SD: accept with min(1, p / (l q)), l < 1
    if leq:
        accepted = valid & (u * q_x <= p_x)  # sglang #35771: u <= p/q accepts p = 0 when u = 0
    else:
        accepted = valid & (u * q_x < p_x)
    if count == "all":
        n_acc = accepted.sum(axis=1)  # HF PR #28508: accepts after the first rejection counted
    else:
        n_acc = np.cumprod(accepted, axis=1).sum(axis=1)
    rejected = n_acc < num_draft

    target = p[rows, n_acc]  # bonus position num_draft when nothing was rejected
    if bonus == "last":
        # Bonus read at p[:, K] whatever num_draft is: padding for ragged rows.
        target = np.where(rejected[:, None], target, p[:, k])
    if uniforms == "batch":
        u_tok = np.broadcast_to(rng.random(1), (batch,))  # the same coin for every row
    else:
        u_tok = rng.random(batch)
    if residual == "target":
        weights = target  # resample from p: the draft's accepted mass is counted twice
    elif k:  # "clamped", "signed" or "fmax"
        at = np.minimum(n_acc, k - 1)
        diff = target - q[rows, at]
        # fmax: CUDA's fmaxf(target - NaN, 0) drops the NaN to 0.0 (vLLM #41834), np.maximum keeps it
        clamp = np.fmax if residual == "fmax" else np.maximum
        weights = np.where(rejected[:, None], clamp(diff, 0.0), target)
    else:
        weights = target
    # p = q at the rejected position leaves an all-zero residual: sample from p instead.
    empty = weights.sum(axis=1) <= 0
    weights = np.where(empty[:, None], target, weights)
    token = sampler(weights, u_tok)
    if residual == "fmax":
        # vLLM #41834: an all-NaN q row leaves every residual score 0 and the reduction's first tile wins, index 0
        # (the very draft just rejected); no fallback to the target. Valid rows never get here (p = q rejects nothing).
        token = np.where(rejected & empty, 0, token)
    if residual == "signed" and k:
        # The clamp max(0, p - q) is missing: p - q goes to the sampler as is.
        signed = _sample_signed(np.where(empty[:, None], target, diff), u_tok)
        token = np.where(rejected, signed, token)

    emit = np.ones(batch, dtype=bool)
    if bonus == "none":
        # All drafts accepted: no bonus token. A row with no drafts still emits one from p.
        emit = rejected | (num_draft == 0)
    return assemble(draft, n_acc, token, emit)


# ---------------------------------------------------------------------------------------------
# Distribution mutants: the output law is wrong
# ---------------------------------------------------------------------------------------------


@_register("distribution", "Leviathan et al. 2023, Alg. 1 residual step; cf. vLLM PR #8320 review")
def resample_from_p(draft, q, p, num_draft, rng):
    """After a rejection, resample from p instead of norm(max(0, p - q))."""
    return _chain(draft, q, p, num_draft, rng, residual="target")


@_register("distribution", "Leviathan et al. 2023, Alg. 1: the clamp in norm(max(0, p - q))")
def unclamped_residual(draft, q, p, num_draft, rng):
    """Sample the recovered token from p - q without the clamp at 0 (signed inverse CDF)."""
    return _chain(draft, q, p, num_draft, rng, residual="signed")


@_register("distribution", "flashinfer PR #424 ('use unique uniform samples')")
def shared_uniform(draft, q, p, num_draft, rng):
    """Use one uniform per row for every acceptance test of the row (first token still right)."""
    return _chain(draft, q, p, num_draft, rng, uniforms="row")


@_register("distribution", "flashinfer PR #424 bug class (uniforms reused), across rows")
def reused_uniforms(draft, q, p, num_draft, rng):
    """Reuse the same uniforms for every row of the batch (rows become dependent)."""
    # Each row's marginal law is right; the rows share their coins, so counts over the batch
    # are wildly overdispersed and the residual tokens of all rejected rows coincide.
    return _chain(draft, q, p, num_draft, rng, uniforms="batch")


@_register("distribution", "HF transformers PR #28508 (n_matches miscounted)")
def count_after_reject(draft, q, p, num_draft, rng):
    """Count accepted drafts over the whole row, including those after the first rejection."""
    return _chain(draft, q, p, num_draft, rng, count="all")


@_register("distribution", "ragged-padding bug class: flashinfer #879, vLLM PR #46533")
def bonus_from_last(draft, q, p, num_draft, rng):
    """Draw the bonus token from p[:, K] whatever num_draft is (reads padding)."""
    return _chain(draft, q, p, num_draft, rng, bonus="last")


@_register("distribution", "vllm-ascend #13766 (kernel hard-coded u = 0)")
def accept_all(draft, q, p, num_draft, rng):
    """Hard-code the acceptance uniform to 0: every draft with p > 0 is accepted."""
    # Fed into the reference's strict test u q < p, u = 0 still rejects p = 0 drafts (0 < 0 is
    # false); with no top-k/top-p filtering p > 0 everywhere and, as reported, all are accepted.
    return _chain(draft, q, p, num_draft, rng, uniforms="zero")


@_register("distribution", "Leviathan et al. 2023 (lenience, appendix); fuzzy SD 2502.20704")
def lenient(draft, q, p, num_draft, rng):
    """Accept with min(1, p / (0.5 q)), residual unchanged: lossy by design."""
    return _chain(draft, q, p, num_draft, rng, leniency=0.5)


# ---------------------------------------------------------------------------------------------
# Boundary mutants: lossless almost surely, broken at an adversarial uniform
# ---------------------------------------------------------------------------------------------


@_register("boundary", "sglang #35771 (coin <= cumsum accepts p = 0 at coin = 0)")
def leq_ratio(draft, q, p, num_draft, rng):
    """Accept when u <= p/q (as u q <= p): a p = 0 draft is accepted when u = 0."""
    return _chain(draft, q, p, num_draft, rng, leq=True)


@_register("boundary", "vLLM #20531, GHSA-8wr5-jm2h-8r4f (recovered id == vocab_size)")
def recovered_id_eq_v(draft, q, p, num_draft, rng):
    """Sample recovered/bonus tokens by unclamped float32 inverse CDF: id == V at u = 1 - 2**-53."""
    return _chain(draft, q, p, num_draft, rng, sampler=_sample_unclamped)


@_register("boundary", "vLLM PR #41834 (comment of 2026-08-06: all-NaN draft_probs row recovers token 0), "
                      "fixed class: vLLM PR #45060")
def nan_rows_token0(draft, q, p, num_draft, rng):
    """Recover token 0 after a draft is rejected against an all-NaN q row (fmax drops the NaN; index 0 wins)."""
    # Lossless on valid rows; the bug shows only on bad input rows (the input domain's boundary), so only the
    # bad-rows probe (specaudit.checks.bad_rows, scenario bad-rows) catches it: it emits token 0, p = 0.
    return _chain(draft, q, p, num_draft, rng, residual="fmax")


@_register("boundary", "vllm-ascend PR #2881 (target_probs zeroed in place: the caller's buffer written to)")
def writes_target_probs(draft, q, p, num_draft, rng):
    """Verify as the reference, then zero the target probability of each emitted token in the caller's p."""
    # Lossless in its output; the bug is the write into an input the caller still holds (the next step, a
    # logprobs pass or a re-verification reads the zeroed entries), so only the inputs-unmodified probe sees it.
    out, n_out = _chain(draft, q, p, num_draft, rng)
    held = np.asarray(p)
    if held.flags.writeable:  # a read-only buffer would raise here; a mutant never crashes
        emitted = np.arange(out.shape[1])[None, :] < n_out[:, None]
        rows, cols = np.nonzero(emitted)
        held[rows, cols, out[rows, cols]] = 0.0
    return out, n_out


@_register("boundary", "vLLM PR #6034 (spec decode drew from the global generator, not the request's seeded one)")
def global_generator(draft, q, p, num_draft, rng):
    """Draw every uniform from numpy's global RNG (np.random.random) instead of rng: a seed reproduces nothing."""
    # Lossless (the global stream is as random as rng); the same seed gives another output on every call,
    # so only the determinism probe sees it, and it names numpy's global RNG as the source.
    return _chain(draft, q, p, num_draft, np.random)


# ---------------------------------------------------------------------------------------------
# Lossless controls: right law, fewer tokens per step
# ---------------------------------------------------------------------------------------------


@_register("lossless-control", "notes/theory.md (dropping the bonus keeps the law)")
def no_bonus(draft, q, p, num_draft, rng):
    """Emit no bonus token when every draft is accepted (n_out = num_draft; 1 from p if none)."""
    # Not a law bug: stopping after an accepted prefix leaves every emitted token with the right
    # conditional law; only tokens/step drops, by P(all accepted), and n_out != accepted + 1.
    return _chain(draft, q, p, num_draft, rng, bonus="none")


@_register("lossless-control", "notes/theory.md (sample-and-match is lossless, not to flag)")
@chain_inputs
def sample_and_match(draft, q, p, num_draft, rng):
    """Accept a draft iff it equals an independent sample from p; emit that sample on mismatch."""
    batch: int
    batch, k = draft.shape
    rows = np.arange(batch)
    valid = np.arange(k)[None, :] < num_draft[:, None]
    # One sample y_i ~ p_i per valid position; padding rows replaced, never read.
    weights = np.where(valid[..., None], p[:, :k], 1.0)
    y = sample_rows(weights.reshape(batch * k, p.shape[-1]), rng.random(batch * k)).reshape(batch, k)
    matched = valid & (draft == y)
    n_acc = np.cumprod(matched, axis=1).sum(axis=1)
    rejected = n_acc < num_draft
    bonus = sample_rows(p[rows, num_draft], rng.random(batch))  # p[b, num_draft[b]]
    if k:
        token = np.where(rejected, y[rows, np.minimum(n_acc, k - 1)], bonus)
    else:
        token = bonus
    return assemble(draft, n_acc, token)


@_register("lossless-control", "notes/theory.md (plain decoding: one token per step)")
def ignore_drafts(draft, q, p, num_draft, rng):
    """Ignore the drafts and emit one token from p[:, 0] (n_out = 1)."""
    draft = np.asarray(draft)
    batch: int
    batch, k = draft.shape
    token = sample_rows(p[:, 0], rng.random(batch)) if batch else np.zeros(0, dtype=np.int64)
    n_acc = np.zeros(batch, dtype=np.int64)
    return assemble(draft, n_acc, token)


#: The chain mutants of the one zoo registry, by name, in definition order.
MUTANTS: dict[str, Mutant] = zoo.family("chain")
