"""Known-answer matching and determinism checks on chat answers.

A model served with broken weights or kernels still produces fluent text, but stops getting
easy questions right and stops being deterministic at temperature 0. These checks compare
the answer proper, with any reasoning (``reasoning_content`` or ``<think>`` blocks) kept
apart, so a right number inside the reasoning cannot pass for a right answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tp2qual.checks.verdict import Verdict

_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)
_OPEN_THINK = re.compile(r"<think>", re.IGNORECASE)
_CLOSE_THINK = re.compile(r"</think>", re.IGNORECASE)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_WRAPPERS = " \t\r\n*_`\"'"
_TRAILING = _WRAPPERS + ".,!?;:"
MODES = ("contains", "exact", "regex")


def _split_think(content: str) -> tuple[str, list[str]]:
    """Separate ``<think>`` reasoning from the answer in a content string.

    Handles closed blocks, a lone ``</think>`` (templates that open the block in the prompt,
    as DeepSeek-R1's does) and an unclosed ``<think>`` (reasoning cut off by max_tokens).
    """
    reasoning = [m.strip() for m in _THINK_BLOCK.findall(content)]
    rest = _THINK_BLOCK.sub("", content)
    if close := _CLOSE_THINK.search(rest):
        reasoning.insert(0, rest[: close.start()].strip())
        rest = rest[close.end() :]
    if opened := _OPEN_THINK.search(rest):
        reasoning.append(rest[opened.end() :].strip())
        rest = rest[: opened.start()]
    return rest.strip(), [r for r in reasoning if r]


def split_reasoning(message: dict[str, Any]) -> tuple[str, str]:
    """``(answer, reasoning)`` from an OpenAI message, reasoning from either place."""
    answer, parts = _split_think(message.get("content") or "")
    field = message.get("reasoning_content") or message.get("reasoning") or ""
    if field.strip():
        parts.insert(0, field.strip())
    return answer, "\n".join(parts)


def output_text(message: dict[str, Any]) -> str:
    """All a reply generated, reasoning first: reasoning is output too (a loop inside it is
    the same fault as one in the answer; vLLM #52938's shape)."""
    answer, reasoning = split_reasoning(message)
    return "\n".join(part for part in (reasoning, answer) if part)


def normalise(text: str) -> str:
    """Fold an answer for comparison: no reasoning, case, spacing, wrappers or final stop.

    ``**Paris**.`` and ``paris`` compare equal; ``1,000`` becomes ``1000``. Number words are
    deliberately not mapped: questions that expect a number should say "answer with digits".
    """
    answer, _ = _split_think(text or "")
    folded = re.sub(r"\s+", " ", answer).casefold()
    folded = _THOUSANDS.sub("", folded)
    return folded.lstrip(_WRAPPERS).rstrip(_TRAILING)


def _whole(expected: str) -> re.Pattern[str]:
    """Pattern for ``expected`` as a whole word or number: '4' matches neither '14' nor '4.5'.

    Numbers also refuse a leading minus or decimal point, so '4' does not match '-4' or '0.4'.
    """
    before = r"(?<![\w.\-])" if expected[:1].isdigit() else r"(?<!\w)"
    after = r"(?![.,]\d)(?!\w)" if expected[-1:].isdigit() else r"(?!\w)"
    return re.compile(before + re.escape(expected) + after)


def _matches(answer: str, expected: str, mode: str) -> bool:
    if mode == "exact":
        return normalise(answer) == normalise(expected)
    if mode == "regex":
        spaced = re.sub(r"\s+", " ", _split_think(answer)[0])
        return re.search(expected, spaced, re.IGNORECASE) is not None
    wanted = normalise(expected)
    return bool(wanted) and _whole(wanted).search(normalise(answer)) is not None


def check_answer(answer: str, expected: list[str], mode: str = "contains") -> Verdict:
    """Pass when the answer matches any expected form.

    ``contains``: a normalised expected form appears as a whole word/number in the normalised
    answer. ``exact``: the normalised strings are equal. ``regex``: a pattern matches the
    answer (reasoning removed, whitespace collapsed, case-insensitive).
    """
    if mode not in MODES:
        raise ValueError(f"unknown answer mode {mode!r}; use one of {MODES}")
    if not expected:
        raise ValueError("check_answer needs at least one expected answer")
    hits = [e for e in expected if _matches(answer or "", e, mode)]
    found = {"mode": mode, "matched": hits, "answer": normalise(answer or "")[:200]}
    if not hits:
        return Verdict.failed(
            f"answer {found['answer']!r} does not {mode}-match any of {expected}", **found
        )
    return Verdict.passed(**found)


def _first_difference(a: str, b: str) -> int:
    """Index of the first differing character (the shorter length if one is a prefix)."""
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


def _excerpt(text: str, at: int, width: int = 40) -> str:
    """repr of the text around ``at``, with an ellipsis where it was cut."""
    start = max(0, at - 10)
    piece = text[start : start + width]
    return ("…" if start else "") + repr(piece) + ("…" if start + width < len(text) else "")


def check_identical(outputs: list[str]) -> Verdict:
    """Repeats of one request at temperature 0 must be byte-identical."""
    if len(outputs) < 2:
        raise ValueError(f"check_identical needs at least two outputs, got {len(outputs)}")
    first = outputs[0]
    distinct = len(set(outputs))
    for j, other in enumerate(outputs[1:], start=1):
        if other.encode("utf-8") == first.encode("utf-8"):
            continue
        at = _first_difference(first, other)
        return Verdict.failed(
            f"output {j} differs from output 0 at char {at}: "
            f"{_excerpt(first, at)} vs {_excerpt(other, at)}",
            n=len(outputs),
            distinct=distinct,
            first_diff_output=j,
            first_diff_index=at,
        )
    return Verdict.passed(n=len(outputs), distinct=1, chars=len(first))


def check_budget(
    answer: str, reasoning: str, finish_reason: str | None, max_tokens: int
) -> Verdict:
    """A reply cut off while the model was still reasoning is a budget problem, not a wrong
    answer: engines return ``content: null`` (vLLM) or an unclosed ``<think>`` then, and the
    candidate's budget or thinking control is what needs changing."""
    measures = {"finish_reason": finish_reason, "max_tokens": max_tokens}
    if answer.strip() or finish_reason != "length" or not reasoning.strip():
        return Verdict.passed(**measures)
    return Verdict.failed(
        f"the {max_tokens}-token budget ended inside reasoning ({len(reasoning)} characters of "
        "reasoning, no answer): raise the gate's max_tokens or state a thinking control in "
        "[gates.request].extra — this is not a wrong answer",
        **measures,
    )


def check_reasoning_apart(answer: str, reasoning: str) -> Verdict:
    """A reasoning parser at work: the reply carries reasoning apart from the answer, and the
    reasoning text is not repeated as the answer (a parser that split nothing)."""
    measures = {"reasoning_chars": len(reasoning), "answer_chars": len(answer)}
    if not reasoning.strip():
        return Verdict.failed("no reasoning came back apart from the answer", **measures)
    if reasoning.strip() in answer:
        return Verdict.failed("the reasoning leaked into the answer", **measures)
    return Verdict.passed(**measures)


def finish_class(answer: str, reasoning: str, finish_reason: str | None) -> str:
    """Why a reply's ending is not a finished visible answer (the user's evaluator's classes,
    anvil-serving ``references/evidence-contract.md``); judged before its words are."""
    visible = bool(answer.strip())
    if finish_reason == "length" and not visible and reasoning.strip():
        return "reasoning budget exhausted"
    if not visible:
        return "no visible answer"
    if finish_reason == "length":
        return "visible budget exhausted"
    return f"unexpected finish reason {finish_reason!r}"


def check_finish(
    answer: str, reasoning: str, finish_reason: str | None, allowed: Sequence[str]
) -> Verdict:
    """The reply ended the way its gate allows, with a visible answer: a right word in an answer
    cut at ``length`` still fails, since the next run's cut may fall before it."""
    measures = {"finish_reason": finish_reason, "allowed": list(allowed)}
    if finish_reason in allowed and answer.strip():
        return Verdict.passed(**measures)
    cls = finish_class(answer, reasoning, finish_reason)
    return Verdict.failed(
        f"{cls}: ended {finish_reason!r} ({len(answer.strip())} visible, {len(reasoning)} "
        f"reasoning characters), allowed {list(allowed)}",
        finish_class=cls,
        **measures,
    )


def check_budgeted_answer(
    answer: str,
    reasoning: str,
    finish_reason: str | None,
    max_tokens: int,
    expect: list[str],
    mode: str = "contains",
    allowed: Sequence[str] | None = None,
) -> Verdict:
    """The answer held first to its ending (``check_finish`` against the gate's ``allowed``
    finish reasons), then to what it should say (``check_answer``). ``allowed`` None is the
    rule a run recorded before finish reasons were judged (its settings name none): only
    ``check_budget``, so verify re-derives such a run as it was decided."""
    if allowed is None:
        ending = check_budget(answer, reasoning, finish_reason, max_tokens)
    else:
        ending = check_finish(answer, reasoning, finish_reason, allowed)
    return check_answer(answer, expect, mode) if ending.ok else ending
