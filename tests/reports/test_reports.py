"""Reports: HTML (escaping, plots, purity), JSON, JUnit, GitHub output, progress, terminal."""

import copy
import io
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from report_runs import SAMPLES, document, failing, failing_page, passing
from rich.console import Console

from specaudit.errors import ExitCode
from specaudit.reports import github, html, junit, terminal
from specaudit.reports.progress import ProgressReporter
from specaudit.results.document import from_document


def test_run_writes_json_html_junit_and_report_rerenders_the_same(tmp_path, cli):
    out = {ext: tmp_path / f"r.{ext}" for ext in ("json", "html", "xml")}
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "seed-context-free", "--samples", "5000", "--seed", "2",
                 "--json", str(out["json"]), "--html", str(out["html"]), "--junit", str(out["xml"]))
    assert res.exit_code == ExitCode.OK, res.output
    # the JSON passes python -m json.tool
    tool = subprocess.run([sys.executable, "-m", "json.tool", str(out["json"])], capture_output=True, text=True)
    assert tool.returncode == 0, tool.stderr
    # JUnit: one testcase per scenario x check, statistics as properties
    root = ET.parse(out["xml"]).getroot()
    cases = root.findall(".//testcase")
    assert [c.get("name") for c in cases][:3] == ["joint-law", "tokens-per-step", "accept-length"]
    assert "determinism" in [c.get("name") for c in cases]  # the scenario's contract probes
    props = {p.get("name"): p.get("value") for p in cases[0].find("properties")}
    assert float(props["pvalue"]) == json.loads(out["json"].read_text())["scenarios"][0]["checks"][0]["pvalue"]
    assert "statistic" in props and props["df"] and root.get("failures") == "0"
    # the HTML is a pure function of the JSON: re-rendering gives the same bytes
    again = tmp_path / "r2.html"
    res = cli("report", str(out["json"]), "--html", str(again))
    assert res.exit_code == ExitCode.OK, res.output
    assert again.read_bytes() == out["html"].read_bytes()


def test_html_default_folder_is_reports(tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "seed-context-free", "--samples", "2000", "--html", "-q")
    assert res.exit_code == ExitCode.OK, res.output
    files = list((tmp_path / "reports").glob("*.html"))
    assert [f.name for f in files] == ["specaudit-specaudit.verifiers.reference_verify.html"]


def test_html_escapes_user_strings(tmp_path, cli):
    scenario = tmp_path / "evil.yaml"
    scenario.write_text(
        "schema: 1\nname: evil\ndescription: 'desc <script>alert(\"d\")</script> & more'\nvocab: 2\nk: 1\nlength: 1\n"
        "samples: 500\ntarget: {kind: context_free, probs: [0.5, 0.5]}\ndraft: {kind: same_as_target}\n"
    )
    out = tmp_path / "r.json"
    assert cli("run", "specaudit.verifiers.reference:verify", "-s", str(scenario), "--json", str(out), "-q").exit_code == 0
    doc = json.loads(out.read_text())
    assert "<script>" in doc["scenarios"][0]["description"]
    # every other user string: target, error message and traceback, a check summary and data key
    doc["target"] = "pkg.<script>alert('t')</script>:verify"
    bad = copy.deepcopy(doc["scenarios"][0])
    bad.update(name="crashy", checks=[], error={"kind": "crash", "message": "<img src=x onerror=alert(1)>", "clause": None, "traceback": "</pre><script>x()</script>"})
    doc["scenarios"].append(bad)
    doc["scenarios"][0]["checks"][0]["summary"] = "<b>bold</b>"
    doc["scenarios"][0]["checks"][0]["data"]["<i>key</i>"] = "<svg onload=alert(1)>"
    page = html.render(from_document(doc))
    assert "<script" not in page.lower() and "<img" not in page and "<b>bold" not in page and "<svg onload" not in page
    assert "desc &lt;script&gt;alert(&#34;d&#34;)&lt;/script&gt; &amp; more" in page
    assert "pkg.&lt;script&gt;alert(&#39;t&#39;)&lt;/script&gt;:verify" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;b&gt;bold&lt;/b&gt;" in page


