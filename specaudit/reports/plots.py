"""Plots for the HTML report: matplotlib figures rendered to inline SVG strings.

Every function takes a RunResult (the run-wide plots) or one check's JSON-able ``data`` and
returns an SVG string, or None when the data do not suit the plot. Plots are chosen by the
keys a check's data carries, not by the check's name, so a new check that stores, say,
``observed``/``expected`` gets the per-cell plot without a special case.

Output is deterministic (fixed SVG id salt, no date), so the same JSON gives the same bytes.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib import rc_context
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure

from specaudit.results import RunResult

RC: dict[Any, Any] = {
    "svg.hashsalt": "specaudit",  # deterministic element ids
    "svg.fonttype": "none",  # text stays text: small files, selectable labels
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
}
COLOURS = {
    "passed": "#1a7f37",
    "suspect": "#b08800",
    "failed": "#cf222e",
    "error": "#8250df",
    "skipped": "#8c959f",
    "pending": "#0969da",
}
OBSERVED, EXPECTED, BAND = "#0969da", "#24292f", "#d0d7de"


def _num(x: Any) -> float:
    """Return a float from a JSON number or the strings 'inf', '-inf', 'nan'."""
    if x is None:
        return math.nan
    return float(x)


def _vector(value: Any) -> np.ndarray | None:
    """Return a flat float vector from a JSON list of numbers, or None for anything else."""
    if not isinstance(value, list) or not value or not all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in value):
        return None
    try:
        return np.asarray([_num(v) for v in value], dtype=np.float64)
    except ValueError:
        return None


def _svg(fig: Figure) -> str:
    """Return the figure as an SVG string without the XML prolog (for inlining in HTML)."""
    buf = io.StringIO()
    FigureCanvasSVG(fig)
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    # drop the RDF metadata block: nothing in the page should even name an outside URL but the SVG namespace
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.S)
    return text[text.index("<svg") :]


def _figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def _render(draw: Callable[..., Figure | None], *args: Any) -> str | None:
    with rc_context(RC):
        fig = draw(*args)
        return None if fig is None else _svg(fig)


def _cell_labels(n: int, vocab: int | None, length: int | None) -> list[str]:
    if vocab and length and vocab**length == n and n <= 64:
        return ["".join(str(int(d)) if vocab <= 10 else f"{int(d)}." for d in np.unravel_index(i, (vocab,) * length)).rstrip(".") for i in range(n)]
    return [str(i) for i in range(n)]


# ------------------------------------------------------------------------------------------
# run-wide plots
# ------------------------------------------------------------------------------------------


def pvalues(result: RunResult) -> str | None:
    """Plot -log10 of every check's raw p-value (bar) and Holm-adjusted p-value (dot) against alpha."""
    rows = []
    for s in result.scenarios:
        for c in s.checks:
            raw, adj = c.pvalue, c.adjusted_pvalue
            if raw is None and adj is None:
                continue
            rows.append((f"{s.name} / {c.name}", _num(raw if raw is not None else adj), _num(adj if adj is not None else raw), c.status.value))
    if not rows:
        return None
    cap = 300.0

    def height(p: float) -> float:
        return cap if p <= 0 else min(cap, -math.log10(p)) if math.isfinite(p) else 0.0

    def draw() -> Figure:
        fig = _figure(7.5, 0.9 + 0.22 * len(rows))
        ax = fig.add_subplot()
        y = np.arange(len(rows))[::-1]
        colours = [COLOURS.get(st, "#888") for *_, st in rows]
        raw = [height(r[1]) for r in rows]
        adj = [height(r[2]) for r in rows]
        ax.barh(y, raw, color=colours, alpha=0.35, height=0.7, label="raw p")
        ax.scatter(adj, y, color=colours, s=18, zorder=3, label="Holm-adjusted p")
        alpha = _num(result.alpha)
        line = -math.log10(alpha)
        ax.axvline(line, color=EXPECTED, ls="--", lw=1)
        ax.text(line, len(rows) - 0.45, f" alpha = {alpha:g}", fontsize=8, va="bottom")
        ax.set_yticks(y, [r[0] for r in rows])
        top = max(max(raw), line * 1.6)
        ax.set_xscale("symlog", linthresh=10, linscale=2)
        ticks = [t for t in (0, 1, 2, 3, 5, 10, 30, 100, 300) if t <= top * 1.05]
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlim(0, top * 1.1)
        ax.set_ylim(-0.6, len(rows) - 0.1)
        ax.set_xlabel("-log10 p (bar: raw, dot: Holm-adjusted); a dot past the dashed line fails")
        ax.legend(loc="lower right", fontsize=7, frameon=False)
        ax.set_title("p-values of all checks", loc="left")
        return fig

    return _render(draw)


