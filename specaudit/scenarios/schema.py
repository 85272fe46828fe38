"""Scenario schema (version 1): the frozen dataclasses a scenario file validates into.

A scenario names a target chain, a drafter chain, the draft-count law, the verification algorithm
and the sample plan. The classes hold every rule a scenario must obey (rows sum to 1, shapes match
the vocabulary, a tree shape goes with ``algorithm: tree``) and build the chains they describe;
they know nothing of files. Reading YAML with ``file:line:`` messages lives in
`specaudit.scenarios.loading`, the shipped scenarios in `specaudit.scenarios.catalogue`. Unknown
keys are named with their closest match (hypothesis ``internal/validation.py``).

The classes are plain frozen dataclasses, so that a run holds and builds scenarios without
pydantic (importing it and building its validators was ~0.15 s of a one-scenario run's start,
issue 20). pydantic validates them when a file is read (:func:`validate`, its validator built
on first use): every field rule is an ``Annotated`` marker, :class:`Rule` (pydantic ``Field``
arguments) or :class:`Check` (a function run before or after the field is validated), that pydantic
asks for its schema; whole-object rules are each class's ``_check``. Built directly, a dataclass is
not validated (as pydantic's ``model_construct``): scenarios come from :func:`validate`, changed
copies from :func:`dataclasses.replace`. :func:`to_data` is the JSON-ready form (what pydantic's
``dump_python(mode="json")`` gives), for the results file and the content hash.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, cast

import numpy as np

from specaudit.chains import logits as logits_mod
from specaudit.chains import processing
from specaudit.chains import serving as serving_chains
from specaudit.chains import tabular as chains
from specaudit.chains import vocab as vocab_chains
from specaudit.chains.lazy import ZipfChain
from specaudit.chains.tabular import TabularChain
from specaudit.errors import UsageError, closest

SCHEMA_VERSION = 1
#: Rows of explicit probabilities must sum to 1 within this absolute tolerance; they are then
#: renormalised in float64 so that references are exact.
SUM_TOLERANCE = 1e-6
#: The joint test enumerates V**L cells; beyond this it is skipped (per-prefix tests take over).
MAX_JOINT_CELLS = 1 << 20
#: Scenario files larger than this are refused before parsing: PyYAML keeps a node per scalar
#: (a 50 MB file took > 4 GB and minutes), and a hand-written scenario is a few kB. An explicit
#: 600 x 600 matrix still fits; larger chains are generated (``kind: dirichlet``, ``logits``, ``zipf``).
#: A document's aliases may not expand past as many values either.
MAX_SCENARIO_BYTES = 4 << 20


class Rule:
    """A field's constraints as pydantic ``Field`` arguments (``ge``, ``pattern``, ``strict``, ``description``...).

    A marker in ``Annotated[type, Rule(...)]``: pydantic, when it builds a validator, asks it for its
    schema and gets that of ``Annotated[type, Field(...)]`` (pydantic is imported then, not before).
    """

    __slots__ = ("arguments",)

    def __init__(self, **arguments: Any) -> None:
        self.arguments = arguments

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], Any]) -> Any:
        from pydantic import Field

        return handler(Annotated[source, Field(**self.arguments)])


class Check:
    """A field's rule as a function of its value (``after`` pydantic validated it, or ``before``), returning it.

    It raises ValueError with the message the file's reader prints at the field's key.
    """

    __slots__ = ("function", "before")

    def __init__(self, function: Callable[[Any], Any], *, before: bool = False) -> None:
        self.function, self.before = function, before

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], Any]) -> Any:
        from pydantic_core import core_schema

        wrap = core_schema.no_info_before_validator_function if self.before else core_schema.no_info_after_validator_function
        return wrap(self.function, handler(source))


class Spec:
    """Base of every schema class: strict fields, unknown keys named with their closest match, ``_check`` run last.

    Subclasses are ``@dataclass(frozen=True, kw_only=True)``.
    """

    __pydantic_config__ = {"extra": "forbid", "strict": True}

    def _check(self) -> None:
        """Check the rules that span fields (raise ValueError); the fields themselves are valid."""

    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            from pydantic_core import PydanticCustomError

            allowed = [f.name for f in dataclasses.fields(cast(Any, cls))]
            for key in data:
                if key not in allowed:
                    raise PydanticCustomError(
                        "unknown_key",
                        "unknown key {shown}; allowed: {allowed}{hint}",  # repr: an escape sequence is shown, not run
                        {"key": key, "shown": repr(key), "allowed": ", ".join(allowed), "hint": closest(str(key), allowed)},
                    )
        return data

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Callable[[Any], Any]) -> Any:
        from pydantic_core import core_schema

        schema = handler(source)
        if schema.get("type") != "dataclass":  # a reference to the class's schema, built where the class was first met
            return schema
        schema["strict"] = False  # a mapping validates into the class; its fields stay strict

        def checked(value: Spec) -> Spec:
            value._check()
            return value

        # the class's reference names the whole (a union's choice refers to it), not the bare dataclass inside
        return core_schema.no_info_before_validator_function(
            cls._known_keys, core_schema.no_info_after_validator_function(checked, schema), ref=schema.pop("ref", None))


def _check_row(row: list[float], where: str = "row") -> list[float]:
    arr = np.asarray(row, dtype=np.float64)
    if arr.size == 0:
        raise ValueError(f"{where} is empty")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{where} must hold finite probabilities >= 0, got {row}")
    total = float(arr.sum())
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise ValueError(f"{where} sums to {total:.9g}; it must sum to 1 within {SUM_TOLERANCE:g}")
    return row


def _probability_rows(matrix: list[list[float]]) -> list[list[float]]:
    for i, row in enumerate(matrix):
        _check_row(row, f"row {i}")
    return matrix


def _logit_rows(matrix: list[list[float]]) -> list[list[float]]:
    for i, row in enumerate(matrix):
        arr = np.asarray(row, dtype=np.float64)
        if arr.size == 0 or np.isnan(arr).any() or (arr == np.inf).any() or not np.isfinite(arr).any():
            raise ValueError(f"row {i} must hold logits: finite numbers or -.inf, at least one finite; got {row}")
    return matrix


def _some_allowed(tokens: list[int]) -> list[int]:
    if not tokens:
        raise ValueError("received [], a mask that keeps no token (nothing left to sample); allowed: at least one "
                         "token id, or omit the key (every token allowed)")
    return tokens


def _known_convention(name: str) -> str:
    if name not in processing.CONVENTIONS:
        raise ValueError(f"{processing.CONVENTIONS.unknown(name)} (the engine whose sampler is the reference)")
    return name


def _adapter_name(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


@dataclass(frozen=True, kw_only=True)
class ContextFree(Spec):
    """Every token drawn from one explicit probability vector, whatever the context."""

    kind: Literal["context_free"]
    probs: Annotated[list[Annotated[float, Rule(strict=False)]], Check(functools.partial(_check_row, where="probs"))]

    def build(self, vocab: int, role_seed: np.random.SeedSequence) -> chains.TabularChain:
        """Return the chain."""
        return chains.context_free(_normalised(self.probs))


@dataclass(frozen=True, kw_only=True)
class Markov(Spec):
    """First-order chain with explicit transition rows; ``start`` is the context before token 0."""

    kind: Literal["markov"]
    matrix: Annotated[list[list[Annotated[float, Rule(strict=False)]]], Check(_probability_rows)]
    start: Annotated[int, Rule(ge=0)] = 0

    def build(self, vocab: int, role_seed: np.random.SeedSequence) -> chains.TabularChain:
        """Return the chain."""
        return chains.first_order(np.array([_normalised(r) for r in self.matrix]), self.start)


@dataclass(frozen=True, kw_only=True)
class Dirichlet(Spec):
    """Random first-order chain: each row ~ Dirichlet(concentration), optionally on a random support."""

    kind: Literal["dirichlet"]
    concentration: Annotated[float, Rule(gt=0.0, le=1e6, strict=False)] = 1.0
    support: Annotated[float, Rule(gt=0.0, le=1.0, strict=False)] = 1.0
    start: Annotated[int, Rule(ge=0)] = 0
    seed: Annotated[int, Rule(ge=0)] = 0

    def build(self, vocab: int, role_seed: np.random.SeedSequence) -> chains.TabularChain:
        """Draw the chain from its own seed mixed with the role, so target and drafter differ."""
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, *_entropy(role_seed)]))
        matrix = rng.dirichlet(np.full(vocab, self.concentration), size=vocab)
        keep = max(1, int(np.ceil(self.support * vocab)))
        if keep < vocab:
            mask = np.zeros((vocab, vocab), dtype=bool)
            for row in mask:
                row[rng.choice(vocab, size=keep, replace=False)] = True
            matrix = np.where(mask, matrix, 0.0)
        # Dirichlet rows with tiny concentration can underflow to all-zero: put the mass on one token.
        dead = matrix.sum(axis=1) <= 0
        matrix[dead, rng.integers(vocab, size=int(dead.sum()))] = 1.0
        return chains.first_order(matrix / matrix.sum(axis=1, keepdims=True), self.start)


@dataclass(frozen=True, kw_only=True)
class Zipf(Spec):
    """Lazy large-vocabulary chain: a Zipf law per full prefix, ranks permuted by a hash.

    Chains with the same ``seed`` rank tokens alike in every context; ``exponent`` sets the
    sharpness. Rows are generated on demand, so V = 32k-256k fits (see specaudit.chains.lazy).
    ``support`` > 0 puts the mass on that many ids (the last id V-1 and ids drawn from the seed
    at or above ``lowest``): index bugs at high ids. ``dtype`` is the type of the p / q rows the
    verifier is handed (float32 as engines hand them; the reference laws stay float64).
    """

    kind: Literal["zipf"]
    exponent: Annotated[float, Rule(gt=0.0, le=10.0, strict=False)] = 1.0
    seed: Annotated[int, Rule(ge=0)] = 0
    support: Annotated[int, Rule(ge=0, description="tokens with mass: the last id and ids drawn at or above lowest (0: all)")] = 0
    lowest: Annotated[int, Rule(ge=0, description="smallest id the support may hold")] = 0
    dtype: Annotated[Literal["float64", "float32"], Rule(description="floating type of the p / q rows handed to the verifier")] = "float64"

    def build(self, vocab: int, role_seed: np.random.SeedSequence) -> Any:  # a ZipfChain: no tables
        """Return the lazy chain (the seed alone decides the ranks, not the role)."""
        return ZipfChain(vocab, float(self.exponent), int(self.seed), int(self.support), int(self.lowest), self.dtype)

    def hashed(self) -> dict[str, Any]:
        """Return the keys that enter the content hash: defaults left out, so hashes from before these keys hold."""
        body = to_data(self)
        for key, default in (("support", 0), ("lowest", 0), ("dtype", "float64")):
            if body[key] == default:
                del body[key]
        return body


@dataclass(frozen=True, kw_only=True)
class OneHot(Spec):
    """The argmax (ties to the first index) of a base chain, as a deterministic chain."""

    kind: Literal["one_hot"]
    base: TargetChain

    def build(self, vocab: int, role_seed: np.random.SeedSequence) -> chains.TabularChain:
        """Return the chain."""
        return chains.one_hot_of(self.base.build(vocab, role_seed))


@dataclass(frozen=True, kw_only=True)
class SameAsTarget(Spec):
    """Drafter equal to the target: p = q everywhere, so every draft must be accepted."""

    kind: Literal["same_as_target"]


@dataclass(frozen=True, kw_only=True)
class Greedy(Spec):
    """Greedy drafter: q is one-hot at the argmax of ``base`` (the target when omitted)."""

    kind: Literal["greedy"]
    base: TargetChain | None = None


@dataclass(frozen=True, kw_only=True)
class Sampling(Spec):
    """Sampling processing of one role: mask, bias, penalties -> temperature -> top-k, top-p, min-p in the order of
    the scenario's convention (specaudit.chains.processing). The serving keys (penalties, logit_bias, allowed_tokens)
    are off when omitted."""

    temperature: Annotated[float, Rule(ge=0.0, le=1e6, strict=False)] = 1.0
    top_k: Annotated[int, Rule(ge=0)] = 0
    top_p: Annotated[float, Rule(gt=0.0, le=1.0, strict=False)] = 1.0
    min_p: Annotated[float, Rule(ge=0.0, le=1.0, strict=False)] = 0.0
    repetition_penalty: Annotated[Annotated[float, Rule(gt=0.0, le=100.0, strict=False)] | None, Rule(
        description="divides a positive logit, multiplies a negative one, of every token in the history (1: off)")] = None
    frequency_penalty: Annotated[Annotated[float, Rule(ge=-100.0, le=100.0, strict=False)] | None, Rule(
        description="subtracted per occurrence of a token in the history (0: off)")] = None
    presence_penalty: Annotated[Annotated[float, Rule(ge=-100.0, le=100.0, strict=False)] | None, Rule(
        description="subtracted once from every token in the history (0: off)")] = None
    logit_bias: Annotated[dict[Annotated[int, Rule(ge=0)], Annotated[float, Rule(ge=-100.0, le=100.0, strict=False)]] | None, Rule(
        description="token id -> bias added to its raw logit")] = None
    allowed_tokens: Annotated[Annotated[list[Annotated[int, Rule(ge=0)]], Check(_some_allowed)] | None, Rule(
        description="the structured-output mask: only these token ids may be drawn (omitted: all)")] = None

    def _check(self) -> None:
        # every rule of SamplingParams, as a schema error with the key path (not a UsageError without file:line)
        try:
            self.params()
        except UsageError as exc:
            raise ValueError(str(exc)) from None

    def params(self) -> processing.SamplingParams:
        """Return the parameters for the processing functions."""
        return processing.SamplingParams(
            self.temperature, self.top_k, self.top_p, self.min_p,
            1.0 if self.repetition_penalty is None else self.repetition_penalty,
            self.frequency_penalty or 0.0, self.presence_penalty or 0.0,
            tuple(sorted((self.logit_bias or {}).items())),
            None if self.allowed_tokens is None else tuple(sorted(set(self.allowed_tokens))),
        )

    def tokens(self) -> list[int]:
        """Return every token id the serving keys name (bias and mask)."""
        return [*(self.logit_bias or {}), *(self.allowed_tokens or [])]


#: The keys of :class:`Sampling` and of a scenario that are left out of the content hash when unset.
_SERVING_KEYS = ("repetition_penalty", "frequency_penalty", "presence_penalty", "logit_bias", "allowed_tokens", "mix",
                 "stop_tokens", "max_tokens", "loop")
#: Largest joint state space (history states of a penalised target x drafter states) of one request class: the
#: exact round laws hold dense [S, S] kernels (2048 states: 32 MiB each).
MAX_HISTORY_STATES = 2048


@dataclass(frozen=True, kw_only=True)
class MixClass(Spec):
    """One request class of a batch mix: its share of the requests and its sampling parameters."""

    name: Annotated[str, Rule(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")]
    weight: Annotated[float, Rule(gt=0.0, le=1.0, strict=False)]
    target: Annotated[Sampling, Rule(description="the target's processing for requests of this class")] = Sampling()
    draft: Annotated[Sampling | None, Rule(description="the drafter's processing (omitted: the target's, without penalties)")] = None

    def draft_params(self) -> processing.SamplingParams:
        """Return the drafter's parameters: its own, else the target's without the history-dependent penalties."""
        if self.draft is not None:
            return self.draft.params()
        return self.target.params().replace(repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0)


@dataclass(frozen=True, kw_only=True)
class Logits(Spec):
    """Raw logits processed by ``sampling``: an explicit ``matrix`` (1 row: context-free; V rows:
    first-order, -.inf for probability 0) or random rows ``scale * N(0, 1)`` drawn from ``seed``."""

    kind: Literal["logits"]
    matrix: Annotated[list[list[Annotated[float, Rule(strict=False)]]], Check(_logit_rows)] | None = None
    scale: Annotated[float, Rule(gt=0.0, le=1e3, strict=False)] = 3.0
    start: Annotated[int, Rule(ge=0)] = 0
    seed: Annotated[int, Rule(ge=0)] = 0
    sampling: Sampling = Sampling()

    def build(self, vocab: int, role_seed: np.random.SeedSequence) -> chains.TabularChain:
        """Return the chain (its law is the processed logits); random rows mix the role into the seed."""
        if self.matrix is not None:
            raw = np.array(self.matrix, dtype=np.float64)
        else:
            rng = np.random.default_rng(np.random.SeedSequence([self.seed, *_entropy(role_seed)]))
            raw = self.scale * rng.standard_normal((vocab, vocab))
        if raw.shape[0] == 1:  # context-free: one state
            return logits_mod.logits_chain(raw, np.zeros((1, vocab), dtype=np.int64), 0, self.sampling.params())
        nxt = np.broadcast_to(np.arange(vocab, dtype=np.int64), (vocab, vocab))
        return logits_mod.logits_chain(raw, nxt, self.start, self.sampling.params())


@dataclass(frozen=True, kw_only=True)
class SameLogitsAsTarget(Spec):
    """Drafter on the target's raw logits processed with its own ``sampling`` (target kind logits)."""

    kind: Literal["same_logits_as_target"]
    sampling: Sampling = Sampling()


