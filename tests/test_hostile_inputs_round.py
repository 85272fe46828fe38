"""Hostile inputs, one more round: scenario combinations that crashed or slipped through validation, results files
whose TV certificate is out of range. Each case asserts the exit code (4, a usage error) and the message (where,
what was received, what is allowed), beside a positive control of the same kind that is accepted.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re

import pytest

import specaudit
from specaudit.errors import ExitCode, ResultsFileError, ScenarioError, UsageError
from specaudit.results import document as results_document
from specaudit.results.document import from_document
from specaudit.scenarios.loading import parse_scenario
from specaudit.scenarios.schema import Sampling

REFERENCE = "specaudit.verifiers.reference:verify"

ZIPF = """\
schema: 1
name: z
vocab: 1000
k: 2
length: 2
samples: 2000
target: {{kind: zipf, exponent: 1.1, seed: 1{extra}}}
draft: {{kind: zipf, exponent: 0.8, seed: 1{extra}}}
"""

LOGITS = """\
schema: 1
name: lg
vocab: 6
k: 3
length: 3
samples: 2000
target:
  kind: logits
  matrix: [[-.inf, 0.0, 0.5, 1.0, 0.2, 0.1]]
"""


def _write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _line_of(text: str, needle: str) -> int:
    """Return the 1-based line of the first line of ``text`` holding ``needle``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# ---- 1. lazy (zipf) chains with the modes and algorithms that need a state table -------------------------------


@pytest.mark.parametrize("extra_key, line_key, message", [
    ("mode: greedy\n", "mode:", r"mode: greedy needs a chain with a finite state table .* kind zipf is lazy.*"
                                r"allowed with zipf: mode sample or exact"),
    ("algorithm: tree\ntree: {width: 2}\n", "algorithm:", r"algorithm: tree needs a chain with a finite state table .*"
                                                          r"kind zipf is lazy.*allowed with zipf: algorithm chain or block"),
])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_lazy_chains_with_greedy_mode_or_tree_are_refused_at_validation(cli, tmp_path, extra_key, line_key, message,
                                                                         command):
    text = ZIPF.format(extra="") + extra_key
    path = _write(tmp_path, text)
    verifier = "specaudit.verifiers.tree:verify" if "tree" in extra_key else REFERENCE
    args = ["validate", path] if command == "validate" else ["run", verifier, "-s", path, "--no-power"]
    result = cli(*args)
    assert result.exit_code == ExitCode.USAGE_ERROR, result.output
    assert re.search(rf"s\.yaml:{_line_of(text, line_key)}: {message}", result.output), result.output
    assert "Traceback" not in result.output and "internal error" not in result.output


@pytest.mark.parametrize("extra_key", ["", "mode: exact\n", "algorithm: block\n"])
def test_lazy_chains_keep_sample_exact_and_block(cli, tmp_path, extra_key):
    # the positive controls: these combinations run (per-prefix, PIT and the probes), so they stay allowed
    result = cli("validate", _write(tmp_path, ZIPF.format(extra="") + extra_key))
    assert result.exit_code == ExitCode.OK and "ok (z)" in result.output, result.output


def test_a_zipf_block_scenario_runs(cli, tmp_path):
    result = cli("run", REFERENCE, "-s", _write(tmp_path, ZIPF.format(extra="") + "algorithm: block\n"), "--no-power",
                 "--seed", "3")
    assert result.exit_code == ExitCode.OK, result.output


# ---- 2. a mask that keeps only tokens of logit -inf -------------------------------------------------------------


