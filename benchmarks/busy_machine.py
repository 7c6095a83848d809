"""Gate times of the local qualification on a quiet machine and beside CPU-bound neighbours.

    python benchmarks/busy_machine.py [--hogs N] [--threads N] [--timeout-s S]

Runs ``python -m pytest -k smollm2-135m-local`` twice from the repository root: first alone,
then with N foreign CPU-bound processes (default: one per usable core) spinning beside it, and
prints each run's verdict, wall time and per-gate seconds (from its ``finding.json``) side by
side. The embedded candidate sizes its threads to the machine and its time budgets to its
decode floor, so it should PASS in both; the busy run shows how much slack the budgets leave.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

from _bench import ROOT, load_text, results_dir

GATES = ("preflight", "model_list", "deterministic", "repetition", "tool_calls", "capacity",
         "throughput")  # fmt: skip


def spin() -> None:
    while True:
        pass


def qualify(results: Path, timeout_s: float) -> tuple[float, dict]:
    command = [sys.executable, "-m", "pytest", "-k", "smollm2-135m-local", "-p", "no:cacheprovider",
               f"--results={results}", "-q"]  # fmt: skip
    began = time.monotonic()
    with (results.parent / f"{results.name}.log").open("w") as log:
        subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                       timeout=timeout_s, check=False)  # fmt: skip
    took = time.monotonic() - began
    finding = results / "latest" / "smollm2-135m-local" / "finding.json"
    return took, json.loads(finding.read_text()) if finding.exists() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    parser.add_argument("--threads", type=int, help="TP2QUAL_THREADS (default: cores but one)")
    args = parser.parse_args(argv)
    if args.threads:
        os.environ["TP2QUAL_THREADS"] = str(args.threads)
    folder = results_dir("busy-machine")
    runs: dict[str, tuple[float, dict]] = {}
    print(f"idle: {load_text()}", flush=True)
    runs["idle"] = qualify(folder / "idle", args.timeout_s)
    hogs = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    try:
        time.sleep(5)
        print(f"busy ({args.hogs} CPU-bound neighbours): {load_text()}", flush=True)
        runs["busy"] = qualify(folder / "busy", args.timeout_s)
    finally:
        for hog in hogs:
            hog.terminate()
    print(f"\n{'':14}" + "".join(f"{name:>12}" for name in runs))
    print(f"{'verdict':14}" + "".join(f"{f.get('verdict', 'none'):>12}" for _, f in runs.values()))
    print(f"{'wall s':14}" + "".join(f"{took:12.1f}" for took, _ in runs.values()))
    for gate in GATES:
        cells = [(f.get("gates") or {}).get(gate, {}).get("seconds") for _, f in runs.values()]
        shown = [f"{c:12.1f}" if c is not None else f"{'-':>12}" for c in cells]
        print(f"{gate:14}" + "".join(shown))
    for name, (_, finding) in runs.items():
        if finding.get("failed_gate"):
            gate = finding["failed_gate"]
            print(f"{name}: failed {gate}: {finding['gates'][gate]['reason'][:200]}")
    print(f"logs and runs: {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
