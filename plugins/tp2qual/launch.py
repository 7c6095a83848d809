"""A candidate's launch, resolved once: the one value every part that starts, asks about or
records a server reads.

``resolve_launch`` fills the candidate's ``{name}`` placeholders (``candidate_file.fill``) and
settles everything the start depends on: argv, environment, port, and for a container the image
reference, mounts, ulimits, IPC, GPUs, name and labels. ``--plan`` renders it, gate 00's engine
check asks the engine about its argv, the process and Docker launchers start it, and the
identity record and ``launch.json`` write it. So what was approved, what was printed and what
started cannot be three different argvs (the way vLLM resolves ``EngineArgs`` once into one
``VllmConfig``, and testcontainers builds a container's whole spec before ``start()``).
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from tp2qual.candidate import Candidate
from tp2qual.candidate_file import fill
from tp2qual.exceptions import CandidateError
from tp2qual.gpu import host_info
from tp2qual.image_ref import image_reference
from tp2qual.model_cache import cache_volume

LOOPBACK = "127.0.0.1"  # only loopback is ever a target
RUN_LABEL = "tp2qual.run"
CANDIDATE_LABEL = "tp2qual.candidate"
SESSION_LABEL = "tp2qual.session"
# host:pid:random: one per Python process, so a sweep can tell a live session from a dead one.
SESSION = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
CONTAINER_HF_CACHE = "/root/.cache/huggingface/hub"


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Mount:
    """A read-only mount into the container: a host path (absolute), or with ``volume`` the
    name of a Docker named volume (Docker takes either where ``host`` goes)."""

    host: str
    inside: str
    mode: str = "ro"
    volume: bool = False


@dataclass(frozen=True)
class Container:
    """What a Docker candidate's container is created with, beyond argv and environment."""

    image: str  # the reference Docker is asked for (tp2qual.image_ref)
    pin: str  # launch.docker.pin as written; the launcher proves the image against it
    name: str
    labels: Mapping[str, str]
    entrypoint: tuple[str, ...]  # the first len(entrypoint) words of the launch's argv
    mounts: tuple[Mount, ...]
    ulimits: tuple[tuple[str, int], ...]
    ipc_host: bool
    shm_size: str | None
    gpus: int
    device_ids: tuple[str, ...]
    wsl2: bool


@dataclass(frozen=True)
class ResolvedLaunch:
    """One candidate's launch, every placeholder filled. ``argv`` is what runs: the command
    (a process) or entrypoint + command (a container)."""

    candidate: str
    engine: str
    kind: str  # "process" | "docker"
    port: int
    argv: tuple[str, ...]
    env: Mapping[str, str]  # every variable the server starts with
    python: str  # the interpreter {python} names on this machine (a process's engine venv)
    model_pin: Mapping[str, str]  # what the weights are pinned by: revision, file
    container: Container | None = None
    values: Mapping[str, str] = field(default_factory=dict, repr=False)  # the placeholders

    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def command(self) -> tuple[str, ...]:
        """The argv after a container's entrypoint (all of it for a process)."""
        skip = len(self.container.entrypoint) if self.container else 0
        return self.argv[skip:]

    def fill(self, text: str) -> str:
        """A launch string of the candidate's, filled as the launch was (a lane's changes)."""
        return fill(text, self.values)


