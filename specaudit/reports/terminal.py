"""Terminal report (rich): the summary table, details of failures, a one-line verdict."""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from specaudit.reports import format as fmt
from specaudit.reports.columns import Cell, Column, fit, fit_first
from specaudit.reports.sensitivity import render_power
from specaudit.results import Comparison, RunResult, ScenarioResult, Status

STYLE = {
    Status.PASSED: "green",
    Status.SUSPECT: "yellow",
    Status.FAILED: "bold red",
    Status.ERROR: "bold magenta",
    Status.SKIPPED: "dim",
    Status.PENDING: "cyan",
}


#: The summary's columns after the scenario: numbers never break, except a statistic before its "/df".
_CHECK_COLUMNS = (
    Column("check", breaks="text"),
    Column("statistic", "right", breaks="stat"),
    Column("p (Holm)", "right"),
    Column("TV (null)", "right"),
    Column("tokens/step (exact)", "right"),
    Column("verdict"),
)


def _groups(result: RunResult) -> list[tuple[str, list[list[Cell]]]]:
    """Return (scenario label, rows of check, statistic, p, TV, tokens/step, verdict) per scenario result."""
    groups: list[tuple[str, list[list[Cell]]]] = []
    for s in result.scenarios:
        # a SUSPECT scenario's re-run (fresh seed, 4x samples) follows its first result
        for part in s.attempts():
            label = s.name if part is s else f"{s.name} (re-run, N {part.samples:,})"
            if part.error is not None:
                where = f" [{part.error.clause}]" if part.error.clause else ""
                groups.append((label, [[Text(f"{part.error.kind}{where}"), "", "", "", "", Text("error", STYLE[Status.ERROR])]]))
                continue
            rows: list[list[Cell]] = []
            for c in part.checks:
                d = c.data
                # numbers when present (specaudit.results.document checks a file's): shown where both are
                tv = f"{d['tv']:.4f} ({d['tv_null']:.4f})" if d.get("tv") is not None and d.get("tv_null") is not None else ""
                tps = (f"{d['estimate']:.3f} ({d['exact']:.3f})" if c.name == "tokens-per-step" and d.get("estimate") is not None
                       and d.get("exact") is not None else "")
                stat = "" if c.statistic is None else (f"{c.statistic:.1f}" + (f"/{c.df}df" if c.df is not None else ""))
                verdict = Text(c.status.value + ("" if c.gate else " (not gating)"), STYLE[c.status])
                p = fmt.pvalue(c.adjusted_pvalue if c.adjusted_pvalue is not None else c.pvalue)
                rows.append([Text(c.name), stat, p, tv, tps, verdict])
            groups.append((label, rows))
    return groups


def _as_lines(groups: list[tuple[str, list[list[Cell]]]], title: Text) -> Group:
    """Return the summary as plain lines (a console too narrow for any table): words wrap, numbers stay whole."""
    lines: list[RenderableType] = [title]
    for label, rows in groups:
        lines.append(Text(label, style="bold"))
        for row in rows:
            fields = [f"{col.header} {cell}" for col, cell in zip(_CHECK_COLUMNS[1:5], row[1:5]) if str(cell)]
            verdict = row[5] if isinstance(row[5], Text) else Text(row[5])
            lines.append(Padding(Text.assemble(row[0], ": ", ", ".join(fields), " - " if fields else "", verdict), (0, 0, 0, 2)))
    return Group(*lines)


def summary_table(result: RunResult, width: int | None = None) -> RenderableType:
    """Return the summary, one row per scenario x check, laid out to fit ``width`` (None: natural widths).

    Tried in order, the first that fits whole: a scenario column; the scenario as a heading row
    above its checks, indented (with the outer border, then without), then not indented; plain lines.
    A number or a check name is never cut (issue 19).
    """
    engine = result.engine()
    title = Text(f"specaudit {result.version}: {result.target}" + (f" [{engine}]" if engine else ""))
    groups = _groups(result)
    flat = [[Text(label), *row] for label, rows in groups for row in rows]
    table = fit((Column("scenario"), *_CHECK_COLUMNS), flat, width, title=title)
    if table is not None:
        return table
    for indent, edge in (("  ", True), ("  ", False), ("", True), ("", False)):
        grouped: list[list[Cell] | None] = []
        for label, rows in groups:
            if grouped:
                grouped.append(None)
            grouped.append([Text(label, style="bold"), "", "", "", "", ""])
            grouped += [[Text(indent) + row[0], *row[1:]] for row in rows]
        head = Column("scenario / check")
        table = fit((head, *_CHECK_COLUMNS[1:]), grouped, width, title=title, show_edge=edge)
        if table is not None:
            return table
    return _as_lines(groups, title)