DEAD = {
    "mix": (LOGITS + "draft: {kind: logits, seed: 2}\nmix:\n  - name: dead\n    weight: 0.5\n    target:\n"
            "      allowed_tokens: [0]\n  - {name: ok, weight: 0.5}\n", r"mix\[0\]\.target\.allowed_tokens", "target"),
    "greedy": (LOGITS + "draft: {kind: logits, seed: 2}\nmix:\n  - name: dead\n    weight: 1.0\n    target:\n"
               "      temperature: 0\n      allowed_tokens: [0]\n", r"mix\[0\]\.target\.allowed_tokens", "target"),
    "top": (LOGITS + "  sampling:\n    allowed_tokens: [0]\ndraft: {kind: logits, seed: 2}\n",
            r"target\.sampling\.allowed_tokens", "target"),
    "draft": (LOGITS + "draft:\n  kind: logits\n  matrix: [[-.inf, 0.0, 0.5, 1.0, 0.2, 0.1]]\n  sampling:\n"
              "    allowed_tokens: [0]\n", r"draft\.sampling\.allowed_tokens", "draft"),
    "same_logits": (LOGITS + "draft:\n  kind: same_logits_as_target\n  sampling:\n    allowed_tokens: [0]\n",
                    r"draft\.sampling\.allowed_tokens", "target"),
}


@pytest.mark.parametrize("case", sorted(DEAD))
def test_a_mask_of_dead_tokens_is_refused_by_validate_with_file_line_and_key(cli, tmp_path, case):
    text, key, matrix = DEAD[case]
    result = cli("validate", _write(tmp_path, text))
    assert result.exit_code == ExitCode.USAGE_ERROR, result.output
    line = _line_of(text, "allowed_tokens")
    assert re.search(rf"s\.yaml:{line}: {key}: \[0\] keeps only tokens whose logit is -\.inf in row 0 of "
                     rf"{matrix}\.matrix.*allowed: a mask that keeps a token of finite logit in every row", result.output)
    run = cli("run", REFERENCE, "-s", tmp_path / "s.yaml", "--no-power")
    assert run.exit_code == ExitCode.USAGE_ERROR and f"s.yaml:{line}: " in run.output, run.output


def test_a_mask_that_keeps_a_finite_token_is_accepted(cli, tmp_path):
    text = DEAD["mix"][0].replace("allowed_tokens: [0]", "allowed_tokens: [0, 3]")
    result = cli("validate", _write(tmp_path, text))
    assert result.exit_code == ExitCode.OK, result.output


def test_a_dead_mask_that_bypasses_validation_names_scenario_class_and_role():
    spec = parse_scenario(DEAD["mix"][0].replace("allowed_tokens: [0]", "allowed_tokens: [3]")).spec
    dead = Sampling(allowed_tokens=[0])  # built directly: not validated
    mix = [dataclasses.replace(spec.mix[0], target=dead), spec.mix[1]]
    with pytest.raises(UsageError, match=r"^scenario 'lg': mix\[0\] \(class 'dead'\) target: allowed_tokens: a row has "
                                         r"no allowed token of finite logit \(row 0 of the logits, mask \[0\]\)"):
        dataclasses.replace(spec, mix=mix).chains()


# ---- 3. an empty mask -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, key", [
    (LOGITS + "draft: {kind: logits, seed: 2}\nmix:\n  - {name: a, weight: 0.5}\n  - name: b\n    weight: 0.5\n"
     "    target:\n      allowed_tokens: []\n", "mix[1].target.allowed_tokens"),
    (LOGITS + "  sampling:\n    allowed_tokens: []\ndraft: {kind: logits, seed: 2}\n", "target.sampling.allowed_tokens"),
    (LOGITS + "draft:\n  kind: same_logits_as_target\n  sampling:\n    allowed_tokens: []\n",
     "draft.sampling.allowed_tokens"),
])
def test_an_empty_mask_is_a_schema_error_with_file_line_and_key(cli, tmp_path, text, key):
    result = cli("validate", _write(tmp_path, text))
    assert result.exit_code == ExitCode.USAGE_ERROR, result.output
    want = (f"s.yaml:{_line_of(text, 'allowed_tokens')}: {key}: received [], a mask that keeps no token (nothing left "
            "to sample); allowed: at least one token id, or omit the key")
    assert want in result.output, result.output


# ---- 4. the key path printed once, on its own line ----------------------------------------------------------------


