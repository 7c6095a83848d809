"""A fault-injecting HTTP proxy in front of a real engine, for the gates' self-tests.

It *is* the server process a candidate launches::

    python faultproxy.py --fault NAME --listen-port PORT -- <engine argv with {upstream_port}>

It starts the engine as its child on a free port (same process group: the launcher's killpg
reaches both; the child is also killed when the proxy exits or gets SIGTERM), the child writes
into the proxy's own stdout (so the launcher's log has the engine's lines), and every request is
forwarded — streams chunk by chunk — with exactly one fault injected:

    none                  forward untouched (the proxy is transparent)
    wrong_model           /v1/models lists a path-like id instead of the served name
    wrong_answer          non-tool chat answers replaced by a wrong one
    nondeterministic      a changing counter appended to chat answers
    repetition            chat answers with max_tokens >= 64 become '+' * 600 (the deterministic
                          gate asks for 32 tokens and passes; the repetition gate asks for 64)
    bad_tool_args         tool-call arguments replaced by ones the tool's schema rejects
    twin_500              the first non-streamed tool request that repeats a streamed one (gate
                          05's non-streamed twin of a streamed call) answered HTTP 500; the
                          repeats of a non-streamed mode's own request pass
    tool_flaky            a flaky tool-call parser: each non-streamed answer to a tool request
                          has its calls' arguments replaced by ones the schema rejects with
                          probability --rate (default 0.2: one call in five), drawn in request
                          order from random.Random(--seed); rate and seed said at start, and
                          each broken request by its number ("fault tool_flaky: broke ...")
    over_bound_accepted   the engine's 400 for an over-length prompt becomes a 200 answer
    over_bound_500        ... becomes a 500
    over_bound_in_stream  a streamed chat request the engine rejects for its length (asked again
                          non-streamed, max_tokens 1: llama-cpp-python rejects only that way)
                          is answered as SGLang 0.5.23 answers one its scheduler refuses: HTTP
                          200, the error as the stream's first chunk, then [DONE]
    exit_startup          print a line, exit 3 before serving
    exit_midrun           serve through readiness and model_list, then die (code 7), killing
                          the engine, on the first chat request with max_tokens > 1
    logprob_drift         the same tokens, but from the 9th answer token on every logprob (and
                          top logprob) lower by 1.0: a numerics drift that starts mid-answer and
                          keeps every argmax (vllm #52938's shape; only logprobs show it); on
                          chat answers and on legacy completions alike
    slow_decode           correct answers, slowly: each streamed piece waits --delay-s first, and
                          a whole answer waits --delay-s per completion token (a slow serve);
                          with --stretch F instead, each streamed piece after the first is passed
                          on once its time since the first, as the engine sent it, is F times
                          longer: the engine's own streamed decode rate divided by F whatever the
                          machine's load (F = 2: half its rate), TTFT as the engine's, whole
                          (non-streamed) answers as the engine gave them
    replay_exit           print a real failure log (--replay FILE, e.g. an NCCL CUDA 999 from the
                          diagnosis corpus) as the engine's start-up output, then exit 1
    replay_hang           print it, then never serve (a start-up that hangs)

On legacy completions (``POST /v1/completions`` decodes; an ``echo: true`` reread, the engine's
prefill, passes untouched), rewritten by completionfaults.py, text and offsets kept consistent:
    second_choice         at answer tokens 16, 23, 30, ... the row's second choice is taken,
                          with its own logprob (the row unchanged)
    late_drift            the same tokens, the row altered to show each as top-1 (argmax kept)
    early_eos             the answer cut to half its tokens, finish_reason "stop"
    long_context_drift    late_drift, only on prompts longer than --long-chars characters

A malformed HTTP 200 (each spares the first chat answer, readiness's one real token):
    no_choices            a chat answer's body without its ``choices``
    empty_choices         ... with ``choices: []`` (``usage`` kept)
    no_message            ... whose choice 0 carries no ``message``
    no_usage              ... without ``usage`` (no prompt or completion token count)
    not_json              ... replaced by an HTML error page, still HTTP 200
    stream_not_json       a streamed chat answer with one data line that is not JSON first
    version_hang          ``GET /version`` answered only after --delay-s (the suite's version
                          look-up gives up at 5 s)
"""

