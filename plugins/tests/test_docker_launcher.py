"""Self-tests of the Docker launcher.

The first group needs no Docker: the one kwargs builder, its ``docker run`` rendering, pins,
GPU requests, mounts. The ``docker`` group runs against the real engine with the locally built
base image (scripts/build-local-image.sh) and cleans up after itself by label.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tp2qual.candidate import Candidate, load_candidate
from tp2qual.exceptions import CandidateError, ImageUnavailable, PinMismatch, StartupExited
from tp2qual.launch import RUN_LABEL, SESSION_LABEL, resolve_launch
from tp2qual.redact import MASK, Redactor
from tp2qual.serving.launchers.docker.launcher import DockerLauncher
from tp2qual.serving.launchers.docker.pins import image_matches, pin_unresolved, resolve_pin
from tp2qual.serving.launchers.docker.run_args import (
    gpu_request,
    render_docker_run,
    run_kwargs,
)
from tp2qual.serving.launchers.docker.sweep import (
    exited_from_state,
    gpu_holders,
    redact_inspect,
    sweep,
)
from tp2qual.serving.readiness import wait_ready

BASE_IMAGE = "tp2qual/debian-base:bookworm"
ZERO_PIN = "sha256:" + "0" * 64


def make_candidate(
    folder: Path,
    name: str,
    *,
    command: list[str],
    pin: str,
    image: str = BASE_IMAGE,
    docker: str = "",
    env: str = "",
    gpus: int = 0,
) -> Candidate:
    path = folder / f"{name}.toml"
    path.write_text(
        f"""
