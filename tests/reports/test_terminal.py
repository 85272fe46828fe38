"""Terminal output at 80 and 120 columns (issue 19): no number or name cut, no line too long; small wording fixes."""

import io
import json
import re

import pytest
from report_runs import document, failing
from rich.console import Console

from specaudit.errors import ExitCode
from specaudit.reports import format as fmt
from specaudit.reports import github, sensitivity, terminal
from specaudit.reports.columns import Column, fit, pieces, wrap
from specaudit.results.document import from_document
from specaudit.scenarios.catalogue import shipped

MUTANT_RUN = ("run", "specaudit.verifiers.zoo.chain:resample_from_p", "-s", "markov-v4", "-s", "corners", "--samples", "5000", "--seed", "3")


def _whole(number: str, text: str) -> bool:
    """Return True when ``number`` appears in ``text`` with no digit, point or ellipsis glued to either side."""
    return re.search(rf"(?<![\d.…]){re.escape(number)}(?![\d.…])", text) is not None


def _printed_numbers(doc: dict) -> list[str]:
    """Return the statistic and p-value strings the summary prints for the checks of a results document."""
    out = []
    for s in doc["scenarios"]:
        for c in s["checks"]:
            if c["statistic"] is not None:
                out.append(f"{float(c['statistic']):.1f}")  # inf is stored as the string "inf"
            p = c["adjusted_pvalue"] if c["adjusted_pvalue"] is not None else c["pvalue"]
            if p is not None:
                out.append(fmt.pvalue(p))
    return out


def _assert_readable(text: str, width: int, doc: dict) -> None:
    assert "…" not in text, text
    too_long = [ln for ln in text.splitlines() if len(ln) > width]
    assert not too_long, too_long
    numbers = _printed_numbers(doc)
    assert numbers
    for number in numbers:
        assert _whole(number, text), (number, text)
    for s in doc["scenarios"]:
        for c in s["checks"]:
            assert re.search(rf"(?<![\w-]){re.escape(c['name'])}(?![\w-])", text), (c["name"], text)


@pytest.mark.parametrize("width", [80, 120])
def test_run_shows_every_number_and_check_name_whole(width, tmp_path, cli):
    out = tmp_path / "r.json"
    res = cli(*MUTANT_RUN, "--json", out, env={"COLUMNS": str(width)})
    assert res.exit_code == ExitCode.CHECKS_FAILED, res.output
    assert "specaudit: FAILED (2 failed)" in res.output
    _assert_readable(res.output, width, json.loads(out.read_text()))


@pytest.mark.parametrize("width", [80, 120])
def test_report_keeps_extreme_numbers_whole(width, tmp_path, cli):
    """The issue's numbers: a Holm p of 1e-117 (once shown as '1.01e-1…') and a six-digit statistic."""
    doc = document(failing())
    tps = next(c for c in doc["scenarios"][0]["checks"] if c["name"] == "tokens-per-step")
    tps["adjusted_pvalue"] = 1.0123e-117
    joint = next(c for c in doc["scenarios"][0]["checks"] if c["name"] == "joint-law")
    joint["statistic"], joint["df"] = 109284.71, 62
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    res = cli("report", path, env={"COLUMNS": str(width)})
    assert res.exit_code == ExitCode.OK, res.output
    assert _whole("1.01e-117", res.output) and _whole("109284.7", res.output)
    _assert_readable(res.output, width, doc)


def test_narrow_console_prints_lines_with_whole_numbers():
    doc = document(failing())
    console = Console(record=True, width=44, no_color=True)
    terminal.render(from_document(doc), console)
    text = console.export_text()
    assert "┃" not in text.split("power of the joint-law")[0]  # no table fits: one line per check
    _assert_readable(text, 44, doc)


def test_wide_console_keeps_one_row_per_check():
    console = Console(record=True, width=160, no_color=True)
    console.print(terminal.summary_table(failing(), console.width))
    rows = [ln for ln in console.export_text().splitlines() if "│ joint-law " in ln]
    assert len(rows) == 2 and all(ln.startswith("│ markov-v4 ") or ln.startswith("│ seed-context-free ") for ln in rows)


