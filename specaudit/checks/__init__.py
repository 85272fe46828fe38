"""Checks: bind one property of a verifier to a statistic or an exact probe, and return a CheckResult.

Every check specaudit runs is registered once, in :data:`CHECKS`, in run order: first the
statistical checks, which read a scenario's measurements (:class:`~specaudit.checks.statistical.Measured`)
and return a raw p-value (joint law, tokens per step, accepted-count law, greedy equality,
a batch mix's greedy rows, processing diagnosis, per-prefix, PIT), then the exact probes of ``mode: exact`` scenarios
(:mod:`specaudit.checks.probes`: corners, determinism, padding, adversarial uniforms, inputs,
contract clauses), then the tree probes every ``algorithm: tree`` scenario runs
(:mod:`specaudit.checks.tree_probes`), then the bad-row probe of exact scenarios tagged ``bad-rows``
(:mod:`specaudit.checks.bad_rows`: NaN / inf / all-zero rows), then the per-request seed probe of
simulated scenarios tagged ``seeded`` (:mod:`specaudit.checks.seeded`). :func:`evaluate` runs the applicable statistical checks on one scenario's
measurements; :func:`specaudit.checks.probes.run_exact` runs the probes. Each :class:`Check`
entry says its category and whether it gates the verdict, so a parametrised test can demand a
positive and a negative control of every gating check (``tests/checks/test_controls.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from specaudit.checks import (
    bad_rows,
    greedy,
    pit,
    prefix,
    probes,
    processing,
    seeded,
    serving,
    statistical,
    tree_probes,
)
from specaudit.checks.statistical import Measured
from specaudit.registry import Registry
from specaudit.results import Category, CheckResult

__all__ = ["CHECKS", "Check", "Measured", "evaluate", "statistical_checks"]


@dataclass(frozen=True)
class Check:
    """One registered check: its result name, category, and the function that computes it.

    ``kind`` is ``statistical`` (``func(measured) -> CheckResult | None``, None: does not apply),
    ``probe`` (``func(prober) -> CheckResult | list[CheckResult]``) or ``tree-probe`` (the same on
    a :class:`~specaudit.checks.tree_probes.TreeProber`, tree scenarios only) or ``bad-rows-probe`` (a
    probe of exact scenarios tagged ``bad-rows`` only, :mod:`specaudit.checks.bad_rows`) or
    ``seeded-probe`` (simulated scenarios tagged ``seeded`` only, :mod:`specaudit.checks.seeded`). ``gate`` is False for a
    check that only explains (the processing diagnosis); ``also`` lists further result names the
    same function emits (the one-hot corner also reports its accepted-count run).
    """

    name: str
    category: Category
    kind: Literal["statistical", "probe", "tree-probe", "bad-rows-probe", "seeded-probe"]
    func: Callable[[Any], Any]
    gate: bool = True
    also: tuple[str, ...] = ()

    @property
    def results(self) -> tuple[str, ...]:
        """Return every result name this check emits."""
        return (self.name, *self.also)


#: Every check, statistical then probes, in run order.
CHECKS: Registry[Check] = Registry("check")

_DIST, _EFF = Category.DISTRIBUTION, Category.EFFICIENCY
for _check in (
    Check("joint-law", _DIST, "statistical", statistical.joint_law),
    Check("tokens-per-step", _EFF, "statistical", statistical.tokens_per_step),
    Check("accept-length", _EFF, "statistical", statistical.accept_length),
    Check("greedy-equality", _DIST, "statistical", greedy.greedy_equality),  # exact, greedy mode only
    Check("greedy-rows", _DIST, "statistical", serving.greedy_rows),  # exact, a batch mix's temperature-0 classes
    Check("processing", _DIST, "statistical", processing.processing, gate=False),  # which processed quantity diverges
    Check("per-prefix", _DIST, "statistical", prefix.per_prefix),  # large V / L: chain-rule tests
    Check("pit", _DIST, "statistical", pit.pit),  # large V / L: randomised PIT omnibus
):
    CHECKS.register(_check.name, _check)
for _name, _category, _probe in probes.EXACT_CHECKS:
    CHECKS.register(_name, Check(_name, _category, "probe", _probe, also=probes.ALSO_EMITS.get(_name, ())))
for _name, _category, _tree_probe in tree_probes.TREE_CHECKS:
    CHECKS.register(_name, Check(_name, _category, "tree-probe", _tree_probe, also=tree_probes.ALSO_EMITS.get(_name, ())))
for _name, _category, _bad_rows_probe in bad_rows.BAD_ROW_CHECKS:
    CHECKS.register(_name, Check(_name, _category, "bad-rows-probe", _bad_rows_probe))
for _name, _category, _seeded_probe in seeded.SEEDED_CHECKS:
    CHECKS.register(_name, Check(_name, _category, "seeded-probe", _seeded_probe))


def statistical_checks() -> list[Check]:
    """Return the statistical checks in run order (the family a run's sequential levels count)."""
    return [c for c in CHECKS.values() if c.kind == "statistical"]


def evaluate(measured: Measured, gate_efficiency: bool = True) -> tuple[CheckResult, ...]:
    """Run every applicable statistical check on the measurements."""
    results = []
    for check in statistical_checks():
        result = check.func(measured)
        if result is None:
            continue
        if result.category is Category.EFFICIENCY and not gate_efficiency:
            result = dataclasses.replace(result, gate=False)
        results.append(result)
    return tuple(results)
