"""Hostile at import (tests/test_hostile.py)."""

import ctypes

ctypes.string_at(0)


def verify(draft, q, p, num_draft, rng):
    raise AssertionError("never reached")
