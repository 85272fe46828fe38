"""Supervised runs: the verifier runs in a child process, so nothing it does can end, hang or mislead the run.

``specaudit run`` measures through :func:`execute_supervised`: this process (the supervisor)
resolves the scenarios, then forks a child that loads the target, binds it and measures the
scenarios one after another, sending each finished ScenarioResult back through a pipe (no message
per verifier call: the per-call overhead is that of an in-process run). Whatever the verifier does
to its process becomes an ERROR of the scenario it was running, and the run goes on with the
remaining scenarios in a fresh child:

- ``os._exit(N)`` or ``exit()`` from C: "the verifier ended the process with os._exit(N)";
- a signal (SIGSEGV, SIGABRT from ``abort()``, SIGKILL from the OOM killer): "killed by signal 11
  (SIGSEGV)", with the child's faulthandler traceback;
- a call that outlives ``--timeout`` because the verifier swallows the timeout (``except
  BaseException: continue``): every timed call writes its start time in shared memory
  (:class:`specaudit.contract.guard.Board`); past ``timeout + guard.GRACE`` the supervisor dumps the
  stuck process's stack (faulthandler on SIGUSR1) and kills the child's process group;
- ``--jobs N``: a block worker that dies makes its scenario an ERROR (:mod:`specaudit.engine.executors`);
  the child then measures that scenario again with ``--jobs 1``, so the message says what the
  verifier did; a death it does not reproduce stays an ERROR.

What Python raises (``sys.exit``, KeyboardInterrupt, GeneratorExit) is caught earlier, by
:func:`specaudit.contract.guard.guarded`. The child sits in its own process group (a Ctrl-C on
the terminal reaches only the supervisor) and writes its stdout to stderr (a verifier's prints
never mix with the report). SIGINT and SIGTERM on the supervisor stop the run: the child's group
is killed and the run is interrupted with every scenario finished so far. The re-runs of SUSPECT
scenarios run supervised too; Holm, power and diagnosis run here. POSIX only (fork); elsewhere
:func:`execute_supervised` runs in this process (:func:`specaudit.engine.run.execute`).

A CUDA context does not survive a fork (issue 33): where this process has initialised CUDA, or
the run is on a CUDA device, the child starts by forkserver (a server that has imported specaudit
forks it; spawn where there is none) and imports the target anew, from its import path or file,
or by reference for a callable (:func:`start_method`; ``$SPECAUDIT_START_METHOD`` picks one for
every run). A callable a fresh process cannot import (a lambda, a closure, a notebook's function)
is then a UsageError naming the way out. Every guarantee above holds with either start method.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import faulthandler
import importlib
import itertools
import multiprocessing as mp
import os
import pickle
import re
import signal
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Generator, Iterator, Sequence
from multiprocessing import forkserver, reduction, resource_tracker, spawn
from pathlib import Path
from typing import IO, Any

from specaudit import adapters
from specaudit.checks.statistical import Measured
from specaudit.contract import guard
from specaudit.engine import frames, stops
from specaudit.engine.device import cuda_initialised, device_run
from specaudit.engine.executors import DIED, Doubted, Progress, Started
from specaudit.engine.run import bind_target, environment, execute, finish
from specaudit.engine.scenario import Decide, Judge, Judged, Result, base_result, results, run_scenarios
from specaudit.engine.settings import RunSettings
from specaudit.engine.tasks import ScenarioLike, Task, resolve_scenarios, scenario_seed
from specaudit.errors import ExitCode, SpecauditError, TargetLoadError, UsageError
from specaudit.results import ErrorInfo, RunResult, ScenarioResult

__all__ = ["START_METHODS", "START_METHOD_VARIABLE", "execute_supervised", "start_method", "supported"]
#: How often the supervisor looks at the child and the call clock, seconds.
_POLL = 0.05
#: The most of a faulthandler dump kept in an error's traceback, characters.
_DUMP_CHARS = 6000
#: The child sends a scenario's progress at most this often, seconds (and always its last batch): a frame
#: per batch cost the child some 0.03 s of a one-second run, for a bar that redraws ten times a second.
PROGRESS_INTERVAL = 0.1
#: What this process needs once the child has measured: the chi-square tails of judging a look (scipy.special,
#: ~0.3 s: its array-API shim imports numpy.f2py) and, for `finish`, the power figures and diagnosis. A thread
#: imports them while the first child measures, on a core the child leaves idle (issue 20); the child imports none
#: of them. scipy.optimize (a power inverted anew, ~0.3 s) is left to the rare run that needs it: the detectable
#: TV is cached (specaudit.analysis.mutant_laws).
_JUDGING = ("scipy.special",)
_FINISHING = ("specaudit.analysis.power", "specaudit.analysis.diagnose")


#: The warm-import thread's niceness. Not 19: under a load of other processes (a CI box running tests in parallel)
#: a thread at 19 gets ~1.5% of a core, and a run stopped early, which must wait for its imports, waited over 90 s
#: after writing its JSON; at 10 it gets ~10%, and :meth:`_Supervisor.settle` restores 0 where it may.
_WARM_NICENESS = 10


def _prepare_quietly(names: Sequence[str], tid: list[int]) -> None:
    """Import ``names`` ahead of need, and ask the platform its name for the results (`environment`: ``uname -p``,
    a subprocess, ~7 ms the end of a run then does not wait for); a failure is left to the step that needs it.

    At a lower priority (Linux: niceness is per thread, :data:`_WARM_NICENESS`): on a busy machine the
    child's calls go first, so the verifier's measured time is hardly stretched by it. ``tid`` gets the
    thread's id, for :meth:`_Supervisor.settle` to restore its priority once the run waits for it.
    """
    tid.append(threading.get_native_id())
    # a stop is the main thread's: delivered here while the main thread holds it back (stops.held), the main
    # thread's handler ran inside the held section anyway (a child forked and never ended, the exit hung on it)
    signal.pthread_sigmask(signal.SIG_BLOCK, stops.STOPS)
    if sys.platform.startswith("linux"):  # elsewhere a thread id is no process id: leave the priority alone
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, tid[0], _WARM_NICENESS)
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the same import raises again, where it is needed
            continue
    with contextlib.suppress(OSError):  # the platform module remembers its answer
        environment()


def supported() -> bool:
    """Return True where runs can be supervised (fork and process groups: POSIX)."""
    return "fork" in mp.get_all_start_methods() and hasattr(os, "setpgid")


#: How a supervised child can be started: a fork of this process (cheapest; the default), or a fresh interpreter
#: (forkserver: forked from a server that has imported specaudit; spawn: started from nothing) that imports the
#: target anew. A CUDA context does not survive a fork (issue 33), so a process that has initialised CUDA, or a run
#: on a CUDA device, starts its child by forkserver.
START_METHODS = ("fork", "forkserver", "spawn")
#: The environment variable that picks the start method for every supervised run (one of START_METHODS).
START_METHOD_VARIABLE = "SPECAUDIT_START_METHOD"
#: What the forkserver imports once, so that each child it forks starts with specaudit loaded.
_PRELOAD = ["specaudit.engine.supervisor"]


def start_method(settings: RunSettings) -> tuple[str, str]:
    """Return how this run starts its supervised children, and why (``(method, reason)``).

    ``$SPECAUDIT_START_METHOD`` when set; else forkserver (spawn where there is none) when this
    process has initialised CUDA or the run asks for a CUDA device, else fork. Raises UsageError
    for a value of the variable that is no start method of this platform.
    """
    forced = os.environ.get(START_METHOD_VARIABLE, "")
    if forced:
        allowed = [m for m in START_METHODS if m in mp.get_all_start_methods()]
        if forced not in allowed:
            raise UsageError(f"{START_METHOD_VARIABLE}={forced!r}; allowed: {', '.join(map(repr, allowed))} "
                             "(how the supervised child is started)")
        return forced, f"{START_METHOD_VARIABLE}={forced}"
    if cuda_initialised():
        reason = "this process has initialised CUDA, and a CUDA context does not survive a fork"
    elif device_run(settings):
        reason = "the run is on a CUDA device, and a CUDA context does not survive a fork"
    else:
        return "fork", "the default"
    return ("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"), reason


def _not_reimportable(target: str | Callable[..., Any]) -> str | None:
    """Return why a fresh process could not get ``target`` (a callable) by importing it, or None when it can.

    A string is loaded in the child (module path or file); a function or class travels by
    reference (module and qualified name); anything else (an instance, a partial) by value.
    """
    if isinstance(target, str):
        return None
    module = getattr(target, "__module__", None)
    main = sys.modules.get("__main__")
    if module == "__main__" and not getattr(main, "__file__", None):
        return "it is defined in __main__ of an interactive session or a notebook, which a fresh process cannot import"
    try:
        pickle.dumps(target, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - pickle raises PicklingError, AttributeError, TypeError...
        return f"it cannot be pickled ({type(exc).__name__}: {exc})"[:300]
    return None


class _Inherited:
    """A file descriptor for the child: a fork inherits the number as is; spawn and forkserver pass it on."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        # only while multiprocessing starts the child (reduction.DupFd: the fd goes with it)
        return _arrived, (reduction.DupFd(self.fd),)


