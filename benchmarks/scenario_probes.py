"""Cost of probing every simulated scenario, and speed of the per-row adapter.

1. The default suite with and without the contract probes on its simulated scenarios, side by
   side in one process, alternating, same seeds: seconds of each (best of ``--repeats``), the
   probes' own verifier calls and seconds, and the ratio (with / without). Goal: <= 1.05.
   Then, per scenario, how far the adversarial probe's scripted draws reached (coins per
   phase, draws per torch op, real generators that advanced).
2. The per-row adapter (``--adapter per-row``) on a numpy batch-1 verifier: rows per second at
   one batch of the markov-v4 scenario's shape (V = 4, K = 3), against the vectorised reference.

    python benchmarks/scenario_probes.py [--target T] [--repeats 3]
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path
from unittest import mock

import numpy as np

import specaudit
from specaudit.adapters import get as get_adapter
from specaudit.checks import probes
from specaudit.contract.targets import load_object
from specaudit.scenarios.catalogue import default_suite
from specaudit.verifiers.reference import verify as reference

HERE = Path(__file__).resolve().parent.parent


def _cpu() -> float:
    """Return CPU seconds (user + system) of this process and its finished children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def suite_cost(target: str, repeats: int) -> None:
    """Print the default suite's wall and CPU time with and without the scenario probes, and the ratios."""
    suite = default_suite()
    with_probes, without, cpu_with, cpu_without, probe_wall = [], [], [], [], []
    for i in range(repeats):
        t0, c0 = time.perf_counter(), _cpu()
        with mock.patch("specaudit.engine.scenario.probes.run_scenario_probes", lambda *a, **k: probes.ExactOutcome(())):
            specaudit.run(target, suite, seed=i, diagnose=False, supervised=False)  # in-process: the mock applies
        without.append(time.perf_counter() - t0)
        cpu_without.append(_cpu() - c0)
        seen: list[tuple[probes.ExactOutcome, float]] = []
        counted = _counting(seen)
        t0, c0 = time.perf_counter(), _cpu()
        with mock.patch("specaudit.engine.scenario.probes.run_scenario_probes", counted):
            r = specaudit.run(target, suite, seed=i, diagnose=False, supervised=False)
        with_probes.append(time.perf_counter() - t0)
        cpu_with.append(_cpu() - c0)
        probe_wall.append(sum(w for _, w in seen))
    calls = sum(o.calls for o, _ in seen)
    inside = sum(o.verifier_seconds for o, _ in seen)
    probed = sum(1 for o, _ in seen if o.checks)
    print(f"default suite ({len(suite)} scenarios, {probed} probed), target {target}, {repeats} repeats; exit {r.exit_code().name}")
    print(f"  wall without probes: {min(without):7.2f} s (all: {', '.join(f'{t:.2f}' for t in without)})")
    print(f"  wall with probes:    {min(with_probes):7.2f} s (all: {', '.join(f'{t:.2f}' for t in with_probes)})")
    print(f"  CPU without probes:  {min(cpu_without):7.2f} s; with: {min(cpu_with):7.2f} s")
    print(f"  the probes themselves: {min(probe_wall):.3f} s wall (best run), {calls} verifier calls, {inside:.3f} s inside the verifier")
    print(f"  ratio with / without, wall (best of each): {min(with_probes) / min(without):.3f}; CPU: "
          f"{min(cpu_with) / min(cpu_without):.3f}; probes' own wall / suite without: "
          f"{1 + min(probe_wall) / min(without):.3f}  (goal <= 1.05)")
    reach(r)


def reach(result) -> None:
    """Print, per scenario, what the adversarial probe found and how far its scripted draws reached."""
    print("per-scenario reach of adversarial-uniforms (scripted coins per phase; draws per torch op; bypassed sources):")
    for s in result.scenarios:
        adv = s.check("adversarial-uniforms")
        if adv is None:
            print(f"  {s.name:24s} not probed")
            continue
        data = adv.data or {}
        extra = "".join(f"; {k} {v}" for k, v in (("ops", data.get("op_draws")), ("bypassed", data.get("bypassed"))) if v)
        print(f"  {s.name:24s} {adv.status.name.lower():8s} coins {data.get('coins')}{extra}")


def _counting(seen: list[tuple[probes.ExactOutcome, float]]):
    """Return run_scenario_probes that also appends each (outcome, wall seconds) to ``seen``."""
    real = probes.run_scenario_probes

    def counted(*a, **k):
        t0 = time.perf_counter()
        out = real(*a, **k)
        seen.append((out, time.perf_counter() - t0))
        return out

    return counted


def per_row_speed(rows: int = 4096) -> None:
    """Print rows/s of the per-row adapter on a numpy batch-1 verifier vs the vectorised reference."""
    spec = [s for s in default_suite() if s.spec.name == "markov-v4"][0].spec
    pr = probes.Prober(lambda *a: None, spec, 0)
    inputs = pr.standard(np.random.default_rng(0), rows, num_draft=spec.k)
    args = (inputs.draft, inputs.q, inputs.p, inputs.num_draft)
    for label, verify in (
        ("reference (vectorised)", reference),
        ("per-row, batch-1 with rng", get_adapter("per-row").wrap(load_object(f"{HERE}/tests/verifiers/batch1.py:with_rng"))),
        ("per-row, batch-1 on Python random", get_adapter("per-row").wrap(load_object(f"{HERE}/tests/verifiers/batch1.py:python_random"))),
    ):
        best = min(_timed(verify, args) for _ in range(3))
        print(f"  {label:36s} {rows / best:12,.0f} rows/s")


def _timed(verify, args) -> float:
    t0 = time.perf_counter()
    verify(*args, np.random.default_rng(1))
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", default="specaudit.verifiers.reference:verify")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    suite_cost(args.target, args.repeats)
    print("per-row adapter, markov-v4 shape (V = 4, K = 3), 4096 rows:")
    per_row_speed()


if __name__ == "__main__":
    main()
