"""The HTML evidence report: a typed view of a run folder, rendered by one autoescaped template.

``build_run`` reads ``results/<run-id>/`` (findings, manifest, identity, throughput artifacts)
into frozen dataclasses; ``render`` fills ``templates/report.html.j2``; ``write_report`` puts the
result at ``results/<run-id>/report.html``. Everything comes from disk, so the report can be
rebuilt at any time (``python -m tp2qual report results/<run>``). One self-contained file: CSS
and SVG inline, links relative to the run folder, nothing fetched.

The parts: the campaign overview, its chart, history and export (``report_overview``, from
``overview``), a candidate's performance (``performance_view``) and GPU topology
(``topology_view``), charts as SVG elements (``charts``); this module reads the rest.
"""

from __future__ import annotations

import datetime as dt
import json
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2

from tp2qual.artifacts.claims import Claim
from tp2qual.artifacts.finding import (
    ERROR,
    FAILED,
    Finding,
    GateResult,
    Verdict,
    read_finding,
)
from tp2qual.artifacts.layout import FINDING, MANIFEST, REPORT, atomic_write
from tp2qual.candidate import GATES
from tp2qual.evidence.handover_view import handover_view
from tp2qual.evidence.ladder_view import ladder_view
from tp2qual.evidence.performance_view import (
    comparison,
    judged_floor_values,
    performance_context,
    sample_charts,
    stat_rows,
)
from tp2qual.evidence.protocol_view import protocol_stats
from tp2qual.evidence.reference import REFERENCE_IDENTITY
from tp2qual.evidence.report_model import (
    OUTCOME_LABELS,
    SUMMARY,
    CandidateView,
    Cause,
    CheckRow,
    ClaimRow,
    ClosedLoop,
    Fact,
    GateRow,
    Link,
    RunView,
    fmt,
)
from tp2qual.evidence.report_overview import build_overview
from tp2qual.evidence.topology_view import topology_view
from tp2qual.evidence.verify import Verification

__all__ = ["build_run", "gate_artifacts", "render", "stated_sampling", "write_report"]

# ---------------------------------------------------------------- reading a run (disk)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _link(run_dir: Path, path: Path, manifest: dict[str, Any]) -> Link:
    rel = path.relative_to(run_dir).as_posix()
    entry = manifest.get(rel, {})
    return Link(quote(rel), rel.split("/", 1)[-1], path.stat().st_size, entry.get("sha256", ""))


def gate_artifacts(cand_dir: Path, gate: str, claimed: list[str]) -> list[Path]:
    """The files a gate wrote or cites: its own (named after it) and its claims' artifacts."""
    own = [p for p in sorted(cand_dir.glob(f"{gate}*")) if p.is_file()]
    cited = [cand_dir / a for a in claimed if a and (cand_dir / a).is_file()]
    return list(dict.fromkeys([*own, *cited]))


# What a request body says about how the reply is drawn (sampling and thinking controls).
STATED = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "repeat_penalty",
          "presence_penalty", "frequency_penalty", "seed", "chat_template_kwargs",
          "reasoning_effort")  # fmt: skip


def stated_sampling(cand_dir: Path, gate: str) -> str:
    """The sampling the gate's first generating request stated, read from its own artifact."""
    path = cand_dir / f"{gate}.jsonl"
    if not path.is_file():
        return ""
    for line in path.read_text(errors="replace").splitlines():
        try:
            body = (json.loads(line).get("request") or {}).get("body")
        except ValueError:
            continue
        if isinstance(body, dict) and "messages" in body:
            return ", ".join(
                f"{k}={json.dumps(body[k], sort_keys=True)}" for k in STATED if k in body
            )
    return ""


def build_gate(
    run_dir: Path, cand_dir: Path, gate: str, result: GateResult, manifest: dict[str, Any]
) -> GateRow:
    files = gate_artifacts(cand_dir, gate, [c.artifact for c in result.claims])
    if result.outcome == FAILED and (cand_dir / "server.log").is_file():
        files.append(cand_dir / "server.log")
    if result.error_artifact and (cand_dir / result.error_artifact).is_file():
        files.append(cand_dir / result.error_artifact)
    rows = tuple(
        ClaimRow(c.name, fmt(c.value), _claim_link(run_dir, cand_dir, c, manifest), c.sha256[:12])
        for c in result.claims
    )
    return GateRow(
        gate,
        result.outcome,
        OUTCOME_LABELS.get(result.outcome, result.outcome),
        result.reason,
        result.seconds,
        rows,
        tuple(sorted(result.tests.items())),
        tuple(result.excerpt),
        tuple(_link(run_dir, p, manifest) for p in files),
        stated_sampling(cand_dir, gate),
        causes_of(result.diagnosis),
        checks_of(result),
    )


