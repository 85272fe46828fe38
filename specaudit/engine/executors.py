"""Run scenarios' blocks in parallel, in shards, or on Ray.

Every scenario is cut into fixed-size, independently seeded blocks (:mod:`specaudit.engine.bench`);
:func:`measure_units` schedules the blocks of all scenarios on an executor and merges each
scenario's tallies in block order. What a block measures depends only on its scenario, seed and
index, so the results do not depend on the executor, the number of jobs or the order in which
blocks finish:

- ``jobs=1``: blocks run in this process, one after another;
- ``jobs=N``: blocks run in N forked processes (the verifier reaches them by fork, so it need not
  be picklable); a scenario's blocks are spread over the workers, so one large scenario no
  longer bounds the speed-up;
- ``backend="ray"``: blocks run as Ray tasks (``ray.init(address=...)``, a local instance by
  default); the prepared scenario (with the verifier) is shipped once per scenario with
  cloudpickle, so the verifier must be importable or picklable there.

With early stop, a scenario's blocks are only scheduled up to its next look; the consumer of
:func:`measure_units` answers each :class:`Look`, deciding whether the scenario goes on
(:mod:`specaudit.stats.sequential`). Progress is reported
in the run's one shape, ``progress(scenario, done, total)`` (:data:`Progress`). The settings
(jobs, backend) were validated by :class:`specaudit.engine.settings.RunSettings`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from specaudit.contract import guard
from specaudit.contract.targets import FILE_MODULE_PREFIX
from specaudit.engine.bench import Bench, Progress, Tally, Ticker
from specaudit.engine.device import cuda_initialised
from specaudit.errors import ContractError, UsageError, VerifierCrash, VerifierTimeout
from specaudit.results import ErrorInfo

__all__ = [
    "DIED", "BlockError", "Doubted", "Event", "Finished", "Look", "Outcome", "Progress", "Started", "Unit", "measure_units",
    "run_block", "shard_blocks",
]

#: ``ErrorInfo.kind`` of a scenario whose block worker process died (os._exit, a signal, a C crash).
DIED = "died"

#: What a simulation reports after every batch: ``tick(done, total)`` sequences of the block.
Tick = Callable[[int, int], None]


@dataclass
class Unit:
    """One scenario to measure: its prepared bench, seed, the blocks to run and where to look."""

    bench: Bench
    seed: int
    blocks: list[int]  # the blocks this run measures, ascending (all, or a shard's)
    looks: list[int] = field(default_factory=list)  # how many of ``blocks`` are done at each look; last = all

    def __post_init__(self) -> None:
        if not self.looks or self.looks[-1] != len(self.blocks):
            self.looks = [*(x for x in self.looks if x < len(self.blocks)), len(self.blocks)]

    @property
    def name(self) -> str:
        """Return the scenario's name (what progress reports)."""
        return self.bench.spec.name

    @property
    def planned(self) -> int:
        """Return the sequences this unit's blocks hold."""
        return sum(self.bench.sizes[b] for b in self.blocks)


@dataclass
class Outcome:
    """What measuring a unit produced: the merged tally at its last look, or the error that ended it."""

    tally: Tally
    error: ErrorInfo | None = None
    looks: int = 0  # looks taken
    stopped: bool = False  # stopped at an interim look


@dataclass(frozen=True)
class BlockError:
    """A block the verifier broke (contract breach, crash, hang), and the seconds it ran."""

    info: ErrorInfo
    seconds: float


def run_block(unit: Unit, block: int, tick: Tick | None = None) -> Tally | BlockError:
    """Return the tally of one block, or a BlockError when the verifier broke the contract, crashed or hung."""
    t0 = time.perf_counter()
    try:
        return unit.bench.run(unit.seed, block, tick)
    except (ContractError, VerifierCrash, VerifierTimeout) as exc:
        return BlockError(ErrorInfo.from_exception(exc), time.perf_counter() - t0)


_UNITS: Sequence[Unit] = ()  # inherited by forked workers; never pickled


def _forked(i: int, block: int) -> Tally | BlockError:
    return run_block(_UNITS[i], block)


class _Inline:
    """Run each task at submission, in this process (jobs = 1); only here does ``tick`` follow batches."""

    slots = 1

    def broken(self, exc: BaseException) -> bool:
        """Return True when ``exc`` says a worker died (never here: this process would be gone)."""
        return False

    def submit(self, i: int, unit: Unit, block: int, tick: Tick | None = None) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(run_block(unit, block, tick))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            fut.set_exception(exc)
        return fut

    def close(self) -> None:
        pass


