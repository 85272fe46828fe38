"""docs/engines.md's table of verdicts per engine release equals the one the pinned tests assert."""

from __future__ import annotations

import re
from pathlib import Path

from engine_verdicts import VERDICTS  # tests/helpers

README = Path(__file__).parents[1] / "docs" / "engines.md"  # the docs page of engines as released


def _table(text: str) -> dict[str, tuple[int, str]]:
    body = text.split("<!-- engine-verdicts -->", 1)[1].split("<!-- /engine-verdicts -->", 1)[0]
    rows = {}
    for line in body.strip().splitlines()[2:]:
        target, verdict, why = (c.strip() for c in line.strip().strip("|").split("|"))
        code = re.fullmatch(r"exits (\d)", verdict)
        assert code, line
        rows[target.strip("`")] = (int(code.group(1)), why)
    return rows


def test_the_readme_table_states_each_pinned_release_and_its_verdict():
    table = _table(README.read_text())
    assert {t: v[0] for t, v in table.items()} == {t: v[0] for t, v in VERDICTS.items()}
    for target, (_, line) in VERDICTS.items():
        assert line in table[target][1], (target, table[target])  # the release's own line, quoted


def test_a_wrong_row_would_be_caught():
    # the negative control: one verdict flipped in the README's text, and the tables differ
    flipped = README.read_text().replace("| `hf-transformers@5.25.0` | exits 0 |", "| `hf-transformers@5.25.0` | exits 1 |")
    assert {t: v[0] for t, v in _table(flipped).items()} != {t: v[0] for t, v in VERDICTS.items()}
