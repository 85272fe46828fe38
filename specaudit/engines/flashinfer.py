"""FlashInfer's chain verifier, release by release: ``flashinfer/sampling.py:chain_speculative_sampling``.

``chain_speculative_sampling(draft_probs, draft_token_ids, target_probs,
maybe_output_accepted_token_num=None, maybe_output_emitted_draft_token_num=None,
deterministic=True, generator=None, seed=None, offset=None)`` in the flashinfer-python 0.7.4 wheel
(read there; ``seed``/``offset``: an int, or int64 tensors with one value per row). It is a CUDA
kernel: it calls ``get_sampling_module()``, which JIT-builds ``flashinfer/data/csrc/sampling.cu``
with nvcc and loads it on the device, and draws its uniforms inside the kernel (curand Philox from
seed and offset). There is no CPU path, so a release is fetched (its wheel must still hold the
file) and then refused on a machine without CUDA, with that reason; on a CUDA machine the installed
flashinfer-python of that version is driven by the ``flashinfer`` adapter, which hands the kernel
per-row ``seed``/``offset`` tensors drawn from the run's rng.
"""

from __future__ import annotations

from specaudit.engines.release import Engine, Layout

ENGINE = Engine(
    name="flashinfer",
    distribution="flashinfer-python",
    summary="FlashInfer chain_speculative_sampling (CUDA kernel; per-row seed/offset)",
    layouts=(
        Layout(
            versions=">=0.7.4",
            files=("flashinfer/sampling.py",),
            target="flashinfer.sampling:chain_speculative_sampling",
            adapter="flashinfer",
            cuda_only="chain_speculative_sampling runs only as a CUDA kernel (get_sampling_module() JIT-builds "
                      "flashinfer/data/csrc/sampling.cu with nvcc; its uniforms are drawn on the device from "
                      "seed/offset), so it needs CUDA",
            note="needs CUDA; accepts u < p / q (its docstring: r < p/q)",
        ),
    ),
    installed_target="flashinfer.sampling:chain_speculative_sampling",
)
