"""The canonical verifier contract and the validation of what a verifier returns.

::

    verify(draft[B,K] int64, q[B,K,V] float64, p[B,K+1,V] float64, num_draft[B] int64,
           rng: np.random.Generator) -> (out[B,K+1] int64 padded with -1, n_out[B] int64)

Row ``b`` has ``num_draft[b] <= K`` valid drafts; ``p[b, num_draft[b]]`` is its bonus position;
everything past it is padding the verifier must not read. ``n_out = accepted + 1``.

Each clause has a stable id, used in messages, reports and JUnit names.

Per-request generators
----------------------
Engines with seeded requests give each seeded request its own generator and let the others share
one (vLLM ``vllm/v1/sample/rejection_sampler.py``: ``generate_uniform_probs`` fills the batch from
the global generator, then overwrites a seeded request's slice from its ``generators[i]``, skipping
requests with no drafts; ``vllm/v1/sample/ops/topk_topp_sampler.py``, ``random_sample``: the same
for the exponentials). A verifier that can take them says so with :func:`row_generators`; on
scenarios tagged ``seeded`` (:mod:`specaudit.checks.seeded`) it is then handed a
:class:`RowGenerators` as ``rng``: a sequence with row ``b``'s generator at ``rng[b]`` (the shared
one, ``rng.shared``, for an unseeded row; ``rng.seeded`` maps the seeded rows to theirs). What a
seeded row draws must come from its own generator only, and how much it draws must depend on its
own row only (not on the batch, its position, or the other rows' drafts: vllm-ascend #13608);
unseeded rows draw from ``rng.shared`` and never from a seeded row's generator (vllm-ascend PR
#4908). Everywhere else ``rng`` is one ``np.random.Generator``, as before.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, overload

import numpy as np

from specaudit.errors import ContractError

#: Clause id -> what the verifier must do.
CLAUSES: dict[str, str] = {
    "return": "return a pair (out, n_out)",
    "shape": "out has shape (B, K+1) and n_out has shape (B,)",
    "dtype": "out and n_out hold integers (not floats, NaN or inf)",
    "n_out-range": "1 <= n_out[b] <= num_draft[b] + 1",
    "vocab-range": "every emitted id out[b, :n_out[b]] lies in [0, V)",
    "padding": "out[b, n_out[b]:] is -1",
    "prefix": "the first n_out[b] - 1 emitted tokens are the accepted drafts draft[b, :n_out[b]-1]",
    "layout": "the target's outputs follow its own layout (shape, dtype, counters; checked by its adapter)",
}


class Verifier(Protocol):
    """A callable in the canonical contract."""

    def __call__(
        self,
        draft: np.ndarray,
        q: np.ndarray,
        p: np.ndarray,
        num_draft: np.ndarray,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, np.ndarray]: ...


#: Marker attribute of a verifier that takes per-request generators (kept by ``contract.guard.guarded``).
ROW_GENERATORS = "__specaudit_row_generators__"

_F = TypeVar("_F", bound=Callable[..., Any])


class RowGenerators(Sequence[np.random.Generator]):
    """The per-request generators of one batch: ``self[b]`` is row ``b``'s.

    ``shared`` is the generator of every unseeded row (vLLM's global generator); ``seeded`` maps a
    seeded row's batch index to its own generator (vLLM's ``generators`` dict).
    """

    def __init__(self, shared: np.random.Generator, seeded: Mapping[int, np.random.Generator], batch: int):
        self.shared = shared
        self.seeded = dict(seeded)
        self.batch = batch

    def __len__(self) -> int:
        return self.batch

    @overload
    def __getitem__(self, b: int) -> np.random.Generator: ...

    @overload
    def __getitem__(self, b: slice) -> list[np.random.Generator]: ...

    def __getitem__(self, b: int | slice) -> np.random.Generator | list[np.random.Generator]:
        if isinstance(b, slice):
            return [self[i] for i in range(self.batch)[b]]
        if not -self.batch <= b < self.batch:
            raise IndexError(f"row {b} of a batch of {self.batch}")
        return self.seeded.get(b % self.batch, self.shared)

    def __repr__(self) -> str:
        return f"RowGenerators(batch={self.batch}, seeded rows {sorted(self.seeded)})"


def row_generators(verify: _F) -> _F:
    """Mark ``verify`` as taking per-request generators (a :class:`RowGenerators` as ``rng``) on ``seeded`` scenarios."""
    setattr(verify, ROW_GENERATORS, True)
    return verify


def takes_row_generators(verify: Any) -> bool:
    """Return True when ``verify`` was marked with :func:`row_generators`."""
    return bool(getattr(verify, ROW_GENERATORS, False))


#: Share of the simulation's request slots that are seeded on a ``seeded`` scenario.
SEEDED_SHARE = 0.5


class SeededRequests:
    """Hand a verifier per-request generators in a simulation, as an engine with seeded requests does.

    Wraps a verifier marked with :func:`row_generators` (any contract: ``rng`` is the last
    argument). Each row of the simulated batch is a request slot; a slot is seeded with
    probability :data:`SEEDED_SHARE` and then keeps its own generator from call to call (its
    stream advances by what the verifier draws), the others share the simulation's generator.
    A new shared generator (a new block) starts new slots, so a block's result does not depend on
    which blocks ran before it in this process.
    """

    def __init__(self, verify: Callable[..., Any], share: float = SEEDED_SHARE):
        self.verify = verify
        self.share = share
        self._shared: Any = None
        self._slots: list[np.random.Generator | None] = []
        functools.update_wrapper(self, verify)

    def __call__(self, *args: Any) -> Any:
        """Call the verifier with the same arguments, ``rng`` replaced by the batch's :class:`RowGenerators`."""
        *head, rng = args
        if rng is not self._shared:
            self._shared, self._slots = rng, []
        batch = int(np.shape(head[0])[0])
        while len(self._slots) < batch:
            seed, seeded = int(rng.integers(2**63)), bool(rng.random() < self.share)
            self._slots.append(np.random.default_rng(seed) if seeded else None)
        seeded_rows = {b: gen for b, gen in enumerate(self._slots[:batch]) if gen is not None}
        return self.verify(*head, RowGenerators(rng, seeded_rows, batch))