def test_html_of_a_failure_shows_cells_diagnosis_and_plots():
    doc = document(failing())
    page = failing_page()
    assert page.startswith("<!DOCTYPE html>") and "FAILED" in page[:3000]
    # the summary at the top names the failing checks and the matching mutant
    summary = page[page.index('id="summary"') : page.index('id="overview"')]
    assert "markov-v4</strong> / joint-law" in summary and "looks like: <strong>resample_from_p</strong>" in summary
    # deviating cells: the table rows come from top_cells
    top = doc["scenarios"][0]["checks"][0]["data"]["top_cells"][0]
    assert f'<td class="mono">{" ".join(map(str, top["cell"]))}</td><td class="n">{top["observed"]:,}</td>' in page
    # plots: p-values, tokens/step, per-cell, interval and accept-length histograms, all inline SVG
    assert page.count("<svg") >= 2 + 2 * 3
    assert "observed vs expected per cell" in page and "standardised residuals" in page
    assert "p-values of all checks" in page and "accept-length" in page
    assert "power per mutant" in page  # from info["power"] (specaudit.analysis.power)
    assert not re.search(r"(src|href)=[\"']?(https?:)?//|url\((?!#)|@import", page)  # nothing loaded from outside


def test_html_renders_unknown_checks_statuses_and_power_generically():
    rng = np.random.default_rng(5)
    doc = document(passing())
    extra = {"name": "new-contract-check", "category": "contract", "status": "suspect", "summary": "a new check",
             "statistic": None, "pvalue": None, "df": None, "adjusted_pvalue": None, "gate": True,
             "data": {"calls": 12, "estimate": 1.5, "exact": 1.4, "ci999": [1.3, 1.6], "nested": {"a": [1, 2, 3, 4, 5]}}}
    doc["scenarios"][0]["checks"].append(extra)
    doc["scenarios"][0]["info"]["power"] = {f"mutant_{i}": float(p) for i, p in enumerate(rng.random(4))}
    page = html.render(from_document(doc))
    assert "new-contract-check" in page and 'class="badge suspect"' in page
    assert "power per mutant" in page and "mutant_3" in page  # power plot from info
    assert "nested" in page  # raw data box for values that are not scalars


def test_junit_failures_errors_and_properties():
    doc = document(failing())
    root = ET.fromstring(junit.render(from_document(doc)))
    cases = root.findall(".//testcase")
    assert len(cases) == sum(len(s["checks"]) for s in doc["scenarios"]) == 2 * (3 + 9)  # 3 statistical + 9 probe results
    failures = [c for c in cases if c.find("failure") is not None]
    assert {c.get("name") for c in failures} >= {"joint-law"}
    text = failures[0].find("failure").text
    assert "most deviating cells" in text and "looks like: resample_from_p" in text and "markov-v4.yaml:1" in text
    assert int(root.get("failures")) == len(failures) and root.get("errors") == "0"
    # an errored scenario is one <error> testcase
    doc["scenarios"][0].update(checks=[], error={"kind": "contract", "message": "[shape] out has shape (2,)", "clause": "shape", "traceback": ""})
    root = ET.fromstring(junit.render(from_document(doc)))
    assert root.find(".//testcase/error").get("type") == "contract" and root.get("errors") == "1"


def test_github_annotations_and_summary(tmp_path):
    doc = document(failing())
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    workspace = Path(doc["scenarios"][0]["path"]).parents[1]  # the folder holding scenarios/ (a file outside gets no file=)
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_WORKSPACE": str(workspace)}
    stream = io.StringIO()
    github.emit(from_document(doc), stream, env)
    lines = stream.getvalue().splitlines()
    joint = [ln for ln in lines if "joint-law" in ln]
    assert joint and joint[0].startswith("::error file=") and ",line=1," in joint[0]
    assert "markov-v4.yaml" in joint[0] and "Looks like: resample_from_p" in joint[0]
    assert all("\n" not in ln for ln in lines)
    text = summary.read_text()
    assert text.startswith("earlier step\n## specaudit") and "| markov-v4 | joint-law |" in text and "**failed**" in text
    assert github.command("error", "50% done\nnext", file="a,b:c.yaml", line=3) == "::error file=a%2Cb%3Ac.yaml,line=3::50%25 done%0Anext"
    assert not github.active({}) and github.active({"GITHUB_ACTIONS": "true"})


