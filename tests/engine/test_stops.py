"""Stops (SIGINT, SIGTERM) are raised where they may be and never lost: the import system, held sections, dropped ones."""

from __future__ import annotations

import gc
import importlib
import signal
import sys
import threading
import time
import types

import pytest

from specaudit.engine import stops

#: Time a re-delivered stop may take to arrive (it is sent 10 ms later; this machine is shared).
ARRIVES_S = 10.0


def _wait_for_the_stop() -> None:
    """Run bytecode until a stop raises KeyboardInterrupt (fail after ARRIVES_S)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < ARRIVES_S:
        time.sleep(0.001)
    pytest.fail(f"no KeyboardInterrupt within {ARRIVES_S} s: the stop was lost")


def test_a_stop_that_lands_in_the_import_system_is_kept_and_raised_just_after():
    # a KeyboardInterrupt raised between importlib taking the global import lock and its try left the
    # lock held (the warm-import thread then waited for ever); one in its weakref callback was dropped
    inside = types.SimpleNamespace(f_code=types.SimpleNamespace(co_filename="<frozen importlib._bootstrap>"), f_back=None)
    with stops.stop_signals():
        stops.stop(signal.SIGTERM, inside)  # returns: nothing raised in the import system's own code
        with pytest.raises(KeyboardInterrupt):
            _wait_for_the_stop()
    outside = types.SimpleNamespace(f_code=types.SimpleNamespace(co_filename=__file__), f_back=None)
    with stops.stop_signals(), pytest.raises(KeyboardInterrupt):  # negative control: anywhere else it raises at once
        stops.stop(signal.SIGTERM, outside)


#: A module that stops its own process while it is imported, then runs on for a while.
_STOPS_ITSELF = """
import os, signal, time
os.kill(os.getpid(), signal.SIGTERM)
t0 = time.monotonic()
while time.monotonic() - t0 < 0.2:
    pass
FINISHED = True
"""


def test_a_stop_during_any_module_import_waits_for_the_import_to_finish(tmp_path, monkeypatch):
    # a stop raised in code a module runs while it is imported (numpy.random's Cython init calling abc.register)
    # was caught and dropped there (a warning), and the run ended 0: 4 of 100 stressed CLI runs before
    (tmp_path / "stops_itself.py").write_text(_STOPS_ITSELF)
    monkeypatch.syspath_prepend(str(tmp_path))
    with stops.stop_signals():
        with pytest.raises(KeyboardInterrupt):
            module = importlib.import_module("stops_itself")
            assert module.FINISHED  # the whole module ran: nothing was raised inside it
            _wait_for_the_stop()
    assert sys.modules["stops_itself"].FINISHED
    scope: dict = {}
    with stops.stop_signals(), pytest.raises(KeyboardInterrupt):  # negative control: the same code, not imported
        exec(compile(_STOPS_ITSELF, "stops_itself.py", "exec"), scope)
    assert "FINISHED" not in scope


def test_a_stop_python_drops_in_a_finaliser_is_delivered_again():
    class Dropper:
        def __del__(self):
            raise KeyboardInterrupt  # as the handler's raise does when the signal lands in a __del__

    with stops.stop_signals():
        with pytest.raises(KeyboardInterrupt):
            Dropper()  # collected at once: Python prints "Exception ignored" and goes on
            gc.collect()
            _wait_for_the_stop()
    # once out of stop_signals, nothing is re-delivered: a dropped KeyboardInterrupt is reported as Python does
    seen = []
    hook, signal_handler = sys.unraisablehook, signal.getsignal(signal.SIGINT)
    sys.unraisablehook = lambda u: seen.append(type(u.exc_value))
    try:
        Dropper()
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert seen == [KeyboardInterrupt] and signal.getsignal(signal.SIGINT) is signal_handler


def test_a_stop_given_to_another_thread_waits_for_the_end_of_a_held_section():
    # the kernel gives a process's signal to any thread that does not block it (a C library's thread); its C
    # handler makes the main thread run the Python one at once, inside the held section, unless the handler holds it
    def other_thread() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops.STOPS)
        signal.raise_signal(signal.SIGTERM)  # to this thread

    reached = []
    with stops.stop_signals():
        with pytest.raises(KeyboardInterrupt):
            with stops.held():
                t = threading.Thread(target=other_thread)
                t.start()
                t.join()
                time.sleep(0.05)  # bytecode runs here: the handler ran by now
                reached.append("end of the held section")
    assert reached == ["end of the held section"]


def test_no_stop_no_interrupt():
    # negative control: a held section and the import-system test without a signal raise nothing
    with stops.stop_signals():
        with stops.held():
            time.sleep(0.02)
        time.sleep(0.05)