def draw_uniforms(rng: Any, num_draft: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Return a round's uniforms: ``u[B, K]`` to test the drafts and ``v[B]`` for the token after them.

    From one Generator: ``rng.random((B, K))`` then ``rng.random(B)``. From a :class:`RowGenerators`
    as vLLM's ``generate_uniform_probs``: the shared generator fills the whole batch (so an unseeded
    row's draws do not depend on which rows are seeded), then a seeded row's ``num_draft[b]``
    uniforms and its final one are drawn from its own generator, ``num_draft[b] + 1`` draws that
    depend on that row alone (a zero-draft row draws one: vllm-ascend #13608).
    """
    batch = num_draft.shape[0]
    if not isinstance(rng, RowGenerators):
        return rng.random((batch, k)), rng.random(batch)
    u, v = rng.shared.random((batch, k)), np.asarray(rng.shared.random((batch,)))
    for b, gen in rng.seeded.items():
        n = int(num_draft[b])
        drawn = gen.random(n + 1)
        u[b, :n], v[b] = drawn[:n], drawn[n]
    return u, v


def chain_inputs(verify: Callable[..., tuple[np.ndarray, np.ndarray]]) -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """Decorate a chain verifier: ``draft`` and ``num_draft`` (int64) arrive as arrays, an empty batch is answered.

    The bundled verifiers (reference, greedy, block, the mutant zoo) share this prologue; an
    empty batch returns ``(out[0, K+1], n_out[0])`` without calling ``verify`` or drawing from
    ``rng``. Keyword switches (the mutants') pass through.
    """

    @functools.wraps(verify)
    def wrapped(draft: Any, q: Any, p: Any, num_draft: Any, rng: Any, **switches: Any) -> tuple[np.ndarray, np.ndarray]:
        draft = np.asarray(draft)
        num_draft = np.asarray(num_draft, dtype=np.int64)
        if draft.shape[0] == 0:
            return np.full((0, draft.shape[1] + 1), -1, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return verify(draft, q, p, num_draft, rng, **switches)

    return wrapped


def assemble(
    draft: np.ndarray, n_acc: np.ndarray, token: np.ndarray, emit: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Lay out ``(out, n_out)``: the first ``n_acc`` drafts, then ``token`` (where ``emit``), then -1."""
    batch, k = draft.shape
    rows = np.arange(batch)
    emit = np.ones(batch, dtype=bool) if emit is None else emit
    out = np.full((batch, k + 1), -1, dtype=np.int64)
    out[:, :k] = np.where(np.arange(k)[None, :] < n_acc[:, None], draft, -1)
    out[rows[emit], n_acc[emit]] = token[emit]
    return out, n_acc + emit


def returned_arrays(clause: str, rule: str, **values: Any) -> tuple[np.ndarray, ...]:
    """Return the verifier's returned ``values`` as arrays; raise ContractError ``clause`` naming the first that is not
    rectangular (a ragged list of rows) or cannot be an array at all."""
    arrays = []
    for name, value in values.items():
        try:
            arrays.append(np.asarray(value))
        except (TypeError, ValueError) as exc:
            raise ContractError(clause, f"{rule}: {name} is not a rectangular array ({exc})") from None
    return tuple(arrays)


def as_int64(clause: str, rule: str, **arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Return ``arrays`` as int64; raise ContractError ``clause`` (``rule``: its text) naming the first holding no integers."""
    for name, arr in arrays.items():
        if not np.issubdtype(arr.dtype, np.integer):
            bad = "" if arr.dtype.kind != "f" or np.all(np.isfinite(arr)) else " (holding NaN/inf)"
            raise ContractError(clause, f"{rule}: {name} has dtype {arr.dtype}{bad}")
    return tuple(arr.astype(np.int64, copy=False) for arr in arrays.values())


def _first_bad_row(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask.reshape(mask.shape[0], -1).any(axis=1))[0])


def validate_output(
    result: Any, draft: np.ndarray, num_draft: np.ndarray, vocab: int
) -> tuple[np.ndarray, np.ndarray]:
    """Check a verifier's return value against the contract; return ``(out, n_out)`` as int64.

    Raises ContractError naming the first clause broken and the first offending row.
    """
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ContractError("return", f"{CLAUSES['return']}; got {type(result).__name__}")
    out, n_out = returned_arrays("shape", CLAUSES["shape"], out=result[0], n_out=result[1])
    batch, k = draft.shape
    if out.shape != (batch, k + 1) or n_out.shape != (batch,):
        raise ContractError(
            "shape", f"{CLAUSES['shape']}: expected ({batch}, {k + 1}) and ({batch},), got {out.shape} and {n_out.shape}"
        )
    out, n_out = as_int64("dtype", CLAUSES["dtype"], out=out, n_out=n_out)
    bad = (n_out < 1) | (n_out > num_draft + 1)
    if bad.any():
        b = int(np.flatnonzero(bad)[0])
        raise ContractError(
            "n_out-range", f"{CLAUSES['n_out-range']}: row {b} has n_out = {n_out[b]}, num_draft = {num_draft[b]}"
        )
    emitted = np.arange(k + 1)[None, :] < n_out[:, None]
    bad = emitted & ((out < 0) | (out >= vocab))
    if bad.any():
        b = _first_bad_row(bad)
        raise ContractError("vocab-range", f"{CLAUSES['vocab-range']} (V = {vocab}): row {b} emitted {out[b, : n_out[b]].tolist()}")
    bad = ~emitted & (out != -1)
    if bad.any():
        b = _first_bad_row(bad)
        raise ContractError("padding", f"{CLAUSES['padding']}: row {b} is {out[b].tolist()} with n_out = {n_out[b]}")
    bad = (np.arange(k)[None, :] < (n_out - 1)[:, None]) & (out[:, :k] != draft)
    if bad.any():
        b = _first_bad_row(bad)
        raise ContractError(
            "prefix", f"{CLAUSES['prefix']}: row {b} emitted {out[b, : n_out[b]].tolist()} for drafts {draft[b].tolist()}"
        )
    return out, n_out
