"""Fixtures shared by the suite's self-tests.

``httpcore`` is imported here, before any in-process ``pytester`` run: pytester restores
``sys.modules`` after each inner run, and httpx maps httpcore's exceptions through a table it
builds on first use. Were httpcore first imported inside an inner run, the table would keep the
discarded module's classes, and every later transport error would escape as a raw httpcore error
instead of an ``httpx.TransportError`` (a dying server would no longer read as ``ServerDied``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpcore  # noqa: F401  (see below)
import pytest

from tp2qual.serving.launchers.docker.engine import docker_client, unavailable


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Any]:
    """A client of the real Docker engine (``.ci/run`` starts one); skip when none answers."""
    if why := unavailable():
        pytest.skip(f"self-test {why}")
    with docker_client(timeout=20) as engine:
        yield engine


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """``TP2QUAL_SKIPPED_LOG=FILE``: append the node id of every skipped self-test, so CI can
    run exactly those again once the engines they wanted are up (``.ci/run``)."""
    log = os.environ.get("TP2QUAL_SKIPPED_LOG")
    if log and report.skipped and report.when in ("setup", "call"):
        with open(log, "a") as out:
            out.write(report.nodeid + "\n")
