"""Command line: ``python -m tp2qual verify|report results/<run>`` (or ``results/latest``),
``python -m tp2qual compare RUN [RUN…] [--format table|csv|json]``,
``python -m tp2qual diagnose LOG… [--tp N] [--env KEY=VALUE…] [--json]``.

verify    re-hashes every artifact against the manifest and re-derives every claim and verdict
          from the raw records; exit 1 on any problem, one line per problem (and per failure
          that stands on its reason alone, a NOTE), then a summary line. ``--rehash`` also
          hashes the model's bytes again.
report    (re)builds ``report.html`` in the run folder from what is on disk.
compare   the report's overview in the terminal: one row per candidate per run given (its
          ratios to its reference with CIs, the floors and their bases, agreement and accuracy
          figures, what its verdict rests on); with one run, each of its candidates across the
          earlier dated runs beside it too. Exit 2 when a RUN is not a run folder.
restore   gives back the serves a run took the GPUs from (its ``handover.json``), when the suite
          was killed before it could: starts each in recorded order, waits until healthy, and
          records the after-state; exit 0 when every serve is back as found, 1 when not, 2 when
          there is no record or no Docker engine.
diagnose  names the cause of a failed NCCL probe / server start-up from pasted logs, with a
          remedy that fits the settings given; exit 0 when no log shows a failure, 1 when one
          does, 2 for bad usage or an unreadable file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from tp2qual.checks.diagnosis import Diagnosis, diagnose
from tp2qual.evidence import overview, overview_table
from tp2qual.evidence.report import write_report
from tp2qual.evidence.verify import resolve_run, verify_run


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tp2qual", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser("verify", help="check a run's artifacts, claims and verdicts")
    verify.add_argument("run", type=Path, help="results/<run-id>, results/latest or results/")
    verify.add_argument(
        "--rehash",
        action="store_true",
        help="hash the model's bytes again (the files identity/model.json names), not trusting "
        "the digests preflight recorded",
    )
    report = commands.add_parser("report", help="(re)build a run's report.html")
    report.add_argument("run", type=Path, help="results/<run-id>, results/latest or results/")
    restore = commands.add_parser("restore", help="give back the serves a killed run took over")
    restore.add_argument("run", type=Path, help="results/<run-id> or results/latest")
    compare = commands.add_parser("compare", help="candidates' figures side by side, across runs")
    compare.add_argument("runs", type=Path, nargs="+", metavar="RUN", help="results/<run-id>…")
    compare.add_argument(
        "--format", choices=("table", "csv", "json"), default="table", help="default: table"
    )
    diag = commands.add_parser("diagnose", help="name the cause of a failure in NCCL/engine logs")
    diag.add_argument("logs", type=Path, nargs="+", metavar="LOG", help="log file(s), '-' = stdin")
    diag.add_argument("--tp", type=int, help="tensor-parallel size the logs ran with")
    diag.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="a setting in force"
    )
    diag.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


class UsageError(Exception):
    """Bad arguments or an unreadable file: one line on stderr, exit 2."""


def _env(pairs: Sequence[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--env expects KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def _read(path: Path) -> str:
    if str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text(errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def _print_diagnosis(path: Path, result: Diagnosis) -> None:
    print(f"{path}: {result.headline()}")
    for f in result.findings:
        print(f"  [{f.severity}] {f.rule} ({f.confidence} confidence)")
        print(f"    cause:  {f.cause}")
        for no, text in f.evidence:
            print(f"    {no:>6}: {text}")
        print(f"    remedy: {f.remedy}")


def _diagnose(args: argparse.Namespace) -> int:
    if args.tp is not None and args.tp < 1:
        raise UsageError("--tp must be 1 or more")
    env = _env(args.env)
    texts = [(path, _read(path)) for path in args.logs]  # all readable before any output
    results = [(path, diagnose(text, tp=args.tp, env=env)) for path, text in texts]
    verdicts = {r.verdict for _, r in results}
    verdict = next((v for v in ("failed", "incomplete") if v in verdicts), "ok")
    if args.json:
        findings = [{"log": str(p), **f.as_dict()} for p, r in results for f in r.findings]
        print(json.dumps({"verdict": verdict, "findings": findings}, indent=2))
    else:
        for path, result in results:
            _print_diagnosis(path, result)
    return 1 if verdict == "failed" else 0


def _verify(run: Path, *, rehash: bool = False) -> int:
    result = verify_run(run, rehash=rehash)
    for problem in [*result.problems, *result.notes, *result.cuts]:
        print(problem.line())
    for line in result.passes():
        print(line)
    print(result.summary())
    return 0 if result.ok else 1


def _restore(run: Path) -> int:
    from tp2qual.serving.handover import HandOverRefused, restore_run

    try:
        record = restore_run(resolve_run(run), print)
    except HandOverRefused as exc:
        print(f"tp2qual restore: {exc}", file=sys.stderr)
        return 2
    if record["restored"]:
        print(f"restored: every serve back as found (down {record.get('down_s')} s)")
        return 0
    print(f"NOT RESTORED: {record['problems']}")
    return 1


def _report(run: Path) -> int:
    print(write_report(resolve_run(run), verify_run(run)))
    return 0


def _compare(runs: Sequence[Path], shape: str) -> int:
    dirs = [resolve_run(run) for run in runs]
    if bad := [str(run) for run, d in zip(runs, dirs, strict=True) if not d.is_dir()]:
        print(f"tp2qual compare: not a run folder: {', '.join(bad)}", file=sys.stderr)
        return 2
    if len(dirs) == 1:  # one run: its candidates and their history
        now = overview.summarize_run(dirs[0])
        rows = [r for c in now for r in overview.history(dirs[0], c.candidate)]
    else:
        rows = [r for d in dict.fromkeys(dirs) for r in overview.summarize_run(d)]
        rows.sort(key=lambda r: (r.candidate, r.run_id))
    if not rows:
        print(f"tp2qual compare: no finding in {', '.join(map(str, runs))}", file=sys.stderr)
        return 2
    if shape == "table":
        print("\n".join(overview_table.table(rows)))
    else:
        print(
            overview_table.to_csv(rows) if shape == "csv" else overview_table.to_json(rows), end=""
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # argparse itself exits 2 on bad usage
    if args.command == "compare":
        return _compare(args.runs, args.format)
    if args.command == "diagnose":
        try:
            return _diagnose(args)
        except UsageError as exc:
            print(f"tp2qual diagnose: {exc}", file=sys.stderr)
            return 2
    if not resolve_run(args.run).is_dir():
        print(f"tp2qual: {args.run} is not a run folder", file=sys.stderr)
        return 2
    if args.command == "verify":
        return _verify(args.run, rehash=args.rehash)
    if args.command == "restore":
        return _restore(args.run)
    return _report(args.run)


if __name__ == "__main__":
    sys.exit(main())