from __future__ import annotations

import argparse
import atexit
import itertools
import json
import os
import queue
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from completionfaults import COMPLETION_FAULTS, DRIFT, DRIFT_FROM, LONG_CHARS, completion_fault

MALFORMED = ("no_choices", "empty_choices", "no_message", "no_usage", "not_json")
NOT_JSON_PAGE = b"<html><body>502 Bad Gateway (injected)</body></html>"
NOT_JSON_LINE = b"data: <!-- upstream hiccup (injected) -->\n\n"
FAULTS = (
    "none",
    "wrong_model",
    "wrong_answer",
    "nondeterministic",
    "repetition",
    "bad_tool_args",
    "twin_500",
    "tool_flaky",
    "over_bound_accepted",
    "over_bound_500",
    "over_bound_in_stream",
    "exit_startup",
    "exit_midrun",
    "logprob_drift",
    "second_choice",
    "late_drift",
    "early_eos",
    "long_context_drift",
    "slow_decode",
    "replay_exit",
    "replay_hang",
    *MALFORMED,
    "stream_not_json",
    "version_hang",
)
REPETITION_MIN_TOKENS = 64
BAD_ARGUMENTS = '{"city": 42, "extra": true}'
WRONG_ANSWER = "I am not sure; perhaps Berlin."
STARTUP_EXIT_CODE, MIDRUN_EXIT_CODE = 3, 7
TWIN_ERROR = {"error": {"message": "injected: twin request failed", "type": "server_error"}}

fault = "none"
delay_s = 0.05
stretch = 0.0  # slow_decode: > 0 stretches the engine's own timing instead of a fixed delay
long_chars = LONG_CHARS  # long_context_drift: the prompt length from which it applies
upstream = ""
child: subprocess.Popen[bytes] | None = None
counter = itertools.count(1)
tool_requests: set[str] = set()  # twin_500: streamed tool requests seen, less their stream
twin_failed = threading.Event()
flaky = random.Random(0)  # tool_flaky's draws, seeded by --seed in main()
flaky_rate = 0.2
flaky_lock = threading.Lock()
tool_answers = itertools.count(1)  # tool_flaky: non-streamed tool answers, numbered
exiting = threading.Event()
chats_answered = itertools.count()  # the malformed faults spare the first (readiness's token)


def say(text: str) -> None:
    print(f"faultproxy[{os.getpid()}]: {text}", flush=True)


