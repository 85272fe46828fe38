"""Compare a run with an earlier one (read back from its results file) and gate regressions.

Scenarios are matched by name. Two results of a scenario are comparable only when their
scenario content hashes agree: a changed scenario measures something else, so it is reported
as "not comparable", never as a regression. Gates are rules ``METRIC:THRESHOLD`` (``--fail-on
tokens-per-step:2%``): the run fails when a metric moves the wrong way by more than the
threshold, relative (``2%``) or absolute (``0.05``), on any comparable scenario. Both runs are
RunResult objects; the comparison is a :class:`specaudit.results.Comparison`, which the run
carries (``RunResult.baseline``) into its results document and reports.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from specaudit.errors import UsageError, closest
from specaudit.results import Comparison, RunResult, ScenarioResult
from specaudit.results import ComparisonRow as Row

__all__ = ["METRICS", "Comparison", "Metric", "Row", "Rule", "check_gateable", "compare", "parse_rule"]


@dataclass(frozen=True)
class Metric:
    """A number read from one scenario's result, and which direction is better."""

    #: What the number is, for messages.
    description: str
    #: Read the number from a scenario's result (None: not measured there).
    read: Callable[[ScenarioResult], float | None]
    #: Read its standard error, when the result has one.
    stderr: Callable[[ScenarioResult], float | None] = lambda s: None
    #: Which direction is better.
    higher_is_better: bool = True


def _check_data(s: ScenarioResult, name: str) -> Mapping[str, object]:
    c = s.check(name)
    return (c.data or {}) if c is not None else {}


def _tps(s: ScenarioResult) -> float | None:
    v = _check_data(s, "tokens-per-step").get("estimate")
    return None if v is None else float(v)  # type: ignore[arg-type]


def _tps_se(s: ScenarioResult) -> float | None:
    v = _check_data(s, "tokens-per-step").get("stderr")
    return None if v is None else float(v)  # type: ignore[arg-type]


def _verifier_time(s: ScenarioResult) -> float | None:
    n, t = s.samples or 0, s.verifier_seconds
    return None if not n or not t else 1e6 * float(t) / n


METRICS: dict[str, Metric] = {
    "tokens-per-step": Metric("tokens per step", _tps, _tps_se, higher_is_better=True),
    "verifier-time": Metric("microseconds in the verifier per sequence", _verifier_time, higher_is_better=False),
}

_RULE = re.compile(r"^(?P<metric>[a-z][a-z0-9-]*):(?P<value>[0-9]*\.?[0-9]+(?:e-?[0-9]+)?)(?P<pct>%?)$")


@dataclass(frozen=True)
class Rule:
    """Fail when ``metric`` gets worse by more than ``threshold`` (a fraction when ``relative``)."""

    metric: str
    threshold: float
    relative: bool
    text: str


def parse_rule(text: str) -> Rule:
    """Parse ``METRIC:THRESHOLD`` (``tokens-per-step:2%`` or ``tokens-per-step:0.05``)."""
    m = _RULE.match(text.strip())
    if not m:
        raise UsageError(f"--fail-on {text!r}: expected METRIC:THRESHOLD such as 'tokens-per-step:2%' or 'tokens-per-step:0.05'")
    metric = m["metric"]
    if metric not in METRICS:
        raise UsageError(f"--fail-on {text!r}: unknown metric {metric!r}{closest(metric, METRICS)}; known: {', '.join(METRICS)}")
    value = float(m["value"])
    relative = bool(m["pct"])
    return Rule(metric, value / 100 if relative else value, relative, text.strip())


def check_gateable(old: RunResult, rules: Sequence[Rule], path: str) -> None:
    """Raise UsageError when a metric of the baseline run ``old`` that a rule gates is not a finite number.

    A baseline whose tokens/step was ``inf`` (written ``"inf"``, or hand-edited) made every
    comparison ``+nan%`` and the rule was skipped: ``--fail-on`` silently off, exit 0.
    """
    for rule in rules:
        metric = METRICS[rule.metric]
        for s in old.scenarios:
            value = metric.read(s)
            if value is not None and not math.isfinite(value):
                raise UsageError(f"--baseline {path}: scenario {s.name}: {metric.description} is {value}, not a finite "
                                 f"number; --fail-on {rule.text} cannot compare with it (re-run the baseline)")


