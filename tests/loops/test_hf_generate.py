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




def _emitted(setup: hf.Setup, cell: tuple[int, ...]) -> tuple[int, ...]:
    """Return the tokens of an EOS-padded cell up to and including its first EOS."""
    return cell[: cell.index(setup.eos) + 1] if setup.eos in cell else cell


def _mass(setup: hf.Setup, rule) -> float:
    """Return the exact law's mass on the continuations whose prompt + emitted tokens ``rule`` holds for."""
    shaped = hf.exact_law(setup).reshape((setup.vocab,) * setup.length)
    return float(sum(shaped[c] for c in np.ndindex(shaped.shape) if rule(setup.prompt + _emitted(setup, c))))


def _pairs(tokens: tuple[int, ...]) -> list[tuple[int, int]]:
    return list(zip(tokens, tokens[1:]))


FORBIDDEN = {  # configuration: (the processor switched off, what it forbids in prompt + emitted tokens)
    "no-repeat-ngram": ({"no_repeat_ngram_size": None}, lambda t: len(set(_pairs(t))) < len(_pairs(t))),
    "min-new-tokens": ({"min_new_tokens": None}, lambda t: t[-1] == 3 and len(t) - 2 <= 3),  # EOS 3, prompt (1, 2)
    "bad-words": ({"bad_words_ids": None}, lambda t: any(pair in ((3, 3), (4, 1)) for pair in _pairs(t))),
}


@pytest.mark.parametrize("name", list(FORBIDDEN))
def test_the_history_configurations_enumerate_hfs_own_history_processors(name):
    # the exact law is HF's processors over prompt + the tokens emitted so far: what they forbid has mass 0
    # (negative control: the same setup without the processor puts mass there)
    import dataclasses

    off, forbidden = FORBIDDEN[name]
    setup = hf.CONFIGS[name].setup
    assert _mass(setup, forbidden) == 0.0
    assert _mass(dataclasses.replace(setup, **off), forbidden) > 0.01


def test_the_repetition_penalty_configuration_moves_the_law():
    import dataclasses

    pen = hf.CONFIGS["repetition-penalty"].setup
    assert np.abs(hf.exact_law(pen) - hf.exact_law(dataclasses.replace(pen, repetition_penalty=None))).sum() > 0.05


def test_a_history_configuration_passes_the_release_and_fails_the_block_start_mutant():
    # transformers 5.25.0 processes position cur_len + i with candidate_input_ids[:, :cur_len + i]; the mutant uses
    # the block's start for every position (vLLM PR #44297, SGLang PR #33643): EOS accepted inside the first 3 tokens
    from specaudit.engine.run import apply_holm

    config = hf.CONFIGS["min-new-tokens"]
    good, bad = (hf.measure(config, 200, 5, mutant=m) for m in (None, "target-scores-block-start"))
    good, bad = apply_holm([good, bad], 1e-3)
    assert good.status is Status.PASSED, good.checks[0].summary
    assert bad.status is Status.FAILED and "continuations of target probability 0 were emitted" in bad.checks[0].summary
    # the trajectory: the block's first position has its true history, so the first divergence comes later, where
    # EOS is no longer masked by the true history but still is by the block start's
    assert good.checks[0].data["first_divergence"] is None
    where = bad.checks[0].data["first_divergence"]
    assert where["position"] >= 1 and where["pvalue"] <= where["level"], where
    assert "first divergence at new token" in bad.checks[0].summary and where["expected"] != where["observed"]


@pytest.mark.parametrize(("field", "value", "says"), [
    ("repetition_penalty", 0.0, "None or a finite number > 0"),
    ("no_repeat_ngram_size", 0, "None or an integer >= 1"),
    ("min_new_tokens", 9, "None or 0 .. length (3)"),
    ("bad_words_ids", ((7,),), "None or non-empty sequences of tokens 0 .. 5"),
    ("bad_words_ids", ((),), "None or non-empty sequences of tokens 0 .. 5"),
])
def test_bad_history_processing_is_a_usage_error_naming_the_field(field, value, says):
    with pytest.raises(UsageError, match=rf"hf-generate: {field} = .*; allowed: {says.replace('(', '[(]').replace(')', '[)]')}"):
        hf.Setup(**{field: value})


def test_every_loop_mutant_names_configurations_it_must_fail():
    from specaudit.loops import hf_mutants

    assert set(hf_mutants.CAUGHT_ON) == set(hf_mutants.MUTANTS.names())
    assert all(name in hf.CONFIGS for names in hf_mutants.CAUGHT_ON.values() for name in names)


def test_the_first_divergence_is_the_shortest_departing_prefix_and_none_on_the_law_itself():
    # exact counts proportional to the law: nothing departs; the same counts with one prefix's next tokens swapped
    # depart there first
    setup = hf.Setup(vocab=3, eos=2, prompt=(0,), length=3, top_k=None, top_p=None)
    law = np.full(27, 0.0)
    shaped = law.reshape(3, 3, 3)
    for cell in np.ndindex(3, 3, 3):
        if 2 in cell and any(x != 2 for x in cell[cell.index(2):]):
            continue  # not EOS-padded
        shaped[cell] = 1.0
    law /= law.sum()
    counts = np.round(law * 90_000)
    assert hf.first_divergence(counts, law, setup) is None
    moved = counts.reshape(3, 3, 3).copy()
    moved[1, 0], moved[1, 1] = moved[1, 1].copy() * 0, moved[1, 1] + moved[1, 0]  # after [1], token 0 never follows
    where = hf.first_divergence(moved.ravel(), law, setup)
    assert where is not None and where["position"] == 1 and where["prefix"] == [1] and 0 not in where["observed"]

