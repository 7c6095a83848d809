"""Start-up failures are diagnosed: the engine's start-up output replayed from real failing logs
(the diagnosis corpus, plugins/tests/data/diagnosis/) by the fault proxy, through the real
launcher, readiness and gating. Each finding names the cause, the evidence lines and a remedy
that fits the candidate's settings, in ``finding.json`` and on the terminal line."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from test_faults import (
    Inner,
    assert_failed_and_blocked,
    assert_nothing_left,
    run_inner,
    smollm2_spec,
    with_fault,
    write_candidate,
)

from tp2qual.candidate import load_candidate
from tp2qual.hooks.candidates import why_not_runnable

pytestmark = pytest.mark.slow

CORPUS = Path(__file__).parent / "data" / "diagnosis"

# name -> (fault, replayed log, rule the finding must name, text its remedy must carry)
STARTUPS = {
    "nccl-999": ("replay_exit", "nccl-1653-cuda999-alloc-h.log", "cuda_999", "NCCL_CUMEM"),
    "nccl-hang": ("replay_hang", "closed-loop-h200/hang-init.log", "init_hang", "rank"),
    "expandable": (
        "replay_exit",
        "pytorch-192330-expandable-wsl2.log",
        "expandable_segments_alloc",
        "expandable_segments",
    ),
    "forced-p2p": (
        "replay_exit",
        "sglang-6246-p2p-invalid-argument.log",
        "p2p_failure",
        "NCCL_P2P_DISABLE=1",
    ),
    "kv-short": (
        "replay_exit",
        "startup/vllm-10517-max-seq-len-kv.log",
        "kv_cache_short",
        "set --max-model-len to at most 23,648",
    ),
    # No rule names the cause: the finding says so, with the earliest error (never "ok").
    "not-recognised": (
        "replay_exit",
        "startup/gpustack-2097-engine-core-cut.log",
        "unrecognised_failure",
        "the first error in time",
    ),
    # A start that exits with nothing an error in its log is still a failed start.
    "quiet-exit": (
        "replay_exit",
        "vllm-4383-shm-success-custom-ar.log",
        "unrecognised_failure",
        "the launcher's own output",
    ),
}


@pytest.mark.parametrize("case", list(STARTUPS))
def test_startup_failure_names_cause_and_remedy(case: str, tmp_path: Path) -> None:
    fault, log, rule, remedy = STARTUPS[case]
    name = f"startup-{case}"
    spec = with_fault(smollm2_spec(name), fault)
    command = spec["launch"]["command"]
    at = command.index("--fault") + 2
    spec["launch"]["command"] = [*command[:at], "--replay", str(CORPUS / log), *command[at:]]
    spec["launch"]["readiness_timeout_s"] = 8  # a hang is judged by the log's own timestamps
    write_candidate(tmp_path / "candidates", spec)
    inner = run_inner(tmp_path, [name])
    finding = assert_failed_and_blocked(inner, name, "model_list")
    diagnosis = finding["gates"]["model_list"]["diagnosis"]
    assert diagnosis, finding["gates"]["model_list"]
    first = next(f for f in diagnosis["findings"] if f["severity"] != "notice")
    assert first["rule"] == rule, diagnosis
    assert remedy in first["remedy"], first
    assert first["evidence"] and all(e["line"] > 0 for e in first["evidence"]), first
    assert f"diagnosed {rule}:" in inner.proc.stdout, inner.output()
    report = (inner.run_dir / "report.html").read_text()
    assert f"Diagnosed ({rule}" in report
    assert_nothing_left(inner, name)


def test_a_silent_hang_says_where_it_stopped(tmp_path: Path) -> None:
    """Nothing in the log to diagnose: the timeout itself names the stage and the next step."""
    name = "startup-never-ready"
    spec = with_fault(smollm2_spec(name), "replay_hang")
    command = spec["launch"]["command"]
    at = command.index("--fault") + 2
    spec["launch"]["command"] = [*command[:at], "--replay", "/dev/null", *command[at:]]
    spec["launch"]["readiness_timeout_s"] = 5
    write_candidate(tmp_path / "candidates", spec)
    inner = run_inner(tmp_path, [name])
    finding = assert_failed_and_blocked(inner, name, "model_list")
    reason = finding["gates"]["model_list"]["reason"]
    assert "StartupTimeout" in reason and "not ready after 5s" in reason, reason
    assert "readiness_timeout_s" in reason, reason
    assert_nothing_left(inner, name)


# --- the real vLLM CPU engine (0.32.0, the embedded candidate smollm2-135m-vllm) ----------------

VLLM = Path(__file__).resolve().parents[2] / "candidates" / "smollm2-135m-vllm.toml"


def vllm_spec(name: str, *flags: str) -> dict:
    """The vLLM CPU candidate with the self-tests' small gates and ``flags`` appended."""
    spec = load_candidate(VLLM).spec
    spec["name"], spec["description"] = name, f"self-test copy of {VLLM.stem}"
    spec.pop("reference", None)
    small = smollm2_spec(name)["gates"]
    for gate in ("repetition", "throughput", "not_applicable"):
        spec["gates"][gate] = small[gate]
    spec["launch"]["append"] = [*spec["launch"].get("append", []), *flags]
    return spec


