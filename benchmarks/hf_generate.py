"""HF assisted generation end to end (``specaudit run hf-generate``): cost, null rate and mutant power.

Three figures, on the installed transformers (the release is printed):

1. cost: N continuations of length 3 (the ``sampled`` configuration) drawn by
   ``target.generate(..., assistant_model=assistant)`` on ``--jobs`` processes; wall time and
   milliseconds per sequence (goal: N = 20,000 in under 2 minutes on a 2-core machine);
2. null rate: the joint-law check of the released loop over ``--null-seeds`` seeds at a small N:
   rejections / seeds at each level, beside the level itself (a correct loop is rejected at rate
   <= alpha);
3. power: each loop mutant of :mod:`specaudit.loops.hf_mutants` over ``--power-seeds`` seeds:
   rejections / seeds at alpha = 1e-3, and its greedy-equality verdict.

Every draw of a seed is one block of :func:`specaudit.loops.hf.draw_block` (seeded as the run
seeds its blocks); seeds are spread over one pool of spawned processes. A shared machine is noisy:
read the rates and the per-sequence cost, not the last digit of the wall time.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time

import numpy as np

from specaudit.loops import hf, hf_mutants

LEVELS = (0.05, 0.01, 1e-3)


def _pvalue(args: tuple[hf.Setup, int, int, str | None]) -> float:
    """Return the joint-law p-value of one seed's block of draws (0 when a draw is malformed)."""
    setup, n, seed, mutant = args
    draws = hf.draw_block(setup, n, hf.block_seed(seed, 0), mutant)
    check = hf.joint_law(draws, hf.exact_law(setup), setup, None)
    return 0.0 if draws.malformed else float(check.pvalue if check.pvalue is not None else 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000, help="continuations of the cost figure")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--null-seeds", type=int, default=200)
    parser.add_argument("--null-samples", type=int, default=150)
    parser.add_argument("--power-seeds", type=int, default=20)
    parser.add_argument("--power-samples", type=int, default=500)
    args = parser.parse_args()
    setup = hf.CONFIGS["sampled"].setup
    print(f"transformers {hf.transformers_version()}; configuration 'sampled': {setup.describe()}; "
          f"{setup.cells} cells; jobs {args.jobs}")

    start = time.perf_counter()
    draws = hf.sample_counts(setup, args.samples, seed=1, jobs=args.jobs)
    wall = time.perf_counter() - start
    verdict = hf.joint_law(draws, hf.exact_law(setup), setup, 1e-3)
    print(f"cost: N = {args.samples} continuations of length {setup.length} in {wall:.1f} s wall "
          f"({wall / args.samples * 1e3:.2f} ms per sequence, {args.jobs} jobs; goal N = 20,000 under 120 s); "
          f"joint-law p = {verdict.pvalue:.3g} ({verdict.status.value})")

    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        if args.null_seeds:  # --null-seeds 0: the power figures alone
            start = time.perf_counter()
            null = np.array(pool.map(_pvalue, [(setup, args.null_samples, 10_000 + s, None)
                                               for s in range(args.null_seeds)]))
            rates = ", ".join(f"alpha {a:g}: {int((null <= a).sum())}/{null.size} = {(null <= a).mean():.3f}"
                              for a in LEVELS)
            print(f"null rate (released loop, joint-law, N = {args.null_samples} per seed): {rates} "
                  f"[{time.perf_counter() - start:.0f} s]")
        for mutant in hf_mutants.MUTANTS.names():
            for name in hf_mutants.CAUGHT_ON[mutant]:
                caught = hf.CONFIGS[name].setup
                start = time.perf_counter()
                p = np.array(pool.map(_pvalue, [(caught, args.power_samples, 20_000 + s, mutant)
                                                for s in range(args.power_seeds)]))
                greedy = hf.greedy_equality(caught, mutant)
                print(f"power {mutant} on {name} (joint-law, N = {args.power_samples}): {int((p <= 1e-3).sum())}/{p.size} "
                      f"at alpha 1e-3, median p = {np.median(p):.2g}; greedy-equality {greedy.status.value} "
                      f"[{time.perf_counter() - start:.0f} s]")


if __name__ == "__main__":
    main()
