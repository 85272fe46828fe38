"""The verdict each audited engine release deserves: one table for the pinned tests and the README.

``tests/adapters/test_hf.py`` (and the other real-engine tests) assert these per release, each
rule read from the release's own source in the test; ``tests/test_engine_verdicts.py`` keeps
README.md's table (between ``<!-- engine-verdicts -->`` markers) equal to this one.
"""

#: target -> (exit code of `specaudit run TARGET`, the release's own acceptance line the test reads)
VERDICTS: dict[str, tuple[int, str]] = {
    "hf-transformers@5.0.0": (1, "is_accepted = r_i <= probability_ratio"),
    "hf-transformers@5.24.0": (1, "is_accepted = r_i <= probability_ratio"),
    "hf-transformers@5.25.0": (0, "is_accepted = r_i < probability_ratio"),
}