def _arrived(dup: Any) -> _Inherited:
    """Return the descriptor a spawned or forkserver child received."""
    return _Inherited(dup.detach())


def _from_main(target: str | Callable[..., Any]) -> bool:
    """Return True when ``target`` (or its class) is defined in the ``__main__`` module (a script's function)."""
    return not isinstance(target, str) and "__main__" in (getattr(target, "__module__", None), type(target).__module__)


@contextlib.contextmanager
def _main_left_out() -> Iterator[None]:
    """Start a spawn or forkserver child without re-running the ``__main__`` module in it.

    multiprocessing runs the parent's main script (or ``-m`` module) again in every child it
    starts afresh; a script that calls ``specaudit.run`` outside ``if __name__ == "__main__"``
    would call it again there, and any script's imports would be paid again. The child needs it
    only for a target defined there (:func:`_from_main`); for the rest it is left out.
    """
    prepared = spawn.get_preparation_data

    def without_main(name: str) -> dict[str, Any]:
        data = prepared(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    spawn.get_preparation_data = without_main  # read by popen_spawn_posix and popen_forkserver while they start it
    try:
        yield
    finally:
        spawn.get_preparation_data = prepared


def _helper_pids() -> tuple[int | None, int | None]:
    """Return the pids of this process's forkserver and resource tracker (None: not running)."""
    return (getattr(forkserver._forkserver, "_forkserver_pid", None),
            getattr(resource_tracker._resource_tracker, "_pid", None))


def _no_progress(name: str, done: int, total: int) -> None:
    """Stand in, in a child started afresh, for the supervisor's progress callback (the child only asks if it has one)."""


#: The largest message a child sends, bytes (a result, or a look's Measured with its chains and sparse counts).
_MAX_MESSAGE = 1 << 30


#: How long the child waits for the answer to a look, seconds: judging takes seconds at most, and an answer that
#: never comes (the verifier read it, or took over the pipe that carried the look) must not hang the run.
_ANSWER_WAIT = 600.0


def _await_answer(answers: frames.Reader, answered: Any) -> Any:
    """In the child: return the answer to the look just sent; raise _CutOff when it cannot come.

    ``answered`` counts the answers the supervisor wrote whole (shared memory): one it wrote that
    has not come within ``guard.GRACE`` was read out of the pipe by the verifier; bytes that are
    no frame of the supervisor's were written into it. Without an answer the wait ends at
    ``_ANSWER_WAIT``.
    """
    start = time.monotonic()
    written_at: float | None = None
    while True:
        try:
            judged = answers.next(0.2)
        except (frames.Corrupt, OSError) as exc:  # bytes of the verifier's, or a pipe it closed or replaced
            if _raised_by_the_verifier(exc):  # its signal handler raised an OSError (TimeoutError) during the wait
                raise
            raise _CutOff(f"the answer to a look could not be read ({type(exc).__name__}: {exc})") from None
        if judged is not None:
            return judged
        now = time.monotonic()
        if answered.value > answers.received:
            written_at = now if written_at is None else written_at
            if now - max(written_at, answers.last_read) > guard.GRACE:
                raise _CutOff("the supervisor answered a look and the answer never came (read out of the pipe)")
        if answers.closed:
            raise _CutOff("the pipe of the answers was closed")
        if now - start > _ANSWER_WAIT:
            raise _CutOff(f"no answer to a look within {_ANSWER_WAIT:g} s")


def _idle_limit(timeout: float) -> float:
    """Return how long the child may go without a message or a verifier call, seconds (``--timeout`` is set)."""
    return max(300.0, 2 * timeout)


#: How long the supervisor waits for room in the answers' pipe, seconds (an answer is a few KB; the child reads it).
_ANSWER_ROOM = 30.0
#: The child's exit code when its pipes to the supervisor are cut (the verifier closed or replaced them).
_CUT_OFF = 86


class _CutOff(BaseException):
    """The child cannot hear the supervisor: the verifier closed, replaced or read the pipe of its answers."""


class _Internal(Exception):
    """An internal error of the child (a specaudit bug), re-raised here with the child's traceback."""


@dataclasses.dataclass
class _Job:
    """One scenario for a child to measure: its index in the run, and a seed and samples for a re-run."""

    index: int
    seed: int | None = None
    samples: int | None = None


def _raised_by_the_verifier(exc: BaseException) -> bool:
    """Return True when ``exc``, escaping the child's harness, is the verifier's doing rather than specaudit's.

    KeyboardInterrupt and SystemExit: the child is in a process group of its own (no terminal's
    Ctrl-C reaches it) and specaudit raises neither there. Anything else: its innermost frame is
    in a file outside specaudit, the standard library and the installed packages (a signal handler
    of the verifier's module fired while the harness ran).
    """
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return True
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    where = os.path.realpath(tb.tb_frame.f_code.co_filename)
    paths = sysconfig.get_paths()
    ours = [str(Path(adapters.__file__ or "").resolve().parents[1]),  # the specaudit package
            *(os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib"))]
    return not where.startswith("<") and not any(where.startswith(root + os.sep) for root in ours)


def _unread(why: str) -> str:
    """Return the ERROR message of a child whose pipe holds what is no message of its own (``why``)."""
    return f"the supervisor could not read the child's messages: the verifier wrote into the pipe between them ({why[:200]})"


def _unheard(why: str) -> str:
    """Return the ERROR message of a child that could not hear the supervisor's answers (``why``)."""
    return f"the child could not hear the supervisor ({why[:200]}): the verifier closed, replaced or read the pipe of its answers"


def _in_group(pid: int, group: int) -> bool:
    """Return True when ``pid`` is a process of process group ``group`` (a child's), and not this one."""
    if pid <= 1 or pid == os.getpid():
        return False
    try:
        return os.getpgid(pid) == group
    except OSError:  # gone, or not ours to ask about
        return False


def _describe(exitcode: int | None) -> str:
    """Return what ended a child, from its exit code (negative: the signal)."""
    if exitcode is None:
        return "did not end"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-exitcode} ({name})"
    return f"ended the process with os._exit({exitcode})"


def _running(pid: int) -> bool:
    """Return True when process ``pid`` exists and is not a zombie (a dead worker's start time is not a hang)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc: trust kill(pid, 0)


def _dump(errfile: IO[bytes]) -> str:
    """Return what faulthandler wrote in the child (harness frames folded, `fold_harness`), then empty the file."""
    errfile.flush()
    errfile.seek(0)
    text = fold_harness(errfile.read().decode("utf-8", "replace").strip())
    errfile.seek(0)
    errfile.truncate()
    return text if len(text) <= _DUMP_CHARS else text[:_DUMP_CHARS] + "\n..."


#: The installed package's folder: frames under it are specaudit's, the rest the user's (or libraries').
_PACKAGE = str(Path(__file__).resolve().parents[1])
_FRAME = re.compile(r'^\s+File "([^"]+)", line \d+')


def fold_harness(dump: str) -> str:
    """Fold the specaudit frames that call the verifier into one line, in each thread of a faulthandler dump.

    faulthandler lists frames most recent first: the verifier's (and its libraries') frames, then
    the harness that called it (guard, simulator, engine, supervisor). Once a frame outside specaudit
    has been seen, the specaudit frames after it (outer calls) become ``... N frames of specaudit's
    harness``; a stack with no frame outside specaudit (a hang in specaudit itself) stays whole.
    """
    out: list[str] = []
    folded = 0
    seen_user = False
    for line in dump.splitlines():
        frame = _FRAME.match(line)
        if frame is None:  # a header ("Fatal Python error", "Current thread ...") starts a new stack
            if folded:
                out.append(f"  ... {folded} frames of specaudit's harness")
            folded, seen_user = 0, False
            out.append(line)
            continue
        ours = str(Path(frame.group(1)).resolve()).startswith(_PACKAGE + "/")
        if ours and seen_user:
            folded += 1
            continue
        seen_user = seen_user or not ours
        out.append(line)
    if folded:
        out.append(f"  ... {folded} frames of specaudit's harness")
    return "\n".join(out)


class _Supervisor:
    """Start, watch and replace the child processes of one run."""

    def __init__(self, target: str | Callable[..., Any], loaded: list[Any], settings: RunSettings,
                 progress: Progress | None):
        self.target = target
        self.loaded = loaded
        self.settings = settings
        self.progress = progress
        self.stop_level = settings.stop_level(len(loaded))
        self.method, why = start_method(settings)
        self.context: Any = mp.get_context(self.method)
        if self.method != "fork":
            unfit = _not_reimportable(target)
            if unfit is not None:
                raise UsageError(f"the target {target!r} cannot be re-imported in the supervised child: {unfit}. The "
                                 f"child starts by {self.method} ({why}); give the target as an import path "
                                 "('package.module:verify' or 'file.py:verify'), or run it in this process with "
                                 "supervised=False")
            if self.method == "forkserver":
                self.context.set_forkserver_preload(_PRELOAD)
        # the helpers multiprocessing starts for spawn and forkserver (the forkserver, the resource tracker) are
        # stopped when the run closes, if it started them: a run leaves no process behind
        self._helpers = (self.method != "fork" and _helper_pids() == (None, None))
        self.board = guard.Board(1 + settings.jobs)
        self.errfile = tempfile.TemporaryFile()  # no name on disk: nothing is left behind
        self.label: str | None = None
        self.adapter: str | None = None
        self._killed: tuple[str, str] | None = None  # (error kind, message): why the last child was killed
        self._dead_since: dict[int, float] = {}  # worker slots whose process was seen dead mid-call, and when
        self._late_slot = 0
        self._born = 0.0  # when the current child was started (time.monotonic)
        self._blamed: list[int] = []  # scenarios of the calls a child's end is charged to (the board's tags)
        self._alone = False  # measure one scenario at a time (after a death two scenarios in flight could have caused)
        self._exitcode: int | None = None  # how the last child ended
        self._loading_since: float | None = None  # when the child started loading the target (None: bound)
        self._heard = time.monotonic()  # when the child's last message came (or the supervisor last answered it)
        self._sent: Any = None  # the frames the current child wrote whole (shared memory)
        self._warming: threading.Thread | None = None  # imports _JUDGING (+ _FINISHING) while the first child measures
        self._warming_tid: list[int] = []  # that thread's native id, once it runs

    def close(self) -> None:
        """Release the faulthandler file, and stop the forkserver this run started."""
        self.settle()
        self.errfile.close()
        if self._helpers:
            helpers: list[Any] = [forkserver._forkserver, resource_tracker._resource_tracker]  # the server holds the tracker's fd
            for helper in helpers:
                with contextlib.suppress(Exception):  # a private method of multiprocessing's (its own tests stop them so)
                    helper._stop()

    def __getstate__(self) -> dict[str, Any]:
        """Return what a child started by spawn or forkserver gets of this object (what ``_child`` reads)."""
        state = dict(self.__dict__)
        state["errfile"] = _Inherited(self.errfile.fileno())
        state["progress"] = None if self.progress is None else _no_progress
        state["_warming"] = state["_sent"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Take the state of :meth:`__getstate__` in the child (the faulthandler file as the child's descriptor)."""
        self.__dict__.update(state)
        self.errfile = os.fdopen(state["errfile"].fd, "r+b")

    def _warm(self) -> None:
        """Start importing what judging and finishing need (power and diagnosis with power figures), once, in a thread."""
        if self._warming is None:
            names = _JUDGING + (_FINISHING if self.settings.power else ())
            self._warming = threading.Thread(target=_prepare_quietly, args=(names, self._warming_tid), daemon=True,
                                             name="specaudit-warm-imports")
            with stops.held():  # started whole (a stop inside start() left a thread settle() could not join), stops blocked
                self._warming.start()

    def settle(self) -> None:
        """Wait for the import thread: a fork while it holds an import lock would leave the child stuck on it.

        This thread waits on it now, so its priority goes back to this thread's where the system allows
        (privileged, or a ``RLIMIT_NICE`` that permits it); elsewhere it keeps its lower one.
        """
        if self._warming is not None:
            if self._warming.is_alive() and self._warming_tid and sys.platform.startswith("linux"):
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, self._warming_tid[0], os.getpriority(os.PRIO_PROCESS, 0))
            self._warming.join()

    # --- the child ---------------------------------------------------------------------------

    def _started(self, out: _Inherited, key: bytes, sent: Any, hear: _Inherited, told: bytes, answered: Any,
                 theirs: tuple[int, ...], jobs: list[_Job]) -> None:
        """In the child, however it was started: frame its two pipes and run :meth:`_child`."""
        self._child(frames.Writer(out.fd, key, sent), frames.Reader(hear.fd, told, _MAX_MESSAGE), answered, theirs, jobs)

    def _child(self, out: frames.Writer, answers: frames.Reader, answered: Any, theirs: tuple[int, ...],
               jobs: list[_Job]) -> None:
        """Load and bind the target, measure ``jobs`` and send each result as a frame through ``out``; never returns.

        ``theirs`` are the supervisor's ends of the two pipes (the results' read end, the answers'
        write end), which a forked child inherits: closed here first, so the verifier can neither
        write into the answers nor read the results (a child started afresh never had them).
        """
        me = os.getpid()
        for fd in theirs:
            os.close(fd)

        def send(message: tuple) -> None:
            if os.getpid() != me:  # a copy the verifier forked must not speak for the run
                os._exit(0)
            try:
                out.write(message)
            except OSError as exc:  # the verifier closed or replaced the pipe: the supervisor says so from the exit code
                if exc.errno is None:  # raised, not failed: a TimeoutError of the verifier's signal handler, say
                    raise
                os._exit(_CUT_OFF)

        calls = itertools.count()

        def measured(tasks: list[Task], settings: RunSettings,
                     progress: Progress | None) -> Generator[Started | Doubted | Result, None, None]:
            """Yield what one run_scenarios call of ``tasks`` yields, each of its looks decided by the supervisor."""
            call = next(calls)  # the supervisor's judge keys its units by (call, unit)
            with contextlib.closing(run_scenarios(tasks, settings, stop_level=self.stop_level,
                                                  progress=progress)) as events:
                for event in events:
                    if not isinstance(event, Decide):
                        yield event
                        continue
                    send(("look", (call, event.unit), event.measured, event.looks, event.final))
                    judged = _await_answer(answers, answered)
                    if not isinstance(judged, Judged):  # the supervisor never sends anything else
                        raise _CutOff(f"the answer to a look was a {type(judged).__name__}")
                    event.judged = judged

        code = 0
        try:
            os.setpgid(0, 0)  # its own group: a terminal Ctrl-C reaches only the supervisor; killpg gets every worker
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stops.STOPS)  # forked with them held (`stops.held`)
            os.dup2(2, 1)  # the verifier's prints go to stderr, never into the report on stdout
            # An enable inherited from the parent (pytest's, say) would keep whatever crash handlers were
            # installed over it since (Ray's driver installs its own): start from the default handlers.
            faulthandler.disable()
            for fatal in (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT):
                signal.signal(fatal, signal.SIG_DFL)
            faulthandler.enable(file=self.errfile, all_threads=False)
            faulthandler.register(signal.SIGUSR1, file=self.errfile, all_threads=False)
            guard.watch(self.board, 0)
            torch = sys.modules.get("torch")
            if torch is not None and self.method == "fork":  # torch's intra-op thread pool does not survive fork: run its ops inline here
                torch.set_num_threads(1)
            try:
                label, binding = bind_target(self.target, self.loaded, self.settings)
            except SpecauditError as exc:
                send(("error", type(exc).__name__, str(exc), int(exc.exit_code)))
                return
            except BaseException as exc:  # noqa: BLE001 - loading user code may raise anything
                send(("error", "TargetLoadError", f"loading {self.target!r} {guard.describe_exit(exc)[13:]}",
                      int(TargetLoadError.exit_code)))
                return
            send(("bound", label, None if binding.main_choice is None else binding.main_choice.label()))

            sent: dict[str, float] = {}  # when each scenario's progress last went out

            def tick(name: str, done: int, total: int) -> None:
                now = time.monotonic()
                if done >= total or now - sent.get(name, -PROGRESS_INTERVAL) >= PROGRESS_INTERVAL:
                    sent[name] = now
                    send(("progress", name, done, total))

            self._measure(jobs, binding, tick if self.progress is not None else None, measured, send)
            send(("done",))
        except _CutOff as exc:  # the verifier closed, replaced or read the answers' pipe
            code = _CUT_OFF
            with contextlib.suppress(BaseException):
                send(("cut-off", str(exc)))
        except SpecauditError as exc:  # the run cannot go on as asked (Ray cannot start, say): the user's to fix
            with contextlib.suppress(BaseException):
                send(("error", type(exc).__name__, str(exc), int(exc.exit_code)))
        except BaseException as exc:  # noqa: BLE001 - a specaudit bug (internal), unless the verifier's code raised it
            if _raised_by_the_verifier(exc):  # its signal handler, outside a call: the scenario's ERROR
                with contextlib.suppress(BaseException):
                    send(("error", type(exc).__name__, f"{guard.describe_exit(exc)} outside a verifier call "
                          "(from a signal handler or a thread of its own)", int(ExitCode.CHECKS_FAILED)))
            else:
                with contextlib.suppress(BaseException):
                    send(("internal", type(exc).__name__, "".join(traceback.format_exception(exc))))
                code = 3
        finally:
            with contextlib.suppress(BaseException):
                os.close(out.fd)
            os._exit(code)

    def _measure(self, jobs: list[_Job], binding: adapters.Binding, tick: Progress | None,
                 measured: Callable[[list[Task], RunSettings, Progress | None], Generator[Started | Doubted | Result, None, None]],
                 send: Callable[[tuple], None]) -> None:
        """Measure ``jobs`` in the child, sending each one's "start" and, in job order, its "result".

        With --jobs N, one `run_scenarios` call for consecutive scenarios (`pools`): one pool of
        workers runs their blocks, the next scenario's beside the last blocks and the probes of
        one (a pool per scenario left a core idle at each scenario's end). With --jobs 1 nothing
        runs beside anything, so each scenario has a call of its own. A --jobs worker death is
        measured again with --jobs 1. ``measured(tasks, settings, progress)`` is one such call,
        its looks decided by the supervisor.
        """
        tasks = []
        for job in jobs:
            item = self.loaded[job.index]
            seed = job.seed if job.seed is not None else scenario_seed(self.settings.seed, item)
            samples = job.samples if job.samples is not None else self.settings.samples
            tasks.append(Task(binding.verifiers[job.index], item, seed, samples, job.index))
        together = self.settings.jobs > 1 and not self._alone
        needs = [sum(n for n, _ in task.loaded.spec.memory_needs()) for task in tasks]
        groups = [[tasks[t] for t in group] for group in pools(needs, together)]

        def done(task: Task, result: ScenarioResult) -> None:
            error = result.error
            if error is not None and error.kind == DIED and self.settings.jobs > 1:
                # the death is the verifier's: measured again here, it ends this process and the supervisor says how
                (again,) = [event.result for event in measured([task], dataclasses.replace(self.settings, jobs=1), None)
                            if isinstance(event, Result)]
                if again.error is not None:
                    result = again
                else:
                    note = ("; measured again with --jobs 1 it did not die, so the death is not explained (an ERROR "
                            "all the same)")
                    result = dataclasses.replace(result, error=dataclasses.replace(error, message=error.message + note))
            choice = binding.choices[task.place]
            if choice is not None:  # say how the target was driven
                result = dataclasses.replace(result, info={**result.info, "adapter": choice.label()})
            send(("result", task.place, result))

        for group in groups:
            with contextlib.closing(measured(group, self.settings, tick)) as events:
                for event in events:
                    if isinstance(event, Started):
                        send(("start", group[event.index].place))
                    elif isinstance(event, Doubted):  # a worker died beside blocks of several: the supervisor finds which
                        send(("doubt", [group[t].place for t in event.indices]))
                        os._exit(0)
                    else:
                        done(group[event.index], event.result)

    # --- the supervisor ------------------------------------------------------------------------

    def measure(self, jobs: list[_Job], on_result: Callable[[int, ScenarioResult], None]) -> None:
        """Measure ``jobs`` in as many children as it takes; every job gets a result, in job order.

        A child that dies is charged to the scenario whose call it died in (the board tags each
        call), or to the one scenario it had in flight; the others it had in flight are measured
        again, whole, in the next child. Where that cannot be told (--jobs N: the verifier killed
        the whole group while calls of two scenarios ran), those scenarios go on probation: the
        next children measure one scenario at a time, the one that dies again (or errs) is
        charged, and if none does, each is an ERROR all the same (a death is never a pass).
        """
        order = [j.index for j in jobs]
        got: dict[int, ScenarioResult] = {}
        passed = 0
        held: dict[int, ScenarioResult] = {}  # results of scenarios on probation, passed on once it is settled
        probation: dict[int, ErrorInfo] = {}  # scenario -> the death it may have caused

        def record(index: int, result: ScenarioResult) -> None:
            nonlocal passed
            if index in probation:
                held[index] = result
                return
            got[index] = result
            while passed < len(order) and order[passed] in got:
                on_result(order[passed], got[order[passed]])
                passed += 1

        def settle(explained: bool) -> None:
            """End the probation: one of its scenarios died again or erred (``explained``: the others are innocent),
            or none did (each is an ERROR)."""
            names = ", ".join(self.loaded[i].spec.name for i in probation)
            cleared = dict(probation)
            probation.clear()
            for index, info in cleared.items():
                if not explained:
                    note = (f"; measured again one scenario at a time, none of {names} died: the death is not explained "
                            "(an ERROR all the same)")
                    base = held.get(index) or self._base(next(j for j in jobs if j.index == index))
                    held[index] = dataclasses.replace(base, error=dataclasses.replace(info, message=info.message + note))
                if index in held:
                    record(index, held.pop(index))

        remaining = list(jobs)
        while remaining:
            before = (len(got), len(held), len(probation))
            ended = self._one_child(remaining, record)
            if ended is not None:
                suspects, info = ended
                if len(suspects) == 1:
                    culprit = suspects[0].index
                    was_suspect = culprit in probation
                    probation.pop(culprit, None)
                    record(culprit, dataclasses.replace(self._base(suspects[0]), error=info))
                    if was_suspect:
                        settle(True)
                else:
                    probation.update({j.index: info for j in suspects})
                    self._alone = True  # from now on one scenario at a time: a death then names its scenario
            erred = next((i for i in probation if i in held and held[i].error is not None), None)
            if erred is not None:  # measured alone it erred (a worker that died again, in its own pool): its own fault
                del probation[erred]
                record(erred, held.pop(erred))
                settle(True)
            if probation and all(i in held for i in probation):
                settle(False)
            if (len(got), len(held), len(probation)) == before:  # every child that ends charges, suspects or finishes
                raise _Internal(f"a child ended with {len(remaining)} scenario(s) left and none charged")
            remaining = [j for j in remaining if j.index not in got and j.index not in held]

    def _one_child(self, jobs: list[_Job], on_result: Callable[[int, ScenarioResult], None]
                   ) -> tuple[list[_Job], ErrorInfo] | None:
        """Run one child on ``jobs``, every result it sends to ``on_result``; return None when it finished, else the
        scenarios it may have died on (one when the board or the run tells) and their ERROR."""
        ctx = self.context
        mine, out = os.pipe()  # the child's framed messages (frames.Reader)
        key = frames.new_key()  # this child's: a frame the verifier lays out without it is refused
        sent, answered = ctx.RawValue("q", 0), ctx.RawValue("q", 0)  # frames the child wrote; answers this process sent
        hear, answer = os.pipe()  # the judge's decisions, back to the child, framed the same way
        told = frames.new_key()  # the answers' own key: a frame of the child's is no answer
        theirs = (mine, answer) if self.method == "fork" else ()  # a child started afresh gets only the fds passed on
        child = ctx.Process(target=self._started, args=(_Inherited(out), key, sent, _Inherited(hear), told, answered,
                                                        theirs, jobs), daemon=False)
        reply = frames.Writer(answer, told, answered)
        os.set_blocking(answer, False)  # a pipe the verifier fills (through /proc) must not stall this process
        for slot in range(len(self.board.stamps)):  # a killed child's calls left their start times
            self.board.stamps[slot] = 0.0
        self.settle()
        self._born = time.monotonic()  # every call start on the board is later (the stamps were just cleared)
        recv = frames.Reader(mine, key, _MAX_MESSAGE)
        self._sent = sent
        judge = Judge(self.settings, self.stop_level)  # decides the child's looks, keyed (run_scenarios call, unit)
        started: list[int] = []  # jobs this child started, in the order it started them
        doubted: list[int] | None = None  # the jobs a --jobs worker died beside (the child's "doubt")
        measured: set[int] = set()  # jobs this child sent a result of
        bound = False  # this child bound the target (the supervisor's label may be an earlier child's)
        again = self.label is not None  # an earlier child bound it: a load error now is this run's, not the user's input
        killed: tuple[str, str] | None = None
        finished = False
        try:
            with stops.held():  # a stop (the verifier's first call may send it) waits until the child can be ended
                with contextlib.nullcontext() if self.method == "fork" or _from_main(self.target) else _main_left_out():
                    child.start()
        except KeyboardInterrupt:  # the held stop, let in as the block ends: the child just started is ended here
            if getattr(child, "_popen", None) is not None:
                self._end(child)
            for fd in (mine, out, hear, answer):
                os.close(fd)
            raise
        except (pickle.PicklingError, TypeError, AttributeError) as exc:  # spawn, forkserver: what the child gets is pickled
            for fd in (mine, out, hear, answer):
                os.close(fd)
            raise UsageError(f"the run cannot be handed to a child started by {self.method}: {type(exc).__name__}: "
                             f"{str(exc)[:300]} (the target, the scenarios and the settings are pickled for it); pass "
                             "picklable ones (a dict for adapter_options, scenarios by name or file), or run it in "
                             "this process with supervised=False") from exc
        try:
            self._loading_since = self._heard = time.monotonic()
            os.close(out)
            os.close(hear)
            out = hear = -1
            opening = getattr(self.progress, "open", None)  # optional: a reporter's imports, beside the child's (issue 20)
            if opening is not None:
                opening()
            self._warm()
            while not finished:
                message = self._next(recv, child)
                if message is None:  # the child is gone, or was killed for a call past the timeout
                    killed = self._killed
                    break
                why = _out_of_turn(message, jobs, started, measured, bound=bound)
                if why is not None:  # a frame that checks but is no message of the child's: the verifier wrote it
                    killed = self._refuse(child, _unread(why))
                    break
                kind = message[0]
                if kind == "bound":
                    bound = True
                    self.label, self.adapter = message[1], message[2]
                    self._loading_since = None
                elif kind == "start":
                    started.append(message[1])
                elif kind == "look":
                    self.settle()  # one thread imports at a time (the judge's scipy may still be on its way)
                    decided = judge(*message[1:])
                    try:
                        reply.write(decided, within=_ANSWER_ROOM)
                    except TimeoutError:  # the child does not take it: the verifier filled the pipe
                        killed = self._refuse(child, _unheard("its answers' pipe was full"))
                        break
                    except OSError:  # the child died meanwhile (a thread of the verifier's): seen next
                        pass
                    self._heard = time.monotonic()  # the child's clock starts again with the answer
                elif kind == "progress":
                    if self.progress is not None:
                        self.progress(*message[1:])
                elif kind == "result":
                    on_result(message[1], message[2])
                    measured.add(message[1])
                elif kind == "done":
                    finished = True
                elif kind == "doubt":  # a --jobs worker died while blocks of these scenarios ran: one of them did it
                    doubted = message[1]
                    names = ", ".join(self.loaded[i].spec.name for i in doubted)
                    killed = self._refuse(child, f"a --jobs {self.settings.jobs} worker process died while blocks of "
                                                 f"{names} were running side by side: the verifier ended it (os._exit, "
                                                 "a signal, a crash in C code)")
                    break
                elif kind == "cut-off":
                    killed = self._refuse(child, _unheard(message[1]))
                    break
                elif kind == "error":
                    if again or message[3] not in (ExitCode.USAGE_ERROR, ExitCode.NO_SCENARIOS):
                        # the target loaded once and not again, or an error that is no input's (exit 0 from a signal
                        # handler of the verifier's): the scenario's ERROR, and the run goes on
                        killed = self._refuse(child, f"the child stopped on {message[1]}: {message[2]}"[:400])
                        break
                    raise _loading_error(message[1], message[2], message[3])
                elif kind == "internal":
                    raise _Internal(f"{message[1]} in the engine process:\n{message[2]}")
        finally:  # a stop anywhere above (SIGINT, SIGTERM: KeyboardInterrupt) ends the child here too
            self._end(child)
            for fd in (mine, answer, out, hear):
                if fd >= 0:
                    os.close(fd)
        if finished:
            return None
        dump = _dump(self.errfile)
        if self.label is None and not started:  # it died, or hung, while loading the target
            what = killed[1] if killed is not None and killed[0] in ("import", DIED) else (
                f"the target {_describe(self._exitcode)} while importing")
            raise TargetLoadError(f"loading {self.target!r}: {what}" + (f"\n{dump}" if dump else ""))
        left = [j for j in jobs if j.index not in measured]
        if not left:  # it ended after its last result (a thread of the verifier's): nothing measured is lost
            return None
        running = [i for i in started if i not in measured]
        blamed = self._blamed if doubted is None else []
        return _suspects(left, doubted or running, blamed), killed_error(killed, self._exitcode, dump)

    def _blame(self, slots: Sequence[int] | None = None) -> None:
        """Note the scenarios of the calls the child's end is charged to: those of ``slots`` (a call killed past the
        timeout), else every call still running in the child or in a worker that is gone (read before the group is killed)."""
        stamps, tags, pids = list(self.board.stamps), list(self.board.scenarios), list(self.board.pids)
        if slots is None:
            slots = [s for s in range(len(stamps)) if stamps[s] > 0 and (s == 0 or not _running(pids[s]))]
        self._blamed = [tags[s] for s in slots if 0 <= s < len(tags)]

    def _next(self, recv: frames.Reader, child: Any) -> tuple | None:
        """Return the child's next message, or None once it has ended (or been killed past the timeout, or corrupted its pipe)."""
        self._killed = None
        self._blamed = []
        closed_at: float | None = None
        missing_since: float | None = None  # since when the child counts more frames written than came
        while True:
            message = self._read(recv, child, _POLL)
            if message is not None or self._killed is not None:
                self._heard = time.monotonic()
                return message
            if recv.closed:  # every writer closed the pipe: the child is ending (or the verifier closed it)
                time.sleep(_POLL)
                closed_at = time.monotonic() if closed_at is None else closed_at
            if not child.is_alive():
                self._blame()
                return self._read(recv, child, 0)  # what it sent before it died
            now = time.monotonic()
            missing_since = (now if missing_since is None else missing_since) if self._sent.value > recv.received else None
            if missing_since is not None and now - max(missing_since, recv.last_read) > guard.GRACE:
                # the child wrote a frame whole that has not come for GRACE s: something else read it out of the pipe
                self._killed = self._refuse(child, "the supervisor could not read the child's messages: a message the "
                                            "child sent never came (the verifier read it out of the pipe between them, "
                                            "or closed or replaced that pipe)")
                return None
            if closed_at is not None and now - closed_at > guard.GRACE:  # alive, and it can no longer speak
                self._killed = self._refuse(child, "the supervisor could not read the child's messages: the verifier "
                                            "closed or replaced the pipe between them, and the child went on without it")
                return None
            late = self._overdue()
            if late is not None:
                self._killed = late
                self._blame([self._late_slot] if late[0] in ("timeout", DIED) else [])
                if late[0] in ("timeout", "import", "stalled"):
                    if late[0] == "stalled":  # the scenario's ERROR is a death the verifier caused
                        self._killed = (DIED, late[1])
                    slot = 0 if late[0] == "import" else self._late_slot
                    stuck = child.pid if slot == 0 else self.board.pids[slot]
                    if _in_group(stuck, child.pid):  # the board is shared memory: a pid the verifier wrote is not signalled
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(stuck, signal.SIGUSR1)  # faulthandler: where it is stuck
                            time.sleep(0.2)
                self._kill_group(child)
                child.join()
                return None

    def _read(self, recv: frames.Reader, child: Any, timeout: float) -> tuple | None:
        """Return the child's next message within ``timeout`` seconds, or None.

        None with ``self._killed`` set when the pipe holds bytes that are no message of the child's:
        the verifier wrote into it (frames.Corrupt, or a frame that holds no tuple). The child is
        killed and its scenario is an ERROR.
        """
        what = None
        try:
            message = recv.next(timeout)
        except frames.Corrupt as exc:
            what = str(exc)
        except OSError as exc:  # the pipe cannot be read at all
            what = f"{type(exc).__name__}: {exc}"
        else:
            if message is None or (isinstance(message, tuple) and message):  # its kind and place: _out_of_turn
                return message
            what = f"a message of type {type(message).__name__}"
        self._killed = self._refuse(child, _unread(what))
        return None

    def _refuse(self, child: Any, message: str) -> tuple[str, str]:
        """Kill ``child`` and its group; return the (kind, message) of its scenario's ERROR (a death the verifier caused)."""
        self._kill_group(child)
        child.join()
        return DIED, message

    def _overdue(self) -> tuple[str, str] | None:
        """Return (kind, message) when a watched call must be ended, else None.

        Past ``timeout + guard.GRACE`` a call that is still running is killed ("timeout"); a child
        still loading the target past ``import_timeout`` is killed ("import"). A worker that
        died inside a call and is not noticed by its pool (a copy the verifier forked holds the
        worker's pipes open) is ended one second after it is seen dead ("died").
        """
        timeout = self.settings.timeout
        now = time.monotonic()
        limit = self.settings.import_timeout
        if self._loading_since is not None and limit and now - self._loading_since > limit:
            return "import", (f"importing and binding the target did not finish within {limit:g} s "
                              f"(--import-timeout {limit:g}); it hangs at import, or needs longer: raise --import-timeout")
        stamps = list(self.board.stamps)
        # (not with --backend ray: its workers' calls are on no board of this run's)
        if timeout and self.settings.backend == "local" and self._loading_since is None and all(start <= 0 for start in stamps):
            # no call runs: the harness works between calls, and it has never needed minutes for that
            since = max([self._heard, *(-start for start in stamps if start < 0)])
            if now - since > _idle_limit(timeout):
                self._late_slot = 0  # the child: where it is stuck, if it can say
                return "stalled", (f"the child did nothing for {now - since:.0f} s outside any verifier call (its harness "
                              "never takes that long): it was stopped (SIGSTOP), or something of the verifier's blocks it "
                              "(a thread holding the GIL, a finalizer of a returned object that never ends)")
        for slot in range(len(stamps)):
            start = stamps[slot]
            if start <= 0:
                self._dead_since.pop(slot, None)
                continue
            self._late_slot = slot
            if start < self._born or start > now + 1.0:  # no call of this child's started then: the verifier wrote it
                return DIED, (f"the verifier wrote into the supervisor's call board (shared memory): slot {slot} holds "
                              "a call start that no call of this child made")
            if slot > 0 and not _running(self.board.pids[slot]):
                if now - self._dead_since.setdefault(slot, now) > 1.0:
                    return DIED, "a --jobs worker process died inside a verifier call"
                continue
            if timeout and now - start > timeout + guard.GRACE:
                return "timeout", guard.overdue(timeout, now - start)
        return None

    def _kill_group(self, child: Any) -> None:
        """Kill the child and everything in its process group (block workers, the verifier's forks)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child.pid, signal.SIGKILL)

    def _end(self, child: Any) -> None:
        """Make sure the child and its group are gone and reaped.

        The group is killed first: the child has sent all it will (or is dead), and its --jobs
        workers and whatever the verifier forked hold the child's sentinel open, so a join that
        waits for the child to end on its own waited for them (5 s after every --jobs 2 run).
        """
        with stops.held():  # a second stop (the verifier signals again) must not leave the group alive
            self._kill_group(child)  # the child, and stragglers: workers of a pool, copies the verifier forked
            child.join()
        self._exitcode = child.exitcode
        with contextlib.suppress(Exception):
            child.close()

    def _base(self, job: _Job) -> ScenarioResult:
        """Return the result of ``job``'s scenario before anything was measured."""
        item = self.loaded[job.index]
        spec = item.spec
        samples = job.samples if job.samples is not None else self.settings.samples
        if samples is not None:
            spec = dataclasses.replace(spec, samples=samples)
        seed = job.seed if job.seed is not None else scenario_seed(self.settings.seed, item)
        return base_result(item, spec, seed)


