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

The chains themselves (:class:`~specaudit.chains.logits.LogitsChain`) live in
:mod:`specaudit.chains.logits` and the reference verifier of this contract in
:mod:`specaudit.verifiers.logits` (``reference-logits``): a contract says what a verifier must do
and imports no verifier.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from specaudit.chains.logits import LogitsChain, params_of
from specaudit.chains.processing import SamplingParams
from specaudit.chains.tabular import TabularChain
from specaudit.errors import UsageError, closest

__all__ = [
    "CONTRACTS",
    "LogitsParams",
    "LogitsVerifier",
    "as_canonical",
    "bind",
    "check_arity",
    "prepare",
    "view",
]

#: Verifier contracts a run can drive: canonical probabilities, or raw logits plus parameters.
CONTRACTS = ("probs", "logits")


@dataclass(frozen=True)
class LogitsParams:
    """Sampling processing of the target and of the drafter, handed to a logits verifier."""

    target: SamplingParams = field(default_factory=SamplingParams)
    draft: SamplingParams = field(default_factory=SamplingParams)

    def as_dict(self) -> dict[str, Any]:
        """Return ``{"target": {...}, "draft": {...}}``."""
        return {"target": self.target.as_dict(), "draft": self.draft.as_dict()}


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
    if contract == "probs":
        # the verifier gets the processed law, as engines hand draft_probs / target_probs
        return TabularChain(chain.dist, chain.nxt, chain.start) if isinstance(chain, LogitsChain) else chain
    if isinstance(chain, LogitsChain):
        return chain
    with np.errstate(divide="ignore"):
        return LogitsChain(chain.dist, chain.nxt, chain.start, np.log(chain.dist), SamplingParams())


def bind(verify_logits: Callable[..., Any], params: LogitsParams) -> Callable[..., Any]:
    """Return a canonical-contract callable that hands ``verify_logits`` its ``params``.

    The canonical ``q`` and ``p`` slots carry the draft and target logits (the chains' payload).
    """

    def call(draft, draft_logits, target_logits, num_draft, rng):
        return verify_logits(draft, draft_logits, target_logits, num_draft, params, rng)

    call.params = params  # type: ignore[attr-defined]
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
    verify: Callable[..., Any], contract: str, target: TabularChain, draft: TabularChain
) -> tuple[Callable[..., Any], TabularChain, TabularChain]:
    """Return the canonical callable and the chains whose payloads the contract hands over."""
    _check_contract(contract)
    target, draft = view(target, contract), view(draft, contract)
    if contract == "logits":
        verify = bind(verify, LogitsParams(params_of(target), params_of(draft)))
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
    if contract == "logits" and len(positional) < 6:
        raise UsageError(
            f"TARGET takes {len(positional)} arguments {tuple(p.name for p in positional)}; the logits contract "
            "passes 6 (draft, draft_logits, target_logits, num_draft, params, rng). For verify(draft, q, p, "
            "num_draft, rng) leave out --contract logits"
        )


def _check_contract(contract: str) -> None:
    if contract not in CONTRACTS:
        raise UsageError(f"contract = {contract!r}; allowed: {', '.join(CONTRACTS)}{closest(contract, CONTRACTS)}")