TargetChain = Annotated[ContextFree | Markov | Dirichlet | OneHot | Logits | Zipf, Rule(discriminator="kind")]
DraftChain = Annotated[
    ContextFree | Markov | Dirichlet | OneHot | SameAsTarget | Greedy | Logits | SameLogitsAsTarget | Zipf,
    Rule(discriminator="kind"),
]


def _entropy(role_seed: np.random.SeedSequence) -> list[int]:
    """Return the entropy words of a role's seed (built from a list, so a list)."""
    return list(cast(Sequence[int], role_seed.entropy))


def _states(spec: Any, vocab: int) -> int | None:
    """Return the number of states of a chain spec's tables at ``vocab`` (None for a lazy chain)."""
    if isinstance(spec, Zipf):
        return None
    if isinstance(spec, ContextFree) or (isinstance(spec, Logits) and spec.matrix is not None and len(spec.matrix) == 1):
        return 1
    if isinstance(spec, OneHot):
        return _states(spec.base, vocab)
    return vocab  # markov, dirichlet, logits: first order, one state per previous token


def _normalised(row: list[float]) -> np.ndarray:
    arr = np.asarray(row, dtype=np.float64)
    return arr / arr.sum()


#: Draft trees with more nodes than this are refused (the verifier gets [B, N, V] arrays).
MAX_TREE_NODES = 512


