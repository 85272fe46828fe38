"""Does ``specaudit selftest`` catch a miscalibrated tester? Power of its law stage, and its false-alarm rate.

The self-test's law stage (`specaudit.engine.null_draws`, judged by
`specaudit.engine.selftest.judge_tails`) draws every gating check's counts from the exact null
and reads them into p-values. Here the reading is swapped for deliberately miscalibrated ones
(its negative controls), on the same draws (`null_draws.stacked`):

    exact           the library's own reading (must pass: the false-alarm rate, stated <= 0.01)
    x2 below 0.01   2x tail inflation: P(p <= t) = 2t for t <= 0.01
    x2 below 0.001  2x tail inflation where Holm reads (t <= 1e-3)
    df - 1          a chi-square over k groups read with k - 2 df
    x0.5 below 0.1  2x conservative at every level a run reads (t <= 0.1, the suspect level)
    x0.5 below 0.01 2x conservative at t <= 0.01

Each repetition draws afresh (seed ``--seed + i``) and records, per reader, whether the rule
flags (any tail test) and which checks it flagged. Printed: per reader the rate with its
Clopper-Pearson 99% interval, and per check the rate at which that check alone is flagged.
The scenarios default to markov-v4 plus the law stage's per-prefix/PIT coverage scenario: the
smallest suite on which every check is drawn (the default suite adds rows, hence power, and
only log-many Bonferroni tests). Draws per row: the self-test's default.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time

import numpy as np
from scipy import stats as sps

from specaudit.engine import null_draws as nd
from specaudit.engine import selftest as st
from specaudit.engine.tasks import resolve_scenarios

READERS: dict[str, nd.Reader] = {
    "exact": nd.exact_reader,
    "x2 below 0.01": nd.distorted(2.0, 0.01),
    "x2 below 0.001": nd.distorted(2.0, 0.001),
    "df - 1": nd.df_minus_one(),
    "x0.5 below 0.1": nd.distorted(0.5, 0.1),
    "x0.5 below 0.01": nd.distorted(0.5, 0.01),
}


def interval(hits: int, reps: int) -> tuple[float, float]:
    """Return the Clopper-Pearson 99% interval of a rate."""
    lo = sps.beta.ppf(0.005, hits, reps - hits + 1) if hits else 0.0
    hi = sps.beta.ppf(0.995, hits + 1, reps - hits) if hits < reps else 1.0
    return float(lo), float(hi)


def repetition(args: tuple[list, list[str], int, int]) -> tuple[list[bool], list[set[str]]]:
    """Draw once (seed ``seed``) and judge every reader: (flagged?, flagged checks) per reader."""
    specs, sequential, draws, seed = args
    rows = nd.null_rows(specs, draws, reader=nd.stacked(list(READERS.values())), rng=np.random.default_rng(seed),
                        sequential=sequential)
    out_flag, out_checks = [], []
    for mine in nd.unstack(rows, len(READERS)):
        tails = st.judge_tails(mine)
        out_flag.append(any(t.flagged for t in tails))
        out_checks.append({t.check for t in tails if t.flagged})
    return out_flag, out_checks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--draws", type=int, default=st.DEFAULT_DRAWS)
    ap.add_argument("-s", "--scenario", action="append", help="scenarios (default: markov-v4)")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (each builds the laws once)")
    args = ap.parse_args()
    specs = st.law_scenarios([item.spec for item in resolve_scenarios(args.scenario or ["markov-v4"])])
    sequential = st.sequential_scenario(specs)
    names = list(READERS)
    flagged = {name: 0 for name in names}
    by_check: dict[str, dict[str, int]] = {name: {} for name in names}
    print(f"scenarios {', '.join(s.name for s in specs)} (early stop and re-run on {', '.join(sequential)}); "
          f"{args.draws:,} draws per row; {args.reps} repetitions; {args.jobs} worker(s)", flush=True)
    t0 = time.perf_counter()
    work = [(specs, sequential, args.draws, args.seed + i) for i in range(args.reps)]
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        for i, (flags, checks_) in enumerate(pool.imap_unordered(repetition, work)):
            for name, flag, mine in zip(names, flags, checks_):
                flagged[name] += flag
                for check in mine:
                    by_check[name][check] = by_check[name].get(check, 0) + 1
            if (i + 1) % 20 == 0:
                print(f"  {i + 1} repetitions, {time.perf_counter() - t0:.0f} s", flush=True)
    took = time.perf_counter() - t0
    print(f"{took:.0f} s wall for {args.reps} repetitions of all {len(names)} readers ({args.jobs} worker(s); "
          "each builds the null laws once, then draws)")
    checks = sorted({c for d in by_check.values() for c in d})
    print(f"{'reader':16s} {'flagged':>8s} {'rate':>6s}  99% interval")
    for name in names:
        lo, hi = interval(flagged[name], args.reps)
        print(f"{name:16s} {flagged[name]:8d} {flagged[name] / args.reps:6.3f}  [{lo:.3f}, {hi:.3f}]")
    print("per check (rate at which the rule flags that check):")
    print(f"{'reader':16s} " + " ".join(f"{c[:14]:>14s}" for c in checks))
    for name in names:
        print(f"{name:16s} " + " ".join(f"{by_check[name].get(c, 0) / args.reps:14.3f}" for c in checks))


if __name__ == "__main__":
    main()
