"""The cache of validated scenarios: read back equal, without PyYAML or pydantic; any damaged entry validated again.

Every hostile entry (truncated, a flipped bit, empty, a folder, a FIFO, a pickle that names a
function, one that holds something else, one too large, and entries forged with a recomputed seal to
hold a scenario of a wrong type, a missing field or a value out of bounds) must cost only time: the
scenario is validated again, one warning names the file, and the entry is written anew (a forged
vocab gave exit 3, a FIFO hung the run, before they were checked). A cache folder that cannot be written
must not fail a run (it failed with exit 4 when the mutant-law cache could not be written).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from specaudit.errors import ExitCode, ScenarioError
from specaudit.results.cache import seal
from specaudit.scenarios import cache, schema
from specaudit.scenarios.catalogue import shipped_paths
from specaudit.scenarios.loading import load_scenario, parse_scenario
from specaudit.scenarios.schema import Sampling, to_data

TEXT = """\
name: cached
vocab: 3
k: 2
length: 2
samples: 1000
target: {kind: markov, matrix: [[0.5, 0.25, 0.25], [0.2, 0.3, 0.5], [0.1, 0.1, 0.8]]}
draft: {kind: context_free, probs: [0.3, 0.3, 0.4]}
"""


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Return an empty cache folder of this test's own (SPECAUDIT_CACHE)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("SPECAUDIT_CACHE", str(folder))
    return folder


def _entries(folder: Path) -> list[Path]:
    return sorted((folder / "scenarios").glob("*.pickle"))


def test_every_shipped_scenario_reads_back_equal_from_the_cache(own_cache):
    for path in shipped_paths():
        text = path.read_text()
        first = parse_scenario(text, str(path))  # validated, then stored
        again = cache.load(text)
        assert again is not None, path.name
        assert again[0] == first.spec and again[1] == first.keys
        assert to_data(again[0]) == to_data(first.spec) and again[0].content_hash() == first.spec.content_hash()
    assert len(_entries(own_cache)) == len(shipped_paths())


def test_to_data_is_what_pydantic_dumps_for_every_shipped_scenario(own_cache):
    for path in shipped_paths():
        spec = load_scenario(path).spec
        assert to_data(spec) == schema.validator().dump_python(spec, mode="json"), path.name
        assert to_data(spec, exclude_none=True) == schema.validator().dump_python(spec, mode="json", exclude_none=True)


def test_a_second_process_reads_the_scenario_without_pyyaml_or_pydantic(tmp_path, own_cache):
    path = tmp_path / "s.yaml"
    path.write_text(TEXT)
    code = ("import json, sys; from specaudit.scenarios.loading import load_scenario; s = load_scenario(sys.argv[1]); "
            "print(json.dumps([s.spec.content_hash(), list(map(list, s.keys)), 'yaml' in sys.modules, 'pydantic' in sys.modules]))")
    runs = [subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "SPECAUDIT_CACHE": str(own_cache)}) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    first, second = (json.loads(r.stdout) for r in runs)
    assert first[2:] == [True, True]  # validated: PyYAML and pydantic loaded
    assert second[2:] == [False, False]  # read back: neither
    assert second[:2] == first[:2] == [parse_scenario(TEXT).spec.content_hash(), [list(k) for k in parse_scenario(TEXT).keys]]
    assert runs[1].stderr == ""


def test_a_scenario_that_fails_validation_is_not_stored_and_fails_every_time(own_cache):
    bad = TEXT.replace("k: 2", "k: -1")
    for _ in range(2):
        with pytest.raises(ScenarioError, match=r"<string>:3: k: Input should be greater than or equal to 0"):
            parse_scenario(bad)
    assert _entries(own_cache) == []


def test_the_cache_off_stores_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECAUDIT_CACHE", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    parse_scenario(TEXT)
    assert cache.load(TEXT) is None and not (tmp_path / "xdg").exists()


def test_an_edited_scenario_text_is_validated_anew(own_cache):
    parse_scenario(TEXT)
    edited = TEXT.replace("samples: 1000", "samples: 2000")
    assert cache.load(edited) is None
    assert parse_scenario(edited).spec.samples == 2000 and len(_entries(own_cache)) == 2


def test_the_entry_names_the_code_that_validated_it(own_cache):
    # the schema's sources (size, mtime), pydantic's files and the version key the entry: new code validates anew
    parse_scenario(TEXT)
    source = Path(schema.__file__)
    stat = source.stat()
    cache._code.cache_clear()
    try:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        assert cache.load(TEXT) is None
    finally:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        cache._code.cache_clear()
    assert cache.load(TEXT) is not None


def _pickled_call(marker: Path) -> bytes:
    """Return a pickle that, unpickled by plain pickle, would create ``marker`` (os.system)."""

    class Call:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    return pickle.dumps(Call())


def _forged(change: str) -> bytes:
    """Return a sealed entry of TEXT's scenario forged past validation: one field changed as ``change`` says."""
    spec = parse_scenario(TEXT).spec
    if change == "wrong type":
        spec = dataclasses.replace(spec, vocab="x")
    elif change == "missing field":
        spec = dataclasses.replace(spec)
        del vars(spec)["vocab"]
    elif change == "out of bounds":
        spec = dataclasses.replace(spec, target=dataclasses.replace(spec.target, start=-2))
    elif change == "rules broken":
        spec = dataclasses.replace(spec, drafts=5)  # more drafts than k: the whole-scenario check
    return seal(pickle.dumps((spec, parse_scenario(TEXT).keys)))