class _Forked:
    """A pool of forked worker processes."""

    def __init__(self, units: Sequence[Unit], jobs: int):
        global _UNITS
        _UNITS = units
        self.slots = 2 * jobs  # keep every worker fed while the parent merges and evaluates
        shared = guard.board()
        if shared is not None:  # under a supervisor: each worker takes a slot of its clock (hard timeout)
            shared.reset()
        self.pool = ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("fork"), initializer=guard.claim)

    def broken(self, exc: BaseException) -> bool:
        """Return True when ``exc`` says a worker died (os._exit, a signal) and the pool is gone."""
        return isinstance(exc, BrokenProcessPool)

    def submit(self, i: int, unit: Unit, block: int, tick: Tick | None = None) -> Future:
        return self.pool.submit(_forked, i, block)

    def close(self) -> None:
        global _UNITS
        self.pool.shutdown(wait=False, cancel_futures=True)  # an interrupt must not wait for running blocks
        _UNITS = ()
        shared = guard.board()
        if shared is not None:  # a worker that died mid-call left its start time: the supervisor must not read it
            shared.reset()


#: Key prefix of the notes a Ray worker leaves in Ray's key-value store before its watchdog ends it.
_NOTE = "specaudit-overdue"


def _ray_block(payload: tuple[Bench, int, float | None, str], block: int) -> Tally | BlockError:
    bench, seed, timeout, key = payload

    def note(message: str, stack: str) -> None:  # the driver reads it when the task's worker is gone
        from ray.experimental import internal_kv  # a Ray worker: Ray is there

        internal_kv._internal_kv_put(f"{key}/{block}", f"{message}\n{stack}", overwrite=True)

    with guard.watchdog(timeout, note):  # no supervisor sees a Ray worker: past the timeout it ends itself
        return run_block(Unit(bench, seed, [block]), block)


class _Ray:
    """Ray tasks on an existing cluster (``address``) or a local instance started here.

    A task is never retried: a verifier that ends its worker (``os._exit``, a signal, a crash in
    C code, or a call past ``--timeout`` that the worker's watchdog ended) is that scenario's
    ERROR, and Ray starts a fresh worker for the next task. A verifier loaded from a file path
    travels by value (its module is not importable on the workers).
    """

    def __init__(self, units: Sequence[Unit], jobs: int, address: str | None, timeout: float | None):
        try:
            import ray
        except ImportError:
            raise UsageError("--backend ray needs Ray: pip install -e '.[ray]' in specaudit's checkout") from None
        self.ray = ray
        if not ray.is_initialized():  # started once per process and kept for its later scenarios (Ray's atexit ends it)
            kwargs: dict[str, Any] = {"address": address, "log_to_driver": False, "logging_level": logging.WARNING}
            if address is None:  # a local instance: no dashboard, as many CPUs as --jobs asks for (at least)
                kwargs.update(include_dashboard=False, num_cpus=max(jobs, 1))
            try:
                ray.init(**kwargs)
            except Exception as exc:  # noqa: BLE001 - whatever Ray raises when it cannot start or connect
                what = "start a local Ray instance" if address is None else f"reach the Ray cluster at {address}"
                raise UsageError(f"--backend ray: could not {what}: {type(exc).__name__}: {exc}") from None
        for name, module in list(sys.modules.items()):
            if name.startswith(FILE_MODULE_PREFIX):
                ray.cloudpickle.register_pickle_by_value(module)
        cpus = int(ray.available_resources().get("CPU", 1))
        self.slots = 2 * max(jobs, cpus)
        self.task = ray.remote(max_retries=0)(_ray_block)
        self.timeout = timeout
        self.key = f"{_NOTE}/{os.getpid()}/{time.monotonic_ns()}"
        self.payloads: dict[int, Any] = {}
        self.units = units

    def broken(self, exc: BaseException) -> bool:
        """Return True when ``exc`` says the worker running a task died."""
        return isinstance(exc, self.ray.exceptions.RayError) and not isinstance(exc, self.ray.exceptions.RayTaskError)

    def died(self, i: int, block: int) -> ErrorInfo:
        """Return the ERROR of unit ``i`` whose task for ``block`` lost its worker."""
        from ray.experimental import internal_kv

        with contextlib.suppress(Exception):
            note = internal_kv._internal_kv_get(f"{self.key}/{i}/{block}")
            if note:
                message, _, stack = note.decode(errors="replace").partition("\n")
                return ErrorInfo("timeout", message.replace("its process", "its Ray worker process"), traceback=stack)
        return ErrorInfo(DIED, f"the Ray worker process running block {block} of this scenario died: the verifier "
                               f"ended it (os._exit, a signal, a crash in C code)")

    def submit(self, i: int, unit: Unit, block: int, tick: Tick | None = None) -> Future:
        if i not in self.payloads:  # the prepared scenario travels once, not once per block
            self.payloads[i] = self.ray.put((unit.bench, unit.seed, self.timeout, f"{self.key}/{i}"))
        return self.task.remote(self.payloads[i], block).future()

    def close(self) -> None:
        pass  # the instance stays up for the next scenario of this process (the supervisor runs them one by one)


