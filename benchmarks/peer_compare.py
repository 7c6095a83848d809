"""The suite's throughput measurement side by side with NVIDIA AIPerf on one running server.

Starts the embedded local candidate once (the suite's ProcessLauncher + wait_ready), then in
alternating rounds measures it with the gate's own code (``tp2qual.throughput.measure``:
Api.stream_chat + token count + sampling.sample) and with AIPerf 0.13.0 (its own virtualenv under
``.cache/aiperf-venv``, installed on first use). Both send the same request bodies (the gate's
prompts, temperature 0, seed, max_tokens = min_tokens so every output runs to the same length),
one at a time, warm-up excluded. Both count output tokens with the same tokenizer (the suite asks
the server's ``/extras/tokenize``; AIPerf uses a Hugging Face tokenizer built from the same GGUF;
the script checks that they agree). The server is pinned to one core, both clients to the other.

    python benchmarks/peer_compare.py [--rounds 3] [--samples 5] [--max-tokens 128]

Prints TTFT, TPOT, decode tokens/s and E2E of both (median over rounds of each round's median),
and the ratio suite/AIPerf for each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _bench import ROOT, Running, load_text, local_server, median, results_dir, split_cpus

from tp2qual.perf.metrics import llama_perf_from_log
from tp2qual.perf.throughput import measure, request_body

AIPERF_VERSION = "0.13.0"
TORCH_VERSION = "2.13.0"  # the CPU wheel on this machine's disk; transformers needs torch for GGUF
VENV = ROOT / ".cache" / "aiperf-venv"
TOKENIZER_DIR = ROOT / ".cache" / "smollm2-tokenizer"
INSTALL_TIMEOUT_S = 1200
AIPERF_TIMEOUT_S = 900
FIGURES = ("ttft_s", "tpot_s", "decode_tok_s", "e2e_s")

_MAKE_TOKENIZER = """
import sys
from pathlib import Path
from transformers import AutoTokenizer
gguf, out = Path(sys.argv[1]), sys.argv[2]
AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(out)
"""

_COUNT_TOKENS = """
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
texts = json.load(sys.stdin)
print(json.dumps([len(tok.encode(t, add_special_tokens=False)) for t in texts]))
"""


def ensure_aiperf(gguf: Path) -> Path:
    """The aiperf executable, installing it and the GGUF-derived tokenizer when missing."""
    python, aiperf = VENV / "bin" / "python", VENV / "bin" / "aiperf"
    if not aiperf.exists():
        print(f"installing aiperf=={AIPERF_VERSION} into {VENV} (a few minutes) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        packages = [f"aiperf=={AIPERF_VERSION}", f"torch=={TORCH_VERSION}", "transformers", "gguf"]
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *packages],
            check=True,
            timeout=INSTALL_TIMEOUT_S,
        )
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        subprocess.run(
            [str(python), "-c", _MAKE_TOKENIZER, str(gguf), str(TOKENIZER_DIR)],
            check=True,
            timeout=300,
        )
    return aiperf


def hf_token_counts(texts: list[str]) -> list[int]:
    """Token counts of ``texts`` with the tokenizer AIPerf uses (run in AIPerf's venv)."""
    done = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", _COUNT_TOKENS, str(TOKENIZER_DIR)],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return json.loads(done.stdout)


# --- the suite's side ------------------------------------------------------------------------


def suite_round(run: Running, settings: dict[str, Any], samples: int, rnd: int) -> list[dict]:
    """One round with the gate's own measuring code: request 0 is the warm-up, 1..samples count."""
    api = run.server.api("peer_compare_suite.jsonl")
    name = run.candidate.served_name
    out = []
    for n in range(samples + 1):
        body = request_body(run.candidate, settings, n)
        got = measure(api, f"r{rnd}-{'warmup' if n == 0 else 'sample'}#{n}", body, name)
        finish = (got.stream.chunks[-1].get("choices") or [{}])[0].get("finish_reason")
        if not got.figures.get("ok"):
            raise SystemExit(f"suite request {n} failed: {got.figures}")
        if n:
            out.append({**got.figures, "finish_reason": finish, "text": got.stream.text()})
    return out


# --- AIPerf's side ---------------------------------------------------------------------------


def write_dataset(path: Path, run: Running, settings: dict[str, Any], samples: int) -> None:
    """The gate's prompts, in order, as an AIPerf single_turn file (entry 0 is the warm-up)."""
    with path.open("w", encoding="utf-8") as fh:
        for n in range(samples + 1):
            body = request_body(run.candidate, settings, n)
            fh.write(json.dumps({"text": body["messages"][0]["content"]}) + "\n")


def aiperf_command(
    aiperf: Path, run: Running, dataset: Path, out: Path, settings: dict[str, Any], samples: int
) -> list[str]:
    extra = {
        "max_tokens": settings["max_tokens"],
        "min_tokens": settings["min_tokens"],
        "temperature": 0,
        "seed": 1234,
    }
    return [
        str(aiperf), "profile",
        "--model", run.candidate.served_name,
        "--url", run.launcher.base_url,
        "--endpoint-type", "chat", "--streaming",
        "--tokenizer", str(TOKENIZER_DIR),
        "--input-file", str(dataset), "--custom-dataset-type", "single_turn",
        "--dataset-sampling-strategy", "sequential",
        "--concurrency", "1",
        "--warmup-request-count", "1",
        "--request-count", str(samples),
        "--extra-inputs", json.dumps(extra),
        "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry",
        "--workers-max", "1",
        "--artifact-dir", str(out),
        "--export-outputs-json",
    ]  # fmt: skip


def aiperf_round(
    aiperf: Path, run: Running, folder: Path, settings: dict[str, Any], samples: int, rnd: int
) -> list[dict]:
    dataset = folder / "prompts.jsonl"
    if not dataset.exists():
        write_dataset(dataset, run, settings, samples)
    out = folder / f"aiperf-r{rnd}"
    command = aiperf_command(aiperf, run, dataset, out, settings, samples)
    with (folder / f"aiperf-r{rnd}.log").open("w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                              timeout=AIPERF_TIMEOUT_S, check=False)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"aiperf exited {done.returncode}; see {folder / f'aiperf-r{rnd}.log'}")
    return read_aiperf(out)


def read_aiperf(out: Path) -> list[dict]:
    """Per-request figures of the profiling phase, in the suite's units (s, tok/s)."""
    texts = {
        d["x_request_id"]: d.get("response_text", "")
        for d in json.loads((out / "outputs.json").read_text())["data"]
    }
    rows = []
    for line in (out / "profile_export.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["metadata"].get("benchmark_phase") != "profiling":
            continue
        m = {k: v["value"] for k, v in record["metrics"].items()}
        rows.append({
            "ttft_s": m["time_to_first_token"] / 1e3,
            "e2e_s": m["request_latency"] / 1e3,
            "tpot_s": m["inter_token_latency"] / 1e3,  # AIPerf's "ITL" is TPOT
            "decode_tok_s": m["output_token_throughput_per_user"],
            "output_tokens": m["output_sequence_length"],
            "text": texts.get(record["metadata"]["x_request_id"], ""),
        })  # fmt: skip
    return rows


# --- comparison ------------------------------------------------------------------------------


def round_medians(rows: list[dict]) -> dict[str, float]:
    return {k: median([r[k] for r in rows]) for k in (*FIGURES, "output_tokens")}


def check_tokens(suite_rows: list[dict], peer_rows: list[dict], max_tokens: int) -> list[str]:
    """Both sides count the same text to the same number of tokens, and every output ran to
    max_tokens (finish_reason 'length')."""
    lines = []
    texts = [r["text"] for r in suite_rows]
    hf = hf_token_counts(texts)
    server = [r["output_tokens"] for r in suite_rows]
    lines.append(f"  server /extras/tokenize counts: {server}")
    lines.append(f"  AIPerf's HF tokenizer, same texts: {hf}  agree={hf == server}")
    lines.append(f"  AIPerf output_sequence_length: {[r['output_tokens'] for r in peer_rows]}")
    same = [a["text"] == b["text"] for a, b in zip(suite_rows, peer_rows, strict=False)]
    lines.append(f"  same text per prompt (suite vs AIPerf): {same}")
    finishes = sorted({r["finish_reason"] for r in suite_rows})
    lines.append(f"  suite finish_reason: {finishes} (max_tokens = min_tokens = {max_tokens})")
    return lines


class ServerView:
    """The server's own side of a client round: its CPU time per request over the E2E seen
    (was it slowed by something else on its core?) and llama.cpp's per-completion decode timing
    from its log (``server_metrics.llama_perf_from_log``)."""

    def __init__(self, run: Running):
        self.pid = run.launcher.pid
        self.log = run.launcher.log.path
        self._tck = os.sysconf("SC_CLK_TCK")

    def _cpu(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self._tck

    def begin(self) -> None:
        self._lines = len(self.log.read_text(errors="replace").splitlines())
        self._cpu0, self._t0 = self._cpu(), time.monotonic()

    def end(self, rows: list[dict]) -> dict[str, float]:
        """CPU share over the round and the median of client TPOT / server ms-per-decode-step
        over the measured requests (the round's first perf block is the warm-up's)."""
        cpu = self._cpu() - self._cpu0
        time.sleep(0.3)  # the log sink's thread writes the last block
        lines = self.log.read_text(errors="replace").splitlines()[self._lines :]
        blocks = llama_perf_from_log(lines)[1:]
        ratios = [
            r["tpot_s"] / (b.ms_per_eval / 1e3)
            for r, b in zip(rows, blocks, strict=False)
            if b.ms_per_eval
        ]
        server_tpot = median([b.ms_per_eval / 1e3 for b in blocks if b.ms_per_eval])
        # CPU seconds the server spent per request over the E2E a client saw: < 1 means the
        # server waited for its core (something else ran there) during that client's round.
        share = cpu / (len(rows) + 1) / median([r["e2e_s"] for r in rows])
        return {"server_cpu_share": share, "server_tpot_s": server_tpot,
                "tpot_over_server": median(ratios)}  # fmt: skip


def report(rounds: list[dict[str, dict[str, float]]]) -> list[str]:
    lines = ["", f"{'figure':<14}{'suite':>12}{'AIPerf':>12}{'suite/AIPerf':>14}   per round"]
    for k in FIGURES:
        suite = median([r["suite"][k] for r in rounds])
        peer = median([r["aiperf"][k] for r in rounds])
        per = " ".join(f"{r['suite'][k] / r['aiperf'][k]:.3f}" for r in rounds)
        lines.append(f"{k:<14}{suite:>12.5g}{peer:>12.5g}{suite / peer:>14.4f}   {per}")
    lines.append("")
    lines.append("server side (llama.cpp perf log), per round suite | AIPerf:")
    for key in ("server_cpu_share", "server_tpot_s", "tpot_over_server"):
        per = "  ".join(f"{r['suite'][key]:.4g} | {r['aiperf'][key]:.4g}" for r in rounds)
        lines.append(f"  {key:<18} {per}")
    norm = [r["suite"]["tpot_over_server"] / r["aiperf"]["tpot_over_server"] for r in rounds]
    lines.append(
        f"  TPOT ratio suite/AIPerf, each first divided by the server's own decode step time: "
        f"median {median(norm):.4f} (per round {' '.join(f'{x:.3f}' for x in norm)})"
    )
    return lines


def _short(figures: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.4g}" for k, v in figures.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=5, help="requests per client per round")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--prompt-words", type=int, default=96)
    parser.add_argument("--n-threads", type=int, default=1, help="server's --n_threads")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--no-pin", action="store_true", help="leave CPU affinity alone")
    args = parser.parse_args(argv)
    settings = {"prompt_words": args.prompt_words, "max_tokens": args.max_tokens,
                "min_tokens": args.max_tokens}  # fmt: skip

    folder = results_dir("peer-compare")
    print(f"results: {folder}\nstart: {load_text()}", flush=True)
    from tp2qual.candidate import load_candidate

    gguf = load_candidate(ROOT / "candidates" / "smollm2-135m-local.toml").model_file()
    assert gguf is not None
    aiperf = ensure_aiperf(gguf)
    server_cpus, client_cpus = (
        split_cpus(None, None) if args.no_pin else split_cpus(args.server_cpu, args.client_cpu)
    )
    print(f"server CPUs {sorted(server_cpus)} (--n_threads {args.n_threads}), "
          f"clients CPUs {sorted(client_cpus)}", flush=True)  # fmt: skip
    rounds: list[dict[str, dict[str, float]]] = []
    with local_server(folder, n_threads=args.n_threads, server_cpus=server_cpus,
                      client_cpus=client_cpus) as run:  # fmt: skip
        print(f"ready in {run.readiness.first_token_s}s at {run.launcher.base_url}", flush=True)
        view = ServerView(run)
        for rnd in range(args.rounds):
            order = ("suite", "aiperf") if rnd % 2 == 0 else ("aiperf", "suite")
            rows: dict[str, list[dict]] = {}
            views: dict[str, dict[str, float]] = {}
            for who in order:
                began = time.monotonic()
                view.begin()
                rows[who] = (
                    suite_round(run, settings, args.samples, rnd)
                    if who == "suite"
                    else aiperf_round(aiperf, run, folder, settings, args.samples, rnd)
                )
                views[who] = view.end(rows[who])
                print(f"round {rnd} {who:<6} {time.monotonic() - began:6.1f}s  "
                      f"{_short(round_medians(rows[who]) | views[who])}  {load_text()}",
                      flush=True)  # fmt: skip
            if rnd == 0:
                print("token counting check (round 0):")
                print("\n".join(check_tokens(rows["suite"], rows["aiperf"], args.max_tokens)))
            rounds.append({who: round_medians(r) | views[who] for who, r in rows.items()})
            (folder / f"round-{rnd}.json").write_text(json.dumps(rows, indent=1))
    lines = report(rounds)
    lines.append(f"\nend: {load_text()}")
    print("\n".join(lines))
    (folder / "summary.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    raise SystemExit(main())
