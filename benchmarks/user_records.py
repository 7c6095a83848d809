"""The figures the campaign files take from the user's raw JSON, read again from the JSON.

    python benchmarks/user_records.py DIR [DIR ...]

DIR: a folder of the user's evidence (fakoli/anvil-serving ``docs/findings/*-evidence/``, e.g.
from a clone). Prints, per file:

- a preflight (``observations``): each check's ``usage.completion_tokens`` (one value, or the
  median and range over its requests) — the source of ``[plan] expected_tokens``;
- a capacity row (``metrics``): actual prompt tokens p50, the time to first output (TTFO where
  the file has one, else TTFT) p50, the effective prefill and decode p50 — the source of
  ``[baseline] prefill`` and ``figures``.

Nothing is sent anywhere; files of another shape are skipped.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def completion_tokens(data: dict[str, Any]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for seen in data.get("observations") or []:
        tokens = (seen.get("usage") or {}).get("completion_tokens")
        if isinstance(tokens, int):
            found.setdefault(str(seen.get("test")), []).append(tokens)
    return found


def said(values: list[int]) -> str:
    if len(values) == 1:
        return str(values[0])
    return f"median {statistics.median(values):g} ({min(values)}-{max(values)}, n {len(values)})"


def capacity_row(metrics: dict[str, Any]) -> str:
    first = metrics.get("time_to_first_output_p50_ms") or metrics.get("ttft_p50_ms")
    which = "TTFO" if metrics.get("time_to_first_output_p50_ms") else "TTFT"
    return (
        f"prompt {metrics.get('prompt_tokens_p50'):,.0f} tokens, {which} {first / 1000:.4f} s, "
        f"effective prefill {metrics.get('effective_prefill_tok_s_p50'):,.0f} tok/s, "
        f"decode {metrics.get('decode_tok_s_p50'):.1f} tok/s"
    )


def main(folders: list[str]) -> None:
    for folder in folders:
        for path in sorted(Path(folder).glob("*.json")):
            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                continue
            if tokens := completion_tokens(data):
                thinking = data.get("thinking") or {}
                print(f"{path.name} (reasoning_effort {thinking.get('reasoning_effort')}, "
                      f"chat_template_kwargs {thinking.get('chat_template_kwargs')})")  # fmt: skip
                for check, values in tokens.items():
                    print(f"  {check}: {said(values)} completion tokens")
            metrics = data.get("metrics") or {}
            if metrics.get("prompt_tokens_p50") and metrics.get("decode_tok_s_p50"):
                print(f"{path.name}: {capacity_row(metrics)}")


if __name__ == "__main__":
    main(sys.argv[1:])
