"""Capture this folder's answers from a real vLLM serve whose tokenizer prepends a BOS.

    PYTHONPATH=plugins python plugins/tests/data/vllm-bos/capture.py

Starts ``candidates/smollm2-135m-bos-vllm.toml``'s own command (127.0.0.1, a free port), asks
gate 07's own requests (``gates.completion_body``: greedy, neutral sampling, top 5 logprobs) for
the first shipped agreement prompts: a decode, then its reread (prompt plus answer, ``echo``,
``max_tokens`` 1), writes each exchange next to this script as ``<id>-decode.json`` and
``<id>-reread.json`` (``{"request", "response"}``), and prints the echo's first rows.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from tp2qual.candidate import load_candidate
from tp2qual.gates import completion_body
from tp2qual.redact import Redactor
from tp2qual.serving.launchers.process import ProcessLauncher
from tp2qual.serving.readiness import wait_ready

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
SOURCE = ROOT / "candidates" / "smollm2-135m-bos-vllm.toml"
PROMPTS = ROOT / "plugins" / "tp2qual" / "data" / "agreement_prompts.json"
IDS = ("factual", "code", "multi-turn")
TOP_N = 5


def ask(client: httpx.Client, name: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/completions", json=body, timeout=300)
    response.raise_for_status()
    answer = response.json()
    exchange = {"request": body, "response": answer}
    (HERE / name).write_text(json.dumps(exchange, indent=1, ensure_ascii=False) + "\n")
    return answer


def main() -> None:
    candidate = load_candidate(SOURCE)
    prompts = {p["id"]: p for p in json.loads(PROMPTS.read_text())["prompts"]}
    with tempfile.TemporaryDirectory() as tmp:
        launcher = ProcessLauncher(candidate, Path(tmp) / "server.log", Redactor())
        print("command:", launcher.plan(), file=sys.stderr)
        launcher.start()
        try:
            wait_ready(launcher, served_name=candidate.served_name, timeout_s=420)
            with httpx.Client(base_url=launcher.base_url, trust_env=False) as client:
                for pid in IDS:
                    prompt = prompts[pid]
                    body = completion_body(
                        candidate, prompt["text"], max_tokens=prompt["max_tokens"], logprobs=TOP_N
                    )
                    text = ask(client, f"{pid}-decode.json", body)["choices"][0]["text"]
                    body = completion_body(
                        candidate, prompt["text"] + text, max_tokens=1, logprobs=TOP_N, echo=True
                    )
                    rows = ask(client, f"{pid}-reread.json", body)["choices"][0]["logprobs"]
                    print(
                        pid,
                        json.dumps(rows["tokens"][:4]),
                        rows["token_logprobs"][:2],
                        rows.get("text_offset", [])[:4],
                    )
        finally:
            launcher.stop()


if __name__ == "__main__":
    main()
