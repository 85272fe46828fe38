"""The stops check: a verifier declaring the stops contract keeps the tokens of the stop rule, for the right reason."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specaudit.checks.stops import CASES, run_stops
from specaudit.contract.stops import LENGTH, RUNNING, STOPPED, Stops, apply_stops, declares_stops, split_stops, stops_of
from specaudit.errors import ExitCode, UsageError
from specaudit.results import Status
from specaudit.scenarios.catalogue import resolve
from specaudit.verifiers import reference
from specaudit.verifiers import stops as reference_stops
from specaudit.verifiers.zoo import chain as chain_zoo
from specaudit.verifiers.zoo import stops as stop_zoo

SCENARIOS = ["stops", "markov-v4", "corners", "ragged-v4"]
#: The cases each mutant must break, and no other (its bug, by name).
BROKEN = {
    "stop_last_token_only": {"mid-block-stop", "stop-inside-budget", "two-stops"},
    "cap_before_stop": {"stop-inside-budget"},
    "budget_ignored": {"length", "stop-past-budget", "no-draft-budget"},
}


def _check(verify: Any, scenario: str = "stops", seed: int = 1):
    done = run_stops(verify, split_stops(verify), resolve([scenario])[0].spec, seed, "probs")
    assert done.error is None and len(done.checks) == 1 and done.calls == 2
    return done.checks[0]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_reference_passes_every_case_on_every_seed(scenario: str) -> None:
    # exact: no uniform decides anything, so a correct verifier passes on every seed (false-alarm rate 0)
    for seed in range(25):
        check = _check(reference_stops.verify, scenario, seed)
        assert check.status is Status.PASSED, check.summary
        assert check.data["unforced"] == 0 and set(check.data["cases"]) == set(CASES)


@pytest.mark.parametrize("name", sorted(BROKEN))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_stop_mutant_fails_on_exactly_its_cases(name: str, scenario: str) -> None:
    check = _check(stop_zoo.MUTANTS[name].func, scenario)
    assert check.status is Status.FAILED, check.summary
    assert set(check.data["by_case"]) == BROKEN[name], check.data["by_case"]
    example = check.data["example"]
    assert example["got"] != example["expected"] or example["got_finished"] != example["expected_finished"]
    assert CASES[example["case"]][1] in check.summary  # the rule that was broken, in words


def test_the_scenarios_stop_tokens_are_the_ones_placed() -> None:
    check = _check(stop_zoo.budget_ignored)
    spec = resolve(["stops"])[0].spec
    assert spec.stop_tokens == [7, 5] and spec.max_tokens == 6
    mid = _check(stop_zoo.stop_last_token_only)
    assert set(mid.data["example"]["stop_tokens"]) <= {7, 5}
    assert check.data["rows"] == 4 * len(CASES)


def test_a_chain_rule_bug_is_not_charged_to_the_stops() -> None:
    # no_bonus emits other tokens than the forced ones (no bonus after an accepted block); its stop rule (the reference's) is right: the check passes
    # and says how many rows the verification did not force
    def verify(draft, q, p, num_draft, rng, stops):
        out, n_out = chain_zoo.MUTANTS["no_bonus"].func(draft, q, p, num_draft, rng)
        return apply_stops(out, n_out, stops)

    verify.stops = True  # type: ignore[attr-defined]
    check = _check(verify)
    assert check.status is Status.PASSED and check.data["unforced"] > 0, check.summary
    assert "chain-rule finding" in check.summary


def test_the_stop_rule_checks_each_token_for_a_stop_before_the_budget() -> None:
    out = np.array([[1, 5, 2, 3], [1, 2, 5, 3], [1, 2, 3, 4], [5, -1, -1, -1]])
    n_out = np.array([4, 4, 4, 1])
    stops = Stops(np.array([[5], [5], [5], [5]]), np.array([9, 2, 2, 1]))
    got, kept, finished = apply_stops(out, n_out, stops)
    assert kept.tolist() == [2, 2, 2, 1]
    assert finished.tolist() == [STOPPED, LENGTH, LENGTH, STOPPED]  # a stop on the budget's last token is a stop
    assert got[0].tolist() == [1, 5, -1, -1] and got[2].tolist() == [1, 2, -1, -1]
    assert apply_stops(out, n_out, Stops.unbounded(4))[2].tolist() == [RUNNING] * 4


def test_a_stop_on_the_budgets_last_token_may_be_called_either_way() -> None:
    # the engines differ (vLLM checks the stop first, an engine checking the budget first calls it a length finish):
    # the same tokens, either reason, passes
    def verify(draft, q, p, num_draft, rng, stops):
        out, n_out, finished = reference_stops.verify(draft, q, p, num_draft, rng, stops)
        tie = (finished == STOPPED) & (n_out >= stops.remaining)
        return out, n_out, np.where(tie, LENGTH, finished)

    verify.stops = True  # type: ignore[attr-defined]
    assert _check(verify).status is Status.PASSED


def test_the_canonical_form_has_the_contract_signature_and_no_stops() -> None:
    canonical = split_stops(reference_stops.verify)
    assert list(inspect.signature(canonical).parameters) == ["draft", "q", "p", "num_draft", "rng"]
    assert stops_of(canonical) is reference_stops.verify
    assert split_stops(reference.verify) is reference.verify and stops_of(reference.verify) is None
    spec = resolve(["markov-v4"])[0].spec
    target, drafter = spec.chains()
    rng = np.random.default_rng(3)
    draft = rng.integers(0, 4, (6, 3))
    q, p = rng.dirichlet(np.ones(4), (6, 3)), rng.dirichlet(np.ones(4), (6, 4))
    nd = np.array([3, 2, 1, 0, 3, 3])
    a = canonical(draft, q, p, nd, np.random.default_rng(5))
    b = reference.verify(draft, q, p, nd, np.random.default_rng(5))
    assert len(a) == 2 and all(np.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("result, says", [
    (lambda out, n_out, finished: (out, n_out), "returns (out, n_out, finished); got a 2-tuple"),
    (lambda out, n_out, finished: (out, n_out, finished[:-1]), "finished must have shape"),
    (lambda out, n_out, finished: (out, n_out, finished + 3), "not one of 0 (running), 1 (stop), 2 (length)"),
    (lambda out, n_out, finished: (out, n_out, finished.astype(float)), "finished must be an integer array"),
])
def test_a_wrong_finished_output_fails_naming_it(result: Any, says: str) -> None:
    def verify(draft, q, p, num_draft, rng, stops):
        return result(*reference_stops.verify(draft, q, p, num_draft, rng, stops))

    verify.stops = True  # type: ignore[attr-defined]
    check = _check(verify)
    assert check.status is Status.FAILED and says in check.summary, check.summary


def test_a_stops_attribute_that_is_not_a_bool_is_a_usage_error() -> None:
    def verify(draft, q, p, num_draft, rng, stops):
        return reference_stops.verify(draft, q, p, num_draft, rng, stops)

    verify.stops = "yes"  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match=r"verify.stops = 'yes': not a bool") as info:
        declares_stops(verify)
    assert info.value.exit_code == ExitCode.USAGE_ERROR


# --- through the CLI -------------------------------------------------------------------------------


def test_the_reference_passes_and_each_mutant_fails_through_the_cli(cli, tmp_path: Path) -> None:
    out = tmp_path / "ref.json"
    res = cli("run", "reference-stops", "--json", out)
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert [s["name"] for s in doc["scenarios"]] == ["stops"]
    stops_check = next(c for c in doc["scenarios"][0]["checks"] if c["name"] == "stops")
    assert stops_check["status"] == "passed"
    for name in BROKEN:
        res = cli("run", f"specaudit.verifiers.zoo.stops:{name}", "-s", "stops", "--json", tmp_path / f"{name}.json")
        assert res.exit_code == ExitCode.CHECKS_FAILED, res.output
        doc = json.loads((tmp_path / f"{name}.json").read_text())
        failed = [c["name"] for c in doc["scenarios"][0]["checks"] if c["status"] == "failed"]
        assert failed == ["stops"], failed  # lossless tokens: only the stop rule is wrong


def test_a_verifier_without_the_stops_contract_is_told_the_check_was_skipped(cli, tmp_path: Path) -> None:
    out = tmp_path / "plain.json"
    res = cli("run", "reference", "-s", "stops", "--json", out)
    assert res.exit_code == 0, res.output
    check = next(c for c in json.loads(out.read_text())["scenarios"][0]["checks"] if c["name"] == "stops")
    assert check["status"] == "skipped" and "does not declare the stops contract" in check["summary"]


def test_a_stops_attribute_that_is_not_a_bool_exits_4(cli, tmp_path: Path) -> None:
    target = tmp_path / "bad_attr.py"
    target.write_text("from specaudit.verifiers.stops import verify as _v\n\n\ndef verify(draft, q, p, num_draft, rng, stops):\n"
                      "    return _v(draft, q, p, num_draft, rng, stops)\n\n\nverify.stops = 'yes'\n")
    res = cli("run", f"{target}:verify", "-s", "stops")
    assert res.exit_code == ExitCode.USAGE_ERROR and "verify.stops = 'yes': not a bool" in res.output, res.output


@pytest.mark.parametrize("edit, says", [
    (("stop_tokens: [7, 5]", "stop_tokens: [7, 9]"), ":16: stop_tokens: token 9 is outside the vocabulary; allowed: ids 0..7"),
    (("stop_tokens: [7, 5]", "stop_tokens: [-1]"), ":16: stop_tokens[0]: Input should be greater than or equal to 0"),
    (("stop_tokens: [7, 5]", "stop_tokens: [7, 7]"), ":16: stop_tokens: [7, 7]: allowed: one or more distinct ids"),
    (("stop_tokens: [7, 5]", "stop_tokens: []"), ":16: stop_tokens: []: allowed: one or more distinct ids"),
    (("max_tokens: 6", "max_tokens: 0"), ":17: max_tokens: Input should be greater than or equal to 1 (got 0)"),
    (("max_tokens: 6", "max_tokens: six"), ":17: max_tokens:"),
])
def test_bad_stop_keys_are_usage_errors_naming_file_line_and_key(cli, tmp_path: Path, edit: tuple[str, str],
                                                                   says: str) -> None:
    shipped = Path(resolve(["stops"])[0].path).read_text()
    assert edit[0] in shipped
    bad = tmp_path / "bad.yaml"
    bad.write_text(shipped.replace(edit[0], edit[1]))
    for command in (("validate", bad), ("run", "reference-stops", "-s", bad)):
        res = cli(*command)
        assert res.exit_code == ExitCode.USAGE_ERROR and f"{bad}{says}" in res.output, res.output
