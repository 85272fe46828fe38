"""Per-row sampling (serving): penalties, bias, masks, batch mixes; exact references and controls.

Reference numbers come from independent computations: the penalty formulas written out per
element, and a brute-force enumeration of every draft path and acceptance event of a round
(``_brute_rounds``), which shares no code with the kernels of :mod:`specaudit.laws`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

import numpy as np
import pytest

import specaudit
from specaudit import laws
from specaudit.chains.processing import SamplingParams, process, process_rows, softmax
from specaudit.chains.serving import HistoryChain, MixedChain
from specaudit.contract.logits import LogitsParams, RowParams, Rows, bind, history_counts, processed
from specaudit.errors import ExitCode, ScenarioError, UsageError
from specaudit.laws import chain as exact
from specaudit.laws.rounds import rounds_tokens_law
from specaudit.results import Status
from specaudit.scenarios.catalogue import resolve
from specaudit.scenarios.loading import parse_scenario

# ---- processing: mask, bias, penalties, then temperature --------------------------------------


def test_penalties_bias_mask_follow_the_written_out_formulas():
    rng = np.random.default_rng(1701)
    z = rng.normal(size=6) * 2
    counts = np.array([0, 2, 1, 0, 3, 0])
    params = SamplingParams(temperature=0.7, repetition_penalty=1.5, frequency_penalty=0.4, presence_penalty=0.3,
                            logit_bias=((0, 1.0), (4, -2.0)), allowed_tokens=(0, 1, 2, 4, 5))
    # independent: vLLM order (mask, bias, penalties on raw logits), then temperature and softmax
    w = z.copy()
    w[3] = -np.inf
    w[0] += 1.0
    w[4] -= 2.0
    for t in range(6):
        if counts[t] > 0:
            w[t] = w[t] / 1.5 if w[t] > 0 else w[t] * 1.5
        w[t] -= 0.4 * counts[t] + 0.3 * (counts[t] > 0)
    want = np.exp((w - w.max()) / 0.7)
    want /= want.sum()
    np.testing.assert_allclose(process(z[None], params, counts=counts[None])[0], want, rtol=1e-12, atol=0)
    # greedy: the argmax of the penalised logits, not of the raw ones
    greedy = process(z[None], params.replace(temperature=0.0), counts=counts[None])[0]
    assert greedy[int(np.argmax(w))] == 1.0 and greedy.sum() == 1.0
    # no history: penalties do nothing; the defaults are the plain softmax
    np.testing.assert_allclose(process(z[None], SamplingParams(frequency_penalty=2.0))[0], softmax(z), rtol=1e-12)


def test_additive_penalties_come_before_temperature():
    z = np.array([[2.0, 1.0, 0.0]])
    counts = np.array([[1, 0, 0]])
    p = process(z, SamplingParams(temperature=0.5, frequency_penalty=1.0), counts=counts)[0]
    before = softmax(np.array([1.0, 1.0, 0.0]) / 0.5)  # (z - f c) / T
    after = softmax(np.array([2.0 / 0.5 - 1.0, 1.0 / 0.5, 0.0]))  # z / T - f c: not the reference
    np.testing.assert_allclose(p, before, rtol=1e-12)
    assert not np.allclose(p, after)


def test_as_dict_keeps_its_keys_when_the_serving_parameters_are_off():
    assert SamplingParams(0.9, 4, 0.9, 0.05).as_dict() == {"temperature": 0.9, "top_k": 4, "top_p": 0.9, "min_p": 0.05}
    assert SamplingParams(logit_bias=((1, 2.0),), allowed_tokens=(0, 1)).as_dict()["logit_bias"] == [[1, 2.0]]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"repetition_penalty": 0.0}, r"repetition_penalty = 0.0; allowed: a finite number > 0 \(1 = off\)"),
        ({"frequency_penalty": float("nan")}, r"frequency_penalty = nan; allowed: a finite number"),
        ({"logit_bias": ((-1, 1.0),)}, r"logit_bias entry \(-1, 1.0\); allowed: \(token >= 0, finite bias\)"),
        ({"allowed_tokens": ()}, r"allowed_tokens = \(\); allowed: None \(all\) or token ids >= 0, at least one"),
    ],
)
def test_bad_sampling_params_are_usage_errors(kwargs, message):
    with pytest.raises(UsageError, match=message):
        SamplingParams(**kwargs)


def test_a_mask_that_leaves_no_finite_logit_is_refused():
    with pytest.raises(UsageError, match="allowed_tokens: a row has no allowed token of finite logit"):
        process(np.array([[0.0, -np.inf, 1.0]]), SamplingParams(allowed_tokens=(1,)))


# ---- the per-row contract ----------------------------------------------------------------------


def test_history_counts_hold_the_output_and_the_drafts_before_each_position():
    params = LogitsParams(rows=(RowParams(SamplingParams(), SamplingParams(), (2, 2, 0)),
                                RowParams(SamplingParams(), SamplingParams(), ())))
    draft = np.array([[1, 2, 3], [3, 3, 9]])  # row 1 has one valid draft: its padding id 9 is never read
    counts = history_counts(params, draft, np.array([3, 1]), 4)
    assert counts.shape == (2, 4, 4)
    np.testing.assert_array_equal(counts[0], [[1, 0, 2, 0], [1, 1, 2, 0], [1, 1, 3, 0], [1, 1, 3, 1]])
    np.testing.assert_array_equal(counts[1], [[0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 1], [0, 0, 0, 1]])
    without = history_counts(params, draft, np.array([3, 1]), 4, drafts=False)
    np.testing.assert_array_equal(without[0], [[1, 0, 2, 0]] * 4)


def test_processed_is_each_row_under_its_own_parameters_and_history():
    rng = np.random.default_rng(1702)
    b, k, v = 5, 2, 4
    target_logits, draft_logits = rng.normal(size=(b, k + 1, v)), rng.normal(size=(b, k, v))
    draft = rng.integers(v, size=(b, k))
    num_draft = np.array([2, 0, 1, 2, 2])
    kinds = [SamplingParams(temperature=0.0), SamplingParams(temperature=0.7, top_p=0.9),
             SamplingParams(repetition_penalty=1.7, frequency_penalty=0.5)]
    rows = tuple(RowParams(kinds[i % 3], kinds[i % 3].replace(repetition_penalty=1.0, frequency_penalty=0.0),
                           tuple(rng.integers(v, size=i).tolist())) for i in range(b))
    q, p = processed(LogitsParams(rows[0].target, rows[0].draft, rows), draft, num_draft, draft_logits, target_logits)
    for i, row in enumerate(rows):
        for j in range(k + 1):
            hist = list(row.output) + draft[i, : min(j, num_draft[i])].tolist()
            c = np.bincount(hist, minlength=v) if hist else np.zeros(v, dtype=np.int64)
            np.testing.assert_allclose(p[i, j], process(target_logits[i, j][None], row.target, counts=c[None])[0])
        np.testing.assert_allclose(q[i], process(draft_logits[i], row.draft))
    # batch-wide parameters (rows None) are the old contract, unchanged
    flat = LogitsParams(kinds[1], kinds[0])
    q0, p0 = processed(flat, draft, num_draft, draft_logits, target_logits)
    np.testing.assert_array_equal(p0, process(target_logits, kinds[1]))
    np.testing.assert_array_equal(q0, process_rows(draft_logits, [kinds[0]] * b))


def test_bind_hands_each_row_its_class_and_history():
    seen = []

    def spy(draft, draft_logits, target_logits, num_draft, params, rng):
        seen.append(params)
        return None

    classes = [LogitsParams(SamplingParams(temperature=0.0), SamplingParams()), LogitsParams(SamplingParams(top_k=2))]
    call = bind(spy, classes[0], classes)
    assert call.wants_rows
    history = np.array([[3, 1, 0, 0], [2, 0, 0, 0]])
    call(None, None, None, None, None, Rows(np.array([1, 0]), history, np.array([2, 0])))
    rows = seen[0].rows
    assert rows == (RowParams(SamplingParams(top_k=2), SamplingParams(), (3, 1)),
                    RowParams(SamplingParams(temperature=0.0), SamplingParams(), ()))
    assert seen[0].target == rows[0].target  # batch-wide fields: row 0's
    call(None, None, None, None, None)  # no rows (the probes): the batch-wide parameters
    assert seen[1] is classes[0] and not bind(spy, classes[0]).wants_rows


# ---- exact references: brute-force enumeration ------------------------------------------------

MIXED = """
schema: 1
name: tiny-mix
vocab: 3
k: 2
drafts: [0.2, 0.3, 0.5]
length: 3
samples: 1000
target: {kind: logits, matrix: [[1.0, 0.4, -0.3], [0.2, 1.1, 0.0], [-0.5, 0.3, 0.9]], start: 1}
draft: {kind: logits, matrix: [[0.6, 0.5, 0.1], [0.0, 0.8, 0.3], [0.1, 0.2, 0.4]], start: 1}
mix:
  - {name: greedy, weight: 0.3, target: {temperature: 0}}
  - {name: penalised, weight: 0.45, target: {temperature: 0.8, repetition_penalty: 1.6, frequency_penalty: 0.6,
                                             presence_penalty: 0.2, logit_bias: {2: 0.5}}}
  - {name: top-k, weight: 0.25, target: {temperature: 1.3, top_k: 2}, draft: {temperature: 0.9}}
