"""Write each statistical finding as a pytest file: the scenario inline, a seed and an N with power >= 0.99.

A failed statistical check (the joint law, tokens/step, accept length, the per-prefix tests) has no
single failing call to replay: its evidence is the law of many sequences. Its repro is the
scenario itself, as YAML inline in ``test_repro_<scenario>_statistical.py``, run through
``specaudit.assert_lossless`` with a seed and a sample size chosen the way ``specaudit plan``
chooses one: the smallest N at which the joint-law check reaches power 0.99 against the law the
run observed (:func:`specaudit.stats.power.samples_for_law`, its noncentrality corrected for the
observed law's own noise), at the per-test level of the file's first Holm step. The file states
its false-alarm rate (the family-wise alpha it runs at: a lossless verifier fails it that often)
and, like the exact repros, takes ``SPECAUDIT_REPRO_TARGET`` to test a fix. Not shrunk yet: the
scenario is the run's, whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specaudit.checks import statistical_checks
from specaudit.errors import ResultsFileError, SpecauditError
from specaudit.scenarios.catalogue import resolve
from specaudit.stats.power import TARGET_POWER, samples_for_law

__all__ = ["ALPHA", "MAX_SAMPLES", "ScenarioRepro", "build", "findings"]

#: Family-wise false-alarm rate of a statistical repro (``assert_lossless``'s default).
ALPHA = 1e-3
#: Most sequences a statistical repro asks for (its power is said to fall short above it).
MAX_SAMPLES = 1_000_000


@dataclass(frozen=True)
class ScenarioRepro:
    """A rendered statistical repro: its file name and text, what it re-runs and at what size."""

    name: str
    text: str
    scenario: str
    checks: tuple[str, ...]
    samples: int
    data_name: None = None  # inline always (the scenario is its own input)


def findings(doc: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], tuple[str, ...]]]:
    """Return each scenario result with failed gating statistical checks (the law of many sequences), and those checks."""
    statistical = {c.name for c in statistical_checks()}
    out = []
    for s in doc.get("scenarios", []):
        failed = tuple(c["name"] for c in s.get("checks", [])
                       if c.get("status") == "failed" and c.get("gate", True) and c["name"] in statistical)
        if failed:
            out.append((s, failed))
    return out


def _yaml_of(result: Mapping[str, Any]) -> str:
    """Return the scenario file's text as it was run; ResultsFileError when it is gone or changed since."""
    name, path = result["name"], result.get("path")
    try:
        (loaded,) = resolve([path if path and Path(path).is_file() else name])
    except SpecauditError:
        raise ResultsFileError(f"scenario {name!r}: its file {path!r} is gone and it is not a shipped scenario") from None
    if loaded.spec.content_hash() != result.get("content_hash"):
        raise ResultsFileError(f"scenario {name!r} has changed since the run (content hash "
                               f"{loaded.spec.content_hash()} vs {result.get('content_hash')}): no repro written")
    if loaded.path is None:
        raise ResultsFileError(f"scenario {name!r} has no file to inline")
    return Path(loaded.path).read_text(encoding="utf-8")


def _planned(result: Mapping[str, Any], tests: int) -> tuple[int, str]:
    """Return the repro's sample size and how it was chosen."""
    joint = next((c for c in result.get("checks", []) if c["name"] == "joint-law"), None)
    data = (joint or {}).get("data") or {}
    run_n = int(result.get("samples") or data.get("n") or 0)
    if joint is not None and joint.get("status") == "failed" and data.get("observed") and data.get("expected"):
        try:
            observed, expected = np.asarray(data["observed"], float), np.asarray(data["expected"], float)
        except (TypeError, ValueError):
            raise ResultsFileError(f"scenario {result['name']!r}: its joint-law counts are not numbers") from None
        n = observed.sum()
        if (observed.shape != expected.shape or observed.ndim != 1 or not np.all(np.isfinite(observed))
                or not np.all(np.isfinite(expected)) or (observed < 0).any() or (expected < 0).any()
                or n <= 0 or expected.sum() <= 0):
            raise ResultsFileError(f"scenario {result['name']!r}: its joint-law observed and expected counts are not "
                                   "two lists of non-negative counts of one length")
        level = ALPHA / max(tests, 1)
        needed = samples_for_law(observed / n, expected / expected.sum(), level, TARGET_POWER, law_samples=int(n))
        if needed is not None and needed <= MAX_SAMPLES:
            how = (f"the smallest N with power {TARGET_POWER} against the joint law the run observed "
                   f"(TV {data.get('tv', float('nan')):.4g} over {len(observed)} cells, N = {int(n):,}) at level "
                   f"{level:.3g} (alpha {ALPHA:g} over {tests} gating checks, Holm's first step)")
            return max(int(needed), 100), how
        return MAX_SAMPLES, (f"at most {MAX_SAMPLES:,} sequences: power {TARGET_POWER} against the observed law "
                             "needs more, so this file may pass on the target")
    samples = min(4 * max(run_n, 100), MAX_SAMPLES)
    return samples, (f"4 x the run's {run_n:,} sequences (the suspect re-run rule; the joint law did not fail, so no "
                     "planned size)")


_FILE = '''\
"""Statistical repro of specaudit's finding on {scenario}: {checks} failed.

Found by specaudit {version} on `{run_target}`: {summary}.
The scenario is inlined below; the file runs it through specaudit.assert_lossless at N = {samples:,} sequences,
seed {seed}: {how}. A lossless verifier fails this file with probability at most {alpha:g} (the family-wise alpha).

    pytest {name}                                              # fails on the target
    SPECAUDIT_REPRO_TARGET=pkg.module:verify pytest {name}     # test another verifier (a fix)
"""

import os

import specaudit

TARGET = os.environ.get("{variable}", {target!r})
SAMPLES = {samples}
SEED = {seed}
ALPHA = {alpha!r}
SCENARIO = {yaml!r}


def test_repro(tmp_path):
    path = tmp_path / {file_name!r}
    path.write_text(SCENARIO)
    specaudit.assert_lossless(TARGET, [str(path)], seed=SEED, samples=SAMPLES, alpha=ALPHA, efficiency={efficiency})
'''


def build(doc: Mapping[str, Any], found: Sequence[tuple[Mapping[str, Any], tuple[str, ...]]], target: str,
          variable: str) -> list[ScenarioRepro]:
    """Render a statistical repro for each ``found`` scenario, loading ``target`` (``variable`` overrides it)."""
    out = []
    for result, checks in found:
        yaml = _yaml_of(result)
        tests = sum(1 for c in result.get("checks", []) if c.get("gate", True) and c.get("pvalue") is not None)
        samples, how = _planned(result, tests)
        efficiency = any(c.get("category") == "efficiency" for c in result.get("checks", []) if c["name"] in checks)
        slug = "".join(ch if ch.isalnum() else "_" for ch in result["name"]).strip("_").lower() or "x"
        name = f"test_repro_{slug}_statistical.py"
        summary = "; ".join(f"{c['name']}: {c.get('summary', '')}" for c in result.get("checks", [])
                            if c["name"] in checks)[:400].replace('"""', "'''").replace("\\", "\\\\")
        text = _FILE.format(scenario=result["name"], checks=", ".join(checks), version=doc.get("version", "?"),
                            run_target=doc.get("target", "?"), summary=summary, samples=samples,
                            seed=int(doc.get("seed") or 0) + 1, how=how, alpha=ALPHA, name=name, variable=variable,
                            target=target, yaml=yaml, file_name=f"{slug}.yaml", efficiency=efficiency)
        out.append(ScenarioRepro(name, text, result["name"], checks, samples))
    return out