def test_wrap_breaks_only_between_pieces():
    assert pieces("2033.0/50df", "stat") == ["2033.0", "/50df"]
    assert pieces("tokens/step (exact)") == ["tokens/", "step ", "(exact)"]
    assert pieces("200,000 and 1/3") == ["200,000 ", "and ", "1/3"]
    assert pieces("  padding-independence") == ["  padding-independence"]
    assert wrap("0.2210 (0.0300)", 8).plain == "0.2210\n(0.0300)"
    assert wrap("0.2210 (0.0300)", 15).plain == "0.2210 (0.0300)"
    assert fit([Column("a"), Column("b")], [["corner-greedy-drafter", "x"]], 20) is None  # 21 + 2 + borders


@pytest.mark.parametrize("width", [80, 120])
def test_list_wraps_whole_descriptions(width, cli):
    res = cli("list", env={"COLUMNS": str(width)})
    assert res.exit_code == ExitCode.OK, res.output
    assert "…" not in res.output and max(len(ln) for ln in res.output.splitlines()) <= width
    if "┃ description" in res.output:  # the table: read the last column only
        text = "".join(ln.split("│")[-2] for ln in res.output.splitlines() if ln.startswith("│"))
    else:
        text = res.output
    squeezed = re.sub(r"\s", "", text)
    for s in shipped():
        assert s.spec.name in res.output
        assert "".join(s.spec.description.split()) in squeezed, s.spec.name  # every word, in order, none cut
    assert "(specaudit.exact_checks)," in res.output  # the longest word of a description, on one line


def _selftest_result(n):
    from specaudit.engine.selftest import CheckCalibration, MutantOutcome, SelftestResult

    scenarios = ["markov-v4", "seed-context-free", "sampling-temperature", "tree-ragged-wr-v4", "greedy-drafter",
                 "sampling-near-tie"][:n]
    checks = tuple(CheckCalibration(sc, "joint-law", (0.5,), 0, False, 0.1, 0.512, 0.9) for sc in scenarios)
    mutants = tuple(MutantOutcome(m, "distribution", sc, "failed", True, False, 1.0, "detect", True)
                    for m in ("resample_from_p", "count_after_reject") for sc in scenarios)
    return SelftestResult(seeds=2, samples=2000, alpha=1e-3, checks=checks, ks_pvalue=0.9, pooled_ks_pvalue=0.8,
                          tests=12, false_alarms=0, interval=(0, 1), runs_failed=0, runs_limit=1, mutants=mutants)


@pytest.mark.parametrize(("width", "scenarios", "numbered"), [(80, 6, True), (120, 6, True), (120, 3, False)])
def test_selftest_tables_have_whole_headers(width, scenarios, numbered):
    console = Console(record=True, width=width, no_color=True)
    sensitivity.render_selftest(_selftest_result(scenarios), console)
    text = console.export_text()
    assert "…" not in text and max(len(ln) for ln in text.splitlines()) <= width
    words = set(re.split(r"[\s│┃]+", text))
    for header in ("scenario", "check", "KS p", "KS p (Holm)", "false alarms (p <= alpha)", "mutant", "kind"):
        assert set(header.split()) <= words, header  # wrapped at spaces, never cut
    zoo = text.split("zoo:")[1]
    if numbered:  # the scenario columns do not fit by name: numbered, with the legend
        assert "┃ 1  ┃ 2  ┃" in zoo and "columns: 1 = markov-v4, 2 = seed-context-free" in re.sub(r"\s+", " ", zoo)
    else:
        assert "┃ markov-v4 ┃ seed-context-free ┃ sampling-temperature ┃" in zoo and "columns:" not in zoo