MIX_BASE = """\
schema: 1
name: s
vocab: 6
k: 3
length: 3
samples: 2000
target: {kind: logits, seed: 1}
draft: {kind: logits, seed: 2}
"""


@pytest.mark.parametrize("text, needle, want", [
    (MIX_BASE + "mix:\n  - {name: b, weight: 0.5}\n  - {name: b, weight: 0.5}\n", "mix:",
     "mix: class names must be unique, got ['b', 'b'] (mix[1] repeats 'b' of mix[0]); allowed: a new name for mix[1]"),
    (MIX_BASE + "mix:\n  - {name: a, weight: 0.5}\n  - name: b\n    weight: 0.5\n    target:\n"
     "      presence_penalty: 0.5\n", "    target:",
     "mix[1].target: penalties: the target's law depends on token counts; up to 16,632 joint"),
    (MIX_BASE.replace("target: {kind: logits, seed: 1}", "target:\n  kind: logits\n  seed: 1\n  sampling:\n"
                      "    presence_penalty: 0.5"), "  sampling:", "target.sampling: penalties: the target's law depends"),
    (MIX_BASE + "mix:\n  - {name: a, weight: 0.5}\n  - name: b\n    weight: 0.5\n    target:\n"
     "      logit_bias: {99: 1.0}\n", "    target:", "mix[1].target: token ids [99] are not in the vocabulary"),
    (ZIPF.format(extra=", support: 600, lowest: 500"), "target:",
     "target.support: support = 600 tokens at or above lowest = 500; allowed with vocab 1000: support <= vocab - "
     "lowest = 500"),
    (ZIPF.format(extra=", lowest: 1000"), "target:", "target.lowest: lowest = 1000; allowed with vocab 1000: "
                                                     "lowest <= 999"),
])
def test_a_whole_scenario_message_prints_its_key_path_once(cli, tmp_path, text, needle, want):
    result = cli("validate", _write(tmp_path, text))
    assert result.exit_code == ExitCode.USAGE_ERROR, result.output
    assert f"s.yaml:{_line_of(text, needle)}: {want}" in result.output, result.output
    for doubled in ("mix: mix", "penalties: penalties", "target: target", "lowest: lowest: "):
        assert doubled not in result.output, result.output


# ---- 6. zipf lowest without support; top_k beyond the vocabulary ----------------------------------------------------


def test_zipf_lowest_without_support_is_refused(cli, tmp_path):
    text = ZIPF.format(extra=", lowest: 900")
    result = cli("validate", _write(tmp_path, text))
    assert result.exit_code == ExitCode.USAGE_ERROR, result.output
    assert (f"s.yaml:{_line_of(text, 'target:')}: target.lowest: lowest = 900 with support = 0 (every token has mass, "
            "so lowest would be ignored); allowed: lowest with support > 0, or omit lowest") in result.output
    ok = cli("validate", _write(tmp_path, ZIPF.format(extra=", support: 8, lowest: 900")))
    assert ok.exit_code == ExitCode.OK, ok.output


@pytest.mark.parametrize("top_k, code", [(100, ExitCode.USAGE_ERROR), (7, ExitCode.USAGE_ERROR), (6, ExitCode.OK),
                                         (0, ExitCode.OK)])
def test_top_k_beyond_the_vocabulary_is_refused(cli, tmp_path, top_k, code):
    text = MIX_BASE + f"mix:\n  - {{name: a, weight: 0.5}}\n  - name: b\n    weight: 0.5\n    target:\n      top_k: {top_k}\n"
    result = cli("validate", _write(tmp_path, text))
    assert result.exit_code == code, result.output
    if code == ExitCode.USAGE_ERROR:
        assert (f"s.yaml:{_line_of(text, 'top_k')}: mix[1].target.top_k: top_k = {top_k} exceeds vocab 6; "
                "allowed: 0..6 (0 = off)") in result.output, result.output


