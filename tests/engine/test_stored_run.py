"""A run's results do not change unless its behaviour is meant to: the default suite against a stored run.

The reference verifier on the default suite, through the CLI as a user runs it (supervised), at
``--samples 2000 --seed 7``: the JSON must equal ``stored/reference-default.json`` byte for byte
once the fields that measure time or the machine are dropped (any key ending in ``seconds``,
``started``, ``environment``, the tool's ``version``) and a shipped scenario's folder written ``<repo>/scenarios``. A restructuring of the engine (the run's data
flowing one way, run -> scenario -> blocks -> tallies -> checks -> result) must keep it. The numpy
simulator (``SPECAUDIT_NO_KERNELS=1``) gives the same file as the C kernels (checked 2026-12-07).

The file records the numpy and scipy releases it was made with: under other releases (pip may resolve
newer ones) numbers may move in their last digits, so there every non-number must still be equal and
every number equal to 1e-9 relative; byte for byte only under the same releases.

A change that is meant to alter results regenerates it: ``SPECAUDIT_STORE_RUN=1 python -m pytest
tests/engine/test_stored_run.py``, and the diff of the stored file is reviewed with the change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

STORED = Path(__file__).parent / "stored" / "reference-default.json"
LIBRARIES = STORED.with_name("reference-default.libraries.json")
ARGS = ["specaudit.verifiers.reference:verify", "--samples", "2000", "--seed", "7"]
#: Fields that measure time or the machine, not the run's behaviour.
DROPPED = ("started", "environment", "version")


def normalised(doc: Any) -> Any:
    """Return ``doc`` without the fields that measure time or the machine; a shipped scenario's path as
    ``<repo>/scenarios/NAME.yaml`` (whichever checkout the installed package reads them from)."""
    if isinstance(doc, dict):
        return {k: (_shipped(v) if k == "path" else normalised(v)) for k, v in doc.items()
                if not k.endswith("seconds") and k not in DROPPED}
    if isinstance(doc, list):
        return [normalised(v) for v in doc]
    return doc


def _shipped(path: Any) -> Any:
    if isinstance(path, str) and Path(path).parent.name == "scenarios":
        return f"<repo>/scenarios/{Path(path).name}"
    return path


def text(doc: Any) -> str:
    return json.dumps(normalised(doc), indent=1, sort_keys=True) + "\n"


def libraries() -> dict[str, str]:
    """Return the numeric libraries' releases the results depend on."""
    import scipy

    return {"numpy": np.__version__, "scipy": scipy.__version__}


def differences(old: Any, new: Any, path: str = "", rtol: float = 0.0) -> list[str]:
    """Return the paths where ``old`` and ``new`` differ (numbers to ``rtol`` relative; the first few make the message)."""
    if isinstance(old, float) and isinstance(new, (int, float)) and rtol:
        same = old == new or (np.isnan(old) and np.isnan(new)) or abs(old - new) <= rtol * max(abs(old), abs(new))
        return [] if same else [f"{path}: {old!r} -> {new!r}"]
    if type(old) is not type(new):
        return [f"{path or '/'}: {type(old).__name__} -> {type(new).__name__}"]
    if isinstance(old, dict):
        out = [f"{path}/{k}: {'added' if k in new else 'removed'}" for k in sorted(set(old) ^ set(new))]
        return out + [d for k in sorted(set(old) & set(new)) for d in differences(old[k], new[k], f"{path}/{k}", rtol)]
    if isinstance(old, list):
        if len(old) != len(new):
            return [f"{path}: {len(old)} items -> {len(new)}"]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{path}[{i}]", rtol)]
    return [] if old == new else [f"{path}: {old!r} -> {new!r}"]


def test_the_default_suite_gives_the_stored_run(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "specaudit", "run", *ARGS, "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    got = json.loads(out.read_text())
    if os.environ.get("SPECAUDIT_STORE_RUN"):
        STORED.write_text(text(got))
        LIBRARIES.write_text(json.dumps(libraries(), indent=1, sort_keys=True) + "\n")
    stored = json.loads(STORED.read_text())
    assert len(stored["scenarios"]) >= 10 and stored["status"] == "passed"  # the whole default suite, passed
    same_libraries = json.loads(LIBRARIES.read_text()) == libraries()
    diff = differences(stored, normalised(got), rtol=0.0 if same_libraries else 1e-9)
    assert not diff, f"{len(diff)} field(s) differ from the stored run; first: " + "; ".join(diff[:8])
    if same_libraries:
        assert text(got) == STORED.read_text()  # byte for byte (key order and number formatting included)


def test_the_comparison_sees_a_changed_figure_and_ignores_timings() -> None:
    # negative control: a one-ulp change in one p-value is a difference; a new timing is not
    stored = json.loads(STORED.read_text())
    changed = json.loads(STORED.read_text())
    i, j = next((i, j) for i, sc in enumerate(changed["scenarios"]) for j, c in enumerate(sc["checks"])
                if isinstance(c.get("pvalue"), float))
    before = changed["scenarios"][i]["checks"][j]["pvalue"]
    after = float(np.nextafter(before, 2.0))
    changed["scenarios"][i]["checks"][j]["pvalue"] = after
    assert differences(stored, changed) == [f"/scenarios[{i}]/checks[{j}]/pvalue: {before!r} -> {after!r}"]
    assert text(changed) != STORED.read_text()
    assert differences(stored, changed, rtol=1e-9) == []  # under other numeric releases: within 1e-9
    changed["scenarios"][i]["checks"][j]["pvalue"] = before * (1 + 1e-6)
    assert len(differences(stored, changed, rtol=1e-9)) == 1
    timed = {**stored, "seconds": 99.0, "started": "later", "environment": {"python": "3.99"}}
    assert differences(stored, normalised(timed)) == [] and text(timed) == STORED.read_text()
