"""The GPU hosts a run spreads over: a TOML hosts file, one Docker endpoint per host.

Each host is one Docker engine the suite drives through Docker's own remote endpoints: the
``DOCKER_HOST`` forms (``unix://``, ``ssh://user@host``, ``tcp://host:2376`` with TLS) or a Docker
context by name. One pytest-xdist worker owns one host for the whole session (``hooks/hosts.py``);
binding a worker to its host is setting that host's Docker environment, so every Docker call of
the suite — launcher, sweep, busy check, NCCL probe (the ``docker`` CLI) — goes to that engine.

How gate traffic reaches a server: servers bind 127.0.0.1 on their host (host networking, never a
bridge network), so an engine on this machine is reached on loopback; a remote engine's servers
are reached through an SSH tunnel the suite opens and closes (``ssh -L``), the one way to keep
both ends on loopback. A ``tcp://`` host therefore names an ``ssh`` destination for its tunnel.

    [[host]]
    name = "ws-a"                          # a word: it names the xdist group and the evidence
    docker = "unix:///var/run/docker.sock"  # or ssh://me@ws-b, tcp://ws-c:2376, or context = "x"
    tls = "~/.docker/ws-c"                  # tcp:// only: folder with ca.pem, cert.pem, key.pem
    ssh = "me@ws-c"                         # tunnel destination (ssh:// hosts: taken from docker)
    ssh_options = ["-i", "~/.ssh/qual"]     # extra arguments for the tunnel's ssh
    gpus = 2                                # what the host has: candidates are placed by [gpus]
    gpu_name = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    labels = ["pcie", "wsl2"]
"""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tp2qual.candidate import Candidate

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_KEYS = {"name", "docker", "context", "tls", "ssh", "ssh_options", "gpus", "gpu_name", "labels"}
_SCHEMES = ("unix", "ssh", "tcp")
# Everything that points this process's Docker clients and tunnels at a host.
DOCKER_ENV = (
    "DOCKER_HOST",
    "DOCKER_TLS_VERIFY",
    "DOCKER_CERT_PATH",
    "DOCKER_CONTEXT",
    "TP2QUAL_SSH_TUNNEL",
    "TP2QUAL_SSH_OPTIONS",
)


class HostsError(ValueError):
    """A hosts file that cannot be used; the message names the file, the host and the field."""


@dataclass(frozen=True)
class Host:
    name: str
    docker: str  # the engine endpoint, DOCKER_HOST form
    tls: str = ""  # DOCKER_CERT_PATH for a tcp:// engine (verification always on)
    ssh: str = ""  # tunnel destination; empty: the engine is on this machine (loopback)
    ssh_options: tuple[str, ...] = ()  # e.g. ("-i", "~/.ssh/qual"): for the tunnel's ssh
    gpus: int = 0
    gpu_name: str = ""
    labels: tuple[str, ...] = ()
    context: str = ""  # the Docker context it was read from, if any

    @property
    def tunnelled(self) -> bool:
        return bool(self.ssh)

    @property
    def local(self) -> bool:
        """The engine runs on this machine (a Unix socket or loopback TCP): its host's
        processes and ports are this machine's, so a process candidate may run here too."""
        return self.docker.startswith("unix://") or (
            self.docker.startswith("tcp://") and _is_loopback(self.docker)
        )

    def env(self) -> dict[str, str]:
        """The Docker environment that points every client (docker-py, the CLI) at this host."""
        env = {"DOCKER_HOST": self.docker}
        if self.tls:
            env |= {"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": self.tls}
        if self.ssh:  # read by serving/launchers/docker/tunnel.py when a server starts
            env["TP2QUAL_SSH_TUNNEL"] = self.ssh
            env["TP2QUAL_SSH_OPTIONS"] = shlex.join(self.ssh_options)
        return env

    def shown(self) -> dict[str, Any]:
        """What evidence says about the host: no credentials (a password in a URL is dropped)."""
        return {
            "name": self.name,
            "docker": without_password(self.docker),
            "context": self.context or None,
            "reached_by": f"ssh tunnel via {without_password(self.ssh)}"
            if self.ssh
            else "loopback",
            "gpus": self.gpus,
            "gpu_name": self.gpu_name or None,
            "labels": list(self.labels),
        }

    def why_not(self, candidate: Candidate) -> str | None:
        """Why this host cannot run the candidate (its ``[gpus]`` rule, its launcher), or None."""
        if candidate.launcher_kind != "docker" and not self.local:
            return f"a process candidate runs on this machine; host {self.name} is remote"
        needed = int(candidate.gpus.get("count", 0))
        if needed > self.gpus:
            return f"needs {needed} GPU(s), host {self.name} has {self.gpus}"
        wanted = candidate.gpus.get("name_contains")
        if needed and wanted and wanted not in self.gpu_name:
            return f"needs GPUs named like {wanted!r}, host {self.name} has {self.gpu_name!r}"
        return None


def without_password(url: str) -> str:
    """An endpoint or ssh destination (``user:pass@host``) with any password dropped."""
    scheme, sep, rest = url.rpartition("://")
    userinfo, at, place = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}@{place}"