def _died(jobs: int, names: Sequence[str], name: str) -> ErrorInfo:
    """Return the ERROR of scenario ``name`` when a --jobs worker died and ``names`` are the suspects (:func:`measure_units`)."""
    others = [m for m in names if m != name]
    also = f" (blocks of {', '.join(others)} ran in the same pool of workers)" if others else ""
    return ErrorInfo(DIED, f"a --jobs {jobs} worker process died while running this scenario's blocks{also}: "
                           f"the verifier ended it (os._exit, a signal, a crash in C code)")


def _executor(units: Sequence[Unit], jobs: int, backend: str, address: str | None,
              timeout: float | None) -> _Inline | _Forked | _Ray:
    if backend == "ray":
        return _Ray(units, jobs, address, timeout)
    if jobs == 1 or "fork" not in mp.get_all_start_methods() or sum(len(u.blocks) for u in units) <= 1:
        return _Inline()
    if cuda_initialised():  # the workers are forks of this process, and its CUDA context does not survive a fork
        raise UsageError(f"--jobs {jobs}: the block workers are forks of the process that runs the verifier, and that "
                         "process has initialised CUDA (a CUDA context does not survive a fork); use --jobs 1 (one "
                         "process per device), or --backend ray (its workers are processes of their own)")
    return _Forked(units, jobs)


@dataclass(frozen=True)
class Started:
    """Unit (or task) ``index`` is about to make its first verifier call."""

    index: int


@dataclass
class Look:
    """A unit's look: the tally of its blocks so far (block order); set ``stop`` to end the unit at an interim look."""

    index: int
    tally: Tally
    final: bool  # the unit's last look
    stop: bool = False  # the consumer's answer, read when the generator resumes


@dataclass(frozen=True)
class Doubted:
    """A worker died while blocks of all of ``indices`` were in flight; each is charged with the death next."""

    indices: list[int]


@dataclass(frozen=True)
class Finished:
    """Unit ``index`` is decided: its outcome (merged tally, or the error that ended it)."""

    index: int
    outcome: Outcome


#: What :func:`measure_units` yields, in the order it happens.
Event = Started | Look | Doubted | Finished


