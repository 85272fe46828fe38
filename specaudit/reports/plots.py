"""Plots for the HTML report: small hand-written inline SVG, no plotting library.

Every function takes a RunResult (the run-wide plots) or one check's JSON-able ``data`` and
returns an SVG string, or None when the data do not suit the plot. Plots are chosen by the
keys a check's data carries, not by the check's name, so a new check that stores, say,
``observed``/``expected`` gets the per-cell plot without a special case.

The SVG is written by hand rather than by matplotlib: a default run's page went from 1.4 MB
and ~10 s of CPU (matplotlib figures, one glyph path per text run) to a few kB per plot and
milliseconds. Marks of one kind are one ``<path>`` (coordinates rounded to 0.1 px), colours and
fonts come from CSS classes of the page (``.plot`` rules in ``report.html.j2``), and every
string (scenario, check, mutant names) is XML-escaped text: nothing is typeset, so a name like
``$x^2$`` shows as written. Output is a pure function of the input (no ids, no dates), so the
same JSON gives the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from html import escape
from typing import Any

from specaudit.results import RunResult

#: Width of every plot (SVG user units; the page scales it down to its column).
WIDTH = 720
#: Rows a bar-per-row plot shows at most (the most significant ones); the rest are counted.
MAX_ROWS = 60
#: Average advance of a character at the plots' 10 px font, used to size label margins.
CHAR = 5.8


def _num(x: Any) -> float:
    """Return a float from a JSON number or the strings 'inf', '-inf', 'nan'."""
    if x is None:
        return math.nan
    return float(x)


def _vector(value: Any) -> list[float] | None:
    """Return a list of floats from a JSON list of numbers, or None for anything else."""
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in value):
        return None
    try:
        return [_num(v) for v in value]
    except ValueError:
        return None


def _c(x: float) -> str:
    """Format a coordinate with at most one decimal."""
    r = round(x, 1)
    i = int(r)
    return str(i) if r == i else f"{r:.1f}"


def _label(value: float) -> str:
    """Format a tick label: short, no trailing zeros, scientific only when needed."""
    if value == 0:
        return "0"
    a = abs(value)
    if a >= 1e6 or a < 1e-3:
        return f"{value:.0e}".replace("e+0", "e").replace("e-0", "e-")
    if value == round(value):
        return f"{round(value):,}"
    return f"{value:.4g}"


def _fit(text: str, room: float) -> str:
    """Return ``text`` shortened with an ellipsis to fit ``room`` px (the full text goes in a <title>)."""
    n = max(int(room / CHAR), 4)
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Return round tick values covering [lo, hi] (about ``n`` of them)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9)
    return [round(k * step, 12) for k in range(first, int(math.floor(hi / step + 1e-9)) + 1)]


class _Svg:
    """Collect SVG elements for one plot; :meth:`done` returns the markup."""

    def __init__(self, height: float, title: str):
        self.height = height
        self.parts: list[str] = [f"<text class=\"t\" x=\"4\" y=\"13\">{escape(title)}</text>"]
        self.title = title

    def text(self, x: float, y: float, s: str, cls: str = "", anchor: str = "", full: str | None = None) -> None:
        a = f' text-anchor="{anchor}"' if anchor else ""
        k = f' class="{cls}"' if cls else ""
        tip = f"<title>{escape(full)}</title>" if full and full != s else ""
        self.parts.append(f'<text x="{_c(x)}" y="{_c(y)}"{k}{a}>{tip}{escape(s)}</text>')

    def vtexts(self, points: Iterable[tuple[float, float, str]]) -> None:
        """Write each label rotated to read bottom-up, ending at its (x, y): one rotated group, short elements."""
        # in a group rotated by -90 degrees, the page point (x, y) is (-y, x)
        texts = "".join(f'<text x="{_c(-y)}" y="{_c(x)}">{escape(s)}</text>' for x, y, s in points)
        self.parts.append(f'<g transform="rotate(-90)" text-anchor="end" class="s">{texts}</g>')

    def path(self, d: str | Iterable[str], cls: str) -> None:
        d = d if isinstance(d, str) else "".join(d)
        if d:
            self.parts.append(f'<path class="{cls}" d="{d}"/>')

    def done(self) -> str:
        return (f'<svg viewBox="0 0 {WIDTH} {_c(self.height)}" width="{WIDTH}" height="{_c(self.height)}" '
                f'role="img" aria-label="{escape(self.title)}">{"".join(self.parts)}</svg>')


class _Axis:
    """A linear (or custom) map from data to pixels along one axis."""

    def __init__(self, lo: float, hi: float, a: float, b: float, f: Callable[[float], float] = lambda v: v):
        self.f, self.a, self.b = f, a, b
        self.lo, self.hi = f(lo), f(hi)
        if not self.hi > self.lo:
            self.hi = self.lo + 1.0

    def __call__(self, v: float) -> float:
        return self.a + (self.f(v) - self.lo) / (self.hi - self.lo) * (self.b - self.a)


def _xaxis(svg: _Svg, x: _Axis, y0: float, ticks: Sequence[float], label: str, names: Sequence[str] | None = None) -> None:
    """Draw a horizontal axis at ``y0`` with tick marks, tick labels and a caption."""
    svg.path([f"M{_c(x.a)} {_c(y0)}H{_c(x.b)}", *(f"M{_c(x(t))} {_c(y0)}v4" for t in ticks)], "ax")
    for i, t in enumerate(ticks):
        svg.text(x(t), y0 + 14, names[i] if names else _label(t), anchor="middle")
    svg.text((x.a + x.b) / 2, y0 + 28, label, cls="s", anchor="middle")


def _yaxis(svg: _Svg, y: _Axis, x0: float, ticks: Sequence[float], label: str = "") -> None:
    """Draw a vertical axis at ``x0`` with tick marks and labels."""
    svg.path([f"M{_c(x0)} {_c(y.a)}V{_c(y.b)}", *(f"M{_c(x0)} {_c(y(t))}h-4" for t in ticks)], "ax")
    for t in ticks:
        svg.text(x0 - 6, y(t) + 3.5, _label(t), anchor="end")
    if label:
        svg.text(x0 + 4, y.b + 8, label, cls="s")


def _rows_frame(labels: Sequence[str], height_per_row: float = 14.0, top: float = 24.0, bottom: float = 40.0,
                max_left: float = 0.45 * WIDTH) -> tuple[float, float, float]:
    """Return (left margin, top of first row, total height) of a bar-per-row plot."""
    left = min(max((len(s) for s in labels), default=4) * CHAR + 10, max_left)
    return left, top, top + height_per_row * len(labels) + bottom


# ------------------------------------------------------------------------------------------
# run-wide plots
# ------------------------------------------------------------------------------------------


def _neglog(p: float, cap: float = 300.0) -> float:
    """Return -log10 p, capped at ``cap`` (p = 0 underflowed: shown at the cap)."""
    if not math.isfinite(p):
        return 0.0
    return cap if p <= 0 else min(cap, -math.log10(p))


def _symlog(v: float) -> float:
    """Linear up to 10, logarithmic beyond (matplotlib's symlog with linthresh 10)."""
    return v if v <= 10 else 10.0 * (1.0 + math.log10(v / 10.0))


def pvalues(result: RunResult) -> str | None:
    """Plot -log10 of every check's raw p-value (bar) and Holm-adjusted p-value (dot) against alpha."""
    rows = []
    for s in result.scenarios:
        for c in s.checks:
            raw, adj = c.pvalue, c.adjusted_pvalue
            if raw is None and adj is None:
                continue
            rows.append((f"{s.name} / {c.name}", _num(raw if raw is not None else adj),
                         _num(adj if adj is not None else raw), c.status.value))
    if not rows:
        return None
    title = "p-values of all checks"
    if len(rows) > MAX_ROWS:  # keep the most significant ones, in run order
        keep = set(sorted(range(len(rows)), key=lambda i: (rows[i][2], i))[:MAX_ROWS])
        title += f" (the {MAX_ROWS} smallest of {len(rows)})"
        rows = [r for i, r in enumerate(rows) if i in keep]
    alpha = _num(result.alpha)
    line = _neglog(alpha)
    bar_v = [_neglog(r[1]) for r in rows]
    dot_v = [_neglog(r[2]) for r in rows]
    top_v = max(max(bar_v), max(dot_v), line * 1.6)
    left, top, height = _rows_frame([r[0] for r in rows])
    svg = _Svg(height, title)
    x = _Axis(0.0, top_v * 1.08, left, WIDTH - 12, _symlog)
    bars: dict[str, list[str]] = {}
    dots: dict[str, list[str]] = {}
    for i, (label, _, _, st) in enumerate(rows):
        yc = top + 14 * i + 7
        svg.text(left - 6, yc + 3.5, _fit(label, left - 10), anchor="end", full=label)
        if bar_v[i] > 0:
            bars.setdefault(st, []).append(f"M{_c(left)} {_c(yc - 5)}H{_c(x(bar_v[i]))}v10H{_c(left)}z")
        dots.setdefault(st, []).append(f"M{_c(x(dot_v[i]))} {_c(yc)}h.01")
    for st, d in bars.items():
        svg.path(d, f"bar f-{st}")
    for st, d in dots.items():
        svg.path(d, f"dot s-{st}")
    y0 = top + 14 * len(rows) + 2
    svg.path(f"M{_c(x(line))} {top - 4}V{_c(y0)}", "ref dash")
    svg.text(x(line) + 3, top - 6, f"alpha = {alpha:g}", cls="s")
    ticks = [t for t in (0, 1, 2, 3, 5, 10, 30, 100, 300) if t <= top_v * 1.08]
    _xaxis(svg, x, y0, ticks, "-log10 p (bar: raw, dot: Holm-adjusted); a dot past the dashed line fails")
    return svg.done()


def tokens_per_step(result: RunResult) -> str | None:
    """Plot every scenario's tokens/step estimate with its 99.9% interval against the exact value."""
    rows = []
    for s in result.scenarios:
        for c in s.checks:
            d = c.data or {}
            ci = _vector(d.get("ci999"))
            pair = _vector([d.get("estimate"), d.get("exact")])
            if ci is not None and len(ci) == 2 and pair is not None and pair[1] > 0 and all(map(math.isfinite, ci + pair)):
                exact = pair[1]
                rows.append((s.name, pair[0] / exact, ci[0] / exact, ci[1] / exact, c.status.value))
    if not rows:
        return None
    title = "tokens per step against the exact value"
    if len(rows) > MAX_ROWS:
        keep = set(sorted(range(len(rows)), key=lambda i: (-abs(rows[i][1] - 1), i))[:MAX_ROWS])
        title += f" (the {MAX_ROWS} farthest from exact of {len(rows)})"
        rows = [r for i, r in enumerate(rows) if i in keep]
    lo = min(min(r[2] for r in rows), 1.0)
    hi = max(max(r[3] for r in rows), 1.0)
    pad = max(hi - lo, 1e-6) * 0.08
    left, top, height = _rows_frame([r[0] for r in rows])
    svg = _Svg(height, title)
    x = _Axis(lo - pad, hi + pad, left, WIDTH - 12)
    segs: dict[str, list[str]] = {}
    for i, (name, est, a, b, st) in enumerate(rows):
        yc = top + 14 * i + 7
        svg.text(left - 6, yc + 3.5, _fit(name, left - 10), anchor="end", full=name)
        segs.setdefault(st, []).append(f"M{_c(x(a))} {_c(yc)}H{_c(max(x(b), x(a) + 1))}")
        segs.setdefault(st, []).append(f"M{_c(x(est))} {_c(yc - 5)}v10")
    for st, marks in segs.items():
        svg.path(marks, f"seg s-{st}")
    y0 = top + 14 * len(rows) + 2
    svg.path(f"M{_c(x(1.0))} {top - 4}V{_c(y0)}", "ref")
    _xaxis(svg, x, y0, _ticks(lo - pad, hi + pad), "measured / exact tokens per step (tick: estimate, bar: 99.9% interval)")
    return svg.done()


def power(rows: Sequence[tuple[str, float]], title: str = "power per mutant") -> str | None:
    """Plot detection power (0..1) per mutant as horizontal bars."""
    shown = [(n, _num(p)) for n, p in rows if p is not None and math.isfinite(_num(p))]
    if not shown:
        return None
    left, top, height = _rows_frame([n for n, _ in shown])
    svg = _Svg(height, title)
    x = _Axis(0.0, 1.12, left, WIDTH - 12)
    bars = []
    for i, (name, p) in enumerate(shown):
        yc = top + 14 * i + 7
        svg.text(left - 6, yc + 3.5, _fit(name, left - 10), anchor="end", full=name)
        bars.append(f"M{_c(left)} {_c(yc - 5)}H{_c(x(min(max(p, 0.0), 1.0)))}v10H{_c(left)}z")
        svg.text(x(min(max(p, 0.0), 1.0)) + 3, yc + 3.5, f"{p:.2f}" if p >= 0.005 or p == 0 else f"{p:.0e}", cls="s")
    svg.path(bars, "f-obs")
    _xaxis(svg, x, top + 14 * len(shown) + 2, [0, 0.25, 0.5, 0.75, 1.0],
           "probability of failing the mutant at this scenario's sample size")
    return svg.done()


# ------------------------------------------------------------------------------------------
# per-check plots, chosen by the keys of the check's data
# ------------------------------------------------------------------------------------------


def _cell_labels(n: int, vocab: int | None, length: int | None) -> list[str] | None:
    """Return the token sequence of each cell (e.g. '012'), when the law's shape is known and small."""
    if not (vocab and length and vocab**length == n and n <= 64):
        return None
    out = []
    for i in range(n):
        digits = []
        for _ in range(length):
            i, d = divmod(i, vocab)
            digits.append(d)
        out.append(("" if vocab <= 10 else ".").join(map(str, reversed(digits))))
    return out


def cells(data: Mapping[str, Any], vocab: int | None = None, length: int | None = None) -> str | None:
    """Plot observed vs expected counts per cell and the standardised residuals."""
    obs, exp = _vector(data.get("observed")), _vector(data.get("expected"))
    if obs is None or exp is None or len(obs) != len(exp):
        return top_cells(data)
    if not all(map(math.isfinite, obs + exp)):
        return None
    n = len(obs)
    impossible = [i for i in range(n) if exp[i] <= 0 < obs[i]]
    resid = [(o - e) / math.sqrt(e) if e > 0 else 0.0 for o, e in zip(obs, exp)]
    labels = _cell_labels(n, vocab, length)
    left, right = 56.0, WIDTH - 10
    t0, t1 = 24.0, 164.0  # top panel: counts
    b0, b1 = 206.0, 296.0  # bottom panel: residuals
    height = b1 + (58 if labels else 34)
    svg = _Svg(height, "observed vs expected per cell")
    x = _Axis(-0.8, n - 0.2, left, right)
    w = max((right - left) / n * 0.85, 0.4)
    if n <= 256:
        top_v = max(max(obs), max(exp), 1.0) * 1.05
        y = _Axis(0.0, top_v, t1, t0)
        svg.path((f"M{_c(x(i) - w / 2)} {_c(t1)}V{_c(y(e))}h{_c(w)}V{_c(t1)}z" for i, e in enumerate(exp) if e > 0), "f-band")
        svg.path((f"M{_c(x(i) - 1.6)} {_c(y(o))}h3.2" for i, o in enumerate(obs)), "mark s-obs")
        _yaxis(svg, y, left, _ticks(0.0, top_v, 4), "count")
        svg.text(right, t0 + 2, "bar: expected (exact law) · mark: observed", cls="s", anchor="end")
    else:  # too many cells for bars: observed against expected on log-log axes, with +-3 sd
        pos = [(e, o) for e, o in zip(exp, obs) if e > 0 and o > 0]
        lo = max(min((e for e in exp if e > 0), default=0.1), 0.1)
        hi = max(max(exp), max(obs), lo * 10)
        xl = _Axis(lo / 2, hi * 1.5, left, right, math.log10)
        yl = _Axis(lo / 2, hi * 1.5, t1, t0, math.log10)
        grid = [lo * (hi / lo) ** (k / 40) for k in range(41)]
        upper = [f"{_c(xl(g))} {_c(yl(g + 3 * math.sqrt(g)))}" for g in grid]
        lower = [f"{_c(xl(g))} {_c(yl(max(g - 3 * math.sqrt(g), lo / 2)))}" for g in reversed(grid)]
        svg.path("M" + "L".join(upper + lower) + "z", "f-band")
        svg.path(f"M{_c(xl(lo))} {_c(yl(lo))}L{_c(xl(hi))} {_c(yl(hi))}", "ref")
        svg.path((f"M{_c(xl(e) - 1)} {_c(yl(o))}h2" for e, o in pos), "mark s-obs")
        decades = [10.0**k for k in range(math.floor(math.log10(lo / 2)) + 1, math.floor(math.log10(hi * 1.5)) + 1)]
        _yaxis(svg, yl, left, decades, "observed count")
        _xaxis(svg, xl, t1, decades, "expected count (band: +-3 sd; line: observed = expected)")
    if impossible:
        svg.path((f"M{_c(x(i) - 3)} {_c(b0 + 3)}l6 6m0 -6l-6 6" for i in impossible), "cross")
    # residual panel, clipped to +-10 (the table below the plot gives exact values)
    r_hi = min(max(max((abs(r) for r in resid), default=0.0), 4.0), 10.0) * 1.05
    yr = _Axis(-r_hi, r_hi, b1, b0)
    svg.text(4, b0 - 10, "standardised residuals (obs - exp) / sqrt(exp); shaded: +-3", cls="t")
    svg.path(f"M{_c(left)} {_c(yr(3))}H{_c(right)}V{_c(yr(-3))}H{_c(left)}z", "f-band")
    big = [i for i, r in enumerate(resid) if abs(r) > 3]
    small = [i for i, r in enumerate(resid) if abs(r) <= 3]

    def stem(i: int) -> str:
        r = max(-r_hi, min(r_hi, resid[i]))
        return f"M{_c(x(i))} {_c(yr(0))}V{_c(yr(r))}"

    svg.path(map(stem, small), "stem s-obs")
    svg.path(map(stem, big), "stem s-failed")
    svg.path(f"M{_c(left)} {_c(yr(0))}H{_c(right)}", "ax")
    _yaxis(svg, yr, left, [t for t in (-9, -6, -3, 0, 3, 6, 9) if abs(t) <= r_hi])
    if labels:
        svg.vtexts((x(i) + 3, b1 + 4, lab) for i, lab in enumerate(labels))
        svg.text((left + right) / 2, height - 4, "cell (token sequence)", cls="s", anchor="middle")
    else:
        step = max(1, round(n / 8))
        _xaxis(svg, x, b1, [float(i) for i in range(0, n, step)], "cell (sequence index)",
               [str(i) for i in range(0, n, step)])
    return svg.done()


def top_cells(data: Mapping[str, Any]) -> str | None:
    """Plot the standardised residuals of the most deviating cells (when the law is too large to store)."""
    top = data.get("top_cells")
    if not isinstance(top, list) or not top or not all(isinstance(t, Mapping) and {"cell", "residual"} <= t.keys() for t in top):
        return None
    names = [" ".join(str(v) for v in t["cell"]) for t in top]
    vals = [_num(t["residual"]) for t in top]
    finite = [v if math.isfinite(v) else 0.0 for v in vals]
    reach = min(max(max(abs(v) for v in finite), 4.0), 1e6) * 1.1
    left, top_y, height = _rows_frame(names)
    svg = _Svg(height, "most deviating cells")
    x = _Axis(-reach, reach, left, WIDTH - 12)
    svg.path(f"M{_c(x(-3))} {top_y - 2}H{_c(x(3))}V{_c(top_y + 14 * len(names))}H{_c(x(-3))}z", "f-band")
    bars: dict[str, list[str]] = {"obs": [], "failed": []}
    for i, (name, v) in enumerate(zip(names, finite)):
        yc = top_y + 14 * i + 7
        svg.text(left - 6, yc + 3.5, _fit(name, left - 10), anchor="end", full=name)
        a, b = sorted((x(0), x(max(-reach, min(reach, v)))))
        bars["failed" if abs(vals[i]) > 3 else "obs"].append(f"M{_c(a)} {_c(yc - 5)}H{_c(max(b, a + 0.5))}v10H{_c(a)}z")
    for k, d in bars.items():
        svg.path(d, f"f-{k}")
    _xaxis(svg, x, top_y + 14 * len(names) + 2, _ticks(-reach, reach), "(obs - exp) / sqrt(exp); shaded: +-3")
    return svg.done()


def interval(data: Mapping[str, Any]) -> str | None:
    """Plot an estimate and its 99.9% interval against the exact value."""
    ci = _vector(data.get("ci999"))
    pair = _vector([data.get("estimate"), data.get("exact")])
    if ci is None or len(ci) != 2 or pair is None or not all(map(math.isfinite, ci + pair)):
        return None
    (est, exact), (lo, hi) = pair, ci
    closed = _num(data["closed_form"]) if "closed_form" in data else None
    span = max(hi - lo, abs(est - exact), 1e-9)
    svg = _Svg(78, "tokens per step")
    x = _Axis(min(lo, exact) - span, max(hi, exact) + span, 16, WIDTH - 16)
    svg.path(f"M{_c(x(lo))} 36H{_c(max(x(hi), x(lo) + 1))}", "ci")
    svg.path(f"M{_c(x(est) - 4)} 36h8", "mark big s-obs")
    inside = lo <= exact <= hi
    svg.path(f"M{_c(x(exact))} 22V50", "ref" if inside else "ref s-failed")
    if closed is not None and math.isfinite(closed):
        svg.path(f"M{_c(x(closed))} 22V50", "ref dash")
    svg.path(f"M16 56H{WIDTH - 16}", "ax")
    for t in _ticks(x.lo, x.hi, 6):
        svg.text(x(t), 68, f"{t:.6g}", anchor="middle")
    legend = f"bar: 99.9% interval [{lo:.4f}, {hi:.4f}] · mark: measured {est:.4f} · line: exact {exact:.4f}"
    if closed is not None:
        legend += f" · dotted: closed form {closed:.4f}"
    svg.text(WIDTH - 4, 13, legend, cls="s", anchor="end")
    return svg.done()


def histogram(data: Mapping[str, Any]) -> str | None:
    """Plot accepted-count histograms against their exact laws (first round, and all rounds)."""
    panels = []
    obs, exp = _vector(data.get("observed_first")), _vector(data.get("expected_first"))
    if obs is not None and exp is not None and len(obs) == len(exp):
        total = sum(obs) or 1.0
        etotal = sum(exp) or 1.0
        panels.append(("first round (the tested law)", [o / total for o in obs], [e / etotal for e in exp]))
    obs, exp = _vector(data.get("observed_all")), _vector(data.get("expected_all"))
    if obs is not None and exp is not None and len(obs) == len(exp):
        panels.append(("all rounds (descriptive)", obs, exp))
    panels = [p for p in panels if all(map(math.isfinite, p[1] + p[2]))]
    if not panels:
        return None
    svg = _Svg(168, "accepted drafts per round: observed vs exact law")
    pw = (WIDTH - 20) / len(panels)
    for k, (title, o, e) in enumerate(panels):
        a = 10 + k * pw + 46
        b = 10 + (k + 1) * pw - 10
        y = _Axis(0.0, max(max(o), max(e), 1e-9) * 1.1, 130, 36)
        x = _Axis(-0.6, len(o) - 0.4, a, b)
        w = min((b - a) / len(o) * 0.4, 40)
        svg.text(a, 30, title, cls="s")
        svg.path((f"M{_c(x(i) - w)} 130V{_c(y(v))}h{_c(w)}V130z" for i, v in enumerate(o)), "f-obs")
        svg.path((f"M{_c(x(i))} 130V{_c(y(v))}h{_c(w)}V130z" for i, v in enumerate(e)), "f-band edge")
        _yaxis(svg, y, a, _ticks(0.0, y.hi, 3))
        _xaxis(svg, x, 130, [float(i) for i in range(len(o))], "accepted drafts (dark: observed, light: exact law)")
    return svg.done()


#: Per-check plots, tried in order; each returns None when the data lack its keys.
CHECK_PLOTS: tuple[Callable[..., str | None], ...] = (cells, interval, histogram)


def for_check(data: Mapping[str, Any], vocab: int | None = None, length: int | None = None) -> list[str]:
    """Return every plot that suits a check's data."""
    out = []
    for plot in CHECK_PLOTS:
        try:
            svg = plot(data, vocab, length) if plot is cells else plot(data)
        except (TypeError, ValueError, KeyError, ZeroDivisionError, OverflowError):  # odd data: no plot, never no report
            svg = None
        if svg:
            out.append(svg)
    return out
