"""SGLang's chain verifier, release by release: the Triton kernel ``chain_speculative_sampling_triton``.

``sglang/kernels/ops/speculative/reject_sampling.py:chain_speculative_sampling_triton(predicts,
accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
draft_probs, threshold_single, threshold_acc, deterministic, *, block_verification=False)`` in the
sglang 0.5.22 and 0.5.23 wheels (read there); 0.5.16 to 0.5.21 have the same function without
``block_verification``; 0.5.15 has no such file (its verifiers are sgl-kernel's CUDA ops). The file
imports ``triton`` only; it launches one Triton program per row that reads the caller's uniforms
(``uniform_samples[b, step - 1]`` for draft ``step``, ``uniform_samples_for_final_sampling[b]``
for the token drawn at the stop). Driven by the ``sglang_chain`` adapter; on a machine without a
CUDA device the kernel runs in Triton's interpreter (``TRITON_INTERPRET=1``, set by specaudit
and recorded in the result's ``engine_runtime``).

The package is laid out from the real file plus stand-ins for the packages above it
(:func:`prepare`): empty ``__init__.py`` files written by specaudit, each saying it is not SGLang
code. SGLang's own ``sglang/kernels/ops/speculative/__init__.py`` imports every kernel of the
folder, so it is not taken.

Known, from the releases' own lines (not assumed by any test): chain mode accepts draft ``step``
with ``coin * q < p`` (0.5.16 to 0.5.20), ``q_is_prob & (coin * q < p)`` from 0.5.21 (q in (0, 1]):
strict, so a draft of target probability 0 is never accepted, not even at ``coin = 0``. Block mode
(0.5.22+) is Sun et al.'s Algorithm 2 with ``coin < prefix_prob`` and ``coin < accept_prob``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from specaudit.engines.release import Engine, Layout

#: The verifier's file in the wheel (and in the laid-out package).
KERNEL = "sglang/kernels/ops/speculative/reject_sampling.py"

#: What each stand-in package file says it is.
STAND_IN = ('"""Stand-in written by specaudit, not SGLang code: an empty package so that {kernel} imports\n'
            'without the rest of SGLang (its real package files import every kernel of their folders)."""\n')


def prepare(files: Path, into: Path) -> Path:
    """Lay out ``sglang.kernels.ops.speculative.reject_sampling`` from the release's file under ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    package = into
    for part in Path(KERNEL).parent.parts:
        package = package / part
        package.mkdir(exist_ok=True)
        (package / "__init__.py").write_text(STAND_IN.format(kernel=KERNEL))
    shutil.copyfile(files / KERNEL, into / KERNEL)  # unmodified: Triton reads the kernel's source from this file
    return into


def _chain(versions: str, note: str) -> Layout:
    return Layout(
        versions=versions,
        files=(KERNEL,),
        target="sglang.kernels.ops.speculative.reject_sampling:chain_speculative_sampling_triton",
        adapter="sglang_chain",
        prepare=prepare,
        triton=True,
        note=note,
    )


ENGINE = Engine(
    name="sglang",
    distribution="sglang",
    summary="SGLang speculative decoding: the Triton chain verifier chain_speculative_sampling_triton "
            "(caller-made uniforms)",
    layouts=(
        Layout(
            versions="<0.5.16",
            files=("sglang/srt/speculative/eagle_utils.py",),
            target="sgl_kernel:tree_speculative_sampling_target_only",
            adapter="sglang_tree",
            cuda_only="its verifiers are sgl-kernel's compiled CUDA ops (tree_speculative_sampling_target_only, "
                      "imported by sglang/srt/speculative/eagle_utils.py from the separate sgl-kernel wheel; read "
                      "in 0.5.15); the Triton chain verifier arrived in 0.5.16",
            note="sgl-kernel CUDA ops only: not drivable on CPU",
        ),
        _chain(">=0.5.16,<0.5.22", "chain only; accepts coin * q < p (0.5.21: q in (0, 1] too)"),
        _chain(">=0.5.22", "chain, and block with --adapter-arg block_verification=true; accepts "
                           "q_is_prob & (coin * q < p)"),
    ),
    installed_target="sglang.kernels.ops.speculative.reject_sampling:chain_speculative_sampling_triton",
)
