"""Hostile verifiers for tests/test_hostile.py: each is the reference, except on vocabulary 8 (peaked-v8).

There each one attacks the process that runs it in one way: exits, signals, swallowed
timeouts, forks, closed streams, floods of output, exceptions whose text looks like markup.
``SPECAUDIT_HOSTILE_PIDS``, when set, names a file where a verifier that starts processes writes
their pids, so a test can check that none is left behind.
"""

import ctypes
import os
import signal
import subprocess
import sys
import time

import numpy as np

from specaudit.verifiers.reference import verify as _reference

#: Attack only batches of at least this many rows (``--jobs 2`` tests: the simulation's blocks, not the probes).
_MIN_BATCH = int(os.environ.get("SPECAUDIT_HOSTILE_MIN_BATCH", "0"))


def _hostile(attack):
    """Return a verifier that runs ``attack()`` on vocabulary 8 and is the reference elsewhere."""

    def verify(draft, q, p, num_draft, rng):
        if p.shape[-1] == 8 and draft.shape[0] >= _MIN_BATCH:
            attack()
        return _reference(draft, q, p, num_draft, rng)

    verify.__name__ = attack.__name__
    verify.attack = attack
    return verify


def _raise(exc):
    raise exc


def _note_pid(pid):
    path = os.environ.get("SPECAUDIT_HOSTILE_PIDS")
    if path:
        with open(path, "a") as fh:
            fh.write(f"{pid}\n")


class Custom(BaseException):
    """A BaseException that is not an Exception."""


def _spin_swallowing(kind):
    while True:
        try:
            time.sleep(0.05)
        except kind:
            pass


def _fork_and_return():
    pid = os.fork()
    if pid == 0:
        return  # the copy carries on as if it were the harness
    _note_pid(pid)
    raise RuntimeError("forked a copy of the process")


def _start_sleeper_and_exit():
    proc = subprocess.Popen(["sleep", "60"])
    _note_pid(proc.pid)
    os._exit(0)


def _fork_sleeper_and_segfault():
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    _note_pid(pid)
    ctypes.string_at(0)


def _print_flood():
    chunk = "x" * (1 << 20)
    for _ in range(100):  # 100 MB on stdout
        print(chunk)
    raise ValueError("printed 100 MB")


def _close_streams():
    sys.stdout.close()
    sys.stderr.close()
    raise ValueError("closed stdout")


def _recurse(n=0):
    return _recurse(n + 1) + 1


def _ignore_alarm_and_spin():
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    while True:
        time.sleep(0.05)


def _cancel_timer_and_spin():
    signal.setitimer(signal.ITIMER_REAL, 0)
    while True:
        time.sleep(0.05)


def _write_into_descriptors(data: bytes):
    """Write ``data`` into every descriptor from 3 to 63 that takes it (the supervisor's pipe among them)."""
    for fd in range(3, 64):
        try:
            os.write(fd, data)
        except OSError:
            continue


def _exit_from_a_thread_later():
    """Start a thread that ends the process 0.3 s later: a --jobs worker dies between two blocks, not in a call."""
    import threading

    if not getattr(_exit_from_a_thread_later, "started", False):
        _exit_from_a_thread_later.started = True
        threading.Thread(target=lambda: (time.sleep(0.3), os._exit(7)), daemon=True).start()


def _chdir_and_raise():
    os.chdir("/")
    raise ValueError("moved to /")


exit0 = _hostile(lambda: sys.exit(0))
exit1 = _hostile(lambda: sys.exit(1))
exit2 = _hostile(lambda: sys.exit(2))
exit3 = _hostile(lambda: sys.exit(3))
exit_msg = _hostile(lambda: sys.exit("bye"))
exit_none = _hostile(lambda: sys.exit())
exit_bare = _hostile(lambda: _raise(SystemExit))
keyboard_interrupt = _hostile(lambda: _raise(KeyboardInterrupt))
self_sigint = _hostile(lambda: os.kill(os.getpid(), signal.SIGINT) or time.sleep(1))
generator_exit = _hostile(lambda: _raise(GeneratorExit))
base_exception = _hostile(lambda: _raise(BaseException("boom")))
custom_base = _hostile(lambda: _raise(Custom("mine")))
os_exit0 = _hostile(lambda: os._exit(0))
os_exit1 = _hostile(lambda: os._exit(1))
os_exit2 = _hostile(lambda: os._exit(2))
os_exit3 = _hostile(lambda: os._exit(3))
os_exit4 = _hostile(lambda: os._exit(4))
segfault = _hostile(lambda: ctypes.string_at(0))
abort = _hostile(os.abort)
sigkill_self = _hostile(lambda: os.kill(os.getpid(), signal.SIGKILL))
sigterm_self = _hostile(lambda: os.kill(os.getpid(), signal.SIGTERM) or time.sleep(1))
sigbus_self = _hostile(lambda: os.kill(os.getpid(), signal.SIGBUS) or time.sleep(1))
killpg_self = _hostile(lambda: os.killpg(0, signal.SIGKILL))
thread_exit_later = _hostile(_exit_from_a_thread_later)
pipe_garbage = _hostile(lambda: _write_into_descriptors(b"\x00\x00\x00\x08garbage!"))  # a frame that does not unpickle
pipe_forged_length = _hostile(lambda: _write_into_descriptors(b"\x7f\xff\xff\xf0"))  # 2 GiB announced, none sent
pipe_small_forged_length = _hostile(lambda: _write_into_descriptors(b"\x00\x10\x00\x00"))  # 1 MiB announced, none sent
pipe_magic = _hostile(lambda: _write_into_descriptors(b"SPAF"))  # the first bytes of a frame, and no more


