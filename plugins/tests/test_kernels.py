"""checks/kernels.py: the kernels the engine says it chose, read from real and quoted lines
(``plugins/tests/data/kernels/README.md`` says where each came from)."""

from __future__ import annotations

import json
from pathlib import Path

from tp2qual.checks.kernels import (
    ARTIFACT,
    NONE_LOGGED,
    asked_backends,
    asked_vs_chosen,
    chosen_kernels,
    record,
    summary,
)
from tp2qual.engines import engine_for
from tp2qual.evidence.rederive import RESOLVED_CANDIDATE, GateRun, model_list

DATA = Path(__file__).parent / "data"
VLLM = engine_for("vllm")
SGLANG = engine_for("sglang")


def _lines(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


def test_the_real_vllm_cpu_tp2_log_names_no_backend_choice() -> None:
    lines = _lines("vllm-cpu-tp2/server.log")
    assert chosen_kernels(VLLM, lines) == ()
    assert summary(()) == NONE_LOGGED
    kept = record(VLLM, lines, ["vllm", "serve", "--tensor-parallel-size", "2"])
    assert kept["summary"] == NONE_LOGGED and kept["lines_read"] == len(lines)
    assert kept["chosen"] == [] and kept["notices"] == []


def test_a_real_custom_all_reduce_refusal_is_read() -> None:
    (choice,) = chosen_kernels(VLLM, _lines("diagnosis/vllm-4383-shm-success-custom-ar.log"))
    assert (choice.kind, choice.line) == ("custom_all_reduce", 10)
    assert choice.value.startswith("disabled because your platform lacks GPU P2P capability")


def test_vllm_gpu_lines_from_its_source() -> None:
    choices = chosen_kernels(VLLM, _lines("kernels/vllm-gpu-quoted.log"))
    got = [(c.kind, c.value, c.line) for c in choices]
    assert got == [
        ("attention", "FLASHINFER", 1),
        ("moe", "FLASHINFER_CUTLASS", 2),  # rank 1's repeat on line 3 is not a second choice
        ("gemm", "FlashInferCutlassNvFp4LinearKernel for NVFP4", 4),
        ("custom_all_reduce", choices[3].value, 5),
        ("all_reduce", "['PYNCCL']", 6),
    ]
    assert summary(choices).startswith("attention=FLASHINFER (server.log:1); moe=")


def test_sglang_resolved_server_args_line() -> None:
    choices = chosen_kernels(SGLANG, _lines("kernels/sglang-quoted.log"))
    got = {c.kind: c.value for c in choices}
    assert got == {
        "attention": "triton",
        "prefill_attention": "None",
        "decode_attention": "None",
        "moe": "marlin",
        "fp4_gemm": "marlin",
        "fp8_gemm": "auto",
        "custom_all_reduce_disabled": "True",
    }


def test_asked_and_chosen_agree_across_spelling() -> None:
    choices = chosen_kernels(VLLM, _lines("kernels/vllm-gpu-quoted.log"))
    asked = asked_backends(VLLM, ["vllm", "serve", "--moe-backend", "flashinfer_cutlass"])
    assert asked == {"--moe-backend": "flashinfer_cutlass"}
    assert asked_vs_chosen(VLLM, asked, choices) == ()


def test_asked_but_another_chosen_is_a_notice() -> None:
    choices = chosen_kernels(SGLANG, _lines("kernels/sglang-quoted.log"))
    asked = asked_backends(SGLANG, ["--attention-backend=fa4", "--moe-runner-backend", "marlin"])
    (notice,) = asked_vs_chosen(SGLANG, asked, choices)
    assert notice == "--attention-backend fa4 asked; the engine chose triton (server.log:1)"


def test_asked_but_nothing_logged_is_a_notice() -> None:
    lines = _lines("vllm-cpu-tp2/server.log")
    kept = record(VLLM, lines, ["--attention-backend", "FLASH_ATTN"])
    assert kept["notices"] == [
        "--attention-backend FLASH_ATTN asked; the engine's log names no attention choice"
    ]


def _run_folder(root: Path, command: list[str]) -> None:
    """A candidate folder as a run leaves it: the real server log, gate 02's record of it
    (written before the log grew by one line) and the resolved candidate."""
    lines = _lines("kernels/vllm-gpu-quoted.log")
    kept = record(VLLM, lines, command)
    (root / "server.log").write_text("\n".join([*lines, "a line logged after gate 02"]) + "\n")
    (root / ARTIFACT).write_text(json.dumps(kept))
    (root / "identity").mkdir()
    (root / RESOLVED_CANDIDATE).write_text(
        json.dumps({"engine": "vllm", "command": command, "gates": {}})
    )


def test_verify_rederives_the_record_from_server_log(tmp_path: Path) -> None:
    _run_folder(tmp_path, ["vllm", "serve", "--attention-backend", "TRITON_ATTN"])
    got = model_list(GateRun(tmp_path, {}, "vllm", 2048))
    assert got.mismatches == [] and got.failures == []
    assert got.records == 0 and got.read == ["server.log (first 6 lines, kernels)"]  # no exchange
    (row,) = got.rows[ARTIFACT]
    assert row["notices"] == [
        "--attention-backend TRITON_ATTN asked; the engine chose FLASHINFER (server.log:1)"
    ]


def test_verify_names_a_record_the_log_does_not_back(tmp_path: Path) -> None:
    _run_folder(tmp_path, ["vllm", "serve"])
    kept = json.loads((tmp_path / ARTIFACT).read_text())
    (tmp_path / ARTIFACT).write_text(json.dumps({**kept, "summary": NONE_LOGGED}))
    got = model_list(GateRun(tmp_path, {}, "vllm", 2048))
    assert [m.what for m in got.mismatches] == [f"{ARTIFACT} summary"]
