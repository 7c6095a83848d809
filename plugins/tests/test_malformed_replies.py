"""A malformed HTTP 200 is the candidate's FAIL, quoting the body — never a suite ERROR.

Copies of the embedded candidate (SmolLM2-135M on the real llama.cpp engine) behind the fault
proxy, each breaking every chat answer after readiness's one real token in one way: no
``choices``, ``choices: []``, no ``message``, no ``usage``, a body that is not JSON, a stream with
a data line that is not JSON. Each copy declares the gates before its target not applicable,
so the one fault lands where it is meant to: gate 03, 04, 05, 06 (its calibration and its
streamed needle) and 08. The reply accessors (``Exchange.message``/``choice``/``usage``,
serving/server.py) raise ``MalformedReply``, a ``QualError``, so every gate reading them FAILs
the same way; before them each of these was a KeyError or TypeError, a suite error. The
accessors themselves, on the bodies the proxy sends, are checked without a server at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_faults import (
    MAIN,
    assert_failed_and_blocked,
    assert_nothing_left,
    run_inner,
    smollm2_spec,
    with_fault,
    write_candidate,
)

from tp2qual.candidate import GATES
from tp2qual.checks.replies import content_chunks, stream_text
from tp2qual.checks.toolcalls import reassemble_stream
from tp2qual.exceptions import MalformedReply, QualError
from tp2qual.perf.sampling import sample
from tp2qual.serving.server import Exchange

# name -> (fault, the gate that must FAIL, words of the quoted body or the problem in the reason)
CASES = {
    "malformed-03-no-choices": (
        "no_choices", "deterministic", "HTTP 200 without a chat completion message: {",
    ),
    "malformed-03-not-json": ("not_json", "deterministic", "502 Bad Gateway (injected)"),
    "malformed-04-empty-choices": ("empty_choices", "repetition", '"choices": []'),
    "malformed-05-no-message": (
        "no_message", "tool_calls", "HTTP 200 without a chat completion message: {",
    ),
    "malformed-06-calibration": (
        "no_usage", "capacity", "without a token count (usage.prompt_tokens)",
    ),
    # gate 06's first streamed answer: the needle's row (a self-test copy asks no lower rows)
    "malformed-06-needle": ("stream_not_json", "capacity", "needle: HTTP 200 stream with"),
    "malformed-08-stream": ("stream_not_json", "throughput", "upstream hiccup (injected)"),
}  # fmt: skip


def _spec(name: str) -> dict[str, Any]:
    fault, gate, _ = CASES[name]
    spec = with_fault(smollm2_spec(name), fault)
    skipped = spec["gates"].setdefault("not_applicable", {})
    for earlier in GATES[GATES.index("deterministic") : GATES.index(gate)]:
        skipped.setdefault(earlier, f"malformed-reply self-test: {fault} is aimed at {gate}")
    return spec


@pytest.mark.slow
def test_a_malformed_200_fails_the_gate_that_reads_it(tmp_path: Path) -> None:
    for name in CASES:
        write_candidate(tmp_path / "candidates", _spec(name))
    inner = run_inner(tmp_path, list(CASES))
    for name, (_, gate, words) in CASES.items():
        finding = assert_failed_and_blocked(inner, name, gate)
        reason = finding["gates"][gate]["reason"]
        assert words in reason, (name, reason)
        assert "MalformedReply" in reason or "AssertionError" in reason, (name, reason)
        assert not (inner.evidence(name) / "suite_errors").exists(), name
        assert "error" not in {r["outcome"] for r in finding["gates"].values()}, finding
        assert_nothing_left(inner, name)
    # (JUnit reports the calibration copy as an error: a failed fixture is one in pytest's
    # terms, as a failed start-up is; the finding is what says whose fault it is.)
    checked = subprocess.run(
        [sys.executable, "-m", "tp2qual", "verify", str(inner.run_dir)],
        cwd=MAIN, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]


# --- the accessors on the bodies the proxy sends (no server) -------------------------------

ANSWER = {
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris"}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 1},
}


@pytest.mark.parametrize(
    ("body", "part", "words"),
    [
        ({"object": "chat.completion"}, "message", "without a chat completion message: {"),
        ({**ANSWER, "choices": []}, "choice", 'without a completion choice: {"choices": []'),
        ({**ANSWER, "choices": [{"index": 0}]}, "message", "without a chat completion message"),
        ({**ANSWER, "choices": [None]}, "finish_reason", "without a completion choice"),
        ({"choices": ANSWER["choices"]}, "usage", "without a token count (usage.prompt_tokens)"),
        ("<html>502</html>", "message", "message: <html>502</html>"),
        ("x" * 1000, "choice", "x" * 300 + "…"),
    ],
)
def test_an_accessor_on_a_malformed_body_names_it(body: Any, part: str, words: str) -> None:
    reply = Exchange("capital#0", 200, body, 0.1, candidate="c")
    with pytest.raises(MalformedReply) as raised:
        reply.usage("prompt_tokens") if part == "usage" else getattr(reply, part)
    assert isinstance(raised.value, QualError)  # the candidate's FAIL (hooks/gating.py)
    assert str(raised.value).startswith("[c] capital#0: HTTP 200 "), raised.value
    assert words in str(raised.value), raised.value


def test_an_accessor_on_a_good_body_reads_it() -> None:
    reply = Exchange("capital#0", 200, json.loads(json.dumps(ANSWER)), 0.1)
    assert reply.message["content"] == "Paris" and reply.finish_reason is None
    assert reply.usage("prompt_tokens") == 12 and reply.choice["index"] == 0


def test_stream_chunks_without_a_choice_object_read_as_empty() -> None:
    """A chunk whose choice is not an object carries nothing: no text, no sample, no call —
    judged as such (the candidate's answer), never an AttributeError."""
    chunks = [{"choices": [None]}, {"choices": []}, {"usage": {"completion_tokens": 3}}]
    assert stream_text(chunks) == "" and content_chunks(chunks) == 0
    assert sample(chunks, [0.1, 0.2, 0.3], 3, "usage") == {
        "ok": False, "reason": "no output chunks", "output_tokens": 3,
    }  # fmt: skip
    assert reassemble_stream(chunks)["tool_calls"] == []