@dataclass(frozen=True, kw_only=True)
class TreeSpec(Spec):
    """Shape of the draft trees of an ``algorithm: tree`` scenario (its depth is ``k``)."""

    width: Annotated[Annotated[int, Rule(ge=1, le=64)] | list[Annotated[int, Rule(ge=1, le=64)]], Rule(
        description="children per node: an int (every level) or one int per depth level 0..k-1")]
    children: Annotated[Literal["iid", "without_replacement", "topk"], Rule(
        description="siblings drawn i.i.d. from q, without replacement, or the deterministic top-k of q")] = "iid"
    ragged: Annotated[bool, Rule(description="each node keeps a uniform number 0..width of its children")] = False

    def widths(self, depth: int) -> list[int]:
        """Return the width of every depth level 0..depth-1."""
        return [self.width] * depth if isinstance(self.width, int) else list(self.width)

    def max_nodes(self, depth: int) -> int:
        """Return the node count of the full tree."""
        return int(sum(np.prod(self.widths(depth)[: d + 1]) for d in range(depth)))


@dataclass(frozen=True, kw_only=True)
class Preemption(Spec):
    """A request out of the batch from ``step`` until ``resume`` (its history kept)."""

    step: Annotated[int, Rule(ge=0)]
    resume: Annotated[int, Rule(ge=1)]


