"""Wall time of the local qualification and of the self-tests, each as its own pytest process.

    python benchmarks/wall_time.py [--skip-selftests] [--skip-qualification]

Runs, from the repository root:
  python -m pytest -k smollm2-135m-local -p no:cacheprovider       (all gates, local candidate)
  python -m pytest plugins/tests -p no:cacheprovider                 (the plugin self-tests)
and prints each one's wall time, exit code, FAILED/ERROR lines and pytest's summary line (full
output under results/bench-*-wall-time/). Target for the local qualification: <= 180 s. Each run
is bounded (--timeout-s, default 900 s).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from _bench import ROOT, load_text, results_dir

RUNS = {
    "qualification": ["-k", "smollm2-135m-local", "-p", "no:cacheprovider"],
    "selftests": ["plugins/tests", "-p", "no:cacheprovider"],
}


def timed(args: list[str], timeout_s: float, log: Path) -> tuple[float, int | None, list[str]]:
    """Wall time, exit code, and the summary plus FAILED/ERROR lines; full output in ``log``."""
    command = [sys.executable, "-m", "pytest", *args]
    began = time.monotonic()
    with log.open("w") as out:
        try:
            done = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout_s, check=False)  # fmt: skip
            code: int | None = done.returncode
        except subprocess.TimeoutExpired:
            code = None
    took = time.monotonic() - began
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    notes = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    last = lines[-1] if lines else "(no output)"
    return took, code, [*notes, last if code is not None else f"killed after {timeout_s:.0f}s"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-selftests", action="store_true")
    parser.add_argument("--skip-qualification", action="store_true")
    parser.add_argument("--timeout-s", type=float, default=900.0)
    args = parser.parse_args(argv)
    chosen = [
        name
        for name in RUNS
        if not (name == "selftests" and args.skip_selftests)
        and not (name == "qualification" and args.skip_qualification)
    ]
    folder = results_dir("wall-time")
    for name in chosen:
        print(f"{name}: python -m pytest {' '.join(RUNS[name])}  [{load_text()}]", flush=True)
        took, code, notes = timed(RUNS[name], args.timeout_s, folder / f"{name}.log")
        print(f"  wall {took:7.1f} s  exit {code}  [{load_text()}]", flush=True)
        print("\n".join(f"    {line}" for line in notes), flush=True)
    print(f"logs: {folder}")
    print("target: local qualification (all gates) <= 180 s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