def _hostile(kind: str, good: bytes, tmp_path: Path) -> bytes | None:
    """Return the bytes of a damaged entry of kind ``kind`` (None: a folder or a FIFO in its place)."""
    if kind == "truncated":
        return good[: len(good) // 2]
    if kind == "flipped bit":
        return good[:10] + bytes([good[10] ^ 1]) + good[11:]
    if kind == "empty":
        return b""
    if kind in ("a folder", "a FIFO"):
        return None
    if kind.startswith("forged: "):
        return _forged(kind.removeprefix("forged: "))
    if kind == "names a function":
        return seal(_pickled_call(tmp_path / "ran"))
    if kind == "holds a mapping":
        return seal(pickle.dumps({"name": "cached"}))
    if kind == "holds another schema class":
        return seal(pickle.dumps((Sampling(), ())))
    if kind == "keys not pairs":
        spec = parse_scenario(TEXT).spec
        return seal(pickle.dumps((spec, (("name", "1"),))))
    if kind == "garbage opcodes":
        return seal(b"\x80\x05\x95\xff\xff\xff\xff\xff\xff\xff\x7f" + b"(" * 50)
    raise AssertionError(kind)


HOSTILE = ("truncated", "flipped bit", "empty", "a folder", "a FIFO", "names a function", "holds a mapping",
           "holds another schema class", "keys not pairs", "garbage opcodes", "forged: wrong type",
           "forged: missing field", "forged: out of bounds", "forged: rules broken")


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_damaged_entry_is_validated_again_with_one_warning(kind, tmp_path, own_cache, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(TEXT)
    expected = load_scenario(path)
    (entry,) = _entries(own_cache)
    hostile = _hostile(kind, entry.read_bytes(), tmp_path)
    entry.unlink()
    if kind == "a folder":
        entry.mkdir()
    elif kind == "a FIFO":
        os.mkfifo(entry)
    else:
        entry.write_bytes(hostile)
    capsys.readouterr()
    again = load_scenario(path)
    assert again == expected
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"specaudit: warning: ignored cache file {entry} (")
    assert err.rstrip().endswith("; validating the scenario again")
    assert not (tmp_path / "ran").exists()  # the pickle's function was refused, not called
    if hostile is not None:  # written anew: the next read hits, quietly
        assert cache.load(TEXT) is not None and capsys.readouterr().err == ""


def test_an_entry_larger_than_its_limit_is_refused_unread(tmp_path, own_cache, capsys, monkeypatch):
    parse_scenario(TEXT)
    (entry,) = _entries(own_cache)
    monkeypatch.setattr(cache, "MAX_ENTRY_BYTES", entry.stat().st_size // 2)
    assert cache.load(TEXT) is None
    assert "larger than the" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ("names a function", "truncated", "forged: wrong type", "forged: missing field"))
def test_a_run_over_a_damaged_entry_passes_with_the_warning(kind, tmp_path, own_cache, cli):
    path = tmp_path / "s.yaml"
    path.write_text(TEXT)
    load_scenario(path)
    (entry,) = _entries(own_cache)
    entry.write_bytes(_hostile(kind, entry.read_bytes(), tmp_path) or b"")
    result = cli("run", "specaudit.verifiers.reference:verify", "-s", path, "--samples", "2000", "--no-power",
                 env={"SPECAUDIT_CACHE": str(own_cache)})
    assert result.exit_code == ExitCode.OK, result.output
    assert f"specaudit: warning: ignored cache file {entry}" in result.stderr
    assert not (tmp_path / "ran").exists()


def test_a_cache_folder_that_cannot_be_written_does_not_fail_a_run(tmp_path, cli):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    result = cli("run", "specaudit.verifiers.reference:verify", "-s", "markov-v4", "--samples", "4000",
                 env={"SPECAUDIT_CACHE": str(blocked / "cache")})
    assert result.exit_code == ExitCode.OK, result.output  # exit 4 before: "cannot write .../mutant-laws/..."
    assert "warning" not in result.stderr and "cannot write" not in result.stderr
