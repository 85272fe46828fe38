"""HF assisted generation end to end: the real transformers loop against the enumerated exact law."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from specaudit.cli import main
from specaudit.errors import UsageError
from specaudit.loops import hf
from specaudit.results import Status

# small: V = 5, L = 2 (25 cells, enumerated exactly), N = 1000
SETUP = hf.Setup(vocab=5, eos=4, prompt=(1, 2), length=2, top_k=3, top_p=0.95, greedy_prompts=4)
N = 1000


@pytest.fixture(scope="module")
def law() -> np.ndarray:
    return hf.exact_law(SETUP)


def test_exact_law_is_a_law_with_eos_padding(law):
    assert law.sum() == pytest.approx(1.0)
    cells = law.reshape(SETUP.vocab, SETUP.vocab)
    # after EOS only EOS: (eos, t) has probability 0 for t != eos
    assert np.all(cells[SETUP.eos, : SETUP.eos] == 0)
    assert (law > 0).sum() > 5  # far from a point mass


#: The verdict each audited transformers release deserves end to end (.ci/run installs the one CI runs).
VERDICTS = {"5.25.0": Status.PASSED}


def _audited_release() -> str:
    """Return the installed transformers release, skipping (saying so) one with no recorded verdict."""
    import transformers

    release = transformers.__version__
    if release not in VERDICTS:
        pytest.skip(f"transformers {release}: no end-to-end verdict recorded for it (audited: {', '.join(VERDICTS)})")
    return release


def test_exact_draws_pass_at_the_level(law):
    # null: counts drawn from the exact law itself (numpy) pass the same check
    rng = np.random.default_rng(5)
    draws = hf.Draws(rng.multinomial(N, law), 0, None, 0.0)
    assert hf.joint_law(draws, law, SETUP, 1e-3).status is Status.PASSED


def test_malformed_continuations_fail():
    assert hf.cell_of([1, 2, 3], SETUP) is None  # longer than max_new_tokens
    assert hf.cell_of([1], SETUP) is None  # stopped early without EOS
    assert hf.cell_of([4], SETUP) == SETUP.eos * SETUP.vocab + SETUP.eos


def test_greedy_assisted_equals_plain():
    assert hf.greedy_equality(SETUP).status is VERDICTS[_audited_release()]


def test_bad_setup_and_version_are_usage_errors():
    with pytest.raises(UsageError, match="eos = 9"):
        hf.Setup(eos=9)
    with pytest.raises(UsageError, match="installed transformers"):
        hf.check_version("0.0.1")
    with pytest.raises(UsageError, match="unknown hf-generate mutant"):
        hf.audit(SETUP, samples=10, mutant="nope")


def test_cli_wrong_version_exits_4():
    out = CliRunner().invoke(main, ["run", "hf-generate@0.0.1"])
    assert out.exit_code == 4, out.output
    assert "installed transformers" in out.output


def test_released_transformers_gets_its_verdict_and_mutant_fails():
    # the results path of a run: a ScenarioResult per configuration, its joint law PENDING until Holm;
    # the release under audit (named, never whichever pip resolved) and a negative control (q before
    # temperature / top-k / top-p); at L = 2 the assistant drafts one token a round, so draft-probs-shifted
    # has no row to shift
    from specaudit.engine.run import apply_holm

    config = hf.Config("small", "V=5 L=2", SETUP)
    good = hf.measure(config, N, 11)
    assert good.checks[0].status is Status.PENDING and good.checks[0].pvalue is not None
    bad = hf.measure(config, N, 11, mutant="draft-probs-unprocessed")
    settled = apply_holm([good, bad], 1e-3)
    assert settled[0].status is VERDICTS[_audited_release()], settled[0].checks[0].summary
    assert settled[1].status is Status.FAILED and settled[1].checks[0].adjusted_pvalue <= 1e-3


def test_unknown_configuration_is_a_usage_error_naming_the_choices():
    with pytest.raises(UsageError, match="-s nope: not a configuration of hf-generate; it has: sampled, greedy"):
        hf.configurations(["nope"])
    assert [c.name for c in hf.configurations(["greedy", "greedy"])] == ["greedy"]


#: Cheap configurations for the CLI: V = 6, one token (6 cells), and greedy decoding.
CHEAP = ["-s", "max-new-tokens-1", "-s", "greedy", "--samples", "300", "--seed", "4"]


def test_cli_writes_json_html_junit_naming_the_release(tmp_path):
    import json
    import xml.etree.ElementTree as ET

    from specaudit.results import schema

    release = _audited_release()
    paths = {"--json": tmp_path / "r.json", "--html": tmp_path / "r.html", "--junit": tmp_path / "r.xml"}
    flags = [str(x) for pair in paths.items() for x in pair]
    out = CliRunner().invoke(main, ["run", "hf-generate", *CHEAP, *flags])
    assert out.exit_code == 0 if VERDICTS[release] is Status.PASSED else 1, out.output
    doc = json.loads(paths["--json"].read_text())
    schema.validate(doc)
    assert [s["name"] for s in doc["scenarios"]] == ["max-new-tokens-1", "greedy"]
    assert doc["environment"]["engine"] == "transformers" and doc["environment"]["engine_version"] == release
    assert doc["exit_code"] == out.exit_code and doc["seed"] == 4
    joint = doc["scenarios"][0]["checks"][0]
    assert joint["name"] == "joint-law" and joint["adjusted_pvalue"] is not None
    cases = ET.parse(paths["--junit"]).getroot().iter("testcase")
    assert {c.get("name") for c in cases} >= {"joint-law", "greedy-equality"}
    assert f"transformers {release}" in paths["--html"].read_text()
    # the same run as its own baseline: nothing regressed
    again = CliRunner().invoke(main, ["run", "hf-generate", *CHEAP, "--baseline", str(paths["--json"])])
    assert again.exit_code == out.exit_code, again.output


@pytest.mark.parametrize(("flags", "named"), [
    (["--shard", "0/2"], "--shard"), (["--batch", "8"], "--batch"), (["--adapter", "torch"], "--adapter"),
    (["--early-stop", "--certify-tv", "0.01"], "--early-stop, --certify-tv"), (["--contract", "logits"], "--contract"),
])
def test_cli_refuses_options_that_cannot_apply_before_any_draw(flags, named, tmp_path):
    out = CliRunner().invoke(main, ["run", "hf-generate", *CHEAP, "--json", str(tmp_path / "r.json"), *flags])
    assert out.exit_code == 4, out.output
    assert f"{named}: not available with hf-generate" in out.output
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("flags", "message"), [
    (["-s", "markov-v4"], "-s markov-v4: not a configuration of hf-generate"),
    (["--fail-on", "tokens-per-step:2%"], "--fail-on needs --baseline"),
    (["--json", "/"], "'--json': File '/' is a directory"),
])
def test_cli_bad_input_exits_4_naming_it(flags, message):
    out = CliRunner().invoke(main, ["run", "hf-generate", "--samples", "10", *flags])
    assert out.exit_code == 4, out.output
    assert message in out.output


def test_repro_is_refused_with_the_loop_audit_and_nothing_is_written(tmp_path):
    out = CliRunner().invoke(main, ["run", "hf-generate", "--repro", str(tmp_path / "repros")])
    assert out.exit_code == 4, out.output
    assert "--repro: not available with hf-generate" in out.output
    assert not (tmp_path / "repros").exists()
