"""Terminal rendering of what the checks could detect: per-run power, `plan` and `selftest`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.text import Text

from specaudit.reports.columns import Cell, Column, fit_first, fit_matrix
from specaudit.results import RunResult

#: Power below which a mutant is listed as "weak" in the run's power table.
WEAK = 0.99


def _tv(x: Any) -> str:
    if x is None:
        return ""
    x = float(x)
    return "none" if x == float("inf") else "0" if x == 0 else f"{x:.4f}" if x >= 1e-3 else f"{x:.1e}"


def _power(x: Any) -> str:
    if x is None:
        return "n/a"
    x = float(x)
    return "1" if x >= 1 - 5e-7 else "0" if x == 0 else f"{x:.3f}" if x >= 1e-3 else f"{x:.1e}"


def _entry(m: Any) -> Mapping[str, Any]:
    """Return one mutant's power entry as an object: a bare figure (a document's generic form) is its power."""
    return m if isinstance(m, Mapping) else {} if m is None else {"power": m}


def _weak(per: Mapping[str, Mapping[str, Any]]) -> str:
    """Return the distribution mutants below WEAK power, blind (TV 0) ones apart."""
    blind: list[str] = []
    weak: list[str] = []
    for name, m in per.items():
        if not isinstance(m, Mapping):  # a bare power figure (a document's generic form): no kind to weigh
            continue
        if m.get("kind") != "distribution" or m.get("power") is None or m["power"] >= WEAK:
            continue
        (blind if m.get("same_law") else weak).append(f"{name} {_power(m['power'])}")
    parts = ([", ".join(weak)] if weak else []) + ([f"law unchanged here: {', '.join(n.split()[0] for n in blind)}"] if blind else [])
    return "; ".join(parts)


#: The power table's columns; a mutant name never breaks (it has no space).
_POWER_COLUMNS = (
    Column("scenario"),
    Column("N", "right"),
    Column("groups", "right"),
    Column("detectable TV", "right"),
    Column("resample_from_p", "right"),
    Column("weak (distribution mutants)"),
)


def power_table(result: RunResult, verbosity: int = 0, width: int | None = None) -> RenderableType | None:
    """Return the per-scenario power table fitted to ``width`` (None when no scenario has power figures).

    A console too narrow for the table gets one wrapped line per scenario instead.
    """
    rows: list[tuple[Any, Mapping[str, Any], Mapping[str, Any]]] = [
        (s, s.info["sensitivity"], s.info.get("power") or {}) for s in result.scenarios if s.info.get("sensitivity")
    ]
    if not rows:
        return None
    head = rows[0][1]
    title = (
        f"power of the joint-law check at level alpha/m = {head['family_alpha']:g}/{head['tests']} "
        f"= {head['alpha']:.2g} (detectable TV at power {head['target_power']:g}; mutants with power < {WEAK:g})"
    )
    body: list[list[Cell]] = []
    for s, sens, per in rows:
        bug = _entry(per.get("resample_from_p"))
        style = "yellow" if sens.get("flag") else ""
        body.append([s.name, f"{sens['samples']:,}", str(sens["groups"]), _tv(sens["detectable_tv"]),
                     Text(_power(bug.get("power")) if bug else "", style=style), _weak(per)])
    table = fit_first(_POWER_COLUMNS, body, width, title=title)
    if table is not None:
        return table
    lines = [Text(title)]
    for row in body:
        fields = ", ".join(f"{col.header} {cell}" for col, cell in zip(_POWER_COLUMNS[1:], row[1:]) if str(cell))
        lines.append(Text.assemble((f"{row[0]}: ", "bold"), fields))
    return Group(*lines)


def mutant_table(result: RunResult, width: int | None = None) -> list[RenderableType] | None:
    """Return the full matrix: power of every scenario's joint-law check against every mutant."""
    rows = [(s.name, s.info.get("power") or {}) for s in result.scenarios if s.info.get("power")]
    if not rows:
        return None
    names = list(rows[0][1])
    body: list[tuple[list[Cell], list[Cell]]] = [
        ([name, _entry(rows[0][1][name]).get("kind", "")], [_power(_entry(per.get(name)).get("power")) for _, per in rows])
        for name in names
    ]
    return fit_matrix((Column("mutant"), Column("kind")), [r[0] for r in rows], body, width,
                      title="power per mutant (law: exact / simulated / lossless)")


def render_power(result: RunResult, console: Console, verbosity: int = 0) -> None:
    """Print the power table (with -v the whole mutant matrix) and every flagged scenario."""
    table = power_table(result, verbosity, console.width)
    if table is None:
        return
    console.print(table)
    if verbosity > 0:
        for part in mutant_table(result, console.width) or ():
            console.print(part)
    for s in result.scenarios:
        flag = (s.info.get("sensitivity") or {}).get("flag")
        if flag:
            console.print(Text.assemble(("flagged: ", "bold yellow"), (f"{s.name}: ", "bold"), flag))


