"""A speculative draft model, ``[model.draft]``: pinned as the model is, so the draft the engine
loads is the one preflight proved. The command names it only through ``{draft_repo}`` and
``{draft_revision}`` (e.g. inside vLLM's ``--speculative-config`` JSON), so the two cannot
disagree. A commit not known yet is written ``{some_name}`` and filled on the machine that
downloaded the draft (``tp2qual.local_pins``); preflight refuses the candidate while it is not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tp2qual.exceptions import CandidateError
from tp2qual.local_pins import Pin, PinRule, resolve_local_pin

DRAFT_PIN = PinRule("model.draft.revision", re.compile(r"[0-9a-f]{40}"), "a 40-hex hub commit")
_NAMED_BY = ("{draft_repo}", "{draft_revision}")


def draft_pin(draft: Mapping[str, Any], candidate_path: Path, candidate: str = "") -> Pin:
    """The draft's revision as written, or filled from the machine; CandidateError when the
    filled value is no commit."""
    return resolve_local_pin(draft["revision"], DRAFT_PIN, candidate_path, candidate=candidate)


def draft_placeholders(model: Mapping[str, Any], candidate_path: Path) -> dict[str, str]:
    """``{draft_repo}``, ``{draft_revision}`` for the command filler. An unresolved or bad
    revision stays as written: preflight refuses it before anything starts."""
    draft = model.get("draft")
    if draft is None:
        return {}
    try:
        revision = draft_pin(draft, candidate_path).value or draft["revision"]
    except CandidateError:
        revision = draft["revision"]
    return {"draft_repo": draft["repo"], "draft_revision": revision}


def draft_problems(spec: Mapping[str, Any]) -> list[str]:
    """A schema-valid ``spec``'s draft rules: a command that names a draft has one pinned, a
    pinned draft is the one the command names, and it lies in the model's hub cache (the one the
    container mounts)."""
    launch = spec.get("launch", {})
    argv = [*launch.get("command", []), *launch.get("append", [])]
    model = spec.get("model", {})
    draft = model.get("draft")
    if draft is None:
        named = any("{draft_" in arg for arg in argv)
        return (
            ["launch.command: names {draft_…} but no [model.draft] pins a draft"] if named else []
        )
    problems = [
        f"launch.command: [model.draft] pins {draft['repo']} but the command never names "
        f"{name}: the engine could load another draft than preflight checks"
        for name in _NAMED_BY
        if not any(name in arg for arg in argv)
    ]
    own, shared = draft.get("hf_cache"), model.get("hf_cache")
    if own and (not shared or Path(own).expanduser() != Path(shared).expanduser()):
        problems.append(
            f"model.draft.hf_cache: {own!r} is not model.hf_cache ({shared!r}): the engine reads "
            "the draft from the model's hub cache, so download it there"
        )
    return problems