#: The most deviating cells: a cell (a token sequence) stays on one line.
_CELL_COLUMNS = (Column("sequence", breaks="none"), Column("observed"), Column("expected"), Column("std. residual"))


def _details(console: Console, s: ScenarioResult) -> None:
    for label, error in s.reported_errors():  # the first attempt's, and a re-run's that could not run
        console.print(Text.assemble((label, "bold magenta"), f": {error.message}"))  # text, never markup
        if error.traceback:
            console.print(Text(error.traceback, style="dim"))
    if s.error is not None:
        return
    for c in s.reported_checks():  # a re-run's too, labelled "(re-run)"
        if c.status not in (Status.FAILED, Status.SUSPECT, Status.ERROR):
            continue
        console.print(Text.assemble((f"{s.name} / {c.name}: ", "bold"), c.summary))
        if c.status is Status.ERROR and c.data.get("traceback"):  # a probe the verifier crashed in: where
            console.print(Text(str(c.data["traceback"]), style="dim"))
        top = c.data.get("top_cells") or []
        if top:
            rows: list[list[Cell]] = [[str(cell["cell"]), str(cell["observed"]), f"{cell['expected']:.1f}",
                                       f"{cell['residual']:+.1f}"] for cell in top[:5]]
            table = fit_first(_CELL_COLUMNS, rows, console.width, title="most deviating cells")
            console.print(table if table is not None else Group(Text("most deviating cells"), *(
                Text(f"  {r[0]}: observed {r[1]}, expected {r[2]}, std. residual {r[3]}") for r in rows)))
    _diagnosis(console, s)


def _diagnosis(console: Console, s: ScenarioResult) -> None:
    """Print the zoo mutant the failure looks like (stored by the runner), if any."""
    found = s.info.get("diagnosis")
    if not found:
        return
    best = found.get("best")
    if best:
        console.print(Text.assemble(
            ("  looks like: ", "bold yellow"), (best["mutant"], "bold"), f", {best['description']} ",
            (f"(pattern similarity {best['similarity']:.2f}; mirrors {best['mirrors']})", "dim"),
        ))
    else:
        others = ", ".join(f"{m['mutant']} {m['similarity']:.2f}" for m in found.get("candidates", [])[:3])
        console.print(Text(f"  no zoo mutant matches this deviation (closest: {others or 'none'})", style="dim"))


def render_baseline(comparison: Comparison, console: Console, verbosity: int = 0) -> None:
    """Print the comparison with a baseline run (``RunResult.baseline``); -q: regressions only."""
    comparison = fmt.shown(comparison)  # its paths, names and notes as text (see `render`)
    if verbosity >= 0:
        _baseline_table(comparison, console)
    for reg in comparison.regressions:
        console.print(Text.assemble(("regression: ", "bold red"), reg["message"]))
    if comparison.not_comparable:
        console.print(Text(f"not comparable (scenario changed): {', '.join(comparison.not_comparable)}", style="yellow"))
    if comparison.engine_change:
        console.print(Text(f"engine changed since the baseline: {comparison.engine_change}", style="yellow"))


_BASELINE_COLUMNS = (
    Column("scenario"),
    Column("verdict then -> now"),
    Column("tokens/step then -> now", "right"),
    Column("change", "right"),
    Column("note"),
)


def _baseline_table(comparison: Comparison, console: Console) -> None:
    rows: list[list[Cell]] = []
    for r in comparison.rows:
        tps = f"{fmt.optional(r.old_tps, '.4f')} -> {fmt.optional(r.new_tps, '.4f')}" if r.old_tps is not None or r.new_tps is not None else ""
        change = "" if r.tps_change is None else f"{100 * r.tps_change:+.2f}%"
        rows.append([Text(r.scenario), f"{r.old_status or '-'} -> {r.new_status or '-'}", tps, change, Text(r.note)])
    title = f"against baseline {comparison.path}"
    table = fit_first(_BASELINE_COLUMNS, rows, console.width, title=title)
    if table is None:  # narrower than any table: natural widths, rich wraps what it must
        table = fit(_BASELINE_COLUMNS, rows, None, title=title)
    console.print(table)


def _plural(status: Status, n: int) -> str:
    """Return the status word for ``n`` scenarios: '2 errors', but '2 failed', '2 passed'."""
    return "errors" if status is Status.ERROR and n != 1 else status.value


