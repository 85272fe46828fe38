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


def test_released_transformers_gets_its_verdict_and_mutant_fails(law):
    # the release under audit (named, never whichever pip resolved) and a negative control (q before
    # temperature / top-k / top-p); at L = 2 the assistant drafts one token a round, so draft-probs-shifted
    # has no row to shift
    release = _audited_release()
    good = hf.joint_law(hf.sample_counts(SETUP, N, 11), law, SETUP, 1e-3)
    bad = hf.joint_law(hf.sample_counts(SETUP, N, 11, mutant="draft-probs-unprocessed"), law, SETUP, 1e-3)
    assert good.status is VERDICTS[release], good.summary
    assert bad.status is Status.FAILED, bad.summary


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


@pytest.mark.parametrize("flags", [["--json", "r.json"], ["--html", "r.html"], ["--junit", "r.xml"], ["-s", "markov-v4"]])
def test_cli_refuses_the_reports_it_cannot_write_yet_before_any_draw(flags, tmp_path):
    out = CliRunner().invoke(main, ["run", "hf-generate", "--samples", "10", *flags])
    assert out.exit_code == 4, out.output
    assert "not available with hf-generate yet" in out.output and flags[0].split("/")[0] in out.output
    assert not list(tmp_path.iterdir())
