"""``--hosts`` on two real Docker engines of this machine (``scripts/start-dockerd.sh second``).

Each engine is its own dockerd (data root, exec root, socket, containerd namespace), so to the
suite they are two hosts. Two self-test copies of the embedded Docker candidate are qualified in
one run, one per host, then the faults: a host down, a worker killed mid-gate, Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ctrl_c import children_get_default_sigint, interrupt_bound_s, park_env, wait_parked
from sshd import running_sshd
from test_faults import MAIN, Inner, run_inner, small_gates, write_candidate

from tp2qual.candidate import load_candidate
from tp2qual.evidence.verify import verify_run
from tp2qual.hosts import Host, bound
from tp2qual.launch import RUN_LABEL
from tp2qual.serving.launchers.docker.engine import docker_client, engine_url, unavailable
from tp2qual.serving.launchers.docker.pins import resolve_pin

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DOCKER = MAIN / "candidates" / "smollm2-135m-docker.toml"
SECOND = os.environ.get("TP2QUAL_SECOND_ENGINE", "unix:///run/tp2qual-second.sock")
NAMES = ["hosts-one", "hosts-two"]


def _missing(why: str) -> None:
    """CI starts both engines and says so (TP2QUAL_REQUIRE_ENGINES): there a skip is a failure."""
    if os.environ.get("TP2QUAL_REQUIRE_ENGINES"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def engines(docker_engine: Any) -> tuple[Host, Host]:
    first, second = Host("alpha", engine_url()), Host("beta", SECOND)
    candidate = load_candidate(DOCKER)
    pin = resolve_pin(candidate).value
    if pin is None:
        _missing("the local image is not built (scripts/build-local-image.sh)")
    for host in (first, second):
        with bound(host):
            if why := unavailable():
                _missing(f"needs a second engine (scripts/start-dockerd.sh second): {why}")
            with docker_client() as client:
                images = client.images.list(name=candidate.launch["docker"]["image"])
                if not any(i.id == pin for i in images):
                    _missing(f"host {host.name} lacks the image {pin} (start-dockerd.sh copies it)")
    return first, second


def hosts_file(tmp_path: Path, *hosts: Host) -> Path:
    path = tmp_path / "hosts.toml"
    path.write_text("".join(f'[[host]]\nname = "{h.name}"\ndocker = "{h.docker}"\n' for h in hosts))
    return path


def docker_copies(tmp_path: Path) -> None:
    """Two names for the embedded Docker candidate, with the self-tests' small gate settings."""
    for name in NAMES:
        spec = load_candidate(DOCKER).spec
        spec["name"], spec["description"] = name, f"self-test copy of {DOCKER.stem}"
        spec.pop("reference", None)  # its reference is not among the copies
        gates = spec["gates"]
        small_gates(gates)  # two servers share 2 cores here
        # gate 07 small: a near-bound reread on two servers sharing 2 cores outlasts Ctrl-C's wait
        gates["agreement"].update(prompts=3, accuracy_items=2, accuracy_max_tokens=32,
                                  near_bound_fill=0.3)  # fmt: skip
        write_candidate(tmp_path / "candidates", spec)


def run_containers(hosts: tuple[Host, ...], run_id: str, *, running: bool = False) -> list[str]:
    found = []
    for host in hosts:
        with bound(host), docker_client() as client:
            found += [
                f"{host.name}:{c.name}"
                for c in client.containers.list(all=not running, filters={"label": RUN_LABEL})
                if c.labels.get(RUN_LABEL) == run_id
            ]
    return found


def servers(hosts: tuple[Host, ...], run_id: str) -> list[str]:
    """The run's running server containers (not its short GPU-probe ones)."""
    return [c for c in run_containers(hosts, run_id, running=True) if ":tp2qual-" in c]


def host_of(inner: Inner, name: str) -> dict[str, Any]:
    return inner.finding(name)["identity"].get("docker_host") or {}


@pytest.fixture
def copies(tmp_path: Path) -> Iterator[Path]:
    docker_copies(tmp_path)
    yield tmp_path


def test_two_hosts_one_run_one_verified_report(copies: Path, engines: tuple[Host, Host]) -> None:
    inner = run_inner(copies, NAMES, f"--hosts={hosts_file(copies, *engines)}")
    assert inner.proc.returncode == 0, inner.output()
    assert {n: inner.finding(n)["verdict"] for n in NAMES} == dict.fromkeys(NAMES, "PASS")
    placed = {host_of(inner, n)["name"] for n in NAMES}
    workers = {host_of(inner, n)["worker"] for n in NAMES}
    assert placed == {"alpha", "beta"} and len(workers) == 2, inner.output()
    check = verify_run(inner.run_dir)
    assert check.ok and check.candidates == 2 and check.final_manifest, check.problems
    report = (inner.run_dir / "report.html").read_text()
    assert "ran on Docker host" in report and "alpha (" in report and "beta (" in report
    topology = json.loads((inner.evidence("hosts-two") / "topology.json").read_text())
    assert topology["source"] == "nvml-container" and topology["read_on"]["name"] in placed
    cases = inner.junit.iter("testcase")
    assert {n for c in cases for n in NAMES if f"[{n}" in c.get("name", "")} == set(NAMES)
    properties = {p.get("name"): p.get("value") for p in inner.junit.iter("property")}
    for name in NAMES:  # one JUnit file, with each candidate's verdict and host
        assert properties[f"candidate.{name}.verdict"] == "PASS", properties
        assert properties[f"candidate.{name}.docker_host"] == host_of(inner, name)["name"]
    assert "qualification on hosts" in inner.proc.stdout
    assert run_containers(engines, inner.run_dir.name) == []


