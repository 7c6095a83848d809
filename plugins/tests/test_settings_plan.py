"""Settings ``--plan`` says out loud (issue #28): a baseline control set otherwise than by another
candidate of the same engine with no reason stated, a memory share leaving less than the
engine's own default headroom, and who reads each variable the launch sets. Pure checks, then
the shipped campaign as ``--plan`` renders it (no Docker engine, no GPU)."""

from __future__ import annotations

from pathlib import Path

from tp2qual.candidate import load_candidates
from tp2qual.checks.settings import Launch, control_state, differing_controls, memory_headroom
from tp2qual.checks.variables import readers
from tp2qual.engines import engine_for
from tp2qual.launch import resolve_launch
from tp2qual.settings_plan import settings_lines

VLLM, SGLANG = engine_for("vllm"), engine_for("sglang")
CANDIDATES = Path(__file__).resolve().parents[2] / "candidates"
SHIPPED = {c.name: c for c in load_candidates([CANDIDATES])}


def test_a_control_set_both_ways_is_said_with_or_without_its_reason() -> None:
    on = Launch("a", ("--enable-prefix-caching",))
    off = Launch("b", ("--no-enable-prefix-caching",))
    unset = Launch("c", ())
    (line,) = differing_controls(VLLM, on, [off, unset])
    assert line.startswith("prefix caching: on here (--enable-prefix-caching); off ")
    assert "in b; no reason stated (launch.why)" in line and "config.py:350-380" in line
    reasoned = Launch("a", on.argv, {"--enable-prefix-caching": "the TP1 control kept"})
    assert "why: the TP1 control kept" in differing_controls(VLLM, reasoned, [off])[0]
    assert differing_controls(VLLM, unset, [on, off]) == []  # left at the default: not a choice


def test_the_last_flag_wins_as_in_argparse() -> None:
    control = VLLM.controls[0]
    assert control_state(control, ["--enable-prefix-caching", "--no-enable-prefix-caching"]) == (
        "off", "--no-enable-prefix-caching")  # fmt: skip


def test_a_memory_share_under_the_engines_own_headroom_is_said() -> None:
    (tight,) = memory_headroom(SGLANG, ["--mem-fraction-static", "0.965"], 95.6, "NVML")
    assert "leaves 3.35 GiB" in tight and "LESS than the 10 GiB headroom" in tight
    assert "memory_hook.py:314-315" in tight
    (roomy,) = memory_headroom(VLLM, ["--gpu-memory-utilization", "0.90"], 90, "x")
    assert "leaves 9.00 GiB" in roomy and "at least the 7.20 GiB" in roomy
    assert memory_headroom(SGLANG, [], 90, "x")[0].startswith("--mem-fraction-static not given")


def test_each_variable_is_said_with_who_reads_it() -> None:
    env = {"VLLM_X": "1", "VLLM_USE_V2_MODEL_RUNNER": "0", "NCCL_CUMEM_ENABLE": "0",
           "HF_HUB_OFFLINE": "1", "FOO": "1", "TORCH_CUDA_ARCH_LIST": "12.0a"}  # fmt: skip
    mentions = {"TORCH_CUDA_ARCH_LIST": ["sglang/multimodal_gen/x.py:1"]}
    said = dict(line.split(": ", 1) for line in readers(
        "vllm", "0.25.1", env, "VLLM_", {"VLLM_USE_V2_MODEL_RUNNER"}, mentions))  # fmt: skip
    assert said["VLLM_USE_V2_MODEL_RUNNER=0"] == "vllm 0.25.1 (its own variable)"
    assert said["VLLM_X=1"].startswith("NOBODY")
    assert said["NCCL_CUMEM_ENABLE=0"].startswith("NCCL") and "never names it" in (
        said["NCCL_CUMEM_ENABLE=0"])  # fmt: skip
    assert said["HF_HUB_OFFLINE=1"].startswith("the Hugging Face hub client")
    assert said["FOO=1"].startswith("NOBODY known")
    assert "only outside its server" in said["TORCH_CUDA_ARCH_LIST=12.0a"]


# -- the shipped campaign ----------------------------------------------------------------------


def plan_settings(name: str) -> list[str]:
    return settings_lines(SHIPPED[name], resolve_launch(SHIPPED[name]), list(SHIPPED.values()))


def test_qwens_prefix_caching_on_a_hybrid_model_is_flagged_against_nemotron() -> None:
    lines = plan_settings("qwen3.5-122b-a10b-nvfp4")
    assert any(line.startswith("control: prefix caching: on here") and
               "nemotron-3-super-120b-a12b-nvfp4" in line for line in lines), lines  # fmt: skip


def test_inklings_memory_share_and_the_131k_lane_keeping_it_are_flagged() -> None:
    baseline = plan_settings("inkling-small-nvfp4")
    assert any("--mem-fraction-static 0.965 leaves 3.15 GiB" in x and "LESS" in x
               for x in baseline)  # fmt: skip
    lane = plan_settings("inkling-small-nvfp4-mxfp8kv")
    assert ("memory: --mem-fraction-static 0.965 kept from inkling-small-nvfp4 while "
            "max_model_len goes 32768 -> 131072") in lane  # fmt: skip


def test_every_variable_the_plan_sets_is_said() -> None:

    for name in ("inkling-small-nvfp4", "laguna-s-2.1-nvfp4"):
        said = [x for x in plan_settings(name) if x.startswith("variable: ")]
        assert len(said) == len(resolve_launch(SHIPPED[name]).env), said
    laguna = "\n".join(plan_settings("laguna-s-2.1-nvfp4"))
    assert "NCCL_CUMEM_ENABLE=0: NCCL" in laguna and "vllm 0.25.1 never names it" in laguna
    inkling = "\n".join(plan_settings("inkling-small-nvfp4"))
    assert "TORCH_CUDA_ARCH_LIST=12.0a: PyTorch's extension builder" in inkling
