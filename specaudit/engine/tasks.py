"""Tasks: a run's scenarios resolved, checked against the settings and this machine, and each made a Task.

The first stage of every run (:mod:`specaudit.engine.run`, a supervised run's supervisor and its
child, a merge's re-runs): scenario names, paths or objects become loaded scenarios, named once
(:func:`unique_names`) and refused before anything is allocated when they cannot fit this machine
(:func:`preflight`) or cannot reach a ``--certify-tv`` bound (:func:`check_certifiable`); each
gets its seed (:func:`scenario_seed`), and :func:`measured_spec` says what a task measures (its
samples, the certificate's cap, ``--batch``). Nothing here calls a verifier; the tasks go down to
:mod:`specaudit.engine.scenario`, which measures them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from specaudit.checks.statistical import has_joint_law
from specaudit.engine.settings import MAX_SAMPLES, RunSettings
from specaudit.errors import ScenarioError, UsageError
from specaudit.laws.chain import joint_probabilities
from specaudit.laws.loop import request_law
from specaudit.scenarios.catalogue import resolve
from specaudit.scenarios.loading import LoadedScenario
from specaudit.scenarios.schema import Scenario
from specaudit.simulate.blocks import block_sizes
from specaudit.stats import certificate, sequential

__all__ = [
    "ScenarioLike", "Task", "certify_cap", "check_certifiable", "least_bound", "measured_spec", "memory_limit",
    "preflight", "resolve_scenarios", "scenario_seed", "unique_names",
]

ScenarioLike = str | LoadedScenario | Scenario


class Task(NamedTuple):
    """One scenario of a run to measure and check."""

    verify: Callable[..., Any]  # the target, bound to this scenario (adapters)
    loaded: LoadedScenario
    seed: int
    samples: int | None = None  # overrides the scenario's
    place: int = -1  # the scenario's index in the run: its calls are tagged with it on a supervisor's board


def resolve_scenarios(scenarios: Sequence[ScenarioLike] | ScenarioLike | None,
                      settings: RunSettings | None = None) -> list[LoadedScenario]:
    """Return loaded scenarios from names, paths, or scenario objects (default suite for None).

    With ``settings``, also raise UsageError for what they cannot do with these scenarios
    (``certify_tv`` on a scenario with no joint law) before anything runs.
    """
    out = _loaded(scenarios)
    if settings is not None:
        if settings.convention is not None:  # --convention: every scenario's reference follows that engine's sampler
            out = [dataclasses.replace(item, spec=dataclasses.replace(item.spec, convention=settings.convention))
                   for item in out]
        check_certifiable(out, settings)
        looped = next((item for item in out if item.spec.mode == "loop"), None)
        if looped is not None and settings.shard is not None:
            raise UsageError(f"--shard {settings.shard[0]}/{settings.shard[1]}: scenario {looped.name} ({looped.path}) "
                             "is mode: loop, whose trace runs whole in one process; run it without --shard")
    return out


def _loaded(scenarios: Sequence[ScenarioLike] | ScenarioLike | None) -> list[LoadedScenario]:
    """Return the loaded scenarios, checked for clashing names and for this machine's memory."""
    if scenarios is None:
        return resolve(None)
    if isinstance(scenarios, (str, LoadedScenario, Scenario)):
        scenarios = [scenarios]
    out: list[LoadedScenario] = []
    for item in scenarios:
        if isinstance(item, LoadedScenario):
            out.append(item)
        elif isinstance(item, Scenario):
            out.append(LoadedScenario(item, "<api>", 1))
        else:
            out.extend(resolve([item]))
    out = unique_names(out)  # usage errors before any table is built or process started
    for item in out:
        preflight(item)
    return out


