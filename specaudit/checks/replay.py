"""A failed exact finding as data: the call's inputs, the random source it was fed, and the rule it broke.

An exact probe fails on one verifier call. :class:`Call` keeps what replays it: the inputs (in the
canonical contract), how its ``rng`` was made (:data:`SOURCES`), and the rule the output broke
(:data:`RULES`). :func:`replay` calls a verifier on it again, through the same random source, and
returns the broken rule's :class:`Violation` (or None when the output keeps the rule); the shrinker
(:mod:`specaudit.analysis.shrink`) and ``specaudit repro`` rest on it. ``Call.to_dict`` is the
``call`` entry of the check's data in the results document.

Random sources
--------------
``{"kind": "pcg64", "state": …}``: an ``np.random.Generator`` over PCG64 whose ``bit_generator.state``
was that dict when the call began (any seeded Generator the probes make).
``{"kind": "scripted", "start": 0|1, "skip": n, "seed": s}``: :class:`~specaudit.contract.uniforms.ScriptedUniforms`
(``start``, ``seed``) with ``n`` terms already handed out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from specaudit.contract.chain import CLAUSES, validate_output
from specaudit.contract.tree import validate_tree_output
from specaudit.contract.uniforms import ScriptedUniforms
from specaudit.errors import ContractError

__all__ = ["AGREE_CHANCE", "REPEATS", "RULES", "SOURCES", "TREE_RULES", "Call", "Violation", "admissible", "agree_chance",
           "first_write", "recorded", "make_rng", "padded", "replay", "source_of", "violation"]

#: Rule id -> the rule in one sentence (what the assertion of a repro states). ``clause:ID`` is a contract clause.
RULES: dict[str, str] = {
    "p-positive": "every emitted token has p > 0 at its position (accept iff u < p/q; sample only from p's support)",
    "accept-all": "with p = q every draft is accepted (u q < p for any u < 1), so n_out = num_draft + 1",
    "argmax": "with a one-hot target every emitted token is the target's only token (its argmax)",
    "argmax-run": "with a one-hot target the accepted count is the run of drafts equal to the argmax",
    "forced-run": "a draft with p >= q > 0 is always accepted and one with p = 0 never (accept iff u < p/q, u < 1)",
    "padding": "what lies past num_draft (draft ids, q rows, p rows after the bonus position) never changes the output",
    "inputs-unmodified": "the verifier never writes into draft, q, p or num_draft",
    "same-seed": "the same inputs and the same rng state give the same output (the verifier draws from rng only)",
    "other-seed": "another rng seed gives another output (a lossless sampler's tokens come from the rng it is given)",
    "tree-p-positive": "every emitted token (the accepted nodes' tokens and the final token) has p > 0 at its position "
                       "(accept a child iff u < p/q; sample only from p's support)",
    **{f"clause:{cid}": text for cid, text in CLAUSES.items()},
}
#: Calls of the same-seed rule (the same inputs, each through a fresh source in the recorded state).
REPEATS = 32
#: A same-seed call is kept (recorded, or a shrink step taken) only where a verifier that draws elsewhere, if lossless,
#: repeats its output REPEATS times with at most this chance (:func:`agree_chance`): the repro fails reliably. An
#: other-seed call likewise: a lossless verifier's REPEATS calls through seeds 0..REPEATS-1 all agree with at most
#: this chance, so its repro passes on a correct verifier but that often.
AGREE_CHANCE = 1e-6
#: The rules replayed through REPEATS calls, kept only where :func:`agree_chance` is at most AGREE_CHANCE.
REPEATED_RULES = ("same-seed", "other-seed")
#: The rules a tree-contract call is judged by.
TREE_RULES = ("tree-p-positive",)
#: Kinds of random source a call can be replayed through.
SOURCES = ("pcg64", "scripted")


@dataclass(frozen=True)
class Violation:
    """How one output broke a rule: the first row, what the rule expects there, what came out."""

    row: int
    expected: str
    got: str


@dataclass(frozen=True)
class Call:
    """One failing verifier call: canonical inputs, its random source, the rule its output broke."""

    draft: np.ndarray  # [B, K] int64
    q: np.ndarray  # [B, K, V] float64
    p: np.ndarray  # [B, K+1, V] float64
    num_draft: np.ndarray  # [B] int64
    source: Mapping[str, Any]
    rule: str
    expected: str = ""
    got: str = ""
    origin: tuple[int, int, int] | None = None  # (rows, K, V) of the probe's call this one was cut from
    # the tree contract: draft holds the node tokens [B, N], num_draft num_nodes, parent [B, N] (None: the chain contract)
    parent: np.ndarray | None = None

    @property
    def tree(self) -> bool:
        """Return whether the call is in the tree contract (verify(tokens, parent, q, p, num_nodes, rng))."""
        return self.parent is not None

    def arguments(self) -> tuple[np.ndarray, ...]:
        """Return copies of the call's inputs, in its contract's order (the rng follows)."""
        if self.parent is None:
            return self.draft.copy(), self.q.copy(), self.p.copy(), self.num_draft.copy()
        return self.draft.copy(), self.parent.copy(), self.q.copy(), self.p.copy(), self.num_draft.copy()

    @property
    def shape(self) -> tuple[int, int, int]:
        """Return (rows, drafts K, vocabulary V)."""
        return int(self.draft.shape[0]), int(self.draft.shape[1]), int(self.p.shape[-1])

    def with_inputs(self, draft: np.ndarray, q: np.ndarray, p: np.ndarray, num_draft: np.ndarray,
                    parent: np.ndarray | None = None) -> Call:
        """Return the same call on other inputs (no verdict yet); a tree call keeps its parents unless given."""
        if parent is None and self.parent is not None:
            parent = self.parent[:, : np.shape(draft)[1]]
        return Call(np.asarray(draft, np.int64), np.asarray(q, np.float64), np.asarray(p, np.float64),
                    np.asarray(num_draft, np.int64), self.source, self.rule, origin=self.origin or self.shape,
                    parent=None if parent is None else np.asarray(parent, np.int64))

    def rows(self, index: Any) -> Call:
        """Return the call restricted to rows ``index``."""
        i = np.atleast_1d(np.asarray(index, dtype=np.int64))
        return self.with_inputs(self.draft[i], self.q[i], self.p[i], self.num_draft[i],
                                None if self.parent is None else self.parent[i])

    def judged(self, found: Violation) -> Call:
        """Return the call carrying ``found``'s expected and got."""
        return Call(self.draft, self.q, self.p, self.num_draft, self.source, self.rule,
                    f"row {found.row}: {found.expected}", f"row {found.row}: {found.got}", self.origin, self.parent)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (the ``call`` entry of a check's data)."""
        tree = {} if self.parent is None else {"contract": "tree", "parent": self.parent.tolist()}
        return {"rule": self.rule, "rule_text": RULES[self.rule], "expected": self.expected, "got": self.got,
                "source": _plain(dict(self.source)), "draft": self.draft.tolist(), "q": self.q.tolist(),
                "p": self.p.tolist(), "num_draft": self.num_draft.tolist(), "origin": list(self.origin or self.shape),
                **tree}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Call:
        """Read the JSON form; raise ValueError saying what is wrong."""
        if not isinstance(d, Mapping):
            raise ValueError(f"call is {type(d).__name__}, not an object")
        missing = [k for k in ("rule", "source", "draft", "q", "p", "num_draft") if k not in d]
        if missing:
            raise ValueError(f"call lacks {', '.join(missing)}")
        rule = d["rule"]
        if rule not in RULES:
            raise ValueError(f"call.rule {rule!r} is not one of {', '.join(RULES)}")
        source = d["source"]
        if not isinstance(source, Mapping) or source.get("kind") not in SOURCES:
            raise ValueError(f"call.source must be an object with kind in {SOURCES}")
        try:
            draft = np.asarray(d["draft"], dtype=np.int64)
            q, p = np.asarray(d["q"], dtype=np.float64), np.asarray(d["p"], dtype=np.float64)
            nd = np.asarray(d["num_draft"], dtype=np.int64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"call inputs are not numeric arrays: {exc}") from None
        b = nd.shape[0] if nd.ndim == 1 else -1
        # JSON lists lose the trailing axes of an empty array (K = 0: q is [[]]): take them from p
        if p.ndim == 3 and p.shape[0] == b and draft.size == 0 and q.size == 0:
            draft = draft.reshape(b, p.shape[1] - 1)
            q = q.reshape(b, p.shape[1] - 1, p.shape[2])
        if draft.ndim != 2 or draft.shape[0] != b or q.shape[:2] != draft.shape or p.ndim != 3 \
                or p.shape[:2] != (b, draft.shape[1] + 1) or q.shape[-1] != p.shape[-1]:
            raise ValueError(f"call inputs have inconsistent shapes: draft {draft.shape}, q {q.shape}, p {p.shape}, "
                             f"num_draft {nd.shape}")
        parent = None
        if d.get("contract", "chain") == "tree":
            try:
                parent = np.asarray(d.get("parent"), dtype=np.int64).reshape(draft.shape)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"call.parent must be an integer array of the shape of draft {draft.shape}: {exc}") from None
            if rule not in TREE_RULES:
                raise ValueError(f"call.rule {rule!r} is not a rule of the tree contract ({', '.join(TREE_RULES)})")
        elif d.get("contract", "chain") != "chain":
            raise ValueError(f"call.contract must be 'chain' or 'tree', got {d.get('contract')!r:.40}")
        origin = d.get("origin")
        if origin is not None and (not isinstance(origin, list) or len(origin) != 3
                                   or not all(isinstance(x, int) and x >= 0 for x in origin)):
            raise ValueError(f"call.origin must be [rows, K, V], got {origin!r:.60}")
        return cls(draft, q, p, nd, dict(source), rule, str(d.get("expected", "")), str(d.get("got", "")),
                   tuple(origin) if origin is not None else None, parent)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, np.integer):
        return int(value)
    return value