def test_zero_power_prints_0():
    doc = document(failing())
    doc["scenarios"][0]["info"]["power"]["bonus_from_last"]["power"] = 0.0
    console = Console(record=True, width=160, no_color=True)
    sensitivity.render_power(from_document(doc), console, verbosity=1)
    text = console.export_text()
    assert "0.0e+00" not in text
    assert re.search(r"│ bonus_from_last +│ distribution +│ +0 +│", text), text


def test_two_errors_read_as_errors(cli, verifiers_dir):
    res = cli("run", f"{verifiers_dir / 'broken.py'}:raises", "-s", "markov-v4", "-s", "seed-context-free",
              "--samples", "500", env={"COLUMNS": "80"})
    assert res.exit_code == ExitCode.CHECKS_FAILED, res.output
    assert "specaudit: ERROR (2 errors)" in res.output and "2 error)" not in res.output


def test_not_callable_target_says_an_int(cli, verifiers_dir):
    res = cli("run", f"{verifiers_dir / 'broken.py'}:NOT_CALLABLE", "-s", "markov-v4")
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    assert "is an int, not a callable verifier" in res.output


def test_github_paths_are_relative_or_absent_and_summary_names_seeds(tmp_path):
    doc = document(failing())
    inside = tmp_path / "ci" / "markov-v4.yaml"
    doc["scenarios"][0]["path"] = str(inside)
    doc["scenarios"][1]["path"] = "/opt/site-packages/specaudit/shipped/seed-context-free.yaml"
    doc["seed"] = None  # the default: each scenario its own seed
    result = from_document(doc)
    lines = github.annotations(result, str(tmp_path))
    markov = [ln for ln in lines if "specaudit markov-v4 " in ln]
    other = [ln for ln in lines if "specaudit seed-context-free " in ln]
    assert markov and all(ln.startswith("::error file=ci/markov-v4.yaml,line=1,") for ln in markov)
    assert other and all("file=" not in ln and "line=" not in ln and "site-packages" not in ln for ln in other)
    summary = github.summary_markdown(result)
    assert result.seed is None and "seed None" not in summary
    seeds = ", ".join(f"{s.name} {s.seed}" for s in result.scenarios)
    assert f"seeds per scenario ({seeds})" in summary
    doc["seed"] = 7
    assert "(Holm), seed 7, " in github.summary_markdown(from_document(doc))


def test_github_emit_uses_the_workspace(tmp_path):
    doc = document(failing())
    doc["scenarios"][0]["path"] = str(tmp_path / "s" / "m.yaml")
    stream = io.StringIO()
    github.emit(from_document(doc), stream, {"GITHUB_WORKSPACE": str(tmp_path)})
    assert "::error file=s/m.yaml,line=1," in stream.getvalue()


def test_not_an_adapter_says_an_int():
    from specaudit import adapters
    from specaudit.errors import UsageError

    with pytest.raises(UsageError, match=r"adapter 'errno:ENOENT' \(import string\) is an int, not an Adapter"):
        adapters.get("errno:ENOENT")


def test_adapters_table_cuts_no_name(cli):
    res = cli("adapters", env={"COLUMNS": "80"})
    assert res.exit_code == ExitCode.OK, res.output
    assert "…" not in res.output and "tree_speculative_sampling_target_only" in res.output
    table = [ln for ln in res.output.splitlines() if not ln.startswith("alias ")]  # alias lines are plain echo
    assert max(len(ln) for ln in table) <= 80


def test_matrix_too_wide_for_one_table_splits_with_a_legend():
    from specaudit.reports.columns import fit_matrix

    names = [f"scenario-{i}" for i in range(30)]
    parts = fit_matrix((Column("mutant"),), names, [(["resample_from_p"], ["D!"] * 30)], 80, title="zoo")
    console = Console(record=True, width=80, no_color=True, file=io.StringIO())
    for part in parts:
        console.print(part)
    text = console.export_text()
    assert len(parts) > 2 and text.count("┃ mutant ") == len(parts) - 1  # tables, then the legend
    assert max(len(ln) for ln in text.splitlines()) <= 80 and "…" not in text
    assert "30 = scenario-29" in re.sub(r"\s+", " ", text) and text.count("D!") == 30
