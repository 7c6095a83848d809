"""The campaign's plan: whether each model fits one GPU (computed from its stated size and the
GPU's memory, and what the shipped files do about it), the run's order, and the time at the
dated rates, as ``pytest --plan -m campaign`` shows them with no Docker engine and no GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tp2qual.accuracy_asked import items_asked
from tp2qual.candidate import Candidate, load_candidates
from tp2qual.dry_run import estimate_for, fit_lines
from tp2qual.perf.estimate import Rate, dated_rate, estimate
from tp2qual.perf.fit import Fit, fraction, one_gpu_fit, weights

MAIN = Path(__file__).resolve().parents[2]
SHIPPED = {c.name: c for c in load_candidates([MAIN / "candidates"])}
ALL = list(SHIPPED.values())  # every candidate loaded: gate 07 asks its items by them
BASELINES = [
    c for c in SHIPPED.values() if c.spec.get("campaign") and c.tp > 1 and not c.spec.get("lane")
]
CAMPAIGN = {"gpu_memory_gib": 95.59, "tp1_headroom_gib": 9.14}


def test_weights_stated_where_measured_else_parameters_times_bits() -> None:
    stated = weights({"weights_gib": 73.22, "weights_source": "vLLM's model memory"})
    assert stated == weights({"weights_gib": 73.22, "weights_source": "vLLM's model memory"})
    assert not isinstance(stated, str) and stated.gib == 73.22 and "vLLM" in stated.basis
    counted = weights({"total_params_b": 117.6, "bits_per_weight": 4.5})
    assert not isinstance(counted, str) and round(counted.gib, 2) == 61.61  # 66.15e9 B
    assert "no size stated" in str(weights({"bits_per_weight": 4.5}))


def test_the_engines_share_of_one_gpu_is_read_from_the_launch() -> None:
    assert fraction("vllm", ["--gpu-memory-utilization", "0.90"])[0] == 0.9
    assert fraction("sglang", ["--mem-fraction-static=0.94"])[0] == 0.94
    share, why = fraction("vllm", ["--max-num-seqs", "1"])
    assert share == 1.0 and "upper bound" in why


def test_fits_is_weights_plus_headroom_against_the_engines_share() -> None:
    flags = ["--gpu-memory-utilization", "0.9"]  # 0.9 x 95.59 = 86.03 GiB for the engine
    fit = one_gpu_fit({"weights_gib": 76.8}, CAMPAIGN, "vllm", flags)  # 76.8 + 9.14 = 85.94
    assert isinstance(fit, Fit) and fit.fits
    assert fit.arithmetic().endswith("fits one GPU") is fit.fits
    over = one_gpu_fit({"weights_gib": 77.0}, CAMPAIGN, "vllm", flags)  # 86.14
    assert isinstance(over, Fit) and not over.fits and "does not fit" in over.arithmetic()
    assert "no GPU memory stated" in str(one_gpu_fit({"weights_gib": 1}, {}, "vllm", []))


@pytest.mark.parametrize("baseline", BASELINES, ids=[c.name for c in BASELINES])
def test_a_model_that_fits_has_a_tp1_reference_and_one_that_does_not_says_why(
    baseline: Candidate,
) -> None:
    """The suite's arithmetic and the shipped files agree: a TP1 candidate exactly for the
    models whose weights and headroom fit one RTX PRO 6000."""
    fit = one_gpu_fit(baseline.model, baseline.spec["campaign"], baseline.engine, baseline.command)
    assert isinstance(fit, Fit), fit
    named = baseline.spec["reference"].get("candidate")
    assert (named is not None) == fit.fits, (baseline.name, fit.arithmetic())
    if named:
        assert SHIPPED[named].tp == 1 and SHIPPED[named].gpus["count"] == 1
    lines = fit_lines(baseline)
    assert lines[0] == f"one GPU: {fit.arithmetic()}" and len(lines) == 5, lines


def test_which_models_fit_one_gpu() -> None:
    fits = {
        c.name: one_gpu_fit(c.model, c.spec["campaign"], c.engine, c.command) for c in BASELINES
    }
    assert {n: f.fits for n, f in fits.items() if isinstance(f, Fit)} == {
        "deepseek-v4-flash-0731": False,
        "inkling-small-nvfp4": False,
        "laguna-s-2.1-nvfp4": True,
        "nemotron-3-super-120b-a12b-nvfp4": True,
        "qwen3.5-122b-a10b-nvfp4": True,
    }


def test_the_estimate_counts_each_gates_requests_at_the_dated_rate() -> None:
    qwen = SHIPPED["qwen3.5-122b-a10b-nvfp4"]
    found = estimate(
        qwen,
        decode=Rate(64.0, "test"),
        first_token=Rate(0.5, "test"),
        load=Rate(100.0, "test"),
        agreement_prompt_tokens=[10, 20],
        asked=items_asked(qwen, SHIPPED.values()),
    )
    det = qwen.gate("deterministic")
    runs = len(det["prompts"]) * det["repeats"]
    assert (found.gates["deterministic"].requests, found.gates["deterministic"].tokens) == (
        runs,
        runs * det["max_tokens"],
    )
    assert found.gate_seconds("deterministic") == runs * det["max_tokens"] / 64 + runs * 0.5
    agreement = qwen.gate("agreement")
    # each prompt decoded cold and warm, two one-token rereads each; the near-bound prompt sized,
    # decoded and reread; the items at their budget
    near = agreement["near_bound_max_tokens"]
    items = agreement["accuracy_items"] * agreement["accuracy_max_tokens"]
    assert found.gates["agreement"].tokens == 2 * 30 + 2 * 2 + near + 2 + items
    assert found.gates["agreement"].requests == 4 * 2 + 3 + agreement["accuracy_items"]
    assert found.seconds == 100 + sum(found.gate_seconds(g) for g in found.gates)
    lane = SHIPPED["smollm2-135m-vllm-tp2-no-prefix-cache"]  # four gates not applicable
    assert "throughput" not in estimate_for(lane, {}, ALL).gates


def test_the_rate_is_the_dated_one_else_the_floor_and_says_which() -> None:
    qwen, qwen_tp1 = SHIPPED["qwen3.5-122b-a10b-nvfp4"], SHIPPED["qwen3.5-122b-a10b-nvfp4-tp1"]
    rate = dated_rate(qwen.spec["baseline"], "decode_tok_s_median")
    # each serve's time rests on the record of its own TP size (issue 39)
    assert rate is not None and rate.value == 67.5 and "TP2 record of 2026-08-01" in rate.basis
    assert estimate_for(qwen, {qwen_tp1.name: qwen_tp1}, ALL).decode == rate
    tp1 = estimate_for(qwen_tp1, {}, ALL).decode
    assert tp1.value == 78.7 and "TP1 record of 2026-07-29" in tp1.basis
    deepseek = estimate_for(SHIPPED["deepseek-v4-flash-0731"], {}, ALL)
    assert deepseek.decode.value == 11.5 and "TP2 record of 2026-08-01" in deepseek.decode.basis
    # a TP1 record with no decode rate: its TP2 record slowed by the largest TP2 gain measured
    nemotron, nemotron_tp1 = (SHIPPED[f"nemotron-3-super-120b-a12b-nvfp4{s}"] for s in ("", "-tp1"))
    slowed = estimate_for(nemotron_tp1, {nemotron.name: nemotron}, ALL).decode
    assert round(slowed.value, 1) == round(59.5 / 1.39, 1) and "tp2_gain_max" in slowed.basis
    # none at all: the floor, said so
    alone = estimate_for(nemotron_tp1, {}, ALL).decode
    assert alone.basis.startswith("no dated rate: the decode floor")
    assert "GiB at 0.383 GiB/s" in deepseek.load.basis


def test_plan_of_the_whole_campaign_shows_order_reference_placement_and_time() -> None:
    """``pytest --plan -m campaign`` as the README says, with no engine and no GPU."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--plan", "-m", "campaign", "-q",
         "-p", "no:cacheprovider"],
        cwd=MAIN, capture_output=True, text=True, timeout=180,
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    )  # fmt: skip
    out = done.stdout
    assert done.returncode in (0, 5) and "Traceback" not in out + done.stderr, out + done.stderr
    run = out.split("## the run", 1)[1]
    order = [line.split(". ", 1)[1].split(":")[0] for line in run.splitlines() if ". " in line]
    for model in ("laguna-s-2.1-nvfp4", "nemotron-3-super-120b-a12b-nvfp4"):
        at = order.index(f"{model}-tp1")
        assert order[at + 1] == model, order  # the TP1 reference, then its TP2 baseline
    for lane in ("laguna-s-2.1-nvfp4-dflash", "laguna-s-2.1-nvfp4-capacity-v3"):
        assert order.index("laguna-s-2.1-nvfp4") < order.index(lane), order  # after its baseline
    assert not [n for n in order if n.startswith("smollm2")]  # the campaign alone
    assert "[GPU placement]" in run and "qwen3.5-122b-a10b-nvfp4-tp1: 1 GPU(s)" in run
    assert "16 candidate(s) one after another: expected " in run and ", at most " in run
    assert out.count("one GPU: weights ") == 8  # the five baselines and the three TP1 files
