"""verify: a consistent run passes; each way of breaking it is caught and named.

``write_run`` builds a small run folder through the real core (RunState, CandidateRecord,
Evidence, ``claims.make_claim``, ``close_run``), so the folder is what a real run leaves; the
tests then break it one way each and expect ``verify`` to say so and the CLI to exit non-zero.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from test_verify_pins import hub_snapshot

from tp2qual.__main__ import main
from tp2qual.artifacts.claims import make_claim
from tp2qual.artifacts.finding import FAILED, NOT_APPLICABLE, PASSED, CandidateRecord
from tp2qual.artifacts.layout import write_manifest
from tp2qual.candidate import GATES, Candidate
from tp2qual.checks.answers import check_answer
from tp2qual.checks.control import control_rows
from tp2qual.checks.repetition import check
from tp2qual.checks.stats import summarize
from tp2qual.evidence.run import RunState
from tp2qual.evidence.verify import verify_run
from tp2qual.hooks.evidence import close_run, record_resolved_candidate
from tp2qual.perf.comparison import roofline_for
from tp2qual.perf.sampling import sample
from tp2qual.serving.hub_snapshot import DigestCache, check_snapshot

NAME = "fake-local"
RUN_ID = "20260101T000000Z-aaaa"
REVISION = "0123456789abcdef0123456789abcdef01234567"
FIGURES = ("ttft_s", "tpot_s", "decode_tok_s", "e2e_s")
ADDRESSES = "content_addresses"


GATE_SETTINGS = {
    "deterministic": {
        "prompts": [
            {"id": "capital", "prompt": "Capital of France?", "expect": ["Paris"]},
            {"id": "sum", "prompt": "What is 2 + 2?", "expect": ["4"]},
        ]
    },
    "repetition": {"prompts": ["Tell a long story.", "Describe a harbour.", "Explain tides."]},
    "tool_calls": {
        "modes": ["auto"],
        "prompt": "What is the weather in Paris?",
        "tool": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
        "arguments_expect": {"city": "Paris"},
    },
    "throughput": {"floors": {"decode_tok_s_median": 20}},
}
ANSWERS = {"capital": "Paris.", "sum": "4"}
VOCABULARY = (
    "the a harbour boat sailor wind rope salt night morning gull anchor tide storm lantern mast "
    "deck captain cargo island shore wave rain fog bell town market bread fish net old young "
    "quiet red grey blue green far near slowly softly sang waited watched carried pulled found"
)


def fake_candidate(root: Path, name: str = NAME, env: dict[str, str] | None = None) -> Candidate:
    spec = {
        "name": name,
        "description": "a synthetic candidate for the evidence self-tests",
        "model": {
            "repo": "example/Tiny-Model",
            "revision": REVISION,
            "served_name": "tiny",
            "hf_cache": str(root / "hub"),
        },
        "engine": {"kind": "vllm", "version": "0.0.test"},
        "launch": {
            "kind": "process",
            "command": ["{python}", "-m", "tiny", "--port", "{port}"],
            "env": env or {},
        },
        "serve": {"tensor_parallel_size": 1, "max_model_len": 2048},
        "gpus": {"count": 0},
        "gates": GATE_SETTINGS,
    }
    return Candidate(root / f"{name}.toml", spec)


def _gate(
    record: CandidateRecord,
    gate: str,
    claims: Sequence[tuple[str, str, dict]],
    outcome: str = PASSED,
) -> None:
    result = record.gates[gate]
    result.claims = [make_claim(record.evidence.root, n, a, s) for n, a, s in claims]
    result.outcome, result.seconds = outcome, 0.5
    record.save()


def _identity(record: CandidateRecord) -> None:
    """What gate 00 and the server record: the model's snapshot read for real (a small hub
    cache beside the run), the launch, the engine's identity, the log."""
    ev = record.evidence
    record_resolved_candidate(record)  # what the evidence plugin writes before the first gate
    hub = Path(record.candidate.model["hf_cache"])
    snapshot = hub / "models--example--Tiny-Model" / "snapshots" / REVISION
    if not snapshot.is_dir():  # one per results folder: its runs share it
        hub_snapshot(hub, "example/Tiny-Model", REVISION)
    model = {
        "repo": "example/Tiny-Model",
        "requested_revision": REVISION,
        "served_name": "tiny",
        "resolved_revision": REVISION,
        **check_snapshot(snapshot, DigestCache(None)),
    }
    record.identity = {
        "model": model,
        "engine": {"kind": "vllm", "version": "0.0.test"},
        "launch": {
            "launcher": "process",
            "argv": ["python", "-m", "tiny", "--port", "8000"],
            "image_digest": "sha256:" + "ab" * 32,
        },
    }
    ev.write_json("identity/model.json", record.identity["model"])
    ev.write_json("identity/engine.json", record.identity["engine"])
    ev.write_json("launch.json", record.identity["launch"])
    ev.write_json("readiness.json", {"outcome": "ready", "first_token_s": 1.0, "polls": 3,
                                     "listed_models": ["tiny"]})  # fmt: skip
    ev.write_text("server.log", "INFO starting tiny\nINFO ready on 127.0.0.1:8000\n")


