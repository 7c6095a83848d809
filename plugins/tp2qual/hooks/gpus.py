"""GPUs plugin: what the machine's GPUs are, read once per candidate, ``--allow-busy`` and
``--desktop-mib``.

The ``gpu_snapshot`` fixture (NVML topology: names, UUIDs, memory, PCIe, NVLink, P2P status,
processes; WSL2) is written to ``topology.json`` the first time a candidate needs it — by gate 00,
which judges it, or by the server, which hands a container exactly those GPUs — so neither
depends on the other having run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tp2qual import gpu
from tp2qual.artifacts.finding import CandidateRecord
from tp2qual.candidate import Candidate


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tp2qual")
    group.addoption(
        "--allow-busy",
        action="store_true",
        help="let preflight pass when the target GPUs are in use (recorded)",
    )
    group.addoption(
        "--desktop-mib",
        type=float,
        default=None,
        metavar="MIB",
        help="memory a display's desktop may hold on the GPU driving it before preflight calls"
        " that GPU busy (default and minimum: checks/topology.py DESKTOP_TYPICAL_MIB, 3072)",
    )


# Who reads the GPUs a candidate runs on: NVML here, or (hosts plugin) a probe container on the
# candidate's Docker host, so GPU facts always come from the machine that serves.
snapshot_reader_key = pytest.StashKey[Callable[[Candidate], dict[str, Any]]]()


@pytest.fixture(scope="session")
def gpu_snapshot(
    request: pytest.FixtureRequest, candidate: Candidate, record: CandidateRecord
) -> dict[str, Any]:
    read = request.config.stash.get(snapshot_reader_key, None)
    snapshot = read(candidate) if read is not None else _local_snapshot()
    record.identity["topology"] = snapshot
    record.evidence.write_json("topology.json", snapshot)
    record.save()
    return snapshot


def _local_snapshot() -> dict[str, Any]:
    """NVML's view, with the containers that hold GPUs beside it: under WSL2 NVML lists no
    process, so Docker is the only one that can name a busy GPU's holder."""
    from tp2qual.serving.launchers.docker.sweep import gpu_holders_here

    snapshot = gpu.snapshot()
    if snapshot.get("nvml_available"):
        snapshot["gpu_containers"], snapshot["gpu_containers_read"] = gpu_holders_here()
    return snapshot


@pytest.fixture(scope="session")
def allow_busy(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("allow_busy"))


@pytest.fixture(scope="session")
def desktop_mib(request: pytest.FixtureRequest) -> float | None:
    """``--desktop-mib``, when given (the candidate's ``[gpus] desktop_mib`` is the other way)."""
    value = request.config.getoption("desktop_mib")
    return float(value) if value is not None else None
