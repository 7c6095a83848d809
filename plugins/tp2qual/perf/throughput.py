"""The throughput gate's measuring step, reusable: one streamed request in, one sample out.

Gate 08 and ``benchmarks/peer_compare.py`` both call ``measure`` so the benchmark checks the very
code the gate runs: ``Api.stream_chat`` (send, timestamp each chunk, record), the output-token
count (``sampling.output_tokens``: ``usage`` when the stream carries it, else the server's own
tokenizer on the streamed text, else one per content chunk) and ``sampling.sample`` (the
TTFT/TPOT/ITL definitions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tp2qual.candidate import Candidate
from tp2qual.gates import chat_body
from tp2qual.perf.sampling import judge_ending, output_tokens, sample, usage_tokens
from tp2qual.prompts import filler
from tp2qual.serving.server import Api, Stream

TOKENIZE_TIMEOUT_S = 30.0


@dataclass
class Measured:
    stream: Stream
    figures: dict[str, Any]


def request_body(candidate: Candidate, settings: dict[str, Any], n: int) -> dict[str, Any]:
    """The gate's request ``n``: every prompt starts with different text, so no prefix cache
    turns TTFT into a cache hit. ``settings["min_tokens"]`` (optional) fixes the output length
    on engines that honour it (vLLM, SGLang, llama-cpp-python)."""
    sentences = max(1, settings["prompt_words"] // 20)
    prompt = filler(sentences, start=1 + 1000 * n) + " Now write a long story about the harbour."
    fixed = {"min_tokens": settings["min_tokens"]} if settings.get("min_tokens") else {}
    return chat_body(
        candidate,
        prompt,
        max_tokens=settings["max_tokens"],
        stream_options={"include_usage": True},
        **fixed,
    )


def count_tokens(api: Api, served_name: str, stream: Stream) -> tuple[int, str]:
    """Output tokens of one stream and how they were counted (``sampling.output_tokens``)."""
    usage, tokenized = stream.usage(), None
    if usage_tokens(usage) is None:
        # llama-cpp-python ignores stream_options.include_usage: ask its own tokenizer.
        counted = api.request(
            "tokenize",
            "POST",
            "/extras/tokenize",
            {"model": served_name, "input": stream.text()},
            timeout=TOKENIZE_TIMEOUT_S,
        )
        tokenized = (counted.status, counted.body)
    return output_tokens(usage, tokenized, stream.chunks)


def measure(
    api: Api,
    tag: str,
    body: dict[str, Any],
    served_name: str,
    allowed: Sequence[str] | None = None,
) -> Measured:
    """Stream one request and derive its sample; a non-200 answer, or one ended outside the
    ``allowed`` finish reasons (``sampling.judge_ending``), yields ``ok: False``."""
    stream = api.stream_chat(tag, body)
    if stream.status != 200:
        return Measured(stream, {"ok": False, "reason": f"HTTP {stream.status}"})
    tokens, method = count_tokens(api, served_name, stream)
    figures = sample(stream.chunks, stream.times, tokens, method)
    return Measured(stream, judge_ending(figures, stream.chunks, allowed))
