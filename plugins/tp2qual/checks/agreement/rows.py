"""Token rows from an OpenAI text completion's ``logprobs``, and where a reread's rows meet a
decode's.

A *row* is one token position: ``{"token", "logprob", "top": [[token, logprob], …]}``, ``top``
ranked best first. A decode's rows are the answer's tokens as they were chosen. A *reread* is the
same engine prefilling a text (``echo`` with ``logprobs`` and one token to generate): its rows
hold, for every token of that text, the logprob the engine gives it after the tokens before it.
Engines place that value differently (``Engine.prompt_rows``): at its own row (vLLM, SGLang:
shift 0), or one row early in the previous row's top list (llama-cpp-python 0.3.36: shift 1,
its ``token_logprobs`` read one row late, ``llama_cpp/llama.py`` ``_create_completion``).

A reread's rows may begin with tokens the text sent does not hold: a tokenizer that prepends a
BOS has vLLM and SGLang echo it as the first row (``<|endoftext|>``, ``<s>``, DeepSeek's
begin-of-sentence token; recorded: ``plugins/tests/data/vllm-bos/``). ``answer_rows`` finds the
prompt's text in the rows, not at character 0, so such a prefix is skipped, never counted as
prompt. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Row = dict[str, Any]


def _top(entry: Any) -> list[list[Any]]:
    if not isinstance(entry, Mapping):
        return []
    pairs = [[str(t), float(lp)] for t, lp in entry.items() if isinstance(lp, int | float)]
    return sorted(pairs, key=lambda pair: (-pair[1], pair[0]))  # ties by text: any key order


def _columns(logprobs: Any) -> tuple[list[str], list[Any], list[Any]] | None:
    if not isinstance(logprobs, Mapping):
        return None
    tokens, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
    tops = logprobs.get("top_logprobs") or []
    if not isinstance(tokens, list) or not isinstance(values, list) or len(tokens) != len(values):
        return None
    tops = list(tops) + [None] * (len(tokens) - len(tops))
    return [str(t) for t in tokens], values, tops


def gives_no_logprobs(logprobs: Any) -> bool:
    """The reply carries no logprobs at all (``null``, absent, ``{}``, or an object without
    ``tokens`` and ``token_logprobs``): the engine or its launch does not give them, which is
    the suite's inability to judge, not a wrong answer. Logprobs that are there but empty (no
    token generated) or unreadable are the reply's own fault."""
    if logprobs is None or logprobs in ({}, []):
        return True
    return isinstance(logprobs, Mapping) and all(
        logprobs.get(key) is None for key in ("tokens", "token_logprobs")
    )


def no_logprobs_said(tag: str, engine: str, top_n: int, *, echo: bool = False) -> str:
    """What and what to do, for ``NoLogprobs``."""
    asked = f"echo with logprobs: {top_n}" if echo else f"logprobs: {top_n}"
    return (
        f"{tag}: {engine} answered HTTP 200 without token logprobs ({asked}); gate 07 judges "
        "by them and cannot judge this serve. Not a finding about the candidate: serve with an "
        f"engine build and flags that return them (vLLM: --max-logprobs of at least {top_n}), "
        "or set [gates.not_applicable] agreement in the candidate file with why"
    )


def decode_rows(logprobs: Any) -> list[Row] | None:
    """A decode's rows, as chosen; None when the answer carries no usable logprobs."""
    columns = _columns(logprobs)
    if columns is None:
        return None
    rows = []
    for token, value, top in zip(*columns, strict=True):
        if not isinstance(value, int | float):
            return None
        rows.append({"token": token, "logprob": float(value), "top": _top(top)})
    return rows


def reread_rows(logprobs: Any, shift: int, top_n: int) -> list[Row] | None:
    """A reread's rows, each token's logprob after the tokens before it (None where the engine
    gives none: the first token, or, at shift 1, a token outside the previous row's top list);
    its top list is the distribution it was drawn from. Only shifts 0 and 1 are known.

    At shift 1 (llama-cpp-python) a row is left out (no value, no list) when its list cannot be
    trusted: the engine keys it by token text, so two tokens of one text (two ``' '``) keep the
    lower value under that text, and the previous token's own entry overwrites one of the
    ``top_n``; either leaves fewer than ``top_n`` entries."""
    columns = _columns(logprobs)
    if columns is None:
        return None
    tokens, values, tops = columns
    rows = []
    for i, token in enumerate(tokens):
        if shift == 0:
            value, top = values[i], _top(tops[i])
        elif i == 0 or token == tokens[i - 1]:
            value, top = None, []  # nothing before it, or its value overwritten (below)
        else:
            # The previous row's list predicts this token, but llama-cpp-python also writes the
            # previous token's own (misread) value into it: that entry is not part of it.
            top = [pair for pair in _top(tops[i - 1]) if pair[0] != tokens[i - 1]]
            value = dict((pair[0], pair[1]) for pair in top).get(token)
            if len(top) < top_n:
                value, top = None, []
        ok = isinstance(value, int | float)
        rows.append({"token": token, "logprob": float(value) if ok else None, "top": top})
    return rows


def after(rows: Sequence[Row], chars: int) -> list[Row] | None:
    """The rows that follow the first ``chars`` characters of the reread text (the prompt), by
    the tokens' own text; None when no token boundary falls there (the text was tokenized
    across the prompt's end)."""
    seen = 0
    for i, row in enumerate(rows):
        if seen == chars:
            return list(rows[i:])
        seen += len(row["token"])
        if seen > chars:
            return None
    return [] if seen == chars else None


# The most rows a special prefix may take before the prompt's text: a BOS is one, a chat-less
# prefix a few; further in, the prompt's text is not where the answer's start is found.
MAX_PREFIX_ROWS = 8


def prefix_rows(rows: Sequence[Row], prompt: str) -> int | None:
    """How many rows come before the prompt's text: 0 where the echo starts with it, 1 after a
    BOS the tokenizer prepended; None when it starts at no row boundary among the first
    ``MAX_PREFIX_ROWS`` rows (the rows do not spell the prompt sent: the suite cannot place the
    answer)."""
    text, seen = text_of(rows), 0
    for i, row in enumerate(rows[: MAX_PREFIX_ROWS + 1]):
        if text.startswith(prompt, seen):
            return i
        seen += len(row["token"])
    return 0 if not prompt else None


def answer_rows(rows: Sequence[Row], prompt: str) -> tuple[int | None, list[Row] | None]:
    """A reread's rows after its prompt: the rows of a special prefix before the prompt's text
    (None: the prompt's text is not found, nothing returned), and the rows after the prompt's
    last character (None: no token boundary falls there, ``after``)."""
    skip = prefix_rows(rows, prompt)
    if skip is None:
        return None, None
    return skip, after(rows[skip:], len(prompt))


def aligned(decoded: Sequence[Row], reread: Sequence[Row]) -> list[tuple[Row, Row]]:
    """Pairs of a decode row and the reread row for the same token at the same text offset
    (both measured from the answer's start); a token the reread split or merged pairs with
    nothing."""
    starts: dict[tuple[int, str], Row] = {}
    offset = 0
    for row in reread:
        starts[(offset, row["token"])] = row
        offset += len(row["token"])
    pairs, offset = [], 0
    for row in decoded:
        other = starts.get((offset, row["token"]))
        if other is not None:
            pairs.append((row, other))
        offset += len(row["token"])
    return pairs


def text_of(rows: Sequence[Row]) -> str:
    return "".join(row["token"] for row in rows)
