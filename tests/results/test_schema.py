"""The results document's JSON Schema (specaudit.results.schema), each scenario's status, and older schema versions.

Every document the suite writes is validated by the autouse fixture of ``tests/conftest.py``; these
tests check the schema itself: it is valid draft 2020-12, ``specaudit schema --results`` prints it,
it names every field the writer writes, real documents fit it (positive controls) and broken ones
do not (negative controls, one per rule). The stored ``data/*-v1.json`` files were written by
specaudit 0.1.0 (schema_version 1, no status per scenario; ``specaudit run mutant:resample_from_p
-s markov-v4 -s corners --samples 3000 --seed 1 --no-power`` and the two shards of ``run reference
-s markov-v4 --samples 30000 --seed 1 --shard i/2``); a reader of this release upgrades them.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path

import jsonschema
import pytest
from report_runs import document, failing, passing

from specaudit.errors import ExitCode
from specaudit.results import (
    Category,
    CheckResult,
    ErrorInfo,
    RunResult,
    ScenarioResult,
    Status,
    TVBound,
)
from specaudit.results import document as results_document
from specaudit.results.schema import READS, SCHEMA_VERSION, json_schema, validate

DATA = Path(__file__).parent / "data"


def check(name: str, status: Status, pvalue: float | None = 0.5) -> CheckResult:
    return CheckResult(name, Category.DISTRIBUTION, status, f"{name}: {status.value}", statistic=1.0, pvalue=pvalue,
                       df=3, adjusted_pvalue=pvalue)


def scenario(name: str, *checks: CheckResult, **kw) -> ScenarioResult:
    return ScenarioResult(name, "<test>", 1, "h" * 16, "a scenario", seed=1, samples=100, checks=checks, **kw)


def run(*scenarios: ScenarioResult, **kw) -> RunResult:
    return RunResult("reference", 1e-3, 1, "0.1.0", scenarios, started="2026-12-06T12:00:00", **kw)


def test_the_schema_is_draft_2020_12_and_the_cli_prints_it(cli, tmp_path):
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["schema_version"] == {"const": SCHEMA_VERSION} == {"const": 2}
    res = cli("schema", "--results")
    assert res.exit_code == ExitCode.OK and json.loads(res.output) == schema
    out = tmp_path / "sub" / "results.schema.json"
    assert cli("schema", "--results", "-o", out).exit_code == ExitCode.OK and json.loads(out.read_text()) == schema
    assert json.loads(cli("schema").output)["title"].startswith("specaudit scenario")  # without --results: scenarios
    bad = cli("schema", "--results", "-o", tmp_path / "sub")  # a folder where the file should be
    assert bad.exit_code == ExitCode.USAGE_ERROR and "is a directory" in bad.output
    bad = cli("schema", "--results", "-o", out / "x")  # a file where a folder should be
    assert bad.exit_code == ExitCode.USAGE_ERROR and "cannot write" in bad.output


def test_the_schema_names_every_field_the_writer_writes():
    # a field added to a result object without its place in the schema (and a new schema_version) fails here
    schema = json_schema()
    defs = schema["$defs"]
    fields = {cls: {f.name for f in dataclasses.fields(cls)} for cls in (RunResult, ScenarioResult, CheckResult,
                                                                          ErrorInfo, TVBound)}
    assert set(schema["properties"]) == fields[RunResult] | {"schema_version", "tool", "status", "exit_code"}
    assert set(defs["scenario"]["properties"]) == fields[ScenarioResult] | {"status"}
    assert set(defs["check"]["properties"]) == fields[CheckResult]
    assert set(defs["error"]["properties"]) == fields[ErrorInfo]
    assert set(defs["tv_bound"]["properties"]) == fields[TVBound]
    assert all(d["additionalProperties"] is False for d in (schema, *defs.values()) if d.get("type") == "object")


def test_every_scenario_carries_the_verdict_of_the_one_rule():
    suspect_then_failed = scenario("s", check("joint-law", Status.SUSPECT),
                                   rerun=scenario("s", check("joint-law", Status.FAILED)))
    cleared = scenario("c", check("joint-law", Status.SUSPECT), rerun=scenario("c", check("joint-law", Status.PASSED)))
    probe_stands = scenario("p", check("probe", Status.FAILED, pvalue=None), check("joint-law", Status.SUSPECT),
                            rerun=scenario("p", check("joint-law", Status.PASSED)))
    broke = scenario("e", error=ErrorInfo("crash", "boom"))
    empty = scenario("k")
    result = run(suspect_then_failed, cleared, probe_stands, broke, empty)
    doc = results_document.to_document(result)
    validate(doc)
    stated = {s["name"]: (s["status"], s["rerun"] and s["rerun"]["status"]) for s in doc["scenarios"]}
    assert stated == {"s": ("failed", "failed"), "c": ("passed", "passed"), "p": ("failed", "passed"),
                      "e": ("error", None), "k": ("skipped", None)}
    assert [s["status"] for s in doc["scenarios"]] == [s.status.value for s in result.scenarios]
    assert doc["status"] == "error" and doc["exit_code"] == ExitCode.CHECKS_FAILED
    assert list(doc["scenarios"][0])[:2] == ["name", "status"]  # the verdict beside the name, for people reading it
    assert results_document.from_document(json.loads(json.dumps(doc))) == result


def test_real_runs_fit_the_schema():
    # positive controls: a passing run, a failing one with its diagnosis, power and cells, as the CLI writes them
    for result in (passing(), failing()):
        doc = document(result)
        validate(doc)
        assert {s["status"] for s in doc["scenarios"]} == {"passed" if result is passing() else "failed"}
    assert failing().scenarios[0].info["diagnosis"]  # the part of the schema built from the reader's shapes is used
    partial = results_document.to_document(dataclasses.replace(passing(), partial=True))
    validate(partial)
    assert partial["status"] == "running" and partial["exit_code"] is None


def _edit(doc, path, value):
    *head, last = path
    target = doc
    for key in head:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return doc


# negative controls: one broken rule each, on a real document that otherwise fits
MISFITS = {
    "scenario status missing": (("scenarios", 0, "status"), KeyError, "'status' is a required property"),
    "scenario status not a verdict": (("scenarios", 0, "status"), "green", "'green' is not one of"),
    "check status not a verdict": (("scenarios", 0, "checks", 0, "status"), "ok", "'ok' is not one of"),
    "unknown scenario key": (("scenarios", 0, "verdict"), "passed", "Additional properties are not allowed"),
    "tv as text": (("scenarios", 0, "checks", 0, "data", "tv"), "small", "is not valid under any of the given schemas"),
    "a verdict in a partial file": (("partial",), True, "False was expected"),
    "exit code 0 while running": (("status",), "running", "0 is not of type 'null'", (("partial",), True)),
    "old schema_version": (("schema_version",), 1, "2 was expected"),
    "alpha out of range": (("alpha",), 1.5, "1.5 is greater than or equal to the maximum of 1"),
    "exit code unknown": (("exit_code",), 7, "is not valid under any of the given schemas"),
}


@pytest.mark.parametrize("case", list(MISFITS))
def test_a_broken_document_does_not_fit(case):
    path, value, message, *more = MISFITS[case]
    good = document(passing())
    validate(good)
    bad = _edit(copy.deepcopy(good), path, value)
    for edit in more:
        _edit(bad, *edit)
    with pytest.raises(jsonschema.ValidationError, match=message):
        validate(bad)


def test_the_suite_validates_what_it_writes(tmp_path, results_documents_validated):
    # the autouse fixture counts (and checks) every document written through results.document
    before = results_documents_validated[0]
    results_document.write(passing(), tmp_path / "r.json")
    results_document.roundtrip(failing())
    assert results_documents_validated[0] == before + 2


# --- older schema versions -------------------------------------------------------------------------


def test_version_1_files_are_upgraded_on_reading(cli, tmp_path):
    v1 = json.loads((DATA / "results-v1.json").read_text())
    assert v1["schema_version"] == 1 and all("status" not in s for s in v1["scenarios"]) and 1 in READS
    with pytest.raises(jsonschema.ValidationError):
        validate(v1)  # not what this release writes ...
    result = results_document.read(DATA / "results-v1.json")  # ... but read, each verdict derived by the one rule
    assert [s.status for s in result.scenarios] == [Status.FAILED, Status.FAILED] and result.status.value == v1["status"]
    rewritten = results_document.to_document(result)
    assert rewritten["schema_version"] == 2 and [s["status"] for s in rewritten["scenarios"]] == ["failed", "failed"]

    res = cli("report", DATA / "results-v1.json", "--html", tmp_path / "r.html")
    assert res.exit_code == ExitCode.OK, res.output  # report exits 0 unless its own --fail-on rule is broken
    assert "FAILED (2 failed)" in res.output and (tmp_path / "r.html").exists()

    out = tmp_path / "base.json"
    res = cli("run", "reference", "-s", "markov-v4", "-s", "corners", "--samples", "3000", "--seed", "1", "--no-power",
              "-q", "--baseline", DATA / "results-v1.json", "--json", out)
    assert res.exit_code == ExitCode.OK, res.output
    rows = json.loads(out.read_text())["baseline"]["rows"]
    assert [(r["old_status"], r["new_status"]) for r in rows] == [("failed", "passed"), ("failed", "passed")]


def test_version_1_shards_merge(cli, tmp_path):
    out = tmp_path / "merged.json"
    res = cli("merge", DATA / "shard0-v1.json", DATA / "shard1-v1.json", "--json", out)
    assert res.exit_code == ExitCode.OK, res.output
    merged = json.loads(out.read_text())
    assert merged["schema_version"] == 2 and [s["status"] for s in merged["scenarios"]] == ["passed"]
    validate(merged)


@pytest.mark.parametrize(("version", "says"), [
    (0, "schema_version 0; this specaudit reads 1 and 2)"),
    ("2", "schema_version '2'; this specaudit reads 1 and 2)"),
    (True, "schema_version True; this specaudit reads 1 and 2)"),
    (3, "schema_version 3; this specaudit reads 1 and 2: it was written by a newer specaudit)"),
])
@pytest.mark.parametrize("command", ["report", "merge", "baseline"])
def test_other_schema_versions_exit_4_naming_the_versions_read(version, says, command, cli, tmp_path):
    bad = tmp_path / "old.json"
    bad.write_text(json.dumps({**json.loads((DATA / "results-v1.json").read_text()), "schema_version": version}))
    args = {"report": ("report", bad), "merge": ("merge", bad, bad),
            "baseline": ("report", DATA / "results-v1.json", "--baseline", bad)}[command]
    res = cli(*args)
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    assert f"old.json: not a specaudit results file ({says}" in res.output and "internal error" not in res.output


PROBE = '''
import dataclasses
from report_runs import passing
from specaudit.results import document

def test_writes_a_document(tmp_path):
    result = passing()
    document.write(dataclasses.replace(result, alpha=ALPHA) if ALPHA else result, tmp_path / "r.json")
'''


@pytest.mark.parametrize(("alpha", "fails"), [(0, False), (1.5, True)])
def test_the_hook_fails_a_test_that_writes_a_misfit(alpha, fails, tmp_path):
    # the autouse fixture of tests/conftest.py, loaded as a plugin into a pytest run of a probe test: a document
    # with alpha = 1.5 (no run makes one) fails the test that wrote it; the same test writing a real one passes
    import subprocess
    import sys

    tests = Path(__file__).resolve().parents[1]
    (tmp_path / "test_probe.py").write_text(PROBE.replace("ALPHA", repr(alpha)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests), str(tests / "helpers")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q",
                           "-p", "no:xdist", str(tmp_path / "test_probe.py"), "--rootdir", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == (1 if fails else 0), proc.stdout[-3000:]
    assert "results documents validated against the results schema: 1" in proc.stdout
    assert ("do not fit specaudit.results.schema" in proc.stdout) == fails
    assert ("$.alpha: 1.5 is greater than or equal to the maximum of 1" in proc.stdout) == fails
