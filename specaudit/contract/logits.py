"""The logits contract: the verifier applies the sampling parameters itself.

::

    verify_logits(draft[B,K] int64, draft_logits[B,K,V] float64, target_logits[B,K+1,V] float64,
                  num_draft[B] int64, params: LogitsParams, rng: np.random.Generator)
        -> (out[B,K+1] int64 padded with -1, n_out[B] int64 = accepted + 1)

``params.target`` and ``params.draft`` are :class:`~specaudit.chains.processing.SamplingParams`
(temperature, top_k, top_p, min_p). The drafts were sampled from the drafter's *processed*
law ``process(draft_logits, params.draft)``; the output must follow the processed target
``process(target_logits, params.target)`` at every position (draft positions, residual,
bonus). Row layout and padding are those of the canonical contract (specaudit.contract.chain): row
``b`` has ``num_draft[b]`` valid drafts, ``target_logits[b, num_draft[b]]`` is its bonus
position, everything after is garbage (finite logits) the verifier must not read.

Every scenario runs under either contract (``specaudit run --contract logits``). A scenario's
chains hold raw logits and sampling parameters (kind ``logits``) or plain probabilities; under
the probs contract the verifier is handed the processed laws, under the logits contract the
raw logits and the parameters (probability chains become logits ``log p`` with identity
processing). :func:`prepare` is the one place that makes this choice.

Per-request sampling (serving)
------------------------------
An engine batches requests with their own parameters and history (vLLM ``SamplingMetadata``:
per-row temperature, top-k, top-p, min-p, penalties, logit bias, allowed-token mask, and the
output token ids). On a scenario with a batch mix or a penalised target
(:mod:`specaudit.chains.serving`) ``params.rows`` is a tuple of :class:`RowParams`, one per row
in batch order: the row's target and drafter :class:`~specaudit.chains.processing.SamplingParams`
and ``output``, the tokens the request generated before draft 0. Row ``b``'s drafts were sampled
from ``process(draft_logits[b], rows[b].draft, counts)`` and its output must follow
``process(target_logits[b, j], rows[b].target, counts_j)`` where ``counts_j`` counts ``output``
plus drafts ``0..j-1`` (the history at verification position ``j``: vLLM #18902).
:func:`processed` is that reference processing of a whole batch. ``params.target`` and
``params.draft`` then hold row 0's parameters: a verifier that reads only them applies row 0's
processing to every row (the zoo's ``batch_params_row0``) and fails the serving scenarios.
Elsewhere ``rows`` is None and the parameters are batch-wide, as before.

Draft vocabulary (``draft-vocab``)
---------------------------------
A drafter with a vocabulary of its own (a scenario's ``d2t``: :mod:`specaudit.chains.vocab`) is
driven through the third contract::

    verify(draft[B,K] int64 target ids, q_draft[B,K,Vd] float64, p[B,K+1,V] float64, num_draft[B] int64,
           d2t[Vd] int64, rng) -> (out, n_out)

``q_draft`` is the drafter's law over its own ids, ``d2t[i]`` the target id of draft id ``i``:
the verifier must read ``q`` of draft token ``x`` at the draft id ``i`` with ``d2t[i] = x``
(``q_target[d2t] = q_draft``, 0 elsewhere). A scenario without ``d2t`` hands the identity map
(``Vd = V``). :func:`bind_map` is that call.

Logprobs (optional)
-------------------
A logits verifier that also returns the log-probability of every token it emits (vLLM's
sampler output ``logprobs``) says so with an attribute ``verify.logprobs_mode``, vLLM's
``logprobs_mode`` names: ``"processed_logprobs"`` (or ``"processed"``: the log of the processed
target law at that position, the law the token's position follows) or ``"raw_logprobs"`` (or
``"raw"``: ``log_softmax`` of the raw target logits, before any processing). It then returns
``(out, n_out, logprobs[B,K+1] float)``; entries past ``n_out`` are padding. The emitted token's
logprob at the rejected position is the target law's there, not the residual's. The simulation
and the probes take ``(out, n_out)`` (:func:`split_logprobs`); the ``logprobs`` check
(:mod:`specaudit.checks.logprobs`) checks the third output exactly (vLLM PR #30846: logits
processed in place, so the "raw" logprobs returned were the processed ones).

The chains themselves (:class:`~specaudit.chains.logits.LogitsChain`) live in
:mod:`specaudit.chains.logits` and the reference verifier of this contract in
:mod:`specaudit.verifiers.logits` (``reference-logits``): a contract says what a verifier must do
and imports no verifier.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

from specaudit.chains.logits import LogitsChain, params_of
from specaudit.chains.processing import SamplingParams, process, process_rows
from specaudit.chains.serving import HistoryChain, MixedChain
from specaudit.chains.tabular import TabularChain
from specaudit.errors import UsageError, closest

__all__ = [
    "CONTRACTS",
    "LOGPROBS_MODES",
    "LogitsParams",
    "LogitsVerifier",
    "RowParams",
    "Rows",
    "as_canonical",
    "bind",
    "bind_map",
    "check_arity",
    "history_counts",
    "logprobs_mode",
    "logprobs_of",
    "prepare",
    "processed",
    "split_logprobs",
    "view",
]

#: Verifier contracts a run can drive: canonical probabilities, raw logits plus parameters, or q in draft space plus d2t.
CONTRACTS = ("probs", "logits", "draft-vocab")


@dataclass(frozen=True)
class RowParams:
    """One request of the batch: its target and drafter processing and the tokens it generated so far."""

    target: SamplingParams
    draft: SamplingParams
    output: tuple[int, ...] = ()  # the history before draft 0 (the penalties read it, then the drafts)


@dataclass(frozen=True)
class LogitsParams:
    """Sampling processing of the target and of the drafter, handed to a logits verifier.

    ``rows`` (serving scenarios): one :class:`RowParams` per batch row; ``target`` and ``draft``
    are then row 0's. None: ``target`` and ``draft`` hold for every row, with an empty history.
    """

    target: SamplingParams = field(default_factory=SamplingParams)
    draft: SamplingParams = field(default_factory=SamplingParams)
    rows: tuple[RowParams, ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return ``{"target": {...}, "draft": {...}}`` (and ``"rows"``, their count, when per row)."""
        out: dict[str, Any] = {"target": self.target.as_dict(), "draft": self.draft.as_dict()}
        if self.rows is not None:
            out["rows"] = len(self.rows)
        return out

    def row_params(self, batch: int) -> tuple[RowParams, ...]:
        """Return the parameters of every row: ``rows``, else the batch-wide ones with an empty history."""
        if self.rows is not None:
            if len(self.rows) != batch:
                raise ValueError(f"params.rows holds {len(self.rows)} rows; the batch has {batch}")
            return self.rows
        return (RowParams(self.target, self.draft),) * batch


