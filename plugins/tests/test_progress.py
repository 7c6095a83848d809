"""The gate progress line: the tally and its text (pure), and where it is drawn at all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tp2qual.perf.progress import GateProgress, duration

ROOT = Path(__file__).resolve().parents[2]


def test_before_any_answer_the_line_names_the_request_and_no_rate() -> None:
    tally = GateProgress("[c] repetition")
    tally.sent("long#0", 2048, now=100.0)
    assert tally.line(now=112.0) == "[c] repetition | request 1 (long#0) 12 s"
    assert tally.rate is None and tally.left_s(now=112.0) is None


def test_answered_requests_give_tokens_rate_and_time_left_of_the_next() -> None:
    tally = GateProgress("[c] repetition")
    tally.sent("long#0", 2048, now=0.0)
    tally.answered(812, now=70.6)  # 11.5 tok/s, the campaign's DeepSeek rate
    tally.sent("long#1", 2048, now=71.0)
    assert tally.done == 1 and tally.tokens == 812
    assert tally.rate == pytest.approx(812 / 70.6)
    left = tally.left_s(now=101.0)
    assert left == pytest.approx(2048 / (812 / 70.6) - 30.0)
    assert tally.line(now=101.0) == (
        "[c] repetition | request 2 (long#1) 30 s | 1 done, 812 tokens at 11.5 tok/s"
        f" | ≤ {duration(left)} left (≤ 2048 tokens)"
    )


def test_a_stream_is_estimated_from_its_own_chunks() -> None:
    tally = GateProgress("[c] throughput")
    tally.sent("sample#0", 256, now=0.0)
    tally.streamed(64)
    assert tally.left_s(now=8.0) == pytest.approx((256 - 64) * 8.0 / 64)
    assert "64 chunks" in tally.line(now=8.0)
    tally.answered(None, now=30.0)  # no usage: the chunks count
    assert tally.tokens == 64 and tally.current is None


def test_an_answer_without_a_request_in_flight_changes_nothing() -> None:
    tally = GateProgress("[c] x")
    tally.answered(10, now=1.0)
    assert (tally.done, tally.tokens) == (0, 0)


@pytest.mark.parametrize(("seconds", "text"), [(42, "42 s"), (180, "3.0 min"), (9000, "2.5 h")])
def test_durations_read_in_their_unit(seconds: float, text: str) -> None:
    assert duration(seconds) == text


LIVE_PROBE = """
from tp2qual.hooks.progress import shows_live_lines
def test_probe(request):
    print("LIVE=" + str(shows_live_lines(request.config)))
"""


def _probe(tmp_path: Path, *args: str, tty: bool) -> str:
    """Run a one-test pytest, with stdout a terminal (a pty) or a pipe; its output."""
    (tmp_path / "test_probe.py").write_text(LIVE_PROBE)
    command = [sys.executable, "-m", "pytest", str(tmp_path), "-s", "-p", "no:cacheprovider",
               f"--rootdir={tmp_path}", "-p", "no:tp2qual", *args]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    if not tty:
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60).stdout
    import pty

    leader, follower = pty.openpty()
    with subprocess.Popen(command, env=env, stdout=follower, stderr=follower) as proc:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the pty closes when the run ends
                break
            if not chunk:
                break
            chunks.append(chunk)
        proc.wait(60)
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.parametrize(
    ("args", "tty", "live"),
    [((), True, True), (("-q",), True, False), ((), False, False), (("-v",), True, True)],
)
def test_live_lines_only_on_a_terminal_and_not_under_quiet(
    tmp_path: Path, args: tuple[str, ...], tty: bool, live: bool
) -> None:
    output = _probe(tmp_path, *args, tty=tty)
    assert f"LIVE={live}" in output, output


@pytest.mark.slow
def test_a_real_gate_draws_its_line_on_a_terminal(tmp_path: Path) -> None:
    """Gate 03 against the embedded llama.cpp candidate, on a pty: the line names each request,
    then the tokens and rate of those answered, and pytest's result goes on below it."""
    from tp2qual.candidate import load_candidate
    from tp2qual.hooks.candidates import why_not_runnable

    if reason := why_not_runnable(load_candidate(ROOT / "candidates" / "smollm2-135m-local.toml")):
        pytest.skip(reason)
    import pty

    command = [sys.executable, "-m", "pytest", "-k", "smollm2-135m-local", "-m", "deterministic",
               "-p", "no:cacheprovider", f"--results={tmp_path}"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"} | {"COLUMNS": "200"}
    leader, follower = pty.openpty()
    with subprocess.Popen(command, cwd=ROOT, env=env, stdout=follower, stderr=follower) as proc:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        proc.wait(300)
    os.close(leader)
    raw = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, raw[-3000:]
    assert "\r  [smollm2-135m-local] deterministic | request 1 (" in raw, raw[-3000:]
    final = raw.rsplit("\r  [smollm2-135m-local] deterministic | ", 1)[1]
    assert " done, " in final and " tok/s" in final, final
    assert "\ntests/test_03_deterministic.py" in final.replace("\r\n", "\n"), final
