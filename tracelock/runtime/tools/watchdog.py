"""One thread per process that ends sync tools running on their caller's thread when their
deadline passes, so that a tool call under a timeout needs no thread hand-off.

A call arms its thread's deadline before the tool starts and disarms it when the tool
returns; arming and disarming are a few dictionary operations under a lock, and the watchdog
is woken only when a new deadline is earlier than the time it sleeps until (so, with the
default 30 s timeout, about once per 30 s, not once per call: with nothing armed it still
sleeps until the latest deadline it has seen). When a deadline passes while
its call is still armed, the watchdog ends the tool with :class:`ToolDeadline`, a
``BaseException`` (like ``KeyboardInterrupt``: a tool's ``except Exception`` does not swallow
it, its ``finally`` blocks run):

- on the main thread, by sending it :data:`DEADLINE_SIGNAL`, whose handler raises it. A
  signal interrupts blocking system calls as well as Python code (``time.sleep``, socket
  reads, lock and event waits are ended at the deadline, as Ctrl-C ends them; if another
  handler has replaced the watchdog's since it was installed, as on any other thread);
- on any other thread, by an asynchronous exception (``PyThreadState_SetAsyncExc``), which
  CPython delivers only between bytecodes: Python code is ended at the deadline, a tool
  blocked in a C call when that call returns (signal handlers run on the main thread only).

A deadline never reaches a later call: the signal handler runs on the caller's own thread
and raises only while the call that fired is still armed, and an asynchronous exception is
set under the lock that disarming takes, then withdrawn by disarming if the tool returned
first. Whatever ends the call after its deadline fired, the caller reports a timeout.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from types import FrameType
from typing import Any

__all__ = ["DEADLINE_SIGNAL", "ToolDeadline", "Watchdog", "WATCHDOG"]

#: The real-time signal the watchdog sends to the main thread; its handler is installed the
#: first time a tool under a timeout runs inline there, and only when the signal is unhandled.
DEADLINE_SIGNAL: int | None = signal.SIGRTMIN + 6 if hasattr(signal, "SIGRTMIN") else None


class ToolDeadline(BaseException):
    """Raised inside a sync tool whose deadline has passed (turned into ``TimeoutError``
    for the pipeline by the invoker)."""


class _Slot:
    """A thread's deadline: armed for one call at a time."""

    __slots__ = ("armed", "asynced", "delivered", "fired", "ident", "signalled")

    def __init__(self, ident: int, signalled: bool) -> None:
        self.ident = ident
        #: True when the deadline is enforced by the signal (main thread), else asynchronously.
        self.signalled = signalled
        self.armed = False
        self.fired = False
        self.delivered = False
        #: True once the watchdog set an asynchronous exception for the armed call.
        self.asynced = False


class Watchdog:
    """Deadlines of sync tools running on their callers' threads (see the module)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._deadlines: dict[_Slot, float] = {}
        self._planned = math.inf
        #: The latest deadline ever armed: with nothing armed, the watchdog still sleeps until
        #: it, so that calls armed meanwhile with the same timeout never wake it (a wake per
        #: call would cost a thread switch per call, the hand-off this module replaces).
        self._latest = -math.inf
        self._thread: threading.Thread | None = None
        self._local = threading.local()
        self._main_slot: _Slot | None = None
        self._signal_ready = False

    # -- the caller's side -----------------------------------------------------------------
    def slot(self, *, signalled: bool) -> _Slot:
        """The calling thread's slot (``signalled`` only on the main thread, once
        :meth:`signal_ready` said so)."""
        if signalled:
            slot = self._main_slot
            if slot is None:
                slot = self._main_slot = _Slot(threading.get_ident(), True)
            return slot
        slot = getattr(self._local, "slot", None)
        if slot is None:
            slot = self._local.slot = _Slot(threading.get_ident(), False)
        return slot

    def signal_ready(self) -> bool:
        """Whether the main thread's tools can be ended by :data:`DEADLINE_SIGNAL` (its handler
        is installed now if the signal was unhandled). Call on the main thread."""
        signum = DEADLINE_SIGNAL
        if signum is None:
            return False
        if self._signal_ready:
            # Not checked again per call (reading a handler costs more than the rest of the
            # call): if another handler replaced ours since, the watchdog finds out when a
            # deadline passes and ends the tool as on any other thread.
            return True
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            current = signal.getsignal(signum)
            if current is not _on_signal:
                if current not in (signal.SIG_DFL, None):
                    return False
                signal.signal(signum, _on_signal)
        except (ValueError, OSError):  # not the main interpreter, or no such signal here
            return False
        self._signal_ready = True
        return True

    def arm(self, slot: _Slot, timeout_s: float) -> None:
        """Start the deadline of the call about to run on ``slot``'s thread."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            slot.fired = slot.delivered = slot.asynced = False
            slot.armed = True
            self._deadlines[slot] = deadline
            if deadline > self._latest:
                self._latest = deadline
            if deadline < self._planned:
                self._planned = deadline
                if self._thread is None:
                    self._start()
                self._wake.set()

    def disarm(self, slot: _Slot) -> bool:
        """End the call's deadline; True when it had already fired (the call timed out).
        After this returns, nothing the watchdog did for that call can reach the thread."""
        slot.armed = False  # from here the signal handler raises nothing
        with self._lock:
            self._deadlines.pop(slot, None)
            fired = slot.fired
        if fired and slot.asynced:
            _set_async_exc(slot.ident, None)  # withdraw it if it is still pending
        return fired

    # -- the watchdog's side ---------------------------------------------------------------
    def _start(self) -> None:
        thread = threading.Thread(target=self._watch, name="tracelock-watchdog", daemon=True)
        self._thread = thread
        thread.start()

    def _watch(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                planned = math.inf
                for slot, deadline in self._deadlines.items():
                    if slot.fired:
                        continue
                    if deadline <= now:
                        self._fire(slot)
                    else:
                        planned = min(planned, deadline)
                if planned == math.inf and self._latest > now:
                    planned = self._latest
                self._planned = planned
                self._wake.clear()
            self._wake.wait(None if planned == math.inf else planned - now)

    def _fire(self, slot: _Slot) -> None:
        """End the call armed on ``slot`` (under the lock: disarming waits for this)."""
        slot.fired = True
        if slot.signalled and DEADLINE_SIGNAL is not None and signal.getsignal(DEADLINE_SIGNAL) is _on_signal:
            signal.pthread_kill(slot.ident, DEADLINE_SIGNAL)
            return
        # Off the main thread, or our signal handler was replaced since it was installed.
        slot.asynced = True
        _set_async_exc(slot.ident, ToolDeadline)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Runs on the main thread: ends the tool whose deadline fired, if it is still running."""
    slot = WATCHDOG._main_slot
    if slot is not None and slot.armed and slot.fired and not slot.delivered:
        slot.delivered = True
        raise ToolDeadline()


def _set_async_exc(ident: int, exc: type[BaseException] | None) -> None:
    """Set (or, with None, withdraw) the exception pending for thread ``ident``."""
    import ctypes

    function: Any = ctypes.pythonapi.PyThreadState_SetAsyncExc
    function.argtypes = (ctypes.c_ulong, ctypes.py_object)
    function(ident, ctypes.py_object() if exc is None else ctypes.py_object(exc))


#: The process's watchdog (its thread starts with the first deadline armed).
WATCHDOG = Watchdog()

if hasattr(os, "register_at_fork"):
    # A forked child has no watchdog thread and must not inherit a lock held mid-fire.
    os.register_at_fork(after_in_child=WATCHDOG._reset)