class Rows(NamedTuple):
    """What a simulation hands a per-row bound verifier each call: each row's class and history."""

    classes: np.ndarray  # [B] int64: the request class of every row (0 without a mix)
    history: np.ndarray  # [B, H] int64: tokens generated so far, row b's first lengths[b] of them
    lengths: np.ndarray  # [B] int64


def history_counts(
    params: LogitsParams, draft: np.ndarray, num_draft: np.ndarray, vocab: int, drafts: bool = True
) -> np.ndarray:
    """Return ``counts[B, K+1, V]``: how often each token occurs in row b's history at position j.

    The history at verification position ``j`` is the row's ``output`` plus its drafts
    ``0..j-1`` (only valid drafts, ``j <= num_draft``); ``drafts=False`` leaves the drafts out
    (vLLM #18902, the bug).
    """
    draft = np.asarray(draft, dtype=np.int64)
    batch, k = draft.shape
    rows = params.row_params(batch)
    base = np.zeros((batch, vocab), dtype=np.int64)
    for b, row in enumerate(rows):
        if row.output:
            np.add.at(base[b], np.asarray(row.output, dtype=np.int64), 1)
    counts = np.repeat(base[:, None, :], k + 1, axis=1)
    if drafts and k:
        valid = np.arange(k)[None, :] < np.asarray(num_draft, dtype=np.int64)[:, None]
        hot = np.zeros((batch, k, vocab), dtype=np.int64)
        b_idx, j_idx = np.nonzero(valid)
        hot[b_idx, j_idx, draft[b_idx, j_idx]] = 1
        counts[:, 1:] += np.cumsum(hot, axis=1)
    return counts