def _out_of_turn(message: tuple, jobs: Sequence[_Job], started: Sequence[int], measured: set[int], *,
                 bound: bool) -> str | None:
    """Return why ``message`` cannot be the child's next one (its shape, or its place in the run), or None when it can.

    The child sends "bound" once, then a "start" for each job (several may be in flight), their
    "look"s and "progress", and each job's "result" once it has started, in job order; then "done".
    "error" and "internal" end it at any point, and so does "doubt" (--jobs N: a worker died while
    blocks of several running jobs were in flight; it names them).
    """
    kind, args = message[0], message[1:]
    if kind == "cut-off":
        return None if len(args) == 1 and isinstance(args[0], str) else "a malformed 'cut-off' message"
    if kind in ("error", "internal"):
        n = 3 if kind == "error" else 2
        ok = len(args) == n and all(isinstance(a, str) for a in args[:2]) and (kind == "internal" or isinstance(args[2], int))
        return None if ok else f"a malformed {kind!r} message"
    if kind == "bound":
        ok = not bound and len(args) == 2 and isinstance(args[0], str) and (args[1] is None or isinstance(args[1], str))
        return None if ok else "a 'bound' message out of turn"
    if not bound:
        return f"a {kind!r} message before the target was bound"
    pending = [j.index for j in jobs if j.index not in measured]
    running = [i for i in started if i not in measured]
    if kind == "start":
        ok = len(args) == 1 and args[0] in pending and args[0] not in started
        return None if ok else f"a 'start' of scenario {args[0] if args else '?'!r} out of turn"
    if kind == "progress":
        ok = len(args) == 3 and isinstance(args[0], str) and all(isinstance(a, int) for a in args[1:])
        return None if ok else "a malformed 'progress' message"
    if kind == "look":
        ok = (bool(running) and len(args) == 4 and isinstance(args[0], tuple) and len(args[0]) == 2
              and all(isinstance(a, int) for a in args[0]) and isinstance(args[1], Measured)
              and isinstance(args[2], int) and isinstance(args[3], bool))
        return None if ok else "a 'look' out of turn or malformed"
    if kind == "result":
        ok = (len(args) == 2 and bool(pending) and args[0] == pending[0] and args[0] in started
              and isinstance(args[1], ScenarioResult))
        return None if ok else "a 'result' out of turn or malformed"
    if kind == "done":
        return None if not pending and not args else f"'done' with {len(pending)} scenario(s) unmeasured"
    if kind == "doubt":
        ok = (len(args) == 1 and isinstance(args[0], list) and len(args[0]) > 1
              and all(isinstance(i, int) and i in running for i in args[0]))
        return None if ok else "a 'doubt' out of turn or malformed"
    return f"a message of kind {kind!r}"