def test_top_k_beyond_the_vocabulary_is_refused_in_a_chains_sampling():
    text = LOGITS.replace("matrix: [[-.inf, 0.0, 0.5, 1.0, 0.2, 0.1]]", "seed: 1\n  sampling: {top_k: 9}")
    with pytest.raises(ScenarioError, match=r"<string>:10: target\.sampling\.top_k: top_k = 9 exceeds vocab 6; allowed: 0\.\.6"):
        parse_scenario(text + "draft: {kind: logits, seed: 2}\n")


# ---- 5. results files: the TV certificate, every field in its range ---------------------------------------------


@functools.cache
def _documents() -> tuple[str, str, str]:
    """Return the JSON texts of one run of markov-v4 and of its two shards (each has a tv_bound)."""
    whole = specaudit.run(REFERENCE, ["markov-v4"], samples=2000, seed=4, power=False, diagnose=False)
    shards = [specaudit.run(REFERENCE, ["markov-v4"], samples=2000, seed=4, power=False, diagnose=False, shard=(i, 2))
              for i in range(2)]
    texts = [json.dumps(results_document.to_document(r), allow_nan=False) for r in (whole, *shards)]
    return texts[0], texts[1], texts[2]


BAD_BOUNDS = [
    ({"bound": float("nan")}, r"tv_bound\.bound: nan is out of range; allowed: a TV bound, 0 <= bound <= 1"),
    ({"bound": "nan"}, r"tv_bound\.bound: nan is out of range; allowed: a TV bound, 0 <= bound <= 1"),
    ({"bound": "inf"}, r"tv_bound\.bound: inf is out of range; allowed: a TV bound, 0 <= bound <= 1"),
    ({"bound": -1}, r"tv_bound\.bound: -1 is out of range; allowed: a TV bound, 0 <= bound <= 1"),
    ({"bound": 2}, r"tv_bound\.bound: 2 is out of range; allowed: a TV bound, 0 <= bound <= 1"),
    ({"bound": True}, r"tv_bound\.bound: expected a number, got a boolean True"),
    ({"bound": None}, r"tv_bound\.bound: expected a number, got null$"),
    ({"confidence": 2}, r"tv_bound\.confidence: 2 is out of range; allowed: a confidence 1 - alpha, 0 < confidence <= 1"),
    ({"confidence": -0.5}, r"tv_bound\.confidence: -0\.5 is out of range; allowed: a confidence"),
    ({"confidence": 0}, r"tv_bound\.confidence: 0 is out of range; allowed: a confidence"),
    ({"sequences": -1}, r"tv_bound\.sequences: -1 is out of range; allowed: a count of sequences >= 1"),
    ({"sequences": 0}, r"tv_bound\.sequences: 0 is out of range; allowed: a count of sequences >= 1"),
    ({"sequences": 1.5}, r"tv_bound\.sequences: expected an integer, got a number 1\.5"),
    ({"target": -1}, r"tv_bound\.target: -1 is out of range; allowed: the --certify-tv EPS, 0 < target < 1, or null"),
    ({"target": float("nan")}, r"tv_bound\.target: nan is out of range; allowed: the --certify-tv EPS"),
    ({"target": 1}, r"tv_bound\.target: 1 is out of range; allowed: the --certify-tv EPS"),
    ({"tv": 0.9}, r"tv_bound\.tv: 0\.9 exceeds bound = 0\.\d+; allowed: tv <= bound"),
    ({"tv": -0.1}, r"tv_bound\.tv: -0\.1 is out of range; allowed: a total variation, 0 <= tv <= 1"),
    ({"junk": 1}, r"tv_bound: unknown key 'junk'; allowed: bound, confidence, tv, sequences, target"),
    ({"bund": 0.5}, r"tv_bound: unknown key 'bund'; .*did you mean 'bound'"),
]
NOT_OBJECTS = [({}, r"tv_bound: missing key 'bound'"), (0, r"tv_bound: expected a JSON object, got a number"),
               (False, r"tv_bound: expected a JSON object, got a boolean"),
               ("", r"tv_bound: expected a JSON object, got a string"),
               ([], r"tv_bound: expected a JSON object, got a list")]


