"""What a Docker candidate's container is created with: one function builds the SDK arguments
(``run_kwargs``); ``start()`` passes them to the SDK and ``plan()`` renders them as ``docker run``,
so the two cannot drift. Labels mark everything we create."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tp2qual.gpu import host_info
from tp2qual.launch import ResolvedLaunch
from tp2qual.redact import MASK, Redactor, is_secret_name

INSPECT_FILE = "container-inspect.json"


def is_wsl2() -> bool:
    return bool(host_info()["wsl2"])


def gpu_request(
    count: int, *, wsl2: bool, device_ids: Sequence[str] = ()
) -> tuple[list[dict[str, Any]], str]:
    """DeviceRequests (as plain dicts, the API's own shape) and a words-for-humans mode."""
    if count <= 0:
        return [], "none"
    if wsl2:  # NVIDIA's WSL notes: with the container toolkit only --gpus all works
        return (
            [
                {
                    "Driver": "",
                    "Count": -1,
                    "DeviceIDs": None,
                    "Capabilities": [["gpu"]],
                    "Options": {},
                }
            ],
            f"all GPUs (WSL2: devices cannot be picked; needs {count})",
        )
    if device_ids:
        return (
            [
                {
                    "Driver": "",
                    "Count": 0,
                    "DeviceIDs": list(device_ids),
                    "Capabilities": [["gpu"]],
                    "Options": {},
                }
            ],
            f"devices {','.join(device_ids)}",
        )
    return (
        [
            {
                "Driver": "",
                "Count": count,
                "DeviceIDs": None,
                "Capabilities": [["gpu"]],
                "Options": {},
            }
        ],
        f"count {count}",
    )


def run_kwargs(launch: ResolvedLaunch) -> dict[str, Any]:
    """Keyword arguments for ``client.containers.create`` (and, rendered, for ``docker run``):
    the resolved launch in the SDK's shape, nothing filled or chosen here."""
    container = launch.container
    if container is None:
        raise ValueError(f"{launch.candidate}: a {launch.kind} launch has no container")
    requests, _ = gpu_request(container.gpus, wsl2=container.wsl2, device_ids=container.device_ids)
    kwargs: dict[str, Any] = {
        "image": container.image,
        "command": list(launch.command),
        "name": container.name,
        "detach": True,
        "init": True,  # tini as PID 1: signals reach the engine, zombies are reaped
        "environment": dict(launch.env),
        "labels": dict(container.labels),
        "network_mode": "host",  # only 127.0.0.1 is ever a target; no bridge networks here
    }
    if container.entrypoint:
        kwargs["entrypoint"] = list(container.entrypoint)
    if container.ipc_host:
        kwargs["ipc_mode"] = "host"
    if container.ulimits:
        kwargs["ulimits"] = [{"Name": k, "Soft": v, "Hard": v} for k, v in container.ulimits]
    if container.mounts:
        kwargs["volumes"] = {m.host: {"bind": m.inside, "mode": m.mode} for m in container.mounts}
    if requests:
        kwargs["device_requests"] = requests
    return kwargs


PROBE_LABEL = "tp2qual.serving.probe"


def probe_kwargs(
    server: Mapping[str, Any], probe_file: Path, inside: str, args: Sequence[str]
) -> dict[str, Any]:
    """The NCCL probe's container: the server's own run arguments (image, GPUs, IPC, ulimits,
    environment, mounts) with the probe file mounted and run instead of the engine, removed
    when done. So the probe vouches for the conditions the server will run under."""
    volumes = dict(server.get("volumes", {}))
    volumes[str(probe_file)] = {"bind": inside, "mode": "ro"}
    return {
        **{k: v for k, v in server.items() if k not in ("detach", "volumes", "entrypoint")},
        "name": f"{server['name']}-nccl-probe",
        "entrypoint": ["python3", inside],
        "command": list(args),
        "volumes": volumes,
        "labels": {**server.get("labels", {}), PROBE_LABEL: "1"},
        "auto_remove": True,
    }


def sdk_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The builder's plain dicts turned into the SDK's types, for ``containers.create``."""
    from docker.types import DeviceRequest, Ulimit

    out = {k: v for k, v in kwargs.items() if k != "detach"}
    if "ulimits" in out:
        out["ulimits"] = [
            Ulimit(name=u["Name"], soft=u["Soft"], hard=u["Hard"]) for u in out["ulimits"]
        ]
    if "device_requests" in out:
        out["device_requests"] = [
            DeviceRequest(
                driver=r["Driver"],
                count=r["Count"],
                device_ids=r["DeviceIDs"],
                capabilities=r["Capabilities"],
                options=r["Options"],
            )
            for r in out["device_requests"]
        ]
    return out


def render_docker_run(kwargs: Mapping[str, Any], redactor: Redactor | None = None) -> str:
    """The exact ``docker run`` equivalent of ``kwargs`` (secrets masked), shlex-quoted."""
    env = dict(kwargs.get("environment", {}))
    if redactor is not None:
        env = redactor.mapping(env)
    else:
        env = {k: (MASK if is_secret_name(k) else v) for k, v in env.items()}
    args = ["docker", "run"] + (["--detach"] if kwargs.get("detach") else [])
    args += ["--rm"] if kwargs.get("auto_remove") else []
    args += ["--name", kwargs["name"]]
    args += ["--init"] if kwargs.get("init") else []
    args += ["--network", kwargs["network_mode"]]
    args += ["--ipc", kwargs["ipc_mode"]] if "ipc_mode" in kwargs else []
    for u in kwargs.get("ulimits", []):
        args += ["--ulimit", f"{u['Name']}={u['Soft']}:{u['Hard']}"]
    for request in kwargs.get("device_requests", []):
        args += ["--gpus", _gpus_flag(request)]
    for host, bind in kwargs.get("volumes", {}).items():
        args += ["--volume", f"{host}:{bind['bind']}:{bind['mode']}"]
    for key, value in kwargs.get("labels", {}).items():
        args += ["--label", f"{key}={value}"]
    for key, value in env.items():
        args += ["--env", f"{key}={value}"]
    entrypoint = list(kwargs.get("entrypoint") or [])
    args += ["--entrypoint", entrypoint[0]] if entrypoint else []
    args += [kwargs["image"], *entrypoint[1:], *kwargs["command"]]
    argv = redactor.argv(args) if redactor is not None else args
    return shlex.join(argv)


def _gpus_flag(request: Mapping[str, Any]) -> str:
    if request["DeviceIDs"]:
        return '"device=' + ",".join(request["DeviceIDs"]) + '"'
    return "all" if request["Count"] == -1 else str(request["Count"])
