"""Ctrl-C under load: the interrupt self-test, N times, with CPU-bound neighbours.

    python benchmarks/interrupt_under_load.py [--runs N] [--hogs N] [--timeout-s S]

Starts one busy-looping process per usable core (``--hogs``), then runs
``plugins/tests/test_interrupt.py`` N times, one after the other, each as its own pytest run,
and prints each run's outcome and wall time, then ``passed/runs``. Each run is the self-test's two
real cases: SIGINT to a qualification of the embedded local candidate during its server's
start-up and mid-gate, each requiring INCOMPLETE, the server's process group gone, its port
free. A lost Ctrl-C shows here as a failed run (its output is kept in the results folder).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time

from _bench import ROOT, load_text, results_dir

TEST = "plugins/tests/test_interrupt.py"
PYTEST = [sys.executable, "-m", "pytest", TEST, "-k", "leaves_nothing_running", "-q", "-p",
          "no:cacheprovider"]  # fmt: skip


def spin() -> None:
    while True:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--hogs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per run")
    args = parser.parse_args(argv)
    folder = results_dir("interrupt-under-load")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    hogs = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    passed = 0
    try:
        time.sleep(2.0)  # let the load settle in
        print(f"{args.hogs} CPU-bound processes; {load_text()}", flush=True)
        for n in range(1, args.runs + 1):
            log = folder / f"run-{n:02d}.log"
            began = time.monotonic()
            try:
                done = subprocess.run(
                    PYTEST,
                    cwd=ROOT,
                    env=env,
                    stdout=log.open("w"),
                    stderr=subprocess.STDOUT,
                    timeout=args.timeout_s,
                    check=False,
                )
                outcome = f"FAILED (exit {done.returncode})"
                if done.returncode == 0:  # a skip exits 0 too: say so, it proves nothing
                    summary = log.read_text().strip().splitlines()[-1]
                    outcome = "SKIPPED" if "skipped" in summary else "passed"
            except subprocess.TimeoutExpired:
                outcome = f"FAILED (over {args.timeout_s:.0f} s)"
            took = time.monotonic() - began
            passed += outcome == "passed"
            print(f"run {n:2d}/{args.runs}: {outcome:22s} {took:6.1f} s  {load_text()}", flush=True)
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.join()
    print(f"interrupt under load: {passed}/{args.runs} passed (logs: {folder})")
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
