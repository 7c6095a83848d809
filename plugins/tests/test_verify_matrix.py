"""verify on honest failures: one real inner run, a FAIL at each gate for a real cause, every one
verified OK and its failure re-derived from its raw record; a tamper of each caught.

Each row is a copy of the embedded candidate (SmolLM2-135M on llama.cpp, CPU; the self-tests'
small settings, ``test_faults.smollm2_spec``) that fails one gate for a real cause: a bad
candidate file (a wrong pin, TP2 on an engine that forms no ranks, a wrong stated version, a
floor no serve meets) or the fault proxy in front of the real engine (``faultproxy.py``). All
rows run in one inner ``pytest`` run, one server after the other; the gates a row does not
prove are declared not applicable in its copy, so each row costs what its own gate costs.

Per row, from the inner run's folder:

* the candidate FAILs at its gate (``failed_gate``), every later gate blocked;
* ``verify`` finds nothing wrong with its folder, and re-derived the failure from the raw
  record (the gate is among those re-checked or re-judged; no failure stands on its reason
  alone), and ``python -m tp2qual verify RUN`` exits 0 for the whole run;
* a tamper of the raw record that failed it (making it read as a pass), on a copy of the run
  with the manifest re-written to match, is caught, naming the candidate.

Gate 07's row: greedy taking its own second choice behind the proxy, which no reference is
needed to see.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_faults import Inner, run_inner, smollm2_spec, with_fault, write_candidate
from test_verify import story

from tp2qual.artifacts.layout import write_manifest
from tp2qual.candidate import GATES
from tp2qual.evidence.verify import Verification, verify_run

pytestmark = pytest.mark.slow

WRONG_PIN = "gguf-sha256:" + "0" * 64
OK_PROBE = Path(__file__).with_name("data") / "gloo-probe-cpu" / "probe-2rank-ok.log"


@dataclass(frozen=True)
class Row:
    gate: str
    cause: str  # the real cause, in words
    spec: Callable[[dict[str, Any]], dict[str, Any]]  # the row's copy from the small copy
    tamper: Callable[[Path], None]  # makes the record that failed it read as a pass
    symptom: str  # text the gate's reason carries


def _skip(spec: dict[str, Any], *gates: str) -> dict[str, Any]:
    """The gates this row does not prove, declared not applicable (proved by their own rows)."""
    for gate in gates:
        spec["gates"].setdefault("not_applicable", {})[gate] = "matrix row: proved by its own row"
    return spec


def _edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    body = json.loads(path.read_text())
    change(body)
    path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")


def _edit_records(path: Path, change: Callable[[dict[str, Any]], bool]) -> None:
    """Change the JSONL records ``change`` says it changed (at least one)."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert sum(bool(change(r)) for r in records), f"nothing to tamper in {path.name}"
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


# ---------------------------------------------------------------- the tampers


def _pin_matches(folder: Path) -> None:
    _edit_json(folder / "identity/model.json", lambda m: m.update(file_sha256=WRONG_PIN[12:]))


def _probe_passes(folder: Path) -> None:
    """The probe's log replaced by a real passing gloo probe's (same command line)."""
    log = folder / "nccl_probe.log"
    head = log.read_text().split("\n", 1)[0]
    log.write_text(f"{head}\n{OK_PROBE.read_text()}\nrc=0 seconds=3.2\n")


def _served_name_listed(folder: Path) -> None:
    def listed(record: dict[str, Any]) -> bool:
        for card in record["response"]["data"]:
            card["id"] = "smollm2-135m"
        return True

    _edit_records(folder / "model_list.jsonl", listed)


def _started(folder: Path) -> None:
    _edit_json(
        folder / "readiness.json",
        lambda r: r.update(outcome="ready", exit=None, first_token_s=1.5, listed_s=1.0,
                           answered_s=0.5, listed_models=["smollm2-135m"]),
    )  # fmt: skip


def _stated_version(folder: Path) -> None:
    _edit_json(folder / "identity/engine.json", lambda e: e.update(version="0.0.0"))


def _answers_right(folder: Path) -> None:
    answers = {"capital-of-france": "Paris.", "two-plus-two": "4"}

    def right(record: dict[str, Any]) -> bool:
        message = record["response"]["choices"][0]["message"]
        message["content"] = answers[record["tag"].split("#")[0]]
        return True

    _edit_records(folder / "deterministic.jsonl", right)


def _clean_story(folder: Path) -> None:
    def clean(record: dict[str, Any]) -> bool:
        record["response"]["choices"][0]["message"]["content"] = story(1)  # passes every measure
        return True

    _edit_records(folder / "repetition.jsonl", clean)


def _arguments_valid(folder: Path) -> None:
    def valid(record: dict[str, Any]) -> bool:
        calls = (record.get("response") or {}).get("choices", [{}])[0].get("message", {})
        for call in calls.get("tool_calls") or []:
            call["function"]["arguments"] = '{"city": "Paris"}'
        return bool(calls.get("tool_calls"))

    _edit_records(folder / "tool_calls.jsonl", valid)


