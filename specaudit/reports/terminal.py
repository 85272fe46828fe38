"""Terminal report (rich): the summary table, details of failures, a one-line verdict."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from specaudit.reports import format as fmt
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


def summary_table(result: RunResult) -> Table:
    """Return the table: one row per scenario x check."""
    table = Table(title=Text(f"specaudit {result.version}: {result.target}"), title_justify="left")
    for col in ("scenario", "check", "statistic", "p (Holm)", "TV (null)", "tokens/step (exact)", "verdict"):
        table.add_column(col, justify="right" if col not in ("scenario", "check", "verdict") else "left")
    for s in result.scenarios:
        if s.error is not None:
            where = f" [{s.error.clause}]" if s.error.clause else ""
            table.add_row(Text(s.name), Text(f"{s.error.kind}{where}"), "", "", "", "", Text("error", STYLE[Status.ERROR]))
            continue
        # a SUSPECT scenario's re-run (fresh seed, 4x samples) follows its first result
        for part in s.attempts():
            label = s.name if part is s else f"{s.name} (re-run, N {part.samples:,})"
            for c in part.checks:
                d = c.data
                tv = f"{d['tv']:.4f} ({d['tv_null']:.4f})" if "tv_null" in d else ""
                tps = f"{d['estimate']:.3f} ({d['exact']:.3f})" if c.name == "tokens-per-step" else ""
                stat = "" if c.statistic is None else (f"{c.statistic:.1f}" + (f"/{c.df}df" if c.df is not None else ""))
                verdict = Text(c.status.value + ("" if c.gate else " (not gating)"), STYLE[c.status])
                table.add_row(Text(label), Text(c.name), stat, fmt.pvalue(c.adjusted_pvalue if c.adjusted_pvalue is not None else c.pvalue), tv, tps, verdict)
    return table


def _details(console: Console, s: ScenarioResult) -> None:
    if s.error is not None:
        console.print(Text.assemble((s.name, "bold magenta"), f": {s.error.message}"))  # text, never markup
        if s.error.traceback:
            console.print(Text(s.error.traceback, style="dim"))
        return
    for c in s.checks:
        if c.status not in (Status.FAILED, Status.SUSPECT):
            continue
        console.print(Text.assemble((f"{s.name} / {c.name}: ", "bold"), c.summary))
        top = c.data.get("top_cells") or []
        if top:
            t = Table("sequence", "observed", "expected", "std. residual", title="most deviating cells", title_justify="left")
            for cell in top[:5]:
                t.add_row(str(cell["cell"]), str(cell["observed"]), f"{cell['expected']:.1f}", f"{cell['residual']:+.1f}")
            console.print(t)
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
    if verbosity >= 0:
        _baseline_table(comparison, console)
    for reg in comparison.regressions:
        console.print(Text.assemble(("regression: ", "bold red"), reg["message"]))
    if comparison.not_comparable:
        console.print(Text(f"not comparable (scenario changed): {', '.join(comparison.not_comparable)}", style="yellow"))


def _baseline_table(comparison: Comparison, console: Console) -> None:
    t = Table("scenario", "verdict then -> now", "tokens/step then -> now", "change", "note",
              title=f"against baseline {comparison.path}", title_justify="left")
    for r in comparison.rows:
        tps = f"{fmt.optional(r.old_tps, '.4f')} -> {fmt.optional(r.new_tps, '.4f')}" if r.old_tps is not None or r.new_tps is not None else ""
        change = "" if r.tps_change is None else f"{100 * r.tps_change:+.2f}%"
        t.add_row(Text(r.scenario), f"{r.old_status or '-'} -> {r.new_status or '-'}", tps, change, Text(r.note))
    console.print(t)


def render(result: RunResult, console: Console, verbosity: int = 0) -> None:
    """Print the run: table (unless quiet), failure details, and the final line."""
    if verbosity >= 0:
        console.print(summary_table(result))
        render_power(result, console, verbosity)  # the run's sensitivity: what each scenario could detect
        for s in result.scenarios:
            if s.status in (Status.FAILED, Status.SUSPECT, Status.ERROR) or verbosity > 0:
                _details(console, s)
    counts: dict[Status, int] = {}
    for s in result.scenarios:
        counts[s.status] = counts.get(s.status, 0) + 1
    parts = ", ".join(f"{n} {st.value}" for st, n in sorted(counts.items(), key=lambda kv: -kv[0].severity))
    line = Text.assemble(
        ("specaudit: ", "bold"),
        (result.status.value.upper(), STYLE[result.status]),
        f" ({parts or 'nothing run'}) at family-wise alpha {result.alpha:g}, {result.seconds:.1f}s",
    )
    if result.interrupted:
        line.append(" - interrupted", style="bold yellow")
    console.print(line)
