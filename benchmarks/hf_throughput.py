"""HF transformers throughput through ``--adapter hf``: sequences/s, HF calls/s, overhead ratios.

Needs the ``hf`` extra. Prints, from the same runs side by side:

- sequences/s and HF calls/s (one call per row: ``_speculative_sampling`` is batch-1);
- harness overhead = total run time / time inside the canonical verifier (the adapter);
- adapter overhead = time inside the adapter / time inside ``_speculative_sampling`` itself
  (tensor building, per-row slicing and result copying, seeding).

Wall and CPU (process) times are both shown: on a shared machine wall time includes waiting.

    python benchmarks/hf_throughput.py --samples 20000
"""

from __future__ import annotations

import argparse
import time

import specaudit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", action="append", default=None)
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from transformers.generation.utils import _speculative_sampling

    inside = {"wall": 0.0, "calls": 0}

    def timed(*a, **kw):
        t0 = time.perf_counter()
        try:
            return _speculative_sampling(*a, **kw)
        finally:
            inside["wall"] += time.perf_counter() - t0
            inside["calls"] += 1

    print(f"{'scenario':<16} {'seq':>7} {'HF calls':>9} {'wall s':>7} {'cpu s':>6} {'seq/s':>7} {'calls/s':>8} "
          f"{'harness':>8} {'adapter':>8}")
    for name in args.scenario or ["hf-markov-v4", "hf-ragged-v4"]:
        for _ in range(args.repeats):
            inside.update(wall=0.0, calls=0)
            w0, c0 = time.perf_counter(), time.process_time()
            result = specaudit.run(timed, [name], samples=args.samples, seed=0, adapter="hf",
                                   adapter_options={"dtype": args.dtype}, diagnose=False,
                                   suspect_level=1e-3,  # no suspect re-run: one measurement per row
                                   supervised=False)  # in this process: `timed` counts the HF calls here
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            s = result.scenarios[0]
            print(f"{name:<16} {s.samples:>7} {inside['calls']:>9} {wall:7.2f} {cpu:6.2f} {s.samples / cpu:7.0f} "
                  f"{inside['calls'] / cpu:8.0f} {wall / s.verifier_seconds:8.3f} {s.verifier_seconds / inside['wall']:8.3f}")
    print("seq/s and calls/s per CPU second; harness = total / inside adapter; adapter = inside adapter / inside HF")


if __name__ == "__main__":
    main()