def test_cli_emits_github_annotations_only_on_actions(tmp_path, cli):
    summary = tmp_path / "s.md"
    args = ("run", "specaudit.verifiers.zoo.chain:resample_from_p", "-s", "markov-v4", "--samples", str(SAMPLES), "--seed", "1", "-q")
    res = cli(*args, env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)})
    assert res.exit_code == ExitCode.CHECKS_FAILED
    assert "::error file=" in res.output and summary.read_text().count("## specaudit") == 1
    res = cli(*args, env={"GITHUB_ACTIONS": "false"})
    assert "::error" not in res.output


def test_terminal_shows_cells_and_looks_like():
    console = Console(record=True, width=160, no_color=True)
    terminal.render(failing(), console)
    text = console.export_text()
    assert "most deviating cells" in text
    assert "looks like: resample_from_p, After a rejection, resample from p" in text


def test_terminal_reference_has_no_diagnosis():
    console = Console(record=True, width=160, no_color=True)
    terminal.render(passing(), console)
    assert "looks like" not in console.export_text()
    assert all("diagnosis" not in s.info for s in passing().scenarios)


def test_progress_plain_when_not_a_terminal_and_bar_on_a_terminal():
    plain = io.StringIO()
    with ProgressReporter(Console(file=plain, force_terminal=False), verbosity=0) as tick:
        tick("markov-v4", 10, 20)
        tick("markov-v4", 20, 20)
    assert plain.getvalue() == ""  # silent by default off a terminal
    plain = io.StringIO()
    with ProgressReporter(Console(file=plain, force_terminal=False), verbosity=1) as tick:
        tick("markov-v4", 10, 20)
        tick("markov-v4", 20, 20)
    out = plain.getvalue()
    assert out.startswith("specaudit: markov-v4: 20 sequences in") and "\x1b" not in out and out.count("\n") == 1
    tty = io.StringIO()
    with ProgressReporter(Console(file=tty, force_terminal=True, width=100), verbosity=0) as tick:
        tick("markov-v4", 10, 20)
        tick("markov-v4", 20, 20)
    assert "\x1b" in tty.getvalue()  # a live bar on a terminal


def test_no_color_means_no_escape_codes(monkeypatch):
    from specaudit import cli

    monkeypatch.setenv("NO_COLOR", "1")
    buf = io.StringIO()
    console = cli._console()
    console.file = buf
    terminal.render(failing(), console)
    assert "\x1b[" not in buf.getvalue().replace("\x1b[?25l", "").replace("\x1b[?25h", "")


@pytest.mark.parametrize("bad", ["not json", '{"schema_version": 99}'])
def test_report_rejects_bad_results_files(tmp_path, bad, cli):
    path = tmp_path / "r.json"
    path.write_text(bad)
    res = cli("report", str(path), "--html", str(tmp_path / "r.html"))
    assert res.exit_code == ExitCode.USAGE_ERROR and str(path) in res.output


def _without(doc, *where):
    """Return a copy of ``doc`` with the key at the path ``where`` removed."""
    doc = copy.deepcopy(doc)
    parent = doc
    for key in where[:-1]:
        parent = parent[key]
    del parent[where[-1]]
    return doc


def _edited(doc, value, *where):
    doc = copy.deepcopy(doc)
    parent = doc
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    return doc


# (file text from a good document, what the message must say); each is a ResultsFileError (exit 4), not exit 3
BAD_DOCUMENTS = {
    "truncated": (lambda doc: json.dumps(doc)[:200], r"cannot read results file .*r\.json: (Expecting|Unterminated)"),
    "huge-int": (lambda doc: json.dumps(doc).replace('"seed": 1', '"seed": ' + "9" * 5000, 1),
                 r"cannot read results file .*r\.json: Exceeds the limit \(4300 digits\)"),
    "list": (lambda doc: json.dumps([doc]), r"r\.json: not a specaudit results file \(expected a JSON object, got a list\)"),
    "schema": (lambda doc: json.dumps({**doc, "schema_version": 3}),
               r"r\.json: not a specaudit results file \(schema_version 3; this specaudit reads 1 and 2: it was written by a newer specaudit\)"),
    "old-schema": (lambda doc: json.dumps({**doc, "schema_version": 0}), r"r\.json: not a specaudit results file \(schema_version 0; this specaudit reads 1 and 2\)"),
    "no-schema": (lambda doc: json.dumps(_without(doc, "schema_version")), r"\(schema_version None; this specaudit reads 1 and 2\)"),
    "no-scenarios": (lambda doc: json.dumps(_without(doc, "scenarios")), r"r\.json: not a specaudit results file: missing key 'scenarios'"),
    "no-name": (lambda doc: json.dumps(_without(doc, "scenarios", 1, "name")), r"scenarios\[1\]: missing key 'name'"),
    "no-status": (lambda doc: json.dumps(_without(doc, "scenarios", 0, "checks", 2, "status")),
                  r"scenarios\[0\]\.checks\[2\]: missing key 'status'"),
    "bad-status": (lambda doc: json.dumps(_edited(doc, "great", "scenarios", 0, "checks", 0, "status")),
                   r"scenarios\[0\]\.checks\[0\]\.status: 'great' is not one of passed, suspect"),
    "checks-object": (lambda doc: json.dumps(_edited(doc, {}, "scenarios", 0, "checks")),
                      r"scenarios\[0\]\.checks: expected a JSON list, got an object"),
}


