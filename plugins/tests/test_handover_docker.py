"""The hand-over on a real Docker engine, with a real container standing in for the user's live
serve: the llama.cpp image serving SmolLM2, started before the run with a Docker healthcheck and
named for hand-over (``--hand-over NAME``).

Proved per run, from the inner run's own records and from the engine itself:

* the stand-in is found stopped (never removed) at every gate call of the candidate (an inner
  plugin asks the engine at each call), and is running and healthy after the run;
* ``handover.json`` holds before and after, they match, and verify agrees (it judges
  "restored" again from the two states);
* that holds on a clean run (the candidate PASSes), on a run where the candidate FAILs a gate
  (the fault proxy answers wrong), and on a run stopped with Ctrl-C in the middle of a gate;
* ``python -m tp2qual restore RUN`` gives the serve back from the record alone, as after a
  killed suite.

The inner candidate is the cheap self-test copy of smollm2-135m-local (gate 07 not applicable).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ctrl_c import (
    children_get_default_sigint,
    interrupt_bound_s,
    park_env,
    reap_servers,
    wait_parked,
)
from test_faults import MAIN, run_inner, smollm2_spec, with_fault, write_candidate

from tp2qual.serving.handover import HandOverPlan, gpus_free, hand_over, read_record

pytestmark = [pytest.mark.slow, pytest.mark.docker]

IMAGE = "tp2qual/smollm2-llamacpp:local"
HEALTHY_WITHIN_S = 180  # the stand-in loads a 135M model on a shared 2-core machine

# Inner plugin: at each gate call, the stand-in's state as the engine reports it.
WATCH_PLUGIN = """
import json, os, subprocess

