"""Client-side cost per streamed chunk of the throughput gate's measuring loop, no engine in
the way.

A recorded stream (one real completion of the local candidate, recorded through the gate's own
``Api.stream_chat``; or ``--from`` a gate artifact) is replayed by a stdlib HTTP server on
127.0.0.1 in a separate process, the whole SSE body in one write per request (chunked transfer
encoding, one HTTP chunk per event, as uvicorn/sse-starlette send it). The client is the gate's
code unchanged: ``Api.stream_chat`` (httpx line iteration, ``json.loads``, ``perf_counter``
timestamp, append) and its JSONL record. As every byte is already there when the client reads,
the gap between two chunk timestamps is the client's own processing time for one chunk.

    python benchmarks/harness_overhead.py [--streams 200] [--from path/to/throughput.jsonl]

Prints the median (and p90/p99) per-chunk gap, and the whole call's time per chunk including
the request and the JSONL record written after the stream.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from _bench import LOCAL_CANDIDATE, load_text, local_server, pin_process, results_dir, split_cpus

from tp2qual.artifacts.layout import Evidence
from tp2qual.candidate import load_candidate
from tp2qual.checks.stats import percentile
from tp2qual.perf.throughput import request_body
from tp2qual.redact import Redactor
from tp2qual.serving.logsink import LogSink
from tp2qual.serving.server import Server


def record_stream(max_tokens: int) -> list[dict[str, Any]]:
    """One real streamed completion of the local candidate, through the gate's own Api."""
    folder = results_dir("harness-record")
    with local_server(folder) as run:
        settings = {"prompt_words": 96, "max_tokens": max_tokens, "min_tokens": max_tokens}
        body = request_body(run.candidate, settings, 1)
        stream = run.server.api("recorded.jsonl").stream_chat("record", body)
    return stream.chunks


def chunks_from_artifact(path: Path) -> list[dict[str, Any]]:
    """The longest successful stream in a gate artifact (lines with ``chunks``)."""
    best: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        chunks = [c["data"] for c in record.get("chunks") or []]
        if record.get("status") == 200 and len(chunks) > len(best):
            best = chunks
    if not best:
        raise SystemExit(f"{path}: no successful stream with chunks")
    return best


def sse_body(chunks: list[dict[str, Any]]) -> bytes:
    """The stream as chunked-encoded SSE bytes, one HTTP chunk per event."""
    events = [f"data: {json.dumps(c)}\r\n\r\n".encode() for c in chunks]
    events.append(b"data: [DONE]\r\n\r\n")
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


def _serve(body: bytes, port_out: Any, cpus: set[int]) -> None:
    os.sched_setaffinity(0, cpus)

    class Replay(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            head = (
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n"
            )
            self.wfile.write(head + body)
            self.wfile.flush()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Replay)
    port_out.send(server.server_address[1])
    server.serve_forever()


class ReplayLauncher:
    """Just enough of the launcher protocol for ``Server``: a URL and a live process."""

    kind = "replay"

    def __init__(self, port: int, log_path: Path):
        self.base_url = f"http://127.0.0.1:{port}"
        self.log = LogSink(log_path, Redactor())
        self.candidate = load_candidate(LOCAL_CANDIDATE)

    def poll(self) -> None:
        return None


def measure(server: Server, streams: int) -> tuple[list[float], list[float], int]:
    """Per-chunk gaps (s) of every stream, and each call's total time per chunk."""
    api = server.api("overhead.jsonl")
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "x"}]}
    gaps: list[float] = []
    per_call: list[float] = []
    n_chunks = 0
    for i in range(streams):
        began = time.perf_counter()
        stream = api.stream_chat(f"replay#{i}", body)
        took = time.perf_counter() - began
        n_chunks = len(stream.chunks)
        # times are rounded to 1 µs by the gate; gaps below that read as 0
        gaps += [b - a for a, b in zip(stream.times, stream.times[1:], strict=False)]
        per_call.append(took / n_chunks)
    return gaps, per_call, n_chunks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=200, help="replayed streams (bounded)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--from", dest="source", type=Path, help="a gate JSONL artifact")
    args = parser.parse_args(argv)
    print(f"start: {load_text()}", flush=True)
    chunks = chunks_from_artifact(args.source) if args.source else record_stream(args.max_tokens)
    body = sse_body(chunks)
    print(f"stream: {len(chunks)} chunks, {len(body)} bytes", flush=True)
    server_cpus, client_cpus = split_cpus(0, 1)
    pin_process(os.getpid(), client_cpus)
    parent, child = mp.Pipe()
    replay = mp.get_context("spawn").Process(
        target=_serve, args=(body, child, server_cpus), daemon=True
    )
    replay.start()
    try:
        port = parent.recv()
        with tempfile.TemporaryDirectory() as tmp:
            launcher = ReplayLauncher(port, Path(tmp) / "replay.log")
            server = Server(launcher.candidate, launcher, Evidence(Path(tmp), Redactor()))  # type: ignore[arg-type]
            measure(server, 5)  # warm-up: connection, imports, caches
            gaps, per_call, n = measure(server, args.streams)
            server.close()
    finally:
        replay.terminate()
        replay.join(5)
    ms = [g * 1e3 for g in gaps]
    print(
        f"per-chunk gap (parse + timestamp + append, httpx line iteration included): "
        f"median {statistics.median(ms):.4f} ms, p90 {percentile(ms, 90):.4f} ms, "
        f"p99 {percentile(ms, 99):.4f} ms over {len(ms)} gaps ({args.streams} streams x "
        f"{n} chunks)"
    )
    call = [c * 1e3 for c in per_call]
    print(
        f"whole stream_chat call per chunk (request, stream, JSONL record): "
        f"median {statistics.median(call):.4f} ms, p90 {percentile(call, 90):.4f} ms"
    )
    print(f"target: median per-chunk < 0.1 ms\nend: {load_text()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