def exchange(tag: str, message: dict, finish: str = "stop", **response: object) -> dict:
    """A raw record as ``Api.request`` writes it (the request body trimmed to its prompt)."""
    return {
        "tag": tag,
        "at": 1767225600.0,
        "request": {"method": "POST", "path": "/v1/chat/completions", "body": {"model": "tiny"}},
        "status": 200,
        "response": {
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            **response,
        },
        "elapsed_s": 0.1,
    }


def _deterministic(record: CandidateRecord, capital: str) -> None:
    ev = record.evidence
    prompts = {p["id"]: p for p in GATE_SETTINGS["deterministic"]["prompts"]}
    for pid, answer in (ANSWERS | {"capital": capital}).items():
        for i in range(3):
            ev.append_jsonl(
                "deterministic.jsonl",
                exchange(f"{pid}#{i}", {"role": "assistant", "content": answer}),
            )
        correct = check_answer(answer, prompts[pid]["expect"]).ok
        row = {"id": pid, "answer": answer, "reasoning": "", "correct": correct, "identical": True}
        ev.append_jsonl("deterministic_verdicts.jsonl", row | {"repeats": 3})
    _gate(
        record,
        "deterministic",
        [
            (
                "known_answers_correct",
                "deterministic_verdicts.jsonl",
                {"op": "all", "field": "correct"},
            )
        ],
        PASSED if capital == ANSWERS["capital"] else FAILED,
    )


def story(seed: int, words: int = 400) -> str:
    pick = random.Random(seed)
    vocabulary = VOCABULARY.split()
    return " ".join(pick.choice(vocabulary) for _ in range(words))


def _repetition(record: CandidateRecord) -> None:
    ev = record.evidence
    for i in range(3):
        text = story(i)
        ev.append_jsonl("repetition.jsonl", exchange(f"long#{i}", {"content": text}, "length"))
        verdict = check(text)
        ev.append_jsonl(
            "repetition_metrics.jsonl",
            {"prompt": i, "ok": verdict.ok, "reason": verdict.reason, **verdict.measures},
        )
    _gate(
        record,
        "repetition",
        [
            ("long_outputs_clean", "repetition_metrics.jsonl", {"op": "all", "field": "ok"}),
            ("long_outputs", "repetition_metrics.jsonl", {"op": "count"}),
        ],
    )


def _tool_calls(record: CandidateRecord) -> None:
    ev = record.evidence
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    ev.append_jsonl("tool_calls.jsonl", exchange("auto", message, "tool_calls"))
    ev.append_jsonl("tool_calls_verdicts.jsonl", {"mode": "auto", "ok": True, "problems": []})
    _gate(
        record,
        "tool_calls",
        [("tool_calls_ok", "tool_calls_verdicts.jsonl", {"op": "all", "field": "ok"})],
    )