def _worse_by(metric: Metric, old: float, new: float, rule: Rule) -> float:
    """Return how much worse ``new`` is than ``old`` in the rule's unit (negative: better)."""
    delta = (old - new) if metric.higher_is_better else (new - old)
    return delta / abs(old) if rule.relative else delta


def compare(old: RunResult, new: RunResult, rules: Sequence[Rule] = (), path: str = "") -> Comparison:
    """Compare two runs scenario by scenario and apply the gate ``rules``.

    Parameters
    ----------
    old, new : RunResult
        The runs as read back from their results files (``specaudit.results.document.read``),
        the baseline first.
    rules : sequence of Rule
        Gates; without any, the comparison is reported but never fails.
    path : str
        Where the baseline came from, for messages.
    """
    before = {s.name: s for s in old.scenarios}
    rows, regressions, not_comparable = [], [], []
    was, now = (" ".join((old.environment.get(k) or "-") for k in ("engine", "engine_version")),
                " ".join((new.environment.get(k) or "-") for k in ("engine", "engine_version")))
    engine_change = f"{was} -> {now}" if was != now else ""
    for s in new.scenarios:
        o = before.pop(s.name, None)
        if o is None:
            rows.append(Row(s.name, None, s.status.value, None, _tps(s), None, False, "new scenario"))
            continue
        status_new = s.status.value
        status_old = o.status.value
        comparable = o.content_hash == s.content_hash
        t_old, t_new = _tps(o), _tps(s)
        change = None if t_old in (None, 0) or t_new is None else (t_new - t_old) / t_old
        if not comparable:
            not_comparable.append(s.name)
            rows.append(Row(s.name, status_old, status_new, t_old, t_new, change, False,
                            f"not comparable: scenario content changed ({o.content_hash} -> {s.content_hash})"))
            continue
        notes = []
        if status_old == "passed" and status_new in ("failed", "error"):
            notes.append(f"newly {status_new}")
        elif status_old in ("failed", "error") and status_new == "passed":
            notes.append("fixed")
        if engine_change and status_old != status_new:  # say what changed besides the verifier under test
            notes.append(f"engine {engine_change}")
        for rule in rules:
            metric = METRICS[rule.metric]
            a, b = metric.read(o), metric.read(s)
            if a is None or b is None or not math.isfinite(a) or (rule.relative and a == 0):  # a: `check_gateable`
                continue
            # a metric this run could not measure as a number is no improvement: it breaks the rule
            worse = _worse_by(metric, a, b, rule) if math.isfinite(b) else math.inf
            if worse > rule.threshold:
                se_a, se_b = metric.stderr(o), metric.stderr(s)
                noise = ""
                if se_a is not None and se_b is not None and (se_a or se_b):
                    noise = f", z = {(b - a) / math.hypot(se_a, se_b):+.1f}"
                amount = f"{100 * worse:.2f}%" if rule.relative else f"{worse:.4g}"
                message = (f"{s.name}: {metric.description} {a:.4g} -> {b:.4g}, worse by {amount}{noise}; "
                           f"rule {rule.text}")
                regressions.append({"scenario": s.name, "metric": rule.metric, "old": a, "new": b, "worse_by": worse,
                                    "rule": rule.text, "message": message, "path": s.path, "line": s.line})
                notes.append(f"{rule.metric} regressed ({amount})")
        rows.append(Row(s.name, status_old, status_new, t_old, t_new, change, True, "; ".join(notes)))
    for name, o in before.items():
        rows.append(Row(name, o.status.value, None, _tps(o), None, None, False, "not in this run"))
    return Comparison(
        path=path,
        version=str(old.version),
        started=str(old.started),
        rules=tuple(r.text for r in rules),
        rows=tuple(rows),
        regressions=tuple(regressions),
        not_comparable=tuple(not_comparable),
        engine_change=engine_change,
    )