def pytest_runtest_call(item):
    state = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}}", os.environ["STANDIN"]],
                           capture_output=True, text=True).stdout.strip()
    with open(os.environ["STANDIN_SEEN"], "a") as out:
        out.write(json.dumps({"nodeid": item.nodeid, "status": state}) + "\\n")
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_stand_in(client: Any, *, healthcheck: bool) -> tuple[Any, int]:
    """SmolLM2 on llama.cpp in the image, host network, on a free port; with a Docker
    healthcheck or without (then only a URL can prove it back)."""
    import docker.errors

    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"self-test needs {IMAGE} (scripts/build-local-image.sh)")
    port = _free_port()
    probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/v1/models')"
    check = {"test": ["CMD", "python3", "-c", probe], "interval": 1_000_000_000,
             "timeout": 5_000_000_000, "retries": 3, "start_period": 60_000_000_000}  # fmt: skip
    container = client.containers.run(
        IMAGE,
        ["python3", "-m", "llama_cpp.server", "--model", "/models/SmolLM2-135M-Instruct.Q4_1.gguf",
         "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "512", "--n_threads", "1"],
        name=f"tp2qual-selftest-live-serve-{uuid.uuid4().hex[:8]}",
        network_mode="host", detach=True, restart_policy={"Name": "unless-stopped"},
        labels={"com.docker.compose.project": "anvil-selftest", "role": "primary"},
        healthcheck=check if healthcheck else None,
    )  # fmt: skip
    return container, port


@pytest.fixture
def stand_in(docker_engine: Any) -> Iterator[Any]:
    """The live serve's stand-in, with a Docker healthcheck, healthy before the run starts."""
    container, _ = start_stand_in(docker_engine, healthcheck=True)
    try:
        wait_healthy(container, HEALTHY_WITHIN_S)
        yield container
    finally:
        container.remove(force=True)


def wait_healthy(container: Any, within_s: float) -> float:
    began = time.monotonic()
    while time.monotonic() - began < within_s:
        container.reload()
        if (container.attrs["State"].get("Health") or {}).get("Status") == "healthy":
            return time.monotonic() - began
        time.sleep(0.5)
    raise AssertionError(f"{container.name} not healthy within {within_s} s: {container.status}")


def wait_answers(url: str, within_s: float) -> None:
    import urllib.request

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                response.read()
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{url} did not answer within {within_s} s")


def watched(tmp_path: Path, stand_in: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The inner run's watch plugin, on its PYTHONPATH (tmp_path), told what to watch."""
    (tmp_path / "standin_watch.py").write_text(WATCH_PLUGIN)
    env = {"STANDIN": stand_in.name, "STANDIN_SEEN": str(tmp_path / "seen.jsonl")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def seen(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "seen.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def assert_given_back(run_dir: Path, stand_in: Any) -> dict[str, Any]:
    """Back as found: the engine says running and healthy, the record's states match and say
    so, and verify judges it again the same way."""
    stand_in.reload()
    assert stand_in.status == "running"
    assert stand_in.attrs["State"]["Health"]["Status"] == "healthy"
    record = read_record(run_dir / "handover.json")
    assert record["restored"] is True, record["problems"]
    before, after = record["before"][0], record["after"][0]
    for key in ("status", "health", "image_id", "restart_policy", "name"):
        assert before[key] == after[key], (key, before[key], after[key])
    assert [s["name"] for s in record["stops"]] == [stand_in.name]
    verify = subprocess.run(
        [sys.executable, "-m", "tp2qual", "verify", str(run_dir)],
        capture_output=True, text=True, cwd=MAIN, timeout=300,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stdout  # handover.json and disk_room.json included
    print(f"hand-over down-time: {record['down_s']} s; stop {record['stops'][0]['seconds']} s;"
          f" healthy after start {after.get('healthy_after_s')} s")  # fmt: skip
    return record


def stopped_at_every_call(tmp_path: Path, name: str) -> list[str]:
    calls = [s for s in seen(tmp_path) if f"[{name}" in s["nodeid"]]
    assert calls, "the watch saw no gate call"
    assert {s["status"] for s in calls} == {"exited"}, calls
    return [s["nodeid"] for s in calls]


def test_a_clean_run_hands_over_and_gives_back(tmp_path, stand_in, monkeypatch):
    watched(tmp_path, stand_in, monkeypatch)
    write_candidate(tmp_path / "candidates", smollm2_spec("handover-clean"))
    inner = run_inner(tmp_path, ["handover-clean"], f"--hand-over={stand_in.name}",
                      "-p", "standin_watch")  # fmt: skip
    assert inner.proc.returncode == 0, inner.output()
    assert inner.finding("handover-clean")["verdict"] == "PASS"
    stopped_at_every_call(tmp_path, "handover-clean")
    record = assert_given_back(inner.run_dir, stand_in)
    assert inner.finding("handover-clean")["identity"]["handover"]["restored"] is True
    assert f"handed over {stand_in.name} (stopped in" in inner.proc.stdout
    assert "hand-over given back: every serve as found" in inner.proc.stdout
    assert record["before"][0]["gpu_requests"] == []  # CPU stand-in: no GPU asked


def test_a_gate_fail_still_gives_back(tmp_path, stand_in, monkeypatch):
    watched(tmp_path, stand_in, monkeypatch)
    spec = with_fault(smollm2_spec("handover-fail"), "wrong_answer")
    write_candidate(tmp_path / "candidates", spec)
    inner = run_inner(tmp_path, ["handover-fail"], f"--hand-over={stand_in.name}",
                      "-p", "standin_watch")  # fmt: skip
    finding = inner.finding("handover-fail")
    assert finding["verdict"] == "FAIL", inner.output()
    stopped_at_every_call(tmp_path, "handover-fail")
    assert_given_back(inner.run_dir, stand_in)


def test_ctrl_c_in_the_middle_of_a_gate_gives_back(tmp_path, stand_in, monkeypatch):
    env = {**park_env(tmp_path, "test_03_deterministic.py"),
           **watched(tmp_path, stand_in, monkeypatch)}  # fmt: skip
    spec = smollm2_spec("handover-sigint")
    write_candidate(tmp_path / "candidates", spec)
    bound = interrupt_bound_s(spec["launch"].get("stop_timeout_s", 10))
    results = tmp_path / "results"
    command = [
        sys.executable, "-m", "pytest", "-c", str(MAIN / "pyproject.toml"), "--rootdir",
        str(MAIN), str(MAIN / "tests"), f"--candidates={tmp_path / 'candidates'}",
        f"--results={results}", "-k", "handover-sigint", "-p", "no:cacheprovider", "-p", "park",
        "-p", "standin_watch", f"--hand-over={stand_in.name}",
    ]  # fmt: skip
    with children_get_default_sigint():
        run = subprocess.Popen(command, cwd=MAIN, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_parked(tmp_path / "parked.txt", 1, run)
        stand_in.reload()
        assert stand_in.status == "exited"  # stopped while the gate runs
        run.send_signal(signal.SIGINT)
        # the stop's promised bound, plus the stand-in's return within its stated bound
        out = run.communicate(timeout=bound + HEALTHY_WITHIN_S)[0].decode()
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        reap_servers(results)
    assert run.returncode == 2, out[-3000:]  # pytest's INTERRUPTED
    assert "hand-over given back: every serve as found" in out, out[-3000:]
    assert_given_back((results / "latest").resolve(), stand_in)


def test_restore_from_the_record_after_a_killed_suite(tmp_path, stand_in, docker_engine):
    """The suite handed over and was killed: the record alone brings the serve back."""
    run_dir = tmp_path / "results" / "20261204T000000Z-kill"
    run_dir.mkdir(parents=True)
    plan = HandOverPlan((_name(stand_in.name),), {}, 60, HEALTHY_WITHIN_S)
    hand_over(docker_engine, plan, run_dir / "handover.json", gpus_free)
    stand_in.reload()
    assert stand_in.status == "exited"
    (run_dir / "manifest.json").write_text(json.dumps({"files": {}, "run_id": run_dir.name}))
    restore = subprocess.run(
        [sys.executable, "-m", "tp2qual", "restore", str(run_dir)],
        capture_output=True, text=True, cwd=MAIN, timeout=HEALTHY_WITHIN_S + 60,
    )  # fmt: skip
    assert restore.returncode == 0, restore.stdout + restore.stderr
    assert "restored: every serve back as found" in restore.stdout
    stand_in.reload()
    assert stand_in.attrs["State"]["Health"]["Status"] == "healthy"
    record = read_record(run_dir / "handover.json")
    assert record["restored"] is True
    print(f"hand-over down-time (restore from the record): {record['down_s']} s")
    again = subprocess.run([sys.executable, "-m", "tp2qual", "restore", str(run_dir)],
                           capture_output=True, text=True, cwd=MAIN, timeout=60)  # fmt: skip
    assert again.returncode == 0 and "already restored" in again.stdout


def _name(name: str) -> Any:
    from tp2qual.checks.handover import parse_selector

    return parse_selector(name, "self-test")


def test_a_return_that_falls_short_is_loud(tmp_path, docker_engine):
    """A serve that cannot come back (here: removed while handed over) is named with the state
    it was in and is in now, and the exact commands, by restore, verify and the report."""
    from tp2qual.evidence.report import write_report
    from tp2qual.evidence.verify import verify_run

    base = "tp2qual/debian-base:bookworm"
    name = f"tp2qual-selftest-gone-{uuid.uuid4().hex[:8]}"
    container = docker_engine.containers.run(
        base, ["sleep", "600"], name=name, network_mode="host", detach=True,
        healthcheck={"test": ["CMD", "true"], "interval": 1_000_000_000},
    )  # fmt: skip
    try:
        wait_healthy(container, 60)
        run_dir = tmp_path / "results" / "20261204T000000Z-gone"
        run_dir.mkdir(parents=True)
        plan = HandOverPlan((_name(name),), {}, 10, 30)
        hand_over(docker_engine, plan, run_dir / "handover.json", gpus_free)
    finally:
        container.remove(force=True)
    (run_dir / "manifest.json").write_text(json.dumps({"files": {}, "run_id": run_dir.name}))
    restore = subprocess.run(
        [sys.executable, "-m", "tp2qual", "restore", str(run_dir)],
        capture_output=True, text=True, cwd=MAIN, timeout=120,
    )  # fmt: skip
    assert restore.returncode == 1, restore.stdout + restore.stderr
    said = f"NOT RESTORED: not restored: {name}: not found after the run (removed?)"
    assert said in restore.stdout and f"docker start {name}" in restore.stdout
    lines = [p.line() for p in verify_run(run_dir).problems]
    assert any(name in line and "docker start" in line for line in lines), lines
    html = write_report(run_dir, verify_run(run_dir)).read_text()
    assert "NOT RESTORED" in html and f"docker start {name}" in html
    assert "running (healthy)" in html  # the state it was in, beside the state it is in


def test_a_serve_without_a_healthcheck_is_proven_back_by_its_url(tmp_path, docker_engine):
    """No Docker healthcheck: the URL the user names must answer a real request after the
    start, and the record says it did."""
    from tp2qual.serving.handover import give_back

    container, port = start_stand_in(docker_engine, healthcheck=False)
    url = f"http://127.0.0.1:{port}/v1/models"
    try:
        wait_answers(url, HEALTHY_WITHIN_S)  # a live serve, answering before the run
        plan = HandOverPlan((_name(container.name),), {}, 60, HEALTHY_WITHIN_S)
        with pytest.raises(Exception, match="no Docker healthcheck and no health URL named"):
            hand_over(docker_engine, plan, tmp_path / "handover.json", gpus_free)
        container.reload()
        assert container.status == "running"  # refused before anything stopped
        plan = HandOverPlan((_name(container.name),), {container.name: url}, 60, HEALTHY_WITHIN_S)
        hand_over(docker_engine, plan, tmp_path / "handover.json", gpus_free)
        record = give_back(docker_engine, tmp_path / "handover.json", gpus_free, print)
        assert record["restored"] is True, record["problems"]
        assert record["after"][0]["url_answered"] is True
        print(f"hand-over down-time (proven by URL): {record['down_s']} s;"
              f" stop {record['stops'][0]['seconds']} s")  # fmt: skip
    finally:
        container.remove(force=True)