def tokens_per_step(result: RunResult) -> str | None:
    """Plot every scenario's tokens/step estimate with its 99.9% interval against the exact value."""
    rows = []
    for s in result.scenarios:
        for c in s.checks:
            d = c.data or {}
            ci = _vector(d.get("ci999"))
            if ci is not None and ci.size == 2 and _vector([d.get("estimate"), d.get("exact")]) is not None and _num(d["exact"]) > 0:
                rows.append((s.name, d, c.status.value))
    if not rows:
        return None

    def draw() -> Figure:
        fig = _figure(7.5, 0.8 + 0.3 * len(rows))
        ax = fig.add_subplot()
        for i, (_name, d, st) in enumerate(rows):
            y = len(rows) - 1 - i
            exact = _num(d["exact"])
            lo, hi = (_num(v) / exact for v in d["ci999"])
            ax.plot([lo, hi], [y, y], color=COLOURS.get(st, "#888"), lw=3, solid_capstyle="butt")
            ax.plot(_num(d["estimate"]) / exact, y, "o", color=COLOURS.get(st, "#888"), ms=5)
        ax.axvline(1.0, color=EXPECTED, lw=1)
        ax.set_yticks(range(len(rows))[::-1], [r[0] for r in rows])
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.set_xlabel("measured / exact tokens per step (dot: estimate, bar: 99.9% interval)")
        ax.set_title("tokens per step against the exact value", loc="left")
        return fig

    return _render(draw)


def power(rows: Sequence[tuple[str, float]], title: str = "power per mutant") -> str | None:
    """Plot detection power (0..1) per mutant as horizontal bars."""
    rows = [(n, _num(p)) for n, p in rows if p is not None and math.isfinite(_num(p))]
    if not rows:
        return None

    def draw() -> Figure:
        fig = _figure(6.0, 0.7 + 0.22 * len(rows))
        ax = fig.add_subplot()
        y = np.arange(len(rows))[::-1]
        ax.barh(y, [p for _, p in rows], color=OBSERVED, height=0.7)
        for yi, (_, p) in zip(y, rows):
            ax.text(min(p, 1.0) + 0.01, yi, f"{p:.2f}", va="center", fontsize=8)
        ax.set_yticks(y, [n for n, _ in rows])
        ax.set_xlim(0, 1.12)
        ax.set_xlabel("probability of failing the mutant at this scenario's sample size")
        ax.set_title(title, loc="left")
        return fig

    return _render(draw)


# ------------------------------------------------------------------------------------------
# per-check plots, chosen by the keys of the check's data
# ------------------------------------------------------------------------------------------


def cells(data: Mapping[str, Any], vocab: int | None = None, length: int | None = None) -> str | None:
    """Plot observed vs expected counts per cell and the standardised residuals."""
    obs, exp = _vector(data.get("observed")), _vector(data.get("expected"))
    if obs is None or exp is None or obs.shape != exp.shape:
        return top_cells(data)
    with np.errstate(divide="ignore", invalid="ignore"):
        resid = np.where(exp > 0, (obs - exp) / np.sqrt(exp), np.where(obs > 0, np.nan, 0.0))
    impossible = (exp <= 0) & (obs > 0)
    n = obs.size

    def draw() -> Figure:
        fig = _figure(7.5, 4.6)
        top, bottom = fig.subplots(2, 1, height_ratios=[3, 2])
        x = np.arange(n)
        if n <= 256:
            top.bar(x, exp, width=0.85, color=BAND, label="expected (exact law)")
            top.plot(x, obs, "o", ms=2.5 if n > 64 else 3.5, color=OBSERVED, label="observed")
            top.set_xlim(-0.8, n - 0.2)
            top.set_xlabel("cell (sequence index)")
            top.set_ylabel("count")
        else:
            pos = (exp > 0) & (obs > 0)
            top.loglog(exp[pos], obs[pos], ".", ms=2, color=OBSERVED, label="cells")
            lo, hi = max(exp[exp > 0].min(), 0.1), exp.max()
            grid = np.geomspace(lo, hi, 50)
            top.fill_between(grid, np.maximum(grid - 3 * np.sqrt(grid), lo / 2), grid + 3 * np.sqrt(grid), color=BAND, label="+-3 sd")
            top.plot(grid, grid, color=EXPECTED, lw=1, label="observed = expected")
            top.set_xlabel("expected count")
            top.set_ylabel("observed count")
        if impossible.any():
            top.plot(np.flatnonzero(impossible), obs[impossible], "x", color=COLOURS["failed"], label="probability 0")
        top.legend(loc="upper right", fontsize=7, frameon=False)
        top.set_title("observed vs expected per cell", loc="left")
        shown = np.nan_to_num(resid, nan=0.0)
        colours = np.where(np.abs(shown) > 3, COLOURS["failed"], OBSERVED)
        bottom.axhspan(-3, 3, color=BAND, alpha=0.5, lw=0)
        if n <= 1024:
            bottom.vlines(x, 0, shown, colors=colours, lw=1.2 if n <= 256 else 0.6)
        else:
            bottom.plot(x, shown, ".", ms=1.5, color=OBSERVED)
        if impossible.any():
            bottom.plot(np.flatnonzero(impossible), np.zeros(int(impossible.sum())), "x", color=COLOURS["failed"])
        bottom.axhline(0, color=EXPECTED, lw=0.6)
        bottom.set_xlim(-0.8, n - 0.2)
        bottom.set_ylabel("(obs - exp) / sqrt(exp)")
        bottom.set_xlabel("cell (sequence index); shaded: +-3")
        if n <= 64 and vocab and length:
            bottom.set_xticks(x, _cell_labels(n, vocab, length), rotation=90, fontsize=6)
        bottom.set_title("standardised residuals", loc="left")
        return fig

    return _render(draw)


