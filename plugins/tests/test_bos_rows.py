"""Gate 07 on a tokenizer that prepends a BOS, from real vLLM 0.32.0 CPU answers
(plugins/tests/data/vllm-bos/: SmolLM2-135M whose tokenizer adds <|endoftext|>, three shipped
prompts decoded and reread as the gate asks). vLLM echoes the BOS as the reread's first row,
text the prompt sent does not hold: counted as prompt, it moved every answer row by 13
characters, so nothing aligned and self-consistency said "not judged". Found past it, every
answer position aligns; a prompt the rows do not spell is the suite's error, never not judged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tp2qual.candidate import GATE_DEFAULTS
from tp2qual.checks.agreement import OWN, REREAD, WARM
from tp2qual.checks.agreement.evaluate import evaluate
from tp2qual.checks.agreement.rows import (
    MAX_PREFIX_ROWS,
    after,
    aligned,
    answer_rows,
    decode_rows,
    prefix_rows,
    reread_rows,
)
from tp2qual.checks.agreement.scoring import figures, misread, shift_fit
from tp2qual.evidence.rederive.agreement import _reparse
from tp2qual.evidence.rederive.common import Rederived

DATA = Path(__file__).parent / "data" / "vllm-bos"
IDS = ("factual", "code", "multi-turn")
BOS = "<|endoftext|>"
SETTINGS = GATE_DEFAULTS["agreement"]


def _exchange(pid: str, what: str) -> dict[str, Any]:
    return json.loads((DATA / f"{pid}-{what}.json").read_text())


def _captured(pid: str) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """The prompt, its decode's rows, and the reread's raw logprobs."""
    decode, reread = _exchange(pid, "decode"), _exchange(pid, "reread")
    rows = decode_rows(decode["response"]["choices"][0]["logprobs"])
    assert rows
    return decode["request"]["prompt"], rows, reread["response"]["choices"][0]["logprobs"]


@pytest.mark.parametrize("pid", IDS)
def test_vllm_echoes_the_bos_as_a_first_row_the_prompt_does_not_hold(pid: str) -> None:
    prompt, _, logprobs = _captured(pid)
    assert logprobs["tokens"][0] == BOS and BOS not in prompt
    assert logprobs["text_offset"][:2] == [0, len(BOS)]  # its offsets count the BOS too
    assert logprobs["token_logprobs"][0] is None  # nothing before it to give a logprob


@pytest.mark.parametrize("pid", IDS)
def test_counted_from_character_0_no_answer_row_is_found(pid: str) -> None:
    """Before: the prompt's length counted from the BOS ends inside a token, so the reread had
    no answer rows and 0 positions aligned."""
    prompt, _, logprobs = _captured(pid)
    assert after(reread_rows(logprobs, 0, 5) or [], len(prompt)) is None


@pytest.mark.parametrize("pid", IDS)
def test_past_the_bos_every_answer_position_aligns_and_agrees(pid: str) -> None:
    prompt, decoded, logprobs = _captured(pid)
    skip, answer = answer_rows(reread_rows(logprobs, 0, 5) or [], prompt)
    assert skip == 1 and answer is not None
    found = figures(aligned(decoded, answer), len(decoded))
    assert found["aligned_share"] > 0.9 and found["positions"] == len(decoded)
    assert found["mean_abs_delta"] < 0.05 and found["top1_agreement"] == 1.0


def _lines() -> list[dict[str, Any]]:
    """The transcript lines the gate writes for the captures: decode, reread, warm decode."""
    lines = []
    for pid in IDS:
        prompt, decoded, logprobs = _captured(pid)
        text = _exchange(pid, "decode")["response"]["choices"][0]["text"]
        own = {"kind": OWN, "id": pid, "prompt": prompt, "text": text, "tokens": decoded,
               "finish_reason": "length"}  # fmt: skip
        _, answer = answer_rows(reread_rows(logprobs, 0, 5) or [], prompt)
        lines += [own, {"kind": REREAD, "of": "self", "id": pid, "tokens": answer or []},
                  {**own, "kind": WARM}]  # fmt: skip
    return lines


def test_self_consistency_is_judged_on_the_bos_serve() -> None:
    judged = evaluate(_lines(), SETTINGS)
    assert "self-consistency" not in judged.not_judged and not judged.problems
    assert judged.claims["self_aligned_share"] > 0.9
    assert judged.claims["self_judgement"] == "agrees"


def test_the_shift_check_reads_the_bos_serve_where_it_is() -> None:
    """The misread check places the answer the same way: shift 0 fits, and is kept."""
    prompt, decoded, logprobs = _captured("code")
    fits = shift_fit(decoded, logprobs, prompt, 5)
    assert fits[0] is not None and fits[0] < 0.05 and misread(fits, 0) is None


def test_verify_places_the_answer_by_the_same_rule() -> None:
    """verify parses the raw reread again from the text sent: past the BOS, the same rows."""
    prompt, _, logprobs = _captured("factual")
    raw = _exchange("factual", "reread")
    _, answer = answer_rows(reread_rows(logprobs, 0, 5) or [], prompt)
    line = {"kind": REREAD, "tag": "reread:self:factual", "shift": 0,
            "prompt_chars": len(prompt), "tokens": answer}  # fmt: skip
    out = Rederived()
    _reparse(line, {"request": {"body": raw["request"]}, "response": raw["response"]}, out)
    assert not out.mismatches


def _row(token: str) -> dict[str, Any]:
    return {"token": token, "logprob": -1.0, "top": []}


def test_a_prompt_at_the_start_needs_no_prefix() -> None:
    rows = [_row("ab"), _row("c"), _row("d")]
    assert prefix_rows(rows, "abc") == 0 and answer_rows(rows, "abc") == (0, rows[2:])


def test_a_prompt_the_rows_do_not_spell_has_no_place() -> None:
    """Not found at any row boundary, or only past more rows than a special prefix takes: no
    answer placed (the gate raises the suite's error)."""
    rows = [_row("<s>"), _row("ab"), _row("c")]
    assert prefix_rows(rows, "xbc") is None and answer_rows(rows, "xbc") == (None, None)
    assert prefix_rows(rows, "bc") is None  # inside a row, not at a boundary
    far = [_row("<s>")] * (MAX_PREFIX_ROWS + 1) + [_row("ab")]
    assert prefix_rows(far, "ab") is None and prefix_rows(far[1:], "ab") == MAX_PREFIX_ROWS