name = "{name}"
[model]
repo = "example/none"
revision = "{"0" * 40}"
served_name = "none"
[engine]
kind = "llama.cpp"
[launch]
kind = "docker"
command = {json.dumps(command)}
stop_timeout_s = 3
[launch.env]
{env}
[launch.docker]
image = "{image}"
pin = "{pin}"
{docker}
[gpus]
count = {gpus}
[serve]
tensor_parallel_size = 1
max_model_len = 2048
""",
        encoding="utf-8",
    )
    return load_candidate(path)


# ---------------------------------------------------------------------------------------------
# Without Docker


def test_kwargs_and_plan_render_the_same_settings(tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    cache.mkdir()
    cand = make_candidate(
        tmp_path,
        "unit",
        command=["{python}", "-m", "srv", "--port", "{port}"],
        pin=ZERO_PIN,
        env='HF_TOKEN = "hf_abcdefghijkl"\nFOO = "a b"',
        docker=f"ipc_host = true\nulimits = {{ memlock = -1, stack = 67108864 }}\n"
        f'mounts = ["{cache}:/cache:ro", "rel:/rel"]\nentrypoint = ["tini", "--"]',
    )
    kwargs = run_kwargs(resolve_launch(cand, port=8123, run_id="R", session="S", wsl2=False))
    assert kwargs["command"] == ["python3", "-m", "srv", "--port", "8123"]
    assert kwargs["environment"]["HF_HUB_OFFLINE"] == "1"
    assert kwargs["network_mode"] == "host" and kwargs["ipc_mode"] == "host"
    assert kwargs["labels"] == {RUN_LABEL: "R", "tp2qual.candidate": "unit", SESSION_LABEL: "S"}
    assert kwargs["name"] == "tp2qual-unit-R"
    assert kwargs["volumes"] == {
        str(cache): {"bind": "/cache", "mode": "ro"},
        str(tmp_path / "rel"): {"bind": "/rel", "mode": "ro"},
    }
    assert "device_requests" not in kwargs
    plan = shlex.split(render_docker_run(kwargs, Redactor(cand.env())))
    assert plan[:3] == ["docker", "run", "--detach"]
    assert plan[-7:] == [
        "tp2qual/debian-base:bookworm",
        "--",
        "python3",
        "-m",
        "srv",
        "--port",
        "8123",
    ]
    assert plan[plan.index("--entrypoint") :][:2] == ["--entrypoint", "tini"]
    for pair in (
        ["--network", "host"],
        ["--ipc", "host"],
        ["--ulimit", "memlock=-1:-1"],
        ["--ulimit", "stack=67108864:67108864"],
        ["--volume", f"{cache}:/cache:ro"],
        ["--env", "FOO=a b"],
        ["--env", f"HF_TOKEN={MASK}"],
        ["--label", "tp2qual.run=R"],
    ):
        assert any(plan[i : i + 2] == pair for i in range(len(plan))), pair
    assert "hf_abcdefghijkl" not in " ".join(plan)


@pytest.mark.parametrize(
    ("wsl2", "ids", "mode", "flag"),
    [
        (True, ("GPU-a",), "all GPUs", "all"),
        (False, ("GPU-a", "GPU-b"), "devices GPU-a,GPU-b", '"device=GPU-a,GPU-b"'),
        (False, (), "count 2", "2"),
    ],
)
def test_gpu_requests(
    tmp_path: Path, wsl2: bool, ids: tuple[str, ...], mode: str, flag: str
) -> None:
    requests, words = gpu_request(2, wsl2=wsl2, device_ids=ids)
    assert words.startswith(mode) and requests[0]["Capabilities"] == [["gpu"]]
    cand = make_candidate(tmp_path, "gpu", command=["x"], pin=ZERO_PIN, gpus=2)
    plan = shlex.split(
        render_docker_run(
            run_kwargs(
                resolve_launch(cand, port=1, run_id="R", session="S", wsl2=wsl2, device_ids=ids)
            )
        )
    )
    assert plan[plan.index("--gpus") + 1] == flag
    assert gpu_request(0, wsl2=True) == ([], "none")


def test_read_write_mount_is_refused(tmp_path: Path) -> None:
    cand = make_candidate(
        tmp_path, "rw", command=["x"], pin=ZERO_PIN, docker='mounts = ["/data:/data:rw"]'
    )
    with pytest.raises(CandidateError, match="read-only"):
        run_kwargs(resolve_launch(cand, port=1, run_id="R", session="S", wsl2=False))


def test_pin_placeholder_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TP2QUAL_UNIT_IMAGE_ID", raising=False)
    (tmp_path / "cands").mkdir()
    cand = make_candidate(
        tmp_path / "cands",
        "pinned",
        command=["x"],
        pin="{unit_image_id}",
        docker='how_to_pin = "run the build"',
    )
    assert resolve_pin(cand).value is None
    assert "TP2QUAL_UNIT_IMAGE_ID" in (pin_unresolved(cand) or "")
    assert "run the build" in (pin_unresolved(cand) or "")
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "unit-image-id").write_text("sha256:" + "a" * 64 + "\n")
    assert resolve_pin(cand).value == "sha256:" + "a" * 64 and pin_unresolved(cand) is None
    monkeypatch.setenv("TP2QUAL_UNIT_IMAGE_ID", "sha256:" + "b" * 64)
    assert resolve_pin(cand).source == "$TP2QUAL_UNIT_IMAGE_ID"
    monkeypatch.setenv("TP2QUAL_UNIT_IMAGE_ID", "latest")
    assert "not sha256" in (pin_unresolved(cand) or "")


def test_pin_matches_image_id_or_repo_digest() -> None:
    attrs = {"Id": "sha256:" + "1" * 64, "RepoDigests": ["r/x@sha256:" + "2" * 64]}
    assert image_matches(attrs, "sha256:" + "1" * 64)
    assert image_matches(attrs, "sha256:" + "2" * 64)
    assert not image_matches(attrs, ZERO_PIN)


def test_state_to_exited_and_inspect_redaction() -> None:
    assert exited_from_state({"Status": "running"}) is None
    gone = exited_from_state({"Status": "exited", "ExitCode": 137, "OOMKilled": True})
    assert gone is not None and gone.code == 137 and gone.oom_killed
    assert "OOM-killed" in gone.describe() and "signal 9" in gone.describe()
    red = redact_inspect({"Config": {"Env": ["HF_TOKEN=hf_secret", "A=1"]}})
    assert red["Config"]["Env"] == [f"HF_TOKEN={MASK}", "A=1"]


def test_gpu_holders_reads_device_requests_and_runtime() -> None:
    class Fake:
        def __init__(self, name: str, host: dict[str, Any], labels: dict[str, str]):
            self.name, self.short_id, self.labels = name, name[:3], labels
            self.attrs = {"Name": f"/{name}", "HostConfig": host, "State": {"Status": "running"},
                          "Config": {"Image": "img", "Labels": labels}}  # fmt: skip

    class Client:
        class containers:
            @staticmethod
            def list(all: bool = False, filters: dict[str, Any] | None = None) -> list[Fake]:
                return [
                    Fake("vllm", {"DeviceRequests": [{"Count": -1}]}, {}),
                    Fake("old", {"Runtime": "nvidia"}, {RUN_LABEL: "R0"}),
                    Fake("web", {"DeviceRequests": None}, {}),
                ]

    found = gpu_holders(Client())
    assert [(h["name"], h["how"], h["ours"]) for h in found] == [
        ("vllm", ["device request: all GPUs"], False),
        ("old", ["nvidia runtime"], True),
    ]


# ---------------------------------------------------------------------------------------------
# Against the real engine


@pytest.fixture(scope="module")
def client(docker_engine: Any) -> Any:
    try:
        base = docker_engine.images.get(BASE_IMAGE)
    except Exception:
        pytest.skip(f"{BASE_IMAGE} is not built here: run scripts/build-local-image.sh")
    docker_engine.base_id = base.id
    return docker_engine


@pytest.fixture
def run_id(client: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A unique run id per test; whatever carries it is removed afterwards."""
    rid = f"selftest-{os.getpid()}-{request.node.name[:20]}-{time.monotonic_ns() % 10**6}"
    rid = "".join(c if c.isalnum() or c in "-_." else "-" for c in rid)
    yield rid
    for container in client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={rid}"}):
        container.remove(force=True)


