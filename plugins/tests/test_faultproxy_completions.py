"""The fault proxy's legacy-completions faults, on real llama.cpp answers.

The pure rewrites of ``completionfaults.py`` (and their wiring in ``faultproxy.rewrite``) are
applied to answers captured from the embedded candidate's llama-cpp-python 0.3.36 server
(``data/completions-echo/``: a 64-token greedy decode with ``logprobs: 5``, its echo reread, one
chat answer with logprobs). Proved per fault: exactly the positions it names change, the answer
stays self-consistent (``text`` is the tokens joined, ``text_offset`` counts them from the
engine's first offset), an ``echo: true`` reread passes untouched, and ``long_context_drift``
applies only above its prompt length. One slow test runs the proxy process itself in front of
the real engine and compares its answers over HTTP with the engine's own.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import faultproxy
import httpx
import pytest
from completionfaults import (
    COMPLETION_FAULTS,
    DRIFT,
    DRIFT_FROM,
    LONG_CHARS,
    SECOND_EVERY,
    SECOND_FROM,
    completion_fault,
    fault_positions,
    ranked,
)
from test_faults import smollm2_spec, with_fault

from tp2qual.candidate import Candidate
from tp2qual.redact import Redactor
from tp2qual.serving.launchers.process import ProcessLauncher
from tp2qual.serving.readiness import wait_ready

DATA = Path(__file__).with_name("data") / "completions-echo"


def exchange(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    saved = json.loads((DATA / name).read_text())
    return saved["request"], saved["response"]


DECODE_REQUEST, DECODE = exchange("decode.json")
REREAD_REQUEST, REREAD = exchange("reread.json")
CHAT_REQUEST, CHAT = exchange("chat.json")


def logprobs_of(data: dict[str, Any]) -> dict[str, Any]:
    return data["choices"][0]["logprobs"]


def assert_consistent(data: dict[str, Any], first_offset: int) -> None:
    choice = data["choices"][0]
    logprobs = choice["logprobs"]
    tokens = logprobs["tokens"]
    assert choice["text"] == "".join(tokens)
    lengths = {len(logprobs[k]) for k in ("tokens", "token_logprobs", "top_logprobs")}
    assert lengths == {len(logprobs["text_offset"])}, lengths
    expected = [first_offset + len("".join(tokens[:i])) for i in range(len(tokens))]
    assert logprobs["text_offset"] == expected


def changed_positions(before: dict[str, Any], after: dict[str, Any], key: str) -> list[int]:
    old, new = logprobs_of(before)[key], logprobs_of(after)[key]
    return [i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b]


def rewritten(
    fault: str, request: dict[str, Any], data: dict[str, Any], path: str = "/v1/completions"
) -> dict[str, Any]:
    """The answer as the proxy process itself would pass it on, under ``fault``."""
    saved = faultproxy.fault
    faultproxy.fault = fault
    try:
        status, body = faultproxy.rewrite("POST", path, request, 200, json.dumps(data).encode())
    finally:
        faultproxy.fault = saved
    assert status == 200
    return json.loads(body)


FIRST_OFFSET = len(DECODE_REQUEST["prompt"])
POSITIONS = list(range(SECOND_FROM, 64, SECOND_EVERY))  # 16, 23, ..., 58


def test_the_captured_answers_are_what_the_faults_assume() -> None:
    logprobs = logprobs_of(DECODE)
    assert len(logprobs["tokens"]) == 64 >= 40 and DECODE["usage"]["completion_tokens"] == 64
    assert_consistent(DECODE, FIRST_OFFSET)  # the engine's own answer is already consistent
    assert all(len(row) == 5 for row in logprobs["top_logprobs"])
    assert all(  # greedy: the chosen token is its row's argmax, every time
        ranked(row)[0][0] == token
        for token, row in zip(logprobs["tokens"], logprobs["top_logprobs"], strict=True)
    )
    assert list(fault_positions(64)) == POSITIONS == [16, 23, 30, 37, 44, 51, 58]
    assert REREAD_REQUEST["echo"] is True and REREAD_REQUEST["max_tokens"] == 1


def test_second_choice_takes_the_rows_second_entry_and_leaves_the_rows() -> None:
    before = copy.deepcopy(DECODE)
    after = completion_fault("second_choice", DECODE_REQUEST, DECODE)
    assert before == DECODE  # pure: the input is not changed
    assert changed_positions(DECODE, after, "tokens") == POSITIONS
    assert changed_positions(DECODE, after, "token_logprobs") == POSITIONS
    assert logprobs_of(after)["top_logprobs"] == logprobs_of(DECODE)["top_logprobs"]
    for i in POSITIONS:
        second, logprob = ranked(logprobs_of(DECODE)["top_logprobs"][i])[1]
        assert logprobs_of(after)["tokens"][i] == second
        assert logprobs_of(after)["token_logprobs"][i] == logprob
    assert_consistent(after, FIRST_OFFSET)
    assert after["choices"][0]["text"] != DECODE["choices"][0]["text"]
    assert after["usage"] == DECODE["usage"]
    assert rewritten("second_choice", DECODE_REQUEST, DECODE) == after  # the proxy's path


def test_second_choice_leaves_a_row_of_one_entry_alone() -> None:
    data = copy.deepcopy(DECODE)
    row = logprobs_of(data)["top_logprobs"][SECOND_FROM]
    token = logprobs_of(data)["tokens"][SECOND_FROM]
    logprobs_of(data)["top_logprobs"][SECOND_FROM] = {token: row[token]}
    after = completion_fault("second_choice", DECODE_REQUEST, data)
    assert changed_positions(data, after, "tokens") == POSITIONS[1:]


def test_late_drift_takes_the_second_entry_and_makes_it_the_rows_top() -> None:
    after = completion_fault("late_drift", DECODE_REQUEST, DECODE)
    assert changed_positions(DECODE, after, "tokens") == POSITIONS
    assert changed_positions(DECODE, after, "top_logprobs") == POSITIONS
    for i in POSITIONS:
        (first, best), (second, runner_up) = ranked(logprobs_of(DECODE)["top_logprobs"][i])[:2]
        row = logprobs_of(after)["top_logprobs"][i]
        assert logprobs_of(after)["tokens"][i] == second
        assert (row[second], row[first]) == (best, runner_up)
        assert logprobs_of(after)["token_logprobs"][i] == best
        assert ranked(row)[0] == (second, best)  # greedy still looks like argmax
        others = {t: lp for t, lp in row.items() if t not in (first, second)}
        assert others == {
            t: lp
            for t, lp in logprobs_of(DECODE)["top_logprobs"][i].items()
            if t not in (first, second)
        }
    assert_consistent(after, FIRST_OFFSET)
    assert rewritten("late_drift", DECODE_REQUEST, DECODE) == after


def test_early_eos_cuts_the_answer_in_half_and_says_stop() -> None:
    after = completion_fault("early_eos", DECODE_REQUEST, DECODE)
    logprobs = logprobs_of(after)
    assert len(logprobs["tokens"]) == 32
    assert logprobs["tokens"] == logprobs_of(DECODE)["tokens"][:32]
    assert logprobs["top_logprobs"] == logprobs_of(DECODE)["top_logprobs"][:32]
    assert after["choices"][0]["finish_reason"] == "stop"
    assert DECODE["choices"][0]["finish_reason"] == "length"
    assert after["usage"] == {"prompt_tokens": 10, "completion_tokens": 32, "total_tokens": 42}
    assert DECODE["choices"][0]["text"].startswith(after["choices"][0]["text"])
    assert_consistent(after, FIRST_OFFSET)
    assert rewritten("early_eos", DECODE_REQUEST, DECODE) == after


@pytest.mark.parametrize(("n", "kept"), [(3, 3), (4, 2), (5, 2)])
def test_early_eos_spares_answers_under_four_tokens(n: int, kept: int) -> None:
    data = copy.deepcopy(DECODE)
    for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        logprobs_of(data)[key] = logprobs_of(data)[key][:n]
    data["choices"][0]["text"] = "".join(logprobs_of(data)["tokens"])
    after = completion_fault("early_eos", DECODE_REQUEST, data)
    assert len(logprobs_of(after)["tokens"]) == kept
    assert (after == data) == (kept == n)


def test_logprob_drift_lowers_every_logprob_from_the_ninth_token() -> None:
    after = completion_fault("logprob_drift", DECODE_REQUEST, DECODE)
    old, new = logprobs_of(DECODE), logprobs_of(after)
    assert new["tokens"] == old["tokens"] and new["text_offset"] == old["text_offset"]
    assert after["choices"][0]["text"] == DECODE["choices"][0]["text"]
    assert new["token_logprobs"][:DRIFT_FROM] == old["token_logprobs"][:DRIFT_FROM]
    assert new["top_logprobs"][:DRIFT_FROM] == old["top_logprobs"][:DRIFT_FROM]
    for i in range(DRIFT_FROM, 64):
        assert new["token_logprobs"][i] == pytest.approx(old["token_logprobs"][i] - DRIFT)
        assert new["top_logprobs"][i] == pytest.approx(
            {t: lp - DRIFT for t, lp in old["top_logprobs"][i].items()}
        )
        assert ranked(new["top_logprobs"][i])[0][0] == new["tokens"][i]  # argmax kept
    assert_consistent(after, FIRST_OFFSET)
    assert rewritten("logprob_drift", DECODE_REQUEST, DECODE) == after


def test_logprob_drift_on_chat_still_drifts_from_the_ninth_token() -> None:
    after = rewritten("logprob_drift", CHAT_REQUEST, CHAT, "/v1/chat/completions")
    old = CHAT["choices"][0]["logprobs"]["content"]
    new = after["choices"][0]["logprobs"]["content"]
    assert len(old) == 16 and [e["token"] for e in new] == [e["token"] for e in old]
    assert new[:DRIFT_FROM] == old[:DRIFT_FROM]
    for a, b in zip(old[DRIFT_FROM:], new[DRIFT_FROM:], strict=True):
        assert b["logprob"] == pytest.approx(a["logprob"] - DRIFT)
        assert [t["logprob"] for t in b["top_logprobs"]] == pytest.approx(
            [t["logprob"] - DRIFT for t in a["top_logprobs"]]
        )


@pytest.mark.parametrize("fault", ["second_choice", "late_drift", "early_eos"])
def test_completion_faults_leave_chat_answers_alone(fault: str) -> None:
    assert rewritten(fault, CHAT_REQUEST, CHAT, "/v1/chat/completions") == CHAT


def test_long_context_drift_only_above_its_prompt_length() -> None:
    chars = len(DECODE_REQUEST["prompt"])  # 51
    drifted = completion_fault("late_drift", DECODE_REQUEST, DECODE)
    assert completion_fault("long_context_drift", DECODE_REQUEST, DECODE) == DECODE  # 51 <= 4000
    assert LONG_CHARS == 4000
    assert completion_fault("long_context_drift", DECODE_REQUEST, DECODE, chars) == DECODE
    assert completion_fault("long_context_drift", DECODE_REQUEST, DECODE, chars - 1) == drifted
    long_request = {**DECODE_REQUEST, "prompt": "x" * (LONG_CHARS + 1)}
    assert completion_fault("long_context_drift", long_request, DECODE) == drifted
    saved = faultproxy.long_chars
    faultproxy.long_chars = chars - 1  # the proxy's --long-chars
    try:
        assert rewritten("long_context_drift", DECODE_REQUEST, DECODE) == drifted
    finally:
        faultproxy.long_chars = saved
    assert rewritten("long_context_drift", DECODE_REQUEST, DECODE) == DECODE


@pytest.mark.parametrize("fault", COMPLETION_FAULTS)
def test_an_echo_reread_passes_untouched(fault: str) -> None:
    assert completion_fault(fault, REREAD_REQUEST, REREAD, long_chars=0) is REREAD
    body = json.dumps(REREAD).encode()
    saved, faultproxy.fault = faultproxy.fault, fault
    try:  # the engine's very bytes are passed on
        assert faultproxy.rewrite("POST", "/v1/completions", REREAD_REQUEST, 200, body) == (
            200,
            body,
        )
    finally:
        faultproxy.fault = saved
    # the same answer to a request without echo is rewritten: it is the echo that spares it
    plain = {**REREAD_REQUEST, "echo": False}
    assert completion_fault(fault, plain, REREAD, long_chars=0) != REREAD


def test_the_proxy_takes_long_chars_from_the_candidates_command() -> None:
    spec = with_fault(smollm2_spec("long-context"), "long_context_drift", "--long-chars", "2000")
    command = spec["launch"]["command"]
    assert command[command.index("--long-chars") + 1] == "2000"
    assert command.index("--long-chars") < command.index("--") < command.index("-m")


@pytest.mark.slow
def test_the_proxy_process_serves_second_choice_over_http(tmp_path: Path) -> None:
    """The proxy, as a candidate launches it, in front of the real engine: its decode is the
    engine's own answer (asked directly on the upstream port) rewritten by second_choice, and
    its echo reread is the engine's, unchanged."""
    spec = with_fault(smollm2_spec("faultproxy-http"), "second_choice")
    launcher = ProcessLauncher(
        Candidate(path=tmp_path / "faultproxy-http.toml", spec=spec),
        tmp_path / "server.log",
        Redactor(),
    )
    launcher.start()
    try:
        wait_ready(launcher, served_name="smollm2-135m", timeout_s=180)
        found = re.search(r"on upstream port (\d+)", (tmp_path / "server.log").read_text())
        assert found, (tmp_path / "server.log").read_text()[-2000:]
        engine = f"http://127.0.0.1:{found[1]}"
        with httpx.Client(trust_env=False, timeout=300) as client:
            asked = {}
            for name, base in (("proxy", launcher.base_url), ("engine", engine)):
                for what, request in (("decode", DECODE_REQUEST), ("reread", REREAD_REQUEST)):
                    response = client.post(f"{base}/v1/completions", json=request)
                    assert response.status_code == 200, response.text
                    asked[name, what] = response.json()
    finally:
        launcher.stop()
    direct = asked["engine", "decode"]
    assert len(logprobs_of(direct)["tokens"]) >= 40
    for got in (asked["proxy", "decode"], direct):
        got.pop("id"), got.pop("created")
    assert asked["proxy", "decode"] == completion_fault("second_choice", DECODE_REQUEST, direct)
    assert changed_positions(direct, asked["proxy", "decode"], "tokens") == POSITIONS
    assert_consistent(asked["proxy", "decode"], FIRST_OFFSET)
    for got in (asked["proxy", "reread"], asked["engine", "reread"]):
        got.pop("id"), got.pop("created")
    assert asked["proxy", "reread"] == asked["engine", "reread"]
