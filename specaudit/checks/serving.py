"""Greedy rows of a batch mix: every sequence of a temperature-0 request class must be greedy decoding.

In a serving batch, greedy requests (temperature 0) sit beside sampled ones; a lossless verifier
gives each greedy request exactly greedy decoding of its processed target (argmax, ties to the
first index), whatever the other rows do (theory.md, "Greedy"). The joint-law check of a batch
mix already puts probability 0 on every other sequence of a greedy class; this check says it
exactly and by class, with the first differing position and examples, as
:func:`specaudit.checks.greedy.greedy_equality` does for a greedy scenario. A class is checked
this way when its processed target is one-hot in every state (temperature 0, or top-k 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specaudit.chains.serving import MixedChain
from specaudit.checks.statistical import Measured
from specaudit.results import Category, CheckResult, Status
from specaudit.simulate.tallies import EXAMPLES, GreedyMatch

__all__ = ["GreedyRows", "greedy_rows", "greedy_rows_sink"]


class GreedyRows:
    """Sink of a batch mix's (class, sequence) rows: each deterministic class's sequences against greedy decoding."""

    def __init__(self, target: MixedChain, length: int):
        self.names = target.names
        self.matches = {
            c: GreedyMatch(chain, length)
            for c, chain in enumerate(target.classes)
            if bool(np.all(chain.dist.max(axis=1) == 1.0))
        }

    def observe(self, sequences: np.ndarray) -> None:
        """Take finished rows ``[class, x_0, ..., x_{L-1}]``."""
        for c, match in self.matches.items():
            rows = sequences[sequences[:, 0] == c, 1:]
            if rows.shape[0]:
                match.observe(rows)

    def merge(self, other: GreedyRows) -> None:
        """Add another tally's matches (disjoint blocks; the first examples kept)."""
        for c, match in self.matches.items():
            o = other.matches[c]
            match.sequences += o.sequences
            match.mismatched += o.mismatched
            match.first_diff += o.first_diff
            match.examples = (match.examples + o.examples)[:EXAMPLES]

    def to_dict(self) -> dict[str, Any]:
        """Return the matches as JSON-able data."""
        return {str(c): {"sequences": m.sequences, "mismatched": m.mismatched, "first_diff": m.first_diff.tolist(),
                         "examples": m.examples} for c, m in self.matches.items()}

    def load(self, data: dict[str, Any]) -> None:
        """Add matches written by :meth:`to_dict`."""
        for c, match in self.matches.items():
            d = data[str(c)]
            match.sequences += int(d["sequences"])
            match.mismatched += int(d["mismatched"])
            match.first_diff += np.asarray(d["first_diff"], dtype=np.int64)
            match.examples = (match.examples + [list(map(int, e)) for e in d["examples"]])[:EXAMPLES]


def greedy_rows_sink(target: Any, length: int) -> GreedyRows | None:
    """Return the sink of a batch mix with a deterministic class (None otherwise)."""
    if not isinstance(target, MixedChain):
        return None
    sink = GreedyRows(target, length)
    return sink if sink.matches else None


def greedy_rows(m: Measured) -> CheckResult | None:
    """Check that every sequence of a deterministic request class equals greedy decoding of its target."""
    sink = m.extra.get("greedy-rows")
    if not isinstance(sink, GreedyRows):
        return None
    per = []
    bad = []
    for c, match in sink.matches.items():
        expected = [int(x) for x in match.expected]
        per.append({"class": sink.names[c], "expected": expected, "sequences": match.sequences,
                    "mismatched": match.mismatched, "first_diff_position": match.first_diff.tolist(),
                    "examples": match.examples})
        if match.mismatched:
            bad.append((sink.names[c], match, expected))
    data = {"classes": per}
    if not bad:
        says = "; ".join(f"class {d['class']}: all {d['sequences']:,} sequences equal greedy decoding {d['expected']}"
                         for d in per)
        return CheckResult("greedy-rows", Category.DISTRIBUTION, Status.PASSED, says, data=data)
    name, match, expected = bad[0]
    example = match.examples[0]
    t = next(i for i, (a, b) in enumerate(zip(example, expected)) if a != b)
    says = (f"class {name}: {match.mismatched:,} of {match.sequences:,} sequences differ from greedy decoding "
            f"{expected}; e.g. {example}: position {t} emitted {example[t]} instead of the argmax {expected[t]}")
    if len(bad) > 1:
        says += f"; also classes {', '.join(b[0] for b in bad[1:])}"
    return CheckResult("greedy-rows", Category.DISTRIBUTION, Status.FAILED, says, data=data)
