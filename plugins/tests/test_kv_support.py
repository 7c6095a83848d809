"""Attention backend x KV-cache dtype x compute capability, known before start (issue #28): the
engine modules' tables judge a launch against the GPUs' capability, refusing what the pinned
source refuses and naming what would work; and the cited source lines say what the tables say,
read in the wheels where their parser venvs are installed."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from tp2qual.checks.kv_support import capability_of_name, flag_value, judge_kv
from tp2qual.engines import engine_for
from tp2qual.serving.parser_venvs import parser_python

SGLANG, VLLM = engine_for("sglang"), engine_for("vllm")
SM120, SM100, SM90 = (12, 0), (10, 0), (9, 0)


def argv(*flags: str) -> list[str]:
    return ["python3", "-m", "x", *flags]


def test_the_lanes_mxfp8_cache_on_fa4_is_refused_on_sm120_and_served_on_sm100() -> None:
    lane = argv("--attention-backend", "fa4", "--kv-cache-dtype", "mxfp8")
    refused = judge_kv(SGLANG, "0.5.23", lane, SM120, "NVML")
    assert not refused.ok
    assert "interface.py:645" in refused.reason and ":728-731" in refused.reason
    assert "On SM 12.0 it would work with: --attention-backend fa4 --kv-cache-dtype auto" in (
        refused.reason
    )
    assert judge_kv(SGLANG, "0.5.23", lane, SM100, "NVML").ok


def test_an_mxfp8_cache_on_triton_is_refused_everywhere_naming_fa4() -> None:
    lane = argv("--attention-backend", "triton", "--kv-cache-dtype", "mxfp8")
    verdict = judge_kv(SGLANG, "0.5.23", lane, SM100, "NVML")
    assert not verdict.ok
    assert "--attention-backend fa4 --kv-cache-dtype mxfp8" in verdict.measures["works"]


def test_the_baselines_pass_and_an_unnamed_sglang_backend_is_not_judged() -> None:
    inkling = judge_kv(SGLANG, "0.5.23", argv("--attention-backend", "triton"), SM120, "NVML")
    assert inkling.ok and inkling.measures["judged"]
    deepseek = judge_kv(SGLANG, "0.5.23", argv("--kv-cache-dtype", "fp8_e4m3"), SM120, "NVML")
    assert deepseek.ok and not deepseek.measures["judged"]  # SGLang picks per model
    unknown = judge_kv(SGLANG, "0.5.23", argv("--attention-backend", "flashinfer"), SM120, "x")
    assert unknown.ok and not unknown.measures["judged"]
    assert "not in sglang 0.5.23's table" in unknown.measures["why"]


def test_vllm_picks_its_first_backend_that_serves_the_cache() -> None:
    fp8 = judge_kv(VLLM, "0.25.1", argv("--kv-cache-dtype", "fp8"), SM120, "NVML")
    assert fp8.ok and "FLASHINFER" in fp8.measures["why"]  # FLASH_ATTN's fp8 is FA3 on SM 9.x
    named = judge_kv(VLLM, "0.25.1", argv("--attention-backend", "FLASH_ATTN",
                                          "--kv-cache-dtype", "fp8"), SM120, "NVML")  # fmt: skip
    assert not named.ok and "--attention-backend FLASHINFER --kv-cache-dtype fp8" in named.reason
    assert judge_kv(VLLM, "0.25.1", argv("--attention-backend", "FLASH_ATTN",
                                         "--kv-cache-dtype", "fp8"), SM90, "NVML").ok  # fmt: skip


def test_no_capability_is_not_judged_and_names_map_to_capabilities() -> None:
    verdict = judge_kv(SGLANG, "0.5.23", argv("--kv-cache-dtype", "mxfp8"), None, "no GPU")
    assert verdict.ok and not verdict.measures["judged"]
    assert capability_of_name("RTX PRO 6000") == SM120 and capability_of_name("A100") is None
    assert flag_value(["--kv-cache-dtype=fp8", "--kv-cache-dtype", "auto"], "--kv-cache-dtype") == (
        "auto"
    )


# -- the cited source, read in the wheels ------------------------------------------------------


def site(engine: str, version: str) -> Path:
    python = parser_python(engine, version)
    if python is None:
        why = f"needs the {engine} {version} parser venv: scripts/install-engine-parsers.sh"
        pytest.fail(why) if os.environ.get("TP2QUAL_REQUIRE_ENGINES") else pytest.skip(why)
    return next(python.parent.parent.glob("lib/python*/site-packages"))


def lines(path: Path, first: int, last: int) -> str:
    return "\n".join(path.read_text(encoding="utf-8").splitlines()[first - 1 : last])


def test_sglang_0_5_23_says_what_its_rows_say() -> None:
    root = site("sglang", "0.5.23") / "sglang"
    cute = root / "kernels/ops/attention/flash_attn/cute/interface.py"
    assert "is_fp8 = v.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)" in lines(cute, 645, 645)
    assert "FP8 is only supported on SM100" in lines(cute, 728, 731)
    assert "arch // 10 in [8, 9, 10, 11] or arch_forward_host is not None" in lines(cute, 621, 621)
    backend = root / "srt/layers/attention/flashattention_backend.py"
    assert "flash_attention_v4_sm120" in lines(backend, 290, 300)
    assert "MXFP8 KV cache requires the FA4 backend." in lines(backend, 451, 454)
    dtype = root / "srt/mem_cache/kv_cache_dtype.py"
    assert "mxfp8" in lines(dtype, 72, 72) and "float8_e4m3fn" in lines(dtype, 73, 73)
    sm120 = root / "kernels/ops/attention/fa4_sm120"
    assert "cutlass.Float16, cutlass.BFloat16" in lines(sm120 / "flash_fwd.py", 818, 818)
    assert "can_implement" in lines(sm120 / "runtime.py", 949, 963)
    triton = root / "srt/layers/attention/triton_backend.py"
    for first, last in ((1669, 1680), (2288, 2299)):
        assert "def forward_" in lines(triton, first, last)
        assert "descale" not in lines(triton, first, last)  # takes no q_descale
    hook = root / "srt/arg_groups/kv_cache_hook.py"
    assert "is_blackwell" in lines(hook, 100, 109)
    assert "device_capability_majors=[10, 11, 12]" in lines(root / "srt/utils/common.py", 297, 302)


def _kv_dtypes(path: Path, cls_line: int) -> set[str]:
    """The supported_kv_cache_dtypes list that starts at ``cls_line`` (a ClassVar)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and node.lineno == cls_line:
            assert isinstance(node.value, ast.List)
            return {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    raise AssertionError(f"{path}:{cls_line}: no list")


@pytest.mark.parametrize(("version", "lines_at"), [
    ("0.25.1", {"flash_attn": 69, "flashinfer": 332, "triton_attn": 277, "flex_attention": 91}),
    ("0.22.1", {"flash_attn": 70, "flashinfer": 328, "triton_attn": 277, "flex_attention": 86}),
])  # fmt: skip
def test_vllms_backends_list_the_dtypes_its_rows_say(version: str, lines_at: dict) -> None:
    backends = site("vllm", version) / "vllm/v1/attention/backends"
    rows = {}  # each backend's first row: the one its ClassVar list gives
    for r in VLLM.kv_support:
        rows.setdefault(r.backend, r)
    for module, at in lines_at.items():
        listed = _kv_dtypes(backends / f"{module}.py", at)
        row = rows[module.upper() if module != "triton_attn" else "TRITON_ATTN"]
        assert row.kv_dtypes <= listed, (module, sorted(listed))
