"""A model step that never finished, read from vLLM's own lines (``checks/diagnosis/steps.py``).

``data/vllm-cpu-tp2/rank1-stalls.log`` is a real TP2 serve (vLLM 0.32.0 CPU, two ranks over
gloo) whose rank 1 slept at the start of a model step (``rankfault/sitecustomize.py``), with
``VLLM_RINGBUFFER_WARNING_INTERVAL=10`` and ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=40``: the
engine core logged its wait every 10 s, then gave up and died. Cut where the suite would read it
(the engine still waiting), the same log is the budget-ran-out case. Its first request's slow
first step logged two waits too, then answered: those are no stall.
"""

from __future__ import annotations

from pathlib import Path

from tp2qual.checks.diagnosis import diagnose
from tp2qual.checks.diagnosis.model import lines_of
from tp2qual.checks.diagnosis.steps import stalled_step

LOG = (Path(__file__).parent / "data" / "vllm-cpu-tp2" / "rank1-stalls.log").read_text()
LINES = LOG.splitlines()
GAVE_UP = next(n for n, ln in enumerate(LINES) if "RPC call to execute_model timed out" in ln)
LAST_WAIT = max(n for n, ln in enumerate(LINES[:GAVE_UP]) if "broadcast block found" in ln)
ANSWERED = max(n for n, ln in enumerate(LINES) if '"POST /v1/completions HTTP/1.1" 200' in ln)


def upto(n: int) -> str:
    return "\n".join(LINES[: n + 1])


def test_the_engine_giving_up_is_a_stalled_step_with_its_waits() -> None:
    found = stalled_step(lines_of(LOG))
    assert found is not None and found.gave_up is not None
    assert found.method == "execute_model"
    assert (len(found.waits), found.interval_s, found.waited_s) == (4, 10, 40)
    assert all(w.no > ANSWERED + 1 for w in found.waits)  # not the slow first step's two
    said = found.describe()
    assert "waited at least 40 s" in said
    assert "gave up ('RPC call to execute_model timed out.')" in said
    assert "do not say which rank" in said


def test_a_step_still_waiting_when_read_is_a_stalled_step_that_has_not_given_up() -> None:
    found = stalled_step(lines_of(upto(LAST_WAIT)))
    assert found is not None and found.gave_up is None
    assert found.waited_s == 40
    assert "has heard nothing since" in found.describe()


def test_a_slow_step_that_answered_is_no_stall() -> None:
    assert stalled_step(lines_of(upto(ANSWERED + 1))) is None
    # Its waits, before the answer, count only while nothing answered after them.
    assert any("broadcast block found" in ln for ln in LINES[:ANSWERED])


def test_a_log_without_waits_is_no_stall() -> None:
    clean = (Path(__file__).parent / "data" / "vllm-cpu-tp2" / "server.log").read_text()
    assert stalled_step(lines_of(clean)) is None


def test_the_diagnosis_names_it_and_supersedes_the_hang_rules() -> None:
    env = {"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "40"}
    found = diagnose(LOG, tp=2, env=env, failed=True)
    rules = [f.rule for f in found.failures]
    assert rules[0] == "stalled_step", found.summary()
    assert not {"first_collective_hang", "collective_hang"} & set(rules)
    lead = found.failures[0]
    assert lead.confidence == "high"
    assert "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=40 here" in lead.remedy
    assert any("RPC call to execute_model timed out" in text for _, text in lead.evidence)
    waiting = diagnose(upto(LAST_WAIT), tp=2, failed=True)
    assert waiting.failures[0].rule == "stalled_step" and waiting.failures[0].confidence == "medium"
    assert "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, default 300" in waiting.failures[0].remedy
