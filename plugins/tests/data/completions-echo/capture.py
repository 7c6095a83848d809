"""Capture this folder's answers from the embedded candidate's real llama.cpp server.

    python plugins/tests/data/completions-echo/capture.py

Starts ``candidates/smollm2-135m-local.toml``'s own command (127.0.0.1, a free port), asks the
legacy ``POST /v1/completions`` a decode, its echo reread and the echo-row study (and one chat
answer with logprobs, for the chat fault that shares the proxy's code path), writes the
JSON files next to this script and prints the echo-row table the README quotes.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from tp2qual.candidate import load_candidate
from tp2qual.redact import Redactor
from tp2qual.serving.launchers.process import ProcessLauncher
from tp2qual.serving.readiness import wait_ready

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parents[3] / "candidates" / "smollm2-135m-local.toml"
DECODE_PROMPT = "Write a short paragraph about the history of Paris."
ECHO_PROMPT = "The capital of France is Paris. It is"
# Greedy for real: llama-cpp-python's own default repeat_penalty (1.1) picks a token other than
# the row's argmax now and then (2 of the 5 tokens of this decode prompt's answer).
GREEDY = {"temperature": 0, "repeat_penalty": 1.0}


def ask(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/completions", json=body, timeout=300)
    response.raise_for_status()
    return response.json()


def save(name: str, request: dict[str, Any], response: dict[str, Any]) -> None:
    exchange = {"request": request, "response": response}
    (HERE / name).write_text(json.dumps(exchange, indent=1, ensure_ascii=False) + "\n")


def echo_rows(client: httpx.Client, model: str) -> list[dict[str, Any]]:
    """Per prompt row i >= 1 of an echo: its token_logprobs, the row before's top_logprobs for
    the same token, and what a decode of 1 token after the prefix gives that token."""
    request = {"model": model, "prompt": ECHO_PROMPT, "max_tokens": 1, **GREEDY}
    request |= {"logprobs": 5, "echo": True}
    echoed = ask(client, request)
    save("echo-study.json", request, echoed)
    logprobs = echoed["choices"][0]["logprobs"]
    tokens, offsets = logprobs["tokens"], logprobs["text_offset"]
    rows, decodes = [], []
    n_prompt = sum(1 for o in offsets if o < len(ECHO_PROMPT))
    for i in range(1, n_prompt):
        prefix = ECHO_PROMPT[: offsets[i]]
        body = {"model": model, "prompt": prefix, "max_tokens": 1, **GREEDY}
        body |= {"logprobs": 5, "echo": False}
        decoded = ask(client, body)
        decodes.append({"request": body, "response": decoded})
        top = decoded["choices"][0]["logprobs"]["top_logprobs"][0]
        rows.append(
            {
                "row": i,
                "token": tokens[i],
                "echo_token_logprob": logprobs["token_logprobs"][i],
                "echo_top_row_before": (logprobs["top_logprobs"][i - 1] or {}).get(tokens[i]),
                "echo_top_same_row": (logprobs["top_logprobs"][i] or {}).get(tokens[i]),
                "decode_chosen": decoded["choices"][0]["logprobs"]["tokens"][0],
                "decode_chosen_logprob": decoded["choices"][0]["logprobs"]["token_logprobs"][0],
                "decode_top": top.get(tokens[i]),
            }
        )
    (HERE / "echo-study-decodes.json").write_text(json.dumps(decodes, indent=1) + "\n")
    (HERE / "echo-rows.json").write_text(json.dumps(rows, indent=1) + "\n")
    return rows


def main() -> None:
    candidate = load_candidate(SOURCE)
    model = candidate.spec["model"]["served_name"]
    with tempfile.TemporaryDirectory() as tmp:
        launcher = ProcessLauncher(candidate, Path(tmp) / "server.log", Redactor())
        print("command:", launcher.plan(), file=sys.stderr)
        launcher.start()
        try:
            wait_ready(launcher, served_name=model, timeout_s=180)
            with httpx.Client(base_url=launcher.base_url, trust_env=False) as client:
                decode = {"model": model, "prompt": DECODE_PROMPT, "max_tokens": 64}
                decode |= {**GREEDY, "logprobs": 5, "echo": False, "seed": 1234}
                answer = ask(client, decode)
                save("decode.json", decode, answer)
                text = answer["choices"][0]["text"]
                reread = {"model": model, "prompt": DECODE_PROMPT + text, "max_tokens": 1}
                reread |= {**GREEDY, "logprobs": 5, "echo": True, "seed": 1234}
                save("reread.json", reread, ask(client, reread))
                chat = {"model": model, "messages": [{"role": "user", "content": DECODE_PROMPT}]}
                chat |= {"max_tokens": 16, **GREEDY, "logprobs": True, "top_logprobs": 5}
                save("chat.json", chat, client.post("/v1/chat/completions", json=chat).json())
                version = client.get("/v1/models").json()
                rows = echo_rows(client, model)
        finally:
            launcher.stop()
    print(json.dumps(version))
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
