"""The ``stops`` check: a verifier that ends requests keeps exactly the tokens the stop rule keeps, for the right reason.

A verifier declaring the stops contract (:mod:`specaudit.contract.stops`) is called on rows
whose verification is forced: each accepted draft has ``p = q`` (accepted whatever the
uniform), a rejected draft has ``p = 0`` at it and a one-hot residual (rejected, and the
resampled token known), and an all-accepted row has a one-hot bonus. What the verification
emits is then known before the call, and the stop tokens and budgets are set around it:

- a stop token accepted in the middle of the block (transformers #47912: the stop check saw
  only the block's last token), on the bonus token, on the resampled token;
- a budget inside the block with no stop (ohdearquant/lattice #242: every accepted token
  committed past it), a stop beyond the budget (a length finish), a stop on the budget's last
  token (the same tokens either way; finished stop, as vLLM's ``check_stop`` orders it, or
  length, as an engine that checks the budget first does: both pass), a stop inside the
  budget of a block that crosses it (SGLang #31599: the cap checked first, reported as a
  length finish with the tokens after the stop leaked);
- a stop token that was drafted and rejected (never emitted: no stop), two stop tokens in one
  block (the first ends it), rows with no draft.

The same rows are also called without stops (:func:`specaudit.contract.stops.split_stops`): the
stopped call must keep :func:`~specaudit.contract.stops.apply_stops` of that unbounded output
(so a chain-rule bug elsewhere is not counted here), and the unbounded output must be the forced
one (else the finding says so). Exact: nothing depends on the uniforms drawn.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from specaudit.checks.probes import ExactOutcome, result_of, skipped
from specaudit.contract.chain import validate_output
from specaudit.contract.stops import FINISHED, LENGTH, RUNNING, STOPPED, Stops, apply_stops, validate_finished
from specaudit.errors import ContractError, VerifierCrash, VerifierTimeout
from specaudit.results import Category, CheckResult, Status

__all__ = ["CASES", "MIN_DRAFTS", "NAME", "judge_call", "not_declared", "one_row", "run_stops"]

NAME = "stops"
#: Drafts per row of the check's calls (at least; a scenario with more keeps its own), and the most vocabulary.
MIN_K, MAX_VOCAB = 4, 1024
#: Rows per case.
REPEATS = 4


@dataclass(frozen=True)
class Case:
    """A row kind: how many drafts are accepted, where the stop tokens and the budget sit (positions in the output)."""

    name: str
    accepted: int | str  # accepted drafts ("all": every draft, then the bonus)
    stops_at: tuple[int, ...] = ()  # output positions whose tokens are stop tokens
    remaining: int | None = None  # the budget (None: more than the block)
    rejected_stop: bool = False  # the rejected draft's token is a stop token (never emitted)
    drafts: int | None = None  # num_draft (None: K)


#: The row kinds of one call (``rule``: what a wrong answer on it means, for the finding).
CASES: dict[str, tuple[Case, str]] = {c.name: (c, rule) for c, rule in [
    (Case("mid-block-stop", "all", stops_at=(1,)),
     "a stop token accepted mid-block ends the request there (transformers #47912: only the block's last token was checked)"),
    (Case("bonus-stop", "all", stops_at=(-1,)), "a stop token drawn as the bonus token ends the request"),
    (Case("resampled-stop", 1, stops_at=(1,)), "a stop token drawn at the rejection ends the request"),
    (Case("length", "all", remaining=2), "the budget ends the request after `remaining` tokens (lattice #242: "
                                          "every accepted token was committed past it)"),
    (Case("stop-past-budget", "all", stops_at=(3,), remaining=2), "a stop token past the budget: a length finish"),
    (Case("stop-at-budget", "all", stops_at=(1,), remaining=2),
     "a stop token on the budget's last token ends the request there (finished stop, vLLM's check_stop order, or "
     "length, an engine that checks the budget first: both are accepted, the tokens are not negotiable)"),
    (Case("stop-inside-budget", "all", stops_at=(1,), remaining=3),
     "a stop inside the budget of a block that crosses it is a stop, and nothing after it is kept (SGLang #31599: "
     "the cap was checked first)"),
    (Case("rejected-stop", 1, rejected_stop=True), "a drafted stop token that was rejected was never emitted: no stop"),
    (Case("two-stops", "all", stops_at=(1, 2)), "the first of two stop tokens in a block ends the request"),
    (Case("no-stop", "all"), "no stop token and a budget past the block: the request goes on with every token"),
    (Case("no-draft-stop", "all", stops_at=(0,), drafts=0), "a row with no draft: its one token is a stop token"),
    (Case("no-draft-budget", "all", remaining=1, drafts=0), "a row with no draft and a budget of one: a length finish"),
]}


#: The fewest drafts a case's row needs to show what it tests (a repro rebuilds a failing row with these first).
MIN_DRAFTS = {"bonus-stop": 1, "stop-past-budget": 3, "stop-at-budget": 1, "no-stop": 1, "no-draft-stop": 1,
              "no-draft-budget": 1}


@dataclass
class _Call:
    """One call's inputs and the forced verification of every row, with what built them."""

    draft: np.ndarray
    q: np.ndarray
    p: np.ndarray
    num_draft: np.ndarray
    stops: Stops
    forced: list[list[int]]  # the tokens each row's verification emits
    cases: list[str]
    stop_pool: list[int]  # the ids the rows' stop tokens were drawn from
    cap: int | None  # the scenario's max_tokens


