#!/usr/bin/env python3
"""Record SGLang 0.5.23's raw answers from a running CPU serve into
plugins/tests/data/sglang-0.5.23/ (the exchanges the self-tests replay; the README there gives
the serve's command). Stdlib only, loopback only:

    python scripts/record-sglang-answers.py http://127.0.0.1:PORT [--prefix strict-off-]

Each file holds the request, the HTTP status and the body (non-streamed: ``response``; streamed:
``chunks``, every ``data:`` line parsed, ``[DONE]`` kept as the string).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "plugins" / "tests" / "data" / "sglang-0.5.23"
SAMPLING = {"temperature": 0, "seed": 1234, "top_p": 1, "top_k": -1, "repetition_penalty": 1.1,
            "presence_penalty": 0, "frequency_penalty": 0}  # fmt: skip
CITY = {"type": "string", "description": "City name"}
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": CITY}, "required": ["city"]},
}}  # fmt: skip
TOOL_PROMPT = "What is the weather in Paris right now? Use the get_weather tool."
OVER = " ".join(f"Sentence number {i} is about the harbour and its boats." for i in range(400))
OVER_NOTE = (
    "content = 'Sentence number {i} is about the harbour and its boats.' for i in 0..399 joined "
    "by spaces"
)
TOOL_CHOICES: dict[str, Any] = {
    "named": {"type": "function", "function": {"name": "get_weather"}},
    "required": "required",
    "auto": "auto",
}


def exchange(base: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        base + path, data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=600) as answer:
            status, raw = answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read().decode()
    record: dict[str, Any] = (
        {"request": body, "status": status} if body is not None else {"status": status}
    )
    if body is not None and body.get("stream") and status == 200:
        lines = [line[len("data: ") :] for line in raw.splitlines() if line.startswith("data: ")]
        record["chunks"] = [line if line == "[DONE]" else json.loads(line) for line in lines]
    else:
        try:
            record["response"] = json.loads(raw)
        except json.JSONDecodeError:
            record["response_text"] = raw
    return record


def chat(
    messages: list[dict[str, Any]], max_tokens: int, stream: bool, **extra: Any
) -> dict[str, Any]:
    body = {
        "model": "smollm2-135m",
        "messages": messages,
        "max_tokens": max_tokens,
        **SAMPLING,
        **extra,
    }
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


def write(name: str, record: dict[str, Any]) -> None:
    (OUT / name).write_text(
        json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(name, record["status"])


def admission(base: str) -> int:
    """The scheduler's admission check: 120 of the over-bound sentences (1,601 tokens) fit the
    2048 context but not a 1,024-token pool; streamed, the refusal comes inside an HTTP 200."""
    content = " ".join(
        f"Sentence number {i} is about the harbour and its boats." for i in range(120)
    )
    for stream in (False, True):
        record = exchange(
            base, "/v1/chat/completions", chat([{"role": "user", "content": content}], 16, stream)
        )
        record["request"] = None
        record["request_note"] = OVER_NOTE.replace("0..399", "0..119") + (
            ", streamed" if stream else ""
        )
        write(f"over-pool{'-stream' if stream else ''}.json", record)
    return 0


def main() -> int:
    ask = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ask.add_argument("base")
    ask.add_argument("--prefix", default="", help="file name prefix (e.g. strict-off-)")
    ask.add_argument("--only-tools", action="store_true", help="record the tool calls only")
    ask.add_argument("--admission", action="store_true",
                     help="record only a prompt under the context length but over the KV pool "
                          "(a serve started with --max-total-tokens 1024)")  # fmt: skip
    args = ask.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.admission:
        return admission(args.base)
    for mode, choice in TOOL_CHOICES.items():
        for stream in (False, True):
            body = chat(
                [{"role": "user", "content": TOOL_PROMPT}],
                96,
                stream,
                tools=[TOOL],
                tool_choice=choice,
            )
            write(
                f"{args.prefix}tool-{mode}{'-stream' if stream else ''}.json",
                exchange(args.base, "/v1/chat/completions", body),
            )
    if args.only_tools:
        return 0
    question = [
        {
            "role": "user",
            "content": "What is the capital of France? Answer with the city name only.",
        }
    ]
    write("chat.json", exchange(args.base, "/v1/chat/completions", chat(question, 32, False)))
    write("chat-stream.json", exchange(args.base, "/v1/chat/completions", chat(question, 32, True)))
    for stream in (False, True):
        record = exchange(
            args.base, "/v1/chat/completions", chat([{"role": "user", "content": OVER}], 16, stream)
        )
        record["request"] = None
        record["request_note"] = OVER_NOTE + (", streamed" if stream else "")
        write(f"over-bound{'-stream' if stream else ''}.json", record)
    echo = {"model": "smollm2-135m", "prompt": "The capital of France is", "max_tokens": 4,
            "echo": True, "logprobs": 2, **SAMPLING}  # fmt: skip
    write("echo-logprobs.json", exchange(args.base, "/v1/completions", echo))
    for path, name in (("/server_info", "server-info.json"), ("/v1/models", "v1-models.json")):
        write(name, exchange(args.base, path))
    with urllib.request.urlopen(args.base + "/metrics", timeout=60) as answer:
        text = answer.read().decode()
    keep = [line for line in text.splitlines() if line.startswith("sglang:") and "seconds" in line
            and ("_count" in line or "_sum" in line)]  # fmt: skip
    (OUT / "metrics-histograms.txt").write_text("\n".join(keep) + "\n", encoding="utf-8")
    print("metrics-histograms.txt", len(keep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
