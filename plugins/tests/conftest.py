"""Fixtures shared by the suite's self-tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tp2qual.docker_engine import docker_client, unavailable


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Any]:
    """A client of the real Docker engine (``.ci/run`` starts one); skip when none answers."""
    if why := unavailable():
        pytest.skip(f"self-test {why}")
    with docker_client(timeout=20) as engine:
        yield engine
