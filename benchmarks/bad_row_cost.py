"""Per-call cost of the bad-row checks (specaudit.checks.bad_rows) in the block, greedy and logits references.

Each reference is timed side by side, alternating, with its row checks and with them switched off
(block: its check function replaced by "no bad row"; greedy and logits: the reference as it was
before the checks, restated here: argmax and assemble; process both sides, then the chain rule), on the same clean batches (K = 3, ragged num_draft).
Prints the best-of-repeats time per call and the ratio checked / unchecked for each batch size and
vocabulary. A shared machine is noisy: read the ratios, not the microseconds.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any
from unittest import mock

import numpy as np

from specaudit.chains.processing import process
from specaudit.contract.chain import assemble, chain_inputs
from specaudit.contract.logits import LogitsParams
from specaudit.verifiers import block, greedy, logits, reference


def _no_bad(rows: np.ndarray) -> np.ndarray:
    return np.zeros(rows.shape[:-1], dtype=bool)


def _logits_unchecked(draft, draft_logits, target_logits, num_draft, params, rng):
    return reference.verify(draft, process(draft_logits, params.draft), process(target_logits, params.target),
                            num_draft, rng)


@chain_inputs  # as the reference: the same prologue
def _greedy_unchecked(draft, q, p, num_draft, rng):
    top = np.argmax(p, axis=2)
    valid = np.arange(draft.shape[1])[None, :] < num_draft[:, None]
    n_acc = np.cumprod(valid & (draft == top[:, : draft.shape[1]]), axis=1).sum(axis=1)
    return assemble(draft, n_acc, top[np.arange(draft.shape[0]), n_acc])


def _one() -> np.random.Generator:
    return np.random.default_rng(1)


def _best(call: Callable[[], Any], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - t0) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    k = 3
    print(f"{'reference':<10} {'B':>5} {'V':>6} {'checked us':>11} {'unchecked us':>13} {'ratio':>6}")
    for batch, vocab in ((64, 32), (512, 32), (64, 4096), (512, 4096)):
        p = rng.dirichlet(np.ones(vocab), size=(batch, k + 1))
        q = rng.dirichlet(np.ones(vocab), size=(batch, k))
        draft = rng.integers(vocab, size=(batch, k))
        nd = rng.integers(0, k + 1, size=batch)
        lq, lp = np.log(q), np.log(p)
        params = LogitsParams()
        cases: dict[str, tuple[Callable[[], Any], str | None, Callable[[], Any] | None]] = {
            "block": (lambda a=(draft, q, p, nd): block.verify(*a, _one()), "specaudit.verifiers.block.bad_rows", None),
            "greedy": (lambda a=(draft, q, p, nd): greedy.verify(*a, _one()), None,
                       lambda a=(draft, q, p, nd): _greedy_unchecked(*a, _one())),
            "logits": (lambda a=(draft, lq, lp, nd, params): logits.verify_reference(*a, _one()), None,
                       lambda a=(draft, lq, lp, nd, params): _logits_unchecked(*a, _one())),
        }
        for name, (checked, patch, unchecked) in cases.items():
            on, off = [], []
            for _ in range(args.repeats):
                on.append(_best(checked, args.calls))
                if patch is not None:
                    with mock.patch(patch, _no_bad):
                        off.append(_best(checked, args.calls))
                elif unchecked is not None:
                    off.append(_best(unchecked, args.calls))
            a, b = min(on), min(off)
            print(f"{name:<10} {batch:>5} {vocab:>6} {a * 1e6:>11.1f} {b * 1e6:>13.1f} {a / b:>6.2f}")


if __name__ == "__main__":
    main()
