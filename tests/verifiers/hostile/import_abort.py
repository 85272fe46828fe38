"""Hostile at import (tests/test_hostile.py)."""

import os

os.abort()


def verify(draft, q, p, num_draft, rng):
    raise AssertionError("never reached")
