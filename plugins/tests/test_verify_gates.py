"""verify judges gates 00, 01 and 02 again from their raw records, by the functions the gates
call (``checks.preflight``, ``checks.nccl_gate``, ``checks.model_list``, ``checks.readiness``):
an honest FAIL verifies, a record changed to say otherwise is caught, naming it.

Each test starts from the consistent run of ``test_verify.write_run`` (its gate 00 reads a real
hub snapshot; its gate 02 lists the served name) and records one gate the way the gate records
it, from real captures where the failure needs hardware (two busy H200s' NVML snapshot, a gloo
probe and a vLLM TP2 server log of this CPU machine).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_verify import NAME, edit_finding, rehash, write_run

from tp2qual.artifacts.claims import make_claim
from tp2qual.checks import model_list, nccl_gate, preflight
from tp2qual.checks.readiness import judge_readiness
from tp2qual.checks.verdict import NotJudged
from tp2qual.evidence.verify import verify_run
from tp2qual.exceptions import PinMismatch
from tp2qual.serving.hub_snapshot import DigestCache, check_snapshot

DATA = Path(__file__).with_name("data")
BUSY_H200 = DATA / "h200x2-2026-11-30" / "topology-busy.json"
GLOO_OK = DATA / "gloo-probe-cpu" / "probe-2rank-ok.log"
GLOO_MISSING_RANK = DATA / "gloo-probe-cpu" / "probe-2rank-missing-rank1.log"
TP2_SERVER_LOG = DATA / "vllm-cpu-tp2" / "server.log"


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "results")


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _write(path: Path, body: dict[str, Any]) -> None:
    path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    body = _json(path)
    change(body)
    _write(path, body)


def _failed(gate: str, tests: dict[str, str], reason: str, **extra: Any) -> Callable[[dict], None]:
    """The finding as the gating plugin leaves it when ``gate`` failed: later gates blocked."""

    def change(finding: dict) -> None:
        names = list(finding["gates"])
        finding["gates"][gate].update(outcome="failed", reason=reason, tests=tests, claims=[])
        for later in names[names.index(gate) + 1 :]:
            if finding["gates"][later]["outcome"] != "not_applicable":
                finding["gates"][later].update(
                    outcome="blocked", reason=f"blocked by {gate}", claims=[], tests={}
                )
        finding.update(verdict="FAIL", failed_gate=gate, **extra)

    return change


def _problems(run_dir: Path, **kw: Any) -> list[str]:
    return [p.line() for p in verify_run(run_dir, **kw).problems]


# ---------------------------------------------------------------- gate 00


def test_a_changed_blob_fails_the_pin_by_the_rule_verify_runs(tmp_path: Path) -> None:
    """check_snapshot raises with the facts found; the same rule judges the facts again."""
    run_dir = write_run(tmp_path / "results")
    model = _json(run_dir / NAME / "identity/model.json")
    shard = next(f for f in model["files"] if f["file"].endswith("1-of-00002.safetensors"))
    Path(shard["target"]).write_bytes(b"other bytes under the same content address")
    with pytest.raises(ValueError, match="holds bytes whose digest is") as raised:
        check_snapshot(Path(model["snapshot"]), DigestCache(None))
    facts = {**model, **raised.value.facts}  # type: ignore[attr-defined]
    verdict = preflight.judge_model_pin(facts, model["requested_revision"])
    assert not verdict.ok and str(raised.value) in verdict.reason


def test_a_wrong_pin_that_failed_preflight_verifies(run_dir: Path) -> None:
    """The bytes preflight read are not the pinned revision's: an honest FAIL, re-derived from
    identity/model.json; the record edited to match, the failure is no longer backed."""
    path = run_dir / NAME / "identity/model.json"
    _edit(path, lambda m: m["files"][0].update(digest="0" * 64))
    reason = "PinMismatch: model.revision …: blob … holds bytes whose digest is 000…"
    edit_finding(run_dir, _failed("preflight", {"test_model_pin_resolves": "failed"}, reason))
    rehash(run_dir)
    result = verify_run(run_dir)
    assert result.ok, [p.line() for p in result.problems]
    assert not result.notes
    _edit(path, lambda m: m["files"][0].update(digest=m["files"][0]["blob"]))
    rehash(run_dir)
    found = _problems(run_dir)
    assert any(
        "[preflight.test_model_pin_resolves]: recorded failed; identity/model.json gives passed"
        in line
        for line in found
    ), found
    assert any("preflight failed, but neither" in line for line in found), found


def test_rehash_sees_a_weight_changed_after_the_run(run_dir: Path) -> None:
    model = _json(run_dir / NAME / "identity/model.json")
    shard = next(f for f in model["files"] if f["file"].endswith(".safetensors"))
    assert verify_run(run_dir, rehash=True).ok
    Path(shard["target"]).write_bytes(b"changed after the run")
    assert verify_run(run_dir).ok  # the recorded digests still judge a pass
    found = _problems(run_dir, rehash=True)
    assert len(found) == 1 and f"{NAME}/identity/model.json {shard['file']}" in found[0], found
    assert f"recorded {shard['digest']!r}" in found[0]


def _busy_gpus(run_dir: Path) -> None:
    """Two H200s, busy (a real NVML capture), for a candidate that needs both."""
    snapshot = _json(BUSY_H200)
    _write(run_dir / NAME / "topology.json", snapshot)
    _edit(run_dir / NAME / "identity/candidate.json",
          lambda c: c.update(gpus={"count": 2, "memory_gib": 80}, tp=2))  # fmt: skip
    verdict = preflight.judge_gpus(
        snapshot, {"count": 2, "memory_gib": 80}, tp=2, allow_busy=False, desktop_mib=None
    )
    assert not isinstance(verdict, NotJudged) and not verdict.ok
    _write(
        run_dir / NAME / "busy.json",
        {"allow_busy": False, "ok": verdict.ok, "reason": verdict.reason, **verdict.measures},
    )
    tests = {"test_model_pin_resolves": "passed", "test_gpus_fit_and_are_free": "failed"}
    edit_finding(run_dir, _failed("preflight", tests, f"AssertionError: {verdict.reason}"))
    rehash(run_dir)


def test_busy_gpus_fail_preflight_from_the_recorded_snapshot(run_dir: Path) -> None:
    _busy_gpus(run_dir)
    result = verify_run(run_dir)
    assert result.ok, [p.line() for p in result.problems]
    _edit(run_dir / NAME / "busy.json", lambda b: b.update(ok=True))
    rehash(run_dir)
    assert any(f"{NAME}/busy.json: preflight: busy.json ok recorded True" in p for p in
               _problems(run_dir))  # fmt: skip


def test_the_run_s_allow_busy_is_the_setting_judged(run_dir: Path) -> None:
    """Busy GPUs pass under --allow-busy only when the run recorded it at its start."""
    _busy_gpus(run_dir)
    allowed = {"allow_busy": True}
    _edit(run_dir / NAME / "identity/candidate.json", lambda c: c.update(options=allowed))
    rehash(run_dir)
    found = _problems(run_dir)
    assert any("recorded failed; topology.json (busy.json) gives passed" in p for p in found), found


# ---------------------------------------------------------------- gate 01


def _tp2_gloo(run_dir: Path, probe: Path, log: Path) -> dict[str, str]:
    """Gate 01 of a TP2 CPU serve recorded as the gate records it, from real captures: the
    gloo probe's output and vLLM 0.32.0's TP2 server log. Returns each check's outcome."""
    folder = run_dir / NAME
    gloo = {"backend": "gloo", "env": {}, "container": None}
    _edit(folder / "identity/candidate.json", lambda c: c.update(tp=2, nccl=gloo))
    settings = nccl_gate.NcclSettings(2, "gloo")
    text = probe.read_text()
    rc = 0 if text.rstrip().endswith("rc=0") else 1
    (folder / "nccl_probe.log").write_text(nccl_gate.probe_log(["python", "probe"], text, rc, 3.0))
    kept = nccl_gate.read_probe_log((folder / "nccl_probe.log").read_text())
    probe_verdict = nccl_gate.judge_probe(kept, settings)
    _write(folder / "nccl_probe_analysis.json",
           {"ok": probe_verdict.ok, "reason": probe_verdict.reason, "returncode": rc,
            "seconds": 3.0, **probe_verdict.measures})  # fmt: skip
    (folder / "server.log").write_text(log.read_text())
    lines = nccl_gate.whole_lines(log.read_text())
    server = nccl_gate.judge_server_log(lines, settings)
    _write(
        folder / "nccl_server_analysis.json",
        {"ok": server.ok, "reason": server.reason, "lines_read": len(lines), **server.measures},
    )
    tests = {"test_probe_all_reduce": "passed" if probe_verdict.ok else "failed",
             "test_server_log_analysis": "passed" if server.ok else "failed"}  # fmt: skip
    return tests