def _over_bound_rejected(folder: Path) -> None:
    error = {"error": {"message": "Requested tokens exceed context window", "type": "invalid"}}

    def rejected(record: dict[str, Any]) -> bool:
        if record["tag"] != "over-bound":
            return False
        record.update(status=400, response=error)
        return True

    _edit_records(folder / "capacity.jsonl", rejected)


def _greedy_argmax(folder: Path) -> None:
    """Each decode's chosen token made the top of its own row, as a greedy serve's would be."""

    def argmax(record: dict[str, Any]) -> bool:
        if not str(record.get("tag", "")).startswith(("decode:", "warm:")):
            return False
        logprobs = record["response"]["choices"][0]["logprobs"]
        for i, token in enumerate(logprobs["tokens"]):
            top = logprobs["top_logprobs"][i]
            top[token] = logprobs["token_logprobs"][i] = max(top.values())
        return True

    _edit_records(folder / "agreement.jsonl", argmax)


def _faster(folder: Path) -> None:
    def faster(record: dict[str, Any]) -> bool:
        for chunk in record.get("chunks") or []:
            chunk["t"] = chunk["t"] / 2  # every chunk twice as early: another rate than recorded
        return bool(record.get("chunks"))

    _edit_records(folder / "throughput.jsonl", faster)


# ---------------------------------------------------------------- the rows


def _wrong_pin(spec: dict[str, Any]) -> dict[str, Any]:
    spec["model"]["revision"] = WRONG_PIN
    return spec


def _tp2(spec: dict[str, Any]) -> dict[str, Any]:
    spec["serve"]["tensor_parallel_size"] = 2
    return spec


def _wrong_version(spec: dict[str, Any]) -> dict[str, Any]:
    spec["engine"]["version"] = "0.0.0"
    return spec


def _unmeetable_floor(spec: dict[str, Any]) -> dict[str, Any]:
    spec["gates"]["throughput"]["floors"] = {"decode_tok_s_median": 1e6}
    return _skip(spec, "deterministic", "repetition", "tool_calls", "capacity")


def _second_choice(spec: dict[str, Any]) -> dict[str, Any]:
    spec = with_fault(spec, "second_choice")
    del spec["gates"]["not_applicable"]["agreement"]
    spec["gates"]["agreement"].update(prompts=3, accuracy_items=0, near_bound_fill=0.3)
    return _skip(spec, "deterministic", "repetition", "tool_calls", "capacity")


