"""The server handle gates talk to, and the recorded HTTP exchanges they make.

Every request has an explicit timeout, sized by the candidate's time budget from what it asks
for (``budget.py``), and is never retried (a retry would hide the very fault a gate looks for).
A timeout on a live server is a ``ResponseTimeout`` that says what was asked and what was allowed.
Every exchange — request, status, raw response or stream chunks with arrival
times — is appended to the gate's JSONL artifact before the gate looks at it, and every answered
chat completion proves the candidate's reasoning control took effect (``checks.control``; its
row in ``<gate>_control.jsonl``; a violation raises ``ControlNotApplied``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from tp2qual.artifacts.layout import Evidence
from tp2qual.budget import TimeBudget
from tp2qual.candidate import Candidate
from tp2qual.checks.control import control_rows
from tp2qual.checks.diagnosis.model import lines_of
from tp2qual.checks.diagnosis.steps import stalled_step
from tp2qual.checks.ranks import dead_worker
from tp2qual.checks.replies import (
    content_chunks,
    excerpt,
    reply_choice,
    reply_message,
    stream_text,
    stream_usage,
    usage_count,
)
from tp2qual.exceptions import ControlNotApplied, MalformedReply, ResponseTimeout, ServerDied
from tp2qual.serving.launchers.base import Launcher

DEATH_GRACE_S = 2.0  # after a transport error, how long to wait for the exit to show
# After an HTTP 5xx, how long to wait for the exit to show: vLLM answers a request in flight
# with 500 when its engine died (EngineDeadError, v1/engine/async_llm.py) and only then shuts
# its server down (seen: exit 1-2 s after the 500 on 2 busy cores).
SERVER_ERROR_GRACE_S = 10.0
CONTROL_TIMEOUT_S = 30.0  # requests that generate nothing: /v1/models, /metrics, /version


class Watch(Protocol):
    """Told of each generating request as it goes (the progress line); it changes nothing."""

    def sent(self, tag: str, max_tokens: int | None) -> None: ...
    def streamed(self, tag: str, chunks: int) -> None: ...
    def answered(self, tag: str, tokens: int | None) -> None: ...


class Server:
    """A ready server: base URL, clients, liveness, evidence folder."""

    def __init__(self, candidate: Candidate, launcher: Launcher, evidence: Evidence):
        self.candidate = candidate
        self.launcher = launcher
        self.evidence = evidence
        self.base_url = launcher.base_url
        self.http = httpx.Client(  # the one client every Api of this server uses
            base_url=self.base_url, trust_env=False, timeout=CONTROL_TIMEOUT_S
        )
        # The decode floor that applies in this run (its value and words), which every request's
        # time budget follows: set once the run's bases are read (hooks/server.py).
        self.decode_floor: tuple[float | None, str] = (None, "")

    def check_alive(self) -> None:
        """Raise ServerDied (with the log tail) when the process/container is gone."""
        __tracebackhide__ = True
        exited = self.launcher.poll()
        if exited is not None:
            self.launcher.log.join(DEATH_GRACE_S)  # its last words may still be in the pipe
            raise ServerDied(
                f"server died mid-run ({exited.describe()}){self.engine_says()}\n"
                f"  last log lines:\n{self.launcher.log.tail_text(20)}",
                candidate=self.candidate.name,
                log_path=self.launcher.log.path,
            )

    def engine_says(self) -> str:
        """``: <what the engine's own lines say went wrong>``: the worker that died (a multi-rank
        serve's tail is the survivors' shutdown, never the rank that died), else the model step
        that never finished; empty when they say neither."""
        try:
            text = self.log_text()
        except OSError:
            return ""
        if found := dead_worker(text):
            return f": {found.describe()}"
        if stalled := stalled_step(lines_of(text)):
            return f": {stalled.describe()}"
        return ""

    def died_behind(self, status: int) -> None:
        """After an HTTP 5xx: ServerDied if the server goes down within the grace."""
        __tracebackhide__ = True
        if status < 500:
            return
        deadline = time.monotonic() + SERVER_ERROR_GRACE_S
        while self.launcher.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        self.check_alive()

    def api(self, artifact: str, gate: str | None = None, watch: Watch | None = None) -> Api:
        return Api(self, artifact, self.candidate.time_budget(gate, *self.decode_floor), watch)

    def log_text(self) -> str:
        """The server's log as written so far (redacted at write time)."""
        return self.launcher.log.path.read_text(errors="replace")

    def last_log_line(self) -> str:
        lines = self.launcher.log.tail_text(1).strip().splitlines()
        return lines[-1].strip() if lines else "(empty log)"

    def openai(self, timeout: float = CONTROL_TIMEOUT_S) -> Any:
        """An OpenAI client for custom gates: no silent retries, explicit timeout."""
        import openai

        return openai.OpenAI(
            base_url=f"{self.base_url}/v1", api_key="qualification", max_retries=0, timeout=timeout
        )

    def close(self) -> None:
        self.http.close()


