"""Evidence plugin: keep the run's manifest and report current, close findings, tell JUnit.

Findings are saved after every gate by the gating plugin. Here: after each gate test the run's
``manifest.json`` is rewritten (so a crash leaves a manifest of what was captured), after each
candidate ``report.html`` is refreshed, and at the end the run is closed — an interrupted session
leaves INCOMPLETE (``finished`` stays False), the manifest is final, the report rebuilt, and the
terminal gets one line per candidate. JUnit (``--junitxml``) gets each candidate's identity and
verdict as test-suite properties (xunit2-compatible) and each gate test its claims as properties;
pytest-html, when it writes a report, gets links to each gate's raw artifacts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from tp2qual.artifacts.finding import ERROR, FAILED, NOT_RUN, CandidateRecord, Finding
from tp2qual.artifacts.layout import REPORT, write_manifest
from tp2qual.candidate import GATES, Candidate
from tp2qual.draft import draft_pin
from tp2qual.evidence.rederive import RESOLVED_CANDIDATE
from tp2qual.evidence.report import gate_artifacts, write_report
from tp2qual.evidence.run import RunState
from tp2qual.evidence.verify import verify_run
from tp2qual.exceptions import CandidateError
from tp2qual.hooks.candidates import run_key
from tp2qual.hooks.gating import candidate_of, gate_of
from tp2qual.serving.diagnose import settings_in_force
from tp2qual.serving.probe import backend_of

suite_property_key = pytest.StashKey[Callable[[str, object], None]]()
claims_before_key = pytest.StashKey[frozenset[tuple[str, str, str]]]()
_Wrapper = Generator[None, object, object]


# ---------------------------------------------------------------- closing the run


def close_run(state: RunState, *, interrupted: bool) -> None:
    for record in state.records.values():
        record.finished = not interrupted
        record.save()
    if state.records and not state.shared:  # a shared run is closed by its controller
        seal_run(state.run_dir, state.run_id, interrupted=interrupted)


def seal_run(run_dir: Path, run_id: str, *, interrupted: bool) -> None:
    """The final manifest, the run's one verification, and the report built on it."""
    write_manifest(run_dir, run_id=run_id, final=True, interrupted=interrupted)
    write_report(run_dir, verify_run(run_dir))


def _interrupted(exitstatus: int | pytest.ExitCode) -> bool:
    return exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR)


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> _Wrapper:
    """Settle verdicts and tell JUnit before it writes; close the run after fixtures are gone."""
    state = session.config.stash.get(run_key, None)
    if state is not None:
        _settle(session.config, state, interrupted=_interrupted(exitstatus))
    try:
        return (yield)
    finally:
        if state is not None:
            close_run(state, interrupted=_interrupted(exitstatus))


def _settle(config: pytest.Config, state: RunState, *, interrupted: bool) -> None:
    for record in state.records.values():
        record.finished = not interrupted
    add = config.stash.get(suite_property_key, None)
    if add is None:
        return  # no test ran (without --junitxml the recorder is a no-op)
    for record in state.records.values():
        for name, value in suite_properties(record):
            add(name, value)


# ---------------------------------------------------------------- during the run


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> _Wrapper:
    """After each gate test: manifest of what is on disk; after each candidate: the report."""
    try:
        return (yield)
    finally:
        _after_test(item, nextitem)


