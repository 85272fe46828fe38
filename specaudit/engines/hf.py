"""HF transformers' assisted-generation verifier, release by release.

``transformers/generation/utils.py:_speculative_sampling(candidate_input_ids, candidate_logits,
candidate_length, new_logits, assistant_ensemble_weight=None)`` in every 5.x release read (5.0.0,
5.24.0, 5.25.0). It reads one module-level name, ``torch`` (the file's ``import torch``), so it is
compiled alone from the release's file (:mod:`specaudit.engines.loading`): nothing else of
transformers is imported, and the installed transformers, if any, is not touched. Driven by the
``hf`` adapter (batch 1, logits, torch's global generator).

Known, from the releases' own lines (not assumed by any test): up to 5.24.0 it accepts with
``r_i <= probability_ratio`` (a draft of target probability 0 is accepted when ``r_i`` is exactly
0); 5.25.0 has ``r_i < probability_ratio``.
"""

from __future__ import annotations

from specaudit.engines.release import Engine, Layout

ENGINE = Engine(
    name="hf-transformers",
    distribution="transformers",
    summary="HF transformers assisted generation: generation/utils.py _speculative_sampling (batch 1, logits)",
    layouts=(
        Layout(
            versions=">=5.0",
            files=("transformers/generation/utils.py",),
            target="transformers/generation/utils.py:_speculative_sampling",
            adapter="hf",
            scenarios=("tag:hf", "corners"),
            note="<=5.24: accepts r <= p/q (p = 0 accepted at r = 0); 5.25: r < p/q",
        ),
    ),
    installed_target="transformers.generation.utils:_speculative_sampling",
)