def die(code: int, why: str) -> None:
    """Kill the engine, say when, and leave at once (no cleanup: a crash)."""
    exiting.set()
    if child is not None and child.poll() is None:
        child.kill()
        child.wait()
    say(f"{why}; exiting with code {code} at {time.time():.3f}")
    os._exit(code)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rewrite(method: str, path: str, request: dict, status: int, body: bytes) -> tuple[int, bytes]:
    """The fault applied to one complete (non-streamed) upstream answer."""
    chat = method == "POST" and path.startswith("/v1/chat/completions")
    if fault == "wrong_model" and method == "GET" and path.startswith("/v1/models"):
        data = json.loads(body)
        for card in data.get("data", []):
            card["id"] = f"/models/{card['id']}.gguf"
        return status, json.dumps(data).encode()
    if chat and status == 400 and fault == "over_bound_accepted":
        message = {"role": "assistant", "content": "Lisbon."}
        answer = {
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 2048, "completion_tokens": 2, "total_tokens": 2050},
        }
        return 200, json.dumps(answer).encode()
    if chat and status == 400 and fault == "over_bound_500":
        error = {"error": {"message": "internal error", "type": "server_error"}}
        return 500, json.dumps(error).encode()
    completions = method == "POST" and path.startswith("/v1/completions")
    if completions and status == 200 and fault in COMPLETION_FAULTS:
        data = json.loads(body)
        faulty = completion_fault(fault, request, data, long_chars)
        return status, body if faulty is data else json.dumps(faulty).encode()
    if not chat or status != 200:
        return status, body
    if fault in MALFORMED and next(chats_answered) > 0:
        return status, malformed(json.loads(body))
    if fault == "twin_500" and request.get("tools") and first_repeat(request):
        return 500, json.dumps(TWIN_ERROR).encode()
    data = json.loads(body)
    if fault == "tool_flaky" and request.get("tools"):
        with flaky_lock:
            number, broken = next(tool_answers), breaks(flaky, flaky_rate)
        if broken:
            say(f"fault tool_flaky: broke tool request #{number} (rate {flaky_rate:g})")
            for choice in data.get("choices", []):
                for call in (choice.get("message") or {}).get("tool_calls") or []:
                    call["function"]["arguments"] = BAD_ARGUMENTS
    if fault == "slow_decode" and not stretch > 0:
        time.sleep(delay_s * ((data.get("usage") or {}).get("completion_tokens") or 1))
    tools = bool(request.get("tools"))
    for choice in data.get("choices", []):
        message = choice.get("message") or {}
        if fault == "wrong_answer" and not tools:
            message["content"] = WRONG_ANSWER
        elif fault == "nondeterministic" and not tools:
            message["content"] = f"{message.get('content') or ''} [{next(counter)}]"
        elif fault == "repetition" and not tools:
            if (request.get("max_tokens") or 0) >= REPETITION_MIN_TOKENS:
                message["content"] = "+" * 600
        elif fault == "logprob_drift":
            drift(choice.get("logprobs") or {})
        elif fault == "bad_tool_args" and tools:
            for call in message.get("tool_calls") or []:
                call["function"]["arguments"] = BAD_ARGUMENTS
    return status, json.dumps(data).encode()


def breaks(rng: random.Random, rate: float) -> bool:
    """tool_flaky's one draw per tool answer: broken with probability ``rate`` (the pure
    simulation in test_tool_call_power.py draws the same way)."""
    return rng.random() < rate


def malformed(data: dict) -> bytes:
    """A 200 chat answer broken as the fault says (``not_json``: not even JSON)."""
    if fault == "not_json":
        return NOT_JSON_PAGE
    if fault == "no_choices":
        data.pop("choices", None)
    elif fault == "empty_choices":
        data["choices"] = []
    elif fault == "no_message":
        for choice in data.get("choices") or []:
            choice.pop("message", None)
    elif fault == "no_usage":
        data.pop("usage", None)
    return json.dumps(data).encode()


def unstreamed(request: dict) -> str:
    """A request as its non-streamed twin would send it, as a key."""
    plain = {k: v for k, v in request.items() if k not in ("stream", "stream_options")}
    return json.dumps(plain, sort_keys=True)


def first_repeat(request: dict) -> bool:
    """Whether this non-streamed request repeats a streamed one seen before, for the first
    time (the streamed ones are noted as they pass, in ``Handler.forward``)."""
    if unstreamed(request) not in tool_requests or twin_failed.is_set():
        return False
    twin_failed.set()
    return True


def sglang_stream_error(engine_error: bytes) -> bytes:
    """SGLang 0.5.23's in-stream over-length rejection, with the engine's own numbers: the
    scheduler's message (srt/managers/utils.py validate_input_length) in the chunk
    serving_chat.py _generate_chat_stream yields (create_streaming_error_response)."""
    text = json.dumps(json.loads(engine_error or b"{}"))
    limit = re.search(r"maximum context length is (\d+)", text)
    asked = re.search(r"(\d+) in the messages|contains at least (\d+)|requested (\d+)", text)
    m = limit.group(1) if limit else "0"
    n = next((g for g in asked.groups() if g), "0") if asked else "0"
    message = (
        f"Input length ({n} tokens) exceeds the maximum allowed length ({m} tokens). "
        "Use a shorter input or enable --allow-auto-truncate."
    )
    error = {"object": "error", "message": message, "type": "BAD_REQUEST", "code": 400}
    error["param"] = None
    return f"data: {json.dumps({'error': error})}\n\ndata: [DONE]\n\n".encode()


