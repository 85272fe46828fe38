"""Exact checks: corners, contract clauses, determinism, padding, inputs, adversarial uniforms.

Statistics catch distribution bugs; many real bugs are exact (notes/peers.md) and show on one
call with the right input. A scenario with ``mode: exact`` (the shipped ``corners`` is in the
default suite) runs every probe below instead of a simulation, on its vocab, k and chains:
target rows give p, drafter rows give q. Every simulated chain scenario also runs
:data:`SCENARIO_PROBES` with its own chains (:func:`run_scenario_probes`): the contract
probes and the corners its inputs reach, so ``specaudit run X -s markov-v4`` checks determinism
and input mutation too. Each probe is a handful of small verifier calls; every call is validated
against the contract (``contract.validate_output``), its inputs are compared with copies taken
before the call, and whether numpy's legacy global RNG or Python's ``random`` moved during it is
recorded (the determinism probe names such a source).

=========================  ==========  =====================================================
check                      category    property
=========================  ==========  =====================================================
corner-empty-batch         contract    B = 0 -> out (0, K+1), n_out (0,)
corner-k0                  contract    K = 0 -> one token per row, p > 0
corner-zero-drafts         contract    num_draft = 0 -> exactly one token per row, p > 0
corner-p-equals-q          efficiency  p = q -> every draft accepted, n_out = num_draft + 1
corner-one-hot             contract    one-hot target -> every emitted token is the argmax
corner-one-hot-run         efficiency  ... accepted count = run of drafts equal to the argmax
corner-greedy-drafter      efficiency  one-hot q at x -> accept w.p. p(x), residual p without x,
                                       bonus ~ p_next (X^2, p-value under the run's Holm)
determinism                contract    same seed -> same output; another seed -> another output
                                       (unless the scenario's output law is degenerate: greedy)
replicas                   contract    shared seed, inputs a few ulps apart -> the same output (TP ranks)
padding-independence       contract    changing garbage past num_draft changes nothing
adversarial-uniforms       contract    uniforms 0.0 / 1 - 2**-53: no p = 0 token, no id >= V;
                                       "not applicable" unless scripted draws reached every
                                       tested draft and replacement, none bypassed (compiled)
inputs-unmodified          contract    draft, q, p, num_draft are never written to
contract-clauses           contract    every clause of the contract held on every call
=========================  ==========  =====================================================

The p = q and one-hot corners run with a seeded Generator and with both phases of
:class:`specaudit.contract.uniforms.ScriptedUniforms`. A verifier that takes p as logits and
softmaxes them itself (the logits contract; the vLLM >= 0.16 adapter) sees p and q differ by
float32 rounding: p = q is judged within that bound (:func:`softmax_rounding`), stated in the
message. Under the logits contract the probes drive the verifier on ``log q``, ``log p`` with
identity processing; block-verification scenarios run the probes that hold for any lossless
verifier (:data:`ANY_ALGORITHM`); a lazy large-vocabulary scenario gets fewer rows per probe
(:data:`PROBE_FLOATS`). Efficiency corners hold for the chain rule
(Leviathan et al. 2023), not for every lossless verifier (sample-and-match accepts less), so
``--allow-inefficient`` keeps them from gating. Each probe runs on its own: a contract breach
fails the check that met it, naming the clause; a crash makes that probe ERROR (with the user's
traceback in its data) and the others still run; a timeout stops the probes (a hang would hang
every later one).
"""

from __future__ import annotations

import random as _pyrandom
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from specaudit.adapters.randomness import bypassed, hashed, op_draws, unreachable
from specaudit.adapters.torch import takes_logits
from specaudit.chains.sampling import sample_rows
from specaudit.checks.replay import Call, recorded, source_of
from specaudit.contract.chain import CLAUSES, validate_output
from specaudit.contract.logits import LogitsParams
from specaudit.contract.uniforms import ScriptedUniforms
from specaudit.errors import ContractError, VerifierCrash, VerifierTimeout
from specaudit.results import Category, CheckResult, Status
from specaudit.stats import gof as stats

#: Rows of most probes (the greedy-drafter corner uses the scenario's ``samples``).
PROBE_ROWS = 64
#: Floats one probe input may hold (q and p): a large vocabulary gets fewer rows (at least 4).
PROBE_FLOATS = 4_000_000
#: Floats (q and p) a recorded failing call may keep when its failing row alone does not fail again.
CALL_FLOATS = 20_000
#: float32 unit roundoff, 2**-24: the relative error of one float32 operation (Higham 2002, eq. 2.4).
F32_UNIT = 2.0**-24
#: Draft configurations (target row, greedy draft) of the greedy-drafter corner.
GREEDY_CONFIGS = 4
CONTRACT, EFFICIENCY = Category.CONTRACT, Category.EFFICIENCY


@dataclass(frozen=True)
class Inputs:
    """One verifier call's inputs in the canonical contract."""

    draft: np.ndarray  # [B, K] int64
    q: np.ndarray  # [B, K, V] float64
    p: np.ndarray  # [B, K+1, V] float64
    num_draft: np.ndarray  # [B] int64

    @property
    def vocab(self) -> int:
        """Return V."""
        return self.p.shape[-1]

    def copy(self) -> Inputs:
        """Return a deep copy."""
        return Inputs(self.draft.copy(), self.q.copy(), self.p.copy(), self.num_draft.copy())

    def first_change(self, after: Inputs) -> str | None:
        """Describe the first entry that differs in ``after`` (a verifier wrote into it), or None."""
        for name in ("draft", "q", "p", "num_draft"):
            a, b = getattr(self, name), getattr(after, name)
            if a.shape != b.shape or a.dtype != b.dtype:
                return f"{name} changed shape/dtype from {a.shape} {a.dtype} to {b.shape} {b.dtype}"
            diff = ~((a == b) | (np.isnan(a) & np.isnan(b)) if a.dtype.kind == "f" else (a == b))
            if diff.any():
                where = tuple(int(i) for i in np.argwhere(diff)[0])
                return f"{name}{list(where)} {a[where]:.6g} -> {b[where]:.6g} ({int(diff.sum())} entries changed)"
        return None


@dataclass(frozen=True)
class ExactOutcome:
    """What the exact probes of one scenario found."""

    checks: tuple[CheckResult, ...]
    error: BaseException | None = None  # VerifierCrash / VerifierTimeout that stopped the probes
    calls: int = 0
    verifier_seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    def joined(self, other: ExactOutcome) -> ExactOutcome:
        """Return both outcomes' checks, calls and seconds as one (the first error wins; ``rows`` add up)."""
        info = {**other.info, **self.info}
        if "rows" in self.info or "rows" in other.info:
            info["rows"] = self.info.get("rows", 0) + other.info.get("rows", 0)
        return ExactOutcome(self.checks + other.checks, self.error if self.error is not None else other.error,
                            self.calls + other.calls, self.verifier_seconds + other.verifier_seconds, info)


def result_of(name: str, category: Category, ok: bool, summary: str, **data: Any) -> CheckResult:
    return CheckResult(name, category, Status.PASSED if ok else Status.FAILED, summary, data=data)


def skipped(name: str, category: Category, reason: str, **data: Any) -> CheckResult:
    return CheckResult(name, category, Status.SKIPPED, f"not applicable: {reason}", data={"reason": reason, **data})