def measure_units(
    units: Sequence[Unit],
    *,
    jobs: int = 1,
    backend: str = "local",
    address: str | None = None,
    timeout: float | None = None,
    progress: Progress | None = None,
) -> Generator[Event, None, None]:
    """Measure every unit's blocks; yield what happens, as it happens, to the one consumer that drives the run.

    Data flows up by what is yielded, never by a call back into the caller: :class:`Started` once
    per unit, before its first block is submitted (or before it finishes, holding no block);
    :class:`Look` at each of a unit's looks, in this process, with the tally of its blocks so far
    (merged in block order): the consumer sets ``stop`` to end the unit at an interim look;
    :class:`Doubted` when a worker died with blocks of several units in flight, before they are
    charged with it; :class:`Finished` as each unit is decided. A unit whose block errs stops
    scheduling blocks; its error is its outcome. ``progress(scenario, sequences_done,
    sequences_planned)`` (the reporter's observer) follows finished blocks (jobs = 1: finished
    batches). ``timeout`` (``--timeout``) bounds a verifier call on Ray workers, which no
    supervisor watches. Close the generator (``contextlib.closing``) when leaving it early: its
    pool of workers ends then.
    """
    n = len(units)
    merged: list[Tally] = [u.bench.empty() for u in units]
    received: list[dict[int, Tally]] = [{} for _ in units]
    upto = [0] * n  # blocks merged (a position in unit.blocks)
    sent = [0] * n  # blocks submitted
    look_at = [0] * n  # index of the next look
    done = [False] * n
    begun = [False] * n

    def begin(i: int) -> Iterator[Event]:
        if not begun[i]:
            begun[i] = True
            yield Started(i)

    for i, u in enumerate(units):  # a unit with no blocks (a shard that holds none of them)
        if not u.blocks:
            done[i] = True

    def tick(i: int) -> Tick | None:  # a block's batches, in this process only (jobs = 1)
        if progress is None:
            return None
        u = units[i]
        return Ticker(progress, u.name, merged[i].sequences, u.planned)  # jobs = 1: the block runs at submission

    ex = _executor(units, jobs, backend, address, timeout)
    pending: dict[Future, tuple[int, int]] = {}
    ending: dict[int, Outcome] = {}  # decided units whose blocks still run (``decided``)
    ran: set[int] = set()  # units whose blocks this pool's workers ran: a thread of theirs may end a worker later

    def lost(i: int) -> Iterator[Event]:
        """A worker died (os._exit, a signal): unit ``i``, every unit with blocks in flight and every
        undecided unit whose blocks this pool ran (a thread a block left behind ends a worker
        between blocks, or in another unit's block) may be the one.

        Each is an ERROR, never a pass; the pool is replaced for the units that go on. With
        several suspects, a :class:`Doubted` names them first (a supervised child ends there, and its
        supervisor measures them again one at a time).
        """
        nonlocal ex
        suspects = {i, *ran, *(j for j, _ in pending.values())}
        hit = sorted(suspects - {j for j in range(n) if done[j] and j not in ending})
        pending.clear()
        ran.clear()
        ex.close()
        if len(hit) > 1:
            yield Doubted(hit)
        ex = _executor(units, jobs, backend, address, timeout)
        for j in hit:
            done[j] = True
            ending.pop(j, None)
            yield Finished(j, Outcome(merged[j], _died(jobs, [units[m].name for m in hit], units[j].name), look_at[j]))

    def decided(i: int, outcome: Outcome) -> Iterator[Event]:
        """Unit ``i`` is decided (an error, its last look, a stop): yield it, once the blocks it has in flight end.

        Those blocks are the verifier's calls for this unit: a fault in one of them (a crash, a
        hang, a death) is still charged to it, not to a unit that runs after it.
        """
        done[i] = True
        if any(j == i for j, _ in pending.values()):
            ending[i] = outcome
        else:
            yield Finished(i, outcome)
    try:
        for i in range(n):
            if done[i]:
                yield from begin(i)
                yield Finished(i, Outcome(merged[i]))
        while True:
            # fill the free slots, earliest scenario first, each only up to its next look
            try:
                for i, u in enumerate(units):
                    while not done[i] and len(pending) < ex.slots and sent[i] < u.looks[look_at[i]]:
                        yield from begin(i)
                        pos = sent[i]
                        sent[i] += 1
                        fut = ex.submit(i, u, u.blocks[pos], tick(i))
                        pending[fut] = (i, pos)
                        ran.add(i)
                    if len(pending) >= ex.slots:
                        break
            except Exception as exc:  # a worker died between two blocks (a thread of the verifier's ended it)
                if not ex.broken(exc):
                    raise
                yield from lost(i)
                continue
            if not pending:
                break
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in sorted(finished, key=lambda f: pending[f]):
                i, pos = pending.pop(fut)
                if done[i] and i not in ending:
                    continue  # not reached (a decided unit with blocks in flight waits in ``ending``): never yield twice
                try:
                    result = fut.result()
                except Exception as exc:
                    if not ex.broken(exc):
                        raise
                    if isinstance(ex, _Ray):  # Ray: the dead worker held this task alone, and Ray replaces it
                        ending.pop(i, None)
                        yield from decided(i, Outcome(merged[i], ex.died(i, units[i].blocks[pos]), look_at[i]))
                        continue
                    yield from lost(i)
                    break
                if i in ending:  # a block left running when its unit was decided: only a fault in it counts
                    if isinstance(result, BlockError) and ending[i].error is None:
                        ending[i] = dataclasses.replace(ending[i], error=result.info)
                    if not any(j == i for j, _ in pending.values()):
                        yield Finished(i, ending.pop(i))
                    continue
                if isinstance(result, BlockError):
                    merged[i].seconds += result.seconds
                    yield from decided(i, Outcome(merged[i], result.info, look_at[i]))
                    continue
                received[i][pos] = result
                while upto[i] in received[i]:
                    merged[i].merge(received[i].pop(upto[i]))
                    upto[i] += 1
                if progress is not None and not isinstance(ex, _Inline):
                    progress(units[i].name, merged[i].sequences, units[i].planned)
                u = units[i]
                if upto[i] == u.looks[look_at[i]]:
                    final = look_at[i] == len(u.looks) - 1
                    asked = Look(i, merged[i], final)
                    yield asked
                    stop = asked.stop
                    look_at[i] += 1
                    if final or stop:
                        yield from decided(i, Outcome(merged[i], None, look_at[i], stopped=not final))
    finally:
        ex.close()


def shard_blocks(blocks: int, shard: tuple[int, int] | None) -> list[int]:
    """Return the blocks a shard ``(i, n)`` runs: ``b = i mod n`` (all for None)."""
    if shard is None:
        return list(range(blocks))
    i, n = shard
    return list(range(i, blocks, n))
