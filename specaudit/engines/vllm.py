"""vLLM's rejection samplers, release by release.

Two layouts, read from the released wheels (``pip download vllm==X --no-deps --only-binary :all:``):

- **the v1 sampler**, ``vllm/v1/sample/rejection_sampler.py:rejection_sample(draft_token_ids,
  num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, TARGET, bonus_token_ids,
  sampling_metadata)``, driven by the ``vllm`` adapter (releases read: 0.8.5, 0.33.0; TARGET is
  ``target_probs`` up to 0.15 and ``target_logits`` from 0.16, which the adapter reads from the
  signature). Its kernel accepts with ``draft_prob > 0 and target_prob / draft_prob >=
  uniform_prob`` (0.33.0, rejection_sampler.py line 951), so a draft of target probability 0 is
  accepted when the uniform is 0 (``generate_uniform_probs`` draws in [0, 1)). The 0.34.0 wheel no longer has the file.
- **Model Runner V2**, ``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py:rejection_sample(
  target_logits, draft_logits_cache, draft_sampled, cu_num_logits, pos, idx_mapping,
  expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps, ...)``,
  driven by the ``vllm-mrv2`` adapter from 0.34.0. The file first ships in 0.22.0 (the wheels'
  file lists: 0.21.0 lacks it, 0.22.0 has it) and the v1 file was removed in 0.34.0 (0.33.0 has
  both); 0.22 to 0.33 are audited through their v1 sampler (0.33.0's MRv2 takes ``draft_logits``,
  a tensor, where 0.34.0 takes ``draft_logits_cache``; the adapter reads which from the signature). Uniforms are drawn inside the Triton
  kernel (``tl_rand32(seed, pos)`` of ``vllm/v1/worker/gpu/sample/gumbel.py``: ``tl.rand``
  floored at 4.66e-10) and standard mode accepts with ``target_logprob > tl.log(u) +
  draft_logprob`` (strict); block mode with ``u <= h``.

Each layout is a package laid out from the release's files, unmodified, plus **stand-ins** (each
says so in its first line) for the rest of vLLM: ``vllm/__init__.py`` makes every other ``vllm.*``
module an inert placeholder package (its attributes are placeholder classes, used only by type
annotations and by code the verifier does not run), ``vllm/triton_utils`` hands out triton and
triton.language. Triton's interpreter has no ``libdevice``: under ``TRITON_INTERPRET=1`` the
stand-in's ``tldevice.log1p`` is ``tl.log(1 + x)`` (float32; on a GPU libdevice's own).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from specaudit.engines.release import Engine, Layout

_MARK = "# STAND-IN written by specaudit (specaudit/engines/vllm.py): NOT vLLM code.\n"

#: The package: every vllm.* module that is neither a real file nor a stand-in is an inert placeholder.
_PACKAGE = _MARK + '''
import importlib.abc
import importlib.machinery
import sys

__version__ = "standin"


def _placeholder(module, attr):
    if attr.startswith("__"):
        raise AttributeError(attr)
    value = type(attr, (), {"__module__": module.__name__, "__init__": lambda self, *a, **k: None})
    setattr(module, attr, value)
    return value


class _Placeholders(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: a vllm.* module found nowhere else is a placeholder package."""

    def find_spec(self, name, path=None, target=None):
        if not name.startswith("vllm."):
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__path__ = []
        module.__getattr__ = lambda attr: _placeholder(module, attr)


if not any(isinstance(f, _Placeholders) for f in sys.meta_path):
    sys.meta_path.append(_Placeholders())
'''

_TRITON_UTILS = _MARK + '''
import os

import triton
import triton.language as tl

HAS_TRITON = True

if os.environ.get("TRITON_INTERPRET") == "1":  # the interpreter has no libdevice
    import types

    @triton.jit
    def _log1p(x):
        return tl.log(1.0 + x)

    tldevice = types.SimpleNamespace(log1p=_log1p)
else:
    import triton.language.extra.libdevice as tldevice
