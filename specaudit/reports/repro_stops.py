"""Write a failed ``stops`` check as a pytest file: one forced row, its stop tokens and budget, the stop rule inline.

The ``stops`` check (:mod:`specaudit.checks.stops`) fails on rows whose verification it forced,
so a failure needs no recorded uniforms: the repro rebuilds one row of the failing case with the
fewest drafts that still fail on the target (:data:`~specaudit.checks.stops.MIN_DRAFTS` upward,
over V = 8 with the stop tokens renumbered, then the run's own ids), checking each candidate
against the target before it is written. The file imports numpy and the target only: the
``stops`` argument is a namedtuple with the contract's two fields, and the stop rule (each token
checked for a stop before the budget) is a dozen lines of numpy. It calls the target twice on the
row, without stops and with them, and asserts that the stopped call kept what the rule keeps of
the unbounded one, for the right reason; ``SPECAUDIT_REPRO_TARGET`` names another verifier.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specaudit.checks.stops import CASES, MIN_DRAFTS, judge_call, one_row
from specaudit.contract.stops import split_stops
from specaudit.contract.targets import load_target
from specaudit.reports.repro_load import LOAD
from specaudit.results import Status

__all__ = ["StopsRepro", "build", "findings"]

#: Vocabulary of a repro row (stop tokens renumbered to its top ids) and seeds tried per shape.
VOCAB, SEEDS = 8, 4


@dataclass(frozen=True)
class StopsRepro:
    """A rendered stops repro: file name and text, the case, and the row's shape before and after."""

    name: str
    text: str
    scenario: str
    case: str
    before: tuple[int, int, int]  # rows, K, V of the check's call
    after: tuple[int, int, int]
    data_name: None = None  # inline always


def findings(doc: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Return each failed ``stops`` check that recorded its failing case, with its scenario result."""
    out = []
    for s in doc.get("scenarios", []):
        for c in s.get("checks", []):
            recorded = (c.get("data") or {}).get("stops_call")
            if c.get("name") == "stops" and c.get("status") == "failed" and isinstance(recorded, Mapping):
                out.append((s, c))
    return out


def _candidates(recorded: Mapping[str, Any]) -> list[tuple[int, int, list[int]]]:
    """Return the (K, V, stop pool) shapes to try, smallest first: V = 8 renumbered, then the run's ids."""
    case, k0 = str(recorded["case"]), int(recorded["k"])
    pool = [int(t) for t in recorded["stop_pool"]][:2]
    shapes = []
    for k in range(min(MIN_DRAFTS.get(case, 2), k0), k0 + 1):
        shapes.append((k, VOCAB, list(range(VOCAB - 1, VOCAB - 1 - len(pool), -1))))
    own = max(VOCAB, max(pool) + 1)
    if own <= int(recorded["vocab"]):
        shapes += [(k, own, pool) for k in range(min(MIN_DRAFTS.get(case, 2), k0), k0 + 1)]
    return shapes


def build(doc: Mapping[str, Any], found: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]], target: str,
          path: str, variable: str) -> tuple[list[StopsRepro], list[str]]:
    """Rebuild each finding's smallest failing row on ``target`` and render its file (``path``: what the file loads).

    Return the repros and the findings whose case no longer fails on the target.
    """
    verify = load_target(target)
    canonical = split_stops(verify)
    repros, gone = [], []
    for result, check in found:
        recorded = check["data"]["stops_call"]
        case = str(recorded["case"])
        if case not in CASES:
            gone.append(f"{result['name']} / stops")
            continue
        hit = None
        for k, vocab, pool in _candidates(recorded):
            for seed in range(SEEDS):
                call = one_row(case, k, vocab, pool, recorded.get("cap"), seed)
                try:
                    verdict = judge_call(verify, canonical, call, seed)
                except Exception:  # noqa: BLE001 - a call that raises is another finding than this one
                    continue
                if verdict.status is Status.FAILED:
                    hit = (call, seed)
                    break
            if hit is not None:
                break
        if hit is None:
            gone.append(f"{result['name']} / stops")
            continue
        call, seed = hit
        name = f"test_repro_{_slug(result['name'])}_stops.py"
        before = (int(recorded.get("rows", 0)), int(recorded["k"]), int(recorded["vocab"]))
        after = (1, int(call.draft.shape[1]), int(call.p.shape[-1]))
        text = _render(result, check, call, seed, case, before, after, path, variable, doc)
        repros.append(StopsRepro(name, text, result["name"], case, before, after))
    return repros, gone


