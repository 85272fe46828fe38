"""`specaudit run --certify-tv EPS`: sample until the TV bound certifies EPS, a check fails, or the cap is hit.

End to end through the engine (blocks, looks, supervision): a lossless verifier is certified, a zoo
mutant of exactly known TV fails at its first look with a bound above that TV, a cap too small for
EPS exits 6 (NOT_CERTIFIED), and every hostile EPS or scenario is a usage error (exit 4).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result

import specaudit
from specaudit.errors import ExitCode, UsageError
from specaudit.laws.chain import joint_probabilities
from specaudit.laws.mutants import KERNELS, chain_law
from specaudit.results import document
from specaudit.scenarios.catalogue import resolve
from specaudit.simulate.blocks import BLOCK

QUIET = dict(seed=5, diagnose=False, power=False, supervised=False)


def test_a_lossless_verifier_is_certified_and_a_plain_run_reports_its_bound() -> None:
    # EPS 0.05 on markov-v4: a cap of 28,800 sequences (4x the plan), two blocks
    result = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4"], certify_tv=0.05, **QUIET)
    s = result.scenarios[0]
    b = s.tv_bound
    assert result.exit_code() == ExitCode.OK and b is not None and b.certified
    assert b.bound <= 0.05 and b.confidence == pytest.approx(0.999) and b.target == 0.05
    assert b.sequences == s.info["early_stop"]["sequences"] and b.sequences <= s.samples
    # without --certify-tv: the bound at the run's confidence, after all N sequences, no exit change
    plain = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4"], samples=BLOCK, **QUIET).scenarios[0]
    assert plain.tv_bound is not None and plain.tv_bound.target is None and plain.tv_bound.sequences == BLOCK
    assert plain.tv_bound.bound == pytest.approx(plain.tv_bound.tv + np.sqrt(np.log(1e3) / (2 * BLOCK)))
    assert plain.check("joint-law").data["tv"] == pytest.approx(plain.tv_bound.tv)


def test_a_mutant_of_known_tv_fails_at_its_first_look_with_a_bound_above_that_tv() -> None:
    spec = resolve(["markov-v4"])[0].spec
    target, draft = spec.chains()
    exact_tv = 0.5 * np.abs(chain_law(target, draft, np.asarray(spec.draft_law), spec.length, KERNELS["resample_from_p"])
                            - joint_probabilities(target, spec.length)).sum()  # 0.2103, exact forward pass
    result = specaudit.run("specaudit.verifiers.zoo.chain:resample_from_p", ["markov-v4"], certify_tv=0.005, **QUIET)
    s = result.scenarios[0]
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    assert s.info["early_stop"]["stopped"] and s.tv_bound is not None and s.tv_bound.sequences == BLOCK
    assert exact_tv <= s.tv_bound.bound <= exact_tv + 0.05 and not s.tv_bound.certified


def test_cap_reached_exits_6_and_the_bound_reads_back_from_json(cli: Callable[..., Result], tmp_path: Path) -> None:
    # 0.012 is above the least bound at 30,000 (0.011), below what the plug-in TV lets it reach there
    out = tmp_path / "cert.json"
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "--certify-tv", "0.012", "--samples", "30000",
              "--seed", "1", "--no-power", "--json", out)
    assert res.exit_code == ExitCode.NOT_CERTIFIED == 6, res.output
    assert "NOT certified <= 0.012 at the sample cap" in res.output and "exit 6" in res.output
    doc = json.loads(out.read_text())
    assert doc["exit_code"] == 6 and doc["settings"]["certify_tv"] == 0.012
    bound = doc["scenarios"][0]["tv_bound"]
    assert bound["sequences"] == 30000 and 0.012 < bound["bound"] and bound["target"] == 0.012
    back = document.read(out)
    assert back.scenarios[0].tv_bound is not None and back.scenarios[0].tv_bound.bound == bound["bound"]
    assert back.exit_code() == ExitCode.NOT_CERTIFIED and back.uncertified() == ["markov-v4"]


def test_certified_run_says_so(cli: Callable[..., Result], tmp_path: Path) -> None:
    html = tmp_path / "r.html"
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "--certify-tv", "0.05", "--seed", "2",
              "--no-power", "-q", "--html", html)
    assert res.exit_code == 0, res.output
    assert "certified <= 0.05" in res.output and "at 99.9%" in res.output and "TV <= 0.05 certified" in res.output
    page = html.read_text()
    assert "at 99.9% (plug-in TV" in page and ": certified &le; 0.05" in page and "--certify-tv 0.05" in page


@pytest.mark.parametrize("eps", ["0", "-0.1", "1", "1.5", "nan", "inf", "-inf", "abc", ""])
def test_hostile_eps_is_a_usage_error(cli: Callable[..., Result], eps: str) -> None:
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "--certify-tv", eps)
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    assert "--certify-tv" in res.output and "allowed: a number 0 < x < 1, e.g. 0.005" in res.output


@pytest.mark.parametrize("eps", [0.0, -1.0, 1.0, float("nan"), float("inf"), True, "0.1"])
def test_hostile_eps_through_the_api(eps: object) -> None:
    with pytest.raises(UsageError, match=r"certify_tv = .*; allowed: 0 < EPS < 1"):
        specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4"], certify_tv=eps, **QUIET)  # type: ignore[arg-type]


@pytest.mark.parametrize(("scenario", "why"), [
    ("zipf-v32k", "too many to count; it is checked per prefix and by PIT"),
    ("corners", "mode 'exact': no sampled law"),
    ("greedy-markov", "mode 'greedy': no sampled law"),
])
def test_a_run_with_no_joint_law_to_bound_is_a_usage_error(cli: Callable[..., Result], scenario: str, why: str) -> None:
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", scenario, "--certify-tv", "0.01")
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    text = " ".join(res.output.split())
    assert f"scenario {scenario} " in text and "has no joint law to bound" in text and why in text
    both = cli("run", "specaudit.verifiers.reference:verify", "-s", scenario, "-s", "bad-rows", "--certify-tv", "0.01")
    assert both.exit_code == ExitCode.USAGE_ERROR and "none of the 2 scenarios has a joint law" in both.output


def test_a_selection_that_matches_nothing_is_nothing_to_run(cli: Callable[..., Result]) -> None:
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "tag:nonexistent", "--certify-tv", "0.05")
    assert res.exit_code == ExitCode.NO_SCENARIOS, res.output  # was an IndexError: exit 3


def test_scenarios_without_joint_law_run_beside_certified_ones(cli: Callable[..., Result]) -> None:
    # the default suite holds exact-mode corners: they run as without --certify-tv and say they have no certificate
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "-s", "corners", "-s", "bad-rows",
              "--certify-tv", "0.02", "--seed", "3", "--no-power")
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "markov-v4: TV <=" in text and "certified <= 0.02" in text
    assert "corners: no TV certificate" in text and "bad-rows: no TV certificate" in text
    assert "TV <= 0.02 certified (1 of 3 scenarios have a joint law)" in text
    bad = cli("run", "specaudit.verifiers.zoo.chain:resample_from_p", "-s", "markov-v4", "-s", "corners", "--certify-tv", "0.02",
              "--seed", "3", "--no-power")
    assert bad.exit_code == ExitCode.CHECKS_FAILED, bad.output


def test_an_eps_below_the_cap_s_least_bound_is_refused_before_sampling(cli: Callable[..., Result]) -> None:
    # the bound is at least its Hoeffding slack; --samples 10^9 at EPS 1e-300 used to sample until killed
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "--certify-tv", "1e-300", "--samples", "1e9")
    assert res.exit_code == ExitCode.USAGE_ERROR, res.output
    text = " ".join(res.output.split())
    floor = float(text.split("allowed: EPS >= ")[1].split(",")[0])
    slack = np.sqrt(np.log(1 / (1e-3 * 0.5)) / (2 * 10**9))  # last look's share of alpha is 1/2 at most 2 looks... or more
    assert slack <= floor <= slack * 1.2 and "--samples 1,000,000,000" in text
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "--certify-tv", "0.04", "--samples", "2000")
    assert res.exit_code == ExitCode.USAGE_ERROR and "is at least 0.04" in " ".join(res.output.split()), res.output


def test_a_supervised_suspect_re_run_keeps_the_cap(cli: Callable[..., Result], tmp_path: Path) -> None:
    # the CLI's supervised path re-ran at 4x the cap and certified there (exit 0 where the cap gives exit 6)
    out = tmp_path / "r.json"
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "--certify-tv", "0.05", "--samples", "2000",
              "--no-power", "--suspect-level", "0.999", "--json", out)
    doc = json.loads(out.read_text())
    rerun = doc["scenarios"][0]["rerun"]
    assert rerun is not None and rerun["samples"] == 2000 and rerun["tv_bound"]["sequences"] <= 2000, res.output


def test_a_suspect_re_run_keeps_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # a suspect first look re-runs at 4x its sequences: under --certify-tv never beyond the cap (--samples)
    from specaudit.engine import run as engine_run

    asked: list[int] = []
    real = engine_run.results

    def spy(tasks, settings, **kw):  # type: ignore[no-untyped-def]
        asked.extend(t.samples for t in tasks)
        return real(tasks, settings, **kw)

    monkeypatch.setattr(engine_run, "results", spy)
    result = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4"], samples=3000, certify_tv=0.08,
                           suspect_level=0.999, **QUIET)  # every look suspect: a re-run for sure
    assert result.scenarios[0].rerun is not None, result.scenarios[0]
    assert asked == [3000, 3000], asked


def test_eps_beyond_any_feasible_run_and_shards_are_usage_errors(cli: Callable[..., Result]) -> None:
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "--certify-tv", "1e-6")
    assert res.exit_code == ExitCode.USAGE_ERROR and "would need more than 1,000,000,000 sequences" in res.output
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "--certify-tv", "0.01", "--shard", "0/2")
    assert res.exit_code == ExitCode.USAGE_ERROR and "cannot be combined with --shard" in res.output


def test_merged_shards_report_the_unsharded_bound(cli: Callable[..., Result], tmp_path: Path) -> None:
    args = ["run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "--samples", str(2 * BLOCK), "--seed", "4",
            "--no-power", "-q", "--suspect-level", "0"]  # no re-runs: a merge re-runs nothing without --rerun
    assert cli(*args, "--json", tmp_path / "whole.json").exit_code == 0
    for i in (0, 1):
        assert cli(*args, "--shard", f"{i}/2", "--json", tmp_path / f"s{i}.json").exit_code == 0
    assert cli("merge", tmp_path / "s0.json", tmp_path / "s1.json", "--json", tmp_path / "merged.json", "-q").exit_code == 0
    whole, merged = (document.read(tmp_path / f).scenarios[0].tv_bound for f in ("whole.json", "merged.json"))
    assert whole is not None and whole == merged and whole.sequences == 2 * BLOCK


def test_assert_lossless_says_when_the_cap_was_too_small() -> None:
    with pytest.raises(AssertionError, match=r"TV <= 0.02 not certified on 1 of 1 scenarios at the sample cap") as err:
        specaudit.assert_lossless("specaudit.verifiers.reference:verify", ["markov-v4"], samples=BLOCK, certify_tv=0.02,
                                  power=False, diagnose=False, supervised=False)
    assert f"after {BLOCK:,} sequences" in str(err.value) and "raise the cap (samples) or EPS" in str(err.value)
    specaudit.assert_lossless("specaudit.verifiers.reference:verify", ["markov-v4"], certify_tv=0.05, power=False,
                              diagnose=False, supervised=False)  # positive control: certified, no assertion
