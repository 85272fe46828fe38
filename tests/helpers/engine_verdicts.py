"""The verdict each audited engine release deserves: one table for the pinned tests and the README.

``tests/adapters/test_hf.py`` and ``tests/engines/test_vllm.py`` assert these per release, each
rule read from the release's own source in the test; ``tests/test_engine_verdicts.py`` keeps
docs/engines.md's table (between ``<!-- engine-verdicts -->`` markers) equal to this one.
"""

#: target -> (exit code of `specaudit run TARGET`, the release's own acceptance line the test reads)
VERDICTS: dict[str, tuple[int, str]] = {
    "hf-transformers@5.0.0": (1, "is_accepted = r_i <= probability_ratio"),
    "hf-transformers@5.24.0": (1, "is_accepted = r_i <= probability_ratio"),
    "hf-transformers@5.25.0": (0, "is_accepted = r_i < probability_ratio"),
    # tests/engines/test_vllm.py
    "vllm@0.8.5": (1, "draft_prob > 0 and target_prob / draft_prob >= uniform_prob"),
    "vllm@0.33.0": (1, "draft_prob > 0 and target_prob / draft_prob >= uniform_prob"),
    "vllm@0.34.0": (0, "accepted = target_logprob > tl.log(u) + draft_logprob"),
    "vllm@0.34.0 --adapter-arg mode=block": (0, "accepted_length = tl.where(u <= h, i + 1, accepted_length)"),
    "vllm@0.34.0 --adapter-arg mode=synthetic": (1, "accepted = u < rate"),
    "vllm@0.34.0 --adapter-arg mode=fly": (1, "and entropy >= fly_entropy_threshold"),
    # tests/engines/test_sglang_flashinfer.py
    "sglang@0.5.20": (0, "if coin * q < p:"),
    "sglang@0.5.23": (0, "if q_is_prob & (coin * q < p):"),
    "sglang@0.5.23 --adapter-arg block_verification=true": (0, "if coin < prefix_prob:"),
    "flashinfer@0.7.4": (4, "module = gen_sampling_module().build_and_load()"),  # on a machine without CUDA
}
