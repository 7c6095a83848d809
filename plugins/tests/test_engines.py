"""The engine modules: one per engine kind the schema admits, each fact with its source, and
the places that used to hold a copy now read them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tp2qual.candidate import Candidate
from tp2qual.checks.engine_env import unknown_engine_env
from tp2qual.checks.toolcalls import expected_finish
from tp2qual.engines import ENGINES, Engine, engine_for
from tp2qual.gates import sampling_for

PLUGINS = Path(__file__).resolve().parents[1]
SCHEMA = PLUGINS / "tp2qual" / "candidate.schema.json"


def test_one_module_per_kind_the_schema_admits() -> None:
    schema = json.loads(SCHEMA.read_text())
    kinds = schema["properties"]["engine"]["properties"]["kind"]["enum"]
    assert sorted(kinds) == sorted(ENGINES)
    with pytest.raises(KeyError, match="no such engine"):
        engine_for("tgi")


@pytest.mark.parametrize("kind", sorted(ENGINES))
def test_every_fact_says_where_it_came_from(kind: str) -> None:
    engine = ENGINES[kind]
    stated = {
        "neutral_sampling": engine.neutral_sampling,
        "identity_paths": engine.identity_paths,
        "histograms": engine.histograms,
        "kv_capacity": engine.kv_capacity,
        "over_length": True,  # every engine answers an over-length prompt somehow
        "log_lines": engine.log_lines,
        "log_stamp": engine.log_stamp,
        "step_watch": engine.step_watch,
        "metric_counters": engine.metric_counters,
        "python_package": engine.python_package,
    }
    sources = engine.sources
    unsourced = [fact for fact, value in stated.items() if value and fact not in sources]
    unsourced += [
        f"tool_finish.{m}" for m in engine.tool_finish if f"tool_finish.{m}" not in sources
    ]
    assert not unsourced, f"{kind}: facts without a source: {unsourced}"
    for fact, where in sources.items():
        assert re.search(r"\d+\.\d+", where), f"{kind} {fact}: no version in {where!r}"
    for pattern in engine.log_lines.values():
        re.compile(pattern)
    assert engine.log_stamp is None or re.compile(engine.log_stamp).groups == 5  # M D h m s
    if engine.step_watch:
        assert {"s"} <= set(re.compile(engine.step_watch.wait).groupindex)
        assert {"method"} <= set(re.compile(engine.step_watch.gave_up).groupindex)
    for pattern in engine.over_length.messages:
        re.compile(pattern)


def _candidate(kind: str, sampling: dict[str, float] | None = None) -> Candidate:
    spec = {
        "name": "x",
        "engine": {"kind": kind},
        "model": {"served_name": "m"},
        "gates": {"request": {"sampling": sampling or {}}},
    }
    return Candidate(spec=spec, path=Path("x.toml"))


@pytest.mark.parametrize("kind", sorted(ENGINES))
def test_requests_carry_the_engines_neutral_sampling(kind: str) -> None:
    engine: Engine = ENGINES[kind]
    got = sampling_for(_candidate(kind, {"repetition_penalty": 1.1}))
    assert got["temperature"] == 0.0
    penalty = engine.sampling_names.get("repetition_penalty", "repetition_penalty")
    assert got[penalty] == 1.1  # the stated one, in the engine's own name
    for name, value in engine.neutral_sampling.items():
        assert got[name] == (1.1 if name == penalty else value)


def test_tool_finish_rules_come_from_the_engine() -> None:
    assert expected_finish("vllm", "named-stream") == ENGINES["vllm"].tool_finish["named"]
    assert expected_finish("vllm", "required") == (
        frozenset({"tool_calls"}),
        expected_finish("sglang", "named")[1],
    )
    assert expected_finish("sglang", "named")[0] == frozenset({"tool_calls"})


def test_env_prefix_comes_from_the_engine() -> None:
    env = {"VLLM_NOPE": "1", "SGLANG_NOPE": "1", "OTHER": "1"}
    assert [p.split(":")[0] for p in unknown_engine_env("vllm", "0.32.0", env, (), "t")] == [
        "launch.env.VLLM_NOPE"
    ]
    assert unknown_engine_env("llama.cpp", "0.3.36", env, (), "t") == []
