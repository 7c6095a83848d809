"""Ctrl-C under load: the interrupt self-test, N times, with CPU-bound neighbours.

    python benchmarks/interrupt_under_load.py [--runs N] [--hogs N] [--timeout-s S] [--case C]

Starts one busy-looping process per usable core (``--hogs``), then runs
``plugins/tests/test_interrupt.py`` N times, one after the other, each as its own pytest run,
and prints each run's outcome and wall time, then ``passed/runs``. Each run is the self-test's two
real cases: SIGINT to a qualification of the embedded local candidate during its server's
start-up and mid-gate, each requiring INCOMPLETE, the server's process group gone, its port
free (``--case`` runs one of them). A lost Ctrl-C shows here as a failed run (its output and
JUnit report are kept in the results folder); the end prints each case's count too.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from _bench import ROOT, load_text, results_dir

TEST = "plugins/tests/test_interrupt.py"
CASES = ("start-up", "mid-gate")  # the self-test's parameters


def pytest_command(case: str | None, junit: Path) -> list[str]:
    selected = "leaves_nothing_running" + (f" and {case}" if case else "")
    return [sys.executable, "-m", "pytest", TEST, "-k", selected, "-q", "-p", "no:cacheprovider",
            f"--junitxml={junit}"]  # fmt: skip


def passed_cases(junit: Path) -> list[str]:
    """The cases that passed in one run, from its JUnit report (none when it wrote none)."""
    if not junit.exists():
        return []
    passed = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome = {child.tag for child in case} & {"failure", "error", "skipped"}
        if not outcome:
            passed.append(str(case.get("name", "")).rsplit("[", 1)[-1].rstrip("]"))
    return passed


def spin() -> None:
    while True:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--hogs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per run")
    parser.add_argument("--case", choices=CASES, help="only this case (default: both)")
    args = parser.parse_args(argv)
    folder = results_dir("interrupt-under-load")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    hogs = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    passed = 0
    per_case: Counter[str] = Counter()
    try:
        time.sleep(2.0)  # let the load settle in
        print(f"{args.hogs} CPU-bound processes; {load_text()}", flush=True)
        for n in range(1, args.runs + 1):
            log = folder / f"run-{n:02d}.log"
            junit = folder / f"run-{n:02d}.xml"
            began = time.monotonic()
            try:
                done = subprocess.run(
                    pytest_command(args.case, junit),
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
            per_case.update(passed_cases(junit))
            print(f"run {n:2d}/{args.runs}: {outcome:22s} {took:6.1f} s  {load_text()}", flush=True)
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.join()
    counted = [args.case] if args.case else CASES
    cases = ", ".join(f"{c} {per_case[c]}/{args.runs}" for c in counted)
    print(f"interrupt under load: {passed}/{args.runs} passed ({cases}; logs: {folder})")
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
