"""Greedy mode (``mode: greedy``): the temperature-0 serving contract, checked exactly.

At temperature 0 a lossless verifier accepts a draft iff it equals the argmax of the target,
emits that argmax at the first mismatch and as the bonus, so every generated sequence equals
plain greedy decoding of the target (theory.md, "Greedy"). Ties go to the first index, as
``numpy.argmax`` and ``torch.argmax`` document; exact ties are common with bf16 logits.

In greedy mode the verifier is handed the target's probabilities as they are (ties included)
and must do the argmax itself; the check is exact equality of every sequence (no p-value). The
efficiency checks use the one-hot (greedy) target as their exact reference.
"""

from __future__ import annotations

import numpy as np

from specaudit.contract.chain import assemble, chain_inputs
from specaudit.results import Category, CheckResult, Status

#: How many mismatching sequences a failed check keeps for the report.
EXAMPLES = 5


def greedy_path(target, length: int) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001 - any chain
    """Return (tokens [L], states [L]) of greedy decoding from the start state; ties to the first index."""
    tokens = np.empty(length, dtype=np.int64)
    states = np.empty(length, dtype=np.int64)
    state = np.array([target.start], dtype=np.int64)
    for t in range(length):
        states[t] = state[0]
        tokens[t] = int(np.argmax(target.probs(state)[0]))  # argmax: first maximal index
        state = target.advance(state, tokens[t : t + 1])
    return tokens, states


class GreedyMatch:
    """Sink comparing every finished sequence with greedy decoding of the target."""

    def __init__(self, target, length: int):  # noqa: ANN001
        self.target = target
        self.expected, self.states = greedy_path(target, length)
        self.sequences = 0
        self.mismatched = 0
        self.first_diff = np.zeros(length, dtype=np.int64)  # histogram of the first differing position
        self.examples: list[list[int]] = []

    def observe(self, sequences: np.ndarray) -> None:
        """Count sequences that differ from the greedy one; keep a few of them."""
        diff = sequences != self.expected[None, :]
        bad = diff.any(axis=1)
        self.sequences += sequences.shape[0]
        if bad.any():
            self.mismatched += int(bad.sum())
            self.first_diff += np.bincount(np.argmax(diff[bad], axis=1), minlength=self.expected.size)
            for row in sequences[bad][: EXAMPLES - len(self.examples)]:
                self.examples.append([int(x) for x in row])


def greedy_equality(m) -> CheckResult | None:  # noqa: ANN001 - checks.Measured
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


@chain_inputs
def verify(
    draft: np.ndarray,
    q: np.ndarray,
    p: np.ndarray,
    num_draft: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Verify at temperature 0: accept while the draft is the argmax of p (ties to the first index).

    The reference greedy verifier (``specaudit.checks.greedy:verify``): the token at the first mismatch,
    or the bonus at ``p[b, num_draft[b]]``, is that argmax. ``q`` and ``rng`` are not used; padding
    past ``num_draft`` is never read.
    """
    batch, k = draft.shape
    top = np.argmax(p, axis=2)  # [B, K+1]; padding columns are computed but never used
    valid = np.arange(k)[None, :] < num_draft[:, None]
    n_acc = np.cumprod(valid & (draft == top[:, :k]), axis=1).sum(axis=1)
    return assemble(draft, n_acc, top[np.arange(batch), n_acc])
