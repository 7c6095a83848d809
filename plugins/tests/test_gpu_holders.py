"""Gate 00 names who holds the GPUs: a container whose device requests take them (the Docker
API shows it under WSL2, where NVML lists no process), with name, image, compose project and
labels, and says how to hand the GPUs over.

The pure half judges inspect dicts shaped as Docker writes them; the real half creates (never
starts: CI has no GPU) a container with a GPU device request on the real engine and reads it back
through the same listing gate 00 uses, created containers included.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tp2qual.checks.gpu_holders import holder_of
from tp2qual.checks.topology import check

GIB = 1024**3


def inspect(status: str = "running", ids: list[str] | None = None) -> dict[str, Any]:
    """A ``docker inspect`` of the user's live serve: ``--gpus all`` under compose."""
    return {
        "Id": "f00dfeedbeef" + "0" * 52,
        "Name": "/llm-primary",
        "State": {"Status": status},
        "Config": {
            "Image": "vllm/vllm-openai:r18",
            "Labels": {"com.docker.compose.project": "anvil", "role": "primary"},
        },
        "HostConfig": {
            "DeviceRequests": [
                {"Driver": "", "Count": -1 if ids is None else 0, "DeviceIDs": ids,
                 "Capabilities": [["gpu"]]}
            ]
        },
    }  # fmt: skip


def wsl2_busy(holders: list[dict[str, Any]]) -> dict[str, Any]:
    """Two GPUs under WSL2, each with 95 GiB used and no process listed (NVML lists none)."""
    gpus = [
        {"index": i, "name": "NVIDIA RTX PRO 6000 Blackwell", "uuid": f"GPU-{i}",
         "memory_total_bytes": 96 * GIB, "memory_used_bytes": 95 * GIB, "compute_processes": []}
        for i in range(2)
    ]  # fmt: skip
    read = "read from the Docker engine"
    return {"nvml_available": True, "host": {"wsl2": True}, "gpus": gpus,
            "gpu_containers": holders, "gpu_containers_read": read}  # fmt: skip


def test_a_container_with_a_gpu_device_request_is_a_holder():
    holder = holder_of(inspect())
    assert holder is not None
    assert holder["name"] == "llm-primary" and holder["compose_project"] == "anvil"
    assert holder["how"] == ["device request: all GPUs"]
    assert holder_of({**inspect(), "HostConfig": {}}) is None  # no GPU asked: not a holder


def test_gate_00_names_the_container_and_how_to_hand_over():
    verdict = check(wsl2_busy([holder_of(inspect())]), tp_size=2, min_memory_gib_per_gpu=90)
    assert not verdict.ok
    for index in (0, 1):
        assert f"GPU {index} (NVIDIA RTX PRO 6000 Blackwell) is busy" in verdict.reason
    assert (
        "held by container llm-primary (image vllm/vllm-openai:r18; compose project anvil;"
        " labels role=primary; device request: all GPUs)"
    ) in verdict.reason, verdict.reason
    assert "--hand-over NAME" in verdict.reason and "[handover] containers" in verdict.reason
    assert verdict.measures["gpu_containers"][0]["name"] == "llm-primary"


def test_a_holder_of_one_gpu_is_named_on_that_gpu_only():
    verdict = check(
        wsl2_busy([holder_of(inspect(ids=["1"]))]), tp_size=2, min_memory_gib_per_gpu=90
    )
    gpu0, gpu1 = verdict.reason.split("GPU 1 (")
    assert "llm-primary" not in gpu0 and "llm-primary" in gpu1


def test_a_running_holder_makes_a_gpu_busy_even_with_its_memory_free():
    snap = wsl2_busy([holder_of(inspect())])
    for g in snap["gpus"]:
        g["memory_used_bytes"] = 0  # a serve between loads still holds its device request
    verdict = check(snap, tp_size=2, min_memory_gib_per_gpu=90)
    assert not verdict.ok and verdict.measures["busy_gpus"] == [0, 1]


def test_a_created_holder_that_is_not_running_holds_nothing():
    snap = wsl2_busy([holder_of(inspect(status="created"))])
    for g in snap["gpus"]:
        g["memory_used_bytes"] = 0
    assert check(snap, tp_size=2, min_memory_gib_per_gpu=90).ok


@pytest.mark.slow
@pytest.mark.docker
def test_the_real_engine_lists_a_created_container_with_a_gpu_device_request(docker_engine):
    """Created, never started (CI has no GPU): the listing gate 00 uses names it when asked for
    created containers too, with the compose project and labels Docker keeps."""
    import docker

    from tp2qual.serving.launchers.docker.sweep import gpu_holders

    image = _any_local_image(docker_engine)
    name = f"tp2qual-selftest-gpu-holder-{uuid.uuid4().hex[:8]}"
    request = docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])
    container = docker_engine.containers.create(
        image, ["true"], name=name, device_requests=[request], network_mode="host",
        labels={"com.docker.compose.project": "anvil-selftest", "role": "primary"},
    )  # fmt: skip
    try:
        listed = {h["name"]: h for h in gpu_holders(docker_engine, include_created=True)}
        assert name in listed, sorted(listed)
        assert listed[name]["status"] == "created"
        assert listed[name]["compose_project"] == "anvil-selftest"
        assert listed[name]["how"] == ["device request: all GPUs"]
        assert name not in {h["name"] for h in gpu_holders(docker_engine)}  # not running
        running = {**listed[name], "status": "running"}  # as gate 00 would meet it on a GPU host
        verdict = check(wsl2_busy([running]), tp_size=2, min_memory_gib_per_gpu=90)
        assert f"held by container {name}" in verdict.reason
    finally:
        container.remove(force=True)


def _any_local_image(client: Any) -> str:
    images = [t for i in client.images.list() for t in i.tags]
    if not images:
        pytest.skip("self-test needs any local image to create a container from")
    return sorted(images)[0]