def drift(logprobs: dict) -> None:
    for entry in (logprobs.get("content") or [])[DRIFT_FROM:]:
        entry["logprob"] -= DRIFT
        for top in entry.get("top_logprobs") or []:
            top["logprob"] -= DRIFT


class Handler(BaseHTTPRequestHandler):
    """HTTP/1.0: one request per connection, a stream ends when the connection closes."""

    client: httpx.Client

    def do_GET(self) -> None:
        self.forward()

    def do_POST(self) -> None:
        self.forward()

    def forward(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            request = json.loads(raw) if raw else {}
        except ValueError:
            request = {}
        chat = self.path.startswith("/v1/chat/completions")
        if fault == "version_hang" and self.path.startswith("/version"):
            say(f"fault version_hang: holding {self.path} for {delay_s:g} s")
            time.sleep(delay_s)
        if fault == "exit_midrun" and chat and (request.get("max_tokens") or 0) > 1:
            die(MIDRUN_EXIT_CODE, f"fault exit_midrun: dying on {self.path}")
        # A fresh upstream connection per request: an engine that closes its connection after
        # a broken stream (llama-cpp-python after a streamed over-length prompt) must not turn
        # the next request into the proxy's "connection reset" 502.
        headers = {
            "Content-Type": self.headers.get("Content-Type", "application/json"),
            "Connection": "close",
        }
        if fault == "twin_500" and chat and request.get("stream") and request.get("tools"):
            tool_requests.add(unstreamed(request))
        if fault == "over_bound_in_stream" and chat and request.get("stream"):
            rejected = self.rejected_for_length(request, headers)
            if rejected is not None:
                return self.answer(200, sglang_stream_error(rejected), "text/event-stream")
        try:
            upstream_request = self.client.build_request(
                self.command, upstream + self.path, content=raw, headers=headers
            )
            response = self.client.send(upstream_request, stream=True)
        except httpx.TransportError as exc:
            return self.answer(502, json.dumps({"error": f"upstream: {exc!r}"}).encode())
        try:
            kind = response.headers.get("Content-Type", "application/json")
            if not kind.startswith("text/event-stream"):
                status, body = rewrite(
                    self.command, self.path, request, response.status_code, response.read()
                )
                return self.answer(status, body, kind)
            self.send_response(response.status_code)
            self.send_header("Content-Type", kind)
            self.end_headers()
            if fault == "stream_not_json" and chat and response.status_code == 200:
                self.wfile.write(NOT_JSON_LINE)
            for piece in (
                stretched(response)
                if fault == "slow_decode" and stretch > 0
                else response.iter_raw()
            ):
                if fault == "slow_decode" and not stretch > 0:
                    time.sleep(delay_s)
                self.wfile.write(piece)
                self.wfile.flush()
            return None
        finally:
            response.close()

    def rejected_for_length(self, request: dict, headers: dict) -> bytes | None:
        """The engine's 400 body for this request asked non-streamed (1 token), or None."""
        plain = {k: v for k, v in request.items() if k not in ("stream", "stream_options")}
        try:
            got = self.client.post(
                upstream + self.path, json={**plain, "max_tokens": 1}, headers=headers
            )
        except httpx.TransportError:
            return None
        return got.content if got.status_code == 400 else None

    def answer(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args: object) -> None:
        say("access " + fmt % args)


def stretched(response: httpx.Response) -> Iterator[bytes]:
    """The stream's pieces, each once its time since the first, as the engine sent it, is
    ``stretch`` times longer (a reader thread keeps the engine's own arrival times)."""
    arrived: queue.Queue[tuple[float, bytes] | None] = queue.Queue()

    def read() -> None:
        try:
            for piece in response.iter_raw():
                arrived.put((time.monotonic(), piece))
        finally:
            arrived.put(None)

    threading.Thread(target=read, daemon=True).start()
    first: tuple[float, float] | None = None  # (engine's time, ours) of the first piece
    while (item := arrived.get()) is not None:
        at, piece = item
        if first is None:
            first = (at, time.monotonic())
        else:
            time.sleep(max(0.0, first[1] + (at - first[0]) * stretch - time.monotonic()))
        yield piece


def watch_child() -> None:
    """The engine exiting on its own ends the proxy with the engine's exit code."""
    assert child is not None
    code = child.wait()
    if not exiting.is_set():
        die(code if code > 0 else 1, f"engine exited by itself (code {code})")


def on_sigterm(signum: int, frame: object) -> None:
    exiting.set()
    if child is not None and child.poll() is None:
        child.terminate()
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            child.kill()
    os._exit(0)


def kill_child() -> None:
    if child is not None and child.poll() is None:
        child.kill()


def replay(path: str, *, hang: bool) -> None:
    """The engine's start-up, as a real failing one printed it; then die, or hang silently."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            print(line.rstrip("\n"), flush=True)
    if not hang:
        die(1, "fault replay_exit: start-up failed as in the replayed log")
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        time.sleep(1)


def main() -> None:
    global fault, delay_s, stretch, long_chars, upstream, child, flaky, flaky_rate
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fault", choices=FAULTS, required=True)
    parser.add_argument("--listen-port", type=int, required=True)
    parser.add_argument("--delay-s", type=float, default=delay_s, help="slow_decode's delay")
    parser.add_argument(
        "--stretch", type=float, default=0.0, help="slow_decode: the engine's timing times this"
    )
    parser.add_argument("--rate", type=float, default=0.2, help="tool_flaky's break rate")
    parser.add_argument("--seed", type=int, default=0, help="tool_flaky's random seed")
    parser.add_argument("--replay", default="", help="the log replay_* print at start-up")
    parser.add_argument(
        "--long-chars",
        type=int,
        default=LONG_CHARS,
        help="long_context_drift: only prompts longer than this many characters",
    )
    parser.add_argument("engine", nargs=argparse.REMAINDER, help="-- engine argv")
    args = parser.parse_args()
    fault, delay_s, stretch, long_chars = args.fault, args.delay_s, args.stretch, args.long_chars
    argv = args.engine[1:] if args.engine[:1] == ["--"] else args.engine
    say(f"fault {fault}, listening on 127.0.0.1:{args.listen_port}")
    if fault == "tool_flaky":
        flaky, flaky_rate = random.Random(args.seed), args.rate
        say(f"fault tool_flaky: rate {args.rate:g}, seed {args.seed}")
    if fault.startswith("replay_"):
        replay(args.replay, hang=fault == "replay_hang")
    if fault == "exit_startup":
        time.sleep(1.0)  # readiness is polling by now: the exit must be noticed, not timed out
        say("fault exit_startup: simulated start-up crash (CUDA error: out of memory)")
        die(STARTUP_EXIT_CODE, "fault exit_startup")
    port = free_port()
    upstream = f"http://127.0.0.1:{port}"
    signal.signal(signal.SIGTERM, on_sigterm)
    atexit.register(kill_child)
    child = subprocess.Popen([a.replace("{upstream_port}", str(port)) for a in argv])
    say(f"engine pid {child.pid} on upstream port {port}")
    threading.Thread(target=watch_child, daemon=True).start()
    Handler.client = httpx.Client(trust_env=False, timeout=httpx.Timeout(600.0, connect=5.0))
    server = ThreadingHTTPServer(("127.0.0.1", args.listen_port), Handler)
    server.daemon_threads = True
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
