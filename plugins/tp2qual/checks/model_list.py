"""Gate 02's decisions, each a pure function of what the gate recorded.

The gate and ``verify`` call the same functions: on the ``/v1/models`` exchanges as
``model_list.jsonl`` holds them (status and body), and on the engine's identity as
``identity/engine.json`` holds it, with the served name, the bound and the stated version the
run recorded at its start. A body that is not the list it should be is the candidate's
failure, quoting the body, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tp2qual.checks.verdict import NotJudged, Verdict

LISTING, CONTEXT = "models", "models-context"  # the exchanges' tags in model_list.jsonl


def _quoted(body: Any, limit: int = 300) -> str:
    text = body if isinstance(body, str) else json.dumps(body, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "…"


def cards(exchange: Mapping[str, Any]) -> list[Any] | str:
    """The model cards of a 200 ``/v1/models`` answer, or why there are none."""
    status, body = exchange.get("status"), exchange.get("response")
    if status != 200:
        return f"/v1/models answered HTTP {status}: {_quoted(body)}"
    data = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(data, list):
        return f"/v1/models answered 200 without a model list ('data'): {_quoted(body)}"
    return data


def judge_listing(exchange: Mapping[str, Any], served_name: str) -> Verdict:
    """``/v1/models`` lists exactly the served name: no alias, no path, nothing else."""
    found = cards(exchange)
    if isinstance(found, str):
        return Verdict.failed(found)
    ids = [card.get("id") if isinstance(card, Mapping) else card for card in found]
    if ids != [served_name]:
        return Verdict.failed(f"/v1/models lists {ids}; expected exactly [{served_name!r}]")
    return Verdict.passed(ids=ids)


def judge_context(
    exchange: Mapping[str, Any], max_model_len: int, engine: str
) -> Verdict | NotJudged:
    """Where the engine reports a context length (vLLM's, SGLang's ``max_model_len``), it is
    the candidate's bound; an engine that reports none is not judged."""
    found = cards(exchange)
    if isinstance(found, str):
        return Verdict.failed(found)
    card = found[0] if found and isinstance(found[0], Mapping) else None
    if card is None:
        body = _quoted(exchange.get("response"))
        return Verdict.failed(f"/v1/models lists no model card: {body}")
    if "max_model_len" not in card:
        return NotJudged(f"{engine} does not report max_model_len in /v1/models")
    if card["max_model_len"] != max_model_len:
        return Verdict.failed(
            f"engine serves max_model_len={card['max_model_len']}, candidate bounds it at "
            f"{max_model_len}"
        )
    return Verdict.passed(max_model_len=card["max_model_len"])


def same_version(reported: str | None, stated: str) -> bool:
    """The version the candidate states, in PEP 440's words: the same public version (release,
    pre-, post- and dev-release), whatever local label a builder appends after ``+``. NVIDIA's
    NGC vLLM images report one (``vLLM Version 0.11.1+9114fd76`` in nvcr.io/nvidia/vllm:25.12-py3,
    vllm-project/vllm #31424): the same release, built by NVIDIA. A ``.post1`` or ``.dev5`` is
    another version. A stated label is compared as well: who states one means that build."""
    if reported is None:
        return False
    if "+" in stated:
        return reported == stated
    return reported.partition("+")[0] == stated  # PEP 440: the local label follows the "+"


def judge_version(engine: Mapping[str, Any], stated: str | None) -> Verdict | NotJudged:
    """The engine says what it is (``identity/engine.json``: vLLM ``/version``, SGLang
    ``/server_info``, llama.cpp the installed package or the image label), and it is the
    version the candidate states (``same_version``); a candidate that states none is not
    judged."""
    if not stated:
        return NotJudged("the candidate states no engine.version")
    reported = engine.get("version")
    if not same_version(reported, stated):
        error = engine.get("version_error")
        return Verdict.failed(
            f"engine reports version {reported!r}"
            f"{' (' + str(error) + ')' if error else ''}; the candidate states {stated!r}"
        )
    return Verdict.passed(version=stated, reported=reported)
