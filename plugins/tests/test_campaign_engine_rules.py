"""The campaign files against the engine rules of issue #20, rendered with no Docker engine and
no GPU: each rule is read from the pinned engine's source (docs/campaign.md, "Engine facts").
The last part reads ``pytest --plan`` of every campaign candidate, as a user runs it with no
Docker engine to ask (``DOCKER_HOST`` at nothing), and checks each of #20's defects is gone
from what the run would do."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tp2qual.candidate import ADMISSION_FLAG, Candidate, load_candidates
from tp2qual.launch import resolve_launch
from tp2qual.perf.floors import NO_FLOOR
from tp2qual.serving.engine_check import question
from tp2qual.serving.parser_venvs import question_key, recorded_answers

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = ROOT / "candidates"
CAMPAIGN = [c for c in load_candidates([CANDIDATES]) if c.tp > 1]
IDS = [c.name for c in CAMPAIGN]
ON_GPUS = [c for c in CAMPAIGN if c.gpus.get("count")]  # the five and their lanes
GPU_IDS = [c.name for c in ON_GPUS]


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize("cand", CAMPAIGN, ids=IDS)
def test_sglang_mxfp8_cache_runs_on_fa4(cand: Candidate) -> None:
    """SGLang 0.5.23: an mxfp8 cache makes Inkling pass q/k/v_descale, which only FA4 takes."""
    argv = list(resolve_launch(cand, port=1).argv)
    if cand.engine == "sglang" and _flag(argv, "--kv-cache-dtype") == "mxfp8":
        assert _flag(argv, "--attention-backend") == "fa4"


@pytest.mark.parametrize("cand", CAMPAIGN, ids=IDS)
def test_vllm_draft_methods_name_their_draft_and_length(cand: Candidate) -> None:
    """vLLM 0.25.1 config/speculative.py: dflash/eagle/eagle3 build the draft from "model" and
    refuse a config without num_speculative_tokens."""
    spec = _flag(list(resolve_launch(cand, port=1).argv), "--speculative-config")
    if cand.engine != "vllm" or spec is None:
        return
    config = json.loads(spec)
    if config.get("method") in ("dflash", "eagle", "eagle3"):
        assert config.get("model") and int(config.get("num_speculative_tokens", 0)) > 0


@pytest.mark.parametrize("cand", CAMPAIGN, ids=IDS)
def test_nccl_protocol_is_left_to_nccl(cand: Candidate) -> None:
    """LL128 forced on PCIe without NVLink is exercised by no gate: NCCL's tuner chooses."""
    assert "NCCL_PROTO" not in cand.env()


def test_the_lanes_changed_what_they_must() -> None:
    by_name = {c.name: c for c in CAMPAIGN}
    lane = list(resolve_launch(by_name["inkling-small-nvfp4-mxfp8kv"], port=1).argv)
    assert _flag(lane, "--attention-backend") == "fa4"
    dflash = json.loads(
        _flag(
            list(resolve_launch(by_name["laguna-s-2.1-nvfp4-dflash"], port=1).argv),
            "--speculative-config",
        )
        or "{}"
    )
    draft = by_name["laguna-s-2.1-nvfp4-dflash"].model["draft"]
    assert dflash["model"] == draft["repo"] == "poolside/Laguna-S-2.1-DFlash-NVFP4"
    assert "revision" in dflash  # filled from [model.draft] (test_draft_pin.py)


# ---------------------------------------------------------------------------------------------
# pytest --plan, as the user runs it