def labelled(client: Any, rid: str) -> list[Any]:
    return client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={rid}"})


def launcher_for(cand: Candidate, tmp_path: Path, rid: str, client: Any) -> DockerLauncher:
    return DockerLauncher(
        cand, tmp_path / "ev" / "server.log", Redactor(cand.env()), run_id=rid, client=client
    )


@pytest.mark.docker
def test_pin_mismatch_is_refused_before_anything_is_created(
    tmp_path: Path, client: Any, run_id: str
) -> None:
    cand = make_candidate(tmp_path, "wrong-pin", command=["true"], pin=ZERO_PIN)
    launcher = launcher_for(cand, tmp_path, run_id, client)
    with pytest.raises(PinMismatch) as caught:
        launcher.start()
    message = str(caught.value)
    for part in ("wrong-pin", BASE_IMAGE, ZERO_PIN, client.base_id):
        assert part in message
    assert labelled(client, run_id) == []
    assert launcher.stop().how == "not started"


@pytest.mark.docker
def test_missing_image_is_refused_not_pulled(tmp_path: Path, client: Any, run_id: str) -> None:
    cand = make_candidate(
        tmp_path, "no-image", command=["true"], pin=ZERO_PIN, image="tp2qual/does-not-exist:never"
    )
    with pytest.raises(ImageUnavailable, match="not present locally"):
        launcher_for(cand, tmp_path, run_id, client).start()
    assert labelled(client, run_id) == []


@pytest.mark.docker
def test_exit_at_startup_is_reported_at_once_with_code_and_log(
    tmp_path: Path, client: Any, run_id: str
) -> None:
    cand = make_candidate(
        tmp_path, "boom", command=["sh", "-c", "echo boom; exit 3"], pin=client.base_id
    )
    launcher = launcher_for(cand, tmp_path, run_id, client)
    began = time.monotonic()
    try:
        launcher.start()
        with pytest.raises(StartupExited) as caught:
            wait_ready(launcher, served_name="none", timeout_s=60)
        seconds = time.monotonic() - began
    finally:
        report = launcher.stop()
    assert seconds < 5.0, f"start-up exit took {seconds:.1f}s to report"
    assert "exit code 3" in str(caught.value) and "boom" in str(caught.value)
    assert report.how == "already exited" and report.extra["exit_code"] == 3
    assert launcher.inspect_path.is_file() and labelled(client, run_id) == []


@pytest.mark.docker
def test_killed_mid_run_is_seen_by_poll_and_stop_keeps_evidence(
    tmp_path: Path, client: Any, run_id: str
) -> None:
    cand = make_candidate(
        tmp_path, "victim", command=["sh", "-c", "echo alive; exec sleep 300"], pin=client.base_id
    )
    launcher = launcher_for(cand, tmp_path, run_id, client)
    try:
        launcher.start()
        assert launcher.poll() is None
        _wait_for(lambda: "alive" in launcher.log.tail(), "log line 'alive'")
        client.containers.get(launcher.identity()["container_id"]).kill()
        _wait_for(lambda: launcher.poll() is not None, "poll() to notice the kill", 2.0)
        gone = launcher.poll()
        assert gone is not None and gone.code == 137
    finally:
        report = launcher.stop()
    assert report.extra["removed"] and labelled(client, run_id) == []
    inspect = json.loads(launcher.inspect_path.read_text())
    assert inspect["State"]["ExitCode"] == 137 and inspect["Config"]["Labels"][RUN_LABEL] == run_id
    assert "alive" in launcher.log.path.read_text()
    assert launcher.stop() is report  # idempotent


