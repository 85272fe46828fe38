"""The documentation site (mkdocs.yml, docs/) builds with ``mkdocs build --strict``.

Strict turns every warning into a failure: a page missing from the nav or a broken link between
pages, and an API object (``::: specaudit...`` in docs/api.md) that mkdocstrings cannot collect
because it moved or was renamed. .ci/run installs the ``docs`` extra and runs the same build.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None,
                    reason="needs the docs extra (pip install -e '.[docs]'): mkdocs and mkdocstrings are not installed")
def test_mkdocs_build_strict_passes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "NO_MKDOCS_2_WARNING": "1"}
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "index.html").read_text().count("assert_lossless") > 0


def test_every_docs_page_is_in_the_nav() -> None:
    """A page left out of mkdocs.yml's nav would build but be unreachable (mkdocs only logs it)."""
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    listed = {page for entry in nav for page in entry.values()}
    assert listed == {p.name for p in (ROOT / "docs").glob("*.md")}


def test_readme_is_short() -> None:
    """The README is the landing page (what it is, the quick start, one example); the docs hold the rest."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