@dataclass(frozen=True, kw_only=True)
class LoopRequest(Spec):
    """One request of a loop trace (its id is its index in ``requests``)."""

    prompt: Annotated[list[Annotated[int, Rule(ge=0)]], Rule(description="the request's prompt token ids")]
    arrive: Annotated[int, Rule(ge=0, description="the first step the request is in the batch")] = 0
    max_tokens: Annotated[int | None, Rule(ge=1, description="its budget (omitted: the scenario's max_tokens, else "
                                           "its length)")] = None
    finish: Annotated[int | None, Rule(ge=0, description="the step at which the client ends it (its output then "
                                       "has no law to test)")] = None
    preempt: Annotated[list[Preemption], Rule(json_schema_extra={"default": []})] = field(default_factory=list)
    min_tokens: Annotated[int, Rule(ge=0, description="no stop token before this many tokens (vLLM's min_tokens)")] = 0


@dataclass(frozen=True, kw_only=True)
class Reorder(Spec):
    """The batch order at ``step``: an order of every request id."""

    step: Annotated[int, Rule(ge=0)]
    order: list[Annotated[int, Rule(ge=0)]]


@dataclass(frozen=True, kw_only=True)
class GrammarMask(Spec):
    """Once ``after`` is in a request's history, only ``allowed`` may follow."""

    after: Annotated[int, Rule(ge=0)]
    allowed: Annotated[list[Annotated[int, Rule(ge=0)]], Rule(min_length=1)]


@dataclass(frozen=True, kw_only=True)
class LoopSpec(Spec):
    """The trace a ``mode: loop`` scenario runs through a loop target (specaudit.contract.loop)."""

    requests: Annotated[list[LoopRequest], Rule(min_length=1, max_length=64)]
    reorders: Annotated[list[Reorder], Rule(json_schema_extra={"default": []})] = field(default_factory=list)
    repetition_penalty: Annotated[float, Rule(gt=0.0, le=100.0, strict=False, description="each token already in the "
                                              "history has its probability raised to this power")] = 1.0
    mask: Annotated[GrammarMask | None, Rule(description="a grammar mask that applies once a token is in the history")] = None
    no_repeat_ngram: Annotated[int, Rule(ge=0, le=16, description="no n-gram of this size twice in a history (HF's "
                                         "no_repeat_ngram_size; 0: off)")] = 0
    bad_words: Annotated[list[Annotated[list[Annotated[int, Rule(ge=0)]], Rule(min_length=1)]], Rule(
        json_schema_extra={"default": []}, description="token sequences that must not appear (HF's bad_words_ids)")] = field(
        default_factory=list)
    position_temperatures: Annotated[list[Annotated[float, Rule(gt=0.0, le=100.0, strict=False)]], Rule(
        min_length=1, max_length=16, description="the target's temperature by context length n: "
        "position_temperatures[n % len] (a model with positions; [1.0]: none)")] = field(default_factory=lambda: [1.0])


