"""A real OpenSSH server on 127.0.0.1 for the self-tests, and an ``ssh`` that trusts it.

The server (its own host key, config and one authorized key, all in a temporary folder) plays a
remote host. The client side is configured the way a user would, in an ssh config file, never in
``~/.ssh``: a small ``ssh`` first on ``PATH`` adds ``-F <that file>``, so every ssh the suite and
docker-py start (the forward, ``ssh://`` endpoints) finds the key and the host.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tp2qual.serving.launchers.base import free_port, port_is_free

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@dataclass(frozen=True)
class Sshd:
    destination: str  # user@127.0.0.1:port
    options: list[str]  # what a tunnel needs to reach it without the PATH wrapper
    bin_dir: Path  # put first on PATH: its ssh reads the client config


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@contextmanager
def running_sshd(home: Path) -> Iterator[Sshd]:
    if not Path(SSHD).is_file() or not shutil.which("ssh-keygen"):
        if os.environ.get("TP2QUAL_REQUIRE_ENGINES"):
            pytest.fail("openssh-server is not installed")
        pytest.skip("needs openssh-server (sshd) for a real SSH server")
    _keygen(home / "host")
    _keygen(home / "client")
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
    client = home / "ssh_config"
    client.write_text(
        f"Host *\n  IdentityFile {home / 'client'}\n  IdentitiesOnly yes\n"
        "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
    )
    bin_dir = home / "bin"
    bin_dir.mkdir()
    real = shutil.which("ssh") or "/usr/bin/ssh"
    (bin_dir / "ssh").write_text(f'#!/bin/sh\nexec {real} -F {client} "$@"\n')
    (bin_dir / "ssh").chmod(0o755)
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege-separation directory
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while port_is_free(port):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "sshd did not listen"
            time.sleep(0.05)
        yield Sshd(f"{getpass.getuser()}@127.0.0.1:{port}", ["-F", str(client)], bin_dir)
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