def source_of(rng: Any) -> dict[str, Any] | None:
    """Describe ``rng`` as a replayable source before a call draws from it (None: not replayable)."""
    if type(rng) is ScriptedUniforms:
        return {"kind": "scripted", "start": int(rng.start), "skip": int(rng.draws), "seed": int(rng.seed)}
    if type(rng) is np.random.Generator and isinstance(rng.bit_generator, np.random.PCG64):
        return {"kind": "pcg64", "state": _plain(rng.bit_generator.state)}
    return None


def make_rng(source: Mapping[str, Any]) -> np.random.Generator:
    """Return a fresh random source in the state ``source`` describes."""
    if source["kind"] == "scripted":
        src = ScriptedUniforms(int(source["start"]), seed=int(source.get("seed", 0)))
        src.draws = int(source.get("skip", 0))
        return src
    g = np.random.Generator(np.random.PCG64())
    g.bit_generator.state = dict(source["state"])
    return g


def _emitted(n_out: np.ndarray, width: int) -> np.ndarray:
    return np.arange(width)[None, :] < n_out[:, None]


def _tree_violation(call: Call, result: Any) -> Violation | None:
    """Return how a tree verifier's ``result`` breaks the tree-p-positive rule, or None."""
    assert call.parent is not None
    try:
        path, accepted, final = validate_tree_output(result, call.parent, call.num_draft, call.p.shape[-1])
    except ContractError:
        return None  # another failure than the one being replayed
    for b in range(call.draft.shape[0]):
        row = 0  # p[b, 0] is the root's law, p[b, 1 + j] the law after node j
        for j in path[b, : accepted[b]].tolist():
            token = int(call.draft[b, j])
            if call.p[b, row, token] <= 0:
                return Violation(b, f"every emitted token has p > 0 (path {path[b, : accepted[b]].tolist()}, final "
                                 f"{int(final[b])})", f"accepted node {j} (token {token}) has p = 0")
            row = 1 + j
        if call.p[b, row, int(final[b])] <= 0:
            return Violation(b, f"every emitted token has p > 0 (path {path[b, : accepted[b]].tolist()})",
                             f"the final token {int(final[b])} has p = 0")
    return None


