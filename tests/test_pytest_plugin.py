"""The pytest plugin, driven through pytester on a user's test file."""

import pytest

import specaudit

pytest_plugins = ["pytester"]

USER_TESTS = """
import pytest
import specaudit

def test_broken_verifier():
    specaudit.assert_lossless("specaudit.verifiers.zoo.chain:resample_from_p", scenarios=["markov-v4"], samples=20000, seed=1)

def test_reference_verifier():
    specaudit.assert_lossless("specaudit.verifiers.reference:verify", scenarios=["markov-v4"], samples=20000, seed=1)

@pytest.mark.specaudit(scenarios=["markov-v4"], samples=20000, seed=1)
def test_fixture_with_marker(specaudit):
    result = specaudit.assert_lossless("specaudit.verifiers.reference:verify")
    assert result.scenarios[0].samples == 20000
"""


def test_user_file_fails_on_broken_verifier_with_summary(pytester):
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "specaudit: specaudit.verifiers.zoo.chain:resample_from_p is not lossless: FAILED on 1 of 1 scenarios" in out
    assert "markov-v4 / joint-law: FAILED, p (Holm) < 1e-300" in out
    assert "most deviating sequences" in out and "looks like: resample_from_p" in out


def test_marker_is_registered_and_options_exist(pytester):
    pytester.makepyfile(test_m="import pytest\n@pytest.mark.specaudit(samples=10)\ndef test_x(specaudit):\n    assert specaudit.defaults == {'samples': 10, 'seed': 7}\n")
    result = pytester.runpytest("--strict-markers", "--specaudit-seed", "7")
    result.assert_outcomes(passed=1)


def test_assert_lossless_in_process():
    with pytest.raises(AssertionError, match=r"(?s)is not lossless.*count_after_reject"):
        specaudit.assert_lossless("specaudit.verifiers.zoo.chain:count_after_reject", ["seed-context-free"], samples=20_000, seed=2)
    # a lossless but inefficient verifier is lossless; with efficiency=True it fails
    ok = specaudit.assert_lossless("specaudit.verifiers.zoo.chain:no_bonus", ["seed-context-free"], samples=20_000, seed=2)
    assert ok.scenarios[0].check("tokens-per-step").status.value == "failed"
    with pytest.raises(AssertionError, match="tokens-per-step: FAILED"):
        specaudit.assert_lossless("specaudit.verifiers.zoo.chain:no_bonus", ["seed-context-free"], samples=20_000, seed=2, efficiency=True)
    with pytest.raises(specaudit.UsageError, match="no scenarios"):
        specaudit.assert_lossless("specaudit.verifiers.reference:verify", ["tag:no-such-tag"])


def test_plugin_import_is_lazy():
    import subprocess
    import sys

    code = "import sys, specaudit.pytest_plugin; print(sorted(m for m in ('numpy', 'scipy', 'pydantic', 'specaudit.engine.run') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