def top_cells(data: Mapping[str, Any]) -> str | None:
    """Plot the standardised residuals of the most deviating cells (when the law is too large to store)."""
    top = data.get("top_cells")
    if not isinstance(top, list) or not top or not all(isinstance(t, Mapping) and {"cell", "residual"} <= t.keys() for t in top):
        return None

    def draw() -> Figure:
        fig = _figure(7.0, 0.8 + 0.25 * len(top))
        ax = fig.add_subplot()
        y = np.arange(len(top))[::-1]
        vals = [_num(t["residual"]) for t in top]
        finite = [v if math.isfinite(v) else 0.0 for v in vals]
        ax.barh(y, finite, color=[COLOURS["failed"] if abs(v) > 3 else OBSERVED for v in vals], height=0.7)
        ax.set_yticks(y, [" ".join(str(x) for x in t["cell"]) for t in top])
        ax.axvspan(-3, 3, color=BAND, alpha=0.5, lw=0)
        ax.set_xlabel("(obs - exp) / sqrt(exp)")
        ax.set_title("most deviating cells", loc="left")
        return fig

    return _render(draw)


def interval(data: Mapping[str, Any]) -> str | None:
    """Plot an estimate and its 99.9% interval against the exact value."""
    ci = _vector(data.get("ci999"))
    if ci is None or ci.size != 2 or _vector([data.get("estimate"), data.get("exact")]) is None:
        return None
    est, exact = _num(data["estimate"]), _num(data["exact"])
    lo, hi = ci

    def draw() -> Figure:
        fig = _figure(6.0, 1.4)
        ax = fig.add_subplot()
        ax.plot([lo, hi], [0, 0], color=OBSERVED, lw=4, solid_capstyle="butt", label="99.9% interval")
        ax.plot(est, 0, "o", color=OBSERVED, ms=7, label=f"measured {est:.4f}")
        ax.axvline(exact, color=COLOURS["failed"] if not lo <= exact <= hi else EXPECTED, lw=1.5, label=f"exact {exact:.4f}")
        if "closed_form" in data:
            ax.axvline(_num(data["closed_form"]), color=EXPECTED, ls=":", lw=1, label="closed form")
        span = max(hi - lo, abs(est - exact), 1e-9)
        ax.set_xlim(min(lo, exact) - span, max(hi, exact) + span)
        ax.set_yticks([])
        ax.spines["left"].set_visible(False)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=4, fontsize=7, frameon=False)
        ax.set_title("tokens per step", loc="left")
        return fig

    return _render(draw)


def histogram(data: Mapping[str, Any]) -> str | None:
    """Plot accepted-count histograms against their exact laws (first round, and all rounds)."""
    panels = []
    obs, exp = _vector(data.get("observed_first")), _vector(data.get("expected_first"))
    if obs is not None and exp is not None and obs.shape == exp.shape:
        total = obs.sum() or 1.0
        panels.append(("first round (the tested law)", obs / total, exp / total))
    obs, exp = _vector(data.get("observed_all")), _vector(data.get("expected_all"))
    if obs is not None and exp is not None and obs.shape == exp.shape:
        panels.append(("all rounds (descriptive)", obs, exp))
    if not panels:
        return None

    def draw() -> Figure:
        fig = _figure(7.5, 2.4)
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, (title, obs, exp) in zip(axes, panels):
            x = np.arange(obs.size)
            ax.bar(x - 0.2, obs, width=0.4, color=OBSERVED, label="observed")
            ax.bar(x + 0.2, exp, width=0.4, color=BAND, edgecolor=EXPECTED, lw=0.6, label="exact law")
            ax.set_xticks(x)
            ax.set_xlabel("accepted drafts per round")
            ax.set_ylabel("fraction of rounds")
            ax.set_title(title, loc="left")
        axes[0].legend(fontsize=7, frameon=False)
        return fig

    return _render(draw)


#: Per-check plots, tried in order; each returns None when the data lack its keys.
CHECK_PLOTS: tuple[Callable[..., str | None], ...] = (cells, interval, histogram)


def for_check(data: Mapping[str, Any], vocab: int | None = None, length: int | None = None) -> list[str]:
    """Return every plot that suits a check's data."""
    out = []
    for plot in CHECK_PLOTS:
        try:
            svg = plot(data, vocab, length) if plot is cells else plot(data)
        except (TypeError, ValueError, KeyError):  # data of an unexpected shape: no plot, never no report
            svg = None
        if svg:
            out.append(svg)
    return out
