"""The capacity protocol's requests: prompts sized by the engine's own token count, then one
streamed request at a time (``Api.stream_chat`` timestamps each chunk and the stream's end).

The prompt is sized as gate 06 sizes its needle (``prompts.calibrate``): ``usage.prompt_tokens``
of two short prompts gives a line, a probe at the wanted size corrects it at that size (filler
tokenizes a little differently at 30K than at 2K), and every request's own usage is recorded, so
a miss shows, never hides. Each request's filler starts at another number: no request is a
prefix-cache hit of another.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tp2qual.candidate import Candidate
from tp2qual.gates import chat_body
from tp2qual.perf.protocol import request_figures
from tp2qual.prompts import Calibration, calibrate, filler
from tp2qual.serving.server import Api

QUESTION = " Summarize the harbour log above in a few sentences."
_SMALL, _LARGE = 4, 16  # calibration sizes in filler sentences (16: ~550 tokens, in any window)
# Request n's filler is numbered from _BASE + _SPREAD * (n + 1), the calibration's (n = -1) from
# _BASE: every number has the same 8 digits, so each prompt tokenizes as the calibration did.
_BASE, _SPREAD = 10_000_000, 100_000


def prompt(sentences: int, n: int) -> str:
    """Request ``n``'s prompt: ``sentences`` of filler numbered from its own start."""
    return filler(sentences, start=_BASE + _SPREAD * (n + 1)) + QUESTION


def body(candidate: Candidate, profile: Mapping[str, Any], text: str) -> dict[str, Any]:
    return chat_body(
        candidate,
        text,
        max_tokens=profile["max_tokens"],
        stream_options={"include_usage": True},
    )


def _prompt_tokens(api: Api, candidate: Candidate, sentences: int, tag: str) -> int:
    reply = api.chat(tag, chat_body(candidate, prompt(sentences, -1), max_tokens=1))
    assert reply.status == 200, f"calibration {tag}: HTTP {reply.status}: {reply.body}"
    return int(reply.usage("prompt_tokens"))


def sentences_for(api: Api, candidate: Candidate, wanted: int) -> tuple[int, Calibration]:
    """The filler sentences that give ``wanted`` prompt tokens by the engine's own count."""
    small = (_SMALL, _prompt_tokens(api, candidate, _SMALL, f"calibrate-{_SMALL}"))
    large = (_LARGE, _prompt_tokens(api, candidate, _LARGE, f"calibrate-{_LARGE}"))
    first = calibrate(small, large)
    guess = first.sentences_for(wanted)
    probe = (guess, _prompt_tokens(api, candidate, guess, f"calibrate-{guess}"))
    line = calibrate(large, probe) if probe[0] != large[0] else first
    return line.sentences_for(wanted), line


def run_request(
    api: Api, candidate: Candidate, profile: Mapping[str, Any], sentences: int, n: int
) -> dict[str, Any]:
    """Request ``n`` streamed and timed: its figures (``protocol.request_figures``)."""
    stream = api.stream_chat(
        f"protocol#{n}",
        body(candidate, profile, prompt(sentences, n)),
        prompt_tokens=profile["prompt_tokens"],
    )
    if stream.status != 200:
        return {"ok": False, "reason": f"HTTP {stream.status}: {stream.error_body}"}
    return request_figures(stream.chunks, stream.times, stream.e2e_s)
