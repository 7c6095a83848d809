"""The SSH forward that reaches a remote host's loopback server, through a real OpenSSH server.

An sshd of our own on 127.0.0.1 (its own host key, config and authorized key, all in tmp) plays
the remote host; a plain HTTP server on another loopback port plays the engine. On one machine
the forward's two ends need two ports; on a real host both are the server's port.
"""

from __future__ import annotations

import getpass
import http.server
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tp2qual.serving.launchers.base import free_port, port_is_free
from tp2qual.serving.launchers.docker.tunnel import SshTunnel, TunnelError, destination_argv

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    """(destination, ssh options) of a real sshd on 127.0.0.1 that accepts one key."""
    if not Path(SSHD).is_file() or not shutil.which("ssh-keygen"):
        if os.environ.get("TP2QUAL_REQUIRE_ENGINES"):
            pytest.fail("openssh-server is not installed")
        pytest.skip("needs openssh-server (sshd) for a real SSH forward")
    home = tmp_path_factory.mktemp("sshd")
    for name in ("host", "client"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / name)], check=True
        )
    shutil.copy(home / "client.pub", home / "authorized_keys")
    os.chmod(home / "authorized_keys", 0o600)
    port = free_port()
    config = home / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {home / 'host'}\n"
        f"AuthorizedKeysFile {home / 'authorized_keys'}\nPidFile {home / 'sshd.pid'}\n"
        "StrictModes no\nUsePAM no\nPasswordAuthentication no\nPermitRootLogin prohibit-password\n"
        "AllowTcpForwarding local\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege-separation directory
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while port_is_free(port):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "sshd did not listen"
        time.sleep(0.05)
    options = [
        "-i", str(home / "client"), "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
    ]  # fmt: skip
    try:
        yield f"{getpass.getuser()}@127.0.0.1:{port}", options
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


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
    options = [*options[2:], "-i", str(stranger), "-o", "IdentitiesOnly=yes"]
    tunnel = SshTunnel(destination, engine, local_port=free_port(), options=options)
    with pytest.raises(TunnelError, match="Permission denied"):
        tunnel.open(timeout_s=20)