def test_a_tp2_serve_s_gate_01_is_judged_again_from_both_logs(run_dir: Path) -> None:
    tests = _tp2_gloo(run_dir, GLOO_OK, TP2_SERVER_LOG)
    assert set(tests.values()) == {"passed"}
    folder = run_dir / NAME
    claims = [
        make_claim(folder, "probe_ranks_ok", "nccl_probe_analysis.json",
                   {"op": "field", "path": "report.ranks_ok"}),
        make_claim(folder, "ranks_joined", "nccl_server_analysis.json",
                   {"op": "field", "path": "ranks_joined"}),
    ]  # fmt: skip

    def passed(finding: dict) -> None:
        finding["gates"]["nccl"].update(outcome="passed", reason="", tests=tests,
                                        claims=[c.as_dict() for c in claims])  # fmt: skip

    edit_finding(run_dir, passed)
    rehash(run_dir)
    result = verify_run(run_dir)
    assert result.ok, [p.line() for p in result.problems]
    assert result.rejudged["nccl"] == 2  # nccl_probe.log, server.log
    # rank 1's worker renamed in the log the gate read: it never joined
    log = folder / "server.log"
    log.write_text(log.read_text().replace("Worker_TP1", "Worker"))
    rehash(run_dir)
    found = _problems(run_dir)
    assert any("[nccl.test_server_log_analysis]: recorded passed; server.log" in p for p in found)
    assert any("nccl passed, but the raw exchanges fail: server.log" in p for p in found), found