#: Bytes of chain tables and exact laws the scenarios that share one pool may hold together (a run call builds every
#: scenario's chains before its first block, and a fork needs them there): the default suite holds kilobytes.
POOL_TABLES = 256 << 20


def pools(needs: Sequence[int], together: bool, budget: int = POOL_TABLES) -> list[list[int]]:
    """Cut scenarios (their memory ``needs`` in bytes, in run order) into runs of consecutive ones measured on one pool.

    ``together`` False (--jobs 1, or scenarios on probation): one each. Otherwise a run grows
    while its needs stay within ``budget``, so large tabular chains are held one scenario at a
    time, as they were with a pool per scenario.
    """
    out: list[list[int]] = []
    held = 0
    for t, need in enumerate(needs):
        if together and out and held + need <= budget:
            out[-1].append(t)
            held += need
        else:
            out.append([t])
            held = need
    return out


def _suspects(left: Sequence[_Job], running: Sequence[int], blamed: Sequence[int]) -> list[_Job]:
    """Return the scenarios a child that ended with ``left`` unmeasured may have died on; one when it can be told.

    ``running``: the scenarios it had started and not finished, in the order it started them;
    ``blamed``: the scenarios of the calls its end is charged to (the board: the verifier can
    write it, so a scenario that is not running is ignored). A call's scenario, if one; else the
    one scenario running, else all of them; with none started, the next one.
    """
    named = list(dict.fromkeys(i for i in blamed if i in running))
    pick = named or list(running) or [left[0].index]
    return [j for j in left if j.index in pick]


