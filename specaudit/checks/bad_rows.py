"""Bad input rows: what a verifier must do with NaN, inf and all-zero probability rows.

Engines hand verifiers broken rows: a fully masked draft-logits row softmaxes to all-NaN, a
numerics upset in the forward pass makes a target row NaN. Real rejection samplers turned such
rows into a silent token: vLLM's recovered-token kernel emitted token 0 after an all-NaN
``draft_probs`` row, the very draft it had just rejected (vLLM PR #41834, comment of 2026-08-06:
60 of 60 leaked id-0 tokens on rejected slots with a NaN draft row), and an all-NaN target row
came out as id ``vocab_size`` or, once masked, as id 0 (vLLM #20531, PR #21876, PR #42722,
issue #53029; fixed by PR #45060, "Fix out-of-vocabulary recovered token on all-NaN logits").

The bad-row rule
----------------
A probability row (``q[b, j]`` or ``p[b, j]``, length V) is *bad* when an entry is NaN or +-inf,
or when it has no positive mass (all zero). A row the verifier reads is one within row ``b``'s
``num_draft[b]`` drafts (``q[b, :num_draft[b]]``, ``p[b, :num_draft[b] + 1]``); rows past them
are padding, never read. For each bad row it reads a verifier must do one of:

1. **raise** an exception whose message names the row: ``row b`` (``row=b``, ``rows [b]``; the
   batch index) — a clear per-row error;
2. **mark** the row: ``n_out[b] = 0`` and ``out[b]`` all -1 (no token for this request; the other
   rows answered as usual);
3. for a bad **q** row only, the **documented fallback**: the draft at that position is not
   accepted on the strength of q (its ratio p/q is undefined) and the token there is drawn from
   ``p[b, j]`` itself. This is lossless: whatever the draft was, the token at position ``j`` has
   law ``p[b, j]``, and the reference verifier does this.

A bad **p** row has no law to draw from: emitting any token from it (or accepting a draft
against it) is the silent token this rule forbids. Bad rows in padding change nothing: no error,
no mark (``padding-independence`` for bad values).

The probe
---------
``bad-rows`` (contract) runs on an exact-mode scenario tagged ``bad-rows`` (the shipped
``bad-rows``, tag ``serving``, outside the default suite) instead of the corner probes, with the
scenario's V and K and q rows of its drafter. Every p row is one-hot at a token other than 0, so
every lossless verifier's output is exact: each emitted token is the argmax of p at its position
(a draft equal to the argmax is accepted whatever u is: ``u q < 1``; any other has p = 0). One
clean call, then one call per case, a batch of 8 rows with one bad row at a batch index from 1
to 7 (so ``row 0`` is never a lucky match):

=============================  =================================================================
case                           what must hold for the bad row ``b``
=============================  =================================================================
q at draft j (x4 kinds)        draft ``j`` is token 0 (p = 0 there), the drafts before it equal
                               the argmax: raise naming row b, mark it, or emit the argmax at j
                               (never token 0, the rejected draft: vLLM #41834)
p at position 0 (x4 kinds)     raise naming row b or mark it; no token from the bad row
p at the bonus (x4 kinds)      every draft equals the argmax (all accepted): raise or mark
q / p in padding (all-NaN)     answered as a clean row: no error, no mark, the argmax tokens
=============================  =================================================================

The four kinds are ``all-NaN``, ``one NaN`` (one entry of a valid row), ``+inf`` (one entry) and
``all-zero``. In every call the clean rows must be answered as usual (argmax tokens, every
clause of the contract) and no input is written to (sanitising a bad row in place changes the
caller's tensors). Under ``--contract logits`` the rows reach the verifier as ``log q``,
``log p`` (all-zero becomes all ``-inf``). The probe is *not applicable* where the exact probes
cannot reach the verifier: a contract other than ``probs`` / ``logits``, or a tree scenario.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from specaudit.checks.probes import ExactOutcome, Inputs, Prober, _canonical, _not_probed, probe_all
from specaudit.contract.chain import validate_output
from specaudit.errors import ContractError, VerifierCrash
from specaudit.results import Category, CheckResult, Status

__all__ = ["BAD_ROW_CHECKS", "KINDS", "NAME", "TAG", "Case", "applies", "bad_rows", "cases", "judge", "names_row", "run_bad_rows"]

#: The check's result name.
NAME = "bad-rows"
#: The tag an exact-mode scenario carries to run this probe instead of the corner probes.
TAG = "bad-rows"
#: Rows of every probe call (the bad row's batch index is 1..7).
ROWS = 8
CONTRACT = Category.CONTRACT
#: The kinds of bad row, in the order they are tried.
KINDS = ("all-NaN", "one NaN", "+inf", "all-zero")

Where = Literal["q", "p", "q-padding", "p-padding"]


@dataclass(frozen=True)
class Case:
    """One probe call: its inputs, the bad row and what was broken in it."""

    label: str  # e.g. "all-NaN q at draft 1"
    inputs: Inputs
    argmax: np.ndarray  # [B, K+1]: the one token of positive p at every position
    row: int  # the bad row's batch index
    where: Where
    position: int
    kind: str


def applies(spec: Any) -> bool:
    """Return True when ``spec`` is an exact-mode scenario tagged :data:`TAG` (this probe instead of the corners)."""
    return getattr(spec, "mode", "sample") == "exact" and TAG in getattr(spec, "tags", ())


def _spoil(row: np.ndarray, kind: str, keep: int, rng: np.random.Generator) -> None:
    """Make the probability ``row`` bad in place (``one NaN`` and ``+inf`` hit an entry other than ``keep``)."""
    v = row.shape[0]
    other = int((keep + 1 + rng.integers(v - 1)) % v)  # any index but ``keep``
    if kind == "all-NaN":
        row[:] = np.nan
    elif kind == "one NaN":
        row[other] = np.nan
    elif kind == "+inf":
        row[other] = np.inf
    else:  # all-zero
        row[:] = 0.0


def _clean(pr: Prober, rng: np.random.Generator) -> tuple[Inputs, np.ndarray]:
    """Return a clean batch whose p rows are one-hot at tokens 1..V-1 (the argmax array), q from the drafter."""
    k, v = pr.k, pr.vocab
    argmax = rng.integers(1, v, size=(ROWS, k + 1))
    p = np.zeros((ROWS, k + 1, v))
    np.put_along_axis(p, argmax[..., None], 1.0, axis=2)
    q = pr.rows_of(pr.drafter, ROWS * k, rng).reshape(ROWS, k, v)
    q = 0.9 * q + 0.1 / v  # q > 0 everywhere; a draft equal to the argmax (p = 1) is accepted whatever u is
    # runs of drafts equal to the argmax, then a random token (p = 0 unless it hits the argmax)
    draft = np.where(rng.random((ROWS, k)) < 0.7, argmax[:, :k], rng.integers(v, size=(ROWS, k)))
    num_draft = rng.integers(0, k + 1, size=ROWS)
    return Inputs(draft.astype(np.int64), q, p, num_draft.astype(np.int64)), argmax


def cases(pr: Prober) -> list[Case]:
    """Return the probe's cases (see the module docstring), each with its own clean batch and one bad row."""
    k = pr.k
    found: list[Case] = []

    def case(where: Where, kind: str, tag: str) -> None:
        rng = pr.rng(f"bad-rows/{tag}")
        inputs, argmax = _clean(pr, rng)
        b = 1 + len(found) % (ROWS - 1)
        nd = k if where in ("q", "p") else int(rng.integers(0, k))  # padding: fewer drafts than K
        inputs.num_draft[b] = nd
        inputs.draft[b, :nd] = argmax[b, :nd]  # every draft accepted: the chain reaches the bad row
        if where == "q":
            j = int(rng.integers(k))
            inputs.draft[b, j] = 0  # p = 0 there: never accepted; token 0 would be the rejected draft
            _spoil(inputs.q[b, j], kind, 0, rng)
            label = f"{kind} q at draft {j}"
        elif where == "p":
            j = 0 if tag.startswith("p0") else nd
            _spoil(inputs.p[b, j], kind, int(argmax[b, j]), rng)
            label = f"{kind} p at {'position 0' if j == 0 and nd else f'the bonus position {j}'}"
        elif where == "q-padding":
            j = int(rng.integers(nd, k))
            _spoil(inputs.q[b, j], kind, 0, rng)
            label = f"{kind} q in padding (draft {j} of num_draft {nd})"
        else:
            j = int(rng.integers(nd + 1, k + 1))
            _spoil(inputs.p[b, j], kind, 0, rng)
            label = f"{kind} p in padding (position {j}, num_draft {nd})"
        found.append(Case(label, inputs, argmax, b, where, j, kind))

    for kind in KINDS:
        if k:
            case("q", kind, f"q/{kind}")
        case("p", kind, f"p0/{kind}")
        if k:
            case("p", kind, f"bonus/{kind}")
    if k:
        case("q-padding", "all-NaN", "q-padding")
        case("p-padding", "all-NaN", "p-padding")
    return found


