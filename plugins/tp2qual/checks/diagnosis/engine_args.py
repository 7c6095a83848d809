"""The engine's own settings as the candidate set them, so a remedy never asks for one that is
already set: the candidate's command line (passed in), completed by what the engine's log states
(vLLM's ``non-default args: {…}``, SGLang's ``server_args=ServerArgs(…)``, a launch command line
printed in the log), and the engine version its banner printed."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import Any

# Names differ per engine for the same setting; one spelling each, so a rule asks once.
_ALIASES = {
    "tp": "tensor_parallel_size",
    "tp_size": "tensor_parallel_size",
    "context_length": "max_model_len",
    "max_running_requests": "max_num_seqs",
}
_NON_DEFAULT = re.compile(r"non-default args: (?P<d>\{.*\})\s*$")
_SERVER_ARGS = re.compile(r"server_args=ServerArgs\((?P<a>.*)\)")
_SERVER_ARG = re.compile(r"(?P<k>\w+)=(?P<v>'[^']*'|\"[^\"]*\"|[^,()\s]+)")
_LAUNCH = re.compile(r"vllm serve\b|sglang\.launch_server|entrypoints\.openai\.api_server")
_VERSIONS = (
    re.compile(r"█\s+version (?P<v>\S+)"),
    re.compile(r"vLLM API server version (?P<v>\S+)"),
    re.compile(r"Initializing an? (?:V1 )?LLM engine \(v(?P<v>[^)\s]+)\)"),
    re.compile(r"\bvllm[ =]=?(?P<v>\d+\.\d+\.\d+\S*)"),
    re.compile(r"\bsglang[ =]=?(?P<v>\d+\.\d+\.\d+\S*)"),
)


def _key(name: str) -> str:
    key = name.strip().lstrip("-").replace("-", "_").lower()
    return _ALIASES.get(key, key)


def _from_command(tokens: Sequence[str]) -> dict[str, str]:
    """``--flag value`` / ``--flag=value`` / a bare ``--flag`` (true)."""
    out: dict[str, str] = {}
    for i, token in enumerate(tokens):
        if not token.startswith("--"):
            continue
        name, sep, value = token.partition("=")
        if not sep:
            nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
            value = nxt if nxt and not nxt.startswith("--") else "true"
        out.setdefault(_key(name), value)
    return out


def _from_line(text: str) -> dict[str, str]:
    m = _NON_DEFAULT.search(text)
    if m:
        try:
            parsed: Any = ast.literal_eval(m["d"])
        except (ValueError, SyntaxError):
            parsed = {}
        if isinstance(parsed, dict):
            return {_key(str(k)): str(v) for k, v in parsed.items()}
    m = _SERVER_ARGS.search(text)
    if m:
        return {_key(a["k"]): a["v"].strip("'\"") for a in _SERVER_ARG.finditer(m["a"])}
    if _LAUNCH.search(text):
        return _from_command(text.split())
    return {}


def args_of(
    texts: Sequence[tuple[int, str]], command: Sequence[str] | None
) -> tuple[dict[str, str], dict[str, str]]:
    """The candidate's command wins; the log fills in what it states. Values and where each
    came from (``"command line"`` / ``"log line N"``)."""
    args = _from_command(list(command or []))
    sources = dict.fromkeys(args, "command line")
    for no, text in texts:
        for key, value in _from_line(text).items():
            if key not in args:
                args[key], sources[key] = value, f"log line {no}"
    return args, sources


def version_of(texts: Sequence[tuple[int, str]]) -> str | None:
    """The engine version the log printed (its banner, its API-server line), if any."""
    for _, text in texts:
        for pattern in _VERSIONS:
            m = pattern.search(text)
            if m:
                return m["v"].rstrip(".,)")
    return None