class Prober:
    """Calls the verifier on probe inputs, validating every output and watching the inputs."""

    def __init__(self, verify: Callable[..., Any], spec: Any, seed: int, logits_input: bool = False):
        self.verify = verify
        self.target, self.drafter = spec.chains()
        self.vocab, self.k = spec.vocab, spec.k
        # a large vocabulary (a lazy chain) gets fewer rows per probe: p and q stay within PROBE_FLOATS
        self.probe_rows = int(np.clip(PROBE_FLOATS // ((2 * self.k + 1) * self.vocab), 4, PROBE_ROWS))
        # p reaches the acceptance step through the verifier's own float32 softmax of log p (the logits
        # contract, vLLM >= 0.16): p and q then differ by rounding and p = q is judged within its bound
        self.logits_input = logits_input
        self.samples, self.batch = spec.samples, spec.batch
        self.seed = seed
        self.greedy = getattr(spec, "mode", "sample") == "greedy"  # temperature 0: the output is the argmax of p
        # a one-hot drafter (greedy, n-gram): probe rows keep q one-hot at each draft, as the scenario does
        self.one_hot_q = _one_hot_chain(self.drafter)
        self.calls = self.rows = 0
        self.seconds = 0.0
        self.check = ""  # name of the check now probing
        self.breaches: list[tuple[str, str, str]] = []  # (check, clause, message)
        self.mutations: list[tuple[str, str]] = []  # (check, what changed)
        # calls during which a global source moved: numpy's legacy RNG, Python's random (determinism names it);
        # watched only while ``watch`` is set (a snapshot of numpy's legacy state costs ~0.2 ms)
        self.moved: dict[str, int] = {"numpy": 0, "python": 0}
        self.watch = False
        self.deterministic: bool | None = None  # the determinism probe's same-seed verdict, reused by padding
        self.last: tuple[Inputs, dict[str, Any] | None] | None = None  # the last call's inputs and random source
        self.breach_call: dict[str, Any] | None = None  # the first contract breach's call, replayable
        self.mutation_call: dict[str, Any] | None = None  # the first call that wrote into its inputs, replayable

    def rng(self, tag: str) -> np.random.Generator:
        """Return a Generator fixed by the scenario seed and ``tag``."""
        return np.random.default_rng(np.random.SeedSequence([self.seed, zlib.crc32(tag.encode())]))

    def call(self, inputs: Inputs, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Call the verifier on a copy of ``inputs``; return validated ``(out, n_out)``; record breaches and writes."""
        given = inputs.copy()  # the verifier gets a copy: ``inputs`` stays pristine for the checks
        self.last = (inputs, source_of(rng))
        watch = self.watch
        if watch:
            np_state, py_state = np.random.get_state(legacy=False), _pyrandom.getstate()
        t0 = time.perf_counter()
        try:
            result = self.verify(given.draft, given.q, given.p, given.num_draft, rng)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1
            self.rows += inputs.draft.shape[0]
            if watch:
                self.moved["numpy"] += not same_state(np_state, np.random.get_state(legacy=False))
                self.moved["python"] += py_state != _pyrandom.getstate()
        change = inputs.first_change(given)
        if change is not None:
            if not self.mutations:
                self.mutation_call = self.record("inputs-unmodified")
            self.mutations.append((self.check, change))
        try:
            return validate_output(result, inputs.draft, inputs.num_draft, self.vocab)
        except ContractError as exc:
            if not self.breaches:
                self.breach_call = self.record(f"clause:{exc.clause}")
            self.breaches.append((self.check, exc.clause, exc.detail))
            raise

    def record(self, rule: str, last: tuple[Inputs, dict[str, Any] | None] | None = None) -> dict[str, Any] | None:
        """Return the last call (or ``last``) as a replayable failing call (``Call.to_dict``): its failing row alone
        when that row fails again by itself, else the whole call if small; None when a replay does not fail again."""
        last = self.last if last is None else last
        if last is None or last[1] is None or self.logits_input:
            return None
        inputs, source = last[0], last[1]
        return recorded(self.verify, Call(inputs.draft, inputs.q, inputs.p, inputs.num_draft, source, rule), CALL_FLOATS)

    # ---- input builders -------------------------------------------------------------------

    def rows_of(self, chain: Any, n: int, rng: np.random.Generator) -> np.ndarray:
        """Return ``n`` next-token laws [n, V] of ``chain`` in random states (random prefix hashes for a lazy chain)."""
        states = getattr(chain, "n_states", None)
        drawn = rng.integers(states, size=n) if states is not None else rng.integers(0, 2**63, size=n).astype(np.uint64)
        return np.asarray(chain.probs(drawn), dtype=np.float64)

    def garbage(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Return ``n`` random laws with every entry > 0 (padding is never zeros)."""
        g = rng.dirichlet(np.ones(self.vocab), size=n) + 1e-3
        return g / g.sum(axis=1, keepdims=True)

    def standard(self, rng: np.random.Generator, batch: int, k: int | None = None, num_draft: Any = None) -> Inputs:
        """Return a ragged batch: p from target rows, q from drafter rows, drafts drawn from q, garbage padding."""
        k = self.k if k is None else k
        v = self.vocab
        p = self.rows_of(self.target, batch * (k + 1), rng).reshape(batch, k + 1, v)
        q = self.rows_of(self.drafter, batch * k, rng).reshape(batch, k, v)
        draft = sample_rows(q.reshape(-1, v), rng.random(batch * k)).reshape(batch, k).astype(np.int64)
        nd = rng.integers(0, k + 1, size=batch) if num_draft is None else np.broadcast_to(num_draft, (batch,))
        nd = np.array(nd, dtype=np.int64)
        pad = np.arange(k)[None, :] >= nd[:, None]
        draft[pad] = rng.integers(v, size=int(pad.sum()))
        q[pad] = self.garbage(int(pad.sum()), rng)
        pad_p = np.arange(k + 1)[None, :] > nd[:, None]
        p[pad_p] = self.garbage(int(pad_p.sum()), rng)
        return Inputs(draft, q, p, nd)


def _one_hot_chain(chain: Any) -> bool:
    """Return True when every next-token law of a tabular ``chain`` is one-hot (False for a lazy chain)."""
    n = getattr(chain, "n_states", None)
    if n is None or n > 1 << 16:
        return False
    return bool(np.all(np.max(np.asarray(chain.probs(np.arange(n))), axis=1) == 1.0))


def _same_chain(a: Any, b: Any) -> bool:
    """Return True when two tabular chains give the same next-token law in every state."""
    if a is b:
        return True
    n = getattr(a, "n_states", None)
    if n is None or n != getattr(b, "n_states", None) or n > 1 << 16:
        return False
    return bool(np.array_equal(np.asarray(a.probs(np.arange(n))), np.asarray(b.probs(np.arange(n)))))


def same_state(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Return True when two states of numpy's legacy global RNG are equal."""
    return bool(a["state"]["pos"] == b["state"]["pos"] and np.array_equal(a["state"]["key"], b["state"]["key"])
                and a["has_gauss"] == b["has_gauss"])


def _emitted(n_out: np.ndarray, width: int) -> np.ndarray:
    return np.arange(width)[None, :] < n_out[:, None]


def _zero_p_emitted(inputs: Inputs, out: np.ndarray, n_out: np.ndarray) -> list[str]:
    """Return 'row b position j: token t has p = 0' for every emitted token of target probability 0."""
    emitted = _emitted(n_out, out.shape[1])
    tok = np.where(emitted, out, 0)
    p_tok = np.take_along_axis(inputs.p, tok[..., None], axis=2)[..., 0]
    rows, cols = np.nonzero(emitted & (p_tok <= 0))
    return [f"row {b} position {j}: token {out[b, j]} has p = 0" for b, j in zip(rows.tolist(), cols.tolist())]


def rng_sources(pr: Any, tag: str) -> list[tuple[str, np.random.Generator]]:
    """Return a seeded Generator and both phases of ScriptedUniforms, labelled."""
    return [
        ("seeded rng", pr.rng(tag)),
        ("uniforms 0.0, 1-2**-53, ...", ScriptedUniforms(0)),
        ("uniforms 1-2**-53, 0.0, ...", ScriptedUniforms(1)),
    ]


# ---- corners -------------------------------------------------------------------------------


def corner_empty_batch(pr: Prober) -> CheckResult:
    """B = 0: out has shape (0, K+1) and n_out (0,)."""
    k, v = pr.k, pr.vocab
    empty = Inputs(np.zeros((0, k), np.int64), np.zeros((0, k, v)), np.zeros((0, k + 1, v)), np.zeros(0, np.int64))
    pr.call(empty, pr.rng("empty"))
    return result_of("corner-empty-batch", CONTRACT, True, f"B = 0: out (0, {k + 1}) and n_out (0,), integer dtypes")


def _one_token_rows(name: str, pr: Prober, inputs: Inputs, what: str) -> CheckResult:
    out, n_out = pr.call(inputs, pr.rng(name))
    bad = np.flatnonzero(n_out != 1)
    if bad.size:
        b = int(bad[0])
        return result_of(name, CONTRACT, False, f"{what}: row {b} emitted {n_out[b]} tokens, expected exactly 1", rows=bad[:10].tolist(),
                         call=pr.record("accept-all"))
    zero = _zero_p_emitted(inputs, out, n_out)
    if zero:
        return result_of(name, CONTRACT, False, f"{what}: {zero[0]} ({len(zero)} rows)", rows=zero[:10],
                         call=pr.record("p-positive"))
    return result_of(name, CONTRACT, True, f"{what}: one token per row, each with p > 0 ({inputs.draft.shape[0]} rows)")


def corner_k0(pr: Prober) -> CheckResult:
    """K = 0: draft (B, 0), p (B, 1, V): one token from p per row."""
    inputs = pr.standard(pr.rng("k0/inputs"), pr.probe_rows, k=0)
    return _one_token_rows("corner-k0", pr, inputs, "K = 0")


def corner_zero_drafts(pr: Prober) -> CheckResult:
    """num_draft = 0 on every row (K slots of garbage): exactly one token from p[:, 0]."""
    inputs = pr.standard(pr.rng("zero-drafts/inputs"), pr.probe_rows, num_draft=0)
    return _one_token_rows("corner-zero-drafts", pr, inputs, f"num_draft = 0 of K = {pr.k}")


def corner_p_equals_q(pr: Prober) -> CheckResult:
    """p = q at every draft position: u q(x) < p(x) for any u < 1, so every draft is accepted.

    For a verifier that takes p as logits and softmaxes them itself (:attr:`Prober.logits_input`)
    p and q differ by float32 rounding (:func:`softmax_rounding`, bound delta): a rejection is then
    allowed where the uniform lies within delta of 1, and a seeded rng may meet such uniforms
    (about delta per draft); at uniforms 1 - 2 delta every draft must still be accepted.
    """
    name = "corner-p-equals-q"
    if pr.k == 0:
        return skipped(name, EFFICIENCY, "k = 0: no draft to accept")
    inputs = pr.standard(pr.rng("p=q/inputs"), pr.probe_rows)
    valid = np.arange(pr.k)[None, :] < inputs.num_draft[:, None]
    inputs.q[valid] = inputs.p[:, : pr.k][valid]
    draft = sample_rows(inputs.q.reshape(-1, pr.vocab), pr.rng("p=q/drafts").random(inputs.q.shape[0] * pr.k))
    inputs.draft[valid] = draft.reshape(inputs.draft.shape)[valid]
    sources = rng_sources(pr, "p=q")
    delta = 0.0
    if pr.logits_input:
        delta = softmax_rounding(inputs.p[:, : pr.k][valid])
        sources.append((f"uniforms 1 - 2 delta = {1 - 2 * delta:.9f}", ConstantUniforms(1.0 - 2.0 * delta)))
    drafts = int(inputs.num_draft.sum())
    for label, rng in sources:
        out, n_out = pr.call(inputs.copy(), rng)
        bad = np.flatnonzero(n_out != inputs.num_draft + 1)
        if not bad.size:
            continue
        b = int(bad[0])
        where = (f"p = q ({label}): row {b} has n_out = {n_out[b]}, expected num_draft + 1 = {inputs.num_draft[b] + 1} "
                 f"({bad.size} of {n_out.size} rows)")
        if not pr.logits_input:
            return result_of(name, EFFICIENCY, False, f"{where}: a draft with p = q must always be accepted, then a bonus drawn",
                           rows=bad[:10].tolist(), source=label, call=pr.record("accept-all"))
        if isinstance(rng, ConstantUniforms):
            return result_of(
                name, EFFICIENCY, False,
                f"{where}: logits input, so p and q differ by float32 softmax rounding, at most delta = {delta:.3g} "
                f"relative ({_rounding_basis(pr, inputs)}); every uniform here is 1 - 2 delta, below p/q, so every draft "
                "must be accepted: the verifier rejects drafts with p = q materially",
                rows=bad[:10].tolist(), source=label, delta=delta)
        chance = _rounding_chance(bad.size, drafts, delta) if label == "seeded rng" else 1.0
        if chance < DEGENERATE:
            return result_of(
                name, EFFICIENCY, False,
                f"{where}: logits input, float32 softmax rounding (delta = {delta:.3g}) rejects a draft with p = q "
                f"with probability at most delta, so {bad.size} rejections of {drafts} drafts have chance <= {chance:.2g}: "
                "the verifier rejects drafts with p = q materially",
                rows=bad[:10].tolist(), source=label, delta=delta)
    if pr.logits_input:
        return result_of(
            name, EFFICIENCY, True,
            f"p = q up to float32 softmax rounding (logits input: delta = {delta:.3g}, {_rounding_basis(pr, inputs)}): every "
            f"draft accepted at uniforms 1 - 2 delta; rejections only where a uniform lies within delta of 1 "
            f"({pr.probe_rows} ragged rows x {len(sources)} uniform sources)", delta=delta)
    return result_of(name, EFFICIENCY, True,
                   f"p = q: every draft accepted, n_out = num_draft + 1 on {pr.probe_rows} ragged rows x 3 uniform sources")


def softmax_rounding(p_rows: np.ndarray) -> float:
    """Return a bound on |p'(x) / q'(x) - 1| when p' and q' are float32 softmaxes of ``log p`` (p = q).

    Notes
    -----
    First-order error analysis of ``exp(x - max x) / sum exp(x - max x)`` in float32 (unit
    roundoff u = 2**-24; Higham 2002, sec. 3.1 and 4.2; Blanchard, Higham and Higham 2021,
    "Accurately computing the log-sum-exp and softmax functions", IMA J. Numer. Anal. 41):
    rounding the float64 logit x to float32 and the max m, and the subtraction, perturb the
    exponent by at most ``u (|x| + |m| + |x - m|)``; ``exp`` adds 2u (1 ulp); the sum of V
    positive terms adds (V - 1) u; the division u. So p' is within
    ``e_x + max_j e_j + V u`` of p (e_j the exponent error plus 2u), q' (the same softmax, or a
    float32 cast of q) within the same, and the quotient p'/q' adds u. The bound is the worst row,
    doubled for second-order terms. Entries with p = 0 are -inf logits and round exactly.
    """
    rows = np.asarray(p_rows, dtype=np.float64).reshape(-1, p_rows.shape[-1])
    with np.errstate(divide="ignore"):
        logits = np.log(rows)
    finite = np.isfinite(logits)
    mag = np.where(finite, np.abs(logits), 0.0)
    top = np.max(np.where(finite, logits, -np.inf), axis=1, keepdims=True)
    spread = np.where(finite, np.abs(logits - top), 0.0)
    exponent = F32_UNIT * (mag + np.abs(top) + spread) + 2 * F32_UNIT
    one = exponent.max(axis=1) * 2 + rows.shape[1] * F32_UNIT  # e_x + max_j e_j + V u, worst x of the row
    return float(2 * (2 * one.max(initial=0.0) + F32_UNIT))


def _rounding_basis(pr: Prober, inputs: Inputs) -> str:
    """Say what the rounding bound was computed from (V and the largest |log p| at the drafts)."""
    rows = inputs.p[:, : pr.k][np.arange(pr.k)[None, :] < inputs.num_draft[:, None]]
    with np.errstate(divide="ignore"):
        mag = np.abs(np.log(rows[rows > 0])) if rows.size else np.zeros(1)
    return f"V = {pr.vocab}, |log p| <= {float(mag.max(initial=0.0)):.3g}"


def _rounding_chance(rejections: int, drafts: int, delta: float) -> float:
    """Return an upper bound on P(at least ``rejections`` of ``drafts`` rejected), each with probability <= delta."""
    bound = 1.0
    for r in range(1, rejections + 1):  # C(n, r) delta^r <= (n delta)^r / r!
        bound *= drafts * delta / r
    return min(1.0, bound)


class ConstantUniforms(ScriptedUniforms):
    """Scripted uniforms that all equal ``value`` (the p = q corner's test just below its rounding band)."""

    def __init__(self, value: float, seed: int = 0):
        super().__init__(0, seed)
        self.value = float(value)

    def _next(self, n: int, dtype: Any, method: str) -> np.ndarray:
        super()._next(n, dtype, method)  # counts the draws
        return np.full(int(n), self.value, dtype=np.dtype(dtype))


def corner_one_hot(pr: Prober) -> list[CheckResult]:
    """One-hot target: tokens are the argmax; accepted count = run of drafts equal to it."""
    rng = pr.rng("one-hot/inputs")
    inputs = pr.standard(rng, pr.probe_rows)
    b_count, k = inputs.draft.shape[0], pr.k
    top = np.argmax(pr.rows_of(pr.target, b_count * (k + 1), rng), axis=1).reshape(b_count, k + 1)
    inputs.p[:] = 0.0
    np.put_along_axis(inputs.p, top[..., None], 1.0, axis=2)
    valid = np.arange(k)[None, :] < inputs.num_draft[:, None]
    # half the drafts are the argmax (where q gives it mass), the rest stay as drawn from q
    can = np.take_along_axis(inputs.q, top[:, :k, None], axis=2)[..., 0] > 0
    hit = valid & can & (rng.random((b_count, k)) < 0.5)
    inputs.draft[hit] = top[:, :k][hit]
    run = np.cumprod(valid & (inputs.draft == top[:, :k]), axis=1).sum(axis=1)
    token_fail = run_fail = None
    calls: dict[str, Any] = {}
    for label, src in rng_sources(pr, "one-hot"):
        out, n_out = pr.call(inputs.copy(), src)
        wrong = _emitted(n_out, k + 1) & (out != top)
        if token_fail is None and wrong.any():
            calls["token"] = pr.record("argmax")
            b, j = (int(x) for x in np.argwhere(wrong)[0])
            token_fail = (
                f"one-hot target ({label}): row {b} position {j} emitted {out[b, j]}, the target's only token is "
                f"{top[b, j]} (drafts {inputs.draft[b, : inputs.num_draft[b]].tolist()}, output {out[b, : n_out[b]].tolist()}); "
                f"{int(wrong.any(axis=1).sum())} of {b_count} rows wrong"
            )
        short = np.flatnonzero(n_out != run + 1)
        if run_fail is None and short.size:
            calls["run"] = pr.record("argmax-run")
            b = int(short[0])
            run_fail = (
                f"one-hot target ({label}): row {b} accepted {n_out[b] - 1} drafts, the run of drafts equal to the "
                f"argmax is {run[b]} ({short.size} of {b_count} rows)"
            )
    return [
        result_of("corner-one-hot", CONTRACT, token_fail is None,
                token_fail or f"one-hot target: every emitted token is the argmax ({b_count} ragged rows x 3 uniform sources)",
                **({"call": calls["token"]} if token_fail else {})),
        result_of("corner-one-hot-run", EFFICIENCY, run_fail is None,
                run_fail or "one-hot target: accepted count = run of drafts equal to the argmax, replacement = argmax",
                **({"call": calls["run"]} if run_fail else {})),
    ]


#: Batch sizes the small-batches probe calls with (cycled over its rows): the batches of a decode step.
SMALL_BATCHES = (1, 2, 3, 5, 7, 15)


def _in_batches(pr: Prober, inputs: Inputs, src: np.random.Generator, sizes: tuple[int, ...],
                calls: list[tuple[int, int, Any]] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Call the verifier on ``inputs`` cut into batches of ``sizes`` rows (cycled); return the joined outputs.

    ``calls``, when given, gets (start, stop, the call as :attr:`Prober.last`) of each batch."""
    b_count = inputs.draft.shape[0]
    out = np.full((b_count, pr.k + 1), -1, dtype=np.int64)
    n_out = np.zeros(b_count, dtype=np.int64)
    start, i = 0, 0
    while start < b_count:
        stop = min(b_count, start + sizes[i % len(sizes)])
        part = Inputs(inputs.draft[start:stop].copy(), inputs.q[start:stop].copy(), inputs.p[start:stop].copy(),
                      inputs.num_draft[start:stop].copy())
        out[start:stop], n_out[start:stop] = pr.call(part, src)
        if calls is not None:
            calls.append((start, stop, pr.last))
        start, i = stop, i + 1
    return out, n_out


def small_batches(pr: Prober) -> list[CheckResult]:
    """Batches of 1 to 15 rows (a decode step's): no token of probability 0, and the run that p and q force.

    Engines take other kernels and buffers for small batches. The scenario's rows are changed so
    that every chain-rule decision is forced: at each draft x, p(x) is raised halfway from q(x) to 1
    (accepted for sure: p >= q) or set to 0 (rejected for sure), the rest of the row rescaled.
    ``small-batches`` (contract): no emitted token has probability 0 in p at its position (an
    accepted draft with p(x) = 0, an id from an empty row); ``small-batches-run`` (efficiency): the
    accepted count is the run of forced acceptances (a lossless verifier that is not the chain rule,
    e.g. sample-and-match, may accept fewer). Rows with K drafts; calls cycle through
    :data:`SMALL_BATCHES` rows, two seeds.
    """
    name, run_name = "small-batches", "small-batches-run"
    if pr.k == 0:
        return [skipped(name, CONTRACT, "K = 0: no draft to decide"), skipped(run_name, EFFICIENCY, "K = 0")]
    rng = pr.rng("small/inputs")
    rows = min(sum(SMALL_BATCHES), max(pr.probe_rows, 4))  # a large vocabulary: its probe budget (PROBE_FLOATS)
    inputs = pr.standard(rng, rows, num_draft=pr.k)
    k = pr.k
    at = inputs.draft[..., None]
    p_x = np.take_along_axis(inputs.p[:, :k], at, axis=2)[..., 0]
    q_x = np.take_along_axis(inputs.q, at, axis=2)[..., 0]
    accept = (rng.random((rows, k)) < 0.7) | (p_x >= 1.0)  # a p(x) = 1 row cannot be made to reject
    # p(x) halfway to 1 keeps p - q >= 0.005 (float32 softmax rounding of a logits verifier is ~6e-8); q(x) near 1: p(x) = 1
    want = np.where(accept, np.where(q_x > 0.99, 1.0, np.maximum(p_x, (1.0 + q_x) / 2)), 0.0)
    rest = 1.0 - p_x
    scale = np.where(rest > 0, (1.0 - want) / np.where(rest > 0, rest, 1.0), 0.0)
    inputs.p[:, :k] *= scale[..., None]
    np.put_along_axis(inputs.p[:, :k], at, want[..., None], axis=2)
    run = np.cumprod(accept, axis=1).sum(axis=1)
    sizes = "/".join(map(str, SMALL_BATCHES))
    tokens: list[str] = []
    runs: list[str] = []
    recorded: dict[str, Any] = {}

    def batch_of(b: int) -> Any:
        return next(last for lo, hi, last in batches if lo <= b < hi)

    for s in range(2):
        batches: list[tuple[int, int, Any]] = []
        out, n_out = _in_batches(pr, inputs, pr.rng(f"small/seed{s}"), SMALL_BATCHES, batches)
        emitted = _emitted(n_out, k + 1)
        mass = np.take_along_axis(inputs.p, np.where(emitted, out, 0)[..., None], axis=2)[..., 0]
        zero = np.argwhere(emitted & (mass <= 0))
        if zero.size and "token" not in recorded:
            recorded["token"] = pr.record("p-positive", batch_of(int(zero[0][0])))
        forced = np.flatnonzero(n_out != run + 1)
        if forced.size and "run" not in recorded:
            recorded["run"] = pr.record("forced-run", batch_of(int(forced[0])))
        for b, j in zero[:3].tolist():
            tokens.append(f"row {b} emitted token {out[b, j]} at position {j}, of probability 0 in p there "
                          f"(output {out[b, : n_out[b]].tolist()}, drafts {inputs.draft[b].tolist()})")
        for b in forced[:3].tolist():
            runs.append(f"row {b} accepted {n_out[b] - 1} drafts where p and q force {run[b]}")
    where = f"in batches of {sizes} rows"
    return [
        result_of(name, CONTRACT, not tokens, f"{where}: {tokens[0]}; {len(tokens)} finding(s)" if tokens else
                  f"{rows} rows {where}, 2 seeds: no token of probability 0", findings=tokens[:20],
                  **({"call": recorded.get("token")} if tokens else {})),
        result_of(run_name, EFFICIENCY, not runs, f"{where}: {runs[0]}; {len(runs)} finding(s)" if runs else
                  f"{rows} rows {where}, 2 seeds: every forced accept and reject held", findings=runs[:20],
                  **({"call": recorded.get("run")} if runs else {})),
    ]


def corner_greedy_drafter(pr: Prober) -> CheckResult:
    """Greedy drafter (one-hot q at x): accept w.p. p(x), residual p without x, bonus ~ p_next.

    Notes
    -----
    With q = one-hot(x), norm(max(p - q, 0)) is p with x removed, renormalised, so the outcome
    (accepted and bonus z) has probability p(x) p_next(z) and (rejected, replacement y) has
    p(y) for y != x, 0 for y = x. Pearson X^2 of the 2V outcome counts per configuration (cells
    merged by expected count, `stats.goodness_of_fit`), summed over the independent
    configurations with their degrees of freedom; any outcome of probability 0 fails outright.
    """
    name = "corner-greedy-drafter"
    if pr.k == 0:
        return skipped(name, EFFICIENCY, "k = 0: no draft to verify")
    rng = pr.rng("greedy-drafter/inputs")
    v = pr.vocab
    # candidate (target row, greedy draft) pairs; keep those with p(x) nearest 1/2 (most informative),
    # chosen from the inputs alone, before any verifier output is seen
    cand = 16 * GREEDY_CONFIGS
    p0 = pr.rows_of(pr.target, cand, rng)
    x = np.argmax(pr.rows_of(pr.drafter, cand, rng), axis=1)  # the greedy drafter's token
    _, distinct = np.unique(np.column_stack([p0, x]), axis=0, return_index=True)
    distinct = np.sort(distinct)
    order = np.argsort(np.abs(p0[distinct, x[distinct]] - 0.5), kind="stable")
    keep = np.resize(distinct[order][:GREEDY_CONFIGS], GREEDY_CONFIGS)  # repeats only if too few distinct
    p0, x = p0[keep], x[keep]
    p1 = pr.rows_of(pr.target, GREEDY_CONFIGS, rng)
    counts = np.zeros((GREEDY_CONFIGS, 2 * v), dtype=np.int64)
    verifier_rng = pr.rng("greedy-drafter/verifier")
    total = max(pr.samples, GREEDY_CONFIGS)
    for start in range(0, total, pr.batch):
        n = min(pr.batch, total - start)
        cfg = (start + np.arange(n)) % GREEDY_CONFIGS
        inputs = pr.standard(rng, n, num_draft=1)
        inputs.draft[:, 0] = x[cfg]
        inputs.q[:, 0] = 0.0
        inputs.q[np.arange(n), 0, x[cfg]] = 1.0
        inputs.p[:, 0], inputs.p[:, 1] = p0[cfg], p1[cfg]
        out, n_out = pr.call(inputs, verifier_rng)
        cell = np.where(n_out >= 2, out[:, 1], v + out[:, 0])
        np.add.at(counts, (cfg, cell), 1)
    fits, laws = [], []
    null = stats.NullLaw((0.0, 0.0, 0.0))
    for c in range(GREEDY_CONFIGS):
        reject = p0[c].copy()
        reject[x[c]] = 0.0
        law = np.concatenate([p0[c, x[c]] * p1[c], reject])
        laws.append(law)
        fits.append(stats.goodness_of_fit(counts[c], law / law.sum()))
        if fits[-1].df:
            null = null + stats.grouped_null_law(law / law.sum(), int(counts[c].sum()))
    statistic = float(sum(f.statistic for f in fits))
    df = int(sum(f.df for f in fits))
    impossible = int(sum(f.impossible for f in fits))
    # the summed X^2 read through the sum of the configurations' exact-null laws (not chi-square(df))
    pvalue = 0.0 if impossible else (float(null.sf(statistic)) if df else 1.0)
    accepted = counts[:, :v].sum(axis=1) / np.maximum(counts.sum(axis=1), 1)
    exact_acc = p0[np.arange(GREEDY_CONFIGS), x]
    summary = (
        f"greedy drafter: acceptance {np.round(accepted, 3).tolist()} vs p(x) {np.round(exact_acc, 3).tolist()}; "
        f"X^2 = {statistic:.1f} on {df} df over {counts.sum():,} rows"
    )
    if impossible:
        summary = f"{impossible} outcomes of probability 0 (a rejected draft re-emitted, or a p = 0 token); " + summary
    data = {"observed": counts.tolist(), "expected": [(law * counts[c].sum()).tolist() for c, law in enumerate(laws)],
            "acceptance": accepted.tolist(), "acceptance_exact": exact_acc.tolist(), "impossible": impossible}
    return CheckResult(name, EFFICIENCY, Status.PENDING, summary, statistic, pvalue, df, data=data)


# ---- contract: determinism, padding, adversarial uniforms, inputs -----------------------------


def _same(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int | None:
    """Return the first row where two outputs differ, or None."""
    rows = np.flatnonzero((a[0] != b[0]).any(axis=1) | (a[1] != b[1]))
    return int(rows[0]) if rows.size else None


#: Two seeds may give identical outputs only with at most this probability before the seed clause applies.
DEGENERATE = 1e-9
#: Where to route a global source (named by the determinism and adversarial probes).
ROUTE_HINT = ("draw from the rng argument, or wrap the call in specaudit.adapters.randomness.routed(rng), "
              "which routes numpy's global RNG, Python's random and torch to it")


def foreign_source(pr: Any, before: dict[str, int]) -> str:
    """Name the source other than rng that moved since ``before`` (a snapshot of ``pr.moved``)."""
    if pr.moved["numpy"] > before["numpy"]:
        return f"numpy's global RNG (np.random.*) moved during the calls; {ROUTE_HINT}"
    if pr.moved["python"] > before["python"]:
        return f"Python's random module moved during the calls; {ROUTE_HINT}"
    return ("its own generator (a module-level np.random.default_rng() / random.Random() / torch.Generator, or an "
            "unseeded one made per call); draw from the rng argument instead")


def determinism(pr: Prober) -> CheckResult:
    """Same seed -> same output; on a non-degenerate output law, another seed -> another output.

    Notes
    -----
    The seed clause uses num_draft = 0 rows whose p rows are the scenario's own target rows: a
    lossless verifier emits one token from p[b, 0] per row, so two independent seeds agree on all
    rows with probability prod_b sum_x p_b(x)**2 (computed exactly). At or above
    :data:`DEGENERATE` (a greedy target) only the same-seed clause applies, so deterministic
    verifiers pass on greedy scenarios. A verifier whose output does not move with the seed is
    named: not sampling (argmax), a fixed seed restarted per call, or ignoring its draws.
    """
    pr.watch = True
    try:
        return _determinism(pr)
    finally:
        pr.watch = False


def _determinism(pr: Prober) -> CheckResult:
    name = "determinism"
    rng = pr.rng("determinism/inputs")
    ragged = pr.standard(rng, pr.probe_rows)
    zero = pr.standard(rng, pr.probe_rows, num_draft=0)
    collision = float(np.exp(np.log(np.maximum((zero.p[:, 0] ** 2).sum(axis=1), 1e-300)).sum()))
    seeds = [int(s) for s in pr.rng("determinism/seeds").integers(2**32, size=2)]
    drew = False
    before = dict(pr.moved)
    outputs = {}
    for label, inputs in (("ragged", ragged), ("zero-draft", zero)):
        g = np.random.default_rng(seeds[0])
        state = g.bit_generator.state
        first = pr.call(inputs.copy(), g)
        drew |= g.bit_generator.state != state
        outputs[label] = first
        if label != "ragged":  # the same-seed clause is tested once, on the ragged rows (probe cost)
            break
        second = pr.call(inputs.copy(), np.random.default_rng(seeds[0]))
        b = _same(first, second)
        pr.deterministic = b is None
        if b is not None:
            call = pr.record("same-seed", (inputs, source_of(np.random.default_rng(seeds[0]))))
            return result_of(
                name, CONTRACT, False,
                f"same seed {seeds[0]}, same {label} inputs, different outputs: row {b} gave "
                f"{first[0][b].tolist()} then {second[0][b].tolist()}: the verifier draws from a source other than "
                f"rng: {foreign_source(pr, before)}",
                row=b, drew=drew, cause="foreign-source", call=call,
            )
    if pr.greedy:
        return result_of(name, CONTRACT, True, "same seed -> identical outputs; temperature 0 (mode: greedy): the output "
                       "is the argmax of p, so another seed must not change it", drew=drew)
    if collision >= DEGENERATE:
        return result_of(name, CONTRACT, True,
                       f"same seed -> identical outputs; the scenario's output law is (nearly) degenerate (two seeds agree "
                       f"with probability {collision:.3g}), so another seed need not give another output", drew=drew)
    first = outputs["zero-draft"]
    other = pr.call(zero.copy(), np.random.default_rng(seeds[1]))
    if _same(first, other) is None:
        top = np.argmax(zero.p[:, 0], axis=1)
        if not drew and np.array_equal(first[0][:, 0], top):
            cause, why = "argmax", "it is not sampling at all: every token is the argmax of p (a greedy verifier on a sampling scenario)"
        elif not drew:
            cause, why = "fixed-seed", (
                "it never draws from rng and restarts a fixed seed on every call (a generator seeded with a constant "
                "inside the call, or np.random.seed / random.seed / torch.manual_seed with a constant)")
        else:
            cause, why = "ignores-draws", "it draws from rng but its output does not depend on the draws (vLLM #6038 class)"
        call = pr.record("other-seed", (zero, source_of(np.random.default_rng(seeds[0]))))
        return result_of(
            name, CONTRACT, False,
            f"seeds {seeds[0]} and {seeds[1]} gave identical outputs on {pr.probe_rows} zero-draft rows of the scenario's "
            f"target (a lossless sampler agrees with probability {collision:.3g}): {why}",
            drew=drew, cause=cause, call=call,
        )
    return result_of(name, CONTRACT, True,
                   f"same seed -> identical outputs; another seed -> different outputs (chance of agreeing {collision:.3g})",
                   drew=drew)


#: Replicas of the ``replicas`` probe (the first is given the inputs as they are).
REPLICAS = 4
#: Most float64 ulps by which a replica's p and q entries differ from the first replica's.
REPLICA_ULPS = 2


def _ulps_apart(x: np.ndarray, rng: np.random.Generator, eps: float) -> np.ndarray:
    """Return ``x`` with each entry strictly between 0 and 1 moved by 1 .. REPLICA_ULPS ulps; 0 and 1 stay (a one-hot
    law, an n-gram drafter's q, has no low bits that another rank could compute differently)."""
    ulps = rng.integers(1, REPLICA_ULPS + 1, size=x.shape) * rng.choice([-1, 1], size=x.shape)
    return np.where((x > 0) & (x < 1), x * (1 + ulps * eps), x)


def replicas(pr: Prober) -> CheckResult:
    """Replicas given the same seed and inputs that differ by a few ulps make the same decisions.

    Notes
    -----
    Engines that verify on several tensor-parallel ranks run the same verifier once per rank, on logits
    each rank computed with its own reduction order (so they differ in the last bits), with a shared
    seed; the ranks must emit the same tokens or they fall out of step (vLLM #31154 / PR #31288, where
    drafts diverged across ranks and the collectives hung). Here :data:`REPLICAS` calls get the same
    generator seed; every replica after the first gets each p and q entry strictly between 0 and 1 multiplied by
    ``1 + m * 2**-52`` with ``m`` in ``+-1 .. +-REPLICA_ULPS`` (zeros and ones stay, drafts and
    num_draft are the same). A verifier that decides from its uniforms (``u*q < p``, an inverse CDF) changes a
    decision only when a uniform falls within a few ulps of its boundary; the probe states that
    probability's bound, ``rows * (K + 1) * (replicas - 1) * (4 V + 8) * 2**-52``. What it catches:
    decisions or randomness derived from the low bits of the inputs (a seed or a tie-break taken from a
    digest or a sum of the logits), which the same-input determinism probe cannot see. On greedy scenarios
    the argmax must agree on every row whose valid positions have no tie of p within 16 ulps (a tie,
    broken either way by a few ulps, may legitimately change the argmax); those rows are left out.
    """
    name = "replicas"
    rng = pr.rng("replicas/inputs")
    base = pr.standard(rng, pr.probe_rows)
    compared = np.ones(base.draft.shape[0], dtype=bool)
    if pr.greedy:  # the argmax must agree, except where a few ulps can break a tie of p either way
        top2 = np.sort(base.p, axis=-1)[..., -2:]
        clear = top2[..., 1] - top2[..., 0] > 16 * np.finfo(np.float64).eps * top2[..., 1]
        valid = np.arange(base.p.shape[1])[None, :] <= base.num_draft[:, None]
        compared = (clear | ~valid).all(axis=1)
        if not compared.any():
            return skipped(name, CONTRACT, "temperature 0 (mode: greedy): every probe row has a tie of p that a few "
                           "ulps may break either way")
    seed = int(pr.rng("replicas/seed").integers(2**32))
    first = pr.call(base.copy(), np.random.default_rng(seed))
    rows, k, v = base.draft.shape[0], base.draft.shape[1], base.vocab
    bound = rows * (k + 1) * (REPLICAS - 1) * (4 * v + 8) * 2.0**-52
    eps = np.finfo(np.float64).eps
    for r in range(1, REPLICAS):
        p, q = (_ulps_apart(x, rng, eps) for x in (base.p, base.q))
        replica = Inputs(base.draft.copy(), q, p, base.num_draft.copy())
        got = pr.call(replica.copy(), np.random.default_rng(seed))
        b = _same((first[0][compared], first[1][compared]), (got[0][compared], got[1][compared]))
        if b is not None:
            b = int(np.flatnonzero(compared)[b])
            return result_of(  # no replayable call: the finding is a pair of calls, not one
                name, CONTRACT, False,
                f"replica {r} of {REPLICAS}, seeded like the first ({seed}) and given p and q that differ by at most "
                f"{REPLICA_ULPS} ulps, emitted {got[0][b, :got[1][b]].tolist()} at row {b} where the first emitted "
                f"{first[0][b, :first[1][b]].tolist()}; a verifier deciding from its uniforms differs so with "
                f"probability below {bound:.1g}: its decisions or randomness depend on the low bits of the inputs "
                f"(tensor-parallel ranks would fall out of step, vLLM #31154)",
                row=int(b), replica=r, seed=seed, bound=bound,
            )
    return result_of(name, CONTRACT, True,
                     f"{REPLICAS} replicas with a shared seed and inputs {REPLICA_ULPS} ulps apart emitted the same "
                     f"tokens on {int(compared.sum())} rows (a verifier deciding from its uniforms differs with "
                     f"probability < {bound:.1g}" + ("" if compared.all() else "; rows with a tie of p left out: "
                     "greedy") + ")", bound=bound, compared=int(compared.sum()))


def padding_independence(pr: Prober) -> CheckResult:
    """Changing only what lies past num_draft (drafts, q rows, p rows after the bonus) changes nothing."""
    name = "padding-independence"
    if pr.k == 0:
        return skipped(name, CONTRACT, "k = 0: no padding positions")
    rng = pr.rng("padding/inputs")
    base = pr.standard(rng, pr.probe_rows, num_draft=rng.integers(0, pr.k, size=pr.probe_rows))  # every row padded
    v, k = pr.vocab, pr.k
    pad = np.arange(k)[None, :] >= base.num_draft[:, None]
    pad_p = np.arange(k + 1)[None, :] > base.num_draft[:, None]

    def variant(token: int) -> Inputs:
        law = np.full(v, 0.1 / (v - 1))
        law[token] = 0.9
        x = base.copy()
        x.draft[pad], x.q[pad], x.p[pad_p] = token, law, law
        return x

    seed = int(pr.rng("padding/seed").integers(2**32))
    if pr.deterministic is False:
        return skipped(name, CONTRACT, "the verifier is not deterministic for a fixed seed (see determinism)")
    low = pr.call(variant(0), np.random.default_rng(seed))
    if pr.deterministic is None:  # determinism did not run first: check the same-seed clause here
        again = pr.call(variant(0), np.random.default_rng(seed))
        if _same(low, again) is not None:
            return skipped(name, CONTRACT, "the verifier is not deterministic for a fixed seed (see determinism)")
    high = pr.call(variant(v - 1), np.random.default_rng(seed))
    b = _same(low, high)
    if b is not None:
        call = pr.record("padding", (variant(0), source_of(np.random.default_rng(seed))))
        return result_of(
            name, CONTRACT, False,
            f"only the padding past num_draft changed (token 0 vs {v - 1}, same seed) and row {b} (num_draft = "
            f"{base.num_draft[b]}) went from {low[0][b].tolist()} to {high[0][b].tolist()}: the verifier reads padding "
            f"(flashinfer #879, vLLM PR #46533 class)",
            row=b, call=call,
        )
    return result_of(name, CONTRACT, True, f"output unchanged when the padding past num_draft changes ({pr.probe_rows} rows, same seed)")


def adversarial_inputs(pr: Prober) -> Inputs:
    """Return rows that expose boundary bugs at u = 0 and u = 1 - 2**-53 (33 rows, three kinds; fewer for a large V).

    Kind 0: every draft has p = 0 (q > 0) and p is peaked with zeros on the upper half, so the
    residual is peaked with trailing zeros. Kind 1: p = q (drafts always accepted), a bonus law
    with trailing zeros. Kind 2: ragged rows, p = 0 drafts, padding past num_draft.
    """
    v, k = pr.vocab, pr.k
    rng = pr.rng("adversarial/inputs")
    rows = min(33, 3 * max(1, pr.probe_rows // 3))  # 33 unless the vocabulary is large (PROBE_FLOATS)
    base = pr.standard(rng, rows, num_draft=k)
    peaked = 2.0 ** -np.arange(v)
    peaked[max(1, v // 2):] = 0.0
    peaked /= peaked.sum()
    head = max(1, min(3, v - 1))
    thirds = np.where(np.arange(v) < head, 1.0 / head, 0.0)
    uniform = np.full(v, 1.0 / v)
    kind = np.arange(rows) % 3
    for b in range(rows):
        if kind[b] == 0:
            base.p[b], base.q[b], base.draft[b] = peaked, uniform, v - 1
        elif kind[b] == 1:
            base.p[b], base.q[b] = thirds, thirds
            base.draft[b] = np.arange(k) % head
        else:
            nd = b % (k + 1)
            base.num_draft[b] = nd
            base.p[b, : nd + 1], base.q[b, :nd], base.draft[b, :nd] = thirds, uniform, v - 1
    if pr.one_hot_q:  # the scenario's drafter is one-hot: so is q at every draft here
        valid = np.arange(k)[None, :] < base.num_draft[:, None]
        base.q[valid] = 0.0
        at, pos = np.nonzero(valid)
        base.q[at, pos, base.draft[at, pos]] = 1.0
    return base


def adversarial_uniforms(pr: Prober) -> CheckResult:
    """Uniforms 0.0 and 1 - 2**-53 (both phases): no token of probability 0, no id outside [0, V).

    Reach: a phase counts only when the scripted draws the verifier consumed cover what a correct
    sampler must draw on the rows it answered: one uniform per draft it tested (the accepted ones
    and the first rejected one) and one more draw per replacement token (an inverse-CDF uniform, a
    multinomial sample, or an exponential race: at least one exponential per replacement). Draws
    taken through ``integers`` (a wrapper seeding another generator) or drawn by the adapter for
    itself (``harness_draws``: vLLM's bonus) never count. A real generator that advanced during a
    scripted call (:func:`specaudit.adapters.randomness.bypassed`: compiled code, an op the routing
    does not script) means some draws were not the adversarial values. Without reach and without a
    finding the probe is "not applicable", never "passed". A kernel that samples its replacements by
    a race over a hash of (seed, position, token) draws nothing to script: its adapter says so
    (:func:`specaudit.adapters.randomness.hashed_replacements`), reach then counts the acceptance
    step only, and the summary names the unscripted draws; an adapter whose draws are out of reach
    altogether (a GPU kernel's ``tl.rand``: :func:`~specaudit.adapters.randomness.out_of_reach`)
    makes the probe "not applicable" with that reason.
    """
    name = "adversarial-uniforms"
    inputs = adversarial_inputs(pr)
    rows = int((inputs.num_draft > 0).sum()) or inputs.draft.shape[0]
    findings: list[str] = []
    classes: set[str] = set()
    draws, coins, seeding, unscripted = 0, [], 0, False
    beyond: str | None = None  # why its draws cannot be scripted (a kernel compiled for a GPU), as its adapter says
    how: str | None = None  # the verifier's replacements drawn from no random source (a hash), as its adapter says
    short: list[str] = []  # why a phase did not reach, first phase first
    moved: dict[str, int] = {}
    ops: dict[str, int] = {}
    call: dict[str, Any] | None = None  # the first failing call, replayable
    for start in (0, 1):
        src = ScriptedUniforms(start, seed=pr.seed)
        label = "0.0 first" if start == 0 else "1 - 2**-53 first"
        try:
            out, n_out = pr.call(inputs.copy(), src)
        except ContractError as exc:
            if exc.clause != "vocab-range":
                raise
            findings.append(f"[vocab-range] ({label}) {exc.detail}")
            classes.add("vocab-range")
            call = call or pr.record("clause:vocab-range")
            out = None
        draws += src.draws
        coins.append(src.coins)
        seeding += src.counts.get("integers", 0)
        unscripted |= src.unscripted
        for source, n in bypassed(src).items():
            moved[source] = moved.get(source, 0) + n
        for op, n in op_draws(src).items():
            ops[op] = ops.get(op, 0) + n
        how = how or hashed(src)
        beyond = beyond or unreachable(src)
        if out is not None:
            zero = _zero_p_emitted(inputs, out, n_out)
            if zero and call is None:
                call = pr.record("p-positive")
            findings += [f"({label}) {z}" for z in zero]
            classes |= _zero_p_classes(inputs, out, n_out)
            short += _short_of(inputs, n_out, src, label)
    data = {"draws": draws, "coins": coins, "op_draws": ops, "bypassed": moved}
    if findings:
        return result_of(name, CONTRACT, False, f"{findings[0]}; {len(findings)} finding(s) with uniforms 0.0 / 1 - 2**-53: "
                       f"{_boundary_class(classes)}", findings=findings[:20], classes=sorted(classes), call=call, **data)
    fix = ("wrap the call in specaudit.adapters.randomness.routed(rng) (it routes torch, numpy's global RNG and Python's "
           "random to the scripted rng), or substitute specaudit.contract.uniforms.ScriptedUniforms for a framework's own "
           "random source")
    if moved:
        sources = ", ".join(f"{s} ({n} of 2 scripted calls)" for s, n in sorted(moved.items()))
        lead = "compiled code bypassed the scripted generator" if any("torch" in s for s in moved) else \
            "the verifier drew past the scripted generator"
        return skipped(name, CONTRACT, f"{lead}: {sources} advanced during the scripted calls, so some draws were real "
                        "randomness, not the adversarial uniforms (TorchScript, a custom or Triton kernel, an op the routing "
                        "does not script such as torch.randn / randint / randperm, or a numpy / random function bound before "
                        f"the call); scripted draws per torch op: {_ops_text(ops)}", **data)
    if min(coins) < rows or short:
        if draws == 0 and beyond:
            return skipped(name, CONTRACT, beyond, **data)
        if draws == 0:
            why = ("it drew only through Generator methods that ScriptedUniforms does not script"
                   if unscripted else "the verifier never drew from the rng it was given")
        elif short:
            why = (short[0] + (f" ({seeding} taken through rng.integers, as a seed for another generator)" if seeding else "")
                   + (", the rest drawn through methods ScriptedUniforms does not script" if unscripted else ""))
        else:
            why = (f"only {min(coins)} scripted uniforms reached it for {rows} rows with a draft"
                   + (f" ({seeding} taken through rng.integers, as a seed for another generator)" if seeding else "")
                   + (", the rest drawn through methods ScriptedUniforms does not script" if unscripted else ""))
        return skipped(name, CONTRACT, f"{why}, so the adversarial uniforms never reached its acceptance step; {fix}", **data)
    per_op = f"; scripted draws per torch op: {_ops_text(ops)}" if ops else ""
    if how:
        return result_of(name, CONTRACT, True, f"{min(coins)}+ scripted uniforms per phase (0.0, 1 - 2**-53) reached the "
                         f"acceptance step of {rows} rows with a draft (one per tested draft); the replacement tokens are "
                         f"not scripted ({how}): no token of probability 0, every id in [0, {pr.vocab}) x 2 phases{per_op}",
                         hashed_replacements=how, **data)
    return result_of(name, CONTRACT, True, f"{min(coins)}+ scripted uniforms per phase (0.0, 1 - 2**-53) reached the "
                   f"acceptance step of {rows} rows with a draft (at least one per tested draft and per replacement): no token "
                   f"of probability 0, every id in [0, {pr.vocab}) x 2 phases{per_op}", **data)


def _short_of(inputs: Inputs, n_out: np.ndarray, src: ScriptedUniforms, label: str) -> list[str]:
    """Say how the scripted draws of one phase fall short of what a correct sampler draws for this output, if they do.

    A correct sampler draws one uniform per draft it tests (each accepted one and the first
    rejected one) and at least one draw per replacement token; an exponential race draws at
    least one exponential per replacement.
    """
    nd = inputs.num_draft
    accepted = np.minimum(n_out - 1, nd)
    tested = int(np.where(nd > 0, np.minimum(accepted + 1, nd), 0).sum())
    replaced = int((accepted < nd).sum())
    ops = op_draws(src)
    if src.coins < tested:
        return [f"({label}) only {src.coins} scripted uniforms reached it for {tested} drafts it tested (one uniform each)"]
    if src.coins < tested + replaced and hashed(src) is None:
        return [f"({label}) {src.coins} scripted draws for {tested} tested drafts and {replaced} replacement tokens (one "
                "uniform per draft and at least one draw per replacement): the replacement tokens were not drawn from the "
                "script"]
    races = ops.get("Tensor.exponential_", 0)
    if races and races < replaced:
        return [f"({label}) {races} scripted exponentials for {replaced} replacement tokens (an exponential race draws at "
                "least one per replacement): part of the race bypassed the scripted generator"]
    return []


def _ops_text(ops: dict[str, int]) -> str:
    return ", ".join(f"{op} {n}" for op, n in sorted(ops.items())) or "none"


#: Boundary bug classes the adversarial probe tells apart, and how its failure names them.
BOUNDARY_CLASSES = {
    "accepts-p0": "an accepted draft has p = 0: `u <= p/q` accepts it at u = 0 (sglang #35771); accept iff u < p/q",
    "cdf-falloff": "a sampled token is id V - 1 with p = 0: the inverse CDF ran past the last token of positive mass "
                   "at u -> 1 and fell off to V - 1; clamp to the last index with mass (vLLM #20531 class)",
    "sampled-p0": "a sampled (replacement or bonus) token has p = 0 at a boundary uniform: the residual or bonus law "
                  "gives mass to tokens outside p's support",
    "vocab-range": "an id >= V: the inverse CDF is not clamped at u -> 1 (vLLM #20531)",
}


def _zero_p_classes(inputs: Inputs, out: np.ndarray, n_out: np.ndarray) -> set[str]:
    """Return the boundary classes of the emitted p = 0 tokens (accepted draft vs sampled token)."""
    emitted = _emitted(n_out, out.shape[1])
    tok = np.where(emitted, out, 0)
    p_tok = np.take_along_axis(inputs.p, tok[..., None], axis=2)[..., 0]
    found = set()
    for b, j in zip(*np.nonzero(emitted & (p_tok <= 0))):
        if j < n_out[b] - 1:  # an accepted draft: every position before the last emitted one
            found.add("accepts-p0")
        else:
            found.add("cdf-falloff" if out[b, j] == inputs.vocab - 1 else "sampled-p0")
    return found


def _boundary_class(classes: set[str]) -> str:
    """Name the boundary bug classes that fit the findings."""
    return "; ".join(BOUNDARY_CLASSES[c] for c in sorted(classes)) or "boundary finding"


def inputs_unmodified(pr: Prober) -> CheckResult:
    """No call wrote into draft, q, p or num_draft (copies compared after every call)."""
    name = "inputs-unmodified"
    pr.call(pr.standard(pr.rng("inputs/inputs"), pr.probe_rows), pr.rng("inputs"))
    if pr.mutations:
        where, change = pr.mutations[0]
        return result_of(
            name, CONTRACT, False,
            f"the verifier writes into its inputs: {change} (in {where}); {len(pr.mutations)} of {pr.calls} calls "
            "(vllm-ascend PR #2881 zeroed target_probs in place)",
            mutations=[f"{w}: {c}" for w, c in pr.mutations[:10]], call=getattr(pr, "mutation_call", None),
        )
    return result_of(name, CONTRACT, True, f"draft, q, p and num_draft unchanged after all {pr.calls} calls")


def contract_clauses(pr: Prober) -> CheckResult:
    """Every clause of the contract held on every probe call."""
    name = "contract-clauses"
    if pr.breaches:
        clauses = sorted({c for _, c, _ in pr.breaches})
        where, clause, message = pr.breaches[0]
        return result_of(
            name, CONTRACT, False,
            f"clause(s) {', '.join(clauses)} broken on {len(pr.breaches)} call(s); first in {where}: [{clause}] {message}",
            clauses=clauses, call=getattr(pr, "breach_call", None),
        )
    return result_of(name, CONTRACT, True, f"all {len(CLAUSES)} clauses held on {pr.calls} calls ({pr.rows:,} rows)")


#: (name, category, probe) in run order; a probe returns one result or several. Each is registered
#: in the one check registry, :data:`specaudit.checks.CHECKS`, after the statistical checks.
EXACT_CHECKS: list[tuple[str, Category, Callable[[Prober], CheckResult | list[CheckResult]]]] = [
    ("corner-empty-batch", CONTRACT, corner_empty_batch),
    ("corner-k0", CONTRACT, corner_k0),
    ("corner-zero-drafts", CONTRACT, corner_zero_drafts),
    ("corner-p-equals-q", EFFICIENCY, corner_p_equals_q),
    ("corner-one-hot", CONTRACT, corner_one_hot),
    ("corner-greedy-drafter", EFFICIENCY, corner_greedy_drafter),
    ("determinism", CONTRACT, determinism),
    ("replicas", CONTRACT, replicas),
    ("padding-independence", CONTRACT, padding_independence),
    ("adversarial-uniforms", CONTRACT, adversarial_uniforms),
    ("inputs-unmodified", CONTRACT, inputs_unmodified),
    ("small-batches", CONTRACT, small_batches),
    ("contract-clauses", CONTRACT, contract_clauses),
]
#: Result names a probe emits besides its own (the one-hot corner also reports its accepted-count run).
ALSO_EMITS: dict[str, tuple[str, ...]] = {"corner-one-hot": ("corner-one-hot-run",), "small-batches": ("small-batches-run",)}


#: The probes every simulated chain scenario runs with its own chains (``corners`` stays the broad
#: sweep): the contract probes and the corners the scenario reaches. None carries a p-value.
SCENARIO_PROBES = (
    "corner-empty-batch", "corner-zero-drafts", "corner-p-equals-q", "corner-one-hot",
    "determinism", "replicas", "padding-independence", "adversarial-uniforms", "inputs-unmodified", "small-batches",
    "contract-clauses",
)


def crashed(name: str, category: Category, exc: VerifierCrash) -> CheckResult:
    """Return the ERROR result of a probe whose verifier call raised (the other probes still run)."""
    return CheckResult(name, category, Status.ERROR, f"the verifier crashed in this probe: {exc}",
                       data={"traceback": exc.user_traceback})


def probe_all(pr: Any, plan: list[tuple[str, Category, Callable[[Any], Any]]], gate_efficiency: bool,
              clauses: str = "contract-clauses") -> tuple[list[CheckResult], BaseException | None]:
    """Run each probe on its own: a breach fails it, a crash makes it ERROR; a timeout stops the rest.

    ``pr`` is a :class:`Prober` or another prober with a ``check`` attribute (the tree probes').
    When every probe that called the verifier crashed (``clauses``, the contract-clause probe,
    reports without calling), the first crash is returned as the error: the verifier could not be
    probed at all.
    """
    results: list[CheckResult] = []
    crashes: list[VerifierCrash] = []
    for name, category, probe in plan:
        pr.check = name
        try:
            found = probe(pr)
        except ContractError as exc:
            record = getattr(pr, "record", None)
            found = result_of(name, category, False, f"[{exc.clause}] {exc.detail}", clause=exc.clause,
                              call=record(f"clause:{exc.clause}") if record is not None else None)
        except VerifierCrash as exc:
            found = crashed(name, category, exc)
            crashes.append(exc)
        except VerifierTimeout as exc:  # a hang would hang every later probe too
            return results, VerifierTimeout(f"{name}: {exc}", exc.user_traceback)
        for r in found if isinstance(found, list) else [found]:
            if r.category is Category.EFFICIENCY and not gate_efficiency:
                r = replace(r, gate=False)
            results.append(r)
    if crashes and all(r.status is Status.ERROR or r.name == clauses for r in results):
        first = crashes[0]
        return results, VerifierCrash(f"{results[0].name}: {first}", first.user_traceback)
    return results, None


#: Probes that hold for every lossless verifier of the canonical contract, whatever its algorithm (chain or
#: block verification): the efficiency corners (p = q, one-hot run, greedy drafter) hold for the chain rule only.
ANY_ALGORITHM = (
    "corner-empty-batch", "corner-k0", "corner-zero-drafts", "corner-one-hot", "determinism", "replicas",
    "padding-independence", "adversarial-uniforms", "inputs-unmodified", "contract-clauses",
)


def _canonical(verify: Callable[..., Any], contract: str) -> tuple[Callable[..., Any], bool]:
    """Return the canonical-contract callable the probes drive and whether p reaches it as logits.

    A logits-contract verifier is driven on ``log q`` and ``log p`` with identity processing
    (:func:`_on_logits`): softmax of ``log p`` is p, so every probe
    applies, and p = q is judged within float32 softmax rounding. An adapter that hands its
    target logits (vLLM >= 0.16) says so itself (:func:`specaudit.adapters.torch.takes_logits`).
    """
    if contract == "logits":
        return _on_logits(verify), True
    if contract == "draft-vocab":  # the probes' chains speak the target vocabulary: the identity map
        return _on_identity_map(verify), False
    return verify, takes_logits(verify)


def _on_identity_map(verify_mapped: Callable[..., Any]) -> Callable[..., Any]:
    """Return a canonical callable running a draft-vocab verifier with ``d2t`` the identity (q given whole)."""

    def call(draft: np.ndarray, q: np.ndarray, p: np.ndarray, num_draft: np.ndarray, rng: Any) -> Any:
        return verify_mapped(draft, q, p, num_draft, np.arange(q.shape[-1], dtype=np.int64), rng)

    return call


def _on_logits(verify_logits: Callable[..., Any]) -> Callable[..., Any]:
    """Return a canonical callable running ``verify_logits`` on ``log q``, ``log p`` with identity processing.

    As :func:`specaudit.contract.logits.as_canonical`, and a write into the logits shows in ``q``
    or ``p`` (the entries it changed become the exp of what it wrote), so ``inputs-unmodified``
    sees it.
    """
    identity = LogitsParams()

    def call(draft: np.ndarray, q: np.ndarray, p: np.ndarray, num_draft: np.ndarray, rng: Any) -> Any:
        with np.errstate(divide="ignore"):
            logits = (np.log(q), np.log(p))
        saved = (logits[0].copy(), logits[1].copy())
        try:
            return verify_logits(draft, logits[0], logits[1], num_draft, identity, rng)
        finally:
            for given, now, before in zip((q, p), logits, saved):
                if now.shape == before.shape:
                    moved = ~((now == before) | (np.isnan(now) & np.isnan(before)))
                    if moved.any():
                        given[moved] = np.exp(now[moved])

    return call


def _not_probed(spec: Any, contract: str) -> str | None:
    """Return why the probes do not apply (a tree scenario: the tree probes'), or None."""
    if contract not in ("probs", "logits", "draft-vocab"):
        return f"contract {contract!r}"
    if getattr(spec, "algorithm", "chain") not in ("chain", "block"):
        return f"algorithm {spec.algorithm!r} (its own probes: specaudit.checks.tree_probes)"
    return None


def _plan_for(spec: Any, plan: list[tuple[str, Category, Callable[[Prober], Any]]]) -> list[tuple[str, Category, Callable[[Prober], Any]]]:
    """Keep the probes that hold for the scenario's algorithm (block verification: the contract probes)."""
    if getattr(spec, "algorithm", "chain") == "chain":
        return plan
    return [entry for entry in plan if entry[0] in ANY_ALGORITHM]


def run_exact(
    verify: Callable[..., Any], spec: Any, seed: int, gate_efficiency: bool = True, contract: str = "probs"
) -> ExactOutcome:
    """Run every exact probe on ``verify`` (already ``contract.guarded``) with the scenario's vocab, k and chains.

    Each probe runs on its own: a contract breach fails the probe that met it (the clause is
    named), a VerifierCrash makes that probe ERROR and the others still run; a VerifierTimeout
    stops the probes and is returned as ``error`` with the checks done so far, as is the first
    crash when every probe crashed. A logits-contract verifier is probed on ``log p`` with
    identity processing; a block-verification scenario runs the probes that hold for any lossless
    verifier (not the chain rule's efficiency corners).
    """
    why = _not_probed(spec, contract)
    if why is not None:
        return ExactOutcome((skipped("exact-checks", CONTRACT, f"the exact probes speak the canonical chain contract, not {why}"),))
    canonical, logits_input = _canonical(verify, contract)
    pr = Prober(canonical, spec, seed, logits_input)
    results, error = probe_all(pr, _plan_for(spec, EXACT_CHECKS), gate_efficiency)
    info = {"mode": "exact", "rows": pr.rows}
    return ExactOutcome(tuple(results), error, pr.calls, pr.seconds, info)


def run_scenario_probes(
    verify: Callable[..., Any], spec: Any, seed: int, gate_efficiency: bool = True, contract: str = "probs"
) -> ExactOutcome:
    """Run :data:`SCENARIO_PROBES` on a simulated chain or block scenario with its own V, K, p and q rows.

    Returns no checks where the probes do not apply (a tree scenario has its own). Under the
    logits contract the verifier is probed on ``log p`` with identity processing; a lazy
    (large-vocabulary) scenario gets fewer rows per probe (:data:`PROBE_FLOATS`); a
    block-verification scenario runs the probes that hold for any lossless verifier. A corner runs
    where the scenario reaches it: zero drafts when its draft law allows 0 drafts, p = q when its
    drafter is its target (not in greedy mode: the greedy rule accepts a draft iff it is the
    argmax), the one-hot corner when its target is one-hot, small batches unless in greedy mode.
    """
    if _not_probed(spec, contract) is not None:
        return ExactOutcome(())
    plan = _plan_for(spec, [(n, c, f) for n, c, f in EXACT_CHECKS if n in SCENARIO_PROBES])
    drop = set()
    if spec.k == 0 or spec.draft_law[0] == 0:
        drop.add("corner-zero-drafts")
    if spec.mode == "greedy":  # the greedy rule accepts a draft iff it is the argmax, p = q or not
        drop |= {"corner-p-equals-q", "small-batches"}
    canonical, logits_input = _canonical(verify, contract)
    pr = Prober(canonical, spec, seed, logits_input)
    if pr.one_hot_q or not _same_chain(pr.target, pr.drafter):  # p = q is a corner of this scenario only if q is p
        drop.add("corner-p-equals-q")
    if not _one_hot_chain(pr.target):  # the one-hot corner applies to a one-hot (greedy-processed) target
        drop.add("corner-one-hot")
    plan = [entry for entry in plan if entry[0] not in drop]
    results, error = probe_all(pr, plan, gate_efficiency)
    return ExactOutcome(tuple(results), error, pr.calls, pr.seconds, {"rows": pr.rows})