@dataclass
class _Row:
    draft: np.ndarray  # [K]
    q: np.ndarray  # [K, V]
    p: np.ndarray  # [K + 1, V]
    num_draft: int
    stop_tokens: list[int]
    remaining: int
    emitted: list[int]


def _row(case: Case, k: int, vocab: int, rng: np.random.Generator, stop_pool: list[int], cap: int | None) -> _Row:
    """Return one forced row of ``case`` with ``k`` drafts over ``vocab`` tokens."""
    plain = [t for t in range(vocab) if t not in stop_pool]  # tokens that are nobody's stop
    draft = np.zeros(k, dtype=np.int64)
    q = np.zeros((k, vocab))
    p = np.zeros((k + 1, vocab))
    nd = k if case.drafts is None else case.drafts
    accepted = nd if case.accepted == "all" else int(case.accepted)
    length = accepted + 1  # tokens the verification emits
    stops_here = [s % length for s in case.stops_at]
    chosen = rng.choice(stop_pool, size=min(len(stops_here), len(stop_pool)), replace=False).tolist()
    emitted = rng.choice(plain, size=length, replace=len(plain) < length).tolist()
    for pos, stop in zip(stops_here, chosen):
        emitted[pos] = stop
    row_stops = [int(t) for t in chosen]
    if case.rejected_stop:
        row_stops = [int(rng.choice(stop_pool))]
    for j in range(nd):  # every position's rows: a law with the draft in its support
        law = rng.dirichlet(np.ones(vocab))
        if j < accepted:  # accepted: p = q, the draft emitted
            draft[j] = emitted[j]
            q[j], p[j] = law, law
        elif j == accepted:  # rejected: p = 0 at the draft, a one-hot residual at the emitted token
            x = row_stops[0] if case.rejected_stop else int(rng.choice([t for t in plain if t != emitted[j]]))
            draft[j] = x
            q_row = law.copy()
            q_row[emitted[j]] = 0.0
            q_row[x] += 0.5
            q[j] = q_row / q_row.sum()
            p[j, emitted[j]] = 1.0
        else:  # past the rejection: any valid rows
            draft[j] = int(rng.choice(plain))
            q[j] = law
            p[j] = rng.dirichlet(np.ones(vocab))
    if accepted == nd:  # every draft accepted: a one-hot bonus
        p[nd, emitted[nd]] = 1.0
    for j in range(nd + (accepted == nd), k + 1):  # padding past the row's positions: valid, unread
        p[j] = rng.dirichlet(np.ones(vocab))
    for j in range(nd, k):
        q[j] = rng.dirichlet(np.ones(vocab))
        draft[j] = int(rng.integers(vocab))
    budget = case.remaining if case.remaining is not None else length + 1 + int(rng.integers(3))
    remaining = min(budget, cap) if cap is not None and case.remaining is None and cap > length else budget
    return _Row(draft, q, p, nd, row_stops, int(remaining), [int(t) for t in emitted])


