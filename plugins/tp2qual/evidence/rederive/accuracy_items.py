"""Gate 07's accuracy lines judged again from their raw replies: each item's ``correct``
re-scored from the reply the engine gave (``item:<id>`` in ``agreement.jsonl``) against the
shipped item's answer, and the early stop recomputed from the re-scored items by the gate's own
rule (``checks.accuracy.settled``). A ``correct`` the gate wrote and the reply does not bear
out is a mismatch that names the item; so is a stop where the rule says none, or none where it
says stop; and so is an item or a stop in a transcript that says none was asked
(``accuracy_not_asked``: the gate asks either none or from the first).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from tp2qual.checks.accuracy import score, settled
from tp2qual.checks.agreement import ACCURACY, NOT_ASKED, REFERENCE_ACCURACY, STOPPED
from tp2qual.evidence.rederive.common import Rederived, finish_of, message_of
from tp2qual.evidence.reference import PROMPT_SET

TRANSCRIPT, EXCHANGES = "agreement_transcript.jsonl", "agreement.jsonl"
ITEMS = PROMPT_SET.with_name("arithmetic_items.json")  # the shipped items the gate asks


@cache
def shipped() -> tuple[str, dict[str, int]]:
    """The shipped items' sha256 and each item's answer."""
    data = ITEMS.read_bytes()
    return hashlib.sha256(data).hexdigest(), {
        item["id"]: item["answer"] for item in json.loads(data)["items"]
    }


def rescore(
    body: Sequence[Mapping[str, Any]], exchanges: Mapping[str, Mapping[str, Any]], out: Rederived
) -> list[dict[str, Any]]:
    """``body`` with each accuracy line's reply, finish and ``correct`` taken from its raw
    exchange (mismatches said in ``out``, naming the item)."""
    digest, answers = shipped()
    lines = []
    for line in body:
        if line.get("kind") != ACCURACY:
            lines.append(dict(line))
            continue
        item = str(line.get("id"))
        where = f"{TRANSCRIPT} item:{item}"
        exchange = exchanges.get(f"item:{item}")
        if exchange is None or not isinstance(exchange.get("response"), Mapping):
            out.compare(EXCHANGES, where, {"exchange": "recorded"}, exchange="missing")
            lines.append(dict(line))
            continue
        # The shipped answer where the line names the shipped bytes; another set's answer
        # cannot be checked here and is taken as written.
        answer = answers.get(item) if line.get("items_sha256") == digest else line.get("answer")
        text, finish = message_of(exchange).get("content"), finish_of(exchange)
        correct = None if finish == "length" or answer is None else score(text, int(answer))
        fields = {"text": text, "finish_reason": finish, "answer": answer, "correct": correct}
        out.compare(EXCHANGES, where, {k: line.get(k) for k in fields}, **fields)
        lines.append({**line, **fields})
    return lines


def expected_stop(
    lines: Sequence[Mapping[str, Any]], planned: int, alpha: float
) -> dict[str, Any] | None:
    """Where the gate's loop (ask, unless ``settled`` says the outcome is certain) stops over
    these re-scored items against the reference's, and why; None when it asks on."""
    own = [line for line in lines if line.get("kind") == ACCURACY]
    # Stopped before its first item (too few planned to ever see a drop), the serve wrote no
    # item to stamp the set: the reference's, whose lines are the only ones it stops against.
    ref = [line for line in lines if line.get("kind") == REFERENCE_ACCURACY]
    digest = (own or ref or [{}])[0].get("items_sha256")
    theirs = {
        str(r.get("id")): r.get("correct")
        for r in lines
        if r.get("kind") == REFERENCE_ACCURACY and r.get("items_sha256") == digest
    }
    if not theirs:
        return None
    so_far: dict[str, bool | None] = {}
    for n in range(min(len(own) + 1, planned)):
        if why := settled(so_far, theirs, planned - n, alpha):
            return {"after": n, "why": why}
        if n < len(own):
            so_far[str(own[n].get("id"))] = own[n].get("correct")
    return None


def check_stop(
    lines: Sequence[Mapping[str, Any]], settings: Mapping[str, Any], out: Rederived
) -> None:
    """The recorded stop (or its absence) against the one recomputed from the lines."""
    recorded = next((r for r in lines if r.get("kind") == STOPPED), None)
    want = expected_stop(lines, int(settings["accuracy_items"]), float(settings["accuracy_alpha"]))
    asked = sum(r.get("kind") == ACCURACY for r in lines)
    where = f"{TRANSCRIPT} accuracy_stopped"
    if want is None:
        if recorded is not None:  # stopped where the rule asks on
            out.compare(TRANSCRIPT, where, dict(recorded), after=None)
        return
    if recorded is None:
        if asked > want["after"]:  # asked past the point where the rule stops
            out.compare(TRANSCRIPT, where, {"after": None}, **want)
        return  # fewer asked and no stop: the gate was cut short, not stopped by the rule
    out.compare(TRANSCRIPT, where, dict(recorded), **want)


def check_not_asked(
    lines: Sequence[Mapping[str, Any]], exchanges: Mapping[str, Any], out: Rederived
) -> None:
    """A transcript that says no item was asked holds no item and no stop, and no item's
    exchange (``item:<id>``) is among its raw exchanges either."""
    if not any(line.get("kind") == NOT_ASKED for line in lines):
        return
    where = f"{TRANSCRIPT} {NOT_ASKED}"
    asked = [str(r.get("id", r.get("kind"))) for r in lines if r.get("kind") in (ACCURACY, STOPPED)]
    if asked:
        out.compare(TRANSCRIPT, where, {"lines asked": asked}, **{"lines asked": []})
    sent = [tag for tag in exchanges if tag.startswith("item:")]
    if sent:
        out.compare(EXCHANGES, where, {"items exchanged": sent}, **{"items exchanged": []})
