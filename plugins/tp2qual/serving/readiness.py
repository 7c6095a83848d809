"""Ready means alive + model listed + one real token (health endpoints can lie: vLLM #39863,
llama.cpp #14092). Liveness is checked on every poll so an early exit is reported at once."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import httpx

from tp2qual.checks import readiness
from tp2qual.exceptions import StartupExited, StartupTimeout
from tp2qual.serving.interrupts import interrupts_at_safe_points
from tp2qual.serving.launchers.base import Launcher

POLL_S = 0.25
DRAIN_S = 2.0  # after an exit, how long the log reader may take to reach EOF
PROBE_TIMEOUT_S = 2.0
TOKEN_TIMEOUT_S = 30.0


@dataclass
class Readiness:
    """Seconds from start to each stage, and how the wait ended (``outcome``: ready, exited,
    timeout); recorded as evidence, a failed start too (``checks.readiness`` judges it)."""

    answered_s: float | None = None
    listed_s: float | None = None
    first_token_s: float | None = None
    polls: int = 0
    listed_models: list[str] = field(default_factory=list)
    outcome: str = "waiting"
    exit: str | None = None  # how the process ended, when it exited during start-up
    waited_s: float | None = None
    timeout_s: float | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _listed(client: httpx.Client) -> list[str] | None:
    try:
        response = client.get("/v1/models", timeout=PROBE_TIMEOUT_S)
    except httpx.TransportError:
        return None
    if response.status_code != 200:
        return []
    try:
        return [m.get("id", "") for m in response.json().get("data", [])]
    except (ValueError, AttributeError):
        return []


def _one_token(client: httpx.Client, served_name: str, timeout_s: float) -> bool:
    body = {
        "model": served_name,
        "messages": [{"role": "user", "content": "Say OK."}],
        "max_tokens": 1,
        "temperature": 0,
    }
    try:
        response = client.post("/v1/chat/completions", json=body, timeout=timeout_s)
    except httpx.TransportError:
        return False
    return response.status_code == 200 and bool(response.json().get("choices"))


def wait_ready(
    launcher: Launcher,
    *,
    served_name: str,
    timeout_s: float,
    progress: Callable[[float, str], None] = lambda elapsed, line: None,
    state: Readiness | None = None,
) -> Readiness:
    """Poll until ready; raise StartupExited/StartupTimeout carrying the log tail. ``state``,
    when given, is filled as the wait goes (the caller records it, a failed start too)."""
    began = time.monotonic()
    state = state if state is not None else Readiness()
    state.timeout_s = timeout_s
    name = launcher.candidate.name
    # Ctrl-C waits from before the client is made: making it imports httpcore (httpx imports it
    # lazily), where the start-up Ctrl-Cs traced here landed. Inside an import it can be
    # swallowed by importlib's callbacks ("Exception ignored": the run goes on) or pass
    # through exec'd code (the exit status, serving/interrupts.py).
    with (
        interrupts_at_safe_points() as checkpoint,
        httpx.Client(base_url=launcher.base_url, trust_env=False) as client,
    ):
        while True:
            checkpoint()  # a Ctrl-C stops the wait here, between polls
            elapsed = time.monotonic() - began
            exited = launcher.poll()
            if exited is not None:
                launcher.log.join(DRAIN_S)  # its last words may still be in the pipe
                state.outcome, state.exit = "exited", exited.describe()
                state.waited_s = round(elapsed, 3)
                raise StartupExited(
                    f"server exited during start-up after {elapsed:.1f}s ({exited.describe()})\n"
                    f"  last log lines:\n{launcher.log.tail_text()}",
                    candidate=name,
                    log_path=launcher.log.path,
                )
            if elapsed > timeout_s:
                state.outcome, state.waited_s = "timeout", round(elapsed, 3)
                raise StartupTimeout(
                    f"not ready after {timeout_s:.0f}s (stage: {_stage(state)}); raise "
                    f"launch.readiness_timeout_s if the engine is only slow\n"
                    f"  last log lines:\n{launcher.log.tail_text()}",
                    candidate=name,
                    log_path=launcher.log.path,
                )
            state.polls += 1
            if _advance(client, state, served_name, elapsed, timeout_s - elapsed):
                state.first_token_s = round(time.monotonic() - began, 3)
                state.outcome, state.waited_s = "ready", state.first_token_s
                return state
            progress(elapsed, launcher.log.last_line())
            time.sleep(POLL_S)


def _stage(state: Readiness) -> str:
    return readiness.stage(state.as_dict())


def _advance(
    client: httpx.Client, state: Readiness, served_name: str, elapsed: float, left: float
) -> bool:
    listed = _listed(client)
    if listed is None:
        return False
    if state.answered_s is None:
        state.answered_s = round(elapsed, 3)
    state.listed_models = listed
    if not listed:  # whether the list is *right* is the model_list gate's question
        return False
    if state.listed_s is None:
        state.listed_s = round(elapsed, 3)
    return _one_token(client, served_name, max(1.0, min(TOKEN_TIMEOUT_S, left)))
