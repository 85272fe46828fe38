"""Runs shared by the report tests (computed once per session; each is seeded)."""

from __future__ import annotations

import functools

import specaudit
from specaudit.reports import json as json_report

SAMPLES = 20_000


@functools.lru_cache(maxsize=None)
def failing():
    """resample_from_p on two scenarios: joint-law fails on both, with a diagnosis."""
    return specaudit.run("specaudit.verifiers.zoo.chain:resample_from_p", ["markov-v4", "seed-context-free"], samples=SAMPLES, seed=1)


@functools.lru_cache(maxsize=None)
def passing():
    """The reference verifier on the same scenarios."""
    return specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4", "seed-context-free"], samples=SAMPLES, seed=1)


def document(result, **extra):
    """Return the JSON document of a run as a reader of the file sees it."""
    return json_report.document(result, extra=extra or None)


@functools.lru_cache(maxsize=None)
def failing_page() -> str:
    """The HTML report of the failing run."""
    from specaudit.reports import html

    return html.render(document(failing()))
