"""Tool-call validation over OpenAI chat-completion dicts.

Follows vLLM's ``tests/tool_use`` (one call, right name, JSON arguments, streamed and
non-streamed agree, name streamed once) and BFCL's AST checker (arguments must satisfy the
tool's schema and carry no parameters the tool does not declare). A parser or template bug
in the server shows up here as malformed arguments, doubled names or a wrong finish reason.
"""

from __future__ import annotations

import json
import re
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from tp2qual.checks.replies import reply_message
from tp2qual.checks.verdict import Verdict
from tp2qual.engines import engine_for


def _parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str]:
    """Parse a call's ``arguments`` string into an object, or say why it is not one."""
    if not isinstance(raw, str):
        return None, f"arguments must be a JSON string, got {type(raw).__name__}"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, f"arguments are not valid JSON ({exc.msg} at char {exc.pos}): {raw[:200]!r}"
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, ""


def _schema_error(arguments: dict[str, Any], schema: dict[str, Any]) -> str:
    """The most relevant Draft 2020-12 violation as ``path: message (+N more)``, or ''."""
    errors = list(Draft202012Validator(schema).iter_errors(arguments))
    if not errors:
        return ""
    error = best_match(errors)
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{error.json_path}: {error.message}{more}"


def _extra_keys(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """Paths of object keys the schema does not declare (BFCL forbids extras).

    Only objects whose schema lists ``properties`` and leaves ``additionalProperties`` unset
    (or false) are strict; an explicit ``additionalProperties`` schema or ``true`` is honoured.
    """
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [
            extra
            for i, item in enumerate(value)
            for extra in _extra_keys(item, schema["items"], f"{path}[{i}]")
        ]
    if not isinstance(value, dict) or "properties" not in schema:
        return []
    props: dict[str, Any] = schema["properties"]
    if schema.get("additionalProperties") not in (None, False):
        return []
    extras = [f"{path}.{key}" for key in value if key not in props]
    for key, sub in value.items():
        if key in props and isinstance(props[key], dict):
            extras += _extra_keys(sub, props[key], f"{path}.{key}")
    return extras


def _call_shape_error(call: Any) -> str:
    """Why one ``tool_calls`` entry is not shaped like OpenAI's, or ''."""
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return f"tool call is not an object with a 'function' object: {call!r:.200}"
    if call.get("type", "function") != "function":
        return f"tool call type is {call.get('type')!r}, expected 'function'"
    if not isinstance(call.get("id"), str) or not call["id"]:
        return f"tool call id missing or empty: {call.get('id')!r}"
    return ""


def expected_finish(engine: str, mode: str) -> tuple[frozenset[str], str]:
    """The finish reasons a correct call may end with, and the rule that says so: the engine's
    own (``tp2qual.engines``; vLLM ends a named tool_choice 'stop')."""
    return engine_for(engine).tool_finish_for(mode)


def check_call(
    message_tool_calls: list[dict[str, Any]] | None,
    finish_reason: str | None,
    expected_name: str,
    parameters_schema: dict[str, Any],
    expect_finish_reason: str | frozenset[str] = "tool_calls",
    finish_rule: str = "",
) -> Verdict:
    """One well-formed call to ``expected_name`` whose arguments satisfy the tool's schema."""
    calls = message_tool_calls or []
    allowed = (
        frozenset({expect_finish_reason})
        if isinstance(expect_finish_reason, str)
        else expect_finish_reason
    )
    found: dict[str, Any] = {"n_calls": len(calls), "finish_reason": finish_reason}
    if finish_rule:
        found["finish_rule"] = finish_rule
    if len(calls) != 1:
        names = [c.get("function", {}).get("name") for c in calls if isinstance(c, dict)]
        return Verdict.failed(f"expected exactly one tool call, got {len(calls)} {names}", **found)
    if shape := _call_shape_error(calls[0]):
        return Verdict.failed(shape, **found)
    function = calls[0]["function"]
    found["name"] = function.get("name")
    if found["name"] != expected_name:
        return Verdict.failed(f"called {found['name']!r}, expected {expected_name!r}", **found)
    arguments, why = _parse_arguments(function.get("arguments"))
    if arguments is None:
        return Verdict.failed(why, raw_arguments=function.get("arguments"), **found)
    found["arguments"] = arguments
    if error := _schema_error(arguments, parameters_schema):
        return Verdict.failed(f"arguments violate the schema at {error}", **found)
    if extras := _extra_keys(arguments, parameters_schema):
        return Verdict.failed(f"arguments carry undeclared parameters {extras}", **found)
    if finish_reason not in allowed:
        return Verdict.failed(
            f"finish_reason {finish_reason!r}, expected {' or '.join(map(repr, sorted(allowed)))}"
            + (f" ({finish_rule})" if finish_rule else ""),
            **found,
        )
    return Verdict.passed(**found)


def _merge_tool_delta(slots: dict[int, dict[str, Any]], position: int, delta: dict) -> None:
    """Fold one streamed tool-call delta into its slot, counting id and name fragments."""
    index = delta.get("index", position)
    slot = slots.setdefault(
        index,
        {"id": "", "type": "function", "name": "", "arguments": "", "ids": 0, "names": 0},
    )
    if delta.get("id"):
        slot["id"] += delta["id"]
        slot["ids"] += 1
    if delta.get("type"):
        slot["type"] = delta["type"]
    function = delta.get("function") or {}
    if function.get("name"):
        slot["name"] += function["name"]
        slot["names"] += 1
    if function.get("arguments"):
        slot["arguments"] += function["arguments"]


def reassemble_stream(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Rebuild choice 0 of a streamed completion from its ``chat.completion.chunk`` dicts.

    Returns ``tool_calls`` (OpenAI-shaped, ordered by ``index``), ``finish_reason`` (the last
    one sent), ``content`` and ``reasoning_content`` (concatenated deltas), and
    ``name_deltas`` / ``id_deltas``: per call, how many deltas carried a name / id. OpenAI and
    vLLM send each exactly once, so a count other than 1 is a streaming-parser bug even when
    the concatenation happens to look right.
    """
    slots: dict[int, dict[str, Any]] = {}
    content: list[str] = []
    reasoning: list[str] = []
    finish_reason = None
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # (a choice that is no object carries nothing to rebuild)
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            reasoning.append(delta.get("reasoning_content") or delta.get("reasoning") or "")
            for position, tool_delta in enumerate(delta.get("tool_calls") or []):
                _merge_tool_delta(slots, position, tool_delta)
            finish_reason = choice.get("finish_reason") or finish_reason
    ordered = [slots[i] for i in sorted(slots)]
    return {
        "tool_calls": [
            {
                "id": s["id"],
                "type": s["type"],
                "function": {"name": s["name"], "arguments": s["arguments"]},
            }
            for s in ordered
        ],
        "finish_reason": finish_reason,
        "content": "".join(content),
        "reasoning_content": "".join(reasoning),
        "name_deltas": [s["names"] for s in ordered],
        "id_deltas": [s["ids"] for s in ordered],
    }


def _name_and_args(call: dict[str, Any]) -> tuple[str, dict[str, Any] | None, str]:
    function = call.get("function") or {}
    arguments, why = _parse_arguments(function.get("arguments"))
    return function.get("name", ""), arguments, why


def check_stream_matches(
    streamed: dict[str, Any], non_streamed_calls: list[dict[str, Any]]
) -> Verdict:
    """Streamed calls (from :func:`reassemble_stream`) equal the non-streamed ones.

    Arguments are compared as parsed objects, since key order and spacing may legitimately
    differ; each streamed name must have arrived in exactly one delta.
    """
    got, want = streamed.get("tool_calls") or [], non_streamed_calls or []
    found: dict[str, Any] = {"streamed": len(got), "non_streamed": len(want)}
    if len(got) != len(want):
        return Verdict.failed(f"streamed {len(got)} tool calls, non-streamed {len(want)}", **found)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g_name, g_args, g_why = _name_and_args(g)
        w_name, w_args, w_why = _name_and_args(w)
        if g_why or w_why:
            side = "streamed" if g_why else "non-streamed"
            return Verdict.failed(f"call {i}: {side} {g_why or w_why}", **found)
        if g_name != w_name:
            return Verdict.failed(f"call {i}: streamed name {g_name!r} != {w_name!r}", **found)
        if g_args != w_args:
            return Verdict.failed(
                f"call {i}: arguments differ: streamed {g_args} != {w_args}", **found
            )
    counts = streamed.get("name_deltas", [1] * len(got))
    found["name_deltas"] = counts
    if bad := [i for i, n in enumerate(counts) if n != 1]:
        return Verdict.failed(f"function name not streamed exactly once for calls {bad}", **found)
    return Verdict.passed(**found)


def check_twin(streamed: dict[str, Any], status: int | None, body: Any) -> Verdict:
    """A streamed call against its non-streamed twin's raw answer: the twin must be answered
    (HTTP 200 with a message), then carry the same calls (:func:`check_stream_matches`)."""
    message, problem = reply_message(status, body)
    if message is None:
        return Verdict.failed(f"non-streamed twin: {problem}", twin_status=status)
    return check_stream_matches(streamed, message.get("tool_calls") or [])


def _fold(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


def check_uses_result(answer: str, expected_fragments: list[str]) -> Verdict:
    """The follow-up answer quotes the tool result: one fragment appears, case/space-folded."""
    if not expected_fragments:
        raise ValueError("check_uses_result needs at least one expected fragment")
    folded = _fold(answer or "")
    hits = [f for f in expected_fragments if _fold(f) and _fold(f) in folded]
    found = {"matched": hits, "answer_chars": len(answer or "")}
    if not hits:
        return Verdict.failed(
            f"answer uses none of {expected_fragments}: {(answer or '')[:200]!r}", **found
        )
    return Verdict.passed(**found)