def checks_of(result: GateResult) -> tuple[CheckRow, ...]:
    """Every check the gate ran and skipped (its tests, by name), in words; a
    variant skipped apart (a mode of a parametrized check) is a row of its own."""
    rows = [
        CheckRow(_words(test), outcome, result.skipped.get(test, ""))
        for test, outcome in result.tests.items()
    ]
    rows += [
        CheckRow(_words(variant), "skipped", why)
        for variant, why in result.skipped.items()
        if variant not in result.tests
    ]
    return tuple(rows)


def _words(test: str) -> str:
    return test.removeprefix("test_").replace("_", " ")


def closed_loop(cand_dir: Path, lines: int = 25) -> ClosedLoop | None:
    loop = _json(cand_dir / "nccl_closed_loop.json")
    if not loop:
        return None

    def tail(name: str) -> tuple[str, ...]:
        path = cand_dir / name
        text = path.read_text(errors="replace") if path.is_file() else ""
        return tuple(text.splitlines()[-lines:])

    summary = (
        f"diagnosed {loop.get('diagnosed')}; probe with remedy {loop.get('remedy')}: "
        f"{loop.get('reprobe')}"
    )
    return ClosedLoop(summary, tail("nccl_probe.log"), tail("nccl_probe_remedy.log"))


def causes_of(diagnosis: dict[str, Any] | None) -> tuple[Cause, ...]:
    if not diagnosis:
        return ()
    return tuple(
        Cause(
            f.get("rule", "?"),
            f.get("cause", ""),
            f.get("remedy", ""),
            f.get("confidence", ""),
            tuple(f"line {e.get('line')}: {e.get('text')}" for e in f.get("evidence", [])),
            diagnosis.get("log", ""),
        )
        for f in diagnosis.get("findings", [])
        if f.get("severity") != "notice"
    )


def _claim_link(
    run_dir: Path, cand_dir: Path, claim: Claim, manifest: dict[str, Any]
) -> Link | None:
    path = cand_dir / claim.artifact
    return _link(run_dir, path, manifest) if claim.artifact and path.is_file() else None


def identity_facts(cand_dir: Path, finding: Finding) -> tuple[Fact, ...]:
    ident = finding.identity
    model = ident.get("model") or _json(cand_dir / "identity/model.json") or {}
    engine = ident.get("engine") or _json(cand_dir / "identity/engine.json") or {}
    launch = ident.get("launch") or _json(cand_dir / "launch.json") or {}
    spec = finding.spec
    facts = [
        ("model", model.get("repo") or (spec.get("model") or {}).get("repo")),
        ("model SHA", model.get("file_sha256") or model.get("resolved_revision")),
        ("pinned revision", model.get("requested_revision")),
        ("served name", model.get("served_name")),
        ("quantization", model.get("quantization")),
        ("engine", engine.get("kind") or (spec.get("engine") or {}).get("kind")),
        ("engine version", engine.get("version")),
        ("image digest", launch.get("image_digest") or ident.get("image_digest")),
        ("launcher", launch.get("launcher")),
        ("tensor parallel", (spec.get("serve") or {}).get("tensor_parallel_size")),
        ("bounded context", (spec.get("serve") or {}).get("max_model_len")),
        ("host", (ident.get("host") or {}).get("os")),
        ("ran on Docker host", _docker_host(ident.get("docker_host"))),
    ]
    return tuple(Fact(k, fmt(v, 400)) for k, v in facts if v not in (None, "", {}, []))


REFERENCE_FACTS = (
    ("candidate", "candidate"),
    ("run (dated folder)", "run"),
    ("taken from", "source"),
    ("its verdict there", "verdict"),
    ("model revision (pin)", "model_revision"),
    ("model resolved", "model_resolved"),
    ("engine", "engine"),
    ("engine version", "engine_version"),
    ("image", "image"),
    ("image id", "image_id"),
    ("image digests", "image_digests"),
    ("launch digest (sha256 of argv + env)", "launch_sha256"),
    ("suite commit", "suite_commit"),
    ("suite checkout changed", "suite_dirty"),
)


