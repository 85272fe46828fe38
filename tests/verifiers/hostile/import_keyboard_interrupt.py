"""Hostile at import (tests/test_hostile.py)."""

raise KeyboardInterrupt


def verify(draft, q, p, num_draft, rng):
    raise AssertionError("never reached")