def memory_limit() -> int | None:
    """Return this machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _gib(n: float) -> str:
    """Return ``n`` bytes in GiB, readable whatever the size."""
    gib = n / (1 << 30)
    return f"{gib:,.1f}" if gib < 1e6 else f"{gib:.2g}"


def preflight(loaded: LoadedScenario, limit: int | None = None) -> None:
    """Raise ScenarioError when the scenario's tables and exact laws cannot fit in ``limit`` bytes.

    Checked before anything is allocated, so that ``validate`` refuses what ``run`` would die of
    (a MemoryError or the OOM killer, minutes in). ``limit``: this machine's memory by default.
    """
    limit = memory_limit() if limit is None else limit
    spec = loaded.spec
    if spec.mode == "loop":  # a trace whose processing bans every next token somewhere: no loop can run it
        trace, models = spec.loop_trace(), spec.loop_models()
        for request in trace.requests:
            try:
                request_law(trace, request, models)
            except ValueError as exc:
                raise ScenarioError(f"{loaded.path}:{loaded.key_line('loop')}: loop: {exc}; allowed: processing that "
                                    "leaves a token to emit after every history (fewer stop tokens, bans or a "
                                    "larger vocab)") from None
    needs = spec.memory_needs()
    total = sum(n for n, _ in needs)
    if limit is None or total <= limit:
        return
    kinds = sorted({spec.target.kind, spec.draft.kind})
    fits = 2
    lo, hi = 2, spec.vocab  # the largest vocabulary these chain kinds fit in (needs grow with V)
    while lo <= hi:
        mid = (lo + hi) // 2
        if sum(n for n, _ in spec.memory_needs(mid)) <= limit:
            fits, lo = mid, mid + 1
        else:
            hi = mid - 1
    raise ScenarioError(
        f"{loaded.path}:{loaded.key_line('vocab')}: vocab: needs {_gib(total)} GiB for {'/'.join(kinds)} chains at "
        f"V = {spec.vocab:,} ({'; '.join(f'{what}: {_gib(n)} GiB' for n, what in needs)}); "
        f"this machine has {_gib(limit)} GiB: use `kind: zipf` "
        f"for target and draft (rows made on demand, no tables), or vocab <= {fits:,} with these kinds"
    )


def unique_names(loaded: Sequence[LoadedScenario]) -> list[LoadedScenario]:
    """Return the scenarios with repeats of one scenario dropped; raise ScenarioError on two scenarios of one name.

    Results, seeds, baselines and ``specaudit merge`` key scenarios by name: two different
    scenarios called alike would be reported as one. The same scenario named twice (a name and a
    tag that includes it) runs once.
    """
    out: list[LoadedScenario] = []
    first: dict[str, LoadedScenario] = {}
    for item in loaded:
        seen = first.get(item.name)
        if seen is None:
            first[item.name] = item
            out.append(item)
        elif seen.spec != item.spec or seen.path != item.path:
            raise ScenarioError(
                f"{item.path}:{item.key_line('name')}: name: scenario name {item.name!r} is already used in this run by "
                f"{seen.path}:{seen.key_line('name')}; names key the results: rename one (e.g. name: {item.name}-2)"
            )
    return out


def scenario_seed(run_seed: int | None, loaded: LoadedScenario) -> int:
    """Return the simulation seed, derived from the run seed (else the scenario's own) and its content.

    The content hash is mixed in either way, so scenarios never share the verifier's uniforms,
    even when every scenario file keeps the default ``seed: 0``.
    """
    base = loaded.spec.seed if run_seed is None else run_seed
    mixed = np.random.SeedSequence([base, int(loaded.spec.content_hash(), 16)])
    return int(mixed.generate_state(1, dtype=np.uint32)[0])


def measured_spec(task: Task, settings: RunSettings) -> Scenario:
    """Return the scenario as ``task`` measures it: its samples (the task's, else a certificate's cap) and ``--batch``."""
    spec = task.loaded.spec
    if task.samples is not None:
        spec = dataclasses.replace(spec, samples=task.samples)
    elif settings.certify_tv is not None and has_joint_law(spec):  # sample until certified, up to the cap
        cap = certify_cap(spec, settings.certify_tv, settings.alpha)
        spec = dataclasses.replace(spec, samples=cap if cap is not None else MAX_SAMPLES)
    if settings.batch is not None:  # --batch: rows per verifier call (a slow verifier inside --timeout)
        spec = dataclasses.replace(spec, batch=settings.batch)
    return spec


def certify_cap(spec: Scenario, eps: float, alpha: float) -> int | None:
    """Return the sample cap of ``--certify-tv eps`` on ``spec``: 4x the sequences a lossless verifier is expected to need.

    The expected bound at n (:func:`specaudit.stats.certificate.samples_to_certify`) is computed from
    the exact joint law; None when no n up to the schema's bound on ``samples`` is expected to do.
    """
    target, _ = spec.chains()
    planned = certificate.samples_to_certify(joint_probabilities(target, spec.length), eps, alpha)
    if planned is None or certificate.CAP_FACTOR * planned > MAX_SAMPLES:
        return None
    return certificate.CAP_FACTOR * planned


def check_certifiable(loaded: Sequence[LoadedScenario], settings: RunSettings) -> None:
    """Raise UsageError unless a ``--certify-tv`` run has a scenario to certify and every one can reach EPS.

    Scenarios without an enumerated joint law (``mode: exact`` or ``greedy``, per-prefix ones) run
    as they would without ``--certify-tv`` and get no certificate; a run with none to certify is
    refused. With ``--samples`` as the cap, EPS must be reachable at the cap: the bound is at least
    its Hoeffding slack, even when the sample matches the target exactly.
    """
    eps = settings.certify_tv
    if eps is None or not loaded:  # nothing to run: the run says so (exit 5)
        return
    joint = [item for item in loaded if has_joint_law(item.spec)]
    if not joint:
        item = loaded[0]
        spec = item.spec
        why = (f"mode {spec.mode!r}: no sampled law" if spec.mode != "sample" else
               f"{spec.joint_cells:,} possible sequences (vocab ** length) are too many to count; it is checked "
               "per prefix and by PIT, which certify no TV")
        which = (f"scenario {item.name} ({item.path}) has no joint law to bound ({why})" if len(loaded) == 1 else
                 f"none of the {len(loaded)} scenarios has a joint law to bound (e.g. {item.name}: {why})")
        raise UsageError(f"--certify-tv {eps:g}: {which}; certify scenarios with an enumerated joint law, e.g. -s markov-v4")
    if settings.samples is not None:  # the cap is the user's: the same least bound for every scenario
        floor = least_bound(settings.samples, settings.alpha)
        if floor > eps:
            raise UsageError(f"--certify-tv {eps:g} --samples {settings.samples:,}: scenario {joint[0].name}'s bound at "
                             f"{settings.samples:,} sequences is at least {floor:.4g} (its Hoeffding slack, even for a "
                             f"sample that matches the target exactly); allowed: EPS >= {floor:.4g}, or a larger cap "
                             "(--samples)")
        return
    for item in joint:
        if certify_cap(item.spec, eps, settings.alpha) is None:
            raise UsageError(f"--certify-tv {eps:g}: scenario {item.name} would need more than {MAX_SAMPLES:,} "
                             "sequences even from a lossless verifier; ask for a larger EPS")


def least_bound(samples: int, alpha: float) -> float:
    """Return the smallest TV bound a ``--certify-tv`` run capped at ``samples`` can reach (its last look's slack)."""
    weight = sequential.spending(len(sequential.look_schedule(len(block_sizes(samples)))))[-1]
    return certificate.hoeffding_slack(samples, alpha * weight)
