"""Baseline comparison and the --fail-on gate."""

import copy
import json

import pytest
from report_runs import SAMPLES, document, passing

from specaudit.analysis import baseline
from specaudit.errors import ExitCode, UsageError
from specaudit.results.document import from_document


def compare(old, new, rules=()):
    """Compare two results documents (dicts edited by the tests) as the CLI does: read back as RunResults."""
    return baseline.compare(from_document(old), from_document(new), rules)


def _scale_tps(doc, factor):
    doc = copy.deepcopy(doc)
    for s in doc["scenarios"]:
        for c in s["checks"]:
            if c["name"] == "tokens-per-step":
                c["data"]["estimate"] *= factor
    return doc


def test_parse_rule():
    assert baseline.parse_rule("tokens-per-step:2%") == baseline.Rule("tokens-per-step", 0.02, True, "tokens-per-step:2%")
    assert baseline.parse_rule("tokens-per-step:0.05").relative is False
    with pytest.raises(UsageError, match="did you mean 'tokens-per-step'"):
        baseline.parse_rule("tokens-per-stp:2%")
    with pytest.raises(UsageError, match="expected METRIC:THRESHOLD"):
        baseline.parse_rule("tokens-per-step")


def test_regression_past_threshold_fails_and_within_passes():
    old = document(passing())
    rule = baseline.parse_rule("tokens-per-step:2%")
    worse = compare(old, _scale_tps(old, 0.97), [rule])  # 3% fewer tokens per step
    assert worse.failed and len(worse.regressions) == 2
    assert "worse by 3.00%" in worse.regressions[0]["message"]
    assert not compare(old, _scale_tps(old, 0.99), [rule]).failed  # 1%: within the gate
    assert not compare(old, _scale_tps(old, 1.10), [rule]).failed  # faster is no regression
    assert not compare(old, _scale_tps(old, 0.5), []).failed  # no rules: report only


def test_changed_scenario_is_not_comparable_not_a_failure():
    old = document(passing())
    new = _scale_tps(old, 0.5)
    new["scenarios"][0]["content_hash"] = "0" * 16
    cmp = compare(old, new, [baseline.parse_rule("tokens-per-step:2%")])
    assert cmp.not_comparable == (old["scenarios"][0]["name"],)
    assert [r["scenario"] for r in cmp.regressions] == [old["scenarios"][1]["name"]]
    assert "not comparable" in cmp.rows[0].note


def test_verdict_changes_and_missing_scenarios_are_noted():
    old = document(passing())
    new = copy.deepcopy(old)
    new["scenarios"][0]["checks"][0]["status"] = "failed"
    del new["scenarios"][1]
    cmp = compare(old, new)
    assert cmp.rows[0].note == "newly failed" and cmp.rows[1].note == "not in this run"


def test_cli_gate(tmp_path, cli):
    old = tmp_path / "old.json"
    good = _scale_tps(document(passing()), 1.5)  # a baseline that emitted far more tokens per step
    old.write_text(json.dumps(good))
    args = ("run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "-s", "seed-context-free", "--samples", str(SAMPLES), "--seed", "1")
    res = cli(*args, "--baseline", str(old), "--fail-on", "tokens-per-step:2%")
    assert res.exit_code == ExitCode.CHECKS_FAILED and "regression: markov-v4: tokens per step" in res.output
    assert cli(*args, "--baseline", str(old)).exit_code == ExitCode.OK  # no rule, no gate
    res = cli(*args, "--fail-on", "tokens-per-step:2%")
    assert res.exit_code == ExitCode.USAGE_ERROR and "needs --baseline" in res.output
    # the comparison is stored in the JSON and re-rendered by `report`
    out = tmp_path / "new.json"
    cli(*args, "--baseline", str(old), "--fail-on", "tokens-per-step:2%", "--json", str(out), "-q")
    assert len(json.loads(out.read_text())["baseline"]["regressions"]) == 2
    page = tmp_path / "r.html"
    assert cli("report", str(out), "--html", str(page), "-q").exit_code == ExitCode.OK
    assert "Against the baseline" in page.read_text()
    # `report` applies its own rule and says which scenario regressed
    res = cli("report", str(out), "--baseline", str(old), "--fail-on", "tokens-per-step:2%", "-q")
    assert res.exit_code == ExitCode.CHECKS_FAILED and "regression: markov-v4: tokens per step" in res.output
    assert cli("report", str(out), "--baseline", str(out), "--fail-on", "tokens-per-step:2%", "-q").exit_code == ExitCode.OK
