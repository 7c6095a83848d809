"""Ctrl-C while a server is being started or stopped takes effect when that step is done.

Python raises KeyboardInterrupt wherever the main thread happens to be. Two places must not be
cut in half: ``subprocess.Popen`` after its fork (the server runs in a session of its own, so the
Ctrl-C never reaches it, and the launcher would never learn its pid to stop it), and the stop
itself (SIGTERM sent, the wait cut short, SIGKILL never sent: a second, impatient Ctrl-C would
leave the server running). Inside ``interrupts_deferred()`` SIGINT is only noted; the
KeyboardInterrupt is raised as the block ends, so the run still stops — and stops clean.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

# What a user is promised after Ctrl-C: each server stopped within its own ``stop_timeout_s``
# (SIGTERM, then SIGKILL), and the run settled (findings INCOMPLETE, manifest, report) within
# this much more, on a machine whose every core is busy with other work (docs/ci.md).
SETTLE_AFTER_STOP_S = 45.0


def interrupt_bound_s(stop_timeout_s: float) -> float:
    """How long a run may take to exit after Ctrl-C, for servers with this stop timeout."""
    return stop_timeout_s + SETTLE_AFTER_STOP_S


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    with interrupts_at_safe_points():
        yield


@contextmanager
def interrupts_at_safe_points() -> Iterator[Callable[[], None]]:
    """Inside, SIGINT is only noted; the ``checkpoint()`` it yields raises the KeyboardInterrupt
    at a point the caller chose (between readiness polls), and the block's end raises it if it
    is still pending. So a Ctrl-C never lands inside an import or a finalizer, where Python
    reports it as "Exception ignored" and the run goes on (seen during start-up under load)."""
    before = signal.getsignal(signal.SIGINT)
    # Only the main thread may set handlers (and only it is interrupted). A handler that is not a
    # Python callable (SIG_IGN: the run was started ignoring Ctrl-C; SIG_DFL) has nothing to defer.
    if threading.current_thread() is not threading.main_thread() or not callable(before):
        yield lambda: None
        return
    caught: list[tuple[int, FrameType | None]] = []

    def checkpoint() -> None:
        if caught:
            signum, frame = caught.pop(0)
            caught.clear()
            before(signum, frame)  # what Python would have done: default_int_handler raises

    signal.signal(signal.SIGINT, lambda signum, frame: caught.append((signum, frame)))
    try:
        yield checkpoint
    finally:
        signal.signal(signal.SIGINT, before)
        checkpoint()


def _terminated(signum: int, frame: FrameType | None) -> None:
    """SIGTERM taken as Ctrl-C: through SIGINT's handler, so a deferred step still ends first;
    where SIGINT is ignored (a background job of a script), raised all the same."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt("SIGTERM")


def sigterm_as_ctrl_c() -> bool:
    """Stop on SIGTERM as on Ctrl-C (servers stopped, findings INCOMPLETE), where SIGTERM is at
    its default (a handler someone else set, or an outer run's, is left alone); main thread
    only. True when it was set here, to be undone by ``sigterm_restored``."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False
    signal.signal(signal.SIGTERM, _terminated)
    return True


def sigterm_restored() -> None:
    """SIGTERM back at its default (``sigterm_as_ctrl_c`` set it)."""
    if signal.getsignal(signal.SIGTERM) is _terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def forget_handled_interrupts() -> None:
    """Clear CPython's mark of an unhandled Ctrl-C once every Ctrl-C so far has been handled.

    Under ``python -m``, ``Py_RunMain`` (Modules/main.c) ends the process *by SIGINT* when the
    runtime's ``unhandled_keyboard_interrupt`` flag is set. Up to 3.13, ``run_eval_code_obj``
    (Python/pythonrun.c) sets it whenever a KeyboardInterrupt leaves code that ``exec``/``eval``
    compiled from a string (a dataclass's generated methods, a namedtuple), even when a caller
    then handles it: a Ctrl-C that lands there during start-up made a run that pytest had
    stopped, settled and reported exit -2 instead of pytest's 2. Each such ``exec`` clears the
    flag before it runs, so one trivial ``exec`` clears the stale mark; a KeyboardInterrupt that
    later really escapes still sets it (``pymain_run_module``). CPython 3.14 sets the flag only
    for an interrupt that reaches the top (gh-128130), where this does nothing."""
    exec("pass", {})  # a constant: see above