@pytest.mark.parametrize("command", ["report", "merge", "baseline"])
@pytest.mark.parametrize("case", list(BAD_DOCUMENTS))
def test_bad_results_documents_exit_4_and_say_where(tmp_path, command, case, cli):
    make, message = BAD_DOCUMENTS[case]
    good = document(passing())
    path = tmp_path / "r.json"
    path.write_text(make(good))
    (tmp_path / "good.json").write_text(json.dumps(good))
    args = {"report": ("report", str(path)), "merge": ("merge", str(path), str(path)),
            "baseline": ("report", str(tmp_path / "good.json"), "--baseline", str(path))}[command]
    res = cli(*args)
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    assert re.search(message, res.output), res.output
    assert "specaudit: error:" in res.output and "internal error" not in res.output


def test_read_back_results_file_error_api(tmp_path):
    from specaudit.errors import ResultsFileError, UsageError
    from specaudit.results import document as results_document

    assert issubclass(ResultsFileError, UsageError) and ResultsFileError.exit_code == ExitCode.USAGE_ERROR
    with pytest.raises(ResultsFileError, match=r"results document: not a specaudit results file: missing key 'target'"):
        results_document.from_document(_without(document(passing()), "target"))
    path = results_document.write(passing(), tmp_path / "sub" / "r.json")  # folders are created
    assert results_document.read(path) == results_document.roundtrip(passing())
    assert not list(path.parent.glob(".*.tmp"))  # the atomic writer leaves no temporary file


def test_rerun_of_a_suspect_scenario_decides_every_report():
    # a SUSPECT first result whose re-run fails: the run exits 1, so every report must show the failure
    from specaudit.analysis import baseline

    doc = document(passing())
    first = doc["scenarios"][0]
    first["checks"][0]["status"] = "suspect"
    suspect_only = copy.deepcopy(doc)  # negative control: no re-run, the scenario stays suspect
    rerun = copy.deepcopy(first)
    rerun["checks"][0]["status"] = "failed"
    first["rerun"] = rerun
    for d, verdict, failures in ((suspect_only, "suspect", "0"), (doc, "failed", "1")):
        page = html.render(from_document(d))
        assert f'<h3 style="display:inline">{first["name"]}</h3> <span class="badge {verdict}">' in page
        assert ET.fromstring(junit.render(from_document(d))).get("failures") == failures
        assert any(ln.startswith("::error") and "joint-law (re-run)" in ln for ln in github.annotations(from_document(d))) == (verdict == "failed")
        assert baseline.compare(from_document(document(passing())), from_document(d)).rows[0].new_status == verdict
    assert "joint-law (re-run)" in html.render(from_document(doc))


