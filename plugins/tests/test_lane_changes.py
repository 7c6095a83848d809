"""A lane states only what it changes against its baseline (``[lane.changes]``): the overlay
rules, the shipped lanes as their baselines plus their changes, a baseline change reaching its
lane, and ``--plan`` showing the difference."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from tp2qual.candidate import load_candidate, load_candidates
from tp2qual.exceptions import CandidateError
from tp2qual.lane_changes import Change, apply_changes, plan_lines

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "command": ["serve", "--model", "m", "--eager", "--tp", "2", "--lora", "a", "b"],
    "append": ["--port", "{port}"],
    "env": {"A": "1", "B": "2"},
    "kind": "process",
}


def test_each_kind_of_change_is_applied_where_the_baseline_has_it() -> None:
    overlay = apply_changes(
        BASE,
        {
            "remove": ["--eager", "--lora"],
            "replace": {"--tp": "4"},
            "add": ["--kv", "fp8", "--spec"],
            "env": {"B": "3", "C": "4"},
            "env_unset": ["A"],
        },
    )
    assert overlay.problems == ()
    assert overlay.launch["command"] == [
        "serve", "--model", "m", "--tp", "4", "--port", "{port}", "--kv", "fp8", "--spec",
    ]  # fmt: skip
    assert "append" not in overlay.launch and overlay.launch["kind"] == "process"
    assert overlay.launch["env"] == {"B": "3", "C": "4"}
    assert set(overlay.changes) == {
        Change("removed", "--eager"),
        Change("removed", "--lora", before=("a", "b")),  # every value up to the next flag
        Change("replaced", "--tp", before=("2",), after=("4",)),
        Change("added", "--kv", after=("fp8",)),
        Change("added", "--spec"),
        Change("env set", "B", before=("2",), after=("3",)),
        Change("env set", "C", after=("4",)),
        Change("env unset", "A", before=("1",)),
    }


def test_an_inline_value_stays_inline() -> None:
    overlay = apply_changes({"command": ["s", "--tp=2", "--x=1"]}, {"replace": {"--tp": "4"}})
    assert overlay.launch["command"] == ["s", "--tp=4", "--x=1"]
    removed = apply_changes({"command": ["s", "--tp=2", "--x=1"]}, {"remove": ["--x"]})
    assert removed.launch["command"] == ["s", "--tp=2"]
    assert removed.changes == (Change("removed", "--x", before=("1",)),)


def test_a_prefix_is_not_the_flag() -> None:
    overlay = apply_changes({"command": ["s", "--tp-size", "2"]}, {"replace": {"--tp": "4"}})
    assert overlay.problems == ("lane.changes.replace.--tp: --tp is not in the baseline's command",)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"replace": {"--nope": "1"}}, "lane.changes.replace.--nope: --nope is not in the"),
        ({"replace": {"--eager": "1"}}, "lane.changes.replace.--eager: --eager takes no value"),
        ({"remove": ["--nope"]}, "lane.changes.remove: --nope is not in the baseline's command"),
        ({"add": ["--tp", "4"]}, "lane.changes.add: --tp is already in the baseline's command"),
        ({"add": ["--port=1"]}, "lane.changes.add: --port is already in the baseline's command"),
        ({"env_unset": ["Z"]}, "lane.changes.env_unset: Z is not in the baseline's launch.env"),
    ],
)
def test_a_change_the_baseline_cannot_take_is_refused(changes: dict, problem: str) -> None:
    problems = apply_changes(BASE, changes).problems
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_a_flag_given_twice_cannot_be_replaced() -> None:
    twice = {"command": ["s", "--x", "1", "--x", "2"]}
    assert "occurs 2 times" in apply_changes(twice, {"replace": {"--x": "3"}}).problems[0]
    assert apply_changes(twice, {"remove": ["--x"]}).launch["command"] == ["s"]


# --- the shipped lanes --------------------------------------------------------------------------

SHIPPED = {c.name: c for c in load_candidates([ROOT / "candidates"])}
LANES = [c for c in SHIPPED.values() if "changes" in c.spec.get("lane", {})]


def test_every_shipped_lane_that_includes_its_baseline_states_changes_only() -> None:
    assert {c.name for c in LANES} == {
        "inkling-small-nvfp4-mxfp8kv",
        "laguna-s-2.1-nvfp4-dflash",
        "smollm2-135m-vllm-reasoning",
        "smollm2-135m-vllm-tp2-no-prefix-cache",
    }
    for lane in LANES:
        baseline = SHIPPED[lane.spec["lane"]["after"]]
        assert apply_changes(baseline.launch, lane.spec["lane"]["changes"]).launch["command"] == (
            lane.command
        ), lane.name


def _chain(path: Path) -> list[Path]:
    """The file and the files it includes, outermost first."""
    parts = tomllib.loads(path.read_text()).get("include", [])
    return [path] + [p for rel in parts for p in _chain(path.parent / rel)]


@pytest.mark.parametrize(
    ("lane", "flag", "edit"),
    [
        ("laguna-s-2.1-nvfp4-dflash", "--gpu-memory-utilization", ('"0.90"', '"0.85"')),
        ("inkling-small-nvfp4-mxfp8kv", "--mem-fraction-static", ('"0.965"', '"0.95"')),
        ("smollm2-135m-vllm-tp2-no-prefix-cache", "--seed", ('"1234"', '"99"')),
    ],
)
def test_a_baseline_flag_change_reaches_its_lane(
    tmp_path: Path, lane: str, flag: str, edit: tuple[str, str]
) -> None:
    """The copy-the-whole-command defect: edit the baseline file only; the lane follows."""
    shutil.copytree(ROOT / "candidates", tmp_path / "c")
    baseline = SHIPPED[lane].spec["lane"]["after"]
    holder = next(
        p for p in _chain(tmp_path / "c" / f"{baseline}.toml") if edit[0] in p.read_text()
    )
    holder.write_text(holder.read_text().replace(f'"{flag}", {edit[0]}', f'"{flag}", {edit[1]}'))
    for name in (baseline, lane):
        command = load_candidate(tmp_path / "c" / f"{name}.toml").command
        assert command[command.index(flag) + 1] == edit[1].strip('"'), name


def test_a_lane_copying_its_baseline_command_is_refused(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "candidates", tmp_path / "c")
    lane = tmp_path / "c" / "laguna-s-2.1-nvfp4-dflash.toml"
    lane.write_text(lane.read_text() + '\n[launch]\ncommand = ["--model", "x"]\n')
    with pytest.raises(CandidateError, match=r"launch\.command: a lane states only"):
        load_candidate(lane)


def test_plan_shows_the_lane_against_its_baseline() -> None:
    lane = SHIPPED["inkling-small-nvfp4-mxfp8kv"]
    assert plan_lines(lane.spec, lane.lane_changes) == [
        "against its baseline inkling-small-nvfp4:",
        "  replaced  --attention-backend triton -> fa4",
        "  added     --kv-cache-dtype mxfp8",
    ]
    reasoning = SHIPPED["smollm2-135m-vllm-reasoning"]
    lines = plan_lines(reasoning.spec, reasoning.lane_changes)
    assert "  removed   --tool-call-parser hermes" in lines
    assert any(
        line.startswith("  replaced  --chat-template") and "chars)" in line for line in lines
    )
    assert plan_lines(SHIPPED["laguna-s-2.1-nvfp4"].spec, ()) == []  # a baseline: no lines


def test_plan_masks_a_secret_set_by_a_lane() -> None:
    overlay = apply_changes({"command": ["s"], "env": {}}, {"env": {"HF_TOKEN": "hf_abcdefgh"}})
    spec = {"lane": {"after": "b", "changes": {}}}
    assert (
        plan_lines(spec, overlay.changes)[1]
        == "  env set   HF_TOKEN=***REDACTED*** (baseline: unset)"
    )
