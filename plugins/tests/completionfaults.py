"""Faults of a broken decode path on OpenAI legacy completions (``POST /v1/completions``), for
``faultproxy.py``: pure functions, the request and the answer's parsed body in, a new body out.

Each fault keeps the answer self-consistent where it changes tokens: ``text`` is the tokens
joined and ``text_offset`` counts on from the engine's first offset, token by token. A reread
(``echo: true``: the engine's prefill) is never touched: the faults model a decode path that
broke while prefill stayed honest. Answers without ``logprobs`` are left as they are.

    second_choice       at answer positions 16, 23, 30, ... the chosen token becomes that row's
                        second-highest top_logprobs entry, with that entry's logprob; the row is
                        left as it was (a greedy serve that takes its own second choice)
    late_drift          the same positions and tokens, but the row says the new token was top-1:
                        its two best entries swap logprobs, token_logprobs = the old top-1's
    early_eos           an answer of >= 4 tokens cut to its first half, finish_reason "stop"
    logprob_drift       from position 8 on, every token logprob and top logprob lower by 1.0
    long_context_drift  late_drift, only on a prompt longer than ``long_chars`` characters
"""

from __future__ import annotations

import copy
from itertools import accumulate
from typing import Any

SECOND_FROM, SECOND_EVERY = 16, 7
DRIFT_FROM, DRIFT = 8, 1.0
LONG_CHARS = 4000
EARLY_EOS_MIN_TOKENS = 4
COMPLETION_FAULTS = (
    "second_choice",
    "late_drift",
    "early_eos",
    "logprob_drift",
    "long_context_drift",
)

Logprobs = dict[str, Any]


def is_reread(request: dict[str, Any]) -> bool:
    """A prefill reread: the request echoes its prompt back."""
    return request.get("echo") is True


def prompt_chars(request: dict[str, Any]) -> int:
    """The prompt's length in characters (a list of prompts: all of them)."""
    prompt = request.get("prompt") or ""
    if isinstance(prompt, str):
        return len(prompt)
    return sum(len(p) for p in prompt if isinstance(p, str))


def fault_positions(n_tokens: int) -> range:
    """The answer positions second_choice and late_drift change: 16, 23, 30, ..."""
    return range(SECOND_FROM, n_tokens, SECOND_EVERY)


def completion_fault(
    fault: str, request: dict[str, Any], data: dict[str, Any], long_chars: int = LONG_CHARS
) -> dict[str, Any]:
    """The answer ``data`` to ``request`` as the fault's serve would give it: a new dict, or
    ``data`` itself where the fault spares it (a reread; a prompt within ``long_chars``)."""
    if fault not in COMPLETION_FAULTS or is_reread(request):
        return data
    if fault == "long_context_drift":
        if prompt_chars(request) <= long_chars:
            return data
        fault = "late_drift"
    out = copy.deepcopy(data)
    for choice in out.get("choices") or []:
        logprobs = choice.get("logprobs")
        if not logprobs or not logprobs.get("tokens"):
            continue
        if fault == "logprob_drift":
            choice["logprobs"] = drifted(logprobs)
        elif fault == "early_eos":
            cut_choice(choice, out)
        else:
            choice["logprobs"] = second_choices(logprobs, swap=fault == "late_drift")
            rebuild_text(choice)
    return out


def ranked(row: dict[str, float]) -> list[tuple[str, float]]:
    """A top_logprobs row, best first (ties in the row's own order)."""
    return sorted(row.items(), key=lambda item: -item[1])


def second_choices(logprobs: Logprobs, *, swap: bool) -> Logprobs:
    """The chosen token at each fault position replaced by its row's second-highest entry;
    ``swap``: the row's two best entries also swap logprobs, so the new token reads as top-1.
    A row of fewer than 2 entries is left alone."""
    out = copy.deepcopy(logprobs)
    tokens, chosen, rows = out["tokens"], out["token_logprobs"], out["top_logprobs"]
    for i in fault_positions(len(tokens)):
        row = rows[i] if i < len(rows) else None
        if not row or len(row) < 2:
            continue
        (first, best), (second, runner_up) = ranked(row)[:2]
        tokens[i] = second
        if swap:
            row[first], row[second] = runner_up, best
        chosen[i] = best if swap else runner_up
    return out


def drifted(logprobs: Logprobs) -> Logprobs:
    """Every token logprob and top logprob from position DRIFT_FROM on lower by DRIFT."""
    out = copy.deepcopy(logprobs)
    chosen, rows = out["token_logprobs"], out.get("top_logprobs") or []
    for i in range(DRIFT_FROM, len(chosen)):
        if chosen[i] is not None:
            chosen[i] -= DRIFT
    for row in rows[DRIFT_FROM:]:
        for token in row or {}:
            row[token] -= DRIFT
    return out


def cut_choice(choice: dict[str, Any], data: dict[str, Any]) -> None:
    """An answer of >= EARLY_EOS_MIN_TOKENS tokens cut to its first half, as if the model had
    stopped there (finish_reason "stop", usage counting the tokens kept)."""
    logprobs = choice["logprobs"]
    n = len(logprobs["tokens"])
    if n < EARLY_EOS_MIN_TOKENS:
        return
    keep = max(1, n // 2)
    for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        if isinstance(logprobs.get(key), list):
            logprobs[key] = logprobs[key][:keep]
    choice["finish_reason"] = "stop"
    rebuild_text(choice)
    usage = data.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        usage["completion_tokens"] -= n - keep
        if isinstance(usage.get("total_tokens"), int):
            usage["total_tokens"] -= n - keep


def rebuild_text(choice: dict[str, Any]) -> None:
    """``text`` and ``text_offset`` from the choice's tokens (the first offset kept)."""
    logprobs = choice["logprobs"]
    tokens = logprobs["tokens"]
    offsets = logprobs.get("text_offset") or [0]
    choice["text"] = "".join(tokens)
    lengths = (len(t) for t in tokens[:-1])
    logprobs["text_offset"] = list(accumulate(lengths, initial=offsets[0])) if tokens else []
