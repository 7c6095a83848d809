"""The hand-over's rules, pure: who is named, whether the return is possible before anything
stops, and whether the serves came back as recorded (what verify judges again)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tp2qual.checks import handover as rules
from tp2qual.checks.handover import Selector, parse_selector
from tp2qual.evidence.verify_handover import check_handover

IMAGE_ID = "sha256:" + "ab" * 32


def inspect(status: str = "running", health: str | None = "healthy") -> dict[str, Any]:
    state: dict[str, Any] = {"Status": status, "StartedAt": "2026-12-04T20:00:00Z"}
    if health:
        state["Health"] = {"Status": health}
    return {
        "Id": "c0ffee" * 10 + "abcd",
        "Name": "/llm-primary",
        "Image": IMAGE_ID,
        "State": state,
        "Config": {
            "Image": "vllm/vllm-openai:r18",
            "Labels": {"com.docker.compose.project": "anvil", "role": "primary"},
            "Healthcheck": {"Test": ["CMD", "curl", "-f", "http://127.0.0.1:8000/health"]},
        },
        "HostConfig": {
            "RestartPolicy": {"Name": "unless-stopped"},
            "DeviceRequests": [{"Count": -1, "Capabilities": [["gpu"]]}],
        },
    }


def test_selectors_by_name_label_and_compose_project():
    attrs = inspect()
    assert rules.matches(parse_selector("llm-primary", "--hand-over"), attrs)
    assert rules.matches(parse_selector("label=role=primary", "--hand-over"), attrs)
    assert rules.matches(parse_selector("project=anvil", "--hand-over"), attrs)
    assert not rules.matches(parse_selector("project=omni", "--hand-over"), attrs)


@pytest.mark.parametrize("text", ["", "colour=red", "label=role", "project= "])
def test_a_selector_that_names_nothing_is_refused_naming_where(text):
    with pytest.raises(ValueError, match=r"^x\.toml \[handover\]: "):
        parse_selector(text, "x.toml [handover]")


def test_the_state_recorded_is_what_docker_start_must_bring_back():
    state = rules.state_of(inspect())
    assert state["name"] == "llm-primary" and state["status"] == "running"
    assert state["health"] == "healthy" and state["has_healthcheck"] is True
    assert state["image_id"] == IMAGE_ID and state["restart_policy"] == "unless-stopped"
    assert state["gpu_requests"] == ["device request: all GPUs"]
    assert state["compose_project"] == "anvil"


def test_a_selector_matching_no_container_is_refused():
    problems = rules.unnamed_problems([Selector("name", "llm-primry")], {"llm-primry": []})
    assert problems == ["hand-over llm-primry: no container on this Docker engine matches it"]


def test_the_return_is_refused_before_stopping_when_the_image_is_gone():
    before = [rules.state_of(inspect())]
    problems = rules.return_problems(before, {IMAGE_ID: False}, {})
    assert len(problems) == 1 and "no longer present locally" in problems[0]
    assert "nothing was stopped" in problems[0]
    assert rules.return_problems(before, {IMAGE_ID: True}, {}) == []


def test_a_serve_without_a_healthcheck_needs_a_url_named():
    attrs = inspect(health=None)
    attrs["Config"]["Healthcheck"] = None
    before = [rules.state_of(attrs)]
    assert (
        "no Docker healthcheck and no health URL"
        in rules.return_problems(before, {IMAGE_ID: True}, {})[0]
    )
    urls = {"llm-primary": "http://127.0.0.1:8000/v1/models"}
    assert rules.return_problems(before, {IMAGE_ID: True}, urls) == []


def record(after: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {"schema": rules.SCHEMA, "before": [rules.state_of(inspect())], "after": after}


def test_restored_when_the_after_state_is_the_before_state():
    assert rules.judge_restored(record([rules.state_of(inspect())])).ok


def test_a_return_that_is_not_healthy_names_container_states_and_commands():
    verdict = rules.judge_restored(record([rules.state_of(inspect(health="unhealthy"))]))
    assert not verdict.ok
    assert verdict.reason.startswith("not restored: llm-primary: health healthy before, unhealthy")
    assert "docker start llm-primary" in verdict.reason
    assert verdict.measures["commands"][0] == "docker start llm-primary"


def test_never_given_back_is_not_restored():
    verdict = rules.judge_restored(record(None))
    assert not verdict.ok and "never given back: llm-primary" in verdict.reason


def test_verify_judges_restored_again_from_the_two_states(tmp_path):
    claimed = {**record([rules.state_of(inspect(status="exited", health="unhealthy"))])}
    claimed["restored"] = True  # what the record says; its own states say otherwise
    (tmp_path / "handover.json").write_text(json.dumps(claimed))
    kinds = [p.kind for p in check_handover(tmp_path)]
    assert kinds == ["rederive", "handover"]
    good = {**record([rules.state_of(inspect())]), "restored": True}
    (tmp_path / "handover.json").write_text(json.dumps(good))
    assert check_handover(tmp_path) == []


def test_a_container_gone_from_the_engine_is_not_restored():
    verdict = rules.judge_restored(record([None]))  # type: ignore[list-item]
    assert verdict.reason.startswith("not restored: llm-primary: not found after the run")
    assert verdict.measures["commands"] == [
        "docker start llm-primary",
        "docker inspect --format '{{.State.Health.Status}}' llm-primary",
    ]