def _functional_gates(record: CandidateRecord, capital: str) -> None:
    ev = record.evidence
    record.gates["preflight"].tests = {
        "test_model_pin_resolves": "passed",
        "test_gpus_fit_and_are_free": "skipped",
    }
    record.gates["preflight"].skipped = {
        "test_gpus_fit_and_are_free": "the candidate needs no GPU (topology recorded as found)"
    }
    _gate(
        record,
        "preflight",
        [("content_addresses", "identity/model.json", {"op": "field", "path": ADDRESSES})],
    )
    record.gates["nccl"].outcome = NOT_APPLICABLE
    record.gates["nccl"].reason = "not applicable: tensor_parallel_size = 1"
    ev.append_jsonl(
        "model_list.jsonl", {"tag": "models", "status": 200, "response": {"data": [{"id": "tiny"}]}}
    )
    record.gates["model_list"].tests = {
        "test_lists_exactly_the_served_name": "passed",
        "test_engine_is_the_stated_version": "passed",
    }
    _gate(
        record,
        "model_list",
        [("served_model", "model_list.jsonl", {"op": "field", "path": "response.data.0.id"})],
    )
    _deterministic(record, capital)
    _repetition(record)
    _tool_calls(record)


def _capacity(record: CandidateRecord) -> None:
    """Two claims on one growing JSONL: the first is derived before the second record exists."""
    ev, root = record.evidence, record.evidence.root
    usage = {"prompt_tokens": 1864, "completion_tokens": 3}
    ev.append_jsonl("capacity.jsonl", exchange("needle", {"content": "Lisbon"}, usage=usage))
    ev.append_jsonl(
        "capacity_results.jsonl",
        {"check": "needle", "prompt_tokens": 1864, "fill": 0.91015625, "answer": "Lisbon",
         "expect": "Lisbon", "ok": True},
    )  # fmt: skip
    first = make_claim(
        root, "needle_prompt_fill", "capacity_results.jsonl", {"op": "field", "path": "fill"}
    )
    rejected = exchange("over-bound", {}) | {"status": 400, "response": {"error": "too long"}}
    ev.append_jsonl("capacity.jsonl", rejected)
    ev.append_jsonl("capacity.jsonl", exchange("after-over-bound", {"content": "Hello"}))
    ev.append_jsonl(
        "capacity_results.jsonl",
        {"check": "over_bound", "status": 400, "after_status": 200, "ok": True},
    )
    second = make_claim(
        root, "over_bound_status", "capacity_results.jsonl", {"op": "field", "path": "status"}
    )
    record.gates["capacity"].claims = [first, second]
    record.gates["capacity"].outcome = PASSED
    record.save()


def _agreement(record: CandidateRecord) -> None:
    """No reference named: gate 07 is not applicable (and claims nothing here)."""
    result = record.gates["agreement"]
    result.outcome, result.reason = NOT_APPLICABLE, "no reference named ([reference] candidate)"
    record.save()


def stream(tag: str, ttft: float, rate: float, tokens: int = 128) -> dict:
    """A streamed exchange as ``Api.stream_chat`` writes it: one content chunk per token at
    ``ttft`` then every 1/rate s, and a last chunk carrying ``usage``."""
    chunks = [
        {"t": ttft + k / rate, "data": {"choices": [{"index": 0, "delta": {"content": "w "}}]}}
        for k in range(tokens)
    ]
    ended = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}  # as engines do
    last = {"choices": [], "usage": {"completion_tokens": tokens, "prompt_tokens": 99}}
    end = ttft + tokens / rate
    chunks += [{"t": end, "data": ended}, {"t": end, "data": last}]
    body = {"model": "tiny", "stream": True}
    request = {"method": "POST", "path": "/v1/chat/completions", "body": body}
    return {"tag": tag, "at": 1767225600.0, "request": request, "status": 200, "chunks": chunks,
            "error_body": None, "e2e_s": ttft + tokens / rate}  # fmt: skip


