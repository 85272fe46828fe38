"""Does a sharded CI gate like the unsharded run? Seed by seed, on a null and on a subtly broken verifier.

For each seed: the unsharded run (``specaudit.run``), and the same run as ``--shard i/3`` jobs
merged with ``merge --rerun`` (the recipe of the README's sharded CI). Printed: how many shard
jobs exited non-zero (a shard's verdicts are provisional: only an error may fail it, so an
any-job-fails matrix does not multiply the false alarms), how often each gate failed, and
whether the two gates agreed seed by seed (counts, p-values and re-runs are the same by
construction: the merge must reproduce the unsharded verdict).

The broken verifier is the reference except on a random 5% of rows, where it resamples a
rejected draft from p instead of norm(max(0, p - q)) (zoo mutant ``resample_from_p``):
markov-v4 at N = 30,000, TV about 0.01, the case where the old shard gate lost most detections.

    python benchmarks/shard_gate.py [--seeds 40] [--samples 30000]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from specaudit.engine.api import run
from specaudit.engine.merge import merge_documents
from specaudit.errors import ExitCode
from specaudit.results import document
from specaudit.verifiers.reference import verify as reference
from specaudit.verifiers.zoo.chain import resample_from_p

SHARDS = 3


def partly_broken(draft, q, p, num_draft, rng):
    """The reference on 95% of rows, ``resample_from_p`` on a random 5%."""
    out, n_out = reference(draft, q, p, num_draft, rng)
    rows = np.flatnonzero(rng.random(draft.shape[0]) < 0.05)
    if rows.size:
        bad, bad_n = resample_from_p(draft[rows], q[rows], p[rows], num_draft[rows], rng)
        out[rows], n_out[rows] = bad, bad_n
    return out, n_out


def gates(target: str, seed: int, samples: int) -> tuple[int, list[int], int]:
    """Return (unsharded exit code, shard exit codes, merge exit code) of one seed."""
    kw = dict(seed=seed, samples=samples, power=False, diagnose=False, supervised=False)
    whole = run(target, ["markov-v4"], **kw).exit_code()
    docs, shard_codes = [], []
    for i in range(SHARDS):
        result = run(target, ["markov-v4"], shard=(i, SHARDS), **kw)
        errored = any(s.error is not None for s in result.scenarios)
        shard_codes.append(int(ExitCode.CHECKS_FAILED if errored else ExitCode.OK))  # `run --shard`'s exit code
        docs.append(json.loads(document.dumps(result)))
    merged = merge_documents(docs, [f"shard{i}" for i in range(SHARDS)], rerun=target)
    return int(whole), shard_codes, int(merged.exit_code())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--samples", type=int, default=30_000)
    args = parser.parse_args()
    t0 = time.perf_counter()
    for label, target in (("reference (null)", "specaudit.verifiers.reference:verify"),
                          ("5% of rows broken", "benchmarks/shard_gate.py:partly_broken")):
        whole_fail = merge_fail = shard_fail = agree = 0
        for seed in range(1, args.seeds + 1):
            whole, shards, merged = gates(target, seed, args.samples)
            whole_fail += whole != 0
            merge_fail += merged != 0
            shard_fail += sum(c != 0 for c in shards)
            agree += (whole != 0) == (merged != 0)
        print(f"{label:18s} unsharded failed {whole_fail}/{args.seeds}, shards+merge failed {merge_fail}/{args.seeds}, "
              f"same verdict {agree}/{args.seeds}; shard jobs exiting non-zero {shard_fail}/{SHARDS * args.seeds}")
    print(f"({time.perf_counter() - t0:.0f} s; markov-v4, N = {args.samples:,}, {SHARDS} shards, alpha 1e-3)")


if __name__ == "__main__":
    main()
