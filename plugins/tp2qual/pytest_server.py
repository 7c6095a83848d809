"""Server plugin: one server per candidate, started once, always torn down.

The ``server`` fixture is session-scoped and keyed by the candidate parameter, so pytest starts
it at the candidate's first gate that needs it and stops it before the next candidate's server
starts. Pins are checked before the start; a start-up failure is raised once with its cause and
log tail (later gates are then blocked by the gating plugin, not re-raised N times).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from pathlib import Path
from tempfile import gettempdir
from typing import Any

import pytest

from .candidate import Candidate
from .claims import make_claim
from .identity import engine_identity, host_identity, model_identity
from .launch import Launcher, ProcessLauncher
from .pytest_candidates import run_key
from .pytest_gating import candidate_of, gate_of
from .readiness import wait_ready
from .record import CandidateRecord
from .redact import Redactor
from .server import Api, Server

PROGRESS_EVERY_S = 2.0


def build_launcher(
    candidate: Candidate,
    log_path: Path,
    redactor: Redactor,
    *,
    run_id: str,
    pull: bool = False,
    device_ids: Sequence[str] = (),
) -> Launcher:
    """The candidate's launcher; constructing it starts nothing (``--plan`` relies on that)."""
    if candidate.launcher_kind == "docker":
        from .docker_launcher import DockerLauncher

        return DockerLauncher(
            candidate, log_path, redactor, run_id=run_id, pull=pull, device_ids=device_ids
        )
    return ProcessLauncher(candidate, log_path, redactor)


def make_launcher(candidate: Candidate, record: CandidateRecord, pull: bool = False) -> Launcher:
    # Outside WSL2 a container gets exactly the GPUs preflight checked, by UUID.
    gpus = (record.identity.get("topology") or {}).get("gpus") or []
    uuids = [g["uuid"] for g in gpus if g.get("uuid")][: candidate.gpus.get("count", 0)]
    return build_launcher(
        candidate,
        record.evidence.path("server.log"),
        record.evidence.redactor,
        run_id=record.run_id,
        pull=pull,
        device_ids=uuids,
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """``--plan``: print each selected candidate's launch, start nothing."""
    if not session.config.getoption("plan"):
        return None
    state = session.config.stash[run_key]
    chosen = {c.name for item in session.items if (c := candidate_of(item)) is not None}
    writer = session.config.get_terminal_writer()
    for candidate in state.candidates:
        if candidate.name in chosen:
            writer.line(f"# {candidate.name}  ({candidate.launcher_kind}, TP{candidate.tp})")
            writer.line(plan_for(candidate, state.run_id))
            writer.line()
    return True


def plan_for(candidate: Candidate, run_id: str) -> str:
    log = Path(gettempdir()) / "tp2qual-plan.log"  # never written: nothing starts
    return build_launcher(candidate, log, Redactor(candidate.env()), run_id=run_id).plan()


@pytest.fixture(scope="session")
def record(candidate: Candidate, request: pytest.FixtureRequest) -> CandidateRecord:
    """The candidate's evidence record (folder created on first use)."""
    state = request.config.stash[run_key]
    rec = state.record(candidate)
    if not rec.identity:
        rec.identity["host"] = host_identity()
        rec.evidence.write_json("identity/host.json", rec.identity["host"])
        rec.save()
    return rec


@pytest.fixture(scope="session")
def server(
    candidate: Candidate, record: CandidateRecord, request: pytest.FixtureRequest
) -> Iterator[Server]:
    state = request.config.stash[run_key]
    model = model_identity(candidate)  # raises PinMismatch before anything starts
    record.identity["model"] = model
    record.evidence.write_json("identity/model.json", model)
    launcher = make_launcher(candidate, record, pull=bool(state.options.get("pull")))
    plan = launcher.plan()
    record.evidence.write_json("launch.json", launcher.identity() | {"plan": plan})
    handle: Server | None = None
    try:
        launcher.start()
        record.identity["launch"] = launcher.identity()
        record.evidence.write_json("launch.json", record.identity["launch"] | {"plan": plan})
        readiness = wait_ready(
            launcher,
            served_name=candidate.served_name,
            timeout_s=candidate.readiness_timeout_s,
            progress=_progress_printer(request.config, candidate),
        )
        record.evidence.write_json("readiness.json", readiness.as_dict())
        record.identity["launch"] = launcher.identity()
        record.identity["engine"] = engine_identity(
            candidate, launcher.base_url, record.identity["launch"]
        )
        record.evidence.write_json("identity/engine.json", record.identity["engine"])
        record.save()
        handle = Server(candidate, launcher, record.evidence)
        yield handle
    finally:
        if handle is not None:
            handle.close()
        stopped = launcher.stop()
        record.evidence.write_json("teardown.json", vars(stopped))
        record.save()


def _progress_printer(config: pytest.Config, candidate: Candidate) -> Callable[[float, str], None]:
    """Show elapsed seconds and the last log line while waiting, even under output capture."""
    last = [0.0]
    capture = config.pluginmanager.getplugin("capturemanager")
    writer = config.get_terminal_writer()

    def show(elapsed: float, line: str) -> None:
        if elapsed - last[0] < PROGRESS_EVERY_S:
            return
        last[0] = elapsed
        with capture.global_and_fixture_disabled() if capture else nullcontext():
            writer.line(f"  [{candidate.name}] starting {elapsed:5.1f}s | {line[:110]}")

    return show


@pytest.fixture
def api(server: Server, request: pytest.FixtureRequest) -> Api:
    """Recorded HTTP calls into this gate's artifact ``<gate>.jsonl``."""
    gate = gate_of(request.node)
    return server.api(f"{gate or request.node.name}.jsonl", gate)


@pytest.fixture
def claim(record: CandidateRecord, request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Record a claim whose value is *derived from its artifact on disk* (see claims.py)."""
    gate = gate_of(request.node)

    def make(name: str, artifact: str, **spec: Any) -> Any:
        made = make_claim(record.evidence.root, name, artifact, spec)
        if gate is not None:
            result = record.gates[gate]
            result.claims = [c for c in result.claims if c.name != name] + [made]
            record.save()
        return made.value

    return make