"""


def _class_laws(spec, c):
    """Return p(history) and q(history) of class ``c`` computed directly from the raw logits and params."""
    cls = spec.mix[c]
    raw_t, raw_d = np.array(spec.target.matrix), np.array(spec.draft.matrix)
    pt, pd = cls.target.params(), cls.draft_params()
    v = spec.vocab

    def row(raw, start, hist):
        return raw[hist[-1] if hist else start]

    def p(hist):
        counts = np.bincount(hist, minlength=v) if hist else np.zeros(v, dtype=np.int64)
        return process(row(raw_t, spec.target.start, hist)[None], pt, counts=counts[None])[0]

    def q(hist):
        return process(row(raw_d, spec.draft.start, hist)[None], pd)[0]

    return p, q


def _brute_rounds(spec, c):
    """Return (E[rounds], E[uncut tokens], P(first round accepts a)) of class ``c`` by enumeration."""
    p, q = _class_laws(spec, c)
    v, k, length, law = spec.vocab, spec.k, spec.length, spec.draft_law

    def round_outcomes(hist):
        """Yield (probability, emitted tokens, accepted count) of one round from ``hist``."""
        for j in range(k + 1):
            if law[j] == 0:
                continue
            for xs in itertools.product(range(v), repeat=j):
                pr = law[j]
                for i, x in enumerate(xs):
                    pr *= q(hist + list(xs[:i]))[x]
                if pr == 0:
                    continue
                alive = pr
                for i, x in enumerate(xs):  # accept x_i with min(1, p/q), else the residual
                    pi, qi = p(hist + list(xs[:i])), q(hist + list(xs[:i]))
                    acc = min(1.0, pi[x] / qi[x])
                    res = np.maximum(pi - qi, 0.0)
                    if acc < 1 and res.sum() > 0:
                        for y in range(v):
                            if res[y] > 0:
                                yield alive * (1 - acc) * res[y] / res.sum(), list(xs[:i]) + [y], i
                    alive *= acc
                bonus = p(hist + list(xs))
                for y in range(v):
                    if bonus[y] > 0:
                        yield alive * bonus[y], list(xs) + [y], j

    @functools.cache
    def expect(hist):
        rounds = tokens = 0.0
        for pr, emitted, _ in round_outcomes(list(hist)):
            after = hist + tuple(emitted)
            if len(after) >= length:
                rounds, tokens = rounds + pr, tokens + pr * len(after)
            else:
                r, t = expect(after)
                rounds, tokens = rounds + pr * (1 + r), tokens + pr * t
        return rounds, tokens

    first = np.zeros(k + 1)
    for pr, _, a in round_outcomes([]):
        first[a] += pr
    return (*expect(()), first)


def test_tokens_per_step_of_a_mixed_batch_is_exact_against_brute_force_enumeration():
    spec = parse_scenario(MIXED).spec
    target, draft = spec.chains()
    assert isinstance(target, MixedChain) and isinstance(target.classes[1], HistoryChain)
    brute = [_brute_rounds(spec, c) for c in range(3)]
    w = np.array([c.weight for c in spec.mix])
    rounds = sum(wc * b[0] for wc, b in zip(w, brute))
    tokens = sum(wc * b[1] for wc, b in zip(w, brute))
    horizon = laws.horizon(spec, target, draft)
    assert horizon.expected_rounds == pytest.approx(rounds, rel=1e-12)
    assert horizon.tokens_per_step == pytest.approx(tokens / rounds, rel=1e-12)
    # not the mean of the classes' ratios: the ratio of the mixed expectations
    assert abs(horizon.tokens_per_step - sum(wc * b[1] / b[0] for wc, b in zip(w, brute))) > 1e-4
    np.testing.assert_allclose(laws.first_round_accept_law(spec, target, draft), w @ np.array([b[2] for b in brute]),
                               rtol=1e-12, atol=1e-15)
    # the (rounds, tokens) law the point check reads mixes the classes' laws
    r, t, pr = rounds_tokens_law(spec, target, draft)
    assert pr.sum() == pytest.approx(1.0) and float(pr @ r) == pytest.approx(rounds, rel=1e-12)


def test_joint_law_of_a_mix_is_per_class_against_brute_force():
    spec = parse_scenario(MIXED).spec
    target, _ = spec.chains()
    law = exact.joint_probabilities(target, spec.length)
    v, length = spec.vocab, spec.length
    assert law.size == 3 * v**length
    for c, w in enumerate([0.3, 0.45, 0.25]):
        p, _ = _class_laws(spec, c)
        for cell, xs in enumerate(itertools.product(range(v), repeat=length)):
            want = w * np.prod([p(list(xs[:t]))[xs[t]] for t in range(length)])
            assert law[c * v**length + cell] == pytest.approx(want, rel=1e-12, abs=1e-16)


# ---- scenarios: validation -------------------------------------------------------------------

BASE = """
schema: 1
name: s
vocab: 4
k: 2
length: 3
samples: 100
target: {kind: logits, seed: 1}
draft: {kind: logits, seed: 2}
"""


@pytest.mark.parametrize(
    "extra, message",
    [
        ("mix:\n  - {name: a, weight: 0.5}\n  - {name: b, weight: 0.4}\n", r"mix weights sum to 0.9; they must sum to 1"),
        ("mix:\n  - {name: a, weight: 0.5}\n  - {name: a, weight: 0.5}\n", r"mix: class names must be unique"),
        ("mix:\n  - {name: a, weight: 1.0, draft: {frequency_penalty: 1.0}}\n",
         r"mix\[0\].draft: penalties apply to the target only"),
        ("mix:\n  - {name: a, weight: 1.0, target: {allowed_tokens: [0, 7]}}\n",
         r"mix\[0\].target: token ids \[7\] are not in the vocabulary; allowed: 0..3"),
        ("mix:\n  - {name: a, weight: 1.0, targt: {}}\n", r"unknown key 'targt'.*did you mean 'target'"),
        ("mode: greedy\nmix:\n  - {name: a, weight: 1.0}\n", r"mix and penalties need algorithm: chain and mode: sample"),
    ],
)
def test_bad_serving_scenarios_are_refused_with_the_key(extra, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(BASE + extra)


def test_a_mix_replaces_the_chains_own_sampling_so_setting_both_is_refused():
    text = BASE.replace("target: {kind: logits, seed: 1}", "target: {kind: logits, seed: 1, sampling: {top_k: 2}}")
    with pytest.raises(ScenarioError, match=r"target.sampling is set with a mix; each mix class gives the processing"):
        parse_scenario(text + "mix:\n  - {name: a, weight: 1.0}\n")


def test_a_mix_needs_logits_chains_and_a_history_chain_must_stay_small():
    probs = BASE.replace("target: {kind: logits, seed: 1}", "target: {kind: context_free, probs: [0.25, 0.25, 0.25, 0.25]}")
    with pytest.raises(ScenarioError, match=r"mix needs target kind logits"):
        parse_scenario(probs + "mix:\n  - {name: a, weight: 1.0}\n")
    big = BASE.replace("vocab: 4", "vocab: 12").replace("length: 3", "length: 6")
    with pytest.raises(ScenarioError, match=r"penalties: the target's law depends on token counts; .* allowed: at most 2,048"):
        parse_scenario(big.replace("seed: 1}", "seed: 1, sampling: {presence_penalty: 0.5}}"))


def test_bad_serving_scenario_file_exits_4(cli, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BASE + "mix:\n  - {name: a, weight: 0.7}\n")
    result = cli("run", "reference-logits", "--contract", "logits", "-s", path)
    assert result.exit_code == ExitCode.USAGE_ERROR
    assert "mix weights sum to 0.7" in result.output


def test_content_hashes_from_before_the_serving_keys_hold():
    # recorded before the serving keys existed (same scenario files)
    assert resolve(["sampling-mixed"])[0].spec.content_hash() == "6afaa5539c7cfa74"
    assert resolve(["markov-v4"])[0].spec.content_hash() == "b1c168402dd1ca72"


# ---- scenarios: positive and negative controls -------------------------------------------------


@functools.cache
def _run(target: str, scenario: str, contract: str = "logits", samples: int | None = None):
    # suspect_level 0: no re-run of a scenario whose other check is only suspect (the verdicts asserted are decisive)
    return specaudit.run(target, [scenario], contract=contract, seed=5, samples=samples, power=False, diagnose=False,
                         suspect_level=0.0)


@pytest.mark.parametrize("scenario", ["serving-mix", "serving-penalties", "serving-masks"])
@pytest.mark.parametrize("target, contract", [("reference-logits", "logits"), ("reference", "probs")])
def test_reference_passes_the_serving_scenarios(scenario, target, contract):
    result = _run(target, scenario, contract, 20_000)
    s = result.scenarios[0]
    assert result.exit_code() == ExitCode.OK, [(c.name, c.status, c.summary) for c in s.checks]
    assert s.check("joint-law").data["classes"][0]["n"] > 0


@pytest.mark.parametrize(
    "mutant, scenario, checks",
    [
        ("penalties_without_drafts", "serving-penalties", ["joint-law"]),
        ("mask_target_only", "serving-masks", ["joint-law"]),
        ("bias_draft_only", "serving-masks", ["joint-law"]),
        ("batch_params_row0", "serving-mix", ["joint-law", "greedy-rows"]),
        ("greedy_rows_sampled", "serving-mix", ["joint-law", "greedy-rows"]),
    ],
)
def test_each_serving_mutant_fails_its_scenario_with_the_right_check(mutant, scenario, checks):
    result = _run(f"specaudit.verifiers.zoo.logits:{mutant}", scenario, "logits", 20_000)
    s = result.scenarios[0]
    assert result.exit_code() == ExitCode.CHECKS_FAILED
    for name in checks:
        assert s.check(name).status is Status.FAILED, (name, s.check(name).summary)


def test_greedy_rows_names_the_class_and_the_position():
    s = _run("specaudit.verifiers.zoo.logits:greedy_rows_sampled", "serving-mix", "logits", 3000).scenarios[0]
    check = s.check("greedy-rows")
    assert check.status is Status.FAILED and check.summary.startswith("class greedy: ")
    assert "instead of the argmax" in check.summary


def test_a_sharded_mix_merges_into_the_unsharded_run(cli, tmp_path):
    args = ["run", "reference-logits", "--contract", "logits", "-s", "serving-mix", "--samples", "30000", "--seed", "1"]
    for i in (0, 1):
        assert cli(*args, "--shard", f"{i}/2", "--json", tmp_path / f"s{i}.json").exit_code == ExitCode.OK
    assert cli("merge", tmp_path / "s0.json", tmp_path / "s1.json", "--json", tmp_path / "m.json").exit_code == ExitCode.OK
    assert cli(*args, "--json", tmp_path / "one.json").exit_code == ExitCode.OK
    import json

    merged = {c["name"]: c for c in json.loads((tmp_path / "m.json").read_text())["scenarios"][0]["checks"]}
    whole = {c["name"]: c for c in json.loads((tmp_path / "one.json").read_text())["scenarios"][0]["checks"]}
    for name in ("joint-law", "tokens-per-step", "accept-length", "greedy-rows"):
        assert merged[name]["summary"] == whole[name]["summary"], name
    assert merged["greedy-rows"]["data"]["classes"][0]["sequences"] > 0


def test_request_classes_follow_the_mix_weights_and_cost_no_draws_elsewhere():
    from specaudit.engine.scenario import measure
    from specaudit.verifiers.reference import verify

    spec = dataclasses.replace(resolve(["serving-mix"])[0].spec, samples=20_000)
    m = measure(verify, spec, seed=7)
    per_class = m.joint.counts.reshape(3, -1).sum(axis=1)
    from scipy import stats  # the class of each request is multinomial with the mix weights

    assert stats.chisquare(per_class, 20_000 * np.array([0.3, 0.5, 0.2])).pvalue > 1e-4


def test_scenarios_without_serving_keys_draw_and_score_exactly_as_before():
    # statistics of `specaudit run reference-logits --contract logits -s sampling-mixed --samples 20000`
    # recorded before per-row sampling existed (2026-12-01): the same streams, the same numbers
    result = specaudit.run("reference-logits", ["sampling-mixed"], contract="logits", samples=20_000)
    s = result.scenarios[0]
    assert s.check("joint-law").statistic == 28.38145099484279
    # the saddlepoint score of the same moments (the studentised delta-method z recorded then: 1.6305386183287562);
    # a root found by scipy, whose last digits move between its releases (1.17.1 reads 1.6326410061994319)
    assert s.check("tokens-per-step").statistic == pytest.approx(1.6326410061991181, rel=1e-12)
    assert s.check("tokens-per-step").data["estimate"] == pytest.approx(3.357775590551181, rel=1e-15)
    assert s.check("accept-length").statistic == 3.984545221500025