@pytest.fixture(scope="module")
def plans() -> dict[str, str]:
    """Each campaign candidate's ``--plan`` text, from one run with no Docker engine."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--plan", "-k", " or ".join(GPU_IDS), "-q",
         "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock",
             "CUDA_VISIBLE_DEVICES": ""},
    )  # fmt: skip
    assert done.returncode in (0, 5), done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    found = dict(re.findall(r"^# (\S+) .*\n((?:(?!# ).*\n)*)", done.stdout, re.MULTILINE))
    assert set(GPU_IDS) <= set(found), done.stdout  # -k by substring also takes the TP1 files
    return found


def section(plan: str, title: str) -> list[str]:
    """The lines under ``[title]``, unindented."""
    block = plan.split(f"[{title}]\n", 1)[1].splitlines()
    return [line[2:] for line in itertools.takewhile(lambda line: line.startswith("  "), block)]


@pytest.mark.parametrize("cand", ON_GPUS, ids=GPU_IDS)
def test_plan_looks_a_registry_pin_up_by_digest(cand: Candidate, plans: dict[str, str]) -> None:
    image, pin = cand.launch["docker"]["image"], cand.launch["docker"]["pin"]
    looked_up = section(plans[cand.name], "image")[0]
    if ":" in image.rpartition("/")[2]:  # a local build, by tag and proven by its image id
        assert looked_up == f"looks up {image} (by tag, then the image id proven against the pin)"
    else:
        assert looked_up == f"looks up {image}@{pin} (by digest)"
        assert f" {image}@{pin} " in section(plans[cand.name], "launch")[0]


@pytest.mark.parametrize("cand", ON_GPUS, ids=GPU_IDS)
def test_plan_forces_no_nccl_protocol(cand: Candidate, plans: dict[str, str]) -> None:
    assert "NCCL_PROTO" not in plans[cand.name]


@pytest.mark.parametrize("cand", ON_GPUS, ids=GPU_IDS)
def test_plan_runs_an_mxfp8_cache_on_fa4(cand: Candidate, plans: dict[str, str]) -> None:
    launch = section(plans[cand.name], "launch")[0]
    if "--kv-cache-dtype mxfp8" in launch:
        assert "--attention-backend fa4" in launch


@pytest.mark.parametrize("cand", ON_GPUS, ids=GPU_IDS)
def test_plan_sets_no_engine_variable_the_engine_ignores(
    cand: Candidate, plans: dict[str, str]
) -> None:
    checked = section(plans[cand.name], "preflight checks (gate 00)")
    assert f"engine variables: {cand.engine} {cand.spec['engine']['version']}: " in checked[-2]
    assert checked[-1] == "none set that the engine would ignore"


@pytest.mark.parametrize("cand", ON_GPUS, ids=GPU_IDS)
def test_plan_admits_one_request(cand: Candidate, plans: dict[str, str]) -> None:
    flag = ADMISSION_FLAG[cand.engine][0]
    shown = section(plans[cand.name], "one request at a time")[0]
    assert shown.split(" (")[0] == f"{flag} 1"
    assert f" {flag} 1 " in section(plans[cand.name], "launch")[0]


@pytest.mark.parametrize("cand", ON_GPUS, ids=GPU_IDS)
def test_plan_shows_floors_with_direction_and_source(
    cand: Candidate, plans: dict[str, str]
) -> None:
    floors = section(plans[cand.name], "floors (gate 08)")
    if cand.gate("throughput").get("protocol"):  # the user's capacity protocol: timed, not floored
        assert floors[0].startswith("runs capacity-") and floors[0].endswith("; no floor"), floors
        return
    assert NO_FLOOR not in floors
    lane = cand.name == "laguna-s-2.1-nvfp4-dflash"  # of its baseline's measured rate
    share = r"1 x laguna-s-2\.1-nvfp4's" if lane else r"0\.6 x .+"
    assert re.fullmatch(rf"decode_tok_s_median ≥ {share} decode_tok_s_median\b.+", floors[0]), (
        floors
    )
    assert floors[1].startswith("  without it: 0.03 x the decode roofline: "), floors
    before = next(line for line in floors if line.startswith("before any figure is measured"))
    assert re.search(r"decode_tok_s_median ≥ [0-9.]+ \(0\.03 x the roofline\)", before)


def test_plan_refuses_qwens_tp2_record_of_another_definition(plans: dict[str, str]) -> None:
    floors = section(plans["qwen3.5-122b-a10b-nvfp4"], "floors (gate 08)")
    assert any(
        line.startswith("dated TP2 record: decode_tok_s_median 67.5 not compared: not the same")
        for line in floors
    ), floors


def test_plan_names_the_dflash_draft_and_the_lanes_references(plans: dict[str, str]) -> None:
    dflash = plans["laguna-s-2.1-nvfp4-dflash"]
    assert "draft: poolside/Laguna-S-2.1-DFlash-NVFP4 revision" in dflash
    assert '"num_speculative_tokens":7' in section(dflash, "launch")[0]
    for lane, baseline in (
        ("laguna-s-2.1-nvfp4-dflash", "laguna-s-2.1-nvfp4"),
        ("inkling-small-nvfp4-mxfp8kv", "inkling-small-nvfp4"),
    ):
        assert section(plans[lane], "agreement reference (gate 07)")[0].startswith(baseline + ":")


@pytest.mark.parametrize("cand", ON_GPUS, ids=GPU_IDS)
def test_plan_shows_the_engines_own_answer_and_no_refusal_of_ours(
    cand: Candidate, plans: dict[str, str]
) -> None:
    """Issue #28: the answer the engine's own parser and registries gave on this exact launch
    (recorded by test_campaign_engine_check.py from the wheels), and nothing the suite's own
    rules refuse: no abbreviated flag, no unknown variable."""
    checked = section(plans[cand.name], "preflight checks (gate 00)")
    version = cand.spec["engine"]["version"]
    answer = [line for line in checked if line.startswith("recorded answer")]
    assert answer and answer[0].startswith(f"recorded answer ({cand.engine} {version}'s wheel")
    assert answer[0].endswith(": accepted"), answer
    assert [x for x in checked if x.strip().startswith(("--tool-call-parser", "--reasoning-"))]
    assert all("NOT registered" not in x and "refused:" not in x for x in checked), checked


def test_plan_refuses_the_mxfp8_lane_before_start_with_the_source(plans: dict[str, str]) -> None:
    checked = section(plans["inkling-small-nvfp4-mxfp8kv"], "preflight checks (gate 00)")
    kv = [x for x in checked if x.startswith("attention and KV cache")]
    assert kv and kv[0].startswith("attention and KV cache: REFUSED before start: sglang 0.5.23")
    assert "interface.py:645" in kv[0] and "On SM 12.0 it would work with" in kv[0]
    for name in set(GPU_IDS) - {"inkling-small-nvfp4-mxfp8kv"}:  # every other one is served
        other = section(plans[name], "preflight checks (gate 00)")
        assert not any("REFUSED" in x for x in other), (name, other)


@pytest.mark.parametrize("cand", [c for c in ON_GPUS if c.gate("throughput").get("protocol")],
                         ids=lambda c: c.name)  # fmt: skip
def test_a_capacity_protocol_lane_asks_its_engine_what_its_baseline_asks(cand: Candidate) -> None:
    """So its baseline's recorded engine answer is its own (serving/parser_venvs.plan_lines)."""
    after = cand.spec["lane"]["after"]
    baseline = next(c for c in CAMPAIGN if c.name == after)
    asked = [question(c, resolve_launch(c, run_id="check")) for c in (cand, baseline)]
    assert None not in asked
    assert question_key(asked[0]) == question_key(asked[1]) == recorded_answers()[after]["key"]
