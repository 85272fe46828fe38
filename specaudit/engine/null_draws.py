"""P-values of every gating check on draws from the exact null: the self-test's power against miscalibration.

A run of the reference verifier gives one p-value per check; judging the tail of a p-value law
(2x at 1e-2) that way needs thousands of runs. But under the null the *counts* a check reads
have a known law, so its p-values can be drawn without the verifier, thousands per second:

What is exact and what is simulated
    The count laws are exact (float64): Multinomial(N, the merged groups of the exact joint
    law) for the joint-law check (Pearson and G), Multinomial(N, the first round's exact accept
    law) for accept-length, Multinomial(N, the exact law of one sequence's (rounds, tokens))
    for tokens-per-step (the ratio test reads the five moments), Multinomial(N_node, the exact
    next-token law) at every planned per-prefix node (at its planned total), Multinomial over
    equal bins for the two PIT histograms (under the null the u are i.i.d. U(0, 1)), the
    cumulative counts at the early stop's looks, and a fresh Multinomial(4 N) for a suspect's
    re-run. The *draws* are simulated (seeded numpy), and every p-value is read from them by
    a :data:`Reader`, by default :func:`exact_reader`, the library's own (``gof.null_law(...).sf``
    and the ratio test's normal tail). The combinations are the library's: Holm's ``m min p``
    over nodes, Bonferroni over the PIT pair, `specaudit.stats.sequential`'s spending over
    looks, `specaudit.engine.run`'s Holm and re-run rule.

What is *not* covered here
    Whether the engine feeds the check the verifier's counts correctly (the wiring): the
    self-test's verifier-path runs do that (`specaudit.engine.selftest`).

A ``Reader`` can be swapped for a deliberately wrong one (:func:`distorted`, :func:`df_minus_one`):
the self-test's negative controls, used by its tests and ``benchmarks/selftest_power.py`` only.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import special

from specaudit import laws
from specaudit.checks import pit as pitcheck
from specaudit.checks import prefix as prefixcheck
from specaudit.checks.statistical import has_joint_law, wants_joint
from specaudit.engine.run import RERUN_FACTOR, apply_holm, rerun_suspects
from specaudit.engine.settings import default_suspect_level
from specaudit.laws import chain as exact
from specaudit.laws import rounds
from specaudit.results import Category, CheckResult, ScenarioResult, Status
from specaudit.scenarios.schema import Scenario
from specaudit.simulate.blocks import block_sizes
from specaudit.stats import gof, sequential

__all__ = ["Miscalibrated", "NullRow", "Reader", "df_minus_one", "distorted", "exact_reader", "null_rows", "rerun_rule_mismatches", "stacked", "unstack"]

#: ``reader(check, statistic [R], expected counts per group [k], method) -> p-values [R]``: ``check``
#: names the check reading (``joint-law``, ``accept-length``, ``tokens-per-step``, ``per-prefix``,
#: ``pit``, ``early-stop``, ``rerun``); ``method`` is "pearson" or "g" (a count statistic over k
#: groups) or "normal" (a z statistic; ``expected`` is empty).
Reader = Callable[[str, np.ndarray, np.ndarray, str], np.ndarray]

#: Draws per vectorised batch (bounds memory).
CHUNK = 20_000


def exact_reader(check: str, statistic: np.ndarray, expected: np.ndarray, method: str) -> np.ndarray:
    """Return the library's p-values: the statistic's null-law tail, or the two-sided normal tail."""
    if method == "normal":
        return 2.0 * special.ndtr(-np.abs(statistic))
    return np.asarray(_null_law(expected.tobytes(), method).sf(statistic), dtype=np.float64)


@functools.lru_cache(maxsize=256)
def _null_law(expected: bytes, method: str) -> gof.NullLaw:
    """Return `gof.null_law` once per law (its tail tables are built on first use and kept)."""
    return gof.null_law(np.frombuffer(expected, dtype=np.float64), method)


@dataclass(frozen=True)
class Miscalibrated:
    """A deliberately wrong reader: the library's reading, then ``transform(check, statistic, expected, method, p)``.

    The self-test's negative controls (:func:`distorted`, :func:`df_minus_one`): used by its tests and
    ``benchmarks/selftest_power.py``, never by a run.
    """

    name: str
    transform: Callable[[str, np.ndarray, np.ndarray, str, np.ndarray], np.ndarray]

    def __call__(self, check: str, statistic: np.ndarray, expected: np.ndarray, method: str) -> np.ndarray:
        """Read like :func:`exact_reader`, then distort."""
        return self.transform(check, statistic, expected, method, exact_reader(check, statistic, expected, method))


def distorted(factor: float, below: float, methods: Sequence[str] = ("pearson", "g", "normal"),
              checks: Sequence[str] | None = None) -> Miscalibrated:
    """Return a reader whose p-values reject ``factor`` x as often as stated at every level <= ``below``.

    ``factor`` 2 is a 2x tail inflation, 1/2 a 2x conservative tester. If ``p`` is U(0, 1), the
    distorted p-value ``G^-1(p)`` has the law ``G(t) = factor t`` for ``t <= below``, linear from
    ``(below, factor below)`` to ``(1, 1)`` above (so it is a p-value law). Only ``methods`` are
    distorted, and only in ``checks`` (None: every check).
    """
    if not 0 < factor * below < 1:
        raise ValueError(f"factor x below = {factor * below}; allowed in (0, 1)")
    knee = factor * below

    def transform(check: str, statistic: np.ndarray, expected: np.ndarray, method: str, p: np.ndarray) -> np.ndarray:
        if method not in methods or (checks is not None and check not in checks):
            return p
        return np.where(p <= knee, p / factor, below + (p - knee) * (1.0 - below) / (1.0 - knee))

    return Miscalibrated(f"x{factor:g} below {below:g}", transform)


def df_minus_one(methods: Sequence[str] = ("pearson", "g"), checks: Sequence[str] | None = None) -> Miscalibrated:
    """Return a reader that reads a chi-square statistic over k groups with k - 2 df instead of k - 1.

    The classic off-by-one; anti-conservative, most for few groups (k = 2: every positive statistic
    gets p = 0). z statistics are read correctly. Only ``methods`` and ``checks`` (None: every check).
    """
    def transform(check: str, statistic: np.ndarray, expected: np.ndarray, method: str, p: np.ndarray) -> np.ndarray:
        if method not in methods or (checks is not None and check not in checks):
            return p
        return np.asarray(special.chdtrc(max(expected.size - 2, 0), statistic), dtype=np.float64)

    return Miscalibrated("df - 1", transform)


def stacked(readers: Sequence[Reader]) -> Reader:
    """Return one reader giving every reader's p-values at once, stacked [len(readers), R].

    The library's reading is computed once and every :class:`Miscalibrated` reader transforms it,
    so several readers share the same draws (`null_rows` returns rows of [k, R]; `unstack` splits them).
    """
    for r in readers:
        if r is not exact_reader and not isinstance(r, Miscalibrated):
            raise ValueError(f"stacked readers are exact_reader or Miscalibrated, not {r!r}")

    def read(check: str, statistic: np.ndarray, expected: np.ndarray, method: str) -> np.ndarray:
        p = exact_reader(check, statistic, expected, method)
        return np.stack([p if not isinstance(r, Miscalibrated) else r.transform(check, statistic, expected, method, p)
                         for r in readers])

    return read


def unstack(rows: Sequence[NullRow], k: int) -> list[list[NullRow]]:
    """Split rows of stacked p-values [k, R] (a `stacked` reader's) into k lists of rows."""
    return [[dataclasses.replace(r, pvalues=np.asarray(r.pvalues)[i]) for r in rows] for i in range(k)]


@dataclass(frozen=True)
class NullRow:
    """The null p-values of one check on one scenario, drawn from the exact null."""

    scenario: str
    check: str  # "joint-law/pearson", "per-prefix/node", "early-stop", "rerun", ...
    pvalues: np.ndarray
    #: The design's lower bound of P(p <= t) / t for the levels judged (None: only inflation is judged).
    floor: float | None = 1.0
    #: The design's upper bound of P(p <= t) / t (1: a valid p-value; the re-run rule allows 1 + suspect level).
    ceiling: float = 1.0
    #: Only these levels are judged (None: the self-test's scan).
    levels: tuple[float, ...] | None = None
    #: Conservativeness is judged at levels >= this (below, a coarse law's atoms may legitimately bite).
    floor_from: float = 0.0
    #: Inflation is judged at levels <= this: where a run reads the p-value (a node's: Holm over the nodes).
    read_below: float = 1.0


def _multinomial(rng: np.random.Generator, n: int, probs: np.ndarray, reps: int) -> list[np.ndarray]:
    probs = probs / probs.sum()
    return [rng.multinomial(n, probs, size=min(CHUNK, reps - lo)) for lo in range(0, reps, CHUNK)]


def _grouped(probs: np.ndarray, total: float) -> np.ndarray:
    """Return the group probabilities of the merge the check makes for ``total`` (`gof.merge_groups`)."""
    g = gof.merge_groups(probs * total)
    ok = g >= 0
    return np.bincount(g[ok], weights=probs[ok], minlength=int(g.max()) + 1 if ok.any() else 0)


def _count_pvalues(check: str, counts: np.ndarray, pg: np.ndarray, n: int, method: str, reader: Reader) -> np.ndarray:
    expected = pg / pg.sum() * n
    return reader(check, gof.statistics(counts, expected, method), expected, method)


def _joint_rows(spec: Scenario, target: Any, reps: int, methods: Sequence[str], reader: Reader,
                rng: np.random.Generator, alpha: float, sequential_reps: int) -> list[NullRow]:
    n = spec.samples
    probs = exact.joint_probabilities(target, spec.length)
    pg = _grouped(probs, n)
    if pg.size < 2:
        return []
    counts = np.concatenate(_multinomial(rng, n, pg, reps))
    by_method = {m: _count_pvalues("joint-law", counts, pg, n, m, reader) for m in methods}
    rows = [NullRow(spec.name, f"joint-law/{m}", p) for m, p in by_method.items()]
    if sequential_reps:  # the re-run rule is judged at alpha alone: four times the draws
        first = np.concatenate(_multinomial(rng, n, pg, 4 * sequential_reps))
        rows.append(_rerun_row(spec.name, first, pg, n, methods[0], reader, rng, alpha))
        rows.append(NullRow(spec.name, "early-stop", _early_stop(probs, n, methods[0], reader, rng, sequential_reps),
                            floor=None))
    return rows


def _rerun_row(name: str, counts: np.ndarray, pg: np.ndarray, n: int, method: str, reader: Reader,
               rng: np.random.Generator, alpha: float) -> NullRow:
    """Return 0/1 "p-values" of the run's suspect-and-re-run rule at ``alpha`` on a one-check run (0: failed).

    The first look reads ``counts`` (N); a suspect (alpha < p <= the default suspect level) is
    re-run on fresh exact-null counts of 4 N. The decision is the rule :func:`rerun_rule_mismatches`
    verifies against the run's own `apply_holm` + `rerun_suspects`. It fails at most
    ``alpha (1 + suspect level)`` of null runs: the row's ceiling.
    """
    suspect = default_suspect_level(alpha)
    first = _count_pvalues("rerun", counts, pg, n, method, reader)
    failed = first <= alpha
    suspects = (first > alpha) & (first <= suspect)  # [R] or [k, R] (stacked readers)
    maybe = np.flatnonzero(suspects.reshape(-1, suspects.shape[-1]).any(axis=0))
    if maybe.size:
        big = RERUN_FACTOR * n
        second = _count_pvalues("rerun", np.concatenate(_multinomial(rng, big, pg, maybe.size)), pg, big, method, reader)
        failed[..., maybe] |= suspects[..., maybe] & (second <= alpha)
    return NullRow(name, "rerun", np.where(failed, 0.0, 1.0), floor=None, ceiling=1.0 + suspect, levels=(alpha,))


def _one_check(p: float, seed: int = 0) -> ScenarioResult:
    check = CheckResult("joint-law", Category.DISTRIBUTION, Status.PENDING, "", 0.0, p)
    return ScenarioResult("null", "<selftest>", 0, "", "", seed, 1, (check,))


def _rerun_of(p2: float, index: int, seed: int, samples: int) -> ScenarioResult:
    return _one_check(p2, seed)


def rerun_rule_mismatches(alpha: float) -> list[str]:
    """Return the (p1, p2) pairs where the run's Holm and re-run rule differ from the documented one.

    Documented (README, `specaudit.engine.run.rerun_suspects`): a one-check scenario fails when its
    first p-value is <= alpha, or when it is suspect (alpha < p1 <= the suspect level) and the re-run's
    p-value is <= alpha. Checked on a grid around both boundaries through `apply_holm` and
    `rerun_suspects` themselves; the re-run row of :func:`null_rows` applies the documented rule
    to its draws (vectorised).
    """
    suspect = default_suspect_level(alpha)
    grid = sorted({alpha * f for f in (0.0, 0.5, 0.999, 1.0, 1.001, 2.0)} | {suspect * f for f in (0.999, 1.0, 1.001)} | {1.0})
    out = []
    for p1 in grid:
        for p2 in grid:
            first = apply_holm([_one_check(p1)], alpha, suspect)
            settled = rerun_suspects(first, functools.partial(_rerun_of, p2), alpha, suspect)
            got = settled[0].status is Status.FAILED
            want = p1 <= alpha or (p1 <= suspect and p2 <= alpha)
            if got != want:
                out.append(f"p1 = {p1:g}, p2 = {p2:g}: the run {'fails' if got else 'passes'}, the rule says "
                           f"{'fail' if want else 'pass'}")
    return out


def _early_stop(probs: np.ndarray, n: int, method: str, reader: Reader, rng: np.random.Generator, reps: int) -> np.ndarray:
    """Return the joint-law check's sequential p-value (`sequential.Track`'s formula) after the last look."""
    sizes = np.cumsum(block_sizes(n))
    looks = [int(sizes[b - 1]) for b in sequential.look_schedule(len(sizes))]
    weights = sequential.spending(len(looks))
    out = []
    for lo in range(0, reps, CHUNK // 4):
        r = min(CHUNK // 4, reps - lo)
        cum = np.zeros((r, probs.size), dtype=np.int64)
        best = np.full(r, np.inf)
        done = 0
        for size, w in zip(looks, weights):
            cum += rng.multinomial(size - done, probs, size=r)
            done = size
            g = gof.merge_groups(probs * size)
            ok = g >= 0
            k = int(g.max()) + 1
            if k < 2:
                continue
            onehot = np.zeros((probs.size, k))
            onehot[np.flatnonzero(ok), g[ok]] = 1.0
            obs = cum @ onehot  # the look's group counts
            expected = np.bincount(g[ok], weights=probs[ok], minlength=k) * size
            best = np.minimum(best, reader("early-stop", gof.statistics(obs, expected, method), expected, method) / w)
        out.append(np.minimum(best, 1.0))
    return np.concatenate(out, axis=-1)


def _prefix_rows(spec: Scenario, target: Any, reps: int, method: str, reader: Reader,
                 rng: np.random.Generator, alpha: float) -> list[NullRow]:
    """Return the node p-values (pooled over nodes) and the check's Holm-combined p-value (m min p)."""
    nodes = []
    for node in prefixcheck.plan_nodes(target, spec.samples, spec.length):
        pg = _grouped(node.probs, node.grouping_total())
        if pg.size >= 2:
            nodes.append((pg, int(round(node.planned))))
    if not nodes:
        return []
    best = np.ones(reps)
    units = []
    for pg, total in nodes:
        p = _count_pvalues("per-prefix", np.concatenate(_multinomial(rng, total, pg, reps)), pg, total, method, reader)
        units.append(p)
        best = np.minimum(best, p)
    # node laws of 2..10 groups expecting 5..20 are coarse: below 0.05 their p-values reject up to
    # ~30% less often than stated (measured), so conservativeness is judged at 0.05 and above; a run
    # reads a node's p-value through Holm over the nodes, at suspect level / nodes and below
    return [NullRow(spec.name, "per-prefix/node", np.concatenate(units, axis=-1), floor_from=0.05,
                    read_below=default_suspect_level(alpha) / len(nodes)),
            NullRow(spec.name, "per-prefix", np.minimum(1.0, len(nodes) * best), floor=None)]


def _pit_rows(spec: Scenario, reps: int, reader: Reader, rng: np.random.Generator) -> list[NullRow]:
    """Return the PIT check's two histogram p-values (pooled) and its Bonferroni-combined p-value."""
    tokens, pairs = spec.samples * spec.length, spec.samples * (spec.length // 2)
    parts = []
    for total, cells in ((tokens, pitcheck.BINS), (pairs, pitcheck.PAIR_BINS**2)):
        if total:
            flat = np.full(cells, 1.0 / cells)
            parts.append(_count_pvalues("pit", np.concatenate(_multinomial(rng, total, flat, reps)), flat, total,
                                        "pearson", reader))
    combined = np.minimum(1.0, len(parts) * np.minimum.reduce(parts))
    return [NullRow(spec.name, "pit/histogram", np.concatenate(parts, axis=-1)), NullRow(spec.name, "pit", combined)]


def _round_rows(spec: Scenario, target: Any, draft: Any, reps: int, methods: Sequence[str], reader: Reader,
                rng: np.random.Generator) -> list[NullRow]:
    """Return accept-length (per method) and tokens-per-step p-values."""
    n = spec.samples
    rows = []
    accept = laws.first_round_accept_law(spec, target, draft)
    pg = _grouped(accept, n)
    if pg.size >= 2:
        counts = np.concatenate(_multinomial(rng, n, pg, reps))
        rows += [NullRow(spec.name, f"accept-length/{m}", _count_pvalues("accept-length", counts, pg, n, m, reader))
                 for m in methods]
    r, tok, probs = rounds.rounds_tokens_law(spec, target, draft)
    if probs.size > 1:  # one possible value: an exact check, no p-value
        exact_tps = laws.horizon(spec, target, draft).tokens_per_step
        basis = np.stack([r, tok, r * r, tok * tok, r * tok], axis=1)
        z = np.concatenate([gof.ratio_z(c @ basis, n, exact_tps, (r, tok, probs))[0] for c in _multinomial(rng, n, probs, reps)])
        rows.append(NullRow(spec.name, "tokens-per-step", reader("tokens-per-step", z, np.zeros(0), "normal")))
    return rows


def null_rows(
    specs: Sequence[Scenario],
    draws: int,
    *,
    reader: Reader = exact_reader,
    rng: np.random.Generator,
    alpha: float = 1e-3,
    methods: Sequence[str] = ("pearson", "g"),
    prefix_draws: int | None = None,
    sequential: Sequence[str] = (),
) -> list[NullRow]:
    """Return the null p-values of every gating check of ``specs``, ``draws`` per row, read by ``reader``.

    Parameters
    ----------
    specs : sequence of Scenario
        Scenarios at the N they run with (exact-mode ones have no statistical check: no row).
    draws : int
        Exact-null draws per (scenario, check).
    reader : Reader
        How a statistic becomes a p-value (:func:`exact_reader`: the library's).
    rng : numpy.random.Generator
        The draws' randomness.
    alpha : float
        The run's level, at which the re-run rule is applied.
    methods : sequence of str
        Statistics of the count checks (the first also for early stop, re-runs and per-prefix).
    prefix_draws : int, optional
        Draws of the per-prefix check (default ``draws``; its node row pools every node).
    sequential : sequence of str
        Scenarios that also get the early-stop and re-run rows (their laws at every look and at
        4 N cost more than the draws; the rules are the same for every scenario).

    Returns
    -------
    list of NullRow
        Under the null and with a correct reader every row holds valid p-values (``ceiling`` 1),
        rows with ``floor`` U(0, 1) up to discreteness.
    """
    rows: list[NullRow] = []
    pd = max(prefix_draws if prefix_draws is not None else draws, 1)
    for spec in specs:
        if spec.mode == "exact":
            continue
        target, draft = spec.chains()
        if has_joint_law(spec):
            rows += _joint_rows(spec, target, draws, methods, reader, rng, alpha, draws if spec.name in sequential else 0)
        elif not wants_joint(spec):
            if hasattr(target, "probs"):
                rows += _prefix_rows(spec, target, pd, methods[0], reader, rng, alpha)
            rows += _pit_rows(spec, draws, reader, rng)
        if hasattr(target, "dist"):
            rows += _round_rows(spec, target, draft, draws, methods, reader, rng)
    return rows
