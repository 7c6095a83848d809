"""Gate 00's engine check on every shipped campaign launch, through the engines' real parsers and
registries from their wheels (issue #28): vLLM 0.22.1 and 0.25.1 and SGLang 0.5.23, each in its
parser venv (scripts/install-engine-parsers.sh), no GPU, nothing started. Each launch is
accepted or refused in the engine's words, and the answer equals the one ``--plan`` shows
(engines/recorded_answers.json). Then the refusals this check exists for: SGLang's ``--tp``
(only a prefix of ``--tp-size``) and a misspelt tool-call or reasoning parser, each refused by
the real parser or registry while the full names pass.

Without the venvs these skip with the install line; CI installs them and requires them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tp2qual.candidate import Candidate, load_candidate, load_candidates
from tp2qual.serving.parser_venvs import PARSER_VENVS, ask_parser, parser_python, recorded_answers

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = ROOT / "candidates"
# The campaign's launches: TP2 on GPUs, less the capacity-protocol lanes, whose launch is their
# baseline's byte for byte (test_campaign_engine_rules.py holds them to it).
CAMPAIGN = [
    c
    for c in load_candidates([CANDIDATES])
    if c.tp > 1 and c.gpus.get("count") and not c.gate("throughput").get("protocol")
]
INSTALL = "scripts/install-engine-parsers.sh"

pytestmark = pytest.mark.slow


def needs_parser(candidate: Candidate) -> None:
    version = candidate.spec["engine"].get("version")
    if parser_python(candidate.engine, version) is None:
        why = f"self-test needs {PARSER_VENVS[(candidate.engine, version)]}: run {INSTALL}"
        pytest.fail(why) if os.environ.get("TP2QUAL_REQUIRE_ENGINES") else pytest.skip(why)


def variant(tmp_path: Path, name: str, old: str, new: str) -> Candidate:
    """A shipped candidate with one piece of its text replaced (it must occur)."""
    text = (CANDIDATES / f"{name}.toml").read_text(encoding="utf-8")
    text = text.replace('include = ["', f'include = ["{CANDIDATES}/')
    assert old in text, old
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return load_candidate(path)


def asked(candidate: Candidate) -> dict:
    needs_parser(candidate)
    answer = ask_parser(candidate)
    assert answer is not None
    return answer


def test_the_self_test_covers_every_campaign_launch() -> None:
    assert sorted(c.name for c in CAMPAIGN) == sorted(recorded_answers()) and len(CAMPAIGN) == 8


@pytest.mark.parametrize("cand", CAMPAIGN, ids=[c.name for c in CAMPAIGN])
def test_each_campaign_launch_is_accepted_by_its_engines_own_parser(cand: Candidate) -> None:
    got = asked(cand)
    record = got["record"]
    assert record["wheel_version"] == cand.spec["engine"]["version"]
    assert record["parsed"] and record["accepted"], record["refusals"]
    assert record["abbreviations"] == {}  # every flag by its full name
    if cand.engine == "vllm":  # the CUDA wheel sees no GPU here: its CPU platform, said so
        assert got["answer"]["platform"] == {"device_type": "cpu", "forced": True,
                                             "detected": "UnspecifiedPlatform"}  # fmt: skip
        assert {f: p["registered"] for f, p in record["parsers"].items()} == {
            "--tool-call-parser": True, "--reasoning-parser": True}  # fmt: skip
    assert recorded_answers()[cand.name] == record, (
        f"engines/recorded_answers.json says otherwise for {cand.name}: "
        "run scripts/record-engine-answers.py"
    )
    print(f"{cand.name}: {cand.engine} {cand.spec['engine']['version']} parser, {got['seconds']} s")


def test_sglang_refuses_the_tp_abbreviation_and_takes_the_full_names(tmp_path: Path) -> None:
    short = asked(variant(tmp_path, "inkling-small-nvfp4", '"--tp-size"', '"--tp"'))["record"]
    assert not short["accepted"] and short["abbreviations"] == {"--tp": "--tp-size"}
    assert short["refusals"] == [
        "--tp: not a sglang 0.5.23 flag; sglang 0.5.23 would read it as --tp-size (argparse "
        "takes a unique prefix), and the suite reads flags by full name: write --tp-size"
    ]
    long = asked(variant(tmp_path, "inkling-small-nvfp4", '"--tp-size"',
                         '"--tensor-parallel-size"'))["record"]  # fmt: skip
    assert long["accepted"] and long["refusals"] == []


def test_sglang_refuses_a_misspelt_tool_call_parser_in_its_own_words(tmp_path: Path) -> None:
    old = '"--tool-call-parser", "inkling"'
    bad = variant(tmp_path, "inkling-small-nvfp4", old, '"--tool-call-parser", "inklnig"')
    record = asked(bad)["record"]
    assert not record["accepted"] and len(record["refusals"]) == 1
    assert "argument --tool-call-parser: invalid choice: 'inklnig'" in record["refusals"][0]


@pytest.mark.parametrize(("name", "old", "new", "said"), [
    ("qwen3.5-122b-a10b-nvfp4", '"--tool-call-parser", "qwen3_coder"',
     '"--tool-call-parser", "qwen3_codr"', "Tool parser 'qwen3_codr' not found."),
    ("laguna-s-2.1-nvfp4", '"--reasoning-parser", "poolside_v1"',
     '"--reasoning-parser", "poolside_v9"', "Reasoning parser 'poolside_v9' not found."),
], ids=["vllm-0.22.1-tool", "vllm-0.25.1-reasoning"])  # fmt: skip
def test_vllm_refuses_a_misspelt_parser_name_from_its_registry(
    tmp_path: Path, name: str, old: str, new: str, said: str
) -> None:
    """vLLM's argparse takes any name; its registry refuses it, in vLLM's own words."""
    record = asked(variant(tmp_path, name, old, new))["record"]
    assert record["parsed"] and not record["accepted"]
    (refusal,) = record["refusals"]
    assert said in refusal, refusal
    registry = "ToolParserManager" if "tool" in old else "ReasoningParserManager"
    assert registry in refusal
