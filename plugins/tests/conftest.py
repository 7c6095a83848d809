"""Fixtures and tiers shared by the suite's self-tests.

Two tiers (``--tier``): ``fast`` (the default: pure checks, the plugin under ``pytester``, the
real llama.cpp only where a fast test cannot do without it) and ``slow`` (every test marked
``slow``: real engines behind the fault proxy, the verify matrix, Docker, vLLM, hosts); ``all``
runs both. A test file or node id named on the command line runs whatever its tier, and ``-m``
chooses by itself. docs/ci.md says what each tier proves and how long it takes.

``httpcore`` is imported here, before any in-process ``pytester`` run: pytester restores
``sys.modules`` after each inner run, and httpx maps httpcore's exceptions through a table it
builds on first use. Were httpcore first imported inside an inner run, the table would keep the
discarded module's classes, and every later transport error would escape as a raw httpcore error
instead of an ``httpx.TransportError`` (a dying server would no longer read as ``ServerDied``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpcore  # noqa: F401  (see below)
import pytest

from tp2qual.serving.launchers.docker.engine import docker_client, unavailable

TIERS = ("fast", "slow", "all")
# Three markers name the slow self-tests that must not share the cores or the Docker engines
# with one another: .ci/run runs them one at a time, in one pytest run, beside a second run of
# the other slow self-tests (llama.cpp behind the fault proxy, one core each):
# - ``docker``: a Docker inner run sweeps every other run's containers as it starts
#   (hooks/docker.py);
# - ``vllm_server``: vLLM's CPU server binds its threads to both cores;
# - ``paired_rates``: a floor relative to another serve's rate compares two measurements taken
#   minutes apart, which must see the same load.
_deselected_key = pytest.StashKey[tuple[str, int]]()  # (tier run, self-tests deselected)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier",
        choices=TIERS,
        default="fast",
        help="self-test tier: fast (default; no test marked slow), slow (only those), all",
    )


def _named(config: pytest.Config) -> set[Path]:
    """The test files the command line names one by one (a folder names no file)."""
    files = {Path(a.split("::", 1)[0]) for a in config.args}
    return {(config.invocation_params.dir / f).resolve() for f in files if f.suffix == ".py"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier = config.getoption("--tier")
    if tier == "all" or config.getoption("-m"):
        return
    named = _named(config)
    keep, drop = [], []
    for item in items:
        slow = item.get_closest_marker("slow") is not None
        wanted = slow == (tier == "slow") or item.path.resolve() in named
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
        config.stash[_deselected_key] = (tier, len(drop))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if (found := config.stash.get(_deselected_key, None)) is None:
        return
    tier, count = found
    other = "slow" if tier == "fast" else "fast"
    terminalreporter.write_line(
        f"tier {tier}: {count} self-tests of the {other} tier deselected "
        f"(run them with --tier {other}, or --tier all; docs/ci.md)"
    )


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
