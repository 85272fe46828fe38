"""selftest (calibration + zoo), the suspect verdict with its automatic re-run, and the plan CLI."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from click.testing import CliRunner

import specaudit
from specaudit.cli import main
from specaudit.engine import run as runner
from specaudit.engine import selftest
from specaudit.errors import ExitCode, UsageError
from specaudit.results import Category, CheckResult, ScenarioResult, Status, document
from specaudit.verifiers import reference
from specaudit.verifiers.zoo import chain as mutants

SMALL = ["seed-context-free", "markov-v4"]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SPECAUDIT_CACHE", str(tmp_path_factory.getbasetemp() / "law-cache"))


# ---- selftest --------------------------------------------------------------------------------


def test_selftest_reference_is_calibrated():
    result = selftest.selftest(SMALL, seeds=12, samples=2000, mutants=False, draws=5000)
    assert result.calibrated, result.problems
    assert result.exit_code() == ExitCode.OK
    assert result.tests == 12 * 6 and len(result.checks) == 6
    assert all(len(c.pvalues) == 12 for c in result.checks)
    assert all(c.false_alarms <= result.check_limit for c in result.checks)
    # the law stage judged every check, per-prefix and PIT on the coverage scenario; the shard merge matched
    assert {t.check for t in result.tails} >= {"joint-law/g", "early-stop", "rerun", "per-prefix/node", "pit"}
    assert not any(t.flagged for t in result.tails) and result.shard_mismatches == ()


def test_false_alarms_are_judged_per_check_not_pooled_over_correlated_checks(monkeypatch):
    # one null run in which tokens-per-step and accept-length (which read the same accept counts) both fall
    # below alpha: two of 30 pooled p-values, outside Binomial(30, 1e-3)'s interval 0..1, yet one alarm per check
    # in 10 independent runs is what alpha allows; three alarms in one check are not
    def fake(loaded, seeds, settings, progress):
        spread = list(np.linspace(0.05, 0.95, seeds))
        p = {(("markov-v4", check)): list(spread) for check in ("joint-law", "tokens-per-step", "accept-length")}
        p[("markov-v4", "tokens-per-step")][3] = p[("markov-v4", "accept-length")][3] = 1e-4
        return p, 1, None

    monkeypatch.setattr(selftest, "_calibrate", fake)
    monkeypatch.setattr(selftest, "_uniformity", _fixed_uniformity(selftest._uniformity))
    one_run = selftest.selftest(["markov-v4"], seeds=10, samples=2000, mutants=False, draws=0)
    assert one_run.false_alarms == 2 and one_run.interval == (0, 1) and one_run.check_limit == 1
    assert one_run.calibrated, one_run.problems

    def three(loaded, seeds, settings, progress):
        p, _, _ = fake(loaded, seeds, settings, progress)
        p[("markov-v4", "joint-law")][:3] = [1e-4] * 3
        return p, 3, None

    monkeypatch.setattr(selftest, "_calibrate", three)
    bad = selftest.selftest(["markov-v4"], seeds=10, samples=2000, mutants=False, draws=0)
    assert not bad.calibrated
    assert "miscalibrated: markov-v4 / joint-law: 3 of 10 p-values <= alpha; at most 1 expected" in "\n".join(bad.problems)


def _fixed_uniformity(uniformity):
    """Return ``_uniformity`` whose KS p-values are 1 (the fake p-values test the false-alarm rule only)."""
    def fixed(pvalues, seeds, alpha):
        return tuple(dataclasses.replace(r, ks_pvalue=1.0, adjusted_ks_pvalue=1.0) for r in uniformity(pvalues, seeds, alpha))
    return fixed


def test_selftest_catches_a_miscalibrated_tester(monkeypatch):
    # negative control: the "reference" the calibration trusts is actually lossy
    rng = np.random.default_rng(0)  # unused: the broken verifier draws from the harness rng
    del rng
    monkeypatch.setattr(selftest.reference, "verify", mutants.MUTANTS["lenient"].func)
    result = selftest.selftest(["seed-context-free"], seeds=10, samples=2000, mutants=False, draws=0)
    assert not result.calibrated
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    assert any("not uniform" in p for p in result.problems)


def test_selftest_zoo_detects_and_reports_misses(monkeypatch):
    ok = selftest.selftest(["seed-context-free"], seeds=10, samples=5000, draws=0)
    assert ok.mutants_ok, ok.problems
    got = {o.mutant: o for o in ok.mutants}
    assert got["resample_from_p"].expected == "detect" and got["resample_from_p"].status == "failed"
    assert got["no_bonus"].expected == "pass distribution" and got["no_bonus"].efficiency_failed
    # negative control: a "mutant" that is secretly the reference must be reported as missed
    fake = dataclasses.replace(mutants.MUTANTS["lenient"], func=reference.verify)
    monkeypatch.setitem(mutants.MUTANTS, "lenient", fake)
    bad = selftest.selftest(["seed-context-free"], seeds=10, samples=5000, draws=0)
    assert not bad.mutants_ok and bad.exit_code() == ExitCode.CHECKS_FAILED
    assert any(p.startswith("mutant lenient missed on seed-context-free") for p in bad.problems)


def test_selftest_validates_its_arguments():
    with pytest.raises(UsageError, match="seeds = 3"):
        selftest.selftest(SMALL, seeds=3)
    with pytest.raises(UsageError, match="samples"):
        selftest.selftest(SMALL, samples=10)
    with pytest.raises(UsageError, match="draws = 50"):
        selftest.selftest(SMALL, draws=50)


def test_selftest_cli_exit_codes():
    cli = CliRunner()
    ok = cli.invoke(main, ["selftest", "-s", "seed-context-free", "--seeds", "10", "--samples", "2000", "--no-mutants",
                           "--draws", "2000"])
    assert ok.exit_code == 0, ok.output
    assert "KS p" in ok.output and "false alarms" in ok.output
    assert "exact-null draws: 2,000 per (scenario, check)" in ok.output and "none flagged" in ok.output
    bad = cli.invoke(main, ["selftest", "--seeds", "3"])
    assert bad.exit_code == int(ExitCode.USAGE_ERROR)


# ---- suspect verdicts and re-runs ------------------------------------------------------------


def _scenario(name: str, pvalues: list[float], samples: int = 100) -> ScenarioResult:
    checks = tuple(
        CheckResult(f"c{i}", Category.DISTRIBUTION, Status.PENDING, "", 1.0, p) for i, p in enumerate(pvalues)
    )
    return ScenarioResult(name, "<t>", 1, "h", "", 7, samples, checks)


def test_apply_holm_settles_pass_suspect_fail():
    done = runner.apply_holm([_scenario("a", [1e-6, 0.01]), _scenario("b", [0.5])], 1e-3, suspect_level=0.1)
    a, b = done
    assert [c.status for c in a.checks] == [Status.FAILED, Status.SUSPECT]  # Holm: 3e-6, 0.02
    assert b.checks[0].status is Status.PASSED
    plain = runner.apply_holm([_scenario("a", [1e-6, 0.01])], 1e-3)
    assert plain[0].checks[1].status is Status.PASSED  # no suspect level: no suspects


@pytest.mark.parametrize("rerun_p, verdict", [(1e-9, Status.FAILED), (0.9, Status.PASSED)])
def test_rerun_decides_a_suspect_scenario(rerun_p, verdict):
    first = runner.apply_holm([_scenario("a", [0.01]), _scenario("b", [0.9])], 1e-3, 0.1)
    assert first[0].status is Status.SUSPECT
    calls = []

    def remeasure(i, seed, samples):
        calls.append((i, seed, samples))
        return _scenario("a", [rerun_p], samples)

    out = runner.rerun_suspects(first, remeasure, 1e-3, 0.1)
    assert calls == [(0, runner.rerun_seed(7), 400)]  # fresh seed, 4x samples, suspects only
    assert out[0].checks[0].status is Status.SUSPECT  # the first result is kept as it was
    assert out[0].rerun.samples == 400 and out[0].status is verdict
    assert out[0].rerun.checks[0].adjusted_pvalue == pytest.approx(min(1.0, 2 * rerun_p))  # same family of 2
    assert out[1] is first[1]


def test_a_probe_error_is_not_rerun_away():
    # a probe that errored (a verifier raising on one probe call) beside a suspect check: the ERROR stands
    import dataclasses

    first = runner.apply_holm([_scenario("a", [0.01])], 1e-3, 0.1)
    errored = CheckResult("adversarial-uniforms", Category.CONTRACT, Status.ERROR, "raised ValueError", None, None)
    first = [dataclasses.replace(first[0], checks=(*first[0].checks, errored))]
    out = runner.rerun_suspects(first, lambda i, seed, n: _scenario("a", [0.9], n), 1e-3, 0.1)
    assert out[0].rerun is not None and out[0].rerun.status is Status.PASSED and out[0].status is Status.ERROR


def test_suspect_scenario_is_rerun_end_to_end_and_survives_json(tmp_path):
    # resample_from_p at N = 100 is borderline: suspect at first, caught with 4x the samples
    result = specaudit.run(
        "specaudit.verifiers.zoo.chain:resample_from_p", ["seed-context-free"], samples=100, seed=1, suspect_level=0.9,
        diagnose=False, power=False,
    )
    s = result.scenarios[0]
    assert any(c.status is Status.SUSPECT for c in s.checks)
    assert s.rerun is not None and s.rerun.samples == 400 and s.rerun.seed != s.seed
    assert s.rerun.check("joint-law").status is Status.FAILED
    assert s.status is Status.FAILED and result.exit_code() == ExitCode.CHECKS_FAILED
    back = document.read(document.write(result, tmp_path / "r.json"))
    assert back.scenarios[0].rerun.check("joint-law").status is Status.FAILED
    assert back.scenarios[0].status is Status.FAILED


def test_reference_suspect_rerun_passes():
    # positive control: a huge suspect level re-runs the reference; its re-run passes
    # (all Holm p-values can exceed 0.99, about one seed in three: the first seed with a re-run counts)
    for seed in range(2, 12):
        result = specaudit.run("specaudit.verifiers.reference:verify", ["seed-context-free"], samples=2000, seed=seed,
                               suspect_level=0.99, diagnose=False, power=False)
        s = result.scenarios[0]
        if s.rerun is not None:
            break
    assert s.rerun is not None and s.status is Status.PASSED and result.exit_code() == ExitCode.OK


def test_suspect_level_is_validated():
    with pytest.raises(UsageError, match="suspect_level"):
        specaudit.run("specaudit.verifiers.reference:verify", ["seed-context-free"], samples=100, suspect_level=1.5)


# ---- plan CLI ----------------------------------------------------------------------------------


def test_plan_cli_answers_each_question():
    cli = CliRunner()
    out = cli.invoke(main, ["plan", "-s", "markov-v4", "--tv", "0.02", "--samples", "20000", "--mutant",
                            "resample_from_p", "--power", "0.99", "--alpha", "1e-3"])
    assert out.exit_code == 0, out.output
    assert "to detect TV 0.02 in every direction: N >=" in out.output
    assert "at N = 20,000" in out.output and "to catch resample_from_p" in out.output
    bad = cli.invoke(main, ["plan", "-s", "markov-v4", "--alpha", "2"])
    assert bad.exit_code == int(ExitCode.USAGE_ERROR) and "alpha" in bad.output
    unknown = cli.invoke(main, ["plan", "-s", "markov-v4", "--mutant", "resample_from_q"])
    assert unknown.exit_code == int(ExitCode.USAGE_ERROR) and "resample_from_p" in unknown.output


def test_run_cli_shows_power_table():
    out = CliRunner().invoke(main, ["run", "specaudit.verifiers.reference:verify", "-s", "zero-drafts", "--samples", "5000"])
    assert out.exit_code == 0, out.output
    assert "detectable TV" in out.output and "flagged: zero-drafts: blind to resample_from_p" in out.output
    quiet = CliRunner().invoke(main, ["run", "specaudit.verifiers.reference:verify", "-s", "zero-drafts", "--samples", "5000",
                                      "--no-power"])
    assert quiet.exit_code == 0 and "detectable TV" not in quiet.output
