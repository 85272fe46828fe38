"""`specaudit run --repro DIR`: the repro files of a run's failed exact findings, written once the run is settled.

The same builder as `specaudit repro` (the files are byte for byte what it writes from the run's
JSON); the JSON lists them per scenario, the terminal and the HTML report name them. Hostile
folders (a file, a FIFO, one that cannot be made) are usage errors before anything is simulated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specaudit.errors import ExitCode

CALLS = Path(__file__).resolve().parent.parent / "verifiers" / "hostile" / "calls.py"


@pytest.fixture(scope="module")
def settled(tmp_path_factory):
    """A run of leq_ratio on corners with --repro, --json and --html: (folder, CLI output)."""
    from click.testing import CliRunner

    from specaudit.cli import main

    base = tmp_path_factory.mktemp("run-repro")
    got = CliRunner().invoke(main, ["run", "mutant:leq_ratio", "-s", "corners", "--no-power", "--json",
                                    str(base / "r.json"), "--html", str(base / "r.html"), "--repro",
                                    str(base / "repro")])
    return base, got


def test_run_writes_the_repro_files_and_every_report_names_them(settled):
    base, got = settled
    assert got.exit_code == ExitCode.CHECKS_FAILED, got.output
    names = sorted(p.name for p in (base / "repro").iterdir())
    assert "test_repro_corners_adversarial_uniforms.py" in names, names
    doc = json.loads((base / "r.json").read_text())
    listed = doc["scenarios"][0]["info"]["repro"]
    assert sorted(r["name"] for r in listed) == names
    assert {"name": "test_repro_corners_adversarial_uniforms.py", "check": "adversarial-uniforms"} in listed
    for name in names:
        assert f"wrote {base / 'repro' / name}: repro of corners / " in got.output, got.output
    html = (base / "r.html").read_text()
    assert all(f"<code>{name}</code>" in html for name in names)


def test_run_repro_files_are_what_specaudit_repro_writes_from_its_json(settled, cli):
    base, _ = settled
    again = cli("repro", base / "r.json", "-o", base / "again")
    assert again.exit_code == ExitCode.OK, again.output
    for path in (base / "repro").iterdir():
        assert (base / "again" / path.name).read_text() == path.read_text(), path.name


def test_a_passing_run_writes_no_repro_folder(cli, tmp_path):
    got = cli("run", "reference", "-s", "corners", "--no-power", "--json", tmp_path / "r.json", "--repro",
              tmp_path / "repro")
    assert got.exit_code == ExitCode.OK, got.output
    assert not (tmp_path / "repro").exists()
    assert all("repro" not in s["info"] for s in json.loads((tmp_path / "r.json").read_text())["scenarios"])


#: (--repro path under tmp_path or absolute, what the usage error says)
BAD_FOLDERS = [
    ("{tmp}/a-file", "--repro {tmp}/a-file: not a folder (a file); give a folder path"),
    ("{tmp}/a-fifo", "--repro {tmp}/a-fifo: not a folder (a FIFO); give a folder path"),
    ("{tmp}/a-file/deeper", "a-file is not a folder"),
    ("/proc/specaudit-repro", "--repro /proc/specaudit-repro: cannot create a folder in /proc"),
]


@pytest.mark.parametrize(("path", "message"), BAD_FOLDERS, ids=[p for p, _ in BAD_FOLDERS])
def test_a_bad_repro_folder_is_a_usage_error_before_any_simulation(cli, tmp_path, monkeypatch, path, message):
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("SPECAUDIT_HOSTILE_CALLS", str(calls))
    (tmp_path / "a-file").write_text("")
    os.mkfifo(tmp_path / "a-fifo")
    got = cli("run", f"{CALLS}:records_calls", "-s", "markov-v4", "--samples", "500", "--repro",
              path.format(tmp=tmp_path))
    assert got.exit_code == ExitCode.USAGE_ERROR, got.output
    assert message.format(tmp=tmp_path) in got.output, got.output
    assert not calls.exists()  # the verifier was never called
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-fifo", "a-file"]  # no probe left behind


def test_an_unwritable_repro_folder_is_a_usage_error_before_any_simulation(cli, tmp_path, monkeypatch):
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder")
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("SPECAUDIT_HOSTILE_CALLS", str(calls))
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        got = cli("run", f"{CALLS}:records_calls", "-s", "markov-v4", "--samples", "500", "--repro", locked)
        again = cli("run", f"{CALLS}:records_calls", "-s", "markov-v4", "--samples", "500", "--repro", locked / "new")
    finally:
        locked.chmod(0o700)
    assert got.exit_code == again.exit_code == ExitCode.USAGE_ERROR, (got.output, again.output)
    assert f"--repro {locked}: cannot write in {locked}" in got.output, got.output
    assert f"--repro {locked / 'new'}: cannot create a folder in {locked}" in again.output, again.output
    assert not calls.exists()
