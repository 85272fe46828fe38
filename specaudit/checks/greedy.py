"""Greedy mode (``mode: greedy``): the temperature-0 serving contract, checked exactly.

At temperature 0 a lossless verifier accepts a draft iff it equals the argmax of the target,
emits that argmax at the first mismatch and as the bonus, so every generated sequence equals
plain greedy decoding of the target (theory.md, "Greedy"). Ties go to the first index, as
``numpy.argmax`` and ``torch.argmax`` document; exact ties are common with bf16 logits.

In greedy mode the verifier is handed the target's probabilities as they are (ties included)
and must do the argmax itself; the check is exact equality of every sequence (no p-value). The
efficiency checks use the one-hot (greedy) target as their exact reference. The reference
greedy verifier is :func:`specaudit.verifiers.greedy.verify` (alias ``reference-greedy``).
"""

from __future__ import annotations

import numpy as np

from specaudit.checks.statistical import Measured
from specaudit.results import Category, CheckResult, Status
from specaudit.simulate.tallies import GreedyMatch


def greedy_equality(m: Measured) -> CheckResult | None:
    """Check that every sequence equals greedy decoding of the target (greedy mode only)."""
    match: GreedyMatch | None = getattr(m, "greedy", None)
    if match is None:
        return None
    expected = [int(x) for x in match.expected]
    data = {
        "expected": expected,
        "sequences": match.sequences,
        "mismatched": match.mismatched,
        "first_diff_position": match.first_diff.tolist(),
        "examples": match.examples,
    }
    if match.mismatched == 0:
        summary = f"all {match.sequences:,} sequences equal greedy decoding {expected}"
        return CheckResult("greedy-equality", Category.DISTRIBUTION, Status.PASSED, summary, data=data)
    example = match.examples[0]
    t = next(i for i, (a, b) in enumerate(zip(example, expected)) if a != b)
    probs = match.target.probs(np.array([match.states[t]], dtype=np.int64))[0]
    got, want = example[t], expected[t]
    summary = (
        f"{match.mismatched:,} of {match.sequences:,} sequences differ from greedy decoding {expected}; "
        f"e.g. {example}: position {t} emitted {got} (p = {probs[got]:.6g}) instead of argmax {want} "
        f"(p = {probs[want]:.6g})"
    )
    if probs[got] == probs[want]:
        summary += f"; an exact tie: argmax ties go to the first index ({want}), not {got}"
        data["tie"] = True
    return CheckResult("greedy-equality", Category.DISTRIBUTION, Status.FAILED, summary, data=data)

