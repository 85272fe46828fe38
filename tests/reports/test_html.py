"""HTML report: a light page (hand-written SVG), the reproduce line, and a summary that tells the truth.

Sizes are asserted here; CPU time lives in ``benchmarks/html_report.py``. Each finding of the
summary (grouped diagnoses, blind scenarios, suspects cleared by a re-run, a check without a
p-value) has its negative control beside it.
"""

import copy
import json
import re
import subprocess
import sys

import pytest
from report_runs import document, failing, passing

from specaudit.errors import ExitCode
from specaudit.reports import html, plots
from specaudit.results import document as results_document
from specaudit.results.document import from_document, roundtrip

SVG = re.compile(r"<svg.*?</svg>", re.S)


def _page(doc):
    return html.render(from_document(doc))


def _summary(page):
    return page[page.index('id="summary"') : page.index('id="overview"')]


def test_page_is_light_self_contained_and_drawn_without_matplotlib(tmp_path):
    page = html.render(roundtrip(passing()))
    # two scenarios with every plot: the default suite's 11 stay under 300 kB at this rate (benchmark: ~225 kB)
    assert len(page.encode()) < 2 * 26_000 + 10_000
    svgs = SVG.findall(page)
    assert len(svgs) >= 2 + 2 * 4  # p-values, tokens/step; per scenario: cells, interval, histogram, power
    assert max(len(s) for s in svgs) < 12_000  # the matplotlib figures were 25-60 kB each
    assert "<script" not in page and "<metadata" not in page and not re.search(r"(src|href)=[\"']?(https?:)?//|@import", page)
    # rendering imports no plotting library (a fresh interpreter, the page from the JSON file)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(results_document.to_document(passing()), allow_nan=False))
    code = ("import sys; from specaudit.results.document import read; from specaudit.reports import html; "
            f"html.render(read({str(path)!r})); print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_reproduce_line_heads_the_page():
    page = html.render(roundtrip(passing()))
    head = page[: page.index('id="summary"')]
    assert ("<code>specaudit run specaudit.verifiers.reference:verify -s markov-v4 -s seed-context-free --seed 1 "
            "--samples 20000</code>") in head
    env = passing().environment
    assert set(env) == {"python", "numpy", "platform"}
    for text in (f"python {env['python']}", f"numpy {env['numpy']}", f"platform {env['platform']}",
                 f"specaudit {passing().version}", "seed 1 (the run seed"):
        assert text in head, text
    # a results file without the environment (written before it was recorded) says so, and claims nothing
    doc = document(passing())
    del doc["environment"]
    doc.update(seed=None, alpha=0.01, settings={**doc["settings"], "method": "g", "samples": None})
    doc["scenarios"][1]["path"] = "my scenarios/seed.yaml"  # a user's file is named by its path, quoted
    page = _page(doc)
    head = page[: page.index('id="summary"')]
    assert "python not recorded · numpy not recorded · platform not recorded" in head
    assert "seed per scenario" in head
    assert ("specaudit run specaudit.verifiers.reference:verify -s markov-v4 -s &#39;my scenarios/seed.yaml&#39; "
            "--alpha 0.01 --method g</code>") in head


def test_environment_is_kept_by_the_results_document():
    doc = document(passing())
    assert doc["environment"] == dict(passing().environment)
    assert from_document(doc).environment == passing().environment


@pytest.mark.parametrize("name", ["$x^2$", "$\\foo{$", "<b>x</b> & $\\frac{1}{2}$"])
def test_hostile_scenario_names_render_literally(name):
    doc = document(failing())
    doc["scenarios"][0]["name"] = name
    doc["scenarios"][0]["info"]["power"] = {name: {"power": 0.5, "kind": "distribution"}}
    page = _page(doc)  # no typesetting: nothing to crash on
    shown = name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    plot = page[page.index('id="plot-pvalues"') :]
    assert f">{shown} / joint-law</text>" in plot  # the p-value plot's label is the name as written
    assert f">{shown}</text>" in page  # the power plot's label
    assert f"<strong>{shown}</strong>" in _summary(page)
    assert "<b>x</b>" not in page


def test_same_diagnosis_is_one_box_naming_every_scenario():
    doc = document(failing())
    bests = [s["info"]["diagnosis"]["best"]["mutant"] for s in doc["scenarios"]]
    assert bests == ["resample_from_p", "resample_from_p"]
    summary = _summary(_page(doc))
    assert summary.count("looks like:") == 1
    assert "(2 scenarios: markov-v4, seed-context-free; pattern similarity" in summary
    # control: two different mutants give two boxes
    doc["scenarios"][1]["info"]["diagnosis"]["best"]["mutant"] = "lenient"
    summary = _summary(_page(doc))
    assert summary.count("looks like:") == 2 and "(1 scenario: seed-context-free;" in summary


def _with_rerun(status):
    doc = document(passing())
    first = doc["scenarios"][0]
    first["checks"][0].update(status="suspect", adjusted_pvalue=0.004)
    rerun = copy.deepcopy(first)
    rerun["checks"][0].update(status=status, adjusted_pvalue=0.6 if status == "passed" else 1e-9)
    rerun.update(seed=123, samples=80_000)
    first["rerun"] = rerun
    return doc


def test_suspect_cleared_by_its_rerun_is_resolved_not_a_failure():
    page = _page(_with_rerun("passed"))
    summary = _summary(page)
    assert 'id="failures"' not in summary and "PASSED" in summary
    resolved = summary[summary.index('id="resolved"') :]
    assert "<strong>markov-v4</strong> / joint-law</a>\n    was suspect (p = 0.004); re-run on seed 123 with 80,000 sequences: passed (p = 0.6)" in resolved
    # control: a re-run that fails is a failure, labelled as the re-run, and nothing is resolved
    summary = _summary(_page(_with_rerun("failed")))
    assert 'id="resolved"' not in summary and "FAILED" in summary
    failures = summary[summary.index('id="failures"') :]
    assert "<strong>markov-v4</strong> / joint-law (re-run)</a>\n      (p = 1e-09)" in failures
    assert "markov-v4</strong> / joint-law</a>" not in failures


def test_check_without_pvalue_never_shows_an_empty_p():
    doc = document(failing())
    base = doc["scenarios"][0]["checks"][0]
    doc["scenarios"][0]["checks"].append({**base, "name": "processing", "status": "suspect", "pvalue": None,
                                          "adjusted_pvalue": None, "statistic": None, "df": None, "gate": False,
                                          "summary": "no single processing mismatch fits", "data": {}})
    doc["scenarios"][0]["checks"].append({**base, "name": "other", "status": "failed", "pvalue": 0.03,
                                          "adjusted_pvalue": None, "gate": False, "summary": "x", "data": {}})
    summary = _summary(_page(doc))
    assert "processing</a>\n      (not gating): no single processing mismatch fits" in summary
    assert "other</a>\n      (p = 0.03, not gating): x" in summary
    assert "p = ," not in summary and "(p = )" not in summary


def test_blind_and_weak_scenarios_are_in_the_summary():
    doc = document(passing())
    summary = _summary(_page(doc))
    assert 'id="blind"' not in summary  # control: no flag, no section
    blind = "blind to resample_from_p: it leaves this scenario's law unchanged, no sample size helps"
    for s in doc["scenarios"]:
        s["info"]["sensitivity"]["flag"] = blind
    doc["scenarios"][1]["info"]["sensitivity"]["flag"] = "underpowered: power 0.412 < 0.99 against resample_from_p"
    page = _page(doc)
    section = _summary(page)[_summary(page).index('id="blind"') :]
    assert f"<li><strong>markov-v4</strong>: {blind.replace(chr(39), '&#39;')}</li>" in section
    assert "<li><strong>seed-context-free</strong>: underpowered: power 0.412 &lt; 0.99" in section
    overview = page[page.index('id="overview"') :]
    assert overview.count('href="#blind"') == 2 and ">weak power</a>" in overview and ">blind</a>" in overview


def test_long_runs_cap_the_pvalue_plot_and_keep_the_smallest():
    doc = document(failing())
    first = doc["scenarios"][0]
    doc["scenarios"] = [dict(copy.deepcopy(first), name=f"s{i}") for i in range(40)]
    for i, s in enumerate(doc["scenarios"]):
        s["checks"][0]["adjusted_pvalue"] = s["checks"][0]["pvalue"] = 10.0 ** -(i % 7)
    svg = plots.pvalues(from_document(doc))
    rows = plots.MAX_ROWS
    n = sum(1 for s in doc["scenarios"] for c in s["checks"] if c["pvalue"] is not None)
    assert n > rows and f"p-values of all checks (the {rows} smallest of {n})" in svg
    assert svg.count(" / ") == rows and ">s6 / joint-law</text>" in svg  # p = 1e-6 kept
    doc["scenarios"] = doc["scenarios"][:5]  # control: a short run shows every p-value
    svg = plots.pvalues(from_document(doc))
    assert "smallest" not in svg and svg.count(" / ") == sum(1 for s in doc["scenarios"] for c in s["checks"] if c["pvalue"] is not None)


def test_long_runs_draw_plots_only_where_something_went_wrong():
    doc = document(passing())
    bad = document(failing())["scenarios"][0]
    doc["scenarios"] = [dict(copy.deepcopy(doc["scenarios"][i % 2]), name=f"ok-{i}") for i in range(html.DETAIL_LIMIT)]
    doc["scenarios"].append(dict(bad, name="bad"))
    page = _page(doc)
    cards = page[page.index('id="scenarios"') :]
    ok, failed = cards[: cards.index('id="s-bad"')], cards[cards.index('id="s-bad"') :]
    assert "<svg" not in ok and 'class="raw"' not in ok
    assert ok.count(f"left out for the passed scenarios of a run of more than {html.DETAIL_LIMIT} scenarios") == html.DETAIL_LIMIT
    assert failed.count("<svg") >= 4 and 'class="raw"' in failed and "left out" not in failed
    doc["scenarios"] = doc["scenarios"][1:]  # control: at the limit, every scenario keeps its plots
    cards = _page(doc)[_page(doc).index('id="scenarios"') :]
    assert "left out" not in cards and cards.count("<svg") >= 4 * html.DETAIL_LIMIT


def test_plots_of_odd_data_are_skipped_never_fatal():
    assert plots.for_check({"observed": [1, 2], "expected": [1]}) == []
    assert plots.for_check({"observed": ["nan", 1], "expected": [1, 1], "ci999": [2, 1], "estimate": "x", "exact": 1}) == []
    # cells of probability 0 that were observed are crossed out
    svg = plots.cells({"observed": [5, 3, 0, 2], "expected": [5.0, 3.0, 2.0, 0.0]}, vocab=2, length=2)
    assert svg.count('class="cross"') == 1 and ">11</text>" in svg
    big = plots.cells({"observed": list(range(1, 301)), "expected": [float(i) for i in range(1, 301)]})
    assert "expected count (band: +-3 sd" in big  # too many cells for bars: log-log panel


def test_report_rerenders_the_same_bytes(tmp_path, cli):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(results_document.to_document(failing()), allow_nan=False))
    pages = []
    for name in ("a.html", "b.html"):
        res = cli("report", str(path), "--html", str(tmp_path / name))
        assert res.exit_code == ExitCode.OK, res.output  # `report` renders; `run` is the gate
        pages.append((tmp_path / name).read_bytes())
    assert pages[0] == pages[1] == html.render(roundtrip(failing())).encode()
