"""A module that fails while importing (the error is in the user's code)."""

import numpy as np

BROKEN = np.array([1, 2]) @ np.array([1, 2, 3])  # shapes do not align: raises at import


def verify(draft, q, p, num_draft, rng):
    raise AssertionError("unreachable")