@pytest.mark.docker
def test_sweep_removes_a_crashed_runs_leftover_only(
    tmp_path: Path, client: Any, run_id: str
) -> None:
    def leftover(run: str, session: str) -> Any:
        return client.containers.create(
            client.base_id,
            ["sleep", "300"],
            name=f"{run}-{session.split(':')[-1]}",
            labels={RUN_LABEL: run, SESSION_LABEL: session},
            network_mode="host",
        )

    import socket

    crashed = leftover(run_id + "-old", "otherhost:1:dead")
    current = leftover(run_id, f"selftest:{run_id}:current")
    live = leftover(run_id + "-live", f"{socket.gethostname()}:{os.getppid()}:live")
    try:
        crashed.start()
        removed = sweep(client, reason="self-test", keep_run=run_id, save_to=tmp_path / "left")
        mine = [r for r in removed if run_id in r]
        assert mine == [f"{crashed.name} ({crashed.short_id}, run {run_id}-old, running)"]
        assert (tmp_path / "left" / f"{crashed.name}.inspect.json").is_file()
        names = {c.name for c in client.containers.list(all=True)}
        assert crashed.name not in names and {current.name, live.name} <= names
        assert [
            s.split(" ")[0]
            for s in sweep(client, reason="session end", only_session=f"selftest:{run_id}:current")
        ] == [current.name]
    finally:
        for c in (crashed, current, live):
            with contextlib.suppress(Exception):
                c.remove(force=True)


@pytest.mark.docker
def test_plan_is_what_start_creates(tmp_path: Path, client: Any, run_id: str) -> None:
    """Run the launcher, then run its plan with the docker CLI: both containers must agree."""
    ro = tmp_path / "ro"
    ro.mkdir()
    cand = make_candidate(
        tmp_path,
        "plan",
        command=["exec sleep 300; echo {port}"],
        pin=client.base_id,
        env='FOO = "a b"\nNCCL_DEBUG = "INFO"',
        docker=(
            f'entrypoint = ["sh", "-c"]\nipc_host = true\nmounts = ["{ro}:/ro:ro"]\n'
            "ulimits = { nofile = 4096 }"
        ),
    )
    launcher = launcher_for(cand, tmp_path, run_id, client)
    try:
        launcher.start()
        created = client.api.inspect_container(launcher.identity()["container_id"])
    finally:
        launcher.stop()
    subprocess.run(shlex.split(launcher.plan()), check=True, capture_output=True, timeout=60)
    planned = client.api.inspect_container(launcher.identity()["container_name"])
    assert _essentials(planned) == _essentials(created)
    assert created["HostConfig"]["NetworkMode"] == "host"
    assert created["HostConfig"]["Binds"] == [f"{ro}:/ro:ro"]


def _essentials(attrs: dict[str, Any]) -> dict[str, Any]:
    config, host = attrs["Config"], attrs["HostConfig"]
    return {
        "image": config["Image"],
        "image_id": attrs["Image"],
        "argv": (config["Entrypoint"] or []) + (config["Cmd"] or []),
        "env": sorted(config["Env"]),
        "labels": config["Labels"],
        "name": attrs["Name"],
        **{
            k: host.get(k)
            for k in (
                "NetworkMode",
                "IpcMode",
                "Binds",
                "Ulimits",
                "Init",
                "DeviceRequests",
                "ShmSize",
            )
        },
    }


def _wait_for(check: Any, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_docker_candidate_gates_are_the_local_candidates() -> None:
    """Same engine, same model: the two SmolLM2 candidates must not drift apart."""
    folder = Path(__file__).resolve().parents[2] / "candidates"
    local = load_candidate(folder / "smollm2-135m-local.toml").spec
    docker = load_candidate(folder / "smollm2-135m-docker.toml").spec
    for section in ("gates", "model", "engine", "serve", "gpus"):
        assert docker[section] == local[section], section
    assert docker["launch"]["command"][4] == "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert [p for i, p in enumerate(docker["launch"]["command"]) if i != 4] == [
        p for i, p in enumerate(local["launch"]["command"]) if i != 4
    ]