def test_a_probe_missing_a_rank_fails_gate_01_honestly(run_dir: Path) -> None:
    tests = _tp2_gloo(run_dir, GLOO_MISSING_RANK, TP2_SERVER_LOG)
    assert tests["test_probe_all_reduce"] == "failed"
    edit_finding(run_dir, _failed("nccl", tests, "Failed: NCCL probe rc=1 after 3.0s (…)"))
    rehash(run_dir)
    result = verify_run(run_dir)
    assert result.ok, [p.line() for p in result.problems]
    assert not result.notes


# ---------------------------------------------------------------- gate 02


def test_model_list_rules() -> None:
    ok = {"status": 200, "response": {"data": [{"id": "tiny", "max_model_len": 2048}]}}
    assert model_list.judge_listing(ok, "tiny").ok
    assert model_list.judge_context(ok, 2048, "vllm").ok  # type: ignore[union-attr]
    bound = model_list.judge_context(ok, 4096, "vllm")
    assert not isinstance(bound, NotJudged) and "max_model_len=2048" in bound.reason
    silent = {"status": 200, "response": {"data": [{"id": "tiny"}]}}
    assert isinstance(model_list.judge_context(silent, 2048, "llama.cpp"), NotJudged)
    empty = model_list.judge_listing({"status": 200, "response": {"choices": []}}, "tiny")
    assert not empty.ok and "without a model list" in empty.reason and '"choices"' in empty.reason
    assert isinstance(model_list.judge_version({"version": "1"}, None), NotJudged)


def test_a_wrong_context_fails_gate_02_honestly_and_a_fixed_card_is_caught(run_dir: Path) -> None:
    path = run_dir / NAME / "model_list.jsonl"
    card = {"id": "tiny", "max_model_len": 4096}
    path.write_text(
        json.dumps({"tag": "models", "status": 200, "response": {"data": [{"id": "tiny"}]}})
        + "\n"
        + json.dumps({"tag": "models-context", "status": 200, "response": {"data": [card]}})
        + "\n"
    )
    tests = {"test_lists_exactly_the_served_name": "passed",
             "test_reported_context_is_the_bound": "failed"}  # fmt: skip
    edit_finding(run_dir, _failed("model_list", tests, "AssertionError: engine serves 4096"))
    rehash(run_dir)
    result = verify_run(run_dir)
    assert result.ok, [p.line() for p in result.problems]
    assert result.rechecked["model_list"] == 2
    path.write_text(path.read_text().replace("4096", "2048"))
    rehash(run_dir)
    found = _problems(run_dir)
    assert any("recorded failed; model_list.jsonl models-context gives passed" in p for p in found)


