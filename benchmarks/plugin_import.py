"""Cost of the pytest plugin for unrelated pytest runs, as ratios measured side by side.

pytest imports ``specaudit.pytest_plugin`` (entry point ``pytest11``) in every session of
every project where specaudit is installed, so it must not pull in the engine. Three ratios,
each from interleaved repeats (best of N, to damp a shared machine's noise):

1. a pytest session on one trivial test, plugin loaded vs not (other plugins off)   (goal <= 1.05)
2. ``import pytest, specaudit.pytest_plugin`` vs ``import pytest``
3. for scale, what an eager plugin would cost: ``import pytest, specaudit.engine.run`` vs ``import pytest``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _time(cmd: list[str], cwd: str) -> float:
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, env=env)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "test_unrelated.py").write_text("def test_nothing():\n    assert 1 + 1 == 2\n")
        # other installed plugins (hypothesis alone costs ~2 s here) are kept out: autoload off,
        # our plugin loaded explicitly, exactly as the entry point would load it
        session = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_unrelated.py"]
        cases = {
            "session, plugin": [*session, "-p", "specaudit.pytest_plugin"],
            "session, no plugin": session,
            "import pytest": [py, "-c", "import pytest"],
            "import pytest + plugin": [py, "-c", "import pytest, specaudit.pytest_plugin"],
            "import pytest + engine": [py, "-c", "import pytest, specaudit.engine.run"],
        }
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.repeats):  # interleaved: every case sees the same machine load
            for name, cmd in cases.items():
                times[name].append(_time(cmd, tmp))
    best = {k: min(v) for k, v in times.items()}
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    for name, t in best.items():
        print(f"{name:<28} best {t * 1000:7.1f} ms  median {sorted(times[name])[len(times[name]) // 2] * 1000:7.1f} ms")
    for label, a, b in (
        ("session with plugin / without (goal <= 1.05)", "session, plugin", "session, no plugin"),
        ("import pytest+plugin / pytest", "import pytest + plugin", "import pytest"),
        ("import pytest+engine / pytest (an eager plugin)", "import pytest + engine", "import pytest"),
    ):
        print(f"ratio {label:<48} best {best[a] / best[b]:.3f}  median {med[a] / med[b]:.3f}")


if __name__ == "__main__":
    main()