def names_row(message: str, row: int) -> bool:
    """Return True when ``message`` names batch row ``row`` (``row 3``, ``row=3``, ``rows [3]``, ``row[3]``)."""
    return re.search(rf"\brows?\W{{0,3}}{row}(?!\d)", message, flags=re.IGNORECASE) is not None


def _call(pr: Prober, inputs: Inputs, rng: np.random.Generator) -> tuple[Any, str | None]:
    """Call the verifier on a copy of ``inputs`` (counted as a probe call); return its answer and what it wrote, if anything."""
    given = inputs.copy()
    t0 = time.perf_counter()
    try:
        result = pr.verify(given.draft, given.q, given.p, given.num_draft, rng)
    finally:
        pr.seconds += time.perf_counter() - t0
        pr.calls += 1
        pr.rows += inputs.draft.shape[0]
    return result, inputs.first_change(given)


def _off_argmax(out: np.ndarray, n_out: np.ndarray, argmax: np.ndarray, rows: np.ndarray) -> str | None:
    """Describe the first emitted token of ``rows`` that is not the argmax of p at its position, or None."""
    for b in rows.tolist():
        for j in range(int(n_out[b])):
            if out[b, j] != argmax[b, j]:
                return (f"row {b} position {j}: token {out[b, j]} has p = 0 (p is one-hot at {argmax[b, j]}); "
                        f"row {b} emitted {out[b, : n_out[b]].tolist()}")
    return None


