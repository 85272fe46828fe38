"""Size and CPU time of the HTML report, beside the goals (issue: README truth, item 4).

1. The default suite's page: ``specaudit run specaudit.verifiers.reference:verify --html r.html``
   renders the run read back from its JSON. Measured here the same way, in this process, with
   ``time.process_time`` around ``html.render(document.read(path))``: the first render (it pays for
   importing Jinja2 and compiling the template, as ``specaudit report`` does) and a second one.
   Goals: <= 300 kB and <= 0.5 s CPU.
2. Scaling: the same scenarios repeated under new names to 1,000, 2,000 and 4,000 scenarios
   (a 4,000-scenario JSON never finished with the matplotlib plots); time per scenario should stay flat.

    python benchmarks/html_report.py                 # runs the default suite first (~30 s CPU)
    python benchmarks/html_report.py --json r.json   # or renders a results file you have
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path

from specaudit.results import document

GOAL_KB = 300.0
GOAL_CPU = 0.5


def _default_suite_json(folder: Path) -> Path:
    import specaudit

    t0 = time.process_time()
    result = specaudit.run("specaudit.verifiers.reference:verify")
    print(f"ran the default suite: {result.status.value}, {len(result.scenarios)} scenarios, "
          f"{time.process_time() - t0:.1f} s CPU")
    return document.write(result, folder / "default.json")


def _grown(doc: dict, n: int) -> dict:
    """Return ``doc`` with its scenarios repeated under new names up to ``n`` scenarios."""
    out = copy.deepcopy(doc)
    base = doc["scenarios"]
    out["scenarios"] = [dict(base[i % len(base)], name=f"{base[i % len(base)]['name']}-{i}") for i in range(n)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=None, help="a results file (default: run the default suite)")
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 2000, 4000], help="scenario counts to scale to")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.json or _default_suite_json(Path(tmp))
        t0 = time.process_time()
        from specaudit.reports import html  # Jinja2 is imported on the first render, inside the timing

        page = html.render(document.read(path))
        cold = time.process_time() - t0
        t0 = time.process_time()
        again = html.render(document.read(path))
        warm = time.process_time() - t0
        assert again == page, "the page is not a pure function of the JSON"
        kb = len(page.encode()) / 1000
        n = len(json.loads(Path(path).read_text())["scenarios"])
        print(f"{path.name}: {n} scenarios")
        print(f"  size        {kb:8.1f} kB      goal <= {GOAL_KB:.0f} kB   {'ok' if kb <= GOAL_KB else 'OVER'}")
        print(f"  first render {cold:7.3f} s CPU  goal <= {GOAL_CPU} s    {'ok' if cold <= GOAL_CPU else 'OVER'}"
              "  (imports Jinja2, compiles the template)")
        print(f"  next render  {warm:7.3f} s CPU")
        doc = json.loads(Path(path).read_text())
        from specaudit.results.document import from_document

        for size in args.sizes:
            big = from_document(_grown(doc, size))
            t0 = time.process_time()
            text = html.render(big)
            dt = time.process_time() - t0
            print(f"  {size:>5} scenarios: {dt:7.2f} s CPU, {len(text.encode()) / 1e6:6.1f} MB, "
                  f"{dt / size * 1000:5.2f} ms per scenario")


if __name__ == "__main__":
    main()
