"""Bad input rows (specaudit.checks.bad_rows): NaN / inf / all-zero rows in q and p, scenario bad-rows.

Positive controls: the reference (the documented q fallback, a ValueError naming the row for p), a
verifier that raises a clear per-row error for every bad row, one that marks bad rows. Negative
controls: the zoo's nan_rows_token0 (vLLM #41834: token 0 after an all-NaN q row), a vague error,
an error or a mark on a bad row in padding, a token drawn from a bad p row.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats as sps

import specaudit
from specaudit.checks import CHECKS
from specaudit.checks.bad_rows import KINDS, NAME, applies, names_row, run_bad_rows
from specaudit.cli import main
from specaudit.contract.guard import guarded
from specaudit.errors import ExitCode
from specaudit.results import Status
from specaudit.scenarios.catalogue import default_suite, resolve
from specaudit.verifiers.reference import verify as reference
from specaudit.verifiers.zoo.chain import nan_rows_token0


def _bad(rows):
    with np.errstate(invalid="ignore", over="ignore"):
        total = rows.sum(axis=-1)
    return ~(np.isfinite(total) & (total > 0))


def _read(draft, q, p, num_draft):
    """Return the bad rows a verifier reads: q within num_draft, p up to the bonus position."""
    k = draft.shape[1]
    nd = np.asarray(num_draft)
    bad_q = (np.arange(k)[None, :] < nd[:, None]) & _bad(np.asarray(q))
    bad_p = (np.arange(k + 1)[None, :] <= nd[:, None]) & _bad(np.asarray(p))
    return bad_q.any(axis=1) | bad_p.any(axis=1)


def raises_per_row(draft, q, p, num_draft, rng):
    """Raise ValueError naming every bad row it reads; the reference otherwise."""
    bad = np.flatnonzero(_read(draft, q, p, num_draft))
    if bad.size:
        raise ValueError("bad probability rows: " + ", ".join(f"row {b}" for b in bad))
    return reference(draft, q, p, num_draft, rng)


def marks_rows(draft, q, p, num_draft, rng):
    """Mark every bad row it reads (n_out = 0, out all -1); the reference on the others."""
    bad = _read(draft, q, p, num_draft)
    keep = ~bad
    out = np.full((draft.shape[0], draft.shape[1] + 1), -1, dtype=np.int64)
    n_out = np.zeros(draft.shape[0], dtype=np.int64)
    if keep.any():
        out[keep], n_out[keep] = reference(draft[keep], q[keep], p[keep], np.asarray(num_draft)[keep], rng)
    return out, n_out


def vague_error(draft, q, p, num_draft, rng):
    """Raise torch.multinomial's message (no row named) on any bad row it reads."""
    if _read(draft, q, p, num_draft).any():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    return reference(draft, q, p, num_draft, rng)


def checks_padding_too(draft, q, p, num_draft, rng):
    """Raise naming the row for a bad row anywhere, padding included (padding must never be read)."""
    bad = np.flatnonzero(_bad(np.asarray(q)).any(axis=1) | _bad(np.asarray(p)).any(axis=1))
    if bad.size:
        raise ValueError(f"row {bad[0]} holds NaN")
    return reference(draft, q, p, num_draft, rng)


def greedy_from_bad_p(draft, q, p, num_draft, rng):
    """Replace bad rows by a one-hot at token 0 and go on: a silent token from a bad p row."""
    p = np.where(_bad(p)[..., None], np.eye(p.shape[-1])[0], p)
    q = np.where(_bad(q)[..., None], np.eye(q.shape[-1])[0], q)
    return reference(draft, q, p, num_draft, rng)


def always_raises(draft, q, p, num_draft, rng):
    raise RuntimeError("kernel not built")


def run(target, **kw):
    result = specaudit.run(target, ["bad-rows"], seed=1, diagnose=False, power=False, **kw)
    (scenario,) = result.scenarios
    return result, scenario


def test_scenario_is_exact_tagged_and_outside_the_default_suite():
    (loaded,) = resolve(["bad-rows"])
    assert loaded.spec.mode == "exact" and {"serving", "bad-rows"} <= set(loaded.spec.tags) and applies(loaded.spec)
    assert "bad-rows" not in [s.name for s in default_suite()]
    assert not applies(resolve(["corners"])[0].spec)  # corners keeps its probes: the default suite is unchanged
    assert CHECKS.get(NAME).kind == "bad-rows-probe" and CHECKS.get(NAME).gate


def test_reference_passes_with_the_documented_fallback():
    result, s = run("reference")
    assert result.exit_code() == ExitCode.OK
    assert [c.name for c in s.checks] == [NAME]
    check = s.check(NAME)
    assert check.status is Status.PASSED, check.summary
    # bad p rows: ValueError naming the row (4 kinds x 2 positions); bad q and padding: answered (4 + 2)
    assert check.data["answers"] == {"raised": 8, "marked": 0, "answered": 6}
    assert check.summary.startswith("14 bad-row cases (NaN, inf, all-zero rows in q, p and padding) kept the rule")


def test_mutant_recovering_token0_fails_naming_the_row_and_the_rule():
    result, s = run("specaudit.verifiers.zoo.chain:nan_rows_token0")
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    check = s.check(NAME)
    assert check.status is Status.FAILED and check.gate
    assert "all-NaN q at draft" in check.summary and "token 0 has p = 0" in check.summary
    assert "the rejected draft: vLLM #41834" in check.summary
    assert "rule: a draft tested against a bad q row is not accepted" in check.summary
    assert names_row(check.summary, 1)  # the first case's bad row is batch row 1
    # every bad p row got a silent token too
    p_failures = [f for f in check.data["failures"] if "from a bad p row" in f]
    assert len(p_failures) == 2 * len(KINDS)
    assert all("rule: raise an error naming row" in f for f in p_failures)


