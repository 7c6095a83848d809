"""Gate 05's decision for one tool_choice mode, from its call (and its non-streamed twin).

The gate calls ``judge_mode`` on the live answers and ``verify`` on the raw records
(evidence/rederive/tool_calls.py): one rule, one copy. A mode's call must pass ``check_call``
with the finish the engine gives a correct call (``expected_finish``), then carry the expected
argument values; a streamed mode whose non-streamed mode is also required is compared with its
twin (``check_twin``) whenever its call is well formed — after an argument mismatch too, so a
double failure is reported whole. The twin is asked for through ``twin`` only when the rule
needs it (the gate sends a request, verify reads the record). Pure: no I/O of its own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tp2qual.checks.answers import check_finish, split_reasoning
from tp2qual.checks.toolcalls import check_call, check_twin, check_uses_result, expected_finish
from tp2qual.checks.verdict import Verdict

STREAM = "-stream"
Twin = Callable[[], tuple[int | None, Any]]  # the twin's (status, body), asked when needed


def base_mode(mode: str) -> str:
    return mode.removesuffix(STREAM)


def twin_tag(mode: str) -> str:
    """The tag of a streamed call's non-streamed twin in ``tool_calls.jsonl`` (``mode``: the
    streamed call's own tag, ``call_tag``)."""
    return f"{mode}-twin"


def call_tag(mode: str, repeat: int) -> str:
    """A call's tag in ``tool_calls.jsonl``: the mode for its first call (as runs recorded
    before repeats had it), ``mode#k`` for its k-th."""
    return mode if repeat <= 1 else f"{mode}#{repeat}"


def repeat_prompt(prompt: str, repeat: int, repeats: int) -> str:
    """The k-th call's question: the same text, with "(request k of N)" at its end after the
    first, so every call shares the system message, the tools and the question as a prefix."""
    return prompt if repeat <= 1 else f"{prompt} (request {repeat} of {repeats})"


LONG_PREFERENCE = ("required", "named", "auto")  # the long call's mode, the first required
LONG_MARGIN = 0.05  # of the bound: aimed above the fill asked, and left free below the bound


def long_base(modes: Sequence[str]) -> str | None:
    """The mode of the call after a long prompt: the first of ``LONG_PREFERENCE`` required."""
    return next((m for m in LONG_PREFERENCE if m in modes), None)


def long_aim(max_model_len: int, fill: float, max_tokens: int) -> tuple[int, int]:
    """(the prompt tokens the long call must reach, the size aimed at): ``LONG_MARGIN`` of the
    bound above the fill, and no nearer the bound than the reply's budget and that margin."""
    wanted = math.ceil(max_model_len * fill)
    room = max_model_len - max_tokens - math.ceil(max_model_len * LONG_MARGIN)
    return wanted, max(wanted, min(room, wanted + math.ceil(max_model_len * LONG_MARGIN)))


def judge_long(
    got: Mapping[str, Any],
    settings: Mapping[str, Any],
    engine: str,
    prompt_tokens: int | None,
    max_model_len: int,
) -> tuple[Verdict, list[str], dict[str, Any]]:
    """The call after a long prompt: the rule of its mode (``long_base``), and a prompt of at
    least ``long_fill`` of the bound by the server's own count; its verdict, problems and the
    row's fill figures."""
    base = long_base(settings.get("modes", [])) or "named"
    wanted = math.ceil(max_model_len * float(settings["long_fill"]))
    fill = round(prompt_tokens / max_model_len, 4) if isinstance(prompt_tokens, int) else None
    row = {"base": base, "prompt_tokens": prompt_tokens, "fill": fill, "wanted_tokens": wanted}
    verdict, problems = judge_mode(base, got, settings, engine, lambda: (None, None))
    if not isinstance(prompt_tokens, int) or prompt_tokens < wanted:
        problems = [
            f"long prompt of {prompt_tokens} tokens, {wanted} wanted "
            f"({settings['long_fill']:.0%} of {max_model_len})",
            *problems,
        ]
    return verdict, problems, row


def expected_values(calls: list[dict[str, Any]], expect: Mapping[str, str]) -> list[str]:
    """Each expected argument fragment the call's (schema-valid) arguments do not contain."""
    arguments = json.loads(calls[0]["function"]["arguments"])  # check_call parsed it already
    return [
        f"argument {key}={arguments.get(key)!r} does not contain {fragment!r}"
        for key, fragment in expect.items()
        if fragment.casefold() not in str(arguments.get(key, "")).casefold()
    ]


def judge_mode(
    mode: str,
    got: Mapping[str, Any],
    settings: Mapping[str, Any],
    engine: str,
    twin: Twin,
) -> tuple[Verdict, list[str]]:
    """``got``: the call as answered, ``tool_calls`` and ``finish_reason`` (a streamed one as
    ``reassemble_stream`` gives it); the call's verdict and every problem of the mode."""
    tool = settings["tool"]
    calls = got.get("tool_calls")
    finishes, rule = expected_finish(engine, mode)
    verdict = check_call(
        calls, got.get("finish_reason"), tool["name"], tool["parameters"], finishes, rule
    )
    if not verdict.ok:
        return verdict, [verdict.reason]
    problems = expected_values(calls or [], settings.get("arguments_expect") or {})
    if mode != base_mode(mode) and base_mode(mode) in settings.get("modes", []):
        matches = check_twin(dict(got), *twin())
        problems += [] if matches.ok else [matches.reason]
    return verdict, problems


def judge_result_answer(
    message: Mapping[str, Any],
    finish_reason: str | None,
    expect: list[str],
    allowed: Sequence[str] | None,
) -> Verdict:
    """The answer after the tool's result, used by the gate and by verify: it ends as the gate's
    ``finish_reasons`` allow, with visible text (``answers.check_finish``), then quotes the
    result. ``allowed`` None: a run recorded before endings were judged, quoting only."""
    answer, reasoning = split_reasoning(dict(message))
    if allowed is not None:
        ending = check_finish(answer, reasoning, finish_reason, allowed)
        if not ending.ok:
            return ending
    return check_uses_result(message.get("content") or "", expect)
