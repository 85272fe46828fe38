"""Real engines on a GPU: vLLM's v1 rejection sampler, FlashInfer's chain and SGLang's tree kernels (issue 16).

Installs nothing. Detects CUDA (without it: prints "skipped: no CUDA" and exits 0), then runs
each engine that imports through its specaudit adapter on ``device=cuda`` with a reduced suite,
printing per scenario the verdict, the statistical checks, every failed check's finding, and
sequences/s and verifier calls/s:

- vLLM: ``vllm.v1.sample.rejection_sampler:rejection_sample`` with ``--adapter vllm`` (its sixth
  parameter name decides probabilities or logits; expected: statistics pass, and
  ``adversarial-uniforms`` reports the ``>=`` boundary finding, an accepted draft with p = 0);
- FlashInfer: ``flashinfer.sampling:chain_speculative_sampling`` with ``--adapter flashinfer``;
- SGLang: ``sgl_kernel:tree_speculative_sampling_target_only`` with ``--adapter sglang_tree``
  (``tensors=torch``; expected: the tree probe reports the ``coin <= cumulative p`` boundary).

One command on a GPU machine with any of the engines installed (from specaudit's checkout,
``pip install -e .`` done)::

    python benchmarks/gpu_engines.py --samples 20000

Without vLLM installed, ``--vllm-root DIR`` puts a folder holding a ``vllm`` package first on
``sys.path``: e.g. a released rejection sampler as specaudit lays it out (``specaudit run vllm@0.33.0``
does, under ``<cache>/engines/vllm/0.33.0.site``; ``specaudit engines --fetch vllm@0.33.0`` fetches it).
Exit status: 0 when every engine that ran passed its statistical checks (boundary findings are
reported, not failures), 1 when a statistical check failed or a scenario errored.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from typing import Any

#: (label, target, adapter, adapter options, scenarios): the reduced suite of each engine.
ENGINES: tuple[tuple[str, str, str, dict[str, Any], tuple[str, ...]], ...] = (
    ("vLLM v1", "vllm.v1.sample.rejection_sampler:rejection_sample", "vllm", {"device": "cuda"},
     ("markov-v4", "ragged-v4", "peaked-v8")),
    ("FlashInfer", "flashinfer.sampling:chain_speculative_sampling", "flashinfer", {"device": "cuda"},
     ("markov-v4", "ragged-v4", "peaked-v8")),
    ("SGLang", "sgl_kernel:tree_speculative_sampling_target_only", "sglang_tree",
     {"tensors": "torch", "device": "cuda"}, ("tree-topk-v4",)),
)


def importable(target: str) -> str | None:
    """Return why ``target``'s module cannot be imported, or None (found without importing the module itself)."""
    module = target.split(":")[0]
    try:
        if importlib.util.find_spec(module) is None:
            return "not installed"
    except ModuleNotFoundError:  # its parent package is missing
        return "not installed"
    except (ImportError, ValueError) as exc:  # a parent package that fails to import
        return f"{type(exc).__name__}: {exc}"
    return None


def run_engine(label: str, target: str, adapter: str, options: dict[str, Any], scenarios: tuple[str, ...],
               samples: int, seed: int) -> bool:
    """Run one engine's reduced suite; print its verdicts; return False when a statistic failed or a scenario erred."""
    import specaudit

    t0 = time.perf_counter()
    result = specaudit.run(target, list(scenarios), samples=samples, seed=seed, adapter=adapter,
                           adapter_options=options, timeout=0, diagnose=False, power=False)
    print(f"{label}: {target} (--adapter {adapter}), {time.perf_counter() - t0:.1f} s")
    ok = True
    for s in result.scenarios:
        if s.error is not None:
            print(f"  {s.name:<14} ERROR  {s.error.kind}: {s.error.message.splitlines()[0][:200]}")
            ok = False
            continue
        statistical = [c for c in s.checks if c.pvalue is not None]
        bad_stats = [c.name for c in statistical if c.status.value == "failed"]
        ok &= not bad_stats
        rate = s.samples / s.seconds if s.seconds else float("nan")
        calls = s.calls / s.verifier_seconds if s.verifier_seconds else float("nan")
        print(f"  {s.name:<14} {s.status.value.upper():<8} statistics: "
              f"{'all passed' if not bad_stats else 'FAILED ' + ', '.join(bad_stats)} ({len(statistical)}); "
              f"{s.samples:,} sequences, {rate:,.0f} seq/s, {calls:,.1f} verifier calls/s")
        for c in s.checks:
            if c.status.value == "failed" and c.pvalue is None:
                print(f"    finding {c.name}: {c.summary[:300]}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=20000, help="sequences per scenario")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", action="append", default=None, help="engine label(s) to run: vLLM, FlashInfer, SGLang")
    parser.add_argument("--vllm-root", default=None, help="a folder holding a `vllm` package, put first on sys.path")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("skipped: no CUDA (torch is not installed)")
        return 0
    if not torch.cuda.is_available():  # NVML query: no CUDA context here, the supervised children make theirs
        print("skipped: no CUDA")
        return 0
    if args.vllm_root:
        sys.path.insert(0, os.path.abspath(args.vllm_root))
        os.environ["PYTHONPATH"] = os.pathsep.join([os.path.abspath(args.vllm_root), os.environ.get("PYTHONPATH", "")])
    print(f"CUDA: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    ran, ok = 0, True
    for label, target, adapter, options, scenarios in ENGINES:
        if args.only and not any(o.lower() in label.lower() for o in args.only):
            continue
        why = importable(target)
        if why is not None:
            print(f"{label}: skipped ({target}: {why})")
            continue
        ran += 1
        ok &= run_engine(label, target, adapter, options, scenarios, args.samples, args.seed)
    if not ran:
        print("skipped: CUDA is here but none of vLLM, FlashInfer, sgl-kernel imports")
        return 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
