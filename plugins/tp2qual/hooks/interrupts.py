"""Interrupts plugin: a run that pytest stopped on Ctrl-C exits with pytest's status.

pytest handles the KeyboardInterrupt (exit status 2, ``INTERRUPTED``) and the suite settles the
run (servers stopped, candidates INCOMPLETE); what remains is CPython's own record of where the
interrupt passed through, which can turn that status into death by SIGINT
(``serving/interrupts.py``, ``forget_handled_interrupts``).
"""

from __future__ import annotations

import pytest

from tp2qual.serving.interrupts import forget_handled_interrupts


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Last of the run: every KeyboardInterrupt up to here was handled by pytest or the suite."""
    forget_handled_interrupts()
