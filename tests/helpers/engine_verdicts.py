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
    # tests/engines/test_sglang_flashinfer.py
    "sglang@0.5.20": (0, "if coin * q < p:"),
    "sglang@0.5.23": (0, "if q_is_prob & (coin * q < p):"),
    "sglang@0.5.23 --adapter-arg block_verification=true": (0, "if coin < prefix_prob:"),
    "flashinfer@0.7.4": (4, "module = gen_sampling_module().build_and_load()"),  # on a machine without CUDA
}