def resolve_launch(
    candidate: Candidate,
    *,
    port: int = 0,
    run_id: str = "plan",
    session: str = SESSION,
    wsl2: bool | None = None,
    device_ids: Sequence[str] = (),
) -> ResolvedLaunch:
    """The candidate's launch. ``port``: 0 takes ``launch.port``, else a free loopback port now;
    ``wsl2``: None reads this host's (a container's GPU request depends on it). A bad mount or
    placeholder raises CandidateError here, before anything starts."""
    port = port or int(candidate.launch.get("port", 0)) or free_port()
    if candidate.launcher_kind != "docker":
        values = candidate.placeholders(port=port)
        argv = tuple(fill(part, values) for part in candidate.command)
        return _launch(candidate, port, argv, candidate.env(), values)
    values = candidate.placeholders(port=port) | {"python": "python3"}
    docker = candidate.launch["docker"]
    env = candidate.env() | {"HF_HUB_OFFLINE": "1"}
    mounts = []
    if hf_cache := candidate.model.get("hf_cache"):
        mounts.append(cache_mount(hf_cache))
        env.setdefault("HF_HUB_CACHE", CONTAINER_HF_CACHE)
    mounts += [
        parse_mount(entry, values, candidate.path.parent) for entry in docker.get("mounts", [])
    ]
    count = int(candidate.gpus.get("count", 0))
    entrypoint = tuple(str(a) for a in docker.get("entrypoint", ()))
    container = Container(
        # repo@digest for a digest pin without a tag: Docker reads a bare repo as :latest
        image=image_reference(docker["image"], docker["pin"]),
        pin=docker["pin"],
        name=container_name(candidate.name, run_id),
        labels=MappingProxyType(
            {RUN_LABEL: run_id, CANDIDATE_LABEL: candidate.name, SESSION_LABEL: session}
        ),
        entrypoint=entrypoint,
        mounts=tuple(_one_per_host(mounts)),
        ulimits=tuple((k, int(v)) for k, v in sorted(docker.get("ulimits", {}).items())),
        # NCCL's SHM transport needs a large /dev/shm: the host's. A shm_size asks for the same
        # (Docker sizes only a private /dev/shm, so it is recorded, not passed).
        ipc_host=bool(docker.get("ipc_host") or docker.get("shm_size")),
        shm_size=docker.get("shm_size"),
        gpus=count,
        device_ids=tuple(device_ids),
        wsl2=bool(host_info()["wsl2"]) if wsl2 is None else wsl2,
    )
    argv = entrypoint + tuple(fill(part, values) for part in candidate.command)
    return _launch(candidate, port, argv, env, values, container)


def _launch(
    candidate: Candidate,
    port: int,
    argv: tuple[str, ...],
    env: Mapping[str, str],
    values: Mapping[str, str],
    container: Container | None = None,
) -> ResolvedLaunch:
    pin: dict[str, str] = {
        k: str(candidate.model[k]) for k in ("revision", "file") if k in candidate.model
    }
    return ResolvedLaunch(
        candidate=candidate.name,
        engine=candidate.engine,
        kind=candidate.launcher_kind,
        port=port,
        argv=argv,
        env=MappingProxyType(dict(env)),
        python=str(candidate.python()),
        model_pin=MappingProxyType(pin),
        container=container,
        values=MappingProxyType(dict(values)),
    )


def cache_mount(hf_cache: str) -> Mount:
    """The hub cache's read-only mount: a named volume as it is named, a host path absolute."""
    if (volume := cache_volume(hf_cache)) is not None:
        return Mount(volume, CONTAINER_HF_CACHE, volume=True)
    return Mount(str(Path(hf_cache).expanduser()), CONTAINER_HF_CACHE)


def _one_per_host(mounts: Sequence[Mount]) -> list[Mount]:
    """Docker's volume map holds one bind per host path: the last one written wins."""
    return list({m.host: m for m in mounts}.values())


def parse_mount(entry: str, values: Mapping[str, str], base: Path) -> Mount:
    """``host:container[:ro]`` -> a Mount (host path made absolute); read-write refused."""
    parts = fill(entry, values).split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise CandidateError(f"launch.docker.mounts: {entry!r} is not host:container[:ro]")
    if len(parts) == 3 and set(parts[2].split(",")) - {"ro", "z", "Z"}:
        raise CandidateError(f"launch.docker.mounts: {entry!r}: mounts are read-only (:ro)")
    host = Path(parts[0]).expanduser()
    return Mount(str(host if host.is_absolute() else (base / host).resolve()), parts[1])


def container_name(candidate: str, run_id: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", f"tp2qual-{candidate}-{run_id}")