def _forged(*message):
    """Write a frame laid out as the child's (specaudit.engine.frames), but under a key of its own, into every descriptor."""
    from specaudit.engine import frames

    for seq in range(4):  # whatever number the supervisor expects next
        _write_into_descriptors(frames.encode(message, frames.new_key(), seq))


def _pipe_ends(mode):
    """Return the descriptors from 3 to 255 that are pipe ends open for ``mode`` (os.O_RDONLY or os.O_WRONLY)."""
    import fcntl
    import stat

    ends = []
    for fd in range(3, 256):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == mode:
                ends.append(fd)
        except OSError:
            continue
    return ends


def _onto_devnull(fds, mode):
    """Make each of ``fds`` /dev/null, opened for ``mode``."""
    null = os.open(os.devnull, mode)
    for fd in fds:
        os.dup2(null, fd)


def _close(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            continue


def _read_away(fds):
    """Start, once, a thread per descriptor of ``fds`` that reads whatever comes into it (blocking), and drops it."""
    import threading

    if getattr(_read_away, "started", False):
        return
    _read_away.started = True

    def drain(fd):
        while True:
            try:
                if not os.read(fd, 1 << 16):
                    return
            except OSError:
                return

    for fd in fds:
        threading.Thread(target=drain, args=(fd,), daemon=True).start()


def _readers_of(fds):
    """Open each of ``fds`` (pipe write ends) again for reading, through /proc/self/fd (Linux)."""
    return [os.open(f"/proc/self/fd/{fd}", os.O_RDONLY) for fd in fds]


answers_read_away = _hostile(lambda: _read_away(_pipe_ends(os.O_RDONLY)))  # the supervisor's answers, stolen
results_read_away = _hostile(lambda: _read_away(_readers_of(_pipe_ends(os.O_WRONLY))))  # the child's messages, stolen
pipes_read_ends_closed = _hostile(lambda: _close(_pipe_ends(os.O_RDONLY)))  # the answers' pipe among them
pipes_write_ends_on_devnull = _hostile(lambda: _onto_devnull(_pipe_ends(os.O_WRONLY), os.O_WRONLY))  # the results' pipe
descriptors_closed = _hostile(lambda: _close(range(3, 256)))  # every pipe, file and socket the process holds


class _Lingering(np.ndarray):
    """An output array whose finalizer never ends: the harness drops it outside any timed call."""

    def __del__(self):
        time.sleep(3600)


def _output_that_lingers(draft, q, p, num_draft, rng):
    out, n_out = _reference(draft, q, p, num_draft, rng)
    return out.view(_Lingering), n_out


def lingering_output(draft, q, p, num_draft, rng):
    """The reference, but on vocabulary 8 its output's finalizer blocks for an hour."""
    if p.shape[-1] == 8 and draft.shape[0] >= _MIN_BATCH:
        return _output_that_lingers(draft, q, p, num_draft, rng)
    return _reference(draft, q, p, num_draft, rng)


def _green_error():
    from specaudit.errors import ExitCode, SpecauditError

    class Green(SpecauditError):
        exit_code = ExitCode.OK

    return Green("raised by the verifier's signal handler")


def _signal_between_calls(signum, exc=None):
    """Once, send ``signum`` to this process when the call has returned; with ``exc`` (a factory) its handler raises it."""
    import threading

    from specaudit.contract import guard

    def fire():
        shared = guard.board()
        while shared is not None and shared.stamps[0] > 0:  # wait for the call to return
            time.sleep(0.0005)
        os.kill(os.getpid(), signum)

    def handler(got, frame):
        raise exc()

    flag = f"armed_{signum}"
    if not getattr(_signal_between_calls, flag, False):
        setattr(_signal_between_calls, flag, True)
        if exc is not None:
            signal.signal(signum, handler)
        threading.Thread(target=fire, daemon=True).start()


error_exit0_from_a_handler = _hostile(lambda: _signal_between_calls(signal.SIGUSR2, _green_error))
timeout_error_from_a_handler = _hostile(lambda: _signal_between_calls(signal.SIGUSR2, lambda: TimeoutError("its own")))
sigint_between_calls = _hostile(lambda: _signal_between_calls(signal.SIGINT))  # the child's default: KeyboardInterrupt


def _forge_the_board(pid):
    """Write a long-running call of process ``pid`` into the board's slot 1 (shared memory), then wait to be killed."""
    from specaudit.contract import guard

    shared = guard.board()
    shared.pids[1] = pid
    shared.stamps[1] = 1.0  # a call that started long ago: past any timeout
    time.sleep(30)


board_forged_supervisor = _hostile(lambda: _forge_the_board(os.getppid()))  # the supervisor, to be signalled
board_forged_group = _hostile(lambda: _forge_the_board(0))  # pid 0: the signaller's whole process group
pipe_forged_done = _hostile(lambda: _forged("done"))  # "finished", with the scenario unmeasured
pipe_forged_start = _hostile(lambda: _forged("start", 0))  # a scenario started twice
pipe_forged_look = _hostile(lambda: _forged("look", None))  # a look with no measurements
pipe_forged_kind = _hostile(lambda: _forged("hello"))  # no kind of the child's
swallow_exception = _hostile(lambda: _spin_swallowing(Exception))
swallow_base = _hostile(lambda: _spin_swallowing(BaseException))
ignore_alarm = _hostile(_ignore_alarm_and_spin)
cancel_timer = _hostile(_cancel_timer_and_spin)
sleeps = _hostile(lambda: time.sleep(600))
recursion = _hostile(_recurse)
memory_error = _hostile(lambda: _raise(MemoryError("pretend")))
stop_iteration = _hostile(lambda: _raise(StopIteration))
fork_and_return = _hostile(_fork_and_return)
sleeper_and_exit = _hostile(_start_sleeper_and_exit)
fork_sleeper_and_segfault = _hostile(_fork_sleeper_and_segfault)
print_flood = _hostile(_print_flood)
close_streams = _hostile(_close_streams)
chdir = _hostile(_chdir_and_raise)
markup_close = _hostile(lambda: _raise(ValueError("[/b] closes a tag it never opened")))
markup_generic = _hostile(lambda: _raise(TypeError("expected list[int], got [dtype] float64")))
markup_emoji = _hostile(lambda: _raise(ValueError("shape :x: of :smile: rows")))
class _Unprintable(ValueError):
    def __str__(self):
        raise RuntimeError("no text for you")


unprintable_exception = _hostile(lambda: _raise(_Unprintable()))  # its __str__ raises: named, and never followed
#: text no UTF-8 and no XML can hold: a lone surrogate, NUL, an escape sequence that clears the screen
unprintable = _hostile(lambda: _raise(ValueError("lone \ud800 NUL \x00 clear \x1b[2J end")))


def returns_none(draft, q, p, num_draft, rng):
    """Returns nothing on vocabulary 8 (a contract breach, not a crash)."""
    return None if p.shape[-1] == 8 and draft.shape[0] >= _MIN_BATCH else _reference(draft, q, p, num_draft, rng)


def records_calls(draft, q, p, num_draft, rng):
    """The reference, noting each call in the file ``SPECAUDIT_HOSTILE_CALLS`` names (was anything simulated?)."""
    with open(os.environ["SPECAUDIT_HOSTILE_CALLS"], "a") as fh:
        fh.write("call\n")
    return _reference(draft, q, p, num_draft, rng)


def _by_vocabulary():
    """Return a verifier whose fault depends on the vocabulary, from ``SPECAUDIT_HOSTILE_BY_V`` ("5=os_exit0,...").

    The faults are read here, when the module is imported (the run's process), and travel with the
    verifier: one run can then meet a different fault in each scenario (``--backend ray``).
    """
    faults = dict(item.split("=") for item in os.environ.get("SPECAUDIT_HOSTILE_BY_V", "").split(",") if item)
    attacks = {int(v): globals()[name].attack for v, name in faults.items()}

    def verify(draft, q, p, num_draft, rng):
        attack = attacks.get(p.shape[-1])
        if attack is not None and draft.shape[0] >= _MIN_BATCH:
            attack()
        return _reference(draft, q, p, num_draft, rng)

    return verify


by_vocabulary = _by_vocabulary()


_CHILD = os.getpid()  # the supervised child imports this file; its --jobs workers are forks of it
_worker_calls = []


def _break_then(attack):
    """Return a verifier that, on vocabulary 8 in a --jobs worker, raises at its first call there and runs ``attack()``
    at the next: the scenario is decided (a crash ERROR) while that worker still runs a block of it."""

    def verify(draft, q, p, num_draft, rng):
        if p.shape[-1] == 8 and os.getpid() != _CHILD:
            if not _worker_calls:
                _worker_calls.append(1)
                raise RuntimeError("peaked-v8 breaks")
            attack()
        return _reference(draft, q, p, num_draft, rng)

    return verify


crash_then_die = _break_then(lambda: time.sleep(0.5) or os._exit(11))  # a worker that dies in a block left running
crash_then_hang = _break_then(lambda: _spin_swallowing(BaseException))  # a call left running that swallows the timeout