def test_verifier_that_raises_a_clear_per_row_error_passes():
    result, s = run(raises_per_row)
    assert result.exit_code() == ExitCode.OK, s.check(NAME).summary
    assert s.check(NAME).data["answers"] == {"raised": 12, "marked": 0, "answered": 2}


def test_verifier_that_marks_bad_rows_passes():
    result, s = run(marks_rows)
    assert result.exit_code() == ExitCode.OK, s.check(NAME).summary
    assert s.check(NAME).data["answers"] == {"raised": 0, "marked": 12, "answered": 2}


@pytest.mark.parametrize(("target", "text"), [
    (vague_error, "without naming row 1 (rule: a clear per-row error says 'row 1')"),
    (checks_padding_too, "on a row past num_draft, which is padding it must never read"),
    (greedy_from_bad_p, "from a bad p row (no law to draw from) (token 0: vLLM #42722 / PR #45060)"),
])
def test_broken_bad_row_handling_fails(target, text):
    result, s = run(target)
    check = s.check(NAME)
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    assert check.status is Status.FAILED
    assert any(text in f for f in check.data["failures"]), check.data["failures"]


def test_crash_on_the_clean_batch_is_an_error_not_a_pass():
    result, s = run(always_raises)
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    assert s.check(NAME).status is Status.ERROR and "kernel not built" in s.check(NAME).summary


def test_not_applicable_where_the_probe_cannot_reach_the_verifier():
    spec = resolve(["bad-rows"])[0].spec
    done = run_bad_rows(guarded(reference), spec, seed=1, contract="tree")
    (check,) = done.checks
    assert check.status is Status.SKIPPED and done.calls == 0
    assert check.summary == "not applicable: the bad-row probe speaks the canonical chain contract, not contract 'tree'"


def test_names_row():
    assert names_row("bad rows: row 3 (p[3, 0]: all NaN)", 3)
    assert names_row("rows [2, 3]", 2) and names_row("ROW=5", 5) and names_row("row[4] is nan", 4)
    assert not names_row("row 13", 1) and not names_row("index 3 holds NaN", 3) and not names_row("row 31", 3)


def test_reference_raises_naming_bad_p_rows_and_ignores_padding():
    rng = np.random.default_rng(20)
    v, k = 5, 2
    draft = np.zeros((3, k), dtype=np.int64)
    q = np.full((3, k, v), 1 / v)
    p = np.full((3, k + 1, v), 1 / v)
    num_draft = np.array([2, 1, 0])
    p[1, 2] = np.nan  # padding of row 1: never read
    q[2, 0] = np.nan  # padding of row 2
    out, n_out = reference(draft, q, p, num_draft, rng)
    assert (n_out >= 1).all()
    p[2, 0, 3] = np.inf
    with pytest.raises(ValueError, match=r"row 2 \(p\[2, 0\]: inf\)"):
        reference(draft, q, p, num_draft, rng)
    p[2, 0] = 0.0
    with pytest.raises(ValueError, match=r"row 2 \(p\[2, 0\]: no mass\)"):
        reference(draft, q, p, num_draft, rng)


def test_reference_draws_from_p_after_a_bad_q_row():
    # An all-NaN q row at draft 0: the token there must have law p[b, 0] (the lossless fallback), checked by a
    # chi-square test against p (scipy.stats.chisquare), and never the draft 0 of p = 0.
    rng = np.random.default_rng(21)
    v, n = 6, 30_000
    law = np.array([0.0, 0.1, 0.2, 0.3, 0.15, 0.25])
    draft = np.zeros((n, 1), dtype=np.int64)
    q = np.full((n, 1, v), np.nan)
    p = np.broadcast_to(law, (n, 2, v)).copy()
    out, n_out = reference(draft, q, p, np.ones(n, dtype=np.int64), rng)
    assert (n_out == 1).all() and (out[:, 0] != 0).all()
    counts = np.bincount(out[:, 0], minlength=v)
    assert sps.chisquare(counts[1:], n * law[1:]).pvalue > 1e-4
    assert (nan_rows_token0(draft, q, p, np.ones(n, dtype=np.int64), rng)[0][:, 0] == 0).all()  # the bug


def test_cli_exit_codes_and_messages():
    runner = CliRunner()
    ok = runner.invoke(main, ["run", "reference", "-s", "bad-rows"])
    assert ok.exit_code == ExitCode.OK, ok.output
    assert "bad-rows" in ok.output and "passed" in ok.output
    bad = runner.invoke(main, ["run", "specaudit.verifiers.zoo.chain:nan_rows_token0", "-s", "bad-rows"])
    assert bad.exit_code == ExitCode.CHECKS_FAILED, bad.output
    flat = " ".join(bad.output.split())
    assert "bad-rows / bad-rows: 9 of 14 bad-row cases broke the bad-row rule" in flat
    assert "token 0 has p = 0" in flat and "vLLM #41834" in flat


def test_sanitising_bad_rows_in_place_fails():
    def zeroes_nan_in_place(draft, q, p, num_draft, rng):
        q[np.isnan(q)] = 0.0  # writes into the caller's q
        return reference(draft, q, p, num_draft, rng)

    result, s = run(zeroes_nan_in_place)
    check = s.check(NAME)
    assert check.status is Status.FAILED
    assert "the verifier wrote into its inputs: q[" in check.summary and "(rule: inputs are read-only)" in check.summary
