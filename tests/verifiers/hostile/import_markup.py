"""Hostile at import (tests/test_hostile.py)."""

raise ImportError('[/b] needs list[int]')


def verify(draft, q, p, num_draft, rng):
    raise AssertionError("never reached")
