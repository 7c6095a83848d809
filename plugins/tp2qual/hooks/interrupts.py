"""Interrupts plugin: a run that pytest stopped on Ctrl-C exits with pytest's status, and a
run sent SIGTERM (``kill``, a CI timeout, ``docker stop`` of a container running the suite)
stops the way Ctrl-C stops it.

pytest handles the KeyboardInterrupt (exit status 2, ``INTERRUPTED``) and the suite settles the
run (servers stopped, candidates INCOMPLETE); what remains is CPython's own record of where the
interrupt passed through, which can turn that status into death by SIGINT
(``serving/interrupts.py``, ``forget_handled_interrupts``).
"""

from __future__ import annotations

import pytest

from tp2qual.serving.interrupts import (
    forget_handled_interrupts,
    sigterm_as_ctrl_c,
    sigterm_restored,
)

_sigterm_set = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM's default kills pytest at once: the servers, each in a session of its own, would
    run on with the GPUs held and no finding written."""
    config.stash[_sigterm_set] = sigterm_as_ctrl_c()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Last of the run: every KeyboardInterrupt up to here was handled by pytest or the suite."""
    forget_handled_interrupts()
    if config.stash.get(_sigterm_set, False):
        sigterm_restored()