def killed_error(killed: tuple[str, str] | None, exitcode: int | None, dump: str) -> ErrorInfo:
    """Return the ERROR of a scenario whose process ended under it (killed past the timeout, or by the verifier)."""
    if killed is not None:
        kind, message = killed
        fatal = re.search(r"Fatal Python error: ([^\n]+)", dump)
        if kind == DIED and fatal:  # what faulthandler saw: "Segmentation fault", "Aborted", ...
            message += f" ({fatal.group(1).strip()})"
        return ErrorInfo(kind, message, traceback=dump)
    if exitcode == _CUT_OFF:
        return ErrorInfo(DIED, "the child could no longer write to the supervisor (the verifier closed or replaced the "
                         f"pipe between them), or the verifier ended the process with os._exit({_CUT_OFF}); "
                         "the run went on in a fresh process", traceback=dump)
    return ErrorInfo(DIED, f"the verifier {_describe(exitcode)} while this scenario ran; "
                     "the run went on in a fresh process", traceback=dump)


def _loading_error(name: str, message: str, code: int) -> SpecauditError:
    """Return the error the child met (loading and binding the target, or a usage error later), as raised here."""
    if name == "TargetLoadError":
        return TargetLoadError(message)
    if code == int(ExitCode.USAGE_ERROR):
        return UsageError(message)
    exc = SpecauditError(message)
    exc.exit_code = ExitCode(code)
    return exc


