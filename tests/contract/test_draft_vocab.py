"""A drafter with a vocabulary of its own: the d2t map, the draft-vocab contract, the remap mutants.

Positive control: the reference remaps q through d2t and passes; negative controls: the skipped
remap (rtp-llm PR #1295/#1311) and the map read backwards fail, on a draft vocabulary smaller than
the target's and on an identity-width permutation. Their power at the scenarios' N comes from
``specaudit plan`` (simulated mutant laws); bad maps are usage errors naming file, line and key.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import specaudit
from specaudit.analysis.plan import plan
from specaudit.chains.tabular import TabularChain
from specaudit.chains.vocab import check_map, restrict
from specaudit.errors import ExitCode, UsageError
from specaudit.scenarios.loading import load_scenario, parse_scenario
from specaudit.verifiers.vocab import to_target

SCENARIOS = Path(__file__).parents[2] / "scenarios"
SMALL = str(SCENARIOS / "draft-vocab-v8.yaml")
PERMUTED = str(SCENARIOS / "draft-vocab-permuted.yaml")
MUTANTS = ("skipped_remap", "inverted_remap")


def test_restrict_renormalises_the_drafter_on_the_maps_image() -> None:
    rng = np.random.default_rng(401)
    dist = rng.dirichlet(np.ones(6), size=6)
    chain = TabularChain(dist, np.broadcast_to(np.arange(6), (6, 6)).copy(), 0)
    d2t = np.array([4, 1, 3])
    law = restrict(chain, d2t).dist
    np.testing.assert_allclose(law[:, [0, 2, 5]], 0.0)
    np.testing.assert_allclose(law[:, d2t], dist[:, d2t] / dist[:, d2t].sum(axis=1, keepdims=True))
    np.testing.assert_array_equal(to_target(law[:, d2t], d2t, 6), law)  # the reference's remap inverts the restriction


@pytest.mark.parametrize(("d2t", "match"), [
    ([0, 6], r"d2t\[1\] = 6 is not a target id; allowed: 0 .. 5"),
    ([2, 0, 2], r"d2t\[0\] and d2t\[2\] are both target id 2; allowed: a one-to-one map"),
    (list(range(7)), r"d2t lists 7 draft ids; allowed: 1 .. vocab = 6"),
    ([], r"d2t lists 0 draft ids"),
])
def test_check_map_refuses_what_is_not_a_one_to_one_map_into_the_vocabulary(d2t: list[int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_map(d2t, 6)


@pytest.mark.parametrize("scenario", [SMALL, PERMUTED], ids=["v8-vd5", "permuted"])
def test_reference_passes_and_remap_mutants_fail(scenario: str) -> None:
    reference = specaudit.run("reference-draft-vocab", [scenario], contract="draft-vocab", seed=11, power=False)
    assert reference.status.value == "passed", [(c.name, c.pvalue) for c in reference.scenarios[0].checks]
    for name in MUTANTS:
        result = specaudit.run(f"specaudit.verifiers.zoo.vocab:{name}", [scenario], contract="draft-vocab", seed=11,
                               power=False)
        assert result.status.value == "failed", name
        joint = next(c for c in result.scenarios[0].checks if c.name == "joint-law")
        assert joint.pvalue < 1e-12, name
    # the engine remapped: under the probs contract the canonical reference sees q in target space and passes
    assert specaudit.run("reference", [scenario], seed=11, power=False).status.value == "passed"


def test_without_a_map_the_remap_bugs_are_invisible() -> None:
    # identity map (no d2t): the skipped remap reads the right entries; this is why scenarios need a map
    for target in ("reference-draft-vocab", "specaudit.verifiers.zoo.vocab:skipped_remap",
                   "specaudit.verifiers.zoo.vocab:inverted_remap"):
        result = specaudit.run(target, ["markov-v4"], contract="draft-vocab", seed=12, samples=20_000, power=False)
        assert result.status.value == "passed", target


@pytest.mark.parametrize("scenario", [SMALL, PERMUTED], ids=["v8-vd5", "permuted"])
@pytest.mark.parametrize("mutant", MUTANTS)
def test_plan_power_against_remap_mutants_at_the_scenarios_samples(scenario: str, mutant: str) -> None:
    spec = load_scenario(scenario).spec
    answer = plan(spec, alpha=1e-3, tests=3, samples=spec.samples, mutant=mutant)
    assert answer.mutant_power is not None and answer.mutant_power >= 0.99
    assert answer.mutant_tv is not None and answer.mutant_tv > 0.3


def test_exact_probes_drive_a_draft_vocab_verifier_with_the_identity_map() -> None:
    result = specaudit.run("reference-draft-vocab", ["corners"], contract="draft-vocab", seed=13)
    assert result.status.value == "passed"
    assert len(result.scenarios[0].checks) > 5


# ---- hostile inputs -------------------------------------------------------------------------------


@pytest.mark.parametrize(("d2t", "words"), [
    ("[7, 2, 8, 0, 3]", "d2t: d2t[2] = 8 is not a target id; allowed: 0 .. 7"),
    ("[7, 2, 5, 2, 3]", "d2t: d2t[1] and d2t[3] are both target id 2"),
    ("[0, 1, 2, 3, 4, 5, 6, 7, 0]", "d2t: d2t lists 9 draft ids; allowed: 1 .. vocab = 8"),
    ("[1, -1]", "d2t[1]: Input should be greater than or equal to 0"),
    ("7", "d2t: Input should be a valid list"),
])
def test_bad_map_is_a_usage_error_naming_file_line_and_key(cli, tmp_path: Path, d2t: str, words: str) -> None:
    text = Path(SMALL).read_text().replace("d2t: [7, 2, 5, 0, 3]", f"d2t: {d2t}")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if row.startswith("d2t:"))
    result = cli("run", "reference-draft-vocab", "--contract", "draft-vocab", "-s", str(path))
    assert result.exit_code == ExitCode.USAGE_ERROR
    assert f"{path}:{line}: {words}" in result.output


def test_map_with_a_tree_is_a_usage_error(cli, tmp_path: Path) -> None:
    text = Path(SMALL).read_text() + "algorithm: tree\ntree: {width: 2}\n"
    path = tmp_path / "tree.yaml"
    path.write_text(text)
    result = cli("run", "reference-draft-vocab", "--contract", "draft-vocab", "-s", str(path))
    assert result.exit_code == ExitCode.USAGE_ERROR
    assert "d2t: a draft vocabulary goes with chain or block verification" in result.output


def test_canonical_verifier_under_draft_vocab_is_a_usage_error(cli) -> None:
    result = cli("run", "reference", "--contract", "draft-vocab", "-s", SMALL)
    assert result.exit_code == ExitCode.USAGE_ERROR
    assert "the draft-vocab contract passes 6 (draft, q_draft, p, num_draft, d2t, rng)" in result.output


def test_drafter_without_mass_on_the_map_is_a_usage_error() -> None:
    text = Path(SMALL).read_text().replace("draft:\n  kind: dirichlet\n  concentration: 1.0\n  seed: 4\n",
                                           "draft:\n  kind: greedy\n")
    spec = parse_scenario(text, "<greedy>").spec
    with pytest.raises(UsageError, match="draft: d2t: drafter row .* has no mass on the target ids of the map"):
        spec.chains()