def _slug(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_").lower() or "x"


def _literal(a: Any) -> str:
    a = np.asarray(a)
    if a.ndim <= 1:
        return json.dumps(a.tolist())
    return "[" + ",\n ".join(_literal(x) for x in a) + "]"


_FILE = '''\
"""Repro of specaudit's finding {scenario} / stops ({case}): {rule}.

Found by specaudit {version} on `{run_target}` ({summary}).
One forced row: K = {k}, V = {v}, stop tokens {stop_tokens}, remaining {remaining} (the check's call: {before}).

    pytest {name}                                              # fails on the target
    SPECAUDIT_REPRO_TARGET=pkg.module:verify pytest {name}     # test another verifier (a fix)

The stops contract: verify(draft[B,K], q[B,K,V], p[B,K+1,V], num_draft[B], rng, stops) -> (out, n_out, finished[B]).
stops.tokens[B,S] holds each row's stop ids (-1 padded), stops.remaining[B] how many tokens it may still emit;
out keeps the tokens up to the first stop token (kept) and at most `remaining`; finished is 0 running, 1 stop,
2 length. The row's verification is forced: each draft it accepts has p = q (accepted for any uniform), a rejected
draft has p = 0 there and a one-hot residual, an all-accepted row a one-hot bonus.
"""

import collections
import importlib
import importlib.util
import os

import numpy as np

TARGET = os.environ.get("{variable}", {target!r})
RULE = {rule!r}
Stops = collections.namedtuple("Stops", ["tokens", "remaining"])
FINISHED = {{0: "running", 1: "stop", 2: "length"}}
SEED = {seed}

DRAFT = np.array({draft}, dtype=np.int64)
Q = np.array({q})
P = np.array({p})
NUM_DRAFT = np.array({num_draft}, dtype=np.int64)
STOP_TOKENS = np.array({tokens}, dtype=np.int64)
REMAINING = np.array({remaining_array}, dtype=np.int64)


{load}

def kept(tokens, stops, remaining):
    """The stop rule: each token checked for a stop, then the budget; return (tokens kept, reason, stop at the budget)."""
    for j, token in enumerate(tokens):
        if token in stops:
            return tokens[: j + 1], "stop", j + 1 >= remaining
        if j + 1 >= remaining:
            return tokens[: j + 1], "length", False
    return tokens, "running", False


def test_repro():
    verify = load(TARGET)
    unbounded = Stops(np.full((1, 0), -1, dtype=np.int64), np.array([1 << 40], dtype=np.int64))
    out0, n0 = (np.asarray(x) for x in verify(DRAFT.copy(), Q.copy(), P.copy(), NUM_DRAFT.copy(),
                                              np.random.default_rng(SEED), unbounded)[:2])
    out, n_out, finished = (np.asarray(x) for x in verify(DRAFT.copy(), Q.copy(), P.copy(), NUM_DRAFT.copy(),
                                                         np.random.default_rng(SEED),
                                                         Stops(STOP_TOKENS.copy(), REMAINING.copy())))
    emitted = out0[0, : int(n0[0])].tolist()
    want, reason, tie = kept(emitted, {{int(t) for t in STOP_TOKENS[0] if t >= 0}}, int(REMAINING[0]))
    got = out[0, : int(n_out[0])].tolist()
    said = FINISHED.get(int(finished[0]), repr(finished[0]))
    padded = bool((out[0, int(n_out[0]):] == -1).all())
    assert got == want and padded and (said == reason or (tie and said == "length")), (
        f"emitted {{emitted}} with stop tokens {{STOP_TOKENS[0][STOP_TOKENS[0] >= 0].tolist()}} and remaining "
        f"{{int(REMAINING[0])}}: expected {{want}} finished {{reason}}, got {{out[0].tolist()}} (n_out {{int(n_out[0])}}) "
        f"finished {{said}}: {{RULE}}")
'''


def _render(result: Mapping[str, Any], check: Mapping[str, Any], call: Any, seed: int, case: str,
            before: tuple[int, int, int], after: tuple[int, int, int], path: str, variable: str,
            doc: Mapping[str, Any]) -> str:
    summary = str(check.get("summary", ""))
    summary = summary if len(summary) <= 200 else summary[:197] + "..."
    stops = [int(t) for t in call.stops.tokens[0] if t >= 0]
    return _FILE.format(
        load=LOAD,
        scenario=result["name"], case=case, rule=CASES[case][1], version=doc.get("version", "?"),
        run_target=doc.get("target", "?"), summary=summary.replace('"""', "'''").replace("\\", "\\\\"),
        k=after[1], v=after[2], stop_tokens=stops, remaining=int(call.stops.remaining[0]),
        before=f"{before[0]} rows, K = {before[1]}, V = {before[2]}", name=f"test_repro_{_slug(result['name'])}_stops.py",
        variable=variable, target=path, seed=seed, draft=_literal(call.draft), q=_literal(call.q), p=_literal(call.p),
        num_draft=_literal(call.num_draft), tokens=_literal(call.stops.tokens), remaining_array=_literal(call.stops.remaining),
    )
