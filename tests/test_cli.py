"""The CLI through click's CliRunner: exit codes and outputs."""

import json

from specaudit.errors import ExitCode


def test_run_reference_exits_0_and_writes_json(tmp_path, cli):
    out = tmp_path / "r.json"
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "seed-context-free", "--samples", "20000", "--json", str(out))
    assert res.exit_code == ExitCode.OK, res.output
    assert "seed-context-free" in res.output and "2.533" in res.output
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == 2 and doc["partial"] is False and doc["exit_code"] == 0
    assert [s["status"] for s in doc["scenarios"]] == ["passed"] and doc["status"] == "passed"
    assert doc["scenarios"][0]["checks"][0]["name"] == "joint-law"


def test_run_mutant_exits_1_and_shows_cells(cli):
    res = cli("run", "specaudit.verifiers.zoo.chain:resample_from_p", "-s", "markov-v4", "--samples", "50000")
    assert res.exit_code == ExitCode.CHECKS_FAILED
    assert "most deviating cells" in res.output and "FAILED" in res.output


def test_usage_errors_exit_4(cli):
    assert cli("run", "no_such_module:verify").exit_code == ExitCode.USAGE_ERROR
    assert cli("run", "specaudit.verifiers.reference:verify", "--bogus").exit_code == ExitCode.USAGE_ERROR
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "markov-v5")
    assert res.exit_code == ExitCode.USAGE_ERROR and "did you mean 'markov-v4'" in res.output


def test_run_settings_are_validated_before_the_run(cli):
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "--suspect-level", "1.5")
    assert res.exit_code == ExitCode.USAGE_ERROR and "suspect_level = 1.5; allowed: 0 <= suspect_level < 1" in res.output
    res = cli("run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "--alpha", "0")
    assert res.exit_code == ExitCode.USAGE_ERROR and "alpha = 0.0; allowed: 0 < alpha < 1" in res.output


def test_merge_refuses_shards_run_with_different_settings(tmp_path, cli):
    base = ["run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "--samples", "2000", "-q", "--no-power",
            "--seed", "1"]  # a seed with no SUSPECT: the merge gates suspects
    assert cli(*base, "--shard", "0/2", "--json", str(tmp_path / "a.json")).exit_code == ExitCode.OK
    assert cli(*base, "--shard", "1/2", "--method", "g", "--json", str(tmp_path / "b.json")).exit_code == ExitCode.OK
    res = cli("merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert res.exit_code == ExitCode.USAGE_ERROR and "shards of different runs" in res.output
    assert cli(*base, "--shard", "1/2", "--json", str(tmp_path / "c.json")).exit_code == ExitCode.OK
    merged = cli("merge", str(tmp_path / "a.json"), str(tmp_path / "c.json"), "--json", str(tmp_path / "m.json"))
    assert merged.exit_code == ExitCode.OK, merged.output  # positive control: the same settings merge
    settings = json.loads((tmp_path / "m.json").read_text())["settings"]
    assert settings == {"method": "pearson", "gate_efficiency": True, "samples": 2000, "contract": "probs",
                        "timeout": 60.0, "merged_shards": 2}


def test_nothing_to_run_exits_5(cli):
    assert cli("run", "specaudit.verifiers.reference:verify", "-s", "tag:no-such-tag").exit_code == ExitCode.NO_SCENARIOS
    for command in (("plan",), ("selftest", "--seeds", "10")):
        res = cli(*command, "-s", "tag:no-such-tag")
        assert res.exit_code == ExitCode.NO_SCENARIOS and "no scenario matches tag:no-such-tag" in res.output
    assert cli("plan", "-s", "markov-v4", "--samples", "1000").exit_code == ExitCode.OK  # positive control


def test_validate_reports_file_line(tmp_path, cli):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nvocab: 2\nk: 1\nlength: 1\nsamples: 5\ntarget: {kind: context_free, probs: [0.5, 0.6]}\ndraft: {kind: same_as_target}\n")
    res = cli("validate", str(bad))
    assert res.exit_code == ExitCode.USAGE_ERROR
    assert f"{bad}:6: target.probs: probs sums to 1.1" in res.output
    assert cli("validate", "scenarios/markov-v4.yaml").exit_code == 0


def test_list_and_schema(cli):
    res = cli("list")
    assert res.exit_code == 0 and "markov-v4" in res.output
    res = cli("schema")
    assert res.exit_code == 0 and json.loads(res.output)["title"].startswith("specaudit scenario")


def test_schema_output_creates_its_folder(tmp_path, cli):
    out = tmp_path / "sub" / "scenario.schema.json"
    assert cli("schema", "-o", str(out)).exit_code == 0
    assert json.loads(out.read_text())["title"].startswith("specaudit scenario")