def test_a_start_up_failure_is_judged_again_from_its_readiness_record(run_dir: Path) -> None:
    folder = run_dir / NAME
    for name in ("model_list.jsonl", "identity/engine.json"):
        (folder / name).unlink()
    record = {"outcome": "exited", "exit": "exit code 3", "waited_s": 1.2, "polls": 4,
              "listed_models": [], "first_token_s": None, "timeout_s": 120}  # fmt: skip
    assert "exited during start-up after 1.2s (exit code 3)" in judge_readiness(record).reason
    _write(folder / "readiness.json", record)
    reason = "setup: tp2qual.exceptions.StartupExited: server exited during start-up"
    tests = {"test_lists_exactly_the_served_name": "failed"}
    edit_finding(run_dir, _failed("model_list", tests, reason,
                                  server_down="model_list (start-up failed)"))  # fmt: skip
    rehash(run_dir)
    result = verify_run(run_dir)
    assert result.ok, [p.line() for p in result.problems]
    assert not result.notes and result.rejudged["model_list"] == 1
    _write(folder / "readiness.json", record | {"outcome": "ready", "first_token_s": 2.0,
                                                "listed_models": ["tiny"]})  # fmt: skip
    rehash(run_dir)
    assert _problems(run_dir) == [
        f"UNSUPPORTED {NAME}/finding.json: model_list failed at the server's start-up, but "
        "readiness.json shows it ready"
    ]


def test_a_check_recorded_passed_without_its_record_is_caught(run_dir: Path) -> None:
    (run_dir / NAME / "identity/engine.json").unlink()
    rehash(run_dir)
    assert _problems(run_dir) == [
        f"REDERIVE  {NAME}/finding.json [model_list.test_engine_is_the_stated_version]: passed, "
        "but identity/engine.json is not on disk"
    ]


def test_a_pin_mismatch_carries_its_facts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """model_identity refuses a wrong gguf pin with the digest it found, for gate 00 to record."""
    from tp2qual.candidate import Candidate
    from tp2qual.serving.identity import model_identity

    monkeypatch.setenv("TP2QUAL_CACHE", str(tmp_path / "cache"))
    weights = tmp_path / "tiny.gguf"
    weights.write_bytes(b"GGUF tiny")
    pin = "gguf-sha256:" + "0" * 64
    spec = {"name": "tiny", "model": {"repo": "x/y", "revision": pin, "served_name": "tiny",
                                      "file": str(weights)}}  # fmt: skip
    with pytest.raises(PinMismatch) as raised:
        model_identity(Candidate(tmp_path / "tiny.toml", spec))
    facts = raised.value.facts
    assert facts is not None and facts["file_sha256"] != "0" * 64
    assert preflight.judge_model_pin(facts, pin).reason in str(raised.value)


@pytest.mark.parametrize(
    ("reported", "stated", "same"),
    [
        ("0.22.1", "0.22.1", True),
        ("0.11.1+9114fd76", "0.11.1", True),  # NGC 25.12's vLLM (vllm-project/vllm #31424)
        ("0.22.1+9114fd76.nv26.06", "0.22.1", True),  # any builder's local label
        ("0.22.1.post1", "0.22.1", False),  # another release
        ("0.22.1.dev5+g9114fd76", "0.22.1", False),  # a build before the release
        ("0.22.10", "0.22.1", False),
        ("0.22.1+other", "0.22.1+9114fd76", False),  # a stated label means that build
        (None, "0.22.1", False),
    ],
)
def test_the_stated_engine_version_ignores_only_a_builders_local_label(
    reported: str | None, stated: str, same: bool
) -> None:
    """Gate 02 and verify judge by the same function: one NGC build is not the candidate's
    FAIL for the "+…" its image appends to the release it states."""
    verdict = model_list.judge_version({"version": reported}, stated)
    assert not isinstance(verdict, NotJudged) and verdict.ok is same, verdict
