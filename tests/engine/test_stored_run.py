"""A run's results do not change unless its behaviour is meant to: the default suite against a stored run.

The reference verifier on the default suite, through the CLI as a user runs it (supervised), at
``--samples 2000 --seed 7``: the JSON must equal ``stored/reference-default.json`` byte for byte
once the fields that measure time or the machine are dropped (any key ending in ``seconds``,
``started``, ``environment``, the tool's ``version``). A restructuring of the engine (the run's data
flowing one way, run -> scenario -> blocks -> tallies -> checks -> result) must keep it. The numpy
simulator (``SPECAUDIT_NO_KERNELS=1``) gives the same file as the C kernels (checked 2026-12-07).

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
ARGS = ["specaudit.verifiers.reference:verify", "--samples", "2000", "--seed", "7"]
#: Fields that measure time or the machine, not the run's behaviour.
DROPPED = ("started", "environment", "version")


def normalised(doc: Any) -> Any:
    """Return ``doc`` without the fields that measure time or the machine."""
    if isinstance(doc, dict):
        return {k: normalised(v) for k, v in doc.items() if not k.endswith("seconds") and k not in DROPPED}
    if isinstance(doc, list):
        return [normalised(v) for v in doc]
    return doc


def text(doc: Any) -> str:
    return json.dumps(normalised(doc), indent=1, sort_keys=True) + "\n"


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """Return the paths where ``old`` and ``new`` differ (the first few make the failure message)."""
    if type(old) is not type(new):
        return [f"{path or '/'}: {type(old).__name__} -> {type(new).__name__}"]
    if isinstance(old, dict):
        out = [f"{path}/{k}: {'added' if k in new else 'removed'}" for k in sorted(set(old) ^ set(new))]
        return out + [d for k in sorted(set(old) & set(new)) for d in differences(old[k], new[k], f"{path}/{k}")]
    if isinstance(old, list):
        if len(old) != len(new):
            return [f"{path}: {len(old)} items -> {len(new)}"]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if old == new else [f"{path}: {old!r} -> {new!r}"]


def test_the_default_suite_gives_the_stored_run(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "specaudit", "run", *ARGS, "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    got = json.loads(out.read_text())
    if os.environ.get("SPECAUDIT_STORE_RUN"):
        STORED.write_text(text(got))
    stored = json.loads(STORED.read_text())
    assert len(stored["scenarios"]) >= 10 and stored["status"] == "passed"  # the whole default suite, passed
    diff = differences(stored, normalised(got))
    assert not diff, f"{len(diff)} field(s) differ from the stored run; first: " + "; ".join(diff[:8])
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
    timed = {**stored, "seconds": 99.0, "started": "later", "environment": {"python": "3.99"}}
    assert differences(stored, normalised(timed)) == [] and text(timed) == STORED.read_text()