def violation(rule: str, call: Call, result: Any) -> Violation | None:
    """Return how ``result`` (a verifier's return value on ``call``) breaks ``rule``, or None if it keeps it."""
    if call.tree:
        return _tree_violation(call, result) if rule == "tree-p-positive" else None
    try:
        out, n_out = validate_output(result, call.draft, call.num_draft, call.p.shape[-1])
    except ContractError as exc:
        if rule == f"clause:{exc.clause}":
            return Violation(0, CLAUSES[exc.clause], exc.detail)
        return None  # another failure than the one being replayed
    if rule.startswith("clause:") or rule in ("padding", "inputs-unmodified", *REPEATED_RULES):
        return None  # replayed by :func:`replay` itself (more than one call, or the inputs after the call)
    k = call.draft.shape[1]
    emitted = _emitted(n_out, k + 1)
    if rule == "p-positive":
        tok = np.where(emitted, out, 0)
        mass = np.take_along_axis(call.p, tok[..., None], axis=2)[..., 0]
        bad = np.argwhere(emitted & (mass <= 0))
        if not bad.size:
            return None
        b, j = (int(x) for x in bad[0])
        what = "accepted draft" if j < n_out[b] - 1 else "sampled token"
        return Violation(b, f"every emitted token has p > 0 (output {out[b, : n_out[b]].tolist()})",
                         f"position {j}: {what} {int(out[b, j])} has p = 0")
    if rule == "accept-all":
        rows = np.flatnonzero(n_out != call.num_draft + 1)
        if not rows.size:
            return None
        b = int(rows[0])
        return Violation(b, f"n_out = num_draft + 1 = {int(call.num_draft[b]) + 1}", f"n_out = {int(n_out[b])}")
    if rule == "forced-run":
        lo, exact = forced(call)
        rows = np.flatnonzero((n_out - 1 < lo) | (exact & (n_out - 1 != lo)))
        if not rows.size:
            return None
        b = int(rows[0])
        want = f"{int(lo[b])}" if exact[b] else f">= {int(lo[b])}"
        return Violation(b, f"accepted drafts {want}", f"accepted {int(n_out[b]) - 1}")
    top = np.argmax(call.p, axis=2)
    if rule == "argmax":
        bad = np.argwhere(emitted & (out != top))
        if not bad.size:
            return None
        b, j = (int(x) for x in bad[0])
        return Violation(b, f"position {j}: token {int(top[b, j])}", f"position {j}: token {int(out[b, j])}")
    if rule == "argmax-run":
        valid = np.arange(k)[None, :] < call.num_draft[:, None]
        run = np.cumprod(valid & (call.draft == top[:, :k]), axis=1).sum(axis=1)
        rows = np.flatnonzero(n_out != run + 1)
        if not rows.size:
            return None
        b = int(rows[0])
        return Violation(b, f"n_out = run + 1 = {int(run[b]) + 1}", f"n_out = {int(n_out[b])}")
    raise ValueError(f"unknown rule {rule!r}")