def test_a_rerun_that_could_not_run_is_an_error_every_report_names():
    # a SUSPECT first result whose re-run died (its process ended by the verifier): the verdict was ERROR, yet the
    # terminal table, its details, the GitHub annotations and summary and the JUnit file showed only the first look
    doc = document(passing())
    first = doc["scenarios"][0]
    first["checks"][0]["status"] = "suspect"
    rerun = copy.deepcopy(first)
    rerun["checks"] = []
    rerun["error"] = {"kind": "died", "message": "the verifier ended the process with os._exit(9) while this scenario ran",
                      "traceback": "", "clause": None}
    first["rerun"] = rerun
    result = from_document(doc)
    assert result.scenarios[0].status.value == "error"
    console = Console(file=io.StringIO(), width=160, color_system=None)
    terminal.render(result, console)
    text = console.file.getvalue()
    assert re.search(r"\(re-run, N [\d,]+\) +│ died +│.*│ error", text), text
    assert f"{first['name']} (re-run): the verifier ended the process with os._exit(9)" in text
    assert any(ln.startswith("::error") and "(re-run)%3A error" in ln and "os._exit(9)" in ln for ln in github.annotations(result))
    assert f"| {first['name']} (re-run) | died | | | **error** |" in github.summary_markdown(result)
    root = ET.fromstring(junit.render(result))
    assert root.get("errors") == "1" and root.find(".//testcase[@name='run (re-run)']/error") is not None


def test_html_keeps_a_first_look_probe_error_a_problem_after_a_passing_rerun():
    # the verdict keeps an exact finding of the first look (ScenarioResult.status): the page must not call it resolved
    import specaudit
    from specaudit.results import Status
    from specaudit.verifiers.reference import verify as reference

    raised = []

    def flaky(draft, q, p, num_draft, rng):
        if len(num_draft) and not num_draft.any() and not raised:  # the first zero-draft probe call
            raised.append(1)
            raise RuntimeError("first zero-draft call failed")
        return reference(draft, q, p, num_draft, rng)

    result = specaudit.run(flaky, ["markov-v4"], samples=2000, seed=3, suspect_level=0.999, power=False,
                           diagnose=False, supervised=False)
    s = result.scenarios[0]
    assert s.rerun is not None and s.rerun.check("determinism").status is Status.PASSED and s.status is Status.ERROR
    problems, resolved = html._problems(result, [html._scenario_view(s, False)])
    assert "determinism" in [p["check"]["name"] for p in problems if p["check"]]
    assert "determinism" not in [r["check"]["name"] for r in resolved]


def test_a_check_the_verifier_crashed_in_is_an_error_every_report_names():
    # a probe that raised is an ERROR check of a scenario that ran: the terminal showed no reason, the GitHub
    # annotations and summary none, and JUnit counted it a passed testcase (errors=0)
    doc = document(passing())
    probe = next(c for c in doc["scenarios"][0]["checks"] if c["name"] == "corner-empty-batch")
    probe.update(status="error", summary="the verifier crashed in this probe: the verifier raised ValueError: EMPTYBATCH",
                 data={"traceback": '  File "v.py", line 65, in verify\nValueError: EMPTYBATCH'})
    result = from_document(doc)
    console = Console(file=io.StringIO(), width=160, color_system=None)
    terminal.render(result, console)
    text = console.file.getvalue()
    assert "corner-empty-batch: the verifier crashed in this probe: the verifier raised ValueError: EMPTYBATCH" in text
    assert 'File "v.py", line 65, in verify' in text
    notes = [ln for ln in github.annotations(result) if "corner-empty-batch" in ln]
    assert len(notes) == 1 and notes[0].startswith("::error") and "EMPTYBATCH" in notes[0]
    summary = github.summary_markdown(result)
    assert "| markov-v4 | corner-empty-batch |  |  | **error** |" in summary and "### Failures" in summary and "EMPTYBATCH" in summary
    root = ET.fromstring(junit.render(result))
    error = root.find(".//testcase[@name='corner-empty-batch']/error")
    assert root.get("errors") == "1" and error is not None and "EMPTYBATCH" in error.get("message")
    assert 'File "v.py", line 65' in error.text


# (where in a failing run's document, the value put there, what the message must say): values the reports format;
# a hand-edited file's ended a reporter's format string with exit 3
BAD_REPORTED_VALUES = [
    (("scenarios", 0, "checks", 0, "data", "tv"), "x", r"checks\[0\]\.data\.tv: expected a number or null, got a string 'x'"),
    (("scenarios", 0, "checks", 1, "data", "estimate"), "1.7", r"checks\[1\]\.data\.estimate: expected a number"),
    (("scenarios", 0, "checks", 0, "data", "top_cells", 0, "residual"), [1], r"top_cells\[0\]\.residual: expected a number"),
    (("scenarios", 0, "checks", 0, "data", "top_cells"), {}, r"data\.top_cells: expected a JSON list, got an object"),
    (("scenarios", 0, "info", "diagnosis", "best", "mutant"), 1, r"info\.diagnosis\.best\.mutant: expected a string"),
    (("scenarios", 0, "info", "sensitivity", "groups"), None, r"info\.sensitivity\.groups: expected an integer, got null"),
    (("scenarios", 0, "info", "power", "resample_from_p", "power"), "high", r"info\.power\.resample_from_p\.power: expected a number"),
]


