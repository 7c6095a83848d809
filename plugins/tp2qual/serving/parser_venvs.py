"""The engines' own parsers from their wheels, with no GPU and no image: one venv per pinned
engine version (``scripts/install-engine-parsers.sh``), and what they answered on the shipped
launches (``engines/recorded_answers.json``, written by ``scripts/record-engine-answers.py`` and
held equal to a fresh run by ``plugins/tests/test_campaign_engine_check.py``).

``pytest --plan`` starts nothing, so it shows the recorded answer where the launch is exactly
the one recorded, and says so where it is not. Gate 00 still asks the pinned image itself.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from tp2qual.candidate import Candidate, cache_dir
from tp2qual.checks.verdict import Verdict
from tp2qual.launch import ResolvedLaunch, resolve_launch
from tp2qual.serving.engine_check import EngineQuestion, question

# (engine, version) -> the venv under the tp2qual cache (scripts/install-engine-parsers.sh).
PARSER_VENVS = {
    ("vllm", "0.22.1"): "venvs/parser-vllm-0.22.1",
    ("vllm", "0.25.1"): "venvs/parser-vllm-0.25.1",
    ("sglang", "0.5.23"): "venvs/parser-sglang-0.5.23",
}
RECORDED = Path(__file__).resolve().parents[1] / "engines" / "recorded_answers.json"
# A revision or a placeholder left for a pin changes no parser's answer: the key ignores them.
_REVISION = re.compile(r"\b[0-9a-f]{40}\b|\{[a-z_]+\}")


def parser_python(engine: str, version: str | None) -> Path | None:
    """The parser venv's Python for this engine version, None when none is installed here."""
    venv = PARSER_VENVS.get((engine, version or ""))
    python = cache_dir() / venv / "bin" / "python" if venv else None
    return python if python is not None and python.is_file() else None


def question_key(asked: EngineQuestion) -> str:
    """sha256 of the question with revisions, unfilled pins and the port masked."""
    text = _REVISION.sub("<pin>", asked.portless().as_json())
    return hashlib.sha256(text.encode()).hexdigest()


def record_of(asked: EngineQuestion, version: str, answer: dict[str, Any],
              verdict: Verdict) -> dict[str, Any]:  # fmt: skip
    """What is kept of one answer: the engine's facts and the judgement, not its namespace."""
    parse = answer.get("parse") or {}
    return {
        "key": question_key(asked),
        "engine": f"{asked.engine} {version}",
        "wheel_version": answer.get("version"),
        "parser": answer.get("parser"),
        "platform": verdict.measures.get("parser_platform"),
        "parsed": bool(parse.get("accepted")),
        "abbreviations": parse.get("abbreviations") or {},
        "parsers": {
            flag: {k: fact.get(k) for k in ("name", "registered", "registry", "refusal")}
            for flag, fact in sorted((answer.get("parsers") or {}).items())
        },
        "env": sorted(answer.get("env") or {}),
        "accepted": verdict.ok,
        "refusals": verdict.measures.get("refusals", []),
        "notices": verdict.measures.get("notices", []),
    }


def recorded_answers() -> dict[str, Any]:
    if not RECORDED.is_file():
        return {}
    loaded: dict[str, Any] = json.loads(RECORDED.read_text(encoding="utf-8"))
    return loaded


def plan_lines(candidate: Candidate, launch: ResolvedLaunch) -> list[str]:
    """The recorded answer on this exact launch, or why there is none."""
    asked = question(candidate, launch)
    if asked is None:
        return []
    version = candidate.spec["engine"].get("version")
    answers, after = recorded_answers(), candidate.spec.get("lane", {}).get("after")
    record, same = answers.get(candidate.name), ""
    if record is None and after in answers and answers[after]["key"] == question_key(asked):
        record, same = answers[after], f", on {after}'s launch, the same bytes"  # a lane's
    if record is None:
        return [f"recorded answer: none for {candidate.name} (the self-test records the "
                "campaign's launches only); gate 00 asks the engine at run time"]  # fmt: skip
    if record["key"] != question_key(asked) or record["engine"] != f"{asked.engine} {version}":
        return [
            f"recorded answer: STALE, recorded for another launch of {candidate.name} "
            f"({record['engine']}): run scripts/record-engine-answers.py; gate 00 asks the "
            "engine at run time all the same"
        ]
    head = "accepted" if record["accepted"] else "REFUSED"
    lines = [
        f"recorded answer ({record['engine']}'s wheel, {record['parser']}, platform "
        f"{record['platform']}{same}): {head}"
    ]
    for flag, fact in record["parsers"].items():
        state = "registered" if fact["registered"] else "NOT registered"
        lines.append(f"  {flag} {fact['name']}: {state} in {fact['registry']}")
    lines += [f"  refused: {r}" for r in record["refusals"]]
    lines += [f"  notice: {n}" for n in record["notices"]]
    return lines


def ask_parser(candidate: Candidate) -> dict[str, Any] | None:
    """Ask the candidate's engine version's parser venv about its exact launch, judged as gate 00
    judges it; None when the engine has no parser to ask or no venv is installed here."""
    from tp2qual.checks.engine_answer import judge
    from tp2qual.serving.engine_check import ask_engine, platform_of, with_fallback

    launch = resolve_launch(candidate, run_id="check")
    asked, version = question(candidate, launch), candidate.spec["engine"].get("version")
    python = parser_python(candidate.engine, version) if asked else None
    if asked is None or python is None or version is None:
        return None
    run = ask_engine(launch, asked, python=python)
    if run.answer is None:
        raise RuntimeError(f"{candidate.name}: the engine check printed no answer: "
                           f"{run.output[-1500:]}")  # fmt: skip
    answer = with_fallback(candidate, run.answer)
    verdict = judge(answer, platform=platform_of(candidate))
    return {"record": record_of(asked, version, answer, verdict), "answer": answer,
            "seconds": run.seconds}  # fmt: skip
