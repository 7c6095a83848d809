"""Fixtures shared by the suite's self-tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Any]:
    """A client of the real Docker engine (``.ci/run`` starts one); skip when none answers."""
    try:
        import docker

        engine = docker.from_env(timeout=20)
        engine.ping()
    except Exception as exc:
        pytest.skip(f"no Docker engine reachable ({type(exc).__name__}: {exc})")
    yield engine
    engine.close()