def forced(call: Call) -> tuple[np.ndarray, np.ndarray]:
    """Return per row the run of leading drafts the chain rule must accept (p >= q, p > 0), and whether the
    accepted count must equal it (the run ends at num_draft or at a draft with p = 0, which must be rejected)."""
    k = call.draft.shape[1]
    at = np.where(np.arange(k)[None, :] < call.num_draft[:, None], call.draft, 0)[..., None]
    p_x = np.take_along_axis(call.p[:, :k], at, axis=2)[..., 0]
    q_x = np.take_along_axis(call.q, at, axis=2)[..., 0]
    valid = np.arange(k)[None, :] < call.num_draft[:, None]
    lo = np.cumprod(valid & (p_x >= q_x) & (p_x > 0), axis=1).sum(axis=1)
    stop = np.take_along_axis(np.pad(p_x, ((0, 0), (0, 1)), constant_values=0.0), lo[:, None], axis=1)[:, 0]
    return lo, (lo == call.num_draft) | (stop <= 0)


def padded(call: Call, token: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``call``'s draft, q and p with everything past num_draft set to ``token`` (its law 0.9 at ``token``).

    The padding rule compares the outputs of the two paddings ``token`` = 0 and V - 1 (the same
    random source for both); whatever the recorded padding was, these two replace it.
    """
    k, v = call.draft.shape[1], call.p.shape[-1]
    pad = np.arange(k)[None, :] >= call.num_draft[:, None]
    pad_p = np.arange(k + 1)[None, :] > call.num_draft[:, None]
    law = np.full(v, 0.1 / max(v - 1, 1))
    law[token] = 0.9 if v > 1 else 1.0
    draft, q, p = call.draft.copy(), call.q.copy(), call.p.copy()
    draft[pad], q[pad], p[pad_p] = token, law, law
    return draft, q, p


def _outputs(result: Any, call: Call) -> tuple[np.ndarray, np.ndarray] | None:
    try:
        return validate_output(result, call.draft, call.num_draft, call.p.shape[-1])
    except ContractError:
        return None  # a contract breach is another finding than the one being replayed


def _padding(verify: Callable[..., Any], call: Call) -> Violation | None:
    """Replay the two paddings of :func:`padded` through the same source; the first row whose output differs."""
    v = call.p.shape[-1]
    if v < 2 or not np.any(call.num_draft < call.draft.shape[1]):
        return None  # nothing to pad, or one token to pad with
    got = []
    for token in (0, v - 1):
        draft, q, p = padded(call, token)
        found = _outputs(verify(draft, q, p, call.num_draft.copy(), make_rng(call.source)), call)
        if found is None:
            return None
        got.append(found)
    (out_a, n_a), (out_b, n_b) = got
    rows = np.flatnonzero((out_a != out_b).any(axis=1) | (n_a != n_b))
    if not rows.size:
        return None
    b = int(rows[0])
    return Violation(b, f"the same output for padding token 0 and {v - 1}: {out_a[b, : n_a[b]].tolist()}",
                     f"padding token 0 gave {out_a[b, : n_a[b]].tolist()}, padding token {v - 1} gave "
                     f"{out_b[b, : n_b[b]].tolist()} (num_draft = {int(call.num_draft[b])})")


def first_write(before: tuple[np.ndarray, ...], after: tuple[np.ndarray, ...]) -> tuple[int, str] | None:
    """Return the row and a description of the first entry of draft, q, p, num_draft that differs in ``after``
    (the verifier wrote it), or None."""
    for name, a, b in zip(("draft", "q", "p", "num_draft"), before, after):
        if a.shape != b.shape or a.dtype != b.dtype:
            return 0, f"{name} changed shape/dtype from {a.shape} {a.dtype} to {b.shape} {b.dtype}"
        diff = ~((a == b) | (np.isnan(a) & np.isnan(b))) if a.dtype.kind == "f" else a != b
        if diff.any():
            where = tuple(int(i) for i in np.argwhere(diff)[0])
            return where[0], f"{name}{list(where)} {a[where]:.6g} -> {b[where]:.6g} ({int(diff.sum())} entries changed)"
    return None


def agree_chance(call: Call) -> float:
    """Return a bound on the chance that REPEATS calls of a lossless verifier drawing fresh randomness agree.

    A lossless verifier's first token of row b has the law p[b, 0] (the target's next-token law),
    whatever the drafts; REPEATS independent calls agree on it with probability
    ``sum_x p[b, 0, x] ** REPEATS``, and the rows are independent: the product over rows bounds
    the chance that every output repeats.
    """
    rows = np.clip(call.p[:, 0], 0.0, 1.0) if call.p.shape[1] else np.ones((call.p.shape[0], 1))
    per_row = np.sum(rows**REPEATS, axis=-1)
    return float(np.exp(np.sum(np.log(np.maximum(per_row, 1e-300)))))


def admissible(call: Call) -> bool:
    """Return whether ``call`` shows its rule reliably (the repeated rules: :data:`AGREE_CHANCE`; others: always)."""
    return call.rule not in REPEATED_RULES or agree_chance(call) <= AGREE_CHANCE


def _same_seed(verify: Callable[..., Any], call: Call) -> Violation | None:
    """Call REPEATS times through fresh sources in the recorded state; the first row where an output differs."""
    first: tuple[np.ndarray, np.ndarray] | None = None
    for i in range(REPEATS):
        found = _outputs(verify(call.draft.copy(), call.q.copy(), call.p.copy(), call.num_draft.copy(),
                                make_rng(call.source)), call)
        if found is None:
            return None
        if first is None:
            first = found
            continue
        rows = np.flatnonzero((found[0] != first[0]).any(axis=1) | (found[1] != first[1]))
        if rows.size:
            b = int(rows[0])
            return Violation(b, f"every call repeats the first call's output {first[0][b, : first[1][b]].tolist()}",
                             f"call {i} gave {found[0][b, : found[1][b]].tolist()}")
    return None


def other_seeds(call: Call) -> list[np.random.Generator]:
    """Return the REPEATS sources of an other-seed replay: the recorded one, then seeds 1 .. REPEATS - 1."""
    return [make_rng(call.source)] + [np.random.default_rng(seed) for seed in range(1, REPEATS)]


def _other_seed(verify: Callable[..., Any], call: Call) -> Violation | None:
    """Call through REPEATS different sources; a violation when every output is the first one (named by the row
    least likely to repeat under a lossless verifier)."""
    first: tuple[np.ndarray, np.ndarray] | None = None
    for rng in other_seeds(call):
        found = _outputs(verify(call.draft.copy(), call.q.copy(), call.p.copy(), call.num_draft.copy(), rng), call)
        if found is None:
            return None
        if first is None:
            first = found
        elif (found[0] != first[0]).any() or (found[1] != first[1]).any():
            return None  # the output moved with the seed
    if first is None:
        return None
    rows = np.clip(call.p[:, 0], 0.0, 1.0) if call.p.shape[1] else np.ones((call.p.shape[0], 1))
    b = int(np.argmin(np.sum(rows**REPEATS, axis=-1)))
    return Violation(b, "another seed moves the output (a lossless sampler draws from rng)",
                     f"all {REPEATS} seeds gave {first[0][b, : first[1][b]].tolist()}")


def recorded(verify: Callable[..., Any], whole: Call, max_floats: int) -> dict[str, Any] | None:
    """Return a probe's failing call as its ``call`` entry (``Call.to_dict``): its failing row alone when that row
    fails again by itself, else the whole call if q and p hold at most ``max_floats``; None when a replay of the
    whole call does not fail again (the output does not follow from the inputs and the random source alone)."""
    found = replay(verify, whole)
    if found is None:
        return None
    if 0 <= found.row < whole.draft.shape[0]:  # a clause of the call's shape (an empty batch) has no row
        one = whole.rows(found.row)
        again = replay(verify, one) if admissible(one) else None
        if again is not None:
            return one.judged(again).to_dict()
    return whole.judged(found).to_dict() if whole.q.size + whole.p.size <= max_floats else None


def replay(verify: Callable[..., Any], call: Call) -> Violation | None:
    """Call ``verify`` on copies of ``call``'s inputs through its random source; return the rule's violation or None.

    A verifier that raises on these inputs keeps no rule broken here (another failure): None.
    """
    try:
        if call.rule == "padding":
            return _padding(verify, call)
        if call.rule == "same-seed":
            return _same_seed(verify, call)
        if call.rule == "other-seed":
            return _other_seed(verify, call)
        given = call.arguments()
        result = verify(*given, make_rng(call.source))
    except Exception:  # noqa: BLE001 - a crash is another finding than the one being replayed
        return None
    if call.rule == "inputs-unmodified":
        change = first_write((call.draft, call.q, call.p, call.num_draft), tuple(np.asarray(x) for x in given))
        # (the chain contract only: a tree call is judged by TREE_RULES)
        return None if change is None else Violation(change[0], "draft, q, p and num_draft unchanged", change[1])
    return violation(call.rule, call, result)
