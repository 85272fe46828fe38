"""The assertion message of ``specaudit.assert_lossless``: a failed run in a few lines of text.

When ``assert_lossless`` fails inside a test, this text is all pytest shows, so it leads with
the verdict and the family-wise level, then lists each failed gating check with its Holm
p-value, the most deviating sequences and the zoo mutant the failure looks like. It is a
reporter like the terminal table (it renders a RunResult and decides nothing), kept apart from
:mod:`specaudit.pytest_plugin` so that the plugin, which pytest imports in every session, stays
cheap to import.
"""

from __future__ import annotations

from specaudit.reports import format as fmt
from specaudit.results import RunResult, Status

__all__ = ["MESSAGE_CELLS", "failure_summary"]

#: Most deviating cells listed per failed check in an assertion message.
MESSAGE_CELLS = 3


def failure_summary(result: RunResult) -> str:
    """Return a short statistical summary of a run, failures first, for an assertion message."""
    bad = [s for s in result.scenarios if s.status in (Status.FAILED, Status.ERROR)]
    seed = "per scenario" if result.seed is None else result.seed
    uncertified = result.uncertified()
    if not bad and uncertified:  # certify_tv: every check passed, a bound stayed above EPS at the cap
        lines = [f"specaudit: {result.target}: TV <= {result.settings['certify_tv']:g} not certified on "
                 f"{len(uncertified)} of {len(result.scenarios)} scenarios at the sample cap (seed {seed})"]
        for s in result.scenarios:
            b = s.certificate
            if s.name in uncertified and b is not None:
                lines.append(f"  {s.name}: TV <= {b.bound:.4f} at {100 * b.confidence:g}% after {b.sequences:,} "
                             f"sequences (plug-in TV {b.tv:.4f}); raise the cap (samples) or EPS")
        return "\n".join(lines)
    lines = [
        f"specaudit: {result.target} is not lossless: {result.status.value.upper()} on {len(bad)} of "
        f"{len(result.scenarios)} scenarios (family-wise alpha {result.alpha:g}, Holm; seed {seed})"
    ]
    for s in result.scenarios:
        if s.error is not None:
            clause = f" [{s.error.clause}]" if s.error.clause else ""
            lines.append(f"  {s.name}: ERROR {s.error.kind}{clause}: {s.error.message}")
            continue
        failed = [c for c in s.checks if c.status is Status.FAILED and c.gate]
        if not failed:
            lines.append(f"  {s.name}: {s.status.value}")
            continue
        for c in failed:
            p = c.adjusted_pvalue if c.adjusted_pvalue is not None else c.pvalue
            lines.append(f"  {s.name} / {c.name}: FAILED, {fmt.pvalue_clause(p, 'p (Holm)', missing='n/a', spaced=True)}: {c.summary}")
            top = c.data.get("top_cells") or []
            if top:
                cells = "; ".join(
                    f"{t['cell']} {t['observed']} vs {float(t['expected']):.1f} ({float(t['residual']):+.1f} sd)"
                    for t in top[:MESSAGE_CELLS]
                )
                lines.append(f"    most deviating sequences (observed vs expected): {cells}")
        best = (s.info.get("diagnosis") or {}).get("best")
        if best:
            lines.append(f"    looks like: {best['mutant']}: {best['description']} (similarity {best['similarity']:.2f})")
    return "\n".join(lines)