def _proxied(fault: str, *skipped: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda spec: _skip(with_fault(spec, fault), *skipped)


ROWS: dict[str, Row] = {
    "preflight": Row(
        "preflight",
        "the candidate file pins another GGUF (gguf-sha256 of 64 zeros)",
        _wrong_pin,
        _pin_matches,
        "model.revision pins " + WRONG_PIN,
    ),
    "nccl": Row(
        "nccl",
        "TP2 on llama.cpp, which forms no ranks (its Python has no torch.distributed)",
        _tp2,
        _probe_passes,
        "NCCL probe rc=",
    ),
    "model-list": Row(
        "model_list",
        "/v1/models lists a path instead of the served name (fault proxy)",
        _proxied("wrong_model"),
        _served_name_listed,
        "/models/smollm2-135m.gguf",
    ),
    "model-list-startup": Row(
        "model_list",
        "the server exits during start-up (fault proxy)",
        _proxied("exit_startup"),
        _started,
        "exited during start-up",
    ),
    "model-list-version": Row(
        "model_list",
        "the candidate file states engine.version 0.0.0; llama.cpp is 0.3.36",
        _wrong_version,
        _stated_version,
        "the candidate states '0.0.0'",
    ),
    "deterministic": Row(
        "deterministic",
        "wrong known answers (fault proxy)",
        _proxied("wrong_answer"),
        _answers_right,
        "capital-of-france",
    ),
    "repetition": Row(
        "repetition",
        "long answers become a loop of '+' (fault proxy)",
        _proxied("repetition", "deterministic"),
        _clean_story,
        "++++",
    ),
    "tool-calls": Row(
        "tool_calls",
        "tool-call arguments the schema rejects (fault proxy)",
        _proxied("bad_tool_args", "deterministic", "repetition"),
        _arguments_valid,
        "arguments",
    ),
    "capacity": Row(
        "capacity",
        "an over-bound prompt answered 200 (fault proxy)",
        _proxied("over_bound_accepted", "deterministic", "repetition", "tool_calls"),
        _over_bound_rejected,
        "accepted (HTTP 200)",
    ),
    "agreement": Row(
        "agreement",
        "greedy takes its own second choice every 7th token from the 16th (fault proxy)",
        _second_choice,
        _greedy_argmax,
        "greedy is not argmax",
    ),
    "throughput": Row(
        "throughput",
        "a decode floor of 10^6 tok/s no serve meets",
        _unmeetable_floor,
        _faster,
        "decode_tok_s_median",
    ),
}


def _name(row: str) -> str:
    return f"matrix-{row}"


@dataclass
class Matrix:
    inner: Inner
    seconds: float
    verified: Verification

    def problems_of(self, name: str) -> list[str]:
        return [p.line() for p in self.verified.problems if p.where.startswith(f"{name}/")]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Matrix:
    root = tmp_path_factory.mktemp("matrix")
    for key, row in ROWS.items():
        write_candidate(root / "candidates", row.spec(smollm2_spec(_name(key))))
    began = time.monotonic()
    inner = run_inner(root, [_name(k) for k in ROWS], timeout_s=1200)
    seconds = time.monotonic() - began
    verified = verify_run(inner.run_dir)
    print(f"\nmatrix: {len(ROWS)} rows in one inner run: {seconds:.1f} s; verify "
          f"{verified.seconds:.2f} s: {verified.summary()}")  # fmt: skip
    return Matrix(inner, seconds, verified)


def test_the_whole_run_verifies_with_exit_0(matrix: Matrix) -> None:
    assert matrix.inner.proc.returncode == 1, matrix.inner.output()  # every row FAILs
    done = subprocess.run(
        [sys.executable, "-m", "tp2qual", "verify", str(matrix.inner.run_dir)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:]
    assert "OK" in done.stdout.splitlines()[-1]
    assert not matrix.verified.notes, [n.line() for n in matrix.verified.notes]


@pytest.mark.parametrize("key", list(ROWS))
def test_a_real_failure_verifies_and_its_tamper_is_caught(
    key: str, matrix: Matrix, tmp_path: Path
) -> None:
    row, name = ROWS[key], _name(key)
    finding = matrix.inner.finding(name)
    outcomes = {g: r["outcome"] for g, r in finding["gates"].items()}
    assert (finding["verdict"], finding["failed_gate"]) == ("FAIL", row.gate), outcomes
    assert row.symptom in finding["gates"][row.gate]["reason"], finding["gates"][row.gate]
    later = GATES[GATES.index(row.gate) + 1 :]
    assert {outcomes[g] for g in later} <= {"blocked", "not_applicable"}, outcomes
    assert matrix.problems_of(name) == []
    # re-derived from its record, not waved through: no failure of it stands on its reason alone
    assert not [n for n in matrix.verified.notes if n.where.startswith(f"{name}/")]
    # The tamper, on a copy of the run whose manifest is re-written to match it.
    copy = Path(shutil.copytree(matrix.inner.run_dir, tmp_path / matrix.inner.run_dir.name))
    row.tamper(copy / name)
    write_manifest(copy, run_id=copy.name, final=True)
    caught = verify_run(copy)
    mine = [p for p in caught.problems if p.where.startswith(f"{name}/")]
    assert mine, f"{key}: the tamper was not caught: {caught.summary()}"
    assert not [p for p in mine if p.kind in ("tampered", "missing", "unlisted")]
    assert len(mine) == len(caught.problems), [p.line() for p in caught.problems]


def test_a_pass_lists_what_it_rests_on_and_what_it_skipped(matrix: Matrix) -> None:
    """Preflight passed for every row but the pin's: its finding lists every check it ran and
    every one it skipped, with the reason; the report shows both."""
    gate = matrix.inner.finding(_name("model-list"))["gates"]["preflight"]
    assert gate["outcome"] == "passed"
    assert gate["tests"] == {
        "test_model_pin_resolves": "passed",
        "test_image_pin_matches": "skipped",
        "test_engine_accepts_launch": "skipped",
        "test_engine_serves_the_kv_cache_on_these_gpus": "skipped",
        "test_gpus_fit_and_are_free": "skipped",
    }
    assert gate["skipped"]["test_image_pin_matches"] == "not a container candidate"
    kv = gate["skipped"]["test_engine_serves_the_kv_cache_on_these_gpus"]
    assert "no compute capability" in kv
    assert "needs no GPU" in gate["skipped"]["test_gpus_fit_and_are_free"]
    report = (matrix.inner.run_dir / "report.html").read_text()
    assert "image pin matches: skipped — not a container candidate" in report


def test_rehash_hashes_the_weights_again(matrix: Matrix, tmp_path: Path) -> None:
    """A wrong recorded digest is still a FAIL, so plain verify accepts it; ``--rehash`` hashes
    the GGUF again and names the record."""
    copy = Path(shutil.copytree(matrix.inner.run_dir, tmp_path / matrix.inner.run_dir.name))
    folder = copy / _name("preflight")
    _edit_json(folder / "identity/model.json", lambda m: m.update(file_sha256="f" * 64))
    write_manifest(copy, run_id=copy.name, final=True)
    assert verify_run(copy).ok
    rehashed = verify_run(copy, rehash=True)
    assert [p.where for p in rehashed.problems] == [
        f"{_name('preflight')}/identity/model.json SmolLM2-135M-Instruct.Q4_1.gguf"
    ], [p.line() for p in rehashed.problems]