def supervised_remeasure(target: str | Callable[..., Any], loaded: list[Any],
                         settings: RunSettings) -> Callable[[int, int, int], ScenarioResult]:
    """Return ``remeasure(index, seed, samples)``: scenario ``index`` of ``loaded`` measured again, supervised.

    What ``specaudit merge --rerun TARGET`` re-runs its SUSPECT scenarios with; where runs cannot be
    supervised the scenario is measured in this process.
    """
    if not supported():
        def here(i: int, fresh_seed: int, n: int) -> ScenarioResult:
            _, binding = bind_target(target, loaded, settings)
            task = Task(binding.verifiers[i], loaded[i], fresh_seed, n)
            (again,) = results([task], settings, stop_level=settings.stop_level(len(loaded)))
            return again

        return here
    sup = _Supervisor(target, loaded, settings, None)

    def remeasure(i: int, fresh_seed: int, n: int) -> ScenarioResult:
        got: dict[int, ScenarioResult] = {}
        sup.measure([_Job(i, fresh_seed, n)], got.__setitem__)
        return got[i]

    return remeasure


def execute_supervised(
    target: str | Callable[..., Any],
    scenarios: Sequence[ScenarioLike] | ScenarioLike | None,
    settings: RunSettings,
    *,
    progress: Progress | None = None,
    on_scenario: Callable[[ScenarioResult], None] | None = None,
) -> RunResult:
    """Audit ``target`` like :func:`specaudit.engine.run.execute`, with the verifier in supervised child processes.

    Same results (seeds, blocks and checks are the same); a scenario whose process the verifier
    ended, crashed or hung past the timeout is an ERROR saying so, and the run goes on. SIGINT
    and SIGTERM interrupt the run (exit 2) with every finished scenario kept.
    """
    if not supported() or threading.current_thread() is not threading.main_thread():
        return execute(target, scenarios, settings, progress=progress, on_scenario=on_scenario)
    loaded = resolve_scenarios(scenarios if scenarios is not None else adapters.preset_scenarios(target), settings)
    started = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    sup = _Supervisor(target, loaded, settings, progress)
    done: list[ScenarioResult] = []

    def record(index: int, result: ScenarioResult) -> None:
        done.append(result)
        if on_scenario is not None:
            on_scenario(result)

    def remeasure(i: int, fresh_seed: int, n: int) -> ScenarioResult:
        announce = getattr(progress, "rerun", None)  # optional: say what a re-run costs before it starts (issue 16)
        first = next((r for r in done if r.name == loaded[i].spec.name), None)
        if announce is not None and first is not None:
            announce(first.name, n, first.seconds * n / max(first.samples, 1))
        got: dict[int, ScenarioResult] = {}
        sup.measure([_Job(i, fresh_seed, n)], lambda k, r: got.__setitem__(k, r))
        return got[i]

    interrupted = False
    try:
        with stops.stop_signals():
            try:
                sup.measure([_Job(i) for i in range(len(loaded))], record)
            except KeyboardInterrupt:
                interrupted = True
            label = sup.label if sup.label is not None else (target if isinstance(target, str) else repr(target))
            sup.settle()  # its imports done: none runs beside this thread's (no two threads in one import chain)
            return finish(
                label, done, [item.spec for item in loaded[:len(done)]], settings,
                started=started, elapsed=lambda: time.perf_counter() - t0, interrupted=interrupted,
                remeasure=remeasure, adapter=sup.adapter,
            )
    finally:
        sup.close()
