"""Logits contract cost, side by side on the sampling scenarios (best of several repeats).

For each scenario: the reference under ``--contract probs`` (handed processed laws) and under
``--contract logits`` (raw logits; the verifier processes them itself): total run time, time
inside the verifier, and the harness time (total - verifier) ratio logits / probs, which should
be ~1 (the harness only hands over other rows). Also the time of the ``processing`` diagnosis
(exact output laws of every mis-processing hypothesis) per scenario.
"""

from __future__ import annotations

import argparse
import time

import specaudit
from specaudit.checks import processing as mismatch
from specaudit.engine.scenario import measure
from specaudit.scenarios.catalogue import resolve
from specaudit.verifiers import reference


def best(fn, repeats):
    """Return the result with the smallest first element over ``repeats`` calls."""
    return min((fn() for _ in range(repeats)), key=lambda r: r[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=None)
    args = parser.parse_args()
    print(f"{'scenario':<22} {'contract':<8} {'total s':>8} {'verifier s':>10} {'harness s':>9} {'diag s':>7}")
    for loaded in resolve(["tag:sampling"]):
        harness = {}
        for contract, target in (("probs", "reference"), ("logits", "reference-logits")):
            def once(target=target, loaded=loaded, contract=contract):
                t0 = time.perf_counter()
                r = specaudit.run(target, [loaded], contract=contract, samples=args.samples, diagnose=False)
                total = time.perf_counter() - t0
                s = r.scenarios[0]
                return total, s.verifier_seconds

            total, inside = best(once, args.repeats)
            harness[contract] = total - inside
            diag = ""
            if contract == "probs" and loaded.spec.mode != "greedy":
                m = measure(reference.verify, loaded.spec, 0)
                t0 = time.perf_counter()
                mismatch.processing(m)
                diag = f"{time.perf_counter() - t0:7.3f}"
            print(f"{loaded.name:<22} {contract:<8} {total:8.3f} {inside:10.3f} {total - inside:9.3f} {diag:>7}")
        print(f"{'':<22} harness ratio logits/probs = {harness['logits'] / harness['probs']:.2f}")


if __name__ == "__main__":
    main()