def test_a_host_down_leaves_its_candidates_incomplete_never_failed(
    copies: Path, engines: tuple[Host, Host]
) -> None:
    down = Host("beta", "unix:///nonexistent/tp2qual-beta.sock")
    inner = run_inner(copies, NAMES, f"--hosts={hosts_file(copies, engines[0], down)}")
    assert inner.proc.returncode == 0, inner.output()
    verdicts = {n: inner.finding(n)["verdict"] for n in NAMES}
    assert sorted(verdicts.values()) == ["INCOMPLETE", "PASS"], inner.output()
    (stuck,) = [n for n, v in verdicts.items() if v == "INCOMPLETE"]
    reasons = {g["reason"] for g in inner.finding(stuck)["gates"].values() if g["reason"]}
    assert any("host beta cannot be reached" in r for r in reasons), reasons
    assert all(
        g["outcome"] in ("not_run", "not_applicable")
        for g in inner.finding(stuck)["gates"].values()
    )
    said = [line for line in inner.proc.stdout.splitlines() if line.startswith("tp2qual: host")]
    assert len(said) == 1 and "host beta cannot be reached" in said[0], inner.output()  # once
    assert verify_run(inner.run_dir).ok


KILLER = """
import os, signal
def pytest_runtest_call(item):
    if os.environ.get("KILL_AT", "#") in item.nodeid:
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies as an OOM kill would do it
"""


def test_a_killed_worker_leaves_incomplete_and_no_container(
    copies: Path, engines: tuple[Host, Host]
) -> None:
    (copies / "killer.py").write_text(KILLER)
    os.environ["KILL_AT"] = "test_long_outputs_are_not_degenerate[hosts-two]"
    try:
        inner = run_inner(copies, NAMES, f"--hosts={hosts_file(copies, *engines)}", "-p", "killer")
    finally:
        del os.environ["KILL_AT"]
    assert inner.proc.returncode == 1, inner.output()  # xdist reports the crash
    assert "crashed" in inner.output()
    assert inner.finding("hosts-one")["verdict"] == "PASS"
    dead = inner.finding("hosts-two")
    assert dead["verdict"] == "INCOMPLETE", inner.output()
    assert dead["gates"]["deterministic"]["outcome"] == "passed"
    assert dead["gates"]["repetition"]["outcome"] != "passed"
    assert "worker running this candidate died" in dead["gates"]["throughput"]["reason"]
    assert run_containers(engines, inner.run_dir.name) == []  # swept on its host at the end
    assert verify_run(inner.run_dir).ok


def test_ctrl_c_stops_every_hosts_containers(copies: Path, engines: tuple[Host, Host]) -> None:
    """Ctrl-C once both candidates are in gate 04 on their hosts (each announces, ``ctrl_c.py``):
    pytest exits interrupted within the promised bound, no container of the run is left on
    either host, and both candidates are INCOMPLETE."""
    results, parked = copies / "results", copies / "parked.txt"
    env = park_env(copies, "test_long_outputs_are_not_degenerate[hosts-")
    command = [
        sys.executable, "-m", "pytest", "-c", str(MAIN / "pyproject.toml"),
        "--rootdir", str(MAIN), str(MAIN / "tests"), f"--candidates={copies / 'candidates'}",
        f"--results={results}", f"--hosts={hosts_file(copies, *engines)}",
        "-k", " or ".join(NAMES), "-p", "no:cacheprovider", "-p", "park",
    ]  # fmt: skip
    with children_get_default_sigint():  # its own process group, as a terminal's foreground job
        proc = subprocess.Popen(command, cwd=MAIN, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        wait_parked(parked, len(NAMES), proc)
        (run_id,) = [p.name for p in results.glob("2*") if p.is_dir()]
        running = servers(engines, run_id)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        bound = interrupt_bound_s(load_candidate(DOCKER).launch["stop_timeout_s"])
        out, _ = proc.communicate(timeout=bound)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    text = out.decode(errors="replace")
    assert len(running) == 2, f"both servers never ran at once: {running}"
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, text[-3000:]
    assert run_containers(engines, run_id) == [], text[-3000:]
    for name in NAMES:
        finding = json.loads((results / run_id / name / "finding.json").read_text())
        assert finding["verdict"] == "INCOMPLETE", text[-3000:]


def test_an_ssh_host_through_dockers_own_ssh_endpoint_and_a_forward(
    copies: Path,
    engines: tuple[Host, Host],
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host named only by ``ssh://user@host:port``: the engine is driven over SSH (docker-py's
    ssh client, ``docker system dial-stdio`` there), the server reached through the forward.
    Here the far end is this machine's sshd and engine; the suite cannot tell."""
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        monkeypatch.setenv("PATH", f"{server.bin_dir}{os.pathsep}{os.environ['PATH']}")
        hosts = copies / "hosts.toml"
        hosts.write_text(f'[[host]]\nname = "gamma"\ndocker = "ssh://{server.destination}"\n')
        inner = run_inner(copies, NAMES[:1], f"--hosts={hosts}")
    assert inner.proc.returncode == 0, inner.output()
    assert inner.finding(NAMES[0])["verdict"] == "PASS", inner.output()
    host = host_of(inner, NAMES[0])
    assert host["name"] == "gamma" and host["reached_by"].startswith("ssh tunnel via "), host
    launch = json.loads((inner.evidence(NAMES[0]) / "launch.json").read_text())
    local = int(launch["base_url"].rsplit(":", 1)[1])  # the URL is the forward's local end
    assert f"127.0.0.1:{local}:127.0.0.1:{launch['server_port']}" in launch["tunnel"], launch
    assert verify_run(inner.run_dir).ok
    assert run_containers(engines, inner.run_dir.name) == []