def processed(
    params: LogitsParams, draft: np.ndarray, num_draft: np.ndarray, draft_logits: np.ndarray, target_logits: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Return the reference ``(q, p)`` of a batch: every row processed with its own parameters and history.

    ``q[b] = process(draft_logits[b], rows[b].draft)``, ``p[b, j] = process(target_logits[b, j],
    rows[b].target, counts_j)`` with the history counts of :func:`history_counts` (output plus
    drafts ``0..j-1``). Batch-wide parameters (``rows`` None) process every row alike.
    """
    if params.rows is None:
        return process(draft_logits, params.draft), process(target_logits, params.target)
    rows = params.row_params(len(num_draft))
    counts = None
    if any(r.target.penalised or r.draft.penalised for r in rows):
        counts = history_counts(params, draft, num_draft, target_logits.shape[-1])
    k = draft_logits.shape[1]
    q = process_rows(draft_logits, [r.draft for r in rows], None if counts is None else counts[:, :k])
    p = process_rows(target_logits, [r.target for r in rows], counts)
    return q, p


class LogitsVerifier(Protocol):
    """A callable in the logits contract."""

    def __call__(
        self,
        draft: np.ndarray,
        draft_logits: np.ndarray,
        target_logits: np.ndarray,
        num_draft: np.ndarray,
        params: LogitsParams,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, np.ndarray]: ...


def view(chain: TabularChain, contract: str) -> TabularChain:
    """Return ``chain`` with the payload form of ``contract`` (same law, same states)."""
    _check_contract(contract)
    if isinstance(chain, MixedChain):  # each class in the contract's form, the union rebuilt
        return chain.with_classes(tuple(view(c, contract) for c in chain.classes))
    if contract == "probs":
        # the verifier gets the processed law, as engines hand draft_probs / target_probs
        return TabularChain(chain.dist, chain.nxt, chain.start) if isinstance(chain, LogitsChain) else chain
    if isinstance(chain, LogitsChain):
        return chain
    with np.errstate(divide="ignore"):
        return LogitsChain(chain.dist, chain.nxt, chain.start, np.log(chain.dist), SamplingParams())


def bind(
    verify_logits: Callable[..., Any], params: LogitsParams, classes: Sequence[LogitsParams] | None = None
) -> Callable[..., Any]:
    """Return a canonical-contract callable that hands ``verify_logits`` its ``params``.

    The canonical ``q`` and ``p`` slots carry the draft and target logits (the chains' payload).
    With ``classes`` (the per-class parameters of a serving scenario) the callable is marked
    ``wants_rows``: the simulator adds a sixth argument, :class:`Rows`, and the verifier gets
    ``params.rows`` built from each row's class and history (a call without it gets ``params``).
    """

    def call(draft, draft_logits, target_logits, num_draft, rng, rows: Rows | None = None):
        given = params if rows is None or classes is None else _per_row(rows, classes)
        return verify_logits(draft, draft_logits, target_logits, num_draft, given, rng)

    call.params = params  # type: ignore[attr-defined]
    call.wants_rows = classes is not None  # type: ignore[attr-defined]
    return call


def _per_row(rows: Rows, classes: Sequence[LogitsParams]) -> LogitsParams:
    """Return the parameters of a batch whose row b is of class ``rows.classes[b]`` with its history."""
    per = tuple(
        RowParams(classes[c].target, classes[c].draft, tuple(h[:n]))
        for c, h, n in zip(rows.classes.tolist(), rows.history.tolist(), rows.lengths.tolist())
    )
    first = per[0] if per else RowParams(classes[0].target, classes[0].draft)
    return LogitsParams(first.target, first.draft, per)


def bind_map(verify_mapped: Callable[..., Any], d2t: np.ndarray) -> Callable[..., Any]:
    """Return a canonical-contract callable handing ``verify_mapped`` q in draft space and the map ``d2t``.

    The canonical ``q`` is the drafter's law in target space, 0 off the image of ``d2t``
    (:func:`specaudit.chains.vocab.restrict`), so ``q[..., d2t]`` is its law over draft ids, whole.
    """
    d2t = np.asarray(d2t, dtype=np.int64)

    def call(draft, q, p, num_draft, rng):
        return verify_mapped(draft, np.ascontiguousarray(q[..., d2t]), p, num_draft, d2t.copy(), rng)

    call.d2t = d2t  # type: ignore[attr-defined]
    return call


def as_canonical(verify_logits: Callable[..., Any]) -> Callable[..., Any]:
    """Return a canonical verifier (probabilities in) running ``verify_logits`` on ``log p``.

    Lets every probability-based check (corner cases, adversarial uniforms) reach a logits
    verifier: identity processing of ``log p`` is ``p``.
    """
    identity = LogitsParams()

    def call(draft, q, p, num_draft, rng):
        with np.errstate(divide="ignore"):
            return verify_logits(draft, np.log(q), np.log(p), num_draft, identity, rng)

    return call


def prepare(
    verify: Callable[..., Any], contract: str, target: TabularChain, draft: TabularChain, d2t: np.ndarray | None = None
) -> tuple[Callable[..., Any], TabularChain, TabularChain]:
    """Return the canonical callable and the chains whose payloads the contract hands over.

    ``d2t``: the scenario's draft-to-target map (None: the identity), handed over by ``draft-vocab``.
    """
    _check_contract(contract)
    if contract == "draft-vocab":  # probabilities, q in draft space
        target, draft = view(target, "probs"), view(draft, "probs")
        return bind_map(verify, np.arange(target.vocab) if d2t is None else d2t), target, draft
    target, draft = view(target, contract), view(draft, contract)
    if contract == "logits":
        t_classes = target.classes if isinstance(target, MixedChain) else (target,)
        d_classes = draft.classes if isinstance(draft, MixedChain) else (draft,)
        per_class = [LogitsParams(params_of(t), params_of(d)) for t, d in zip(t_classes, d_classes)]
        serving = isinstance(target, MixedChain) or any(isinstance(t, HistoryChain) for t in t_classes)
        verify = bind(verify, per_class[0], per_class if serving else None)
    return verify, target, draft


def check_arity(verify: Callable[..., Any], contract: str) -> None:
    """Refuse a target whose signature cannot take ``contract``'s arguments, saying which fits."""
    import inspect

    _check_contract(contract)
    try:
        sig = inspect.signature(verify)
    except (TypeError, ValueError):  # builtins, C extensions: let the call itself decide
        return
    kinds = [p.kind for p in sig.parameters.values()]
    if inspect.Parameter.VAR_POSITIONAL in kinds:
        return
    positional = [
        p for p in sig.parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    required = sum(p.default is inspect.Parameter.empty for p in positional)
    if contract == "probs" and required > 5:
        raise UsageError(
            f"TARGET takes {required} arguments {tuple(p.name for p in positional)}; the probs contract passes 5 "
            "(draft, q, p, num_draft, rng). For verify(draft, draft_logits, target_logits, num_draft, params, rng) "
            "pass --contract logits"
        )
    if contract == "draft-vocab" and len(positional) < 6:
        raise UsageError(
            f"TARGET takes {len(positional)} arguments {tuple(p.name for p in positional)}; the draft-vocab contract "
            "passes 6 (draft, q_draft, p, num_draft, d2t, rng). For verify(draft, q, p, num_draft, rng) leave out "
            "--contract draft-vocab"
        )
    if contract == "logits" and len(positional) < 6:
        raise UsageError(
            f"TARGET takes {len(positional)} arguments {tuple(p.name for p in positional)}; the logits contract "
            "passes 6 (draft, draft_logits, target_logits, num_draft, params, rng). For verify(draft, q, p, "
            "num_draft, rng) leave out --contract logits"
        )


def _check_contract(contract: str) -> None:
    if contract not in CONTRACTS:
        raise UsageError(f"contract = {contract!r}; allowed: {', '.join(CONTRACTS)}{closest(contract, CONTRACTS)}")


#: ``verify.logprobs_mode`` values (vLLM's ``logprobs_mode`` names and short ones) -> what the logprobs are of.
LOGPROBS_MODES = {"processed_logprobs": "processed", "processed": "processed", "raw_logprobs": "raw", "raw": "raw"}
_LOGPROBS = "__specaudit_logprobs__"


def logprobs_mode(verify: Callable[..., Any]) -> str | None:
    """Return ``"processed"`` or ``"raw"``, what ``verify``'s logprobs output holds, or None when it returns none.

    Raises UsageError (exit 4) naming the attribute for a value that is not a mode.
    """
    mode = getattr(verify, "logprobs_mode", None)
    if mode is None:
        return None
    if not isinstance(mode, str) or mode not in LOGPROBS_MODES:
        name = getattr(verify, "__qualname__", type(verify).__name__)
        hint = closest(mode, LOGPROBS_MODES) if isinstance(mode, str) else ""
        raise UsageError(f"{name}.logprobs_mode = {mode!r}: not a logprobs mode; one of "
                         f"{', '.join(LOGPROBS_MODES)}{hint} (or no attribute: no logprobs output)")
    return LOGPROBS_MODES[mode]


def split_logprobs(verify: Callable[..., Any]) -> Callable[..., Any]:
    """Return ``verify`` when it returns no logprobs; else a callable returning its ``(out, n_out)`` alone.

    The callable keeps ``(mode, verify)`` for the ``logprobs`` check (:func:`logprobs_of`) and
    ``verify``'s signature; a return that is not a triple goes through as it came (the output
    checks name what is wrong with it).
    """
    mode = logprobs_mode(verify)
    if mode is None:
        return verify

    @functools.wraps(verify)
    def call(*args: Any) -> Any:
        result = verify(*args)
        if isinstance(result, (tuple, list)) and len(result) == 3:
            return result[0], result[1]
        return result

    setattr(call, _LOGPROBS, (mode, verify))
    return call


def logprobs_of(verify: Callable[..., Any]) -> tuple[str, Callable[..., Any]] | None:
    """Return ``(mode, the verifier returning logprobs)`` behind a :func:`split_logprobs` callable, or None."""
    return getattr(verify, _LOGPROBS, None)