def runnable_here(tmp_path: Path, spec: dict) -> None:
    path = write_candidate(tmp_path / "candidates", spec)
    if why := why_not_runnable(load_candidate(path)):
        pytest.skip(f"needs the vLLM CPU engine: {why}")


def failed_start(inner: Inner, name: str) -> tuple[dict, dict]:
    """The gate whose server start failed (FAIL, StartupExited), and its diagnosis's first
    finding past the notices."""
    finding = inner.finding(name)
    gate = finding["gates"][finding["failed_gate"]]
    assert finding["verdict"] == "FAIL" and "StartupExited" in gate["reason"], gate["reason"]
    return gate, next(f for f in gate["diagnosis"]["findings"] if f["severity"] != "notice")


@pytest.mark.vllm_server
def test_real_vllm_kv_budget_under_max_model_len_is_diagnosed_with_its_figures(tmp_path: Path):
    """vLLM refuses to start when one request of max_model_len does not fit its KV budget: the
    finding of the failed start names it with the engine's figures and its own line."""
    name = "vllm-kv-short"
    spec = vllm_spec(name, "--kv-cache-memory-bytes", "20000000", "--enforce-eager")
    spec["launch"]["env"].pop("VLLM_CPU_KVCACHE_SPACE")  # it would set the budget instead
    runnable_here(tmp_path, spec)
    inner = run_inner(tmp_path, [name])
    gate, first = failed_start(inner, name)
    assert first["rule"] == "kv_cache_short", gate["diagnosis"]
    assert "estimated maximum model length" in " ".join(e["text"] for e in first["evidence"])
    assert "--kv-cache-memory-bytes 20000000 (" in first["remedy"], first
    assert "diagnosed kv_cache_short:" in inner.proc.stdout, inner.output()
    assert_nothing_left(inner, name)


def test_real_vllm_heads_not_divisible_by_tp_is_diagnosed_in_the_engines_words(tmp_path: Path):
    """SmolLM2-135M unpadded (9 query heads) served at TP 2 by the process launcher. No extra
    setting is needed to make it cheap: vLLM 0.32.0 checks heads against the TP size when the API
    server builds its config (``VllmConfig`` validation in ``create_engine_config``), before the
    engine core or any worker starts: the server exits 7-15 s after launch on 2 shared cores, the
    whole test takes 20-35 s (measured 2026-12-05). The finding of the failed start names the
    heads and the TP size in the engine's own line, and its remedy never offers TP 2."""
    name = "vllm-tp2-heads"
    spec = vllm_spec(name, "--tensor-parallel-size", "{tp}")
    spec["serve"]["tensor_parallel_size"] = 2
    runnable_here(tmp_path, spec)
    inner = run_inner(tmp_path, [name])
    gate, first = failed_start(inner, name)
    assert first["rule"] == "tp_indivisible", gate["diagnosis"]
    said = " ".join(e["text"] for e in first["evidence"])
    assert "Total number of attention heads (9) must be divisible by tensor parallel size (2)" in (
        said
    ), first
    assert "the candidate's TP is 2" in first["cause"], first
    assert "divides 9 (1)" in first["remedy"], first  # never TP 2, which it already has
    assert "diagnosed tp_indivisible:" in inner.proc.stdout, inner.output()
    assert "Diagnosed (tp_indivisible" in (inner.run_dir / "report.html").read_text()
    assert_nothing_left(inner, name)


def test_real_vllm_bogus_reasoning_parser_fails_preflight_in_the_engines_words(tmp_path: Path):
    """A parser the engine does not have never reaches a start: the preflight's own engine
    check fails it, quoting the engine's refusal."""
    name = "vllm-bogus-reasoning"
    spec = vllm_spec(name, "--reasoning-parser", "nope")
    runnable_here(tmp_path, spec)
    inner = run_inner(tmp_path, [name])
    finding = inner.finding(name)
    assert (finding["verdict"], finding["failed_gate"]) == ("FAIL", "preflight")
    reason = finding["gates"]["preflight"]["reason"]
    assert "--reasoning-parser nope: vllm 0.32.0" in reason, reason
    assert "Reasoning parser 'nope' not found" in reason, reason


def test_real_llamacpp_given_a_corrupt_gguf_is_diagnosed(tmp_path: Path):
    """llama.cpp started on a file that is no GGUF (pinned as it is, so the pin passes and the
    engine itself reads it): the start fails and its finding names the file, in llama.cpp's own
    words."""
    name = "llamacpp-corrupt-gguf"
    bad = tmp_path / "corrupt.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(range(256)) * 4)
    spec = smollm2_spec(name)
    spec["model"]["file"] = str(bad)
    spec["model"]["revision"] = f"gguf-sha256:{hashlib.sha256(bad.read_bytes()).hexdigest()}"
    write_candidate(tmp_path / "candidates", spec)
    inner = run_inner(tmp_path, [name])
    gate, first = failed_start(inner, name)
    assert first["rule"] == "model_file_corrupt", gate["diagnosis"]
    assert any("gguf_init_from" in e["text"] for e in first["evidence"]), first
    assert "diagnosed model_file_corrupt:" in inner.proc.stdout, inner.output()
    assert_nothing_left(inner, name)