@pytest.mark.parametrize(("where", "value", "message"), BAD_REPORTED_VALUES)
def test_a_value_a_report_formats_is_checked_when_the_file_is_read(tmp_path, where, value, message, cli):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_edited(document(failing()), value, *where)))
    for args in (("report", str(path), "--html", str(tmp_path / "r.html")), ("run", "reference", "-s", "markov-v4",
                 "--samples", "2000", "--no-power", "--baseline", str(path))):
        res = cli(*args)
        assert res.exit_code == ExitCode.USAGE_ERROR, res.output
        assert re.search(message, res.output), res.output


def test_reported_values_that_may_be_absent_or_not_finite_still_render(tmp_path, cli):
    doc = document(failing())
    data = doc["scenarios"][0]["checks"]
    del data[1]["data"]["estimate"]  # tokens-per-step without its estimate: shown blank
    data[0]["data"]["tv"] = "nan"  # how a results file writes a float that is not finite
    doc["scenarios"][0]["info"]["power"]["mutant_x"] = 0.25  # a bare power figure, as the HTML reads them too
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    res = cli("report", str(path), "-v", "--html", str(tmp_path / "r.html"), "--junit", str(tmp_path / "r.xml"))
    assert res.exit_code == ExitCode.OK, res.output  # report renders; the run's verdict is in the file
    assert "nan (0.0150)" in res.output and ET.parse(tmp_path / "r.xml") is not None
    assert re.search(r"mutant_x +│ +│ +0\.250", res.output), res.output


def test_the_github_summary_holds_a_verifiers_text_on_its_own_line_as_text():
    doc = document(passing())
    probe = next(c for c in doc["scenarios"][0]["checks"] if c["name"] == "determinism")
    probe.update(status="error", summary="raised: a|b\n- injected item <script>alert(1)</script> \x1b[2J")
    md = github.summary_markdown(from_document(doc))
    assert "\n- injected" not in md and "<script>" not in md and "\x1b" not in md
    assert r"raised: a\|b - injected item &lt;script&gt;alert(1)&lt;/script&gt; \x1b[2J" in md


@pytest.mark.parametrize(("where", "value", "message"), [
    (("settings", "timeout"), "x", r"settings\.timeout: expected a number or null, got a string 'x'"),
    (("scenarios", 0, "checks", 0, "statistic"), 10**400, r"checks\[0\]\.statistic: an integer of 401 digits is out of range"),
    (("scenarios", 0, "info", "diagnosis", "candidates", 0, "description"), None,
     r"diagnosis\.candidates\[0\]\.description: expected a string, got null"),
])
def test_a_value_the_html_or_a_number_format_reads_is_checked_too(tmp_path, where, value, message, cli):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_edited(document(failing()), value, *where)))
    res = cli("report", str(path), "--html", str(tmp_path / "r.html"))
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    assert re.search(message, res.output), res.output


def test_the_terminal_shows_every_string_of_a_results_file_as_text():
    # one pass over the whole result (format.shown): the diagnosis, a check's name, the target, a flag, not a
    # chosen few fields (a hand-edited diagnosis printed a raw escape sequence)
    doc = document(failing())
    s = doc["scenarios"][0]
    s["info"]["diagnosis"]["best"]["description"] = "clears \x1b[2J the screen"
    s["checks"][0]["name"] = "joint\x07law"
    s["info"]["sensitivity"]["flag"] = "flag \x1b]0;title\x07"
    doc["target"] = "mod\x1b[31m:verify"
    console = Console(file=io.StringIO(), width=200, color_system=None)
    terminal.render(from_document(doc), console, verbosity=1)
    text = console.file.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert r"clears \x1b[2J the screen" in text and r"joint\x07law" in text and r"mod\x1b[31m:verify" in text
    assert r"flag \x1b]0;title\x07" in text