def reference_facts(cand_dir: Path, finding: Finding) -> tuple[Fact, ...]:
    """Who made the transcript gate 07 compared with (evidence/reference.py records it); a fact
    the reference did not record is said so, never left out silently."""
    facts = finding.identity.get("reference") or _json(cand_dir / REFERENCE_IDENTITY) or {}
    if not isinstance(facts, dict) or not facts:
        return ()
    shown = [(label, facts.get(key)) for label, key in REFERENCE_FACTS]
    return tuple(Fact(k, "not recorded" if v is None else fmt(v, 400)) for k, v in shown)


def _docker_host(host: Any) -> str | None:
    """``--hosts`` runs: which host served the candidate, through which endpoint and worker."""
    if not isinstance(host, dict) or not host:
        return None
    return (
        f"{host.get('name')} ({host.get('docker')}, {host.get('reached_by')}; {host.get('worker')})"
    )


def launch_flags(cand_dir: Path, finding: Finding) -> tuple[str, ...]:
    launch = _json(cand_dir / "launch.json") or finding.identity.get("launch") or {}
    return tuple(str(a) for a in launch.get("argv") or ())


def build_candidate(run_dir: Path, cand_dir: Path, manifest: dict[str, Any]) -> CandidateView:
    finding = read_finding(cand_dir, run_dir) or Finding()
    gates = tuple(
        build_gate(run_dir, cand_dir, g, finding.gates.get(g) or GateResult(), manifest)
        for g in GATES
    )
    verdict = finding.verdict or Verdict.INCOMPLETE
    files = sorted(p for p in cand_dir.rglob("*") if p.is_file() and not p.name.endswith(".tmp"))
    return CandidateView(
        name=cand_dir.name,
        verdict=verdict,
        failed_gate=finding.failed_gate or "",
        started=finding.started,
        description=finding.description,
        gates=gates,
        identity=identity_facts(cand_dir, finding),
        reference=reference_facts(cand_dir, finding),
        launch_flags=launch_flags(cand_dir, finding),
        failures=tuple(g for g in gates if g.outcome == FAILED),
        suite_errors=tuple(g for g in gates if g.outcome == ERROR),
        stats=stat_rows(_json(cand_dir / SUMMARY)) or protocol_stats(cand_dir),
        plots=sample_charts(cand_dir, judged_floor_values(cand_dir) or _floors(finding)),
        context=performance_context(cand_dir),
        ladder=ladder_view(cand_dir),
        artifacts=tuple(_link(run_dir, p, manifest) for p in files),
        comparison=comparison(run_dir, cand_dir.name, verdict),
        closed_loop=closed_loop(cand_dir),
        topology=topology_view(_topology(cand_dir, finding)),
        topology_link=next(
            (_link(run_dir, p, manifest) for p in map(cand_dir.joinpath, TOPOLOGY) if p.is_file()),
            None,
        ),
    )


TOPOLOGY = ("topology.json", "identity/topology.json")  # the snapshot as gate 00 wrote it


def _topology(cand_dir: Path, finding: Finding) -> Any:
    found = (_json(cand_dir / name) for name in TOPOLOGY)
    return finding.identity.get("topology") or next((t for t in found if t), None)


def _floors(finding: Finding) -> dict[str, Any]:
    floors = ((finding.spec.get("gates") or {}).get("throughput") or {}).get("floors")
    return floors if isinstance(floors, dict) else {}


def build_run(run_dir: Path, check: Verification | None = None) -> RunView:
    """The report's view of a run. ``check`` is the run's verification when it has one (the end
    of a session, ``tp2qual report``); a report refreshed mid-run does not hash everything again."""
    run_dir = run_dir.resolve()
    manifest = (_json(run_dir / MANIFEST) or {}).get("files", {})
    candidates = tuple(
        build_candidate(run_dir, p.parent, manifest) for p in sorted(run_dir.glob(f"*/{FINDING}"))
    )
    generated = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    overview = build_overview(run_dir)
    if check is None:
        waiting = "run in progress: every artifact and claim is verified when it ends"
        return RunView(run_dir.name, generated, candidates, waiting, None, (), overview,
                       handover_view(run_dir))  # fmt: skip
    return RunView(
        run_dir.name,
        generated,
        candidates,
        check.summary(),
        check.ok,
        tuple(p.line() for p in check.problems[:50]),
        overview,
        handover_view(run_dir),
    )


# ---------------------------------------------------------------- rendering


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("tp2qual.evidence", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(view: RunView) -> str:
    return _environment().get_template("report.html.j2").render(run=view)


def write_report(run_dir: Path, check: Verification | None = None) -> Path:
    """Build and write ``report.html`` in the run folder (atomically); return its path."""
    return atomic_write(run_dir / REPORT, render(build_run(run_dir, check)))