def certificate_line(s: ScenarioResult, certify: bool = False) -> Text | None:
    """Return one scenario's TV bound for people ("TV <= 0.0043 at 99.9%"), or None when it has none.

    ``certify``: the run asked for certificates (``--certify-tv``): a scenario without one says so.
    """
    b = s.certificate
    if b is None:
        if not certify or s.status is Status.ERROR:
            return None
        return Text.assemble((f"{s.name}: ", "bold"), ("no TV certificate (no enumerated joint law to bound: exact, "
                                                        "greedy or per-prefix checks)", "dim"))
    line = Text.assemble((f"{s.name}: ", "bold"), f"TV <= {b.bound:.4f} at {100 * b.confidence:g}% ",
                         (f"(plug-in TV {b.tv:.4f} + Hoeffding, {b.sequences:,} sequences)", "dim"))
    if b.certified:
        line.append(f" certified <= {b.target:g}", style="green")
    elif b.target is not None:  # stopped by a failing check, or sampled up to the cap
        why = "at the sample cap" if s.status is Status.PASSED else f"(the scenario {s.status.value})"
        line.append(f" NOT certified <= {b.target:g} {why}", style="bold yellow")
    return line


def device_line(s: ScenarioResult) -> Text | None:
    """Return how a scenario simulated on a device was batched ("on cuda: 27.4 rows per verifier call ..."), or None."""
    device, rows = s.info.get("device"), s.info.get("rows_per_call")
    if not isinstance(device, str) or not isinstance(rows, (int, float)):
        return None
    budget = s.info.get("device_budget")
    sized = f" (batch sized from {budget / (1 << 30):.2f} GiB)" if isinstance(budget, (int, float)) else ""
    return Text.assemble((f"{s.name}: ", "bold"), f"on {device}: {rows:g} rows per verifier call{sized}")


def reference_line(result: RunResult) -> Text | None:
    """Return which engine's sampler each scenario of raw logits was checked against, or None when none is."""
    by: dict[str, list[str]] = {}
    for s in result.scenarios:
        if isinstance(name := s.info.get("reference"), str):
            by.setdefault(name, []).append(s.name)
    if not by:
        return None
    parts = [f"{name} sampling convention ({len(names)} scenario{'s' * (len(names) != 1)})" for name, names in by.items()]
    return Text.assemble(("reference: ", "bold"), "; ".join(parts))


def render(result: RunResult, console: Console, verbosity: int = 0) -> None:
    """Print the run: table (unless quiet), failure details, and the final line."""
    result = fmt.shown(result)  # every string a verifier, a user or a results file wrote: control characters escaped
    if verbosity >= 0:
        console.print(summary_table(result, console.width))
        render_power(result, console, verbosity)  # the run's sensitivity: what each scenario could detect
    certify = result.settings.get("certify_tv") is not None
    if verbosity >= 0 or certify:  # how close, not only "no evidence against" (specaudit.stats.certificate)
        for line in filter(None, (certificate_line(s, certify) for s in result.scenarios)):
            console.print(line)
    if verbosity >= 0:
        for line in filter(None, (device_line(s) for s in result.scenarios)):
            console.print(line)
        for s in result.scenarios:
            if s.status in (Status.FAILED, Status.SUSPECT, Status.ERROR) or verbosity > 0:
                _details(console, s)
    references = reference_line(result)
    if references is not None and verbosity >= 0:
        console.print(references)
    counts: dict[Status, int] = {}
    for s in result.scenarios:
        counts[s.status] = counts.get(s.status, 0) + 1
    parts = ", ".join(f"{n} {_plural(st, n)}" for st, n in sorted(counts.items(), key=lambda kv: -kv[0].severity))
    line = Text.assemble(
        ("specaudit: ", "bold"),
        (result.status.value.upper(), STYLE[result.status]),
        f" ({parts or 'nothing run'}) at family-wise alpha {result.alpha:g}, {result.seconds:.1f}s",
    )
    if result.interrupted:
        line.append(" - interrupted", style="bold yellow")
    elif certify and result.status is Status.PASSED:
        missing = result.uncertified()
        bounded = sum(s.certificate is not None for s in result.scenarios)
        which = "" if bounded == len(result.scenarios) else f" ({bounded} of {len(result.scenarios)} scenarios have a joint law)"
        line.append(f"; TV <= {result.settings['certify_tv']:g} " + (
            f"certified{which}" if not missing else f"NOT certified at the sample cap ({', '.join(missing)}): exit 6"),
            style="bold green" if not missing else "bold yellow")
    console.print(line)
