"""End to end through the library API: positive and negative controls on the shipped suite."""

import time
from pathlib import Path

import numpy as np
import pytest

import specaudit
from specaudit.engine.supervisor import PROGRESS_INTERVAL
from specaudit.errors import ExitCode
from specaudit.laws import chain as exact
from specaudit.results import Status
from specaudit.scenarios.catalogue import resolve
from specaudit.stats import gof as stats
from specaudit.verifiers import reference

CHI2_999_63 = 103.4  # the 0.1% point of chi-square with 63 df (scipy.stats.chi2.isf(1e-3, 63))


def test_chi2_constant():
    from scipy.stats import chi2

    assert chi2.isf(1e-3, 63) == pytest.approx(CHI2_999_63, abs=0.05)


def test_reference_passes_default_suite():
    result = specaudit.run("specaudit.verifiers.reference:verify")
    assert result.exit_code() == ExitCode.OK, [(s.name, s.status) for s in result.scenarios]
    assert len(result.scenarios) >= 8
    for s in result.scenarios:
        assert s.status is Status.PASSED
        assert all(c.adjusted_pvalue is not None for c in s.checks if c.statistical)  # exact checks: no p


def test_a_supervised_run_sends_progress_ten_times_a_second_at_most_and_always_its_last_batch():
    calls = []
    t0 = time.monotonic()
    result = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4"], diagnose=False,
                           progress=lambda *args: calls.append((time.monotonic(), *args)))
    elapsed = time.monotonic() - t0
    assert result.exit_code() == ExitCode.OK
    assert calls[-1][1:] == ("markov-v4", 300_000, 300_000)  # the bar ends full
    assert len(calls) <= elapsed / PROGRESS_INTERVAL + 2  # sent that far apart, and the last (one per batch: 200 calls)
    assert [c[2] for c in calls] == sorted(c[2] for c in calls)


def test_seed_context_free_shows_closed_form_inside_interval():
    result = specaudit.run("specaudit.verifiers.reference:verify", ["seed-context-free"], seed=7)
    tps = result.scenarios[0].check("tokens-per-step")
    assert tps.data["closed_form"] == pytest.approx(2.533, abs=1e-12)  # (1 - .7**4) / (1 - .7)
    assert tps.data["exact"] == pytest.approx(2.533, abs=1e-12)
    lo, hi = tps.data["ci999"]
    assert lo <= 2.533 <= hi
    assert "closed form" in tps.summary


@pytest.mark.parametrize("mutant", ["resample_from_p", "shared_uniform"])
def test_mission_negative_controls_fail_markov_v4(mutant):
    result = specaudit.run(f"specaudit.verifiers.zoo.chain:{mutant}", ["markov-v4"])
    joint = result.scenarios[0].check("joint-law")
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    assert joint.status is Status.FAILED
    assert joint.df == 62  # 64 cells; one small-cell pool merged by expected count
    assert joint.statistic > 10 * CHI2_999_63


def test_loop_based_verifier_passes_default_suite(verifiers_dir):
    # an independently written verifier (per-row loop, division, rng.choice) must pass too
    result = specaudit.run(f"{verifiers_dir / 'loop.py'}:verify", samples=20_000, seed=3)
    assert result.exit_code() == ExitCode.OK, [(s.name, [(c.name, c.pvalue) for c in s.checks]) for s in result.scenarios]


def test_exact_tokens_per_step_matches_simulation_of_reference():
    # the exact finite-horizon value is what a long run of the reference measures
    result = specaudit.run("specaudit.verifiers.reference:verify", ["peaked-v8"], samples=100_000, seed=11)
    tps = result.scenarios[0].check("tokens-per-step")
    assert abs(tps.statistic) < 4
    assert tps.data["exact"] == pytest.approx(tps.data["estimate"], rel=0.01)


def test_ragged_bonus_position_matters():
    # bonus taken from p[:, K] instead of p[:, num_draft] only shows on ragged rows
    bad = specaudit.run("specaudit.verifiers.zoo.chain:bonus_from_last", ["ragged-v4", "markov-v4"])
    by_name = {s.name: s for s in bad.scenarios}
    assert by_name["ragged-v4"].status is Status.FAILED
    # statistically it shows on ragged rows only; the padding probe every scenario runs catches it anywhere
    assert all(c.status is Status.PASSED for c in by_name["markov-v4"].checks if c.statistical)
    assert by_name["markov-v4"].check("padding-independence").status is Status.FAILED


def test_holm_spans_the_whole_run():
    result = specaudit.run("specaudit.verifiers.reference:verify", ["seed-context-free", "markov-v4"], samples=5000)
    pvals = np.array([c.pvalue for s in result.scenarios for c in s.checks if c.statistical])  # probes: no p-value
    adj = np.array([c.adjusted_pvalue for s in result.scenarios for c in s.checks if c.statistical])
    np.testing.assert_allclose(adj, stats.holm(pvals))


def test_same_seed_same_result_and_seed_changes_it():
    a = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4"], seed=5, samples=3000)
    b = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4"], seed=5, samples=3000)
    c = specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4"], seed=6, samples=3000)
    ja, jb, jc = (r.scenarios[0].check("joint-law").data["observed"] for r in (a, b, c))
    assert ja == jb and ja != jc


