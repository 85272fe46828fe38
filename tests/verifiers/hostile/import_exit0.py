"""Hostile at import (tests/test_hostile.py)."""

import sys

sys.exit(0)


def verify(draft, q, p, num_draft, rng):
    raise AssertionError("never reached")
