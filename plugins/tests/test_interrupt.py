"""Ctrl-C mid-run: the server's whole process group is stopped, the port is free again, and the
finding says INCOMPLETE with what was captured up to then."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tp2qual.candidate import load_candidate
from tp2qual.hooks.candidates import why_not_runnable
from tp2qual.serving.launchers.base import port_is_free

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "candidates" / "smollm2-135m-local.toml"

pytestmark = pytest.mark.slow


def _wait_for(path_glob: str, base: Path, timeout_s: float) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = sorted(base.glob(path_glob))
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"{path_glob} did not appear under {base} within {timeout_s}s")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigint_mid_run_leaves_nothing_running(tmp_path):
    reason = why_not_runnable(load_candidate(LOCAL))
    if reason:
        pytest.skip(reason)
    results = tmp_path / "results"
    pytest_run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-k",
            "smollm2-135m-local",
            f"--results={results}",
            "-p",
            "no:cacheprovider",
            "-q",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        ready = _wait_for("*/smollm2-135m-local/readiness.json", results, 120)
        time.sleep(1.0)  # into the gates
        pytest_run.send_signal(signal.SIGINT)
        output = pytest_run.communicate(timeout=60)[0].decode(errors="replace")
    finally:
        if pytest_run.poll() is None:
            pytest_run.kill()
    folder = ready.parent
    launch = json.loads((folder / "launch.json").read_text())
    finding = json.loads((folder / "finding.json").read_text())
    teardown = json.loads((folder / "teardown.json").read_text())
    port = int(launch["base_url"].rsplit(":", 1)[1])
    assert finding["verdict"] == "INCOMPLETE", output[-2000:]
    assert not _alive(launch["pid"]), "server process survived Ctrl-C"
    assert port_is_free(port) and teardown["port_free"] is True
    assert (folder / "server.log").stat().st_size > 0  # evidence kept