'''

_LOGGER = _MARK + "import logging\n\n\ndef init_logger(name):\n    return logging.getLogger(name)\n"

_PLATFORMS = _MARK + '''
class _CpuPlatform:
    device_type = "cpu"

    def __getattr__(self, name):
        if name.startswith("is_"):
            return lambda *args, **kwargs: False
        raise AttributeError(name)


current_platform = _CpuPlatform()
'''

#: The v1 sampler's stand-ins (the real files of V1_FILES import these names).
V1_STANDINS = {
    "vllm/__init__.py": _PACKAGE,
    "vllm/logger.py": _LOGGER,
    "vllm/triton_utils/__init__.py": _TRITON_UTILS,
    "vllm/platforms/__init__.py": _PLATFORMS,
}
#: Model Runner V2's stand-ins.
MRV2_STANDINS = {
    "vllm/__init__.py": _PACKAGE,
    "vllm/logger.py": _LOGGER,
    "vllm/triton_utils/__init__.py": _TRITON_UTILS,
}


def _lay_out(files: Path, into: Path, standins: dict[str, str]) -> Path:
    """Copy the release's files under ``into``, write the stand-ins, make every folder a package."""
    if into.exists():
        shutil.rmtree(into)
    for path in files.rglob("*.py"):
        dest = into / path.relative_to(files)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    for member, source in standins.items():
        dest = into / member
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(source, encoding="utf-8")
    folders = {parent for p in into.rglob("*.py") for parent in p.relative_to(into).parents}
    for folder in folders - {Path(".")}:
        if not (into / folder / "__init__.py").exists():
            (into / folder / "__init__.py").write_text(_MARK, encoding="utf-8")
    return into


def lay_out_v1(files: Path, into: Path) -> Path:
    return _lay_out(files, into, V1_STANDINS)


def lay_out_mrv2(files: Path, into: Path) -> Path:
    return _lay_out(files, into, MRV2_STANDINS)


ENGINE = Engine(
    name="vllm",
    distribution="vllm",
    summary="vLLM speculative decoding: the v1 rejection sampler, then Model Runner V2's (Triton kernels)",
    layouts=(
        Layout(
            versions=">=0.8.5,<0.34",
            files=("vllm/v1/sample/rejection_sampler.py",),
            optional=(
                "vllm/v1/sample/metadata.py",
                "vllm/envs.py",
                # the 0.3x launcher triton_kernel_dispatcher_with_warmup (reads vllm.envs)
                "vllm/model_executor/warmup/jit_warmup.py",
                "vllm/model_executor/warmup/jit_warmup_triton_helper.py",
            ),
            target="vllm.v1.sample.rejection_sampler:rejection_sample",
            adapter="vllm",
            prepare=lay_out_v1,
            triton=True,
            interpreted_samples=1000,  # ~45 ms a row in the interpreter (0.33.0's recovered-token kernel)
            note="accepts uniform <= p/q: a p = 0 draft accepted at uniform 0 (read in 0.8.5 and 0.33.0)",
        ),
        Layout(
            versions=">=0.34",
            files=(
                "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py",
                "vllm/v1/worker/gpu/sample/gumbel.py",
                "vllm/v1/worker/gpu/sample/watermark.py",
                "vllm/v1/worker/gpu/spec_decode/draft_logits.py",
                "vllm/v1/worker/gpu/spec_decode/fly.py",
                "vllm/v1/watermarking/prfs/philox.py",
                "vllm/v1/watermarking/prfs/base.py",
            ),
            target="vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils:rejection_sample",
            adapter="vllm-mrv2",
            prepare=lay_out_mrv2,
            triton=True,
            interpreted_samples=300,  # markov-v4: 93 s with its probes on the 2-core VM; detectable TV 0.24
            note="Model Runner V2: uniforms from tl.rand in the kernel; standard accepts log p > log u + log q",
        ),
    ),
    installed_target="vllm.v1.sample.rejection_sampler:rejection_sample",
)
