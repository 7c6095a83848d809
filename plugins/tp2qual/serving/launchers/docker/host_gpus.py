"""GPU facts read on a Docker host, not on the machine that runs pytest.

A short-lived container of the candidate's own image runs ``tp2qual/gpu.py`` (stdlib and pynvml
only) and prints the NVML snapshot the preflight gate judges. The script is copied in through the
engine's API (``put_archive``), never bind-mounted, so it works the same on a remote engine; the
container uses host networking and the run's labels, so a sweep finds it if anything goes wrong.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

from tp2qual import gpu
from tp2qual.launch import RUN_LABEL, SESSION, SESSION_LABEL
from tp2qual.serving.launchers.docker.engine import docker_client

IN_CONTAINER = "/tmp/tp2qual_gpu.py"


def _archive(source: Path, name: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = source.read_bytes()
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def container_snapshot(
    image: str, *, gpus: int, run_id: str, timeout_s: float = 120.0
) -> dict[str, Any]:
    """The snapshot as the host's NVML gives it; never raises (a failure is the ``error``)."""
    from docker.types import DeviceRequest

    requests = [DeviceRequest(count=-1, capabilities=[["gpu"]])] if gpus else []
    try:
        with docker_client(timeout_s) as client:
            container = client.containers.create(
                image,
                entrypoint=["python3", IN_CONTAINER],
                command=[],
                network_mode="host",
                device_requests=requests,
                labels={RUN_LABEL: run_id, SESSION_LABEL: SESSION},
            )
            try:
                container.put_archive("/tmp", _archive(Path(gpu.__file__), Path(IN_CONTAINER).name))
                container.start()
                status = container.wait(timeout=timeout_s)
                out = container.logs(stdout=True, stderr=False).decode(errors="replace")
                err = container.logs(stdout=False, stderr=True).decode(errors="replace")
            finally:
                container.remove(force=True)
    except Exception as exc:  # the host said no: that is the snapshot's answer
        return _failed(f"{type(exc).__name__}: {exc}"[:500])
    if status.get("StatusCode") != 0:
        tail = (err or out).strip().splitlines()[-3:]
        return _failed(f"probe exited {status.get('StatusCode')}: {' | '.join(tail)}")
    try:
        snapshot = json.loads(out)
    except ValueError:
        return _failed(f"probe printed no JSON: {out[:200]!r}")
    snapshot["source"] = "nvml-container"
    return dict(snapshot)


def _failed(error: str) -> dict[str, Any]:
    """No answer from the host: say so, and claim nothing about it (not this machine's facts)."""
    snapshot = gpu.empty_snapshot("nvml-container", error)
    snapshot["host"] = {"hostname": None, "os": None, "kernel": None, "wsl2": None}
    return snapshot