@dataclass(frozen=True, kw_only=True)
class AdapterSpec(Spec):
    """How a scenario drives its target: an adapter (specaudit.adapters) and its options."""

    name: Annotated[str, Rule(min_length=1, max_length=300)]
    options: Annotated[dict[str, bool | int | float | str | None], Rule(json_schema_extra={"default": {}})] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Scenario(Spec):
    """One audit scenario (schema version 1)."""

    schema: Literal[1] = 1
    name: Annotated[str, Rule(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.\-]+$")]
    description: str = ""
    tags: Annotated[list[str], Rule(json_schema_extra={"default": ["default"]})] = field(default_factory=lambda: ["default"])
    vocab: Annotated[int, Rule(ge=2, le=1 << 20)]
    k: Annotated[int, Rule(ge=0, le=64)]
    # None (omitted): k drafts every row; kept out of the type so the JSON schema offers no null
    drafts: Annotated[Annotated[int, Rule(ge=0)] | Literal["uniform"] | list[Annotated[float, Rule(strict=False)]], Rule(
        description="draft count per row: an int (fixed), 'uniform' (0..k), or weights over 0..k")] = None  # type: ignore[assignment]
    length: Annotated[int, Rule(ge=1, le=4096)]
    samples: Annotated[int, Rule(ge=1, le=10**9)]
    batch: Annotated[int, Rule(ge=1, le=1 << 20)] = 4096
    seed: Annotated[int, Rule(ge=0)] = 0
    target: TargetChain
    draft: DraftChain
    algorithm: Annotated[Literal["chain", "block", "tree"], Rule(
        description="chain (token-wise), block (Sun et al. 2403.10444) or tree (SpecInfer Alg. 2)")] = "chain"
    tree: Annotated[TreeSpec | None, Rule(description="draft tree shape; required with algorithm: tree (depth = k)")] = None
    adapter: Annotated[AdapterSpec | None, Check(_adapter_name, before=True), Rule(
        description="adapter the target is driven with, a name or {name, options}; --adapter overrides it")] = None
    mix: Annotated[list[MixClass] | None, Rule(
        description="a batch mix of request classes (weights summing to 1), each with its own target and drafter "
        "sampling; every request draws its class; target and draft must be kind logits")] = None
    d2t: Annotated[list[Annotated[int, Rule(ge=0)]] | None, Rule(
        description="a drafter with a vocabulary of its own: the target id of every draft id (its length is the draft "
        "vocabulary, one-to-one into 0..vocab-1); the drafter's law is renormalised on these ids, and the draft-vocab "
        "contract hands q in draft space with this map")] = None
    convention: Annotated[Annotated[str, Check(_known_convention)] | None, Rule(
        description="the engine whose non-speculative sampler is the reference: the order of top-k, top-p and min-p "
        "(specaudit.chains.processing.CONVENTIONS: hf, vllm, sglang; omitted: hf); --convention overrides it")] = None
    loop: Annotated[LoopSpec | None, Rule(description="the request trace of a mode: loop scenario (required there)")] = None
    stop_tokens: Annotated[list[Annotated[int, Rule(ge=0)]] | None, Rule(
        description="the requests' stop token ids (EOS, stop_token_ids), each in 0..vocab-1: the stops check of a "
        "verifier declaring the stops contract (verify.stops) places them in its blocks; omitted: the last two ids")] = None
    max_tokens: Annotated[int | None, Rule(
        ge=1, description="the requests' max_tokens: the stops check's budgets past the block are at most this")] = None
    mode: Annotated[Literal["sample", "greedy", "exact", "loop"], Rule(
        description="sample: statistical checks of the sampled law; greedy: temperature 0, every sequence must "
        "equal greedy decoding of the target (argmax, ties to the first index); exact: the exact probes of "
        "specaudit.checks.probes (corners, contract, adversarial uniforms) on this vocab, k and these chains; loop: "
        "the request trace of `loop` through a loop target (specaudit.contract.loop), samples runs")] = "sample"

    def _check(self) -> None:
        if isinstance(self.drafts, int) and self.drafts > self.k:
            raise ValueError(f"drafts = {self.drafts} exceeds k = {self.k}; allowed: 0..{self.k}")
        if isinstance(self.drafts, list):
            if len(self.drafts) != self.k + 1:
                raise ValueError(f"drafts weights need k + 1 = {self.k + 1} entries (for 0..{self.k}), got {len(self.drafts)}")
            w = np.asarray(self.drafts, dtype=np.float64)
            if np.any(w < 0) or not np.isclose(w.sum(), 1.0, atol=SUM_TOLERANCE, rtol=0):
                raise ValueError(f"drafts weights must be >= 0 and sum to 1 within {SUM_TOLERANCE:g}")
        for role in ("target", "draft"):
            self._check_chain_shape(role, getattr(self, role))
        if self.d2t is not None:
            self._check_map()
        if self.stop_tokens is not None:
            self._check_stops()
        if (self.mode == "loop") != (self.loop is not None):
            raise ValueError("loop: required with mode: loop (the request trace), and only there" if self.mode == "loop"
                             else "loop: a request trace goes with mode: loop; allowed: mode: loop, or no loop key")
        if self.loop is not None:
            self._check_loop()
        self._check_algorithm()
        self._check_lazy()
        self._check_serving()

    def _check_lazy(self) -> None:
        """Refuse the modes and algorithms whose references walk a chain's state table (lazy chains have none)."""
        if not self.lazy:
            return
        tabled = "a chain with a finite state table (context_free, markov, dirichlet, one_hot, logits)"
        if self.mode == "greedy":
            raise ValueError(f"mode: greedy needs {tabled}; kind zipf is lazy (its states are prefix hashes, its "
                             "greedy path is not tabulated); allowed with zipf: mode sample or exact")
        if self.algorithm == "tree":
            raise ValueError(f"algorithm: tree needs {tabled}; kind zipf is lazy (its states are prefix hashes, which "
                             "the tree simulator does not hold); allowed with zipf: algorithm chain or block")

    def _samplings(self) -> list[tuple[str, str, Sampling]]:
        """Return (where, role, sampling) of every processing the scenario names."""
        found = [(f"{role}.sampling", role, spec.sampling) for role in ("target", "draft")
                 if isinstance(spec := getattr(self, role), (Logits, SameLogitsAsTarget))]
        for i, cls in enumerate(self.mix or []):
            found.append((f"mix[{i}].target", "target", cls.target))
            if cls.draft is not None:
                found.append((f"mix[{i}].draft", "draft", cls.draft))
        return found

    def _check_serving(self) -> None:
        """Check the serving keys: token ids in the vocabulary, penalties on the target only, a mix on logits chains."""
        v = self.vocab
        penalised: str | None = None  # where the first penalty is set
        for where, role, sampling in self._samplings():
            bad = [t for t in sampling.tokens() if t >= v]
            if bad:
                raise ValueError(f"{where}: token ids {bad} are not in the vocabulary; allowed: 0..{v - 1}")
            if sampling.top_k > v:  # processing would read it as "off"; an engine may refuse or crash (torch.topk)
                raise ValueError(f"{where}.top_k: top_k = {sampling.top_k} exceeds vocab {v}; allowed: 0..{v} (0 = off)")
            self._check_mask(where, role, sampling)
            if sampling.params().penalised:
                if role == "draft":
                    raise ValueError(f"{where}: penalties apply to the target only (the drafter's law must not depend on "
                                     "the history, so exact references stay small); allowed: no penalty keys here")
                penalised = penalised or where
        if self.mix is not None:
            if not isinstance(self.target, Logits) or not isinstance(self.draft, (Logits, SameLogitsAsTarget)):
                raise ValueError("mix needs target kind logits and draft kind logits or same_logits_as_target (raw logits "
                                 f"each class processes), got {self.target.kind!r} and {self.draft.kind!r}")
            for role in ("target", "draft"):
                if getattr(self, role).sampling != Sampling():
                    raise ValueError(f"{role}.sampling is set with a mix; each mix class gives the processing (mix[i].target, "
                                     f"mix[i].draft): allowed: omit {role}.sampling")
            names = [c.name for c in self.mix]
            if len(set(names)) != len(names):
                again = next(i for i, n in enumerate(names) if n in names[:i])
                raise ValueError(f"mix: class names must be unique, got {names} (mix[{again}] repeats "
                                 f"{names[again]!r} of mix[{names.index(names[again])}]); allowed: a new name for mix[{again}]")
            total = sum(c.weight for c in self.mix)
            if abs(total - 1.0) > SUM_TOLERANCE:
                raise ValueError(f"mix weights sum to {total:.9g}; they must sum to 1 within {SUM_TOLERANCE:g}")
            if len(self.mix) * self.joint_cells > MAX_JOINT_CELLS:
                raise ValueError(f"mix: {len(self.mix)} classes x V**L = {len(self.mix) * self.joint_cells:,} (class, "
                                 f"sequence) cells; allowed: at most {MAX_JOINT_CELLS:,} (the joint law is counted per class)")
        if (self.mix is not None or penalised) and (self.algorithm != "chain" or self.mode != "sample"):
            raise ValueError(f"mix and penalties need algorithm: chain and mode: sample, got {self.algorithm} / {self.mode}"
                             " (a greedy request class is a mix class at temperature 0)")
        if penalised:
            base = _states(self.target, v) or v
            drafter = base if isinstance(self.draft, SameLogitsAsTarget) else (_states(self.draft, v) or v)
            states = serving_chains.history_states(base, v, self._history_depth()) * drafter
            if states > MAX_HISTORY_STATES:
                raise ValueError(f"{penalised}: penalties: the target's law depends on token counts; up to {states:,} joint (history, "
                                 f"drafter) states at vocab {v}, length + k - 1 = {self._history_depth()}; allowed: at most "
                                 f"{MAX_HISTORY_STATES:,} (smaller vocab, length or k, or 1-row logits matrices)")

    def _check_mask(self, where: str, role: str, sampling: Sampling) -> None:
        """Refuse a mask that keeps only tokens of logit -inf in some row of an explicit matrix (nothing left to draw)."""
        if sampling.allowed_tokens is None:
            return
        spec = self.draft if role == "draft" else self.target
        chain, name = (self.target, "target") if isinstance(spec, SameLogitsAsTarget) else (spec, role)
        if not isinstance(chain, Logits) or chain.matrix is None:
            return  # random logits are finite everywhere
        allowed = sorted(set(sampling.allowed_tokens))
        rows = np.asarray(chain.matrix, dtype=np.float64)[:, allowed]
        dead = np.flatnonzero(~np.isfinite(rows).any(axis=1))
        if dead.size:
            raise ValueError(
                f"{where}.allowed_tokens: {allowed} keeps only tokens whose logit is -.inf in row {int(dead[0])} of "
                f"{name}.matrix{f' (and {dead.size - 1} more rows)' if dead.size > 1 else ''}, so that row has nothing "
                "to sample; allowed: a mask that keeps a token of finite logit in every row")

    def _check_map(self) -> None:
        """Refuse a d2t that is not a one-to-one map into the target vocabulary, or one with what it cannot go with."""
        assert self.d2t is not None
        try:
            vocab_chains.check_map(self.d2t, self.vocab)
        except ValueError as exc:
            raise ValueError(f"d2t: {exc}") from None
        if self.mix is not None or self.algorithm == "tree" or self.lazy:
            raise ValueError("d2t: a draft vocabulary goes with chain or block verification of tabular chains; "
                             "allowed without d2t: mix, algorithm tree, kind zipf")

    def _check_stops(self) -> None:
        """Refuse stop tokens outside the vocabulary, repeated, or none."""
        assert self.stop_tokens is not None
        outside = [t for t in self.stop_tokens if t >= self.vocab]
        if outside:
            raise ValueError(f"stop_tokens: token {outside[0]} is outside the vocabulary; allowed: ids 0..{self.vocab - 1}")
        if not self.stop_tokens or len(set(self.stop_tokens)) != len(self.stop_tokens):
            raise ValueError(f"stop_tokens: {self.stop_tokens}: allowed: one or more distinct ids (omit the key for "
                             "the last two ids)")
        if len(self.stop_tokens) >= self.vocab:
            raise ValueError(f"stop_tokens: all {self.vocab} ids of the vocabulary are stop tokens: no request could "
                             "emit anything but a stop; allowed: at most vocab - 1 stop tokens")

    def _check_loop(self) -> None:
        """Refuse a trace that no loop can run: tokens outside V, a finish before the arrival, a reorder that is no
        permutation of the request ids, a preemption that does not resume, outputs too many to enumerate."""
        assert self.loop is not None
        v, ids = self.vocab, len(self.loop.requests)
        if self.algorithm != "chain" or self.lazy or self.mix is not None or self.d2t is not None:
            raise ValueError("loop: a loop trace runs chain verification of tabular chains; allowed without loop: "
                             "algorithm block or tree, kind zipf, mix, d2t")
        for i, r in enumerate(self.loop.requests):
            where = f"loop.requests[{i}]"
            bad = [t for t in r.prompt if t >= v]
            if bad:
                raise ValueError(f"{where}.prompt: token {bad[0]} is outside the vocabulary; allowed: ids 0..{v - 1}")
            if r.finish is not None and r.finish <= r.arrive:
                raise ValueError(f"{where}.finish: {r.finish} is not after its arrive = {r.arrive}: a request cannot "
                                 "finish before it arrives; allowed: finish > arrive")
            for j, pre in enumerate(r.preempt):
                if pre.step < r.arrive or pre.resume <= pre.step:
                    raise ValueError(f"{where}.preempt[{j}]: step {pre.step}, resume {pre.resume}; allowed: "
                                     f"arrive ({r.arrive}) <= step < resume")
            cap = self.request_budget(r)
            if r.min_tokens > cap:
                raise ValueError(f"{where}.min_tokens: {r.min_tokens} is above its max_tokens {cap}; allowed: "
                                 f"0..{cap}")
            outputs = sum(v ** n for n in range(1, cap + 1))
            if outputs > 200_000:
                raise ValueError(f"{where}.max_tokens: {cap} tokens over vocab {v} are up to {outputs:,} outputs to "
                                 "enumerate; allowed: at most 200,000 (fewer tokens or a smaller vocab)")
        for i, re_ in enumerate(self.loop.reorders):
            if sorted(re_.order) != list(range(ids)):
                raise ValueError(f"loop.reorders[{i}].order: {re_.order} is not a permutation of the request ids "
                                 f"0..{ids - 1}")
        steps = [re_.step for re_ in self.loop.reorders]
        if len(set(steps)) != len(steps):
            raise ValueError(f"loop.reorders: steps {steps} repeat; allowed: one order per step")
        if self.loop.mask is not None:
            bad = [t for t in (self.loop.mask.after, *self.loop.mask.allowed) if t >= v]
            if bad:
                raise ValueError(f"loop.mask: token {bad[0]} is outside the vocabulary; allowed: ids 0..{v - 1}")
        for i, word in enumerate(self.loop.bad_words):
            bad = [t for t in word if t >= v]
            if bad:
                raise ValueError(f"loop.bad_words[{i}]: token {bad[0]} is outside the vocabulary; allowed: ids 0..{v - 1}")

    def request_budget(self, request: LoopRequest) -> int:
        """Return a loop request's max_tokens: its own, else the scenario's, else its length."""
        if request.max_tokens is not None:
            return request.max_tokens
        return self.max_tokens if self.max_tokens is not None else self.length

    def loop_models(self) -> Any:
        """Return the :class:`specaudit.contract.loop.Models` a ``mode: loop`` scenario's trace runs on."""
        from specaudit.contract.loop import Models

        assert self.loop is not None
        target, draft = self.chains()
        return Models(target, draft, tuple(self.loop.position_temperatures))

    def loop_trace(self) -> Any:
        """Return the :class:`specaudit.contract.loop.Trace` of a ``mode: loop`` scenario."""
        from specaudit.contract.loop import Request, Trace

        assert self.loop is not None
        loop = self.loop
        requests = tuple(Request(i, tuple(r.prompt), r.arrive, self.request_budget(r), r.finish,
                                 tuple((p.step, p.resume) for p in r.preempt), r.min_tokens)
                         for i, r in enumerate(loop.requests))
        return Trace(requests, self.k, self.vocab, tuple(self.stop_tokens or ()), float(loop.repetition_penalty),
                     None if loop.mask is None else loop.mask.after,
                     () if loop.mask is None else tuple(loop.mask.allowed),
                     {re_.step: tuple(re_.order) for re_ in loop.reorders}, loop.no_repeat_ngram,
                     tuple(tuple(w) for w in loop.bad_words))

    def draft_map(self) -> np.ndarray | None:
        """Return the draft-to-target id map (None: the drafter speaks the target's vocabulary)."""
        return None if self.d2t is None else np.asarray(self.d2t, dtype=np.int64)

    def _history_depth(self) -> int:
        """Return the longest history a verifier reads: L - 1 tokens generated, then k drafts."""
        return self.length - 1 + self.k

    def _check_algorithm(self) -> None:
        if (self.algorithm == "tree") != (self.tree is not None):
            raise ValueError(
                "tree is required with algorithm: tree (the draft tree shape: width, children, ragged)"
                if self.algorithm == "tree"
                else f"algorithm = {self.algorithm!r} but a tree shape is given; allowed: algorithm: tree with tree"
            )
        if self.tree is None:
            return
        if getattr(self, "mode", "sample") != "sample":
            raise ValueError(f"mode = {self.mode!r} with algorithm: tree; allowed: sample (tree scenarios are statistical)")
        if self.k < 1:
            raise ValueError("k = 0 with algorithm: tree; allowed: k >= 1 (k is the tree depth)")
        if isinstance(self.tree.width, list) and len(self.tree.width) != self.k:
            raise ValueError(f"tree.width lists {len(self.tree.width)} levels; k = {self.k} is the depth, allowed: {self.k}")
        if self.drafts is not None and self.drafts != self.k:
            raise ValueError("drafts is for chains; allowed with algorithm: tree: omit it (use tree.ragged)")
        if self.tree.max_nodes(self.k) > MAX_TREE_NODES:
            raise ValueError(f"tree has {self.tree.max_nodes(self.k)} nodes; allowed: at most {MAX_TREE_NODES}")

    def _check_chain_shape(self, role: str, spec: Any) -> None:
        v = self.vocab
        if isinstance(spec, ContextFree) and len(spec.probs) != v:
            raise ValueError(f"{role}.probs has {len(spec.probs)} entries; vocab is {v}")
        if isinstance(spec, Markov):
            if len(spec.matrix) != v or any(len(r) != v for r in spec.matrix):
                raise ValueError(f"{role}.matrix must be {v} x {v} (vocab x vocab)")
            if spec.start >= v:
                raise ValueError(f"{role}.start = {spec.start}; allowed: 0..{v - 1}")
        if isinstance(spec, Dirichlet) and spec.start >= v:
            raise ValueError(f"{role}.start = {spec.start}; allowed: 0..{v - 1}")
        if isinstance(spec, (OneHot, Greedy)) and spec.base is not None:
            self._check_chain_shape(f"{role}.base", spec.base)
        if isinstance(spec, Logits):
            if spec.matrix is not None and (len(spec.matrix) not in (1, v) or any(len(r) != v for r in spec.matrix)):
                raise ValueError(f"{role}.matrix must be 1 x {v} (context-free) or {v} x {v} (first-order) logits")
            if spec.start >= v:
                raise ValueError(f"{role}.start = {spec.start}; allowed: 0..{v - 1}")
        if isinstance(spec, Zipf):
            if spec.lowest >= v:
                raise ValueError(f"{role}.lowest: lowest = {spec.lowest}; allowed with vocab {v}: lowest <= {v - 1}")
            if spec.support > v - spec.lowest:
                raise ValueError(f"{role}.support: support = {spec.support} tokens at or above lowest = {spec.lowest}; "
                                 f"allowed with vocab {v}: support <= vocab - lowest = {v - spec.lowest}")
            if spec.lowest and not spec.support:  # support 0 puts mass on every id: lowest would be ignored
                raise ValueError(f"{role}.lowest: lowest = {spec.lowest} with support = 0 (every token has mass, so "
                                 "lowest would be ignored); allowed: lowest with support > 0, or omit lowest")
        if isinstance(spec, (OneHot, Greedy)) and isinstance(spec.base, Zipf):
            raise ValueError(f"{role}.base: kind zipf is lazy (no tables); allowed bases: context_free, markov, dirichlet, logits")
        if role == "draft" and isinstance(self.target, Zipf) != (
            isinstance(spec, Zipf) or (isinstance(spec, SameAsTarget) and isinstance(self.target, Zipf))
        ):
            raise ValueError("target and draft: kind zipf pairs only with zipf (or same_as_target): lazy and tabular chains do not share states")
        if isinstance(spec, SameLogitsAsTarget) and not isinstance(self.target, Logits):
            raise ValueError(f"{role}.kind same_logits_as_target needs target.kind logits, got {self.target.kind!r}")

    # ---- derived quantities -------------------------------------------------------------

    @property
    def draft_law(self) -> np.ndarray:
        """Return the law of num_draft over 0..k."""
        law = np.zeros(self.k + 1)
        if self.drafts is None:
            law[self.k] = 1.0
        elif self.drafts == "uniform":
            law[:] = 1.0 / (self.k + 1)
        elif isinstance(self.drafts, int):
            law[self.drafts] = 1.0
        else:
            law = _normalised(self.drafts)
        return law

    @property
    def reference(self) -> str:
        """Return the name of the sampling convention the reference laws follow (``convention``, else hf)."""
        return self.convention or processing.DEFAULT_CONVENTION

    @property
    def processed(self) -> bool:
        """Return True when a chain is raw logits processed by sampling parameters (the convention shapes its law)."""
        return isinstance(self.target, Logits) or isinstance(self.draft, (Logits, SameLogitsAsTarget))

    @property
    def lazy(self) -> bool:
        """Return True when a chain is generated on demand (no tables: per-prefix and PIT checks)."""
        return isinstance(self.target, Zipf) or isinstance(self.draft, Zipf)

    @property
    def joint_cells(self) -> int:
        """Return V**L, the number of cells of the joint law."""
        return self.vocab**self.length

    def memory_needs(self, vocab: int | None = None) -> list[tuple[int, str]]:
        """Return (bytes, what) of the large arrays a run of this scenario holds at once, largest first.

        Tabular chains hold three ``[states, V]`` tables each (probabilities, next states, and the
        cumulative rows sampling uses, 8 bytes an entry; :mod:`specaudit.chains.tabular`), and
        drawing a random chain (dirichlet, logits) keeps two more while it is built. The exact
        round law of a sampled scenario (:func:`specaudit.laws.chain.round_kernels` and
        ``step_kernels``) holds ``k + 7`` dense ``[S, S]`` arrays over the joint states
        ``S = S_target x S_draft`` (three round kernels, ``k + 1`` step kernels, the power of the
        accept kernel and two products) and four ``[S, V]`` routing arrays; at V = 48, k = 3 the
        estimate is 409 MiB and a run's resident memory grows by 380 MiB (dirichlet, L = 2). Lazy chains (zipf) hold no tables. ``vocab`` overrides V.
        """
        v = self.vocab if vocab is None else vocab
        target = _states(self.target, v)
        if isinstance(self.draft, Greedy) and self.draft.base is not None:
            draft = _states(self.draft.base, v)
        elif isinstance(self.draft, (SameAsTarget, Greedy, SameLogitsAsTarget)):
            draft = target
        else:
            draft = _states(self.draft, v)
        if target is None or draft is None:
            return []
        chains_ = 1 if isinstance(self.draft, SameAsTarget) else 2
        drawn = sum(isinstance(c, (Dirichlet, Logits)) for c in (self.target, self.draft))
        table = 8 * v * max(target, draft)
        needs = [(chains_ * 3 * table + 2 * table * min(drawn, 1), f"the chain tables ({chains_ * 3} arrays of "
                  f"{max(target, draft):,} x {v:,} x 8 bytes)")]
        if self.mode == "sample":
            joint, dense = target * draft, self.k + 7  # 3 round kernels, k + 1 step kernels, A^m and 2 products
            needs.append((dense * 8 * joint * joint + 4 * 8 * joint * v,
                          f"the exact round law ({dense} arrays of {joint:,} x {joint:,} joint states x 8 bytes)"))
        return sorted(needs, reverse=True)

    def chains(self) -> tuple[chains.TabularChain, chains.TabularChain]:
        """Build (target, drafter) chains; draft kinds that refer to the target are resolved here.

        A batch mix becomes the union of its classes (:class:`specaudit.chains.serving.MixedChain`), a
        penalised target a chain on its history's token counts (:class:`~specaudit.chains.serving.HistoryChain`).
        """
        try:
            target = self._base_target()
        except UsageError as exc:  # validation catches what it can; a chain that still cannot be built says where
            raise UsageError(f"scenario {self.name!r}: target: {exc}") from None
        try:
            draft = self._base_draft(target)
        except UsageError as exc:
            raise UsageError(f"scenario {self.name!r}: draft: {exc}") from None
        depth = self._history_depth()
        convention = self.reference
        if convention != processing.DEFAULT_CONVENTION:  # the engine's filter order: every processed law follows it
            target, draft = logits_mod.with_convention(target, convention), logits_mod.with_convention(draft, convention)
        if self.d2t is not None:  # the drafter's own vocabulary: its law on the map's image (validated: no mix)
            try:
                draft = vocab_chains.restrict(draft, np.asarray(self.d2t, dtype=np.int64))
            except UsageError as exc:
                raise UsageError(f"scenario {self.name!r}: draft: {exc}") from None
        if self.mix is not None:
            assert isinstance(target, logits_mod.LogitsChain) and isinstance(draft, logits_mod.LogitsChain)  # validated
            t: list[TabularChain] = []
            d: list[TabularChain] = []
            for i, c in enumerate(self.mix):
                for role, chain, params, out in (("target", target, c.target.params().replace(convention=convention), t),
                                                 ("draft", draft, c.draft_params().replace(convention=convention), d)):
                    try:
                        out.append(serving_chains.with_params(chain, params, depth))
                    except UsageError as exc:
                        raise UsageError(f"scenario {self.name!r}: mix[{i}] (class {c.name!r}) {role}: {exc}") from None
            weights, names = np.array([c.weight for c in self.mix]), tuple(c.name for c in self.mix)
            return serving_chains.mixed(tuple(t), weights, names), serving_chains.mixed(tuple(d), weights, names)
        if isinstance(target, logits_mod.LogitsChain) and target.params.penalised:
            target = serving_chains.history_chain(target, target.params, depth)
        return target, draft

    def _base_target(self) -> TabularChain:
        """Build the target as its kind says, before any mix or history."""
        return self.target.build(self.vocab, np.random.SeedSequence([0]))

    def _base_draft(self, target: TabularChain) -> TabularChain:
        """Build the drafter as its kind says (``target``: the built target, for the kinds that refer to it)."""
        spec = self.draft
        if isinstance(spec, SameAsTarget):
            return target
        if isinstance(spec, SameLogitsAsTarget):
            assert isinstance(target, logits_mod.LogitsChain)  # validated in _consistent
            return logits_mod.logits_chain(target.logits, target.nxt, target.start, spec.sampling.params())
        if isinstance(spec, Greedy):
            base = target if spec.base is None else spec.base.build(self.vocab, np.random.SeedSequence([1]))
            return chains.one_hot_of(base)
        return spec.build(self.vocab, np.random.SeedSequence([1]))

    def content_hash(self) -> str:
        """Return a short hash of the scenario's content (seed excluded: it is a run setting)."""
        # the adapter says how the target is called, not what law it must produce: a run setting
        body = to_data(self)
        for run_setting in ("seed", "samples", "batch", "adapter"):
            del body[run_setting]
        if body.get("algorithm") == "chain" and body.get("tree") is None:  # hashes from before tree and block verification hold
            del body["algorithm"], body["tree"]
        if body.get("mode") == "sample":  # hashes from before the greedy and exact modes hold
            del body["mode"]
        if body.get("d2t") is None:  # hashes from before draft vocabularies hold
            body.pop("d2t", None)
        if body.get("convention") in (None, processing.DEFAULT_CONVENTION):  # hashes from before conventions hold
            del body["convention"]
        _drop_unset(body)  # hashes from before the serving keys (penalties, bias, mask, mix) hold
        for role in ("target", "draft"):
            spec = getattr(self, role)
            if isinstance(spec, Zipf):
                body[role] = spec.hashed()
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def _drop_unset(body: Any) -> None:
    """Remove the keys added after the first hashes (serving, stops) left unset (None) from a dumped scenario, at any depth."""
    if isinstance(body, dict):
        for key in _SERVING_KEYS:
            if key in body and body[key] is None:
                del body[key]
        for value in body.values():
            _drop_unset(value)
    elif isinstance(body, list):
        for value in body:
            _drop_unset(value)


def to_data(value: Any, *, exclude_none: bool = False) -> Any:
    """Return a schema object as JSON-ready data: fields in order, mappings' keys as strings, tuples as lists.

    What pydantic's ``dump_python(mode="json")`` gives (a test holds them equal on every shipped
    scenario); ``exclude_none`` leaves out the fields that are None, at any depth.
    """
    if isinstance(value, Spec):
        pairs = ((f.name, getattr(value, f.name)) for f in dataclasses.fields(cast(Any, value)))
        return {name: to_data(item, exclude_none=exclude_none) for name, item in pairs if not (exclude_none and item is None)}
    if isinstance(value, dict):
        return {str(key): to_data(item, exclude_none=exclude_none) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_data(item, exclude_none=exclude_none) for item in value]
    return value


@functools.cache
def validator() -> Any:
    """Return pydantic's ``TypeAdapter`` of `Scenario` (built on the first call: pydantic is imported then)."""
    from pydantic import TypeAdapter

    return TypeAdapter(Scenario)


def validate(data: Any) -> Scenario:
    """Return ``data`` (a scenario as parsed YAML or JSON) validated into a `Scenario`.

    Raises pydantic's ``ValidationError``, whose errors `specaudit.scenarios.loading` words with
    file and line.
    """
    return cast(Scenario, validator().validate_python(data))