def render_plan(plans: list[Any], console: Console) -> None:
    """Print ``specaudit plan`` answers (a list of ``specaudit.analysis.plan.PlanAnswer``)."""
    for p in plans:
        console.print(Text.assemble(
            (p.scenario, "bold"),
            f": joint-law check over {p.cells:,} cells, level {p.alpha:.3g} per test, power {p.power:g}",
        ))
        if p.samples is not None:
            tv = "nothing (one merged group)" if p.detectable_tv == float("inf") else f"TV >= {p.detectable_tv:.4f}"
            console.print(f"  at N = {p.samples:,} ({p.groups} groups after merging): detects every alternative at {tv} "
                          "(simulation-verified)")
        if p.tv is not None:
            n = "not reachable (<= 1e12)" if p.samples_for_tv is None else f"N >= {p.samples_for_tv:,}"
            console.print(f"  to detect TV {p.tv:g} in every direction: {n}")
        if p.mutant is not None:
            n = "never (its law matches the target on the merged cells)" if p.samples_for_mutant is None else f"N >= {p.samples_for_mutant:,}"
            ncx2 = "" if p.samples_for_mutant_ncx2 is None else f" (noncentral chi-square: {p.samples_for_mutant_ncx2:,})"
            console.print(f"  to catch {p.mutant} (law {p.mutant_law}, TV {p.mutant_tv:.4f}): {n}{ncx2}")
            if p.mutant_power is not None:
                console.print(f"  power against {p.mutant} at N = {p.samples:,}: {p.mutant_power:.3f} "
                              f"(noncentral chi-square {p.mutant_power_ncx2:.3f})")


#: The calibration table's columns: whole headers, wrapped at spaces (issue 19).
_CALIBRATION_COLUMNS = (
    Column("scenario"),
    Column("check"),
    Column("KS p", "right"),
    Column("KS p (Holm)", "right"),
    Column("false alarms (p <= alpha)", "right"),
)


def render_selftest(result: Any, console: Console, verbosity: int = 0) -> None:
    """Print a ``specaudit.engine.selftest.SelftestResult``: calibration, the zoo, problems, verdict."""
    rows: list[list[Cell]] = []
    for c in result.checks:
        if c.degenerate:
            if verbosity > 0:
                rows.append([c.scenario, c.check, "degenerate", "", str(c.false_alarms)])
            continue
        style = "red" if c.adjusted_ks_pvalue <= 0.01 else ""
        rows.append([c.scenario, c.check, f"{c.ks_pvalue:.3g}", Text(f"{c.adjusted_ks_pvalue:.3g}", style=style),
                     str(c.false_alarms)])
    title = f"calibration: reference over {result.seeds} seeds, {result.samples:,} sequences per scenario"
    if verbosity >= 0:
        table: RenderableType | None = fit_first(_CALIBRATION_COLUMNS, rows, console.width, title=title)
        if table is None:  # narrower than any table: one line per check
            table = Group(Text(title), *(Text(f"{r[0]} / {r[1]}: KS p {r[2]}, Holm {r[3]}, false alarms {r[4]}")
                                         for r in rows))
        console.print(table)
    console.print(
        f"KS p (smallest, Holm over checks) = {result.ks_pvalue:.3g}; pooled KS p = {result.pooled_ks_pvalue:.3g}; "
        f"false alarms at most {result.check_limit} per check of {result.seeds} runs (gating); pooled "
        f"{result.false_alarms} of {result.tests} p-values at alpha {result.alpha:g} (Binomial 99% interval "
        f"{result.interval[0]}..{result.interval[1]} if the checks were independent; reported only); "
        f"failed null runs {result.runs_failed} of {result.seeds} (at most {result.runs_limit})"
    )
    if result.tails:
        flagged = [t for t in result.tails if t.flagged]
        checks = sorted({t.check for t in result.tails})
        console.print(
            f"exact-null draws: {result.draws:,} per (scenario, check) of {len(checks)} checks "
            f"({', '.join(checks)}); {len(result.tails)} tail tests at levels 0.1 .. 1e-4 (Bonferroni, 0.01 in all): "
            + (f"{len(flagged)} flagged" if flagged else "none flagged") + f" in {result.law_seconds:.0f}s")
        if verbosity > 0:
            for t in result.tails:
                if t.scenario == "(pooled)" or t.flagged:
                    console.print(f"  {t.scenario} / {t.check} at {t.level:g}: {t.hits} of {t.draws:,} (x{t.ratio:.2f})"
                                  + (" FLAGGED" if t.flagged else ""), highlight=False)
    if result.mutants:
        scenarios = list(dict.fromkeys(o.scenario for o in result.mutants))
        by = {(o.mutant, o.scenario): o for o in result.mutants}
        body: list[tuple[list[Cell], list[Cell]]] = []
        for name in dict.fromkeys(o.mutant for o in result.mutants):
            kind = by[(name, scenarios[0])].kind
            cells: list[Cell] = []
            for sc in scenarios:
                o = by.get((name, sc))
                if o is None:
                    cells.append("")
                elif not o.ok:
                    cells.append(Text("X", style="bold red"))
                else:
                    mark = "D" if o.status in ("failed", "error") else "."
                    cells.append(Text(mark + ("!" if o.expected == "detect" else ""), style="green" if mark == "D" else ""))
            body.append(([name, kind], cells))
        if verbosity >= 0:
            for part in fit_matrix((Column("mutant"), Column("kind")), scenarios, body, console.width,
                                   title="zoo: D = detected (X: promised and missed), . = passed"):
                console.print(part)
            console.print("D! = detection promised (predicted joint-law power >= 0.999) and made", style="dim")
    for p in result.problems:
        console.print(Text.assemble(("problem: ", "bold red"), p))
    verdict = "OK" if int(result.exit_code()) == 0 else "FAILED"
    console.print(Text.assemble(
        ("specaudit selftest: ", "bold"), (verdict, "green" if verdict == "OK" else "bold red"),
        f" (calibrated: {'yes' if result.calibrated else 'no'}, zoo: {'ok' if result.mutants_ok else 'missed'}) "
        f"in {result.seconds:.0f}s (calibration {result.calibration_seconds:.0f}s, zoo {result.mutant_seconds:.0f}s)",
    ))