def load_hosts(path: Path) -> list[Host]:
    """Read and check a hosts file; every problem is a ``HostsError`` naming where it is."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise HostsError(f"{path}: cannot read the hosts file ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise HostsError(f"{path}: not valid TOML: {exc}") from None
    extra = set(data) - {"host"}
    if extra:
        raise HostsError(f"{path}: unknown top-level key(s) {sorted(extra)}; hosts are [[host]]")
    entries = data.get("host")
    if not isinstance(entries, list) or not entries:
        raise HostsError(f"{path}: no [[host]] entries")
    hosts = [_host(path, i, entry) for i, entry in enumerate(entries)]
    seen: dict[str, int] = {}
    for i, host in enumerate(hosts):
        if host.name in seen:
            raise HostsError(
                f"{path}: host[{i}]: name {host.name!r} is also host[{seen[host.name]}]"
            )
        seen[host.name] = i
    return hosts


def _host(path: Path, index: int, entry: Any) -> Host:
    where = f"{path}: host[{index}]"
    if not isinstance(entry, Mapping):
        raise HostsError(f"{where}: must be a table")
    if isinstance(entry.get("name"), str):
        where = f"{where} {entry['name']!r}"
    if unknown := set(entry) - _KEYS:
        raise HostsError(f"{where}: unknown key(s) {sorted(unknown)} (known: {sorted(_KEYS)})")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise HostsError(f"{where}: name must be a word of letters, digits, '.', '_' or '-'")
    for key in ("docker", "context", "tls", "ssh", "gpu_name"):
        if key in entry and not isinstance(entry[key], str):
            raise HostsError(f"{where}: {key} must be a string")
    gpus = entry.get("gpus", 0)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise HostsError(f"{where}: gpus must be a whole number >= 0")
    labels = entry.get("labels", [])
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise HostsError(f"{where}: labels must be a list of strings")
    options = entry.get("ssh_options", [])
    if not isinstance(options, list) or not all(isinstance(x, str) for x in options):
        raise HostsError(f"{where}: ssh_options must be a list of strings (ssh arguments)")
    docker, tls, context = _endpoint(where, entry)
    ssh = entry.get("ssh", "")
    scheme = docker.split("://", 1)[0]
    if scheme == "ssh" and not ssh:
        ssh = docker.split("://", 1)[1]
    if scheme == "tcp" and not _is_loopback(docker) and not ssh:
        raise HostsError(
            f"{where}: servers bind 127.0.0.1 on their host; a remote tcp:// engine needs"
            " ssh = 'user@host' for the tunnel that reaches them"
        )
    if tls and not Path(tls).expanduser().is_dir():
        raise HostsError(f"{where}: tls folder {tls} does not exist (ca.pem, cert.pem, key.pem)")
    return Host(
        name=name,
        docker=docker,
        tls=str(Path(tls).expanduser()) if tls else "",
        ssh=ssh,
        gpus=gpus,
        gpu_name=entry.get("gpu_name", ""),
        labels=tuple(labels),
        ssh_options=tuple(os.path.expanduser(o) for o in options),
        context=context,
    )


def _endpoint(where: str, entry: Mapping[str, Any]) -> tuple[str, str, str]:
    """(endpoint, TLS folder, context name) from ``docker`` or ``context``: exactly one."""
    if ("docker" in entry) == ("context" in entry):
        raise HostsError(f"{where}: give exactly one of docker = 'URL' or context = 'NAME'")
    if "context" in entry:
        docker, tls = context_endpoint(entry["context"], where)
        return docker, entry.get("tls", tls), entry["context"]
    docker = entry["docker"]
    if docker.split("://", 1)[0] not in _SCHEMES or "://" not in docker:
        raise HostsError(f"{where}: docker must be a unix://, ssh:// or tcp:// URL, not {docker!r}")
    if docker.startswith("tcp://") and not entry.get("tls") and not _is_loopback(docker):
        raise HostsError(f"{where}: a remote tcp:// engine needs tls = 'folder' (never plain TCP)")
    return docker, entry.get("tls", ""), ""


def context_endpoint(name: str, where: str) -> tuple[str, str]:
    """A Docker context's endpoint and TLS folder, read by docker-py's own context store."""
    from docker.context import ContextAPI

    try:
        context = ContextAPI.get_context(name)
    except Exception as exc:  # docker-py raises its own errors for a broken store
        raise HostsError(f"{where}: Docker context {name!r} unreadable: {exc}") from None
    if context is None or not context.Host:
        raise HostsError(f"{where}: no Docker context named {name!r} (docker context ls)")
    tls = context.TLSConfig
    cert = getattr(tls, "cert", None) if tls else None
    folder = str(Path(cert[0]).parent) if cert else ""
    return str(context.Host), folder


def _is_loopback(url: str) -> bool:
    return urlsplit(url).hostname in ("127.0.0.1", "localhost", "::1")


@contextmanager
def bound(host: Host) -> Iterator[None]:
    """Point Docker at ``host`` for the block, then put the environment back."""
    before = {k: os.environ.get(k) for k in DOCKER_ENV}
    bind(host)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def bind(host: Host) -> None:
    """Point every Docker client of this process at ``host`` (a worker's whole session)."""
    for key in DOCKER_ENV:
        os.environ.pop(key, None)
    os.environ.update(host.env())