@dataclass
class Exchange:
    """One recorded answer. Its accessors read the parts a gate judges; a 200 body without the
    part is the candidate's ``MalformedReply`` (a FAIL, the body quoted), never a KeyError."""

    tag: str
    status: int
    body: Any
    elapsed_s: float
    candidate: str = ""

    @property
    def choice(self) -> dict[str, Any]:
        """Choice 0 (a chat or a text completion)."""
        return self._part(*reply_choice(self.status, self.body))

    @property
    def message(self) -> dict[str, Any]:
        """Choice 0's message (a chat completion)."""
        return self._part(*reply_message(self.status, self.body))

    @property
    def finish_reason(self) -> str | None:
        return self.choice.get("finish_reason")

    def usage(self, key: str) -> int:
        """``usage.<key>``: ``prompt_tokens`` or ``completion_tokens``."""
        return self._part(*usage_count(self.status, self.body, key))

    def _part(self, part: Any, problem: str) -> Any:
        __tracebackhide__ = True
        if part is None:
            raise MalformedReply(f"{self.tag}: {problem}", candidate=self.candidate)
        return part


@dataclass
class Stream:
    """A streamed completion: chunks with their arrival offsets (seconds after send)."""

    tag: str
    status: int
    chunks: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    error_body: Any = None
    e2e_s: float = 0.0
    malformed: list[dict[str, Any]] = field(default_factory=list)  # data lines not a JSON object

    def text(self) -> str:
        return stream_text(self.chunks)

    def content_chunks(self) -> int:
        """Chunks that carry answer text (about one token each on the engines here)."""
        return content_chunks(self.chunks)

    def usage(self) -> dict[str, Any] | None:
        return stream_usage(self.chunks)


def _generating(body: Any) -> bool:
    """A chat or a text completion: a request whose time follows its max_tokens."""
    return isinstance(body, dict) and ("messages" in body or "prompt" in body)


def prompt_chars(body: Any) -> int:
    """The characters of a request's prompt (its text, or its messages' text contents): at
    least its token count for ASCII text, the deadline's bound where the gate gives none."""
    if not isinstance(body, dict):
        return 0
    if isinstance(body.get("prompt"), str):
        return len(body["prompt"])
    messages = body.get("messages") or []
    return sum(len(m["content"]) for m in messages
               if isinstance(m, dict) and isinstance(m.get("content"), str))  # fmt: skip