def judge(case: Case, result: Any, raised: VerifierCrash | None) -> str | None:
    """Return why the verifier's answer to ``case`` breaks the bad-row rule, or None when it keeps it."""
    b, inputs = case.row, case.inputs
    padding = case.where.endswith("padding")
    if raised is not None:
        message = str(raised)
        if padding:
            return (f"{case.label}, row {b}: the verifier raised ({message}) on a row past num_draft, which is padding "
                    "it must never read (rule: padding changes nothing)")
        if not names_row(message, b):
            return (f"{case.label}, row {b}: the verifier raised ({message}) without naming row {b} "
                    f"(rule: a clear per-row error says 'row {b}')")
        return None
    rows = np.arange(inputs.draft.shape[0])
    pair = [np.array(x) for x in result] if isinstance(result, (tuple, list)) and len(result) == 2 else None
    marked = (pair is not None and pair[0].ndim == 2 and pair[0].shape[0] == rows.size and pair[1].shape == rows.shape
              and pair[1][b] == 0 and bool(np.all(pair[0][b] == -1)))
    if marked and padding:
        return (f"{case.label}, row {b}: the verifier marked the row (n_out = 0) for a bad row past num_draft, which is "
                "padding it must never read (rule: padding changes nothing)")
    if marked and pair is not None:  # validate the other rows in place: the marked row stands in as one argmax token
        pair[0][b, 0], pair[1][b] = case.argmax[b, 0], 1
        result = tuple(pair)
    try:
        out, n_out = validate_output(result, inputs.draft, inputs.num_draft, inputs.vocab)
    except ContractError as exc:
        return f"{case.label}, row {b}: [{exc.clause}] {exc.detail}"
    wrong = _off_argmax(out, n_out, case.argmax, rows[rows != b])
    if wrong:
        return f"{case.label}: a clean row was answered wrongly: {wrong}"
    if marked:
        return None
    emitted = out[b, : n_out[b]].tolist()
    if case.where == "p" and n_out[b] > case.position:
        token = emitted[case.position]
        zero = " (token 0: vLLM #42722 / PR #45060)" if token == 0 else ""
        return (f"{case.label}, row {b}: emitted {emitted}, token {token} at position {case.position} from a bad p row "
                f"(no law to draw from){zero}; rule: raise an error naming row {b} or mark it (n_out = 0, out all -1)")
    wrong = _off_argmax(out, n_out, case.argmax, np.array([b]))
    if wrong is None:
        return None
    if case.where == "q":
        token = out[b, case.position] if n_out[b] > case.position else None
        silent = " — token 0, the rejected draft: vLLM #41834" if token == 0 else ""
        return (f"{case.label}: {wrong}{silent}; rule: a draft tested against a bad q row is not accepted on its "
                f"strength and the token there is drawn from p[{b}, {case.position}] (or raise naming row {b}, or mark it)")
    return f"{case.label}: {wrong}; rule: " + ("padding changes nothing" if padding else "every emitted token has p > 0")


