"""The TV certificate (specaudit.stats.certificate): candidate bounds compared, coverage, and `--certify-tv` runs.

1. Candidates, side by side on the same multinomial draws from markov-v4's exact joint law (P = Q,
   64 cells, delta = 1e-3): the mean upper bound of
   - the fixed-set Hoeffding bound that specaudit uses, TV(P_hat, Q) + sqrt(ln(1/delta) / 2n);
   - Weissman et al. (2003), TV(P_hat, Q) + sqrt(ln((2^k - 2)/delta) / 2n) (L1 deviation over all sets);
   - McDiarmid around E||P_hat - P||_1 <= sqrt((k - 1)/n): TV(P_hat, Q) + sqrt((k - 1)/n)/2 + sqrt(ln(1/delta)/2n).
   All three are valid for every P; the smallest wins.
2. Coverage of the bound used, from direct draws of laws with known TV (the laws of
   tests/stats/test_certificate.py): the fraction of draws whose bound is below the true TV, with
   its one-sided 99% upper confidence limit (Clopper-Pearson), against delta.
3. `specaudit run specaudit.verifiers.reference:verify -s markov-v4 --certify-tv 0.005` through the engine
   (in-process, no power or diagnosis) on several seeds: sequences at which it certified, the bound,
   and the wall time; and `resample_from_p` (a zoo mutant, exact TV 0.21) under the same command.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

import specaudit
from specaudit.laws.chain import joint_probabilities
from specaudit.scenarios.catalogue import resolve
from specaudit.stats.certificate import hoeffding_slack


def markov_v4() -> np.ndarray:
    """Return markov-v4's exact joint law of 3-token sequences."""
    spec = resolve(["markov-v4"])[0].spec
    target, _ = spec.chains()
    return joint_probabilities(target, spec.length)


def plug_in(counts: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Return TV(P_hat, Q) of every row of counts."""
    n = counts.sum(axis=1, keepdims=True)
    return 0.5 * np.abs(counts / n - q).sum(axis=1)


def candidates(q: np.ndarray, draws: int, delta: float, rng: np.random.Generator) -> None:
    """Print the mean bound of each candidate at a few n (P = Q)."""
    k = q.size
    print(f"1. candidates: markov-v4 (k = {k} cells), P = Q, delta = {delta:g}, mean over {draws:,} draws")
    print(f"{'n':>10}  {'E TV(P_hat,Q)':>13}  {'fixed-set Hoeffding':>19}  {'Weissman L1':>11}  {'McDiarmid+sqrt(k)':>17}")
    for n in (240_000, 960_000, 3_840_000):
        tv = plug_in(rng.multinomial(n, q, size=draws), q).mean()
        hoeffding = tv + hoeffding_slack(n, delta)
        weissman = tv + np.sqrt((np.log(2.0**k - 2) + np.log(1 / delta)) / (2 * n))
        mcdiarmid = tv + 0.5 * np.sqrt((k - 1) / n) + hoeffding_slack(n, delta)
        print(f"{n:>10,}  {tv:>13.4f}  {hoeffding:>19.4f}  {weissman:>11.4f}  {mcdiarmid:>17.4f}")


def coverage(q: np.ndarray, reps: int, rng: np.random.Generator) -> None:
    """Print the bound's miss rate on laws of known TV, with its 99% upper limit, at several delta."""
    uniform = np.full(64, 1 / 64)
    split = uniform * np.where(np.arange(64) < 32, 1.1, 0.9)
    point = np.zeros(64)
    point[int(np.argmin(q))] = 1.0
    laws = {
        "P = Q (markov-v4)": (q, q, 0.0),
        "balanced, TV 0.05": (split, uniform, 0.05),
        "mixture, TV 0.02": (0.98 * q + 0.02 * point, q, 0.02 * (1 - q.min())),
        "impossible outcomes, TV 0.01": (np.append(q * 0.99, 0.01), np.append(q, 0.0), 0.01),
    }
    n = 20_000
    print(f"\n2. coverage: n = {n:,} sequences, {reps:,} draws per law; miss = bound < true TV")
    print(f"{'law':<30} {'delta':>7} {'miss rate':>10} {'99% upper':>10}  ok")
    worst = 0.0
    for name, (p, qq, tv) in laws.items():
        counts = rng.multinomial(n, p, size=reps)
        base = plug_in(counts, qq)
        for delta in (0.2, 0.05, 1e-3):
            missed = int(np.sum(np.minimum(1.0, base + hoeffding_slack(n, delta)) < tv))
            upper = stats.beta.ppf(0.99, missed + 1, reps - missed)  # one-sided Clopper-Pearson
            worst = max(worst, missed / reps / delta)
            print(f"{name:<30} {delta:>7g} {missed / reps:>10.5f} {upper:>10.5f}  {'yes' if missed / reps <= delta else 'NO'}")
    print(f"max miss rate / delta: {worst:.3f}")


def certify_runs(seeds: int) -> None:
    """Run --certify-tv 0.005 on markov-v4 through the engine for a few seeds; print what each took."""
    print("\n3. specaudit run specaudit.verifiers.reference:verify -s markov-v4 --certify-tv 0.005 (in-process, no power/diagnosis)")
    print(f"{'seed':>4} {'exit':>4} {'sequences':>10} {'bound':>7} {'plug-in':>8} {'seconds':>8}")
    for seed in range(seeds):
        t0 = time.perf_counter()
        result = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4"], seed=seed, certify_tv=0.005,
                               power=False, diagnose=False, supervised=False)
        wall = time.perf_counter() - t0
        b = result.scenarios[0].tv_bound
        assert b is not None
        print(f"{seed:>4} {int(result.exit_code()):>4} {b.sequences:>10,} {b.bound:>7.4f} {b.tv:>8.4f} {wall:>8.2f}")
    t0 = time.perf_counter()
    bad = specaudit.run("specaudit.verifiers.zoo.chain:resample_from_p", ["markov-v4"], seed=0, certify_tv=0.005,
                        power=False, diagnose=False, supervised=False)
    b = bad.scenarios[0].tv_bound
    assert b is not None
    print(f"resample_from_p: exit {int(bad.exit_code())} after {b.sequences:,} sequences, TV <= {b.bound:.4f} "
          f"(plug-in {b.tv:.4f}), {time.perf_counter() - t0:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=2_000, help="multinomial draws per n in the candidate table")
    parser.add_argument("--reps", type=int, default=100_000, help="draws per law in the coverage table")
    parser.add_argument("--seeds", type=int, default=5, help="--certify-tv runs through the engine")
    args = parser.parse_args()
    rng = np.random.default_rng(20261201)
    q = markov_v4()
    candidates(q, args.draws, 1e-3, rng)
    coverage(q, args.reps, rng)
    certify_runs(args.seeds)


if __name__ == "__main__":
    main()