def _parse(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


class Api:
    """Recorded calls into one gate artifact."""

    def __init__(
        self,
        server: Server,
        artifact: str,
        budget: TimeBudget | None = None,
        watch: Watch | None = None,
    ):
        self.server = server
        self.artifact = artifact
        self.budget = budget or server.candidate.time_budget()
        self.watch = watch

    def timeout_for(self, body: Any, prompt_tokens: int | None = None) -> float:
        """Generating requests get the budget for their prompt (``prompt_tokens`` where the gate
        knows it, else its characters) and max_tokens; the rest a short timeout."""
        if _generating(body):
            prompt = prompt_chars(body) if prompt_tokens is None else prompt_tokens
            return self.budget.seconds_for(body.get("max_tokens"), prompt)
        return CONTROL_TIMEOUT_S

    def _timed_out(self, body: Any, timeout: float, prompt_tokens: int | None = None) -> None:
        __tracebackhide__ = True
        self.server.check_alive()
        asked = body.get("max_tokens") if isinstance(body, dict) else None
        prompt = prompt_chars(body) if prompt_tokens is None else prompt_tokens
        what = (
            self.budget.explain(asked, prompt)
            if timeout == self.timeout_for(body, prompt_tokens) and _generating(body)
            else f"no response within {timeout:.0f} s"
        )
        said = self.server.engine_says() or f"; last log line: {self.server.last_log_line()[:200]}"
        raise ResponseTimeout(
            f"{what}; server alive{said}",
            candidate=self.server.candidate.name,
            log_path=self.server.launcher.log.path,
        )

    def _record(self, tag: str, method: str, path: str, body: Any, **result: Any) -> None:
        row = {
            "tag": tag,
            "at": time.time(),
            "request": {"method": method, "path": path, "body": body},
            **result,
        }
        self.server.evidence.append_jsonl(self.artifact, row)
        self._prove_control(row)

    @property
    def control_artifact(self) -> str:
        """Where this artifact's answers' control proofs go: ``<gate>_control.jsonl``."""
        return self.artifact.removesuffix(".jsonl") + "_control.jsonl"

    def _prove_control(self, row: dict[str, Any]) -> None:
        """Every answered chat completion proves the candidate's reasoning control took effect
        (``checks.control``): its proof row written beside the exchange, and a violation is the
        candidate's failure, whatever the gate then judges."""
        __tracebackhide__ = True
        written = self.server.evidence.as_written(row)  # what verify will read
        proofs = control_rows(self.server.candidate.reasoning_control, [written])
        for proof in proofs:
            self.server.evidence.append_jsonl(self.control_artifact, proof)
            if not proof["ok"]:
                raise ControlNotApplied(
                    f"{proof['tag']}: {proof['reason']}", candidate=self.server.candidate.name
                )

    def _transport_failed(self, exc: httpx.TransportError) -> None:
        __tracebackhide__ = True
        # A dying process closes its sockets a moment before it can be reaped: give liveness a
        # short grace so a crash reads as ServerDied, not as a bare transport error.
        deadline = time.monotonic() + DEATH_GRACE_S
        while self.server.launcher.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.server.check_alive()
        raise exc

    def request(
        self,
        tag: str,
        method: str,
        path: str,
        body: Any = None,
        timeout: float | None = None,
        prompt_tokens: int | None = None,
    ) -> Exchange:
        """``prompt_tokens``: the prompt's length where the gate knows it, for its deadline."""
        timeout = self.timeout_for(body, prompt_tokens) if timeout is None else timeout
        watched = self._sent(tag, body)
        began = time.perf_counter()
        try:
            response = self.server.http.request(method, path, json=body, timeout=timeout)
        except httpx.TimeoutException as exc:
            self._record(tag, method, path, body, error=repr(exc), timeout_s=timeout)
            self._timed_out(body, timeout, prompt_tokens)
            raise
        except httpx.TransportError as exc:
            self._record(tag, method, path, body, error=repr(exc))
            self._transport_failed(exc)
            raise
        elapsed = round(time.perf_counter() - began, 6)
        parsed = _parse(response)
        self._record(
            tag, method, path, body, status=response.status_code, response=parsed, elapsed_s=elapsed
        )
        self.server.died_behind(response.status_code)
        if watched:
            usage = parsed.get("usage") if isinstance(parsed, dict) else None
            watched.answered(tag, (usage or {}).get("completion_tokens"))
        return Exchange(tag, response.status_code, parsed, elapsed, self.server.candidate.name)

    def _sent(self, tag: str, body: Any) -> Watch | None:
        """Tell the watch of a generating request; the watch to tell of its end, if any."""
        if self.watch is None or not _generating(body):
            return None
        self.watch.sent(tag, body.get("max_tokens"))
        return self.watch

    def chat(self, tag: str, body: dict[str, Any], timeout: float | None = None,
             prompt_tokens: int | None = None) -> Exchange:  # fmt: skip
        return self.request(tag, "POST", "/v1/chat/completions", body, timeout, prompt_tokens)

    def complete(self, tag: str, body: dict[str, Any], timeout: float | None = None,
                 prompt_tokens: int | None = None) -> Exchange:  # fmt: skip
        """A text completion (``/v1/completions``: a plain prompt, no chat template)."""
        return self.request(tag, "POST", "/v1/completions", body, timeout, prompt_tokens)

    def stream_chat(self, tag: str, body: dict[str, Any], timeout: float | None = None,
                    prompt_tokens: int | None = None) -> Stream:  # fmt: skip
        body = {**body, "stream": True}
        timeout = self.timeout_for(body, prompt_tokens) if timeout is None else timeout
        watched = self._sent(tag, body)
        began = time.perf_counter()
        try:
            result = self._stream(tag, body, began, timeout)
        except httpx.TimeoutException as exc:
            self._record(tag, "POST", "/v1/chat/completions", body, error=repr(exc))
            self._timed_out(body, timeout, prompt_tokens)
            raise
        except httpx.TransportError as exc:
            self._record(tag, "POST", "/v1/chat/completions", body, error=repr(exc))
            self._transport_failed(exc)
            raise
        result.e2e_s = round(time.perf_counter() - began, 6)
        self._record(
            tag,
            "POST",
            "/v1/chat/completions",
            body,
            status=result.status,
            chunks=[{"t": t, "data": c} for t, c in zip(result.times, result.chunks, strict=True)],
            error_body=result.error_body,
            e2e_s=result.e2e_s,
            **({"malformed": result.malformed} if result.malformed else {}),
        )
        self.server.died_behind(result.status)
        if result.malformed:
            first = result.malformed[0]
            raise MalformedReply(
                f"{tag}: HTTP 200 stream with {len(result.malformed)} data line(s) that are not "
                f"a JSON object, the first at {first['t']} s: {excerpt(first['line'])}",
                candidate=self.server.candidate.name,
            )
        if watched:
            usage = result.usage() or {}
            watched.answered(tag, usage.get("completion_tokens") or result.content_chunks())
        return result

    def _stream(self, tag: str, body: dict[str, Any], began: float, timeout: float) -> Stream:
        with self.server.http.stream(
            "POST", "/v1/chat/completions", json=body, timeout=timeout
        ) as response:
            result = Stream(tag, response.status_code)
            if response.status_code != 200:
                response.read()
                result.error_body = _parse(response)
                return result
            for line in response.iter_lines():
                now = time.perf_counter()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    continue  # read to the end: the connection then stays reusable
                try:
                    chunk = json.loads(data)
                except ValueError:
                    chunk = None
                if not isinstance(chunk, dict):  # kept apart, so every chunk reads as one
                    result.malformed.append({"t": round(now - began, 6), "line": data})
                    continue
                result.chunks.append(chunk)
                result.times.append(round(now - began, 6))
                if self.watch is not None:
                    self.watch.streamed(tag, len(result.chunks))
        return result
