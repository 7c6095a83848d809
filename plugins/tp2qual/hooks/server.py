"""Server plugin: one server per candidate, started once, always torn down; ``--plan``.

The ``server`` fixture is session-scoped and keyed by the candidate parameter, so pytest starts
it at the candidate's first gate that needs it and stops it before the next candidate's server
starts. Its whole life is a ``ManagedServer`` (serving/managed.py). What it needs is a fixture of
its own, never a gate's side effect: the model pin (``model_pin``, also claimed by gate 00),
the GPUs (``gpu_snapshot``, from the gpus plugin) and the resolved launch (``launch``, the one
value gate 00's engine check asks about and the launcher starts; ``--plan`` renders one the
same way). A start-up failure is raised once with its
cause and log tail; later gates are then blocked by the gating plugin, not re-raised N times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from tempfile import gettempdir
from typing import Any

import pytest

from tp2qual import dry_run
from tp2qual.artifacts.claims import make_claim
from tp2qual.artifacts.finding import CandidateRecord
from tp2qual.candidate import Candidate
from tp2qual.evidence.run import RunState
from tp2qual.evidence.run_floors import request_floor
from tp2qual.exceptions import CandidateError, PinMismatch
from tp2qual.hooks.candidates import run_key
from tp2qual.hooks.gating import candidate_of, gate_of
from tp2qual.hooks.hosts import fleet_key
from tp2qual.hooks.progress import watch_for
from tp2qual.hooks.room import plan_line
from tp2qual.launch import ResolvedLaunch, resolve_launch
from tp2qual.redact import Redactor
from tp2qual.run_plan import run_sections
from tp2qual.serving.identity import host_identity, model_identity
from tp2qual.serving.managed import ManagedServer, build_launcher
from tp2qual.serving.server import Api, Server

PROGRESS_EVERY_S = 2.0


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tp2qual")
    group.addoption(
        "--plan",
        action="store_true",
        help="print each selected candidate's exact launch and start nothing",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """``--plan``: print each selected candidate's dry run (tp2qual.dry_run), start nothing."""
    if not session.config.getoption("plan"):
        return None
    state = session.config.stash[run_key]
    chosen: dict[str, Candidate] = {}  # in run order: the order the gating plugin sorted
    for item in session.items:
        if (candidate := candidate_of(item)) is not None:
            chosen.setdefault(candidate.name, candidate)
    writer = session.config.get_terminal_writer()
    for candidate in list(chosen.values()):
        writer.line(f"# {candidate.name}  ({candidate.launcher_kind}, TP{candidate.tp})")
        try:
            writer.line(plan_for(candidate, state.run_id, chosen, state.candidates))
        except CandidateError as exc:  # its launch cannot be resolved here: said, never raised
            writer.line(f"cannot be planned here: {exc}", red=True)
            session.testsfailed += 1  # the plan's exit status says so
            del chosen[candidate.name]
        writer.line()
    # gate 07's items by every candidate loaded, never the -k selection (tp2qual.accuracy_asked)
    estimates = {n: dry_run.estimate_for(c, chosen, state.candidates) for n, c in chosen.items()}
    fleet = session.config.stash.get(fleet_key, None)
    hosts = fleet.placement if fleet is not None else None
    writer.line("## the run: every candidate above, in this order")
    writer.line(dry_run.render(run_sections(list(chosen.values()), estimates, hosts)))
    if chosen:
        writer.line(plan_line(list(chosen.values()), state.run_dir))
    return True


def plan_for(
    candidate: Candidate,
    run_id: str,
    others: Mapping[str, Candidate] | None = None,
    peers: Sequence[Candidate] = (),
    launch: ResolvedLaunch | None = None,
) -> str:
    """The candidate's dry run: its sections (tp2qual.dry_run), in order; ``others``: the
    run's candidates by name; ``peers``: the candidates loaded, its settings compared with;
    ``launch``: the resolved launch to render (else resolved here, as the run resolves it)."""
    log = Path(gettempdir()) / "tp2qual-plan.log"  # never written: nothing starts
    launch = launch or resolve_launch(candidate, run_id=run_id)
    rendered = build_launcher(
        candidate, log, Redactor(candidate.env()), run_id=run_id, launch=launch
    ).plan()
    return dry_run.render(dry_run.plan_sections(candidate, launch, rendered, others, peers))


