"""Does `specaudit plan` agree with reality? Predicted power vs detection rate over seeded runs.

For each (scenario, mutant) pair the planner picks N, the smallest sample size at which the
joint-law check reaches ``--power`` against the mutant at level ``--alpha``; then the mutant is
run ``--runs`` times at that N (seeds 0..runs-1) and the fraction of runs whose joint-law p-value
is <= alpha is printed next to the prediction at the same N, with its binomial 95% interval.
Goal (the power planner's accuracy target): within 5 percentage points. One exact-law mutant and one simulated-law mutant
by default, so both ways of getting a mutant's law are checked.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from scipy import stats as sps

from specaudit.analysis import mutant_laws
from specaudit.analysis import plan as planning
from specaudit.checks import statistical as checks
from specaudit.engine.scenario import measure
from specaudit.laws import chain as exact
from specaudit.scenarios.catalogue import resolve
from specaudit.stats import power
from specaudit.verifiers.zoo.chain import MUTANTS

PAIRS = [("seed-context-free", "resample_from_p"), ("markov-v4", "shared_uniform")]


def detection_rate(spec, mutant: str, n: int, alpha: float, runs: int) -> int:
    """Return how many of ``runs`` seeded runs of ``mutant`` the joint-law check rejects at alpha."""
    spec = dataclasses.replace(spec, samples=n)
    hits = 0
    for seed in range(runs):
        measured = measure(MUTANTS[mutant].func, spec, seed)
        hits += checks.joint_law(measured).pvalue <= alpha
    return hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--alpha", type=float, default=1e-3)
    parser.add_argument("--power", type=float, default=0.95, help="power the planner aims at")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--law-samples", type=int, default=mutant_laws.LAW_SAMPLES)
    parser.add_argument("--pair", action="append", default=None, metavar="SCENARIO:MUTANT")
    args = parser.parse_args()
    pairs = [tuple(p.split(":", 1)) for p in args.pair] if args.pair else PAIRS
    print(f"alpha {args.alpha:g} (one test), planned power {args.power}, {args.runs} seeded runs each")
    print(f"{'scenario':<18} {'mutant':<16} {'law':<30} {'N':>6} {'ncx2':>6} {'simul.':>6} {'observed':>8} {'95% CI':>11} "
          f"{'diff(simul.)':>12} {'diff(ncx2)':>10} {'s':>5}")
    worst = 0.0
    for scenario, mutant in pairs:
        spec = resolve([scenario])[0].spec
        t0 = time.perf_counter()
        plan = planning.plan(spec, alpha=args.alpha, power=args.power, mutant=mutant, law_samples=args.law_samples)
        n = plan.samples_for_mutant
        law = mutant_laws.mutant_law(spec, mutant, args.law_samples)
        probs = _probs(spec)
        ncx2 = power.power_against(law.probs, probs, n, args.alpha, law_samples=law.samples).power
        simulated = power.simulated_power(law.probs, probs, n, args.alpha)
        hits = detection_rate(spec, mutant, n, args.alpha, args.runs)
        ci = sps.binomtest(hits, args.runs).proportion_ci(0.95)
        rate = hits / args.runs
        worst = max(worst, abs(100 * (rate - simulated)))
        print(f"{scenario:<18} {mutant:<16} {plan.mutant_law:<30} {n:>6} {ncx2:>6.3f} {simulated:>6.3f} {rate:>8.2f} "
              f"{ci.low:>5.2f}..{ci.high:<4.2f} {100 * (rate - simulated):>+12.1f} {100 * (rate - ncx2):>+10.1f} "
              f"{time.perf_counter() - t0:>5.1f}")
    print(f"largest |observed - plan's prediction (simulated)|: {worst:.1f} percentage points (goal <= 5)")


def _probs(spec):
    return exact.joint_probabilities(spec.chains()[0], spec.length)


if __name__ == "__main__":
    main()