def _with(text: str, change: object) -> str:
    """Return the document ``text`` with scenarios[0].tv_bound updated by ``change`` (a dict) or replaced by it."""
    doc = json.loads(text)
    bound = doc["scenarios"][0]["tv_bound"]
    assert isinstance(bound, dict) and 0 < bound["bound"] <= 1  # the writer's certificate, before the change
    doc["scenarios"][0]["tv_bound"] = {**bound, **change} if isinstance(change, dict) and change else change
    # NaN as the string "nan", as the writer puts it (the literal NaN is refused as it is read: tests/test_hostile_streams.py)
    return json.dumps(doc).replace("NaN", '"nan"')


@pytest.mark.parametrize("change, message", BAD_BOUNDS + NOT_OBJECTS)
@pytest.mark.parametrize("command", ["report", "merge"])
def test_an_out_of_range_tv_certificate_is_refused_by_report_and_merge(cli, tmp_path, change, message, command):
    whole, s0, s1 = _documents()
    if command == "report":
        path = _write(tmp_path, _with(whole, change), "r.json")
        result = cli("report", path, "-q")
    else:
        path = _write(tmp_path, _with(s0, change), "s0.json")
        result = cli("merge", path, _write(tmp_path, s1, "s1.json"), "-q")
    assert result.exit_code == ExitCode.USAGE_ERROR, result.output
    assert re.search(rf"{path.name}: not a specaudit results file: scenarios\[0\]\.{message}", result.output.strip(),
                     re.MULTILINE), result.output
    assert "TV <=" not in result.output


@pytest.mark.parametrize("command", ["report", "merge"])
def test_a_written_certificate_and_a_null_one_read_back(cli, tmp_path, command):
    whole, s0, s1 = _documents()
    for change, shown in ((None, False), ({"bound": 0.5}, True)):
        doc = json.loads(whole if command == "report" else s0)
        if change is None:
            doc["scenarios"][0]["tv_bound"] = None  # null: no certificate
        else:
            doc["scenarios"][0]["tv_bound"].update(change)
        path = _write(tmp_path, json.dumps(doc), "a.json")
        result = cli("report", path) if command == "report" else cli("merge", path, _write(tmp_path, s1, "s1.json"))
        assert result.exit_code == ExitCode.OK, result.output
        if command == "report":
            assert ("TV <= 0.5" in result.output) is shown, result.output


@pytest.mark.parametrize("alpha, shown", [(float("nan"), "nan"), ("inf", "inf"), (0, "0"), (1, "1"), (-0.1, r"-0\.1"),
                                           (2.5, r"2\.5")])
@pytest.mark.parametrize("command", ["report", "merge"])
def test_a_family_wise_alpha_outside_0_1_is_refused_by_report_and_merge(cli, tmp_path, alpha, shown, command):
    """The reports divide alpha by the tests and print it; a hand-edited NaN or 0 was read as a run's alpha."""
    whole, s0, s1 = _documents()
    doc = json.loads(whole if command == "report" else s0)
    doc["alpha"] = alpha
    path = _write(tmp_path, json.dumps(doc).replace("NaN", '"nan"'), "a.json")  # as the writer puts it
    result = cli("report", path, "-q") if command == "report" else cli("merge", path, _write(tmp_path, s1, "s1.json"), "-q")
    assert result.exit_code == ExitCode.USAGE_ERROR, result.output
    assert re.search(rf"a\.json: not a specaudit results file: alpha: {shown} is out of range; allowed: a family-wise "
                     r"alpha, 0 < alpha < 1", result.output), result.output


def test_the_reader_refuses_a_bad_certificate_through_the_python_api():
    doc = json.loads(_with(_documents()[0], {"bound": float("inf")}))
    with pytest.raises(ResultsFileError, match=r"^r\.json: not a specaudit results file: scenarios\[0\]\.tv_bound\.bound: "
                                               r"inf is out of range"):
        from_document(doc, "r.json")
    del doc["scenarios"][0]["tv_bound"]  # absent: no certificate
    assert from_document(doc).scenarios[0].tv_bound is None