@pytest.fixture(scope="session")
def record(candidate: Candidate, request: pytest.FixtureRequest) -> CandidateRecord:
    """The candidate's evidence record (folder created on first use)."""
    state = request.config.stash[run_key]
    rec = state.record(candidate)
    # Each fact once (the hosts plugin may have recorded the Docker host before this fixture).
    if "host" not in rec.identity:
        rec.identity["host"] = host_identity()
        rec.evidence.write_json("identity/host.json", rec.identity["host"])
        rec.save()
    return rec


@pytest.fixture(scope="session")
def model_pin(candidate: Candidate, record: CandidateRecord) -> dict[str, Any]:
    """The model the candidate pins, proven to be the pinned bytes or revision, once per
    candidate (raises PinMismatch naming file, revision and pin). What was found is recorded
    either way, so ``verify`` can judge the pin again (``checks.preflight``)."""
    try:
        facts = model_identity(candidate)
    except PinMismatch as exc:
        if exc.facts is not None:
            record.identity["model"] = exc.facts
            record.evidence.write_json("identity/model.json", exc.facts)
            record.save()
        raise
    record.identity["model"] = facts
    record.evidence.write_json("identity/model.json", facts)
    record.save()
    return facts


@pytest.fixture(scope="session")
def launch(
    candidate: Candidate, record: CandidateRecord, gpu_snapshot: dict[str, Any]
) -> ResolvedLaunch:
    """The candidate's launch, resolved once for the run (tp2qual.launch): gate 00 asks the
    engine about it, the server starts it. Outside WSL2 a container gets exactly the GPUs
    preflight checked, by UUID; WSL2 is the serving host's (--hosts: not necessarily this one)."""
    gpus = gpu_snapshot.get("gpus") or []
    uuids = [g["uuid"] for g in gpus if g.get("uuid")][: candidate.gpus.get("count", 0)]
    return resolve_launch(
        candidate,
        run_id=record.run_id,
        device_ids=uuids,
        wsl2=(gpu_snapshot.get("host") or {}).get("wsl2"),
    )


@pytest.fixture(scope="session")
def server(
    candidate: Candidate,
    record: CandidateRecord,
    model_pin: dict[str, Any],
    launch: ResolvedLaunch,
    pull_images: bool,
    request: pytest.FixtureRequest,
) -> Iterator[Server]:
    launcher = build_launcher(
        candidate,
        record.evidence.path("server.log"),
        record.evidence.redactor,
        run_id=record.run_id,
        pull=pull_images,
        launch=launch,
    )
    managed = ManagedServer(
        candidate,
        record.evidence,
        launcher,
        model=model_pin,
        progress=_progress_printer(request.config, candidate),
    )
    try:
        with managed as ready:
            record.identity.update(managed.identity)
            record.save()
            ready.decode_floor = _decode_floor(request.config.stash[run_key], record)
            yield ready
    finally:
        record.identity.update(managed.identity)
        record.save()


def _decode_floor(state: RunState, record: CandidateRecord) -> tuple[float | None, str]:
    """The decode floor gate 08 would judge now (evidence/run_floors.py), for the budgets: the
    candidates this one is measured against ran before its server started."""
    floor = request_floor(state, record)
    return (floor.value, floor.brief()) if floor else (None, "")


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
    """Recorded HTTP calls into this gate's artifact ``<gate>.jsonl``, with a progress line."""
    gate = gate_of(request.node)
    watch = watch_for(request.node, server.candidate.name, gate)
    return server.api(f"{gate or request.node.name}.jsonl", gate, watch)


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
