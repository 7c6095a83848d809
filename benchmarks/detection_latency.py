"""Time from a server's death to the suite's failure report.

Start-up: the launcher starts the server, ``wait_ready`` polls, and a timer kills it (process
launcher: SIGKILL to the process group; Docker launcher: ``docker kill``) a set delay after the
start; measured: kill -> ``StartupExited`` raised by ``wait_ready``.

Mid-run: the server is ready, the gate's ``Api.stream_chat`` streams a long completion, and the
server is killed 0.5 s after the first chunk arrived; measured: kill -> the exception out of
``stream_chat`` (``ServerDied`` expected: a transport error followed by the liveness check).

    python benchmarks/detection_latency.py [--runs 5] [--skip-docker]

The kill instant is taken just before the kill is issued (for Docker that includes the CLI's
own time, printed separately). Prints each run and the median per case; target <= 2 s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _bench import ROOT, load_text, median, results_dir

from tp2qual.artifacts.layout import Evidence
from tp2qual.candidate import load_candidate
from tp2qual.exceptions import ServerDied, StartupExited
from tp2qual.perf.throughput import request_body
from tp2qual.redact import Redactor
from tp2qual.serving.launchers.base import Launcher
from tp2qual.serving.launchers.process import ProcessLauncher
from tp2qual.serving.readiness import wait_ready
from tp2qual.serving.server import Server

STARTUP_DELAYS_S = (0.1, 0.25, 0.4, 0.55, 0.7)  # local start-up takes ~1 s when idle
STREAM_TOKENS = 1024
DOCKER_IMAGE = "tp2qual/smollm2-llamacpp:local"


@dataclass
class Outcome:
    case: str
    detail: str
    latency_s: float | None
    raised: str
    kill_call_s: float
    exited_seen_s: float | None = None  # kill -> launcher.poll() reports the exit


def _kill_process(launcher: Any) -> None:
    os.killpg(launcher.pid, signal.SIGKILL)


def _kill_container(launcher: Any) -> None:
    subprocess.run(["docker", "kill", launcher.container_id], capture_output=True, check=True)


def _make_process(folder: Path) -> Launcher:
    candidate = load_candidate(ROOT / "candidates" / "smollm2-135m-local.toml")
    redactor = Redactor(candidate.env())
    return ProcessLauncher(candidate, folder / "server.log", redactor)


def _make_docker(folder: Path) -> Launcher:
    from tp2qual.serving.launchers.docker.launcher import DockerLauncher

    candidate = load_candidate(ROOT / "candidates" / "smollm2-135m-docker.toml")
    redactor = Redactor(candidate.env())
    run_id = f"bench-detect-{folder.name}-{os.getpid()}"
    return DockerLauncher(candidate, folder / "server.log", redactor, run_id=run_id)


class _Killer:
    """Kills on ``go`` (after ``delay_s``) in a thread and notes when the kill was issued."""

    def __init__(self, launcher: Any, kill: Callable[[Any], None]):
        self.launcher, self.kill = launcher, kill
        self.go = threading.Event()
        self.cancel = threading.Event()
        self.issued: float | None = None
        self.call_s = 0.0
        self.delay_s = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self._thread.start()

    def _run(self) -> None:
        while not self.go.wait(0.01):
            if self.cancel.is_set():
                return
        if self.cancel.wait(self.delay_s):
            return
        self.issued = time.monotonic()
        self.kill(self.launcher)
        self.call_s = time.monotonic() - self.issued

    def join(self) -> None:
        self.cancel.set()
        self._thread.join(30)


def startup_case(make: Callable[[Path], Launcher], kill: Callable[[Any], None],
                 folder: Path, delay_s: float, case: str) -> Outcome:  # fmt: skip
    launcher = make(folder)
    killer = _Killer(launcher, kill)
    raised, detected = "nothing (ready before the kill)", None
    try:
        launcher.start()
        killer.start(delay_s)
        killer.go.set()
        try:
            wait_ready(launcher, served_name=launcher.candidate.served_name, timeout_s=120)
        except StartupExited:
            detected = time.monotonic()
            raised = "StartupExited"
    finally:
        killer.join()
        launcher.stop()
    latency = detected - killer.issued if detected and killer.issued else None
    return Outcome(case, f"kill {delay_s:.1f}s after start", latency, raised, killer.call_s)


@contextlib.contextmanager
def _first_chunk_tap(server: Server, seen: threading.Event) -> Iterator[None]:
    """Set ``seen`` when the first SSE data line reaches Api._stream (same code path)."""
    original = server.http.stream

    @contextlib.contextmanager
    def stream(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with original(*args, **kwargs) as response:
            lines = response.iter_lines

            def tapped() -> Iterator[str]:
                for line in lines():
                    if line.startswith("data:"):
                        seen.set()
                    yield line

            response.iter_lines = tapped
            yield response

    server.http.stream = stream  # type: ignore[method-assign]
    try:
        yield
    finally:
        server.http.stream = original  # type: ignore[method-assign]


def midrun_case(make: Callable[[Path], Launcher], kill: Callable[[Any], None],
                folder: Path, case: str) -> Outcome:  # fmt: skip
    launcher = make(folder)
    killer = _Killer(launcher, kill)
    raised, detected = "nothing (stream ended before the kill)", None
    server: Server | None = None
    try:
        launcher.start()
        wait_ready(launcher, served_name=launcher.candidate.served_name, timeout_s=120)
        server = Server(launcher.candidate, launcher, Evidence(folder, Redactor()))
        settings = {"prompt_words": 96, "max_tokens": STREAM_TOKENS, "min_tokens": STREAM_TOKENS}
        body = request_body(launcher.candidate, settings, 1)
        killer.start(0.5)
        with _first_chunk_tap(server, killer.go):
            try:
                server.api("detect.jsonl").stream_chat("long", body, timeout=300)
            except ServerDied:
                detected, raised = time.monotonic(), "ServerDied"
            except Exception as exc:  # a raw transport error means liveness missed the death
                detected, raised = time.monotonic(), f"{type(exc).__name__} (not ServerDied)"
        exited_seen = _until_exited(launcher)
    finally:
        killer.join()
        if server is not None:
            server.close()
        launcher.stop()
    latency = detected - killer.issued if detected and killer.issued else None
    seen = exited_seen - killer.issued if exited_seen and killer.issued else None
    return Outcome(case, "kill 0.5s after the first chunk", latency, raised, killer.call_s, seen)


def _until_exited(launcher: Launcher, limit_s: float = 10.0) -> float | None:
    """When the launcher's own liveness check first reports the exit (bounded wait)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if launcher.poll() is not None:
            return time.monotonic()
        time.sleep(0.005)
    return None


