"""Is alpha true? Null rejection rates of every gating check, from the exact null, far in the tail.

For every shipped scenario and every gating statistical check, the check's p-value is computed
(by the library's own functions) on draws from the *exact* null law, and its rejection rate at
a level is printed as a ratio to that level with a 99% interval. The levels are the ones a run
really reads: ``alpha / m`` (Holm's first step, m = the run's family size) and ``10 alpha / m``.

Rates that small are estimated by importance sampling (`specaudit.analysis.null_rates`): the counts
are drawn from a defensive mixture of the null and of proposals that reach the tail
(Dirichlet-multinomial dispersion for the X^2 / G^2 statistics, exponential tilts for the
tokens-per-step ratio), each draw weighted by its exact likelihood ratio. The estimate is unbiased
whatever the proposal (tests/stats/test_null_rates.py checks it against exact enumerated tails);
``--plain`` draws from the null alone (then the interval is binomial), for a side-by-side check.

What is simulated (no verifier is needed: under the null the counts follow known laws)
    joint-law (Pearson and G)  multinomial counts of the merged groups from the exact joint law
    accept-length              multinomial counts of the first round's accepted-count law
    tokens-per-step            multinomial counts over the exact per-sequence law of (rounds, tokens),
                               computed by dynamic programming over the step kernels; the ratio
                               test reads their moments
    early-stop                 the joint-law check's sequential p-value over the doubling looks
                               (one path of cumulative counts, groups re-merged per look)
    pit                        the uniformity and serial-pairs histograms, drawn jointly (a 64 x 64
                               grid of the disjoint pairs plus the unpaired tokens), Bonferroni as the check
    per-prefix                 every planned node at its planned total, grouped as the check groups it
                               (`PlannedNode.grouping_total`); nodes are independent given their totals,
                               so the check's rate is 1 - prod(1 - node rate at level / nodes)
    corner X^2                 the greedy-drafter corner: the sum over its configurations' merged
                               outcome counts, read through the summed null law as the probe reads it

Output: one row per (scenario, check, level), the same pooled over scenarios per check, and a
last line ``max ratio R (upper 99% bound U)`` over every row at both levels. Goal: R <= 1.1 and
U <= 1.3. ``--quick`` runs the default suite plus the audit's worst cases (sampling-temperature at
20k, zipf-v32k's per-prefix and PIT at 20k) with fewer draws, in under 2 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special

from specaudit import laws
from specaudit.analysis import null_rates as nr
from specaudit.checks import pit as pitcheck
from specaudit.checks import prefix as prefixcheck
from specaudit.checks.probes import GREEDY_CONFIGS
from specaudit.checks.statistical import wants_joint
from specaudit.laws import chain as exact
from specaudit.laws import rounds
from specaudit.scenarios.catalogue import shipped
from specaudit.simulate.blocks import block_sizes
from specaudit.stats import gof, sequential

#: Early stop is simulated as a path of cell counts (groups re-merge per look): at most this many cells.
MAX_PATH_CELLS = 20_000


@dataclass
class Row:
    """The rejection rate of one (scenario, check) at one level."""

    scenario: str
    n: int
    check: str
    est: nr.Estimate

    def line(self) -> str:
        lo, hi = self.est.interval()
        return (f"{self.scenario:28s} {self.n:7d} {self.check:22s} {self.est.level:8.2e} {self.est.hits:7d} "
                f"{self.est.ratio():6.2f}  [{lo:.2f}, {hi:.2f}]")


def first_level(rejects: list[np.ndarray], levels: list[float]) -> np.ndarray:
    """Return, per draw, the smallest level at which it is rejected (1 when at none).

    A check rejects at level L when its p-value is <= L; since p-values are monotone in the
    statistic this is ``statistic >= isf(L)``, the critical value computed once per level instead of
    a tail per draw. Rejection sets are nested in L, so ``first_level(...) <= L`` is exactly
    "rejected at L": it stands in for the p-value in `null_rates.estimate`.
    """
    out = np.ones(rejects[0].shape)
    for rej, level in sorted(zip(rejects, levels), key=lambda z: -z[1]):
        out[rej] = level
    return out


class Calibration:
    """Estimates rates with the run's levels, draws per row and proposals (or none: ``plain``)."""

    def __init__(self, levels: list[float], reps: int, plain: bool, rng: np.random.Generator):
        self.levels, self.reps, self.plain, self.rng = levels, reps, plain, rng

    def mixture(self, blocks: list[tuple[np.ndarray, int]], proposals: list[nr.Dispersion | nr.Tilt]) -> nr.Mixture:
        return nr.Mixture(blocks, [] if self.plain else proposals)

    def rates(self, mix: nr.Mixture, pvalue: Callable[[list[np.ndarray]], np.ndarray | dict[str, np.ndarray]],
              reps: int | None = None, levels: list[float] | None = None) -> dict[str, list[nr.Estimate]]:
        """Return {key: [estimate per level]} of ``pvalue(counts)`` (an array, or a dict of arrays: one check per key)."""
        levels = levels or self.levels
        reps = reps or self.reps
        parts: dict[str, list[list[nr.Estimate]]] = {}
        done = 0
        while done < reps:
            r = min(20_000, reps - done)
            counts, w = mix.counts(self.rng, r)
            out = pvalue(counts)
            for key, p in (out if isinstance(out, dict) else {"": out}).items():
                parts.setdefault(key, []).append(nr.estimate(p, w, levels, 1.0 / mix.null_share))
            done += r
        return {key: [sum(col[1:], col[0]) for col in zip(*chunks)] for key, chunks in parts.items()}

    # ---- the checks --------------------------------------------------------------------------

    def counts_test(self, probs: np.ndarray, n: int, methods: tuple[str, ...], grouping: float | None = None,
                    levels: list[float] | None = None, reps: int | None = None) -> dict[str, list[nr.Estimate]]:
        """Goodness of fit of ``n`` draws from ``probs``, groups merged for ``grouping`` (default n), as `gof.goodness_of_fit`."""
        levels = levels or self.levels
        g = gof.merge_groups(probs * (grouping or n))
        ok = g >= 0
        pg = np.bincount(g[ok], weights=probs[ok], minlength=int(g.max()) + 1)
        if pg.size < 2:
            return {}
        expected = pg * n
        null = {m: gof.null_law(expected, m) for m in methods}
        first = null[methods[0]]
        mix = self.mixture([(pg, n)], nr.dispersions(0, pg.size - 1, [first.isf(level) for level in levels]))
        crits = {m: [law.isf(level) for level in levels] for m, law in null.items()}

        def pvalue(c):
            out = {}
            for m in methods:
                x = gof.statistics(c[0], expected, m)
                out[m] = first_level([x >= cv for cv in crits[m]], levels)
            return out

        return self.rates(mix, pvalue, reps=reps, levels=levels)

    def tokens_per_step(self, scenario, target, draft) -> list[nr.Estimate]:
        r, tok, probs = rounds.rounds_tokens_law(scenario, target, draft)
        n = scenario.samples
        ratio = laws.horizon(scenario, target, draft).tokens_per_step
        basis = np.stack([r, tok, r * r, tok * tok, r * tok], axis=1)  # [cells, 5]
        g = tok - ratio * r  # the ratio's influence: z is linear in sum x g to first order
        sd = float(np.sqrt(probs @ g**2 - (probs @ g) ** 2))
        tilts = [nr.Tilt(0, g, sign * float(gof.normal_isf(level / 2)) / (np.sqrt(n) * sd))
                 for level in self.levels for sign in (1.0, -1.0)] if sd > 0 else []

        def pvalue(c):
            z, _, _ = gof.ratio_z(c[0] @ basis, n, ratio, (r, tok, probs))
            return 2 * special.ndtr(-np.abs(z))

        return self.rates(self.mixture([(probs, n)], tilts), pvalue)[""]

    def early_stop(self, probs: np.ndarray, n: int, method: str) -> list[nr.Estimate]:
        """The sequential p-value (`sequential.Track`'s formula) over the doubling looks of one path of counts."""
        sizes = np.cumsum(block_sizes(n))
        looks = [int(sizes[b - 1]) for b in sequential.look_schedule(len(sizes))]
        weights = sequential.spending(len(looks))
        plans = []
        for size in looks:
            g = gof.merge_groups(probs * size)
            ok = g >= 0
            k = int(g.max()) + 1
            exp = np.bincount(g[ok], weights=probs[ok], minlength=k) * size
            plans.append((g, ok, k, exp, gof.null_law(exp, method) if k >= 2 else None))
        # one stretch per look and level, sized to put that look's statistic at its critical value; it
        # draws the path up to its look from a Dirichlet-multinomial and the rest from the null, so its
        # likelihood ratio is that of the counts at its look (one block per look: the path's cumulative counts)
        onehot = [np.eye(k)[g[ok]] if law is not None else None for g, ok, k, _, law in plans]  # cells -> groups
        blocks = [(probs, size) for size in looks]
        crits = [[law.isf(level * w) for level in self.levels] if law is not None else []
                 for (_, _, _, _, law), w in zip(plans, weights)]
        proposals = []
        for j, (_, _, k, _, law) in enumerate(plans):
            if law is not None:
                proposals += nr.dispersions(j, k - 1, crits[j], 2)
        mix = self.mixture(blocks, proposals)
        out: list[list[nr.Estimate]] = []
        # the union over looks splits the proposals over 2 x looks components, and its weights spread wider than
        # one look's: 6x the draws for an interval as narrow as the joint-law rows'
        done, reps = 0, 6 * self.reps
        chunk = max(100, min(5_000, 4_000_000 // (probs.size * len(looks))))  # bounded memory: [chunk, cells] per look
        while done < reps:
            r = min(chunk, reps - done)
            theta, pick = mix.pick(self.rng, r)
            look_of = np.array([c.blocks for c in mix.proposals] + [-1])  # the look a proposal stretches (-1: null)
            horizon = look_of[pick]  # pick -1 (the null) reads the last entry
            stretched = np.stack(theta)[np.maximum(horizon, 0), np.arange(r)]
            cum = np.zeros((r, probs.size), dtype=np.int64)
            at_look = []
            rejected = [np.zeros(r, dtype=bool) for _ in self.levels]
            at = 0
            for j, ((_, ok, _, exp, law), size) in enumerate(zip(plans, looks)):
                step = np.where((horizon >= j)[:, None], stretched, probs[None, :])
                cum += self.rng.multinomial(size - at, step)
                at = size
                at_look.append(cum.copy())
                if law is None:
                    continue
                x = gof.statistics(cum[:, ok] @ onehot[j], exp, method)
                for rej, cv in zip(rejected, crits[j]):  # p_seq <= L: some look has p <= L w
                    rej |= x >= cv
            out.append(nr.estimate(first_level(rejected, self.levels), mix.weights(at_look), self.levels, 1.0 / mix.null_share))
            done += r
        return [sum(col[1:], col[0]) for col in zip(*out)]

    def pit(self, n_tokens: int, n_pairs: int) -> list[nr.Estimate]:
        """Both PIT histograms from one draw: the pairs on a BINS x BINS grid, the unpaired tokens apart.

        Two kinds of proposals, each with a likelihood ratio that reads one view of the draw: tokens
        i.i.d. from a Dirichlet-drawn bin law (the ratio reads the uniformity histogram, the tokens
        being exchangeable), and pairs whose coarse cells are Dirichlet-multinomial, uniform within a
        cell (the ratio reads the coarse pair counts).
        """
        bins, coarse = pitcheck.BINS, pitcheck.PAIR_BINS
        cells, step = coarse * coarse, bins // coarse
        singles = n_tokens - 2 * n_pairs
        law1 = gof.null_law(np.full(bins, n_tokens / bins), "pearson")
        law2 = gof.null_law(np.full(cells, n_pairs / cells), "pearson")
        views = [(np.full(bins, 1.0 / bins), n_tokens), (np.full(cells, 1.0 / cells), n_pairs)]
        crits = [(law1.isf(lev / 2), law2.isf(lev / 2)) for lev in self.levels]
        mix = self.mixture(views, nr.dispersions(0, bins - 1, [c[0] for c in crits], 2)
                           + nr.dispersions(1, cells - 1, [c[1] for c in crits], 2))
        # fine cell (i, j) -> its coarse cell, for spreading a coarse law uniformly over its fine cells
        coarse_of = ((np.arange(bins)[:, None] // step) * coarse + np.arange(bins)[None, :] // step).ravel()
        out: list[list[nr.Estimate]] = []
        done, reps = 0, max(self.reps // 4, 2_000)
        while done < reps:
            r = min(2_000, reps - done)
            theta, pick = mix.pick(self.rng, r)
            kind = np.array([mix.proposals[i].blocks if i >= 0 else -1 for i in pick])
            token = theta[0]  # uniform unless a token proposal drew it
            grid_p = np.einsum("ri,rj->rij", token, token).reshape(r, -1)
            pair_rows = kind == 1
            grid_p[pair_rows] = theta[1][pair_rows][:, coarse_of] / (step * step)
            grid = self.rng.multinomial(n_pairs, grid_p).reshape(r, bins, bins)
            hist = grid.sum(axis=1) + grid.sum(axis=2)
            if singles:
                hist += self.rng.multinomial(singles, token)
            pairs = grid.reshape(r, coarse, step, coarse, step).sum(axis=(2, 4)).reshape(r, cells)
            x1 = gof.statistics(hist, np.full(bins, n_tokens / bins), "pearson")
            x2 = gof.statistics(pairs, np.full(cells, n_pairs / cells), "pearson")
            rejected = [(x1 >= c1) | (x2 >= c2) for c1, c2 in crits]  # Bonferroni: either p <= L / 2
            out.append(nr.estimate(first_level(rejected, self.levels), mix.weights([hist, pairs]), self.levels, 1.0 / mix.null_share))
            done += r
        return [sum(col[1:], col[0]) for col in zip(*out)]

    def per_prefix(self, target, n: int, length: int, method: str) -> list[nr.Estimate]:
        """Every planned node's rate at level / nodes; the check rejects when any node does (independent given totals)."""
        nodes = [node for node in prefixcheck.plan_nodes(target, n, length)
                 if (gof.merge_groups(node.probs * node.grouping_total()).max() >= 1)]
        if not nodes:
            return []
        seen: dict[tuple, dict[str, list[nr.Estimate]]] = {}
        per_level: list[list[nr.Estimate]] = [[] for _ in self.levels]
        reps = max(self.reps // 10, 2_000)
        for node in nodes:
            total = int(round(node.planned))
            key = (hashlib.sha256(node.probs.tobytes()).digest(), total, node.grouping_total())
            if key not in seen:  # lazy chains repeat conditional laws: one estimate per distinct node
                seen[key] = self.counts_test(node.probs, total, (method,), grouping=node.grouping_total(),
                                             levels=[lev / len(nodes) for lev in self.levels], reps=reps)
            for i, est in enumerate(seen[key][method]):
                per_level[i].append(est)
        return [nr.union_rate(parts, level) for parts, level in zip(per_level, self.levels)]

    def corner(self, target, draft, n: int) -> list[nr.Estimate]:
        """The greedy-drafter corner's X^2 summed over its configurations, read through the summed null law.

        Configurations as the probe builds them (`checks.probes.corner_greedy_drafter`): a target row
        p0, the greedy drafter's token x, a bonus row p1; outcome law (p0(x) p1, p0 without x) over
        2V cells, ``n / GREEDY_CONFIGS`` rows each.
        """
        rng = np.random.default_rng(7)
        states = rng.integers(target.n_states, size=2 * GREEDY_CONFIGS)
        rows = np.asarray(target.probs(states), dtype=np.float64)
        x = np.argmax(np.asarray(draft.probs(states[:GREEDY_CONFIGS]), dtype=np.float64), axis=1)
        configs = []
        for c in range(GREEDY_CONFIGS):
            p0, p1 = rows[c], rows[GREEDY_CONFIGS + c]
            reject = p0.copy()
            reject[x[c]] = 0.0
            law = np.concatenate([p0[x[c]] * p1, reject])
            configs.append((law / law.sum(), n // GREEDY_CONFIGS))
        blocks, expected, law = [], [], None
        for probs, total in configs:
            g = gof.merge_groups(probs * total)
            ok = g >= 0
            pg = np.bincount(g[ok], weights=probs[ok], minlength=int(g.max()) + 1)
            if pg.size < 2:
                continue
            blocks.append((pg, total))
            expected.append(pg * total)
            part = gof.null_law(pg * total, "pearson")
            law = part if law is None else law + part
        if law is None:
            return []
        crit = [law.isf(level) for level in self.levels]
        df = sum(e.size - 1 for e in expected)
        # one proposal stretches every configuration at once: the statistic is their sum
        mix = self.mixture(blocks, nr.dispersions(tuple(range(len(blocks))), df, crit))
        def pvalue(c):
            x = sum(gof.statistics(counts, e, "pearson") for counts, e in zip(c, expected))
            return first_level([x >= cv for cv in crit], self.levels)

        return self.rates(mix, pvalue, reps=2 * self.reps)[""]  # a draw is cheap; its weights spread wide


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="default suite + the audit's worst cases, fewer draws (< 2 min)")
    ap.add_argument("--alpha", type=float, default=1e-3)
    ap.add_argument("--family", type=int, default=30, help="m, the run's Holm family size (default suite: 30)")
    ap.add_argument("--reps", type=int, default=None, help="draws per row (default 20,000 quick, 100,000 full)")
    ap.add_argument("--scenario", action="append", help="only these shipped scenarios (repeatable)")
    ap.add_argument("--plain", action="store_true", help="draw from the null alone (no importance sampling)")
    ap.add_argument("--samples", type=int, default=None, help="N of every scenario (default: each scenario's own)")
    ap.add_argument("--seed", type=int, default=20261201)
    args = ap.parse_args()
    level = args.alpha / args.family
    levels = [level, 10 * level]
    reps = args.reps or (20_000 if args.quick else 100_000)
    cal = Calibration(levels, reps, args.plain, np.random.default_rng(args.seed))
    catalogue = {s.spec.name: s.spec for s in shipped() if s.spec.mode != "exact"}
    if args.scenario:
        todo = [(catalogue[name], catalogue[name].samples) for name in args.scenario]
    elif args.quick:
        todo = [(s, s.samples) for s in catalogue.values() if "default" in s.tags]
        todo += [(catalogue["sampling-temperature"], 20_000), (catalogue["zipf-v32k"], 20_000)]  # the audit's worst cases
    else:
        todo = [(s, s.samples) for s in catalogue.values()]
        todo += [(catalogue["sampling-temperature"], 20_000), (catalogue["p-equals-q"], 20_000),
                 (catalogue["zipf-v32k"], 100_000)]
    print(f"alpha {args.alpha:g}, family m = {args.family}: levels {level:.3g} (alpha/m) and {10 * level:.3g}; "
          f"{reps:,} draws per row ({'quick' if args.quick else 'full'}, "
          f"{'plain Monte Carlo' if args.plain else 'importance sampling'})")
    print(f"{'scenario':28s} {'N':>7s} {'check':22s} {'level':>8s} {'hits':>7s} {'ratio':>6s}  99% interval")
    rows: list[Row] = []
    t0 = time.perf_counter()
    if args.samples is not None:  # small N: where asymptotic tails are weakest
        todo = [(spec, args.samples) for spec, _ in todo]
    for spec, n in todo:
        spec = dataclasses.replace(spec, samples=n)
        target, draft = spec.chains()
        found: dict[str, list[nr.Estimate]] = {}
        if wants_joint(spec):
            probs = exact.joint_probabilities(target, spec.length)
            for key, ests in cal.counts_test(probs, n, ("pearson", "g")).items():
                found[f"joint-law/{key}"] = ests
            if probs.size > MAX_PATH_CELLS:
                print(f"{spec.name:28s} {n:7d} early-stop: not simulated ({probs.size:,} cells: the path of cell counts "
                      f"over {MAX_PATH_CELLS:,} does not fit in memory)")
            elif len(sequential.look_schedule(len(block_sizes(n)))) < 2:
                print(f"{spec.name:28s} {n:7d} early-stop: one look at N = {n:,} (one block): the joint-law rows are its rates")
            elif not args.quick or spec.name == "p-equals-q":  # quick: the audit's early-stop case only
                found["early-stop"] = cal.early_stop(probs, n, "pearson")
        else:
            if hasattr(target, "probs"):
                for method in ("pearson",) if args.quick else ("pearson", "g"):
                    found[f"per-prefix/{method}"] = cal.per_prefix(target, n, spec.length, method)
            found["pit"] = cal.pit(n * spec.length, n * (spec.length // 2))
        if hasattr(target, "dist"):
            accept = laws.first_round_accept_law(spec, target, draft)
            # few cells: a draw costs little, and the dispersion proposals reach the tail less evenly: 4x the draws
            for key, ests in cal.counts_test(accept, n, ("pearson",), reps=4 * reps).items():
                found[f"accept-length/{key}"] = ests
            if rounds.rounds_tokens_law(spec, target, draft)[2].size > 1:  # one possible value: an exact check, no p-value
                found["tokens-per-step"] = cal.tokens_per_step(spec, target, draft)
        if hasattr(target, "n_states") and getattr(draft, "n_states", None) == target.n_states and spec.k > 0:  # the corner probe runs on every sampled scenario
            found["corner-greedy-drafter"] = cal.corner(target, draft, n)
        for check, ests in found.items():
            for est in ests:
                rows.append(Row(spec.name, n, check, est))
                print(rows[-1].line(), flush=True)
    print(f"{len(rows)} rows in {time.perf_counter() - t0:.0f} s")
    print("pooled over scenarios:")
    for check in dict.fromkeys(r.check for r in rows):
        for lev in levels:
            these = [r.est for r in rows if r.check == check and r.est.level == lev]
            print(Row("(all scenarios)", 0, check, sum(these[1:], these[0])).line())
    worst = max(rows, key=lambda r: r.est.ratio())
    print(f"worst: {worst.scenario} {worst.check} at {worst.est.level:.2e}")
    print(f"max ratio {worst.est.ratio():.2f} (upper 99% bound {max(r.est.interval()[1] for r in rows):.2f})")


if __name__ == "__main__":
    main()