def _after_test(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    state = item.config.stash.get(run_key, None)
    candidate = candidate_of(item)
    if state is None or candidate is None or candidate.name not in state.records:
        return
    write_manifest(state.run_dir, run_id=state.run_id, final=False)
    following = candidate_of(nextitem) if nextitem is not None else None
    if following is None or following.name != candidate.name:
        write_report(state.run_dir)


def pytest_itemcollected(item: pytest.Item) -> None:
    """JUnit: each test carries its candidate's name (also when it is skipped)."""
    candidate = candidate_of(item)
    if candidate is not None:
        item.user_properties.append(("candidate", candidate.name))


@pytest.fixture(scope="session", autouse=True)
def _tp2qual_suite_properties(
    request: pytest.FixtureRequest, record_testsuite_property: Callable[[str, object], None]
) -> None:
    """Keep pytest's own (xunit2-compatible) suite-property recorder for the session's end."""
    request.config.stash[suite_property_key] = record_testsuite_property


def suite_properties(record: CandidateRecord) -> list[tuple[str, str]]:
    """Identity and verdict of one candidate, as ``candidate.<name>.<fact>`` properties."""
    return finding_properties(Finding.from_dict(record.as_dict()), record.evidence.root)


def finding_properties(finding: Finding, evidence: Path) -> list[tuple[str, str]]:
    """The same from a finding read back (the ``--hosts`` controller reads its workers')."""
    ident, spec = finding.identity, finding.spec
    model = ident.get("model") or {}
    facts: dict[str, Any] = {
        "verdict": finding.verdict,
        "failed_gate": finding.failed_gate or "",
        "suite_error_gate": finding.suite_error_gate or "",
        "run_id": finding.run_id,
        "model_repo": (spec.get("model") or {}).get("repo"),
        "model_sha": model.get("file_sha256") or model.get("resolved_revision"),
        "model_revision": (spec.get("model") or {}).get("revision"),
        "engine": (spec.get("engine") or {}).get("kind"),
        "engine_version": (ident.get("engine") or {}).get("version"),
        "image_digest": (ident.get("launch") or {}).get("image_digest"),
        "tensor_parallel_size": (spec.get("serve") or {}).get("tensor_parallel_size"),
        "docker_host": (ident.get("docker_host") or {}).get("name"),
        "evidence": str(evidence),
    }
    prefix = f"candidate.{finding.candidate}"
    return [(f"{prefix}.{k}", str(v)) for k, v in facts.items() if v not in (None, "")]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    context = _gate_record(item)
    if context is None:
        return report
    record, gate = context
    if report.when == "setup":
        record_resolved_candidate(record, run_options(item.config))
        item.stash[claims_before_key] = _claim_keys(record, gate)
    elif report.when == "call":
        _claim_properties(item, report, record, gate)
    if report.when == "call" or report.failed:
        _html_links(item, report, record, gate)
    return report


def record_resolved_candidate(
    record: CandidateRecord, options: dict[str, Any] | None = None
) -> None:
    """Before the candidate's first gate runs: the settings every gate runs with, as resolved
    (defaults merged), so ``verify`` re-derives verdicts with these, not today's candidate file.
    ``options``: the run's own settings a gate judges with (``--allow-busy``, ``--desktop-mib``)."""
    if (record.evidence.root / RESOLVED_CANDIDATE).is_file():
        return  # written at the run's start (or by a worker before this one)
    candidate = record.candidate
    record.evidence.write_json(
        RESOLVED_CANDIDATE,
        {
            "name": candidate.name,
            "engine": candidate.engine,
            "engine_version": candidate.spec["engine"].get("version"),  # as stated (gate 02)
            "launcher": candidate.launcher_kind,
            "max_model_len": candidate.max_model_len,
            "served_name": candidate.served_name,
            "tp": candidate.tp,
            "lane_after": candidate.spec.get("lane", {}).get("after"),  # its baseline, if a lane
            "command": candidate.command,  # the launch as written: the backends it asks for
            "model": _pins(candidate),  # gate 00's pins
            "gpus": candidate.gpus,  # gate 00's GPU needs
            "options": options or {},
            "nccl": _nccl_settings(candidate),  # gate 01's settings in force
            "gates": {gate: candidate.gate(gate) for gate in GATES},
            "control": candidate.reasoning_control,  # every chat answer's (checks.control)
        },
    )


def _pins(candidate: Candidate) -> dict[str, Any]:
    draft = candidate.model.get("draft")
    try:
        draft_value = draft_pin(draft, candidate.path).value if draft else None
    except CandidateError:
        draft_value = None
    return {"revision": candidate.model["revision"], "draft_pin": draft_value}


def _nccl_settings(candidate: Candidate) -> dict[str, Any]:
    """The backend, environment and container settings gate 01 judges the logs with (the host
    comes from the run's own records, ``identity/host.json`` and ``topology.json``)."""
    settings = settings_in_force(candidate, {})
    return {"backend": backend_of(candidate), "env": settings["env"],
            "container": settings["container"]}  # fmt: skip


def run_options(config: pytest.Config) -> dict[str, Any]:
    """The command-line settings a gate judges with, as the run had them."""
    return {
        "allow_busy": bool(config.getoption("allow_busy", False)),
        "desktop_mib": config.getoption("desktop_mib", None),
    }


def _gate_record(item: pytest.Item) -> tuple[CandidateRecord, str] | None:
    state = item.config.stash.get(run_key, None)
    candidate, gate = candidate_of(item), gate_of(item)
    if state is None or candidate is None or gate is None:
        return None
    record = state.records.get(candidate.name)  # never create one for a test that cannot run
    return (record, gate) if record is not None else None


def _claim_keys(record: CandidateRecord, gate: str) -> frozenset[tuple[str, str, str]]:
    return frozenset((c.name, repr(c.value), c.sha256) for c in record.gates[gate].claims)


def _claim_properties(
    item: pytest.Item, report: pytest.TestReport, record: CandidateRecord, gate: str
) -> None:
    """The claims this test made become its JUnit properties (value, artifact, sha256)."""
    before = item.stash.get(claims_before_key, frozenset())
    for claim in record.gates[gate].claims:
        if (claim.name, repr(claim.value), claim.sha256) in before:
            continue
        where = f"{record.candidate.name}/{claim.artifact}"
        for prop in (
            (f"claim.{claim.name}", str(claim.value)),
            (f"claim.{claim.name}.artifact", where),
            (f"claim.{claim.name}.sha256", claim.sha256),
        ):
            item.user_properties.append(prop)
            report.user_properties.append(prop)


def _html_links(
    item: pytest.Item, report: pytest.TestReport, record: CandidateRecord, gate: str
) -> None:
    """pytest-html only: links to the gate's artifacts, relative to its report."""
    html_path = item.config.getoption("htmlpath", None)
    if not html_path or not item.config.pluginmanager.hasplugin("html"):
        return
    import pytest_html  # imported only when its report is being written

    base = Path(html_path).resolve().parent
    root = record.evidence.root
    files = gate_artifacts(root, gate, [c.artifact for c in record.gates[gate].claims])
    if report.failed and (root / "server.log").is_file():
        files.append(root / "server.log")
    extras = list(getattr(report, "extras", []))
    extras += [
        pytest_html.extras.url(os.path.relpath(p, base), name=p.relative_to(root).as_posix())
        for p in files
    ]
    report.extras = extras  # type: ignore[attr-defined]  # pytest-html's documented field


# ---------------------------------------------------------------- terminal


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    state = terminalreporter.config.stash.get(run_key, None)
    if state is None or not state.records:
        return
    findings = [(Finding.from_dict(r.as_dict()), r.evidence.root) for r in state.records.values()]
    write_summary(terminalreporter, "qualification", state.run_dir, findings)


def write_summary(
    terminalreporter: pytest.TerminalReporter,
    title: str,
    run_dir: Path,
    findings: list[tuple[Finding, Path]],
) -> None:
    """One line per candidate (verdict, host when spread over hosts, why), then where to check."""
    terminalreporter.section(title)
    report = _shown(run_dir / REPORT)
    for finding, root in findings:
        host = (finding.identity.get("docker_host") or {}).get("name")
        name = f"{finding.candidate}  on {host}" if host else finding.candidate
        terminalreporter.line(
            f"{finding.verdict:<10} {name}  {_why(finding, root)}  "
            f"report: {report}#{finding.candidate}"
        )
    terminalreporter.line(
        f"evidence: {_shown(run_dir)}  (check it: python -m tp2qual verify {_shown(run_dir)})"
    )


def _said(found: dict[str, Any]) -> str:
    """What the terminal shows of a diagnosis: the remedy, or, when no rule named the cause,
    the verdict with the earliest error it quotes (there is no remedy to give)."""
    return found["cause"] if found["rule"] == "unrecognised_failure" else found["remedy"]


def _why(finding: Finding, root: Path) -> str:
    if gate := finding.first(FAILED):
        result = finding.gates[gate]
        found = [
            f for f in (result.diagnosis or {}).get("findings", []) if f.get("severity") != "notice"
        ]
        diagnosed = f" | diagnosed {found[0]['rule']}: {_said(found[0])[:160]}" if found else ""
        return f"failed {gate}: {result.reason[:100]}{diagnosed}"
    if gate := finding.first(ERROR):
        where = root / finding.gates[gate].error_artifact
        return f"suite error in {gate}, not the candidate's fault (traceback: {_shown(where)})"
    if gate := next((g for g, r in finding.gates.items() if r.outcome == NOT_RUN and r.reason), ""):
        return f"{gate} {finding.gates[gate].reason[:140]}"  # "not run: host … cannot be reached"
    said = finding.pass_sentence(root.parent)  # a PASS: gate 07's parts are in its sentence
    unjudged = [
        f"{gate} {part}: {why[:140]}"
        for gate, result in finding.gates.items()
        for part, why in result.skipped.items()
        if why.startswith("not judged") and not (said and gate == "agreement")
    ]
    return "; ".join([said or "no failed gate", *unjudged])


def _shown(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)
