"""The way to a remote host's server: an SSH local forward, loopback on both ends.

Servers bind 127.0.0.1 on their host (host networking), so a server on another machine is not
reachable at all from here — by design. ``ssh -N -L 127.0.0.1:L:127.0.0.1:P host`` makes it
reachable on this machine's loopback, and nowhere else (L is a free port here: the server's URL
uses it, its command keeps P). OpenSSH does the transport; the suite only opens the forward when
the container starts and closes it when the container stops.
``ExitOnForwardFailure`` turns a taken port into an error instead of a silent half-tunnel;
``BatchMode`` makes a missing key an error instead of a password prompt.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from urllib.parse import urlsplit

from tp2qual.serving.launchers.base import free_port, port_is_free

TUNNEL_ENV = "TP2QUAL_SSH_TUNNEL"  # set by hosts.bind: the ssh destination of the bound host
OPTIONS_ENV = "TP2QUAL_SSH_OPTIONS"  # extra ssh options of that host (hosts file ssh_options)


class TunnelError(RuntimeError):
    """The forward could not be opened. Not a statement about the candidate (no QualError): a
    suite error, so the finding is ERROR, never the candidate's FAIL."""


def destination_argv(destination: str) -> list[str]:
    """``user@host``, ``user@host:port`` or ``ssh://user@host:port`` as ssh arguments."""
    url = urlsplit(destination if "://" in destination else f"ssh://{destination}")
    target = f"{url.username}@{url.hostname}" if url.username else str(url.hostname)
    return [*(["-p", str(url.port)] if url.port else []), target]


class SshTunnel:
    def __init__(
        self,
        destination: str,
        remote_port: int,
        local_port: int | None = None,
        options: list[str] | None = None,
    ) -> None:
        self.destination = destination
        self.remote_port = remote_port
        self.local_port = local_port or remote_port
        self.options = options or []
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def argv(self) -> list[str]:
        forward = f"127.0.0.1:{self.local_port}:127.0.0.1:{self.remote_port}"
        return [
            "ssh", "-N", "-L", forward,
            "-o", "ExitOnForwardFailure=yes", "-o", "BatchMode=yes",
            "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3",
            *self.options, *destination_argv(self.destination),
        ]  # fmt: skip

    def open(self, timeout_s: float = 30.0) -> None:
        """Return once the local end listens; raise with ssh's own words if it cannot."""
        if not port_is_free(self.local_port):  # else the check below would see someone else
            raise TunnelError(f"ssh tunnel: local port {self.local_port} is already taken")
        self._proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # a terminal's Ctrl-C reaches the suite, which closes it
        )
        deadline = time.monotonic() + timeout_s
        while port_is_free(self.local_port):
            if self._proc.poll() is not None:
                _, err = self._proc.communicate()  # reads and closes its stderr
                said, code = err.decode(errors="replace"), self._proc.returncode
                self._proc = None
                raise TunnelError(
                    f"ssh tunnel to {self.destination} for port {self.remote_port} failed "
                    f"(exit {code}): {said.strip()[-300:]} "
                    f"[{shlex.join(self.argv)}]"
                )
            if time.monotonic() > deadline:
                self.close()
                raise TunnelError(f"ssh tunnel to {self.destination} not up in {timeout_s:.0f} s")
            time.sleep(0.1)

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def tunnel_for(port: int) -> SshTunnel | None:
    """The tunnel the bound host needs for a server on its ``port``, or None on this machine.
    Its local end is a free port of this machine: the two ends are on different machines and
    only by chance both free under one number (and on one machine, in tests, never)."""
    destination = os.environ.get(TUNNEL_ENV)
    if not destination:
        return None
    options = shlex.split(os.environ.get(OPTIONS_ENV, ""))
    return SshTunnel(destination, port, local_port=free_port(), options=options)