def _stack(rows: list[_Row], cases: list[str], stop_pool: list[int], cap: int | None) -> _Call:
    """Return the call of ``rows`` (stop tokens padded with -1 to the widest row)."""
    width = max([2, *(len(r.stop_tokens) for r in rows)])
    tokens = np.full((len(rows), width), -1, dtype=np.int64)
    for b, r in enumerate(rows):
        tokens[b, :len(r.stop_tokens)] = r.stop_tokens
    return _Call(np.stack([r.draft for r in rows]), np.stack([r.q for r in rows]), np.stack([r.p for r in rows]),
                 np.array([r.num_draft for r in rows], dtype=np.int64),
                 Stops(tokens, np.array([r.remaining for r in rows], dtype=np.int64)),
                 [r.emitted for r in rows], cases, stop_pool, cap)


def _shape(spec: Any) -> tuple[int, int, list[int], int | None]:
    """Return the check's K, V, stop-token pool and budget cap for a scenario."""
    own = [int(t) for t in (getattr(spec, "stop_tokens", None) or [])]
    vocab = max(min(spec.vocab, MAX_VOCAB), max(own, default=0) + 1, 8)
    pool = own[:2] or [vocab - 1, vocab - 2]  # two of the scenario's stop tokens (a row holds at most two), else the last two ids
    return max(spec.k, MIN_K), vocab, pool, getattr(spec, "max_tokens", None)


def _inputs(spec: Any, seed: int) -> _Call:
    """Return the rows of every case, REPEATS each, with fresh token choices."""
    rng = np.random.default_rng([seed, 0x5709])
    k, vocab, pool, cap = _shape(spec)
    cases = [case for case, _ in CASES.values() for _ in range(REPEATS)]
    return _stack([_row(case, k, vocab, rng, pool, cap) for case in cases], [c.name for c in cases], pool, cap)


def one_row(case: str, k: int, vocab: int, stop_pool: list[int], cap: int | None, seed: int) -> _Call:
    """Return a call of one forced row of ``case`` (what a repro of the check rebuilds, at the fewest drafts)."""
    rng = np.random.default_rng([seed, 0x5709, k])
    return _stack([_row(CASES[case][0], k, vocab, rng, stop_pool, cap)], [case], stop_pool, cap)


def judge_call(verify: Callable[..., Any], canonical: Callable[..., Any], call: _Call, seed: int) -> CheckResult:
    """Call ``verify`` with and ``canonical`` without the stops on ``call`` and return the check's verdict (unguarded)."""
    plain = _call(canonical, call, seed)
    stopped = _call(verify, call, seed, Stops(call.stops.tokens.copy(), call.stops.remaining.copy()))
    return _judge(call, plain, stopped)


def not_declared() -> CheckResult:
    """Return the check skipped on a scenario with stop tokens, for a verifier that does not declare the stops contract."""
    return skipped(NAME, Category.CONTRACT, "the verifier does not declare the stops contract (verify.stops = True: "
                   "verify(..., rng, stops) -> (out, n_out, finished)); the stop rule is the engine's, not tested here")


def _call(verify: Callable[..., Any], call: _Call, seed: int, *extra: Any) -> Any:
    """Call ``verify`` on copies of ``call``'s inputs; return ``(its result, the first of draft, q, p, num_draft it
    wrote into, or None)``."""
    given = (call.draft.copy(), call.q.copy(), call.p.copy(), call.num_draft.copy())
    result = verify(*given, np.random.default_rng(seed), *extra)
    names = ("draft", "q", "p", "num_draft")
    pairs = zip(names, given, (call.draft, call.q, call.p, call.num_draft))  # the stops are its own copy to keep
    written = next((name for name, got, was in pairs
                    if np.shape(got) != np.shape(was) or not np.array_equal(got, was, equal_nan=got.dtype.kind == "f")),
                   None)
    return result, written


def run_stops(verify: Callable[..., Any], canonical: Callable[..., Any], spec: Any, seed: int,
              contract: str) -> ExactOutcome:
    """Check a stops verifier (``verify``; ``canonical``: its form without stops), both guarded, on one pair of calls."""
    if contract != "probs":
        return ExactOutcome((skipped(NAME, Category.CONTRACT, f"the stops check speaks the probs contract, not {contract!r}"),))
    if getattr(spec, "algorithm", "chain") != "chain":
        return ExactOutcome((skipped(NAME, Category.CONTRACT, f"algorithm {spec.algorithm!r}: the stops check drives the chain contract"),))
    call = _inputs(spec, seed)
    t0 = time.perf_counter()
    try:
        plain = _call(canonical, call, seed)
        stopped = _call(verify, call, seed, Stops(call.stops.tokens.copy(), call.stops.remaining.copy()))
    except VerifierTimeout as exc:
        return ExactOutcome((), exc, 2, time.perf_counter() - t0)
    except VerifierCrash as exc:
        check = CheckResult(NAME, Category.CONTRACT, Status.ERROR, f"the verifier crashed: {exc}", data={"error": str(exc)})
        return ExactOutcome((check,), None, 2, time.perf_counter() - t0)
    seconds = time.perf_counter() - t0
    return ExactOutcome((_judge(call, plain, stopped),), None, 2, seconds, {"rows": 2 * len(call.cases)})


