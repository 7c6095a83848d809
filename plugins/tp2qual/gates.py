"""What a gate module builds its requests with: one chat body, sampling stated, never inherited.

Engines differ in what they apply when a request is silent: llama-cpp-python's server adds
``repeat_penalty = 1.1`` to every request, vLLM applies the model's ``generation_config.json``
(which may set top_k, top_p or a repetition penalty), SGLang does the same. A gate that relies on
a default nobody wrote down qualifies the default, not the serve. So every body states neutral
sampling in the engine's own field names, then the candidate's ``[gates.request]`` on top (its
``sampling`` and its ``extra`` fields such as thinking controls, each with a written ``why``).
The request body lands in the gate's JSONL artifact, so the evidence shows what was asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tp2qual.artifacts.finding import CandidateRecord, Finding, read_finding
from tp2qual.candidate import Candidate
from tp2qual.candidate_file import deep_merge
from tp2qual.engines import engine_for
from tp2qual.serving.server import Api, Exchange, Server, Stream

__all__ = [
    "DEFAULT_SEED",
    "Api",
    "Candidate",
    "CandidateRecord",
    "Claimer",
    "Exchange",
    "Finding",
    "Server",
    "Stream",
    "chat_body",
    "completion_body",
    "messages",
    "read_finding",
    "sampling_for",
]

# The ``claim`` fixture: claim(name, artifact, op=..., field=... | path=...) -> derived value.
Claimer = Callable[..., Any]

DEFAULT_SEED = 1234

_COMMON = {"temperature": 0.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


def sampling_for(candidate: Candidate) -> dict[str, Any]:
    """The sampling fields every gate request of this candidate carries: neutral ones in the
    engine's own names (``tp2qual.engines``), then the candidate's stated ``sampling``."""
    engine = engine_for(candidate.engine)
    names = engine.sampling_names
    stated = {names.get(k, k): v for k, v in candidate.request_settings.get("sampling", {}).items()}
    return {**_COMMON, **engine.neutral_sampling, **stated}


def messages(prompt: str, system: str | None = None) -> list[dict[str, Any]]:
    head = [{"role": "system", "content": system}] if system else []
    return [*head, {"role": "user", "content": prompt}]


def chat_body(
    candidate: Candidate,
    chat: str | list[dict[str, Any]],
    *,
    max_tokens: int,
    seed: int = DEFAULT_SEED,
    **fields: Any,
) -> dict[str, Any]:
    """A chat completion request for ``candidate``: the prompt (or message list), the reply
    budget, a seed, stated sampling, the candidate's extra fields, then the gate's own fields
    (tools, tool_choice, stream_options, …), which win."""
    body: dict[str, Any] = {
        "model": candidate.served_name,
        "messages": messages(chat) if isinstance(chat, str) else chat,
        "max_tokens": max_tokens,
        "seed": seed,
        **sampling_for(candidate),
    }
    body = deep_merge(body, candidate.request_settings.get("extra", {}))
    return deep_merge(body, fields)


def completion_body(
    candidate: Candidate, prompt: str, *, max_tokens: int, seed: int = DEFAULT_SEED, **fields: Any
) -> dict[str, Any]:
    """A greedy text completion request (``/v1/completions``): the plain prompt, no chat
    template, and neutral sampling only. Gate 07 judges the model's own distribution: a stated
    penalty changes the choice but not the logprobs the engine reports (llama-cpp-python reports
    the raw scores), so greedy would no longer be the argmax of what is compared. The
    candidate's ``extra`` fields are chat controls (thinking switches) and are not sent."""
    body: dict[str, Any] = {
        "model": candidate.served_name,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "seed": seed,
        **_COMMON,
        **engine_for(candidate.engine).neutral_sampling,
    }
    return deep_merge(body, fields)