def _throughput(record: CandidateRecord, ttft: Sequence[float], rate: Sequence[float]) -> None:
    ev = record.evidence
    runs = [("warmup", 0, 1.0, 10.0)] + [
        ("sample", i, t, r) for i, (t, r) in enumerate(zip(ttft, rate, strict=True))
    ]
    for phase, i, t, r in runs:
        raw = stream(f"{phase}#{i}", t, r)
        ev.append_jsonl("throughput.jsonl", raw)
        chunks = [c["data"] for c in raw["chunks"]]
        figures = sample(chunks, [c["t"] for c in raw["chunks"]], 128, "usage")
        ev.append_jsonl("throughput_samples.jsonl", {"phase": phase, "i": i, **figures})
    samples = [
        json.loads(x)
        for x in (ev.root / "throughput_samples.jsonl").read_text().split("\n")
        if x and '"sample"' in x
    ]
    summary = {k: summarize([s[k] for s in samples]).as_dict() for k in FIGURES}
    ev.write_json("throughput_summary.json", summary)
    where = {"phase": "sample"}
    _gate(
        record,
        "throughput",
        [
            (
                f"{k}_median",
                "throughput_samples.jsonl",
                {"op": "median", "field": k, "where": where},
            )
            for k in ("ttft_s", "decode_tok_s")
        ]
        + [("samples", "throughput_samples.jsonl", {"op": "count", "where": where})],
    )


def write_run(
    root: Path,
    *,
    run_id: str = RUN_ID,
    name: str = NAME,
    ttft: Sequence[float] = (0.21, 0.2, 0.22, 0.19, 0.2),
    rate: Sequence[float] = (61.0, 60.2, 59.8, 60.5, 61.3),
    env: dict[str, str] | None = None,
    capital: str = ANSWERS["capital"],
) -> Path:
    """A consistent, finished run folder under ``root`` (passing unless ``capital``, the served
    answer to "Capital of France?", is wrong); returns the run folder."""
    candidate = fake_candidate(root, name, env)
    state = RunState(root, [candidate], run_id=run_id)
    record = state.record(candidate)
    _identity(record)
    _functional_gates(record, capital)
    _capacity(record)
    _agreement(record)
    _throughput(record, ttft, rate)
    _control_proofs(record)
    close_run(state, interrupted=False)
    return state.run_dir


def _control_proofs(record: CandidateRecord) -> None:
    """Each gate's answers' control proofs, as ``Api`` writes them beside every answer."""
    root = record.evidence.root
    for raw in sorted(root.glob("*.jsonl")):
        if raw.stem.endswith("_control"):
            continue
        exchanges = [json.loads(x) for x in raw.read_text().splitlines() if x.strip()]
        for row in control_rows(record.candidate.reasoning_control, exchanges):
            record.evidence.append_jsonl(f"{raw.stem}_control.jsonl", row)


def rehash(run_dir: Path) -> None:
    """A manifest consistent with what is on disk now (a bad claim, not a tampered file)."""
    write_manifest(run_dir, run_id=run_dir.name, final=True)


def edit_finding(run_dir: Path, change: Callable[[dict], object]) -> None:
    path = run_dir / NAME / "finding.json"
    finding = json.loads(path.read_text())
    change(finding)
    path.write_text(json.dumps(finding, indent=2, sort_keys=True) + "\n")


def kinds(run_dir: Path) -> list[tuple[str, str]]:
    return [(p.kind, p.where) for p in verify_run(run_dir).problems]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "results")