def _judge(call: _Call, plain_call: tuple[Any, str | None], stopped_call: tuple[Any, str | None]) -> CheckResult:
    """Return the check's result: the stopped call against the stop rule applied to the unbounded one.

    Each call is ``(its result, the input it wrote into)``; a write fails the check (the split form's
    calls are also watched by inputs-unmodified, the stops call only here).
    """
    vocab = call.p.shape[-1]
    (plain, _), (stopped, written) = plain_call, stopped_call
    if written is not None:
        return result_of(NAME, Category.CONTRACT, False,
                         f"the call with stops wrote into its input {written} (the caller's buffer; every engine call "
                         f"passes stops): inputs must not be written to", written=written)
    try:
        out0, n0 = validate_output(plain, call.draft, call.num_draft, vocab)
        pair, finished = validate_finished(stopped, len(call.cases))
        out, n_out = validate_output(pair, call.draft, call.num_draft, vocab)
    except ContractError as exc:
        return result_of(NAME, Category.CONTRACT, False, f"stops contract: {exc}")
    want_out, want_n, want_finished = apply_stops(out0, n0, call.stops)
    unforced = [b for b in range(len(call.cases)) if out0[b, :n0[b]].tolist() != call.forced[b]]
    # a stop on the budget's last token: either reason (the engines' orders differ), the same tokens
    tie = (want_finished == STOPPED) & (want_n >= call.stops.remaining)
    reason_ok = (finished == want_finished) | (tie & (finished == LENGTH))
    wrong = [b for b in range(len(call.cases))
             if n_out[b] != want_n[b] or not reason_ok[b] or not np.array_equal(out[b], want_out[b])]
    data: dict[str, Any] = {"rows": len(call.cases), "cases": sorted(set(call.cases)), "unforced": len(unforced)}
    if not wrong:
        counts = {FINISHED[code]: int((want_finished == code).sum()) for code in (RUNNING, STOPPED, LENGTH)}
        note = (f"; {len(unforced)} rows' unbounded output was not the forced verification (a chain-rule finding of "
                "the other checks)") if unforced else ""
        return result_of(NAME, Category.CONTRACT, True,
                         f"{len(call.cases)} rows in {len(CASES)} cases: every row kept the tokens of the stop rule, "
                         f"finished right ({', '.join(f'{v} {k}' for k, v in counts.items())}){note}", **data)
    by_case: dict[str, int] = {}
    for b in wrong:
        by_case[call.cases[b]] = by_case.get(call.cases[b], 0) + 1
    b = wrong[0]
    case = call.cases[b]
    stops = [int(t) for t in call.stops.tokens[b] if t >= 0]
    summary = (f"{len(wrong)} of {len(call.cases)} rows broke the stop rule ({', '.join(f'{k}: {v}' for k, v in by_case.items())}); "
               f"row {b} ({case}): emitted {out0[b, :n0[b]].tolist()} with stop tokens {stops} and "
               f"remaining {int(call.stops.remaining[b])}: expected {want_out[b, :want_n[b]].tolist()} finished "
               f"{FINISHED[int(want_finished[b])]}, got {out[b, :n_out[b]].tolist()} finished {FINISHED[int(finished[b])]}: "
               f"{CASES[case][1]}")
    data["stops_call"] = {"case": case, "k": int(call.draft.shape[1]), "vocab": vocab, "stop_pool": call.stop_pool,
                          "cap": call.cap, "rows": len(call.cases)}
    return result_of(NAME, Category.CONTRACT, False, summary, **data, wrong=len(wrong), by_case=by_case,
                     example={"row": b, "case": case, "emitted": out0[b, :n0[b]].tolist(), "stop_tokens": stops,
                              "remaining": int(call.stops.remaining[b]),
                              "expected": want_out[b, :want_n[b]].tolist(), "expected_finished": FINISHED[int(want_finished[b])],
                              "got": out[b, :n_out[b]].tolist(), "got_finished": FINISHED[int(finished[b])]})
