"""The SSH forward that reaches a remote host's loopback server, through a real OpenSSH server.

An sshd of our own on 127.0.0.1 (its own host key, config and authorized key, all in tmp) plays
the remote host; a plain HTTP server on another loopback port plays the engine. On one machine
the forward's two ends need two ports; on a real host both are the server's port.
"""

from __future__ import annotations

import http.server
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sshd import running_sshd

from tp2qual.serving.launchers.base import free_port, port_is_free
from tp2qual.serving.launchers.docker.tunnel import SshTunnel, TunnelError, destination_argv


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    """(destination, ssh options) of a real sshd on 127.0.0.1 that accepts one key."""
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server.destination, server.options


@pytest.fixture
def engine() -> Iterator[int]:
    """A loopback HTTP server standing in for the engine; yields its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_destinations_become_ssh_arguments() -> None:
    assert destination_argv("qual@ws-a") == ["qual@ws-a"]
    assert destination_argv("qual@ws-a:2222") == ["-p", "2222", "qual@ws-a"]
    assert destination_argv("ssh://qual@ws-a:2222") == ["-p", "2222", "qual@ws-a"]


def test_the_forward_reaches_the_hosts_loopback_server_and_closes(
    sshd: tuple[str, list[str]], engine: int
) -> None:
    destination, options = sshd
    local = free_port()
    tunnel = SshTunnel(destination, engine, local_port=local, options=options)
    tunnel.open()
    try:
        response = httpx.get(f"http://127.0.0.1:{local}/", timeout=10)
        assert response.status_code == 200
    finally:
        tunnel.close()
    assert port_is_free(local)


def test_a_forward_that_cannot_listen_says_why(sshd: tuple[str, list[str]], engine: int) -> None:
    destination, options = sshd
    tunnel = SshTunnel(destination, engine, local_port=engine, options=options)  # port taken
    with pytest.raises(TunnelError, match=r"local port .* is already taken"):
        tunnel.open(timeout_s=20)


def test_a_host_that_refuses_the_forward_is_an_error(
    sshd: tuple[str, list[str]], engine: int
) -> None:
    destination, options = sshd
    host, _, _ = destination.rpartition(":")
    closed = free_port()  # nothing listens there: ssh cannot connect at all
    tunnel = SshTunnel(f"{host}:{closed}", engine, local_port=free_port(), options=options)
    with pytest.raises(TunnelError, match=r"ssh tunnel to .* failed \(exit 255\)"):
        tunnel.open(timeout_s=20)


def test_a_key_the_host_refuses_is_an_error_not_a_prompt(
    sshd: tuple[str, list[str]], engine: int, tmp_path: Path
) -> None:
    destination, options = sshd
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    options = [
        "-F", "/dev/null", "-i", str(stranger), "-o", "IdentitiesOnly=yes",
        "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
    ]  # fmt: skip
    tunnel = SshTunnel(destination, engine, local_port=free_port(), options=options)
    with pytest.raises(TunnelError, match="Permission denied"):
        tunnel.open(timeout_s=20)
