"""The loop contract: a target that owns the generate loop, audited through a request trace.

Positive controls: the reference loop passes `loop-v4` on several seeds, and the enumerated law of
every request matches plain (non-speculative) sampling of the processed target. Negative controls:
each of the five loop mutants fails `loop-law`. Hostile: every way a loop's return can break the
contract, a crash and a hang, and every bad trace key, each with its exit code and message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specaudit.checks.loop import CONTRACT, LAW, run_loop
from specaudit.contract.loop import Request, Trace, process
from specaudit.errors import ExitCode
from specaudit.laws.loop import request_law
from specaudit.results import Status
from specaudit.scenarios.catalogue import resolve
from specaudit.stats import gof
from specaudit.verifiers import loop as reference_loop
from specaudit.verifiers.zoo import loop as loop_zoo

N = 3000


@pytest.fixture(scope="module")
def shipped():
    spec = resolve(["loop-v4"])[0].spec
    return spec, spec.loop_trace(), spec.loop_models()


def _law_check(verify: Any, shipped: Any, seed: int, samples: int = N):
    _, trace, models = shipped
    done = run_loop(verify, trace, models, samples, seed)
    assert done.error is None and [c.name for c in done.checks] == [CONTRACT, LAW]
    assert done.checks[0].status is Status.PASSED, done.checks[0].summary
    return done.checks[1]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_reference_loop_passes(shipped, seed):
    law = _law_check(reference_loop.verify, shipped, seed)
    assert law.status is Status.PENDING and law.pvalue > 1e-3, law.summary
    assert {d["request"] for d in law.data["requests"]} == {0, 1, 2, 4}  # request 3 is ended by the client


LOOP_V4 = [n for n in loop_zoo.MUTANTS if n != "min_tokens_last_only"]


def test_min_tokens_history_bans_and_their_mutant_on_the_processing_scenario():
    spec = resolve(["loop-processing-v6"])[0].spec
    trace, models = spec.loop_trace(), spec.loop_models()
    assert trace.no_repeat_ngram == 2 and trace.bad_words == ((1, 0),) and [r.min_tokens for r in trace.requests] == [3, 2, 3]
    ok = run_loop(reference_loop.verify, trace, models, N, 1).checks[-1]
    assert ok.status is Status.PENDING and ok.pvalue > 1e-3, ok.summary
    for name in ("min_tokens_last_only", "mask_window_start"):  # stops before min_tokens; bans from the window's start
        bad = run_loop(loop_zoo.MUTANTS[name].func, trace, models, N, 1).checks[-1]
        assert bad.status is Status.FAILED and "probability 0" in bad.summary, (name, bad.summary)


def test_process_bans_repeated_ngrams_bad_words_and_early_stops():
    trace = Trace((), k=2, vocab=6, stop_tokens=(5,), no_repeat_ngram=2, bad_words=((1, 0), (4,)))
    law = process(np.full(6, 1 / 6), trace, [2, 3, 1, 2], generated=1, min_tokens=2)
    # bigram (2, 3) seen: 3 banned after 2; 4 is a bad word; 5 is a stop before min_tokens
    assert np.flatnonzero(law).tolist() == [0, 1, 2] and abs(law.sum() - 1) < 1e-12
    law = process(np.full(6, 1 / 6), trace, [0, 1], generated=2, min_tokens=2)
    assert 0 not in np.flatnonzero(law) and 5 in np.flatnonzero(law)  # [1, 0] banned after 1; the stop is allowed now


def test_processing_that_bans_every_token_is_a_usage_error(cli, tmp_path):
    shipped = Path(resolve(["loop-processing-v6"])[0].path).read_text()
    bad = tmp_path / "banned.yaml"
    bad.write_text(shipped.replace("vocab: 6", "vocab: 3").replace("stop_tokens: [5]", "stop_tokens: [2]"))
    res = cli("validate", bad)
    assert res.exit_code == ExitCode.USAGE_ERROR and "the processing bans every token after" in res.output, res.output
    assert f"{bad}:" in res.output


@pytest.mark.parametrize("name", LOOP_V4)
def test_each_loop_mutant_fails_the_law(shipped, name):
    law = _law_check(loop_zoo.MUTANTS[name].func, shipped, seed=5)
    assert law.status is Status.FAILED or law.pvalue < 1e-6, (name, law.summary)
    if law.status is not Status.FAILED:
        assert law.data["first_divergence"] is not None, law.summary  # where it departs, for the maintainer


def test_the_enumerated_law_is_what_plain_sampling_of_the_processed_target_gives(shipped):
    # an independent positive control of the law: sample each request token by token (no speculation at all)
    _, trace, models = shipped
    rng = np.random.default_rng(11)
    for request in trace.requests:
        outputs, probs = request_law(trace, request, models)
        assert abs(probs.sum() - 1) < 1e-12 and len(set(outputs)) == len(outputs)
        index = {o: i for i, o in enumerate(outputs)}
        counts = np.zeros(len(outputs), dtype=np.int64)
        for _ in range(4000):
            tokens: list[int] = []
            while True:
                history = list(request.prompt) + tokens
                law = process(models.target([history])[0], trace, history)
                tokens.append(int(rng.choice(len(law), p=law)))
                if tokens[-1] in trace.stop_tokens or len(tokens) >= request.max_tokens:
                    break
            counts[index[tuple(tokens)]] += 1
        assert gof.goodness_of_fit(counts, probs).pvalue > 1e-4


def test_the_trace_says_who_is_in_the_batch_and_in_what_order():
    r = Request(0, (1,), arrive=1, max_tokens=4, finish=5, preempt=((2, 4),))
    trace = Trace((r, Request(1, (0,)), Request(2, (2,), arrive=1)), k=2, vocab=4, reorders={3: (2, 0, 1)})
    assert [trace.in_batch(r, s) for s in range(7)] == [False, True, False, False, True, False, False]
    assert trace.order(1, [0, 1, 2]) == [1, 0, 2]  # arrival order, ties by position
    assert trace.order(3, [1, 2]) == [2, 1]


# --- hostile loops: every breach of the contract, named ---------------------------------------------


def _wrapped(change):
    def loop(trace, models, rng):
        return change(reference_loop.verify(trace, models, rng), trace)

    loop.specaudit_contract = "loop"  # type: ignore[attr-defined]
    return loop


@pytest.mark.parametrize("change, says", [
    (lambda out, trace: list(out.values()), "a loop returns a mapping request id -> emitted tokens; got list"),
    (lambda out, trace: {k: v for k, v in out.items() if k != 2}, "missing [2]"),
    (lambda out, trace: {**out, 9: [0]}, "unknown [9]"),
    (lambda out, trace: {**out, 0: [*out[0][:-1], 7]}, "request 0: token 7 outside [0, 4)"),
    (lambda out, trace: {**out, 1: [3, 0]}, "request 1: 1 token(s) after the stop token 3 at position 0"),
    (lambda out, trace: {**out, 4: [0, 0, 0, 0]}, "request 4: 4 tokens, max_tokens 3"),
    (lambda out, trace: {**out, 0: [0]}, "request 0: 1 tokens, no stop token and max_tokens 4: it ended early"),
    (lambda out, trace: {**out, 0: [0.5]}, "request 0: its tokens are not integers"),
    (lambda out, trace: {**out, 0: "ab"}, "request 0: its tokens are not integers"),
])
def test_a_loop_that_breaks_the_contract_fails_naming_the_request(shipped, change, says):
    _, trace, models = shipped
    done = run_loop(_wrapped(change), trace, models, 20, 1)
    (check,) = done.checks
    assert check.name == CONTRACT and check.status is Status.FAILED and says in check.summary, check.summary
    assert check.summary.startswith("run 0: ")


def _write_loop(tmp_path: Path, body: str) -> str:
    path = tmp_path / "hostile_loop.py"
    path.write_text("import time\nfrom specaudit.verifiers.loop import verify as _ref\n\n\n"
                    f"def loop(trace, models, rng):\n{body}\n\n\nloop.specaudit_contract = 'loop'\n")
    return f"{path}:loop"


@pytest.mark.parametrize("body, what", [
    ("    raise RuntimeError('boom in the loop')", "boom in the loop"),
    ("    time.sleep(30)\n    return _ref(trace, models, rng)", "timeout"),
])
def test_a_loop_that_crashes_or_hangs_is_that_scenarios_error(cli, tmp_path, body, what):
    out = tmp_path / "r.json"
    res = cli("run", _write_loop(tmp_path, body), "-s", "loop-v4", "--timeout", "1", "--json", out)
    assert res.exit_code == ExitCode.CHECKS_FAILED, res.output
    scenario = json.loads(out.read_text())["scenarios"][0]
    described = json.dumps(scenario)
    assert scenario["status"] == "error" and what in described, described[:600]


# --- through the CLI -----------------------------------------------------------------------------


def test_the_reference_loop_passes_and_a_mutant_fails_through_the_cli(cli, tmp_path):
    res = cli("run", "reference-loop", "--samples", "1500", "--json", tmp_path / "ok.json")
    assert res.exit_code == ExitCode.OK, res.output
    doc = json.loads((tmp_path / "ok.json").read_text())
    assert [s["name"] for s in doc["scenarios"]] == ["loop-processing-v6", "loop-v4"]
    assert all(s["info"]["runs"] == 1500 for s in doc["scenarios"])
    res = cli("run", "specaudit.verifiers.zoo.loop:padding_as_token", "-s", "loop-v4", "--samples", "1500")
    assert res.exit_code == ExitCode.CHECKS_FAILED and "loop-law" in res.output, res.output


def test_contracts_that_do_not_meet_are_usage_errors(cli):
    res = cli("run", "reference", "-s", "loop-v4")
    assert res.exit_code == ExitCode.USAGE_ERROR and "has mode: loop, which drives the loop contract" in res.output
    res = cli("run", "reference-loop", "-s", "markov-v4")
    assert res.exit_code == ExitCode.USAGE_ERROR and "a loop target runs mode: loop scenarios only" in res.output
    res = cli("run", "reference-loop", "--shard", "0/2")
    assert res.exit_code == ExitCode.USAGE_ERROR and "is mode: loop, whose trace runs whole in one process" in res.output


@pytest.mark.parametrize("edit, says", [
    (("{prompt: [0, 1], arrive: 1, finish: 3}", "{prompt: [0, 1], arrive: 1, finish: 1}"),
     ":31: loop.requests[3].finish: 1 is not after its arrive = 1: a request cannot finish before it arrives"),
    (("{step: 1, order: [1, 0, 3, 2, 4]}", "{step: 1, order: [1, 0, 3, 2, 2]}"),
     ":34: loop.reorders[0].order: [1, 0, 3, 2, 2] is not a permutation of the request ids 0..4"),
    (("{step: 2, order: [4, 3, 1, 0, 2]}", "{step: 1, order: [4, 3, 1, 0, 2]}"), "loop.reorders: steps [1, 1, 3, 4, 5] repeat"),
    (("{prompt: [0]}", "{prompt: [0, 9]}"), ":28: loop.requests[0].prompt: token 9 is outside the vocabulary; allowed: ids 0..3"),
    (("preempt: [{step: 2, resume: 3}]", "preempt: [{step: 2, resume: 2}]"),
     "loop.requests[2].preempt[0]: step 2, resume 2; allowed: arrive (1) <= step < resume"),
    (("mask: {after: 2, allowed: [0, 1, 3]}", "mask: {after: 2, allowed: [0, 5]}"),
     ":40: loop.mask: token 5 is outside the vocabulary"),
    (("stop_tokens: [3]", "stop_tokens: [4]"), "stop_tokens: token 4 is outside the vocabulary"),
    (("mode: loop", "mode: sample"), "loop: a request trace goes with mode: loop"),
    (("{prompt: [1], arrive: 2, max_tokens: 3}", "{prompt: [1], arrive: 2, max_tokens: 0}"),
     ":32: loop.requests[4].max_tokens: Input should be greater than or equal to 1 (got 0)"),
    (("{prompt: [1], arrive: 2, max_tokens: 3}", "{prompt: [1], arrive: 2, max_tokens: 12}"),
     "loop.requests[4].max_tokens: 12 tokens over vocab 4 are up to 22,369,620 outputs to enumerate"),
    (("{prompt: [0]}", "{prompt: [0], arrive: -1}"), ":28: loop.requests[0].arrive: Input should be greater than or equal to 0"),
    (("{prompt: [1], arrive: 2, max_tokens: 3}", "{prompt: [1], arrive: 2, max_tokens: 3, min_tokens: 4}"),
     ":32: loop.requests[4].min_tokens: 4 is above its max_tokens 3"),
])
def test_a_bad_trace_is_a_usage_error_naming_file_line_and_field(cli, tmp_path, edit, says):
    shipped = Path(resolve(["loop-v4"])[0].path).read_text()
    assert edit[0] in shipped, edit[0]
    bad = tmp_path / "bad.yaml"
    bad.write_text(shipped.replace(edit[0], edit[1]))
    for command in (("validate", bad), ("run", "reference-loop", "-s", bad)):
        res = cli(*command)
        assert res.exit_code == ExitCode.USAGE_ERROR, res.output
        if says.startswith(":"):  # the file, the key's own line, the key path, the message
            assert f"{bad}{says}" in res.output, res.output
        else:
            assert f"{bad}:" in res.output and says in res.output, res.output


def test_mode_loop_without_a_trace_is_a_usage_error(cli, tmp_path):
    shipped = Path(resolve(["loop-v4"])[0].path).read_text()
    bad = tmp_path / "no_trace.yaml"
    bad.write_text(shipped[: shipped.index("loop:\n")])
    res = cli("validate", bad)
    assert res.exit_code == ExitCode.USAGE_ERROR and "loop: required with mode: loop" in res.output, res.output
