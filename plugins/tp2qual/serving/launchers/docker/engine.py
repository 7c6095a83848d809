"""The one way the suite opens the Docker engine.

No engine is a normal state (Docker Desktop stopped, a laptop, a CI runner): ``unavailable()``
says why in one line and never raises. Every client is closed on every path. docker-py leaks the
socket of a failed Unix-socket connect (its ``UnixHTTPConnection`` never closes it), which a
strict ``filterwarnings = error`` turns into an error pinned on whatever test runs next, so a
Unix-socket engine is reached with a plain socket first and a client is made only when it answers.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

DEFAULT_HOST = "unix:///var/run/docker.sock"
API_TIMEOUT_S = 30.0


def engine_url() -> str:
    return os.environ.get("DOCKER_HOST") or DEFAULT_HOST


def open_client(timeout: float = API_TIMEOUT_S) -> Any:
    """A client of the engine ``DOCKER_HOST`` names; the caller closes it."""
    import docker

    # ssh:// through the ssh client (the user's keys and ~/.ssh/config), not paramiko's own
    over_ssh = engine_url().startswith("ssh://")
    if over_ssh:
        _close_ssh_sockets_whole()
    return docker.from_env(timeout=int(timeout), use_ssh_client=over_ssh)


@cache
def _close_ssh_sockets_whole() -> None:
    """docker-py's ``SSHSocket.close`` (7.1) terminates its ``ssh`` but never reaps it, closes
    its pipes, or closes the socket object it is: three ResourceWarnings per connection, which a
    strict ``filterwarnings = error`` pins on whatever test runs next. Close all of it."""
    import socket as socket_module

    from docker.transport import sshconn

    def close(self: Any) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
            proc.communicate()  # reaps it and closes its pipes
        socket_module.socket.close(self)

    sshconn.SSHSocket.close = close


@contextmanager
def docker_client(timeout: float = API_TIMEOUT_S) -> Iterator[Any]:
    """A client of the engine ``DOCKER_HOST`` names, closed when the block ends."""
    client = open_client(timeout)
    try:
        yield client
    finally:
        client.close()


def _socket_answers(path: str, timeout: float) -> str | None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError as exc:
            return exc.strerror or type(exc).__name__
    return None


def unavailable(timeout: float = 5.0) -> str | None:
    """Why no Docker engine can be used here, or None when one answers a ping."""
    return _unavailable(engine_url(), timeout)


@cache  # per endpoint: a worker bound to a host asks about that host
def _unavailable(url: str, timeout: float) -> str | None:
    if url.startswith("unix://") and (problem := _socket_answers(url[7:], timeout)):
        return f"needs a running Docker engine (none answers at {url}: {problem})"
    try:
        with docker_client(timeout) as client:
            client.ping()
    except Exception as exc:  # any failure to reach it is the same fact: no engine
        return f"needs a running Docker engine ({url}: {type(exc).__name__})"
    return None
