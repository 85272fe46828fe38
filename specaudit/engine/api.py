"""The Python API: ``specaudit.run`` audits a verifier and returns the RunResult (no printing).

Supervised by default, like the command line: the verifier runs in a child process that the
caller's process outlives (:mod:`specaudit.engine.supervisor`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from specaudit.contract.guard import DEFAULT_TIMEOUT
from specaudit.engine.executors import Progress
from specaudit.engine.run import execute
from specaudit.engine.settings import DEFAULT_ALPHA, RunSettings, parse_shard
from specaudit.engine.supervisor import execute_supervised
from specaudit.engine.tasks import ScenarioLike
from specaudit.results import RunResult, ScenarioResult

__all__ = ["run"]


def run(
    target: str | Callable[..., Any],
    scenarios: Sequence[ScenarioLike] | ScenarioLike | None = None,
    *,
    seed: int | None = None,
    alpha: float = DEFAULT_ALPHA,
    samples: int | None = None,
    method: str = "pearson",
    gate_efficiency: bool = True,
    on_scenario: Callable[[ScenarioResult], None] | None = None,
    progress: Progress | None = None,
    diagnose: bool = True,
    contract: str = "probs",
    convention: str | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    adapter: str | None = None,
    adapter_options: Mapping[str, Any] | None = None,
    device: str | None = None,
    jobs: int = 1,
    max_memory: int | None = None,
    max_device_memory: int | None = None,
    suspect_level: float | None = None,
    power: bool = True,
    early_stop: bool = False,
    certify_tv: float | None = None,
    shard: tuple[int, int] | str | None = None,
    backend: str = "local",
    address: str | None = None,
    supervised: bool = True,
) -> RunResult:
    """Audit ``target`` on ``scenarios`` and return the RunResult (no printing).

    Parameters
    ----------
    target : str or callable
        Import string (``pkg.mod:attr``, ``file.py:attr``, an alias) or a verifier callable.
    scenarios : names, paths or Scenario objects, optional
        Defaults to the shipped default suite.
    seed : int, optional
        Run seed; each scenario's seed is derived from it and the scenario's content. Without
        it every scenario uses its own ``seed``.
    alpha : float
        Family-wise error rate over every statistical check of the run (Holm).
    samples : int, optional
        Override every scenario's number of sequences.
    method : {"pearson", "g"}
        Goodness-of-fit statistic.
    gate_efficiency : bool
        Whether tokens/step and accept-length failures fail the run (they are always reported).
    on_scenario : callable, optional
        Called with each ScenarioResult as soon as it is measured (before Holm), e.g. to save
        partial results.
    progress : callable, optional
        ``progress(scenario, done, total)`` after every batch of finished sequences; from a
        supervised child, at most every ``supervisor.PROGRESS_INTERVAL`` (0.1 s) and always for
        its last batch.
    adapter : str, optional
        Adapter that drives ``target`` in its own layout (``specaudit.adapters``: torch, hf,
        vllm, flashinfer, an entry point or ``pkg.mod:attr``); overrides a scenario's ``adapter:``.
        A target alias such as ``hf-transformers`` brings its own.
    adapter_options : mapping, optional
        The adapter's options (``--adapter-arg key=value``, ``--device``, ``--dtype``).
    device : str, optional
        Simulate on this torch device (``"cpu"``, ``"cuda"``) and call the verifier with tensors
        there (:mod:`specaudit.engine.device`; a torch adapter's verifier); None: on the host.
    diagnose : bool
        For every scenario that fails a check, rank the zoo mutants by how well their expected
        deviation matches (``specaudit.analysis.diagnose``) and store it in ``info["diagnosis"]``.
    contract : {"probs", "logits"}
        How ``target`` is called: the canonical contract on processed probabilities, or the
        logits contract (raw logits plus sampling parameters, ``specaudit.contract.logits``).
    convention : str, optional
        The engine whose sampler is the reference (``specaudit.chains.processing.CONVENTIONS``:
        hf, vllm, sglang), overriding every scenario's ``convention``.
    timeout : float or None
        Seconds one verifier call may take before it is stopped and its scenario is an ERROR
        (``specaudit.contract.guard.guarded``: main thread of a POSIX process only); None or 0: no limit.
    jobs : int
        Blocks of every scenario (``specaudit.engine.bench``) run in this many forked processes;
        results are identical to ``jobs=1``.
    max_memory : int, optional
        Bytes the simulator's batch may use (p and q plus the verifier's temporaries);
        default ``specaudit.simulate.chain.DEFAULT_MAX_MEMORY`` (2 GiB).
    max_device_memory : int, optional
        Bytes the batch may use on a CUDA device (``device="cuda"``), at most what is free there;
        default ``specaudit.simulate.device.DEVICE_SHARE`` (80%) of its free memory.
    suspect_level : float, optional
        A check with alpha < Holm-adjusted p <= this is SUSPECT and its scenario is re-run on a
        fresh seed with 4x the samples (`rerun_suspects`); default 100 x alpha (at most 0.5);
        ``suspect_level <= alpha`` disables re-runs.
    power : bool
        Add each scenario's detectable TV and its power against every zoo mutant
        (``specaudit.analysis.power``) to ``info["sensitivity"]`` and ``info["power"]``.
    early_stop : bool
        Look at every scenario after 1, 2, 4, ... blocks and stop it once a check has failed
        for sure (``specaudit.stats.sequential``: alpha spending, family-wise alpha holds); p-values
        become sequential p-values. Off by default: the last look keeps only alpha/2.
    certify_tv : float, optional
        EPS, 0 < EPS < 1: keep sampling every scenario until its upper confidence bound on TV
        (``ScenarioResult.tv_bound``, :mod:`specaudit.stats.certificate`) is at most EPS, a check
        fails, or the cap (``samples``, else 4x what a lossless verifier needs) is reached;
        ``RunResult.exit_code()`` is 6 (NOT_CERTIFIED) for a run that passed but did not certify.
    shard : (i, n) or "i/n", optional
        Run only blocks ``b = i mod n`` of every scenario and keep their additive tallies in
        each result's ``info`` for ``specaudit merge`` (no suspect re-runs: the merge decides).
    backend : {"local", "ray"}
        Where blocks run: this machine (``jobs`` processes) or Ray tasks (``specaudit.engine.executors``).
    address : str, optional
        The Ray cluster to join (``ray.init(address=...)``); default: a local instance.
    supervised : bool
        Run the verifier in a supervised child process, as ``specaudit run`` does
        (:mod:`specaudit.engine.supervisor`): an ``os._exit``, a signal, a crash in C code or a
        call that swallows its timeout is that scenario's ERROR, never the end of the calling
        process (a pytest session that a verifier's ``os._exit(0)`` would otherwise end green).
        Where processes cannot be forked, or off the main thread, the run is in-process. A caller
        that has initialised CUDA (or a run on a CUDA device) starts the child by forkserver, which
        imports ``target`` anew: a lambda or a notebook's function is then a UsageError. False:
        in-process always (a verifier whose side effects the caller wants to see).
    """
    settings = RunSettings(
        alpha=alpha, seed=seed, samples=samples, method=method, gate_efficiency=gate_efficiency, contract=contract,
        convention=convention,
        timeout=timeout, max_memory=max_memory, max_device_memory=max_device_memory, jobs=jobs, backend=backend, address=address,
        suspect_level=suspect_level, power=power, diagnose=diagnose, early_stop=early_stop,
        certify_tv=certify_tv, shard=parse_shard(shard),
        adapter=adapter, adapter_options=adapter_options, device=device,
    )
    if supervised:
        return execute_supervised(target, scenarios, settings, progress=progress, on_scenario=on_scenario)
    return execute(target, scenarios, settings, progress=progress, on_scenario=on_scenario)