def docker_unavailable() -> str | None:
    """Why the Docker part cannot run here, or None."""
    if shutil.which("docker") is None:
        return "no docker CLI on PATH"
    for command in (["docker", "info"], ["docker", "image", "inspect", DOCKER_IMAGE]):
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            return f"`{' '.join(command)}` did not answer in 30 s"
        if done.returncode != 0:
            return f"`{' '.join(command)}` failed: {done.stderr.strip()[-200:]}"
    return None


def run_cases(name: str, make: Callable[[Path], Launcher], kill: Callable[[Any], None],
              folder: Path, runs: int) -> list[Outcome]:  # fmt: skip
    outcomes = []
    for i in range(runs):
        delay = STARTUP_DELAYS_S[i % len(STARTUP_DELAYS_S)]
        sub = folder / f"{name}-startup-{i}"
        outcomes.append(startup_case(make, kill, sub, delay, f"{name} start-up"))
        _show(outcomes[-1])
    for i in range(runs):
        outcomes.append(midrun_case(make, kill, folder / f"{name}-midrun-{i}", f"{name} mid-run"))
        _show(outcomes[-1])
    return outcomes


def _show(o: Outcome) -> None:
    latency = f"{o.latency_s * 1e3:8.1f} ms" if o.latency_s is not None else "       -   "
    seen = f", poll() saw the exit at {o.exited_seen_s * 1e3:.0f} ms" if o.exited_seen_s else ""
    print(f"  {o.case:<22} {o.detail:<32} {latency}  {o.raised}  "
          f"(kill call {o.kill_call_s * 1e3:.0f} ms{seen})  {load_text()}", flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per case (bounded)")
    parser.add_argument("--skip-docker", action="store_true")
    parser.add_argument("--skip-process", action="store_true")
    args = parser.parse_args(argv)
    folder = results_dir("detection")
    print(f"results: {folder}\nstart: {load_text()}", flush=True)
    outcomes: list[Outcome] = []
    if not args.skip_process:
        outcomes += run_cases("process", _make_process, _kill_process, folder, args.runs)
    why = "skipped (--skip-docker)" if args.skip_docker else docker_unavailable()
    if why:
        print(f"docker launcher: not measured: {why}")
    else:
        outcomes += run_cases("docker", _make_docker, _kill_container, folder, args.runs)
    print()
    for case in dict.fromkeys(o.case for o in outcomes):
        got = [o.latency_s for o in outcomes if o.case == case and o.latency_s is not None]
        kinds = sorted({o.raised for o in outcomes if o.case == case})
        print(f"{case:<22} median {median(got) * 1e3:8.1f} ms over {len(got)} runs "
              f"(max {max(got, default=float('nan')) * 1e3:.1f} ms); raised: {kinds}")  # fmt: skip
        seen = [o.exited_seen_s for o in outcomes if o.case == case and o.exited_seen_s]
        if seen:
            print(f"{'':<22} launcher.poll() saw the exit: median {median(seen) * 1e3:.1f} ms, "
                  f"max {max(seen) * 1e3:.1f} ms after the kill")  # fmt: skip
    print(f"target: <= 2000 ms\nend: {load_text()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