def test_a_consistent_run_verifies(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = verify_run(run_dir)
    assert result.ok, [p.line() for p in result.problems]
    assert (result.candidates, result.final_manifest) == (1, True)
    assert result.claims == 11
    assert result.files >= 12
    assert main(["verify", str(run_dir)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 2 and out[1].startswith(f"verify {RUN_ID}: OK")
    assert out[0] == f"{NAME}: {result.sentences[NAME]}"  # the PASS with its one sentence


def test_latest_and_the_results_folder_are_accepted(run_dir: Path) -> None:
    assert (run_dir.parent / "latest").is_symlink()
    assert verify_run(run_dir.parent / "latest").ok
    assert verify_run(run_dir.parent).run_dir == run_dir.resolve()


def test_every_claim_is_stamped_with_its_artifact_sha256(run_dir: Path) -> None:
    finding = json.loads((run_dir / NAME / "finding.json").read_text())
    claims = [c for g in finding["gates"].values() for c in g["claims"]]
    assert claims and all(len(c["sha256"]) == 64 and c["bytes"] > 0 for c in claims)
    fill, status = finding["gates"]["capacity"]["claims"]
    assert fill["bytes"] < status["bytes"]  # derived before the file grew; still verifiable


def test_a_tampered_artifact_is_caught(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = run_dir / NAME / "deterministic_verdicts.jsonl"
    path.write_text(path.read_text().replace('"correct": true', '"correct": false', 1))
    found = kinds(run_dir)
    assert ("tampered", f"{NAME}/deterministic_verdicts.jsonl") in found
    assert any(k == "tampered" and "known_answers_correct" in w for k, w in found)
    assert main(["verify", str(run_dir)]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("TAMPERED") and "problem(s)" in lines[-1]


def test_a_deleted_artifact_is_caught(run_dir: Path) -> None:
    (run_dir / NAME / "throughput_samples.jsonl").unlink()
    found = kinds(run_dir)
    assert ("missing", f"{NAME}/throughput_samples.jsonl") in found
    assert sum(k == "missing" for k, _ in found) == 4  # the file and its three claims


def test_an_added_file_is_caught(run_dir: Path) -> None:
    (run_dir / NAME / "extra.json").write_text("{}")
    assert kinds(run_dir) == [("unlisted", f"{NAME}/extra.json")]


def test_a_claim_its_artifact_does_not_contain_is_caught(run_dir: Path) -> None:
    def point_elsewhere(finding: dict) -> None:
        finding["gates"]["model_list"]["claims"][0]["derive"]["path"] = "response.data.1.id"

    edit_finding(run_dir, point_elsewhere)
    rehash(run_dir)  # the files agree with the manifest: only the claim is wrong
    problems = verify_run(run_dir).problems
    assert [(p.kind, p.where) for p in problems] == [
        ("claim", f"{NAME}/finding.json [model_list.served_model]")
    ]
    assert "not found in model_list.jsonl" in problems[0].detail


def test_a_claimed_value_the_artifact_does_not_give_is_caught(run_dir: Path) -> None:
    def inflate(finding: dict) -> None:
        finding["gates"]["throughput"]["claims"][1]["value"] = 95.0  # decode_tok_s_median

    edit_finding(run_dir, inflate)
    rehash(run_dir)
    problems = verify_run(run_dir).problems
    assert [p.kind for p in problems] == ["claim", "rederive"]  # its artifact, its raw streams
    assert "claims 95.0, throughput_samples.jsonl gives 60.5" in problems[0].detail
    assert "claims 95.0; the raw exchanges give 60.5" in problems[1].detail


def test_rewritten_claimed_bytes_are_caught_even_with_a_fresh_manifest(run_dir: Path) -> None:
    path = run_dir / NAME / "capacity_results.jsonl"
    path.write_text(path.read_text().replace('"fill": 0.91015625', '"fill": 0.55'))
    rehash(run_dir)
    found = kinds(run_dir)
    assert found == [
        ("tampered", f"{NAME}/finding.json [capacity.needle_prompt_fill]"),
        ("tampered", f"{NAME}/finding.json [capacity.over_bound_status]"),
        ("rederive", f"{NAME}/capacity.jsonl needle"),  # the row no longer says what it judged
        ("rederive", f"{NAME}/finding.json [capacity.needle_prompt_fill]"),
    ]


def test_a_pass_without_claims_is_caught(run_dir: Path) -> None:
    edit_finding(run_dir, lambda f: f["gates"]["tool_calls"].update(claims=[]))
    rehash(run_dir)
    problems = verify_run(run_dir).problems
    assert [(p.kind, p.detail) for p in problems] == [
        ("verdict", "states PASS but its gates give INCOMPLETE"),
        ("unbacked", "PASS, but gate tool_calls has no claim"),
    ]


def test_a_pass_whose_claim_names_no_artifact_is_caught(run_dir: Path) -> None:
    edit_finding(run_dir, lambda f: f["gates"]["preflight"]["claims"][0].update(artifact=""))
    rehash(run_dir)
    found = {p.kind: p.detail for p in verify_run(run_dir).problems}
    assert found["unbacked"] == "PASS, but claim preflight.content_addresses names no artifact"
    assert found["verdict"] == "states PASS but its gates give INCOMPLETE"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda f: f["gates"]["throughput"].update(outcome="not_run"),
            "states PASS but its gates give INCOMPLETE",
        ),
        (lambda f: f.update(finished=False), "states PASS but its gates give INCOMPLETE"),
        (lambda f: f["gates"].pop("throughput"), "states PASS but its gates give INCOMPLETE"),
        (lambda f: f.update(verdict="FAIL"), "states FAIL but its gates give PASS"),
    ],
)
def test_a_verdict_its_gates_do_not_give_is_caught(run_dir: Path, change, expected: str) -> None:
    edit_finding(run_dir, change)
    rehash(run_dir)
    details = [p.detail for p in verify_run(run_dir).problems if p.kind == "verdict"]
    assert details == [expected]


def test_a_missing_manifest_and_a_missing_run(tmp_path: Path, run_dir: Path) -> None:
    (run_dir / "manifest.json").unlink()
    assert ("manifest", "manifest.json") in kinds(run_dir)
    assert main(["verify", str(tmp_path / "nowhere")]) == 2


def test_gates_cover_the_whole_order() -> None:
    assert GATES[0] == "preflight" and GATES[-1] == "throughput"  # write_run covers each gate


@pytest.mark.parametrize(
    ("floor", "ok"), [({"ttft_s_median": 0.5}, True), ({"ttft_s_median": 0.1}, False)]
)
def test_a_ttft_floor_is_rederived_as_an_upper_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, floor: dict, ok: bool
) -> None:
    """The samples' TTFT median is 0.2 s: under a 0.5 s floor, over a 0.1 s one (perf/floors.py,
    the gate's own check, run again on the raw streams)."""
    monkeypatch.setitem(GATE_SETTINGS, "throughput", {"floors": floor, "why": "a test"})
    result = verify_run(write_run(tmp_path / "results"))
    assert result.ok is ok, [p.line() for p in result.problems]
    if not ok:
        details = " ".join(p.detail for p in result.problems)
        assert "ttft_s_median = 0.2, floor ≤ 0.1" in details


def _with_roofline(run_dir: Path, **changes: float) -> None:
    """roofline.json as gate 08 writes it (perf/comparison.py roofline_for), 637 tok/s."""
    roof = roofline_for({"active_params_b": 10, "bits_per_weight": 4.5}, {"bandwidth_gbs": 1792},
                        None, 2, 60.5)  # fmt: skip
    (run_dir / NAME / "roofline.json").write_text(json.dumps({**roof, **changes}))
    rehash(run_dir)


@pytest.mark.parametrize(("fraction", "ok"), [(0.03, True), (0.5, False)])
def test_a_roofline_floor_is_derived_again_from_the_roofline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fraction: float, ok: bool
) -> None:
    rule = {"decode_tok_s_median": {"fraction": fraction, "of": "roofline", "why": "a test"}}
    monkeypatch.setitem(GATE_SETTINGS, "throughput", {"derived_floors": rule})
    run_dir = write_run(tmp_path / "results")
    _with_roofline(run_dir)
    result = verify_run(run_dir)
    assert result.ok is ok, [p.line() for p in result.problems]
    if not ok:
        assert "decode_tok_s_median = 60.5, floor ≥ 318.6" in str(
            [p.detail for p in result.problems]
        )


def test_a_roofline_bound_its_inputs_do_not_give_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bound lowered by hand would lower the derived floor under it: its inputs decide."""
    rule = {"decode_tok_s_median": {"fraction": 0.5, "of": "roofline", "why": "a test"}}
    monkeypatch.setitem(GATE_SETTINGS, "throughput", {"derived_floors": rule})
    run_dir = write_run(tmp_path / "results")
    _with_roofline(run_dir, bound_tok_s=100.0)
    details = [p.detail for p in verify_run(run_dir).problems]
    assert any("roofline.json bound_tok_s recorded 100.0" in d for d in details), details
