"""Command line: ``python -m tp2qual verify|report results/<run>`` (or ``results/latest``).

verify  re-hashes every artifact against the manifest and re-derives every claim; exit 1 on any
        problem, one line per problem, then a summary line.
report  (re)builds ``report.html`` in the run folder from what is on disk.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .report import write_report
from .verify import resolve_run, verify_run


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tp2qual", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser("verify", help="check a run's artifacts, claims and verdicts")
    verify.add_argument("run", type=Path, help="results/<run-id>, results/latest or results/")
    report = commands.add_parser("report", help="(re)build a run's report.html")
    report.add_argument("run", type=Path, help="results/<run-id>, results/latest or results/")
    return parser


def _verify(run: Path) -> int:
    result = verify_run(run)
    for problem in result.problems:
        print(problem.line())
    print(result.summary())
    return 0 if result.ok else 1


def _report(run: Path) -> int:
    print(write_report(resolve_run(run)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not resolve_run(args.run).is_dir():
        print(f"tp2qual: {args.run} is not a run folder", file=sys.stderr)
        return 2
    return _verify(args.run) if args.command == "verify" else _report(args.run)


if __name__ == "__main__":
    sys.exit(main())
