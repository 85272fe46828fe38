"""Runs shared by the report tests (computed once per session; each is seeded)."""

from __future__ import annotations

import functools
import json

import specaudit
from specaudit.results import document as results_document
from specaudit.results.document import roundtrip

SAMPLES = 20_000


@functools.cache
def failing():
    """resample_from_p on two scenarios: joint-law fails on both, with a diagnosis."""
    return specaudit.run("specaudit.verifiers.zoo.chain:resample_from_p", ["markov-v4", "seed-context-free"], samples=SAMPLES, seed=1)


@functools.cache
def passing():
    """The reference verifier on the same scenarios."""
    return specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4", "seed-context-free"], samples=SAMPLES, seed=1)


def document(result):
    """Return the JSON document of a run as a reader of the file sees it (a dict, to edit in tests)."""
    return json.loads(json.dumps(results_document.to_document(result), allow_nan=False))


@functools.cache
def failing_page() -> str:
    """The HTML report of the failing run."""
    from specaudit.reports import html

    return html.render(roundtrip(failing()))