def bad_rows(pr: Prober) -> CheckResult:
    """Probe NaN / inf / all-zero rows in q and p: a per-row error, a mark, or the documented q fallback; never a silent token."""
    clean, argmax = _clean(pr, pr.rng("bad-rows/clean"))
    out, n_out = pr.call(clean, pr.rng("bad-rows/clean-call"))  # a crash here is the verifier's, not a bad row's
    wrong = _off_argmax(out, n_out, argmax, np.arange(ROWS))
    if wrong:
        return _result(False, f"the clean control batch was answered wrongly: {wrong}")
    answers: dict[str, list[str]] = {"raised": [], "marked": [], "answered": []}
    failures: list[str] = []
    for case in cases(pr):
        rng = pr.rng(f"bad-rows/call/{case.label}")
        raised: VerifierCrash | None = None
        result: Any = None
        wrote: str | None = None
        try:
            result, wrote = _call(pr, case.inputs, rng)
        except VerifierCrash as exc:
            raised = exc
        problem = judge(case, result, raised)
        if problem is None and wrote is not None:  # sanitising bad rows in place changes the caller's tensors
            problem = f"{case.label}, row {case.row}: the verifier wrote into its inputs: {wrote} (rule: inputs are read-only)"
        if problem is not None:
            failures.append(problem)
            continue
        if raised is not None:
            answers["raised"].append(case.label)
        elif np.asarray(result[1])[case.row] == 0:
            answers["marked"].append(case.label)
        else:
            answers["answered"].append(case.label)
    total = sum(len(v) for v in answers.values()) + len(failures)
    how = {key: len(labels) for key, labels in answers.items()}
    if failures:
        return _result(False, f"{len(failures)} of {total} bad-row cases broke the bad-row rule; first: {failures[0]}",
                        failures=failures[:20], answers=how)
    said = ", ".join(f"{n} {key}" for key, n in how.items() if n)
    return _result(True, f"{total} bad-row cases (NaN, inf, all-zero rows in q, p and padding) kept the rule: {said}; "
                   "no token from a bad p row, no rejected draft recovered from a bad q row", answers=how)


def _result(ok: bool, summary: str, **data: Any) -> CheckResult:
    return CheckResult(NAME, CONTRACT, Status.PASSED if ok else Status.FAILED, summary, data=data)


#: (name, category, probe) as :data:`specaudit.checks.probes.EXACT_CHECKS`; registered in :data:`specaudit.checks.CHECKS`.
BAD_ROW_CHECKS: list[tuple[str, Category, Callable[[Prober], CheckResult]]] = [(NAME, CONTRACT, bad_rows)]


def run_bad_rows(
    verify: Callable[..., Any], spec: Any, seed: int, gate_efficiency: bool = True, contract: str = "probs"
) -> ExactOutcome:
    """Run the bad-row probe on ``verify`` (already ``contract.guarded``) with the scenario's V, K and drafter.

    As :func:`specaudit.checks.probes.run_exact`: a crash on the clean control call makes the
    check ERROR (and the scenario's error), a timeout stops it; a contract the probes do not speak
    (or a tree scenario) makes it "not applicable".
    """
    why = _not_probed(spec, contract)
    if why is not None:
        reason = f"the bad-row probe speaks the canonical chain contract, not {why}"
        return ExactOutcome((CheckResult(NAME, CONTRACT, Status.SKIPPED, f"not applicable: {reason}", data={"reason": reason}),))
    canonical, logits_input = _canonical(verify, contract)
    pr = Prober(canonical, spec, seed, logits_input)
    results, error = probe_all(pr, BAD_ROW_CHECKS, gate_efficiency)
    return ExactOutcome(tuple(results), error, pr.calls, pr.seconds, {"mode": "exact", "rows": pr.rows})