def test_callable_target_and_scenario_object():
    spec = resolve(["seed-context-free"])[0].spec
    result = specaudit.run(reference.verify, [spec], samples=2000)
    assert result.scenarios[0].status is Status.PASSED


@pytest.mark.parametrize(
    "name, clause",
    [
        ("wrong_shape", "shape"),
        ("float_ids", "dtype"),
        ("nan_ids", "dtype"),
        ("id_equals_vocab", "vocab-range"),
        ("returns_one_thing", "return"),
    ],
)
def test_contract_violation_is_an_error_naming_the_clause(verifiers_dir, name, clause):
    result = specaudit.run(f"{verifiers_dir / 'broken.py'}:{name}", ["seed-context-free", "markov-v4"], samples=1000)
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    for s in result.scenarios:  # the run goes on: every scenario reports its own error
        assert s.status is Status.ERROR and s.error.clause == clause


def test_crash_is_an_error_with_the_users_frame(verifiers_dir):
    result = specaudit.run(f"{verifiers_dir / 'broken.py'}:raises", ["seed-context-free", "markov-v4"], samples=1000)
    assert len(result.scenarios) == 2
    err = result.scenarios[0].error
    assert err.kind == "crash" and "out of shared memory" in err.message
    assert "broken.py" in err.traceback and "raise RuntimeError" in err.traceback


def test_exact_law_of_joint_matches_chain_product():
    # exact.joint_probabilities against a hand product for the context-free seed
    spec = resolve(["seed-context-free"])[0].spec
    target, _ = spec.chains()
    p = np.array([0.5, 0.3, 0.15, 0.05])
    np.testing.assert_allclose(exact.joint_probabilities(target, 3), np.einsum("i,j,k->ijk", p, p, p).ravel())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 1.0}, r"alpha = 1.0; allowed: 0 < alpha < 1"),
        ({"suspect_level": 1.5}, r"suspect_level = 1.5; allowed: 0 <= suspect_level < 1"),
        ({"method": "chi"}, r"method = 'chi'; allowed: 'pearson', 'g'"),
        ({"samples": 0}, r"samples = 0; allowed: >= 1"),
        ({"timeout": -1.0}, r"timeout = -1.0; allowed: seconds >= 0"),
        ({"jobs": 0}, r"jobs = 0; allowed: >= 1"),
        ({"backend": "dask"}, r"backend = 'dask'; allowed: 'local', 'ray'"),
        ({"shard": (0, 2), "early_stop": True}, r"cannot be combined with --shard"),
    ],
)
def test_run_settings_refuse_values_out_of_range(kwargs, message):
    from specaudit.engine.settings import RunSettings

    with pytest.raises(specaudit.UsageError, match=message):
        RunSettings(**kwargs)
    with pytest.raises(specaudit.UsageError, match=message):  # the public API validates through the same object
        specaudit.run("specaudit.verifiers.reference:verify", ["markov-v4"], **kwargs)


@pytest.mark.parametrize(("text", "message"), [("1-2", "expected i/n with integers"), ("2/2", "allowed 0 <= i < n")])
def test_shard_strings_are_parsed_or_refused(text, message):
    from specaudit.engine.settings import parse_shard

    assert parse_shard("1/3") == (1, 3) and parse_shard(None) is None and parse_shard([0, 2]) == (0, 2)
    with pytest.raises(specaudit.UsageError, match=message):
        parse_shard(text)


def test_run_settings_read_back_what_they_record():
    from specaudit.engine.settings import RunSettings, default_suspect_level

    shard = RunSettings(alpha=1e-2, seed=4, samples=3000, method="g", gate_efficiency=False, timeout=None,
                        suspect_level=0.2, power=False, shard=(1, 3))
    doc = {"alpha": shard.alpha, "seed": shard.seed, "settings": shard.record("hf")}
    assert RunSettings.from_record(doc) == shard
    assert shard.suspect == 0.0 and shard.holm_suspect is None  # a shard's verdicts are provisional
    plain = RunSettings(alpha=1e-3)
    assert "shard" not in plain.record() and plain.suspect == default_suspect_level(1e-3) == pytest.approx(0.1)
    assert RunSettings(alpha=0.1, suspect_level=0.05).holm_suspect is None  # suspect <= alpha: no re-runs
    assert plain.stop_level(3) is None and 0 < RunSettings(early_stop=True).stop_level(3) < 1e-3 / 3


@pytest.mark.parametrize("gone", ["runner", "mutants", "reference"])
def test_removed_shim_modules_are_not_in_the_package(gone):
    from importlib.machinery import PathFinder

    # removed (CHANGELOG.md, Unreleased); their TARGET strings still load through contract.targets.LEGACY. Looked up in
    # the package's own folder: a development machine's editable install may map the name to another checkout.
    assert PathFinder.find_spec(f"specaudit.{gone}", specaudit.__path__) is None
    assert PathFinder.find_spec("run", [str(Path(specaudit.__file__).parent / "engine")]) is not None


def test_no_module_of_the_package_is_a_deprecation_shim():
    import pkgutil

    root = Path(specaudit.__file__).parent
    sources = {m.name: (root / m.name.replace(".", "/")).with_suffix(".py")
               for m in pkgutil.walk_packages([str(root)]) if not m.ispkg}
    shims = [name for name, path in sources.items() if path.exists() and "DeprecationWarning" in path.read_text()]
    assert len(sources) > 50 and shims == []
