"""Healthy spread of gate 07's figures on the real pairs, over N whole qualifications each.

    nice -n 10 python benchmarks/agreement_spread.py [--runs 5] [--groups vllm,llamacpp]
        [--stop-at HH:MM] [--timeout-s 3600] [--retries 1]
    python benchmarks/agreement_spread.py --from results/bench-…-agreement-spread

Pairs (candidate against the reference its file names, checked at the start):
  vllm:     smollm2-135m-vllm-tp2 vs smollm2-135m-vllm (TP2 vs TP1), and the lane
            smollm2-135m-vllm-tp2-no-prefix-cache vs smollm2-135m-vllm-tp2 — one pytest run
  llamacpp: smollm2-135m-docker vs smollm2-135m-local — one pytest run
  sglang:   smollm2-135m-sglang-tp2 vs smollm2-135m-sglang (TP2 vs TP1) — one pytest run
            (not in the default groups: scripts/install.sh sglang first)

Each round runs every group once, as its own pytest process with its own results root
(``--results <folder>/<group>-<round>``), so every run judges against a reference qualified in
that same run (the reference rule takes this run's PASS first). A reference needs a whole PASS
(throughput included), so only the judged candidate's throughput is deselected; the lane's is
not applicable anyway. Figures are read from each run's evidence (``_spread.py``), never from the
terminal. A run whose gate 07 is an ERROR or that a timeout or ``--stop-at`` cut is a suite or
load problem, not a FAIL of the pair: recorded as such and re-run (``--retries``). Prints, per
pair and per serve, every run's value, min/median/max, the bound and the margin bound / worst
run, and each run's gate-07 outcome; writes ``runs.json`` and ``spread.md`` in the folder.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _bench import ROOT, load_text, results_dir
from _spread import PAIR, SERVE, compact, serve_figures, table

from tp2qual.candidate import load_candidate

# group -> (pytest -k, the (candidate, reference) pairs it qualifies)
THROUGHPUT = "test_single_stream_samples"
# --reuse-reference: the group's first reference (qualified whole once) and the -k without it
ROOT_REFERENCE = {
    "vllm": ("smollm2-135m-vllm", f"smollm2-135m-vllm-tp2 and not ({THROUGHPUT} and no-prefix)"),
    "llamacpp": ("smollm2-135m-local", f"smollm2-135m-docker and not {THROUGHPUT}"),
    "sglang": ("smollm2-135m-sglang", f"smollm2-135m-sglang-tp2 and not {THROUGHPUT}"),
}
GROUPS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "vllm": (
        f"smollm2-135m-vllm and not reasoning and not ({THROUGHPUT} and no-prefix-cache)",
        [
            ("smollm2-135m-vllm-tp2", "smollm2-135m-vllm"),
            ("smollm2-135m-vllm-tp2-no-prefix-cache", "smollm2-135m-vllm-tp2"),
        ],
    ),
    "llamacpp": (
        f"(smollm2-135m-local or smollm2-135m-docker) and not ({THROUGHPUT} and docker)",
        [("smollm2-135m-docker", "smollm2-135m-local")],
    ),
    "sglang": (
        f"smollm2-135m-sglang and not ({THROUGHPUT} and tp2)",
        [("smollm2-135m-sglang-tp2", "smollm2-135m-sglang")],
    ),
}
SUITE_TROUBLE = ("ERROR", None)  # a gate-07 outcome that is the suite's or the load's, not a FAIL


def check_pairs(groups: list[str]) -> None:
    """Each pair's reference is the one its candidate file names (fails loudly if not)."""
    for group in groups:
        for name, reference in GROUPS[group][1]:
            named = load_candidate(ROOT / "candidates" / f"{name}.toml").reference
            if named != reference:
                raise SystemExit(f"{name} names reference {named!r}, not {reference!r}")


def run_pytest(select: str, results: Path, log: Path, timeout_s: float) -> tuple[float, str]:
    """One qualification; SIGINT first on timeout (pytest tears its servers down), then kill."""
    command = [sys.executable, "-m", "pytest", "-k", select, "-p", "no:cacheprovider",
               f"--results={results}"]  # fmt: skip
    began = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            code = proc.wait(timeout=max(1.0, timeout_s))
            how = f"rc={code}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            how = f"cut after {timeout_s:.0f} s"
    return time.monotonic() - began, how


def run_dir(results: Path) -> Path | None:
    """The newest dated run folder (a copied reference run is older than this run's)."""
    dated = [p for p in results.iterdir() if p.is_dir() and not p.is_symlink()]
    return max(dated) if dated else None


def read_run(group: str, results: Path, took: float, how: str, round_: int) -> dict[str, Any]:
    folder = run_dir(results) if results.is_dir() else None
    names = {n for pair in GROUPS[group][1] for n in pair}
    serves = {n: serve_figures(folder, n) for n in sorted(names)} if folder else {}
    trouble = how.startswith("cut") or any(
        serves.get(c, {}).get("outcome") in SUITE_TROUBLE for c, _ in GROUPS[group][1]
    )
    return {"group": group, "round": round_, "seconds": round(took, 1), "how": how,
            "run": str(folder.relative_to(ROOT)) if folder else None,
            "suite_trouble": trouble, "serves": serves}  # fmt: skip


def seconds_left(stop_at: dt.datetime | None) -> float:
    if stop_at is None:
        return float("inf")
    return (stop_at - dt.datetime.now(dt.UTC)).total_seconds()


def reused(group: str, rows: list[dict[str, Any]], results: Path) -> str | None:
    """--reuse-reference: the newest good run of the group whose first reference PASSed, copied
    into ``results`` as an earlier dated run (the reference rule takes its PASS from there);
    returns that run's folder, or None (the reference is qualified in this run)."""
    name = ROOT_REFERENCE[group][0]
    for row in reversed(rows):
        ok = (row["serves"].get(name) or {}).get("verdict") == "PASS"
        if row["group"] == group and not row["suite_trouble"] and ok and row["run"]:
            source = ROOT / row["run"]
            shutil.copytree(source, results / source.name, symlinks=True)
            return row["run"]
    return None


def measure(args: argparse.Namespace, folder: Path, rows: list[dict[str, Any]]) -> None:
    first = max((r["round"] for r in rows), default=-1) + 1
    for round_ in range(first, first + args.runs):
        for group in args.groups:
            for attempt in range(args.retries + 1):
                left = seconds_left(args.stop_at)
                # Not started when the group's last run would not fit before --stop-at.
                last = next((r["seconds"] for r in reversed(rows) if r["group"] == group), 60)
                if left < 1.1 * last:
                    print(f"stop-at: {group} round {round_} not started ({left:.0f} s left)")
                    continue
                tag = f"{group}-{round_}" + (f"-retry{attempt}" if attempt else "")
                print(f"{time.strftime('%H:%M:%S', time.gmtime())} {tag}: {load_text()}",
                      flush=True)  # fmt: skip
                select = GROUPS[group][0]
                (folder / tag).mkdir(parents=True, exist_ok=True)
                source = reused(group, rows, folder / tag) if args.reuse_reference else None
                if source:
                    select = ROOT_REFERENCE[group][1]
                    print(f"  {ROOT_REFERENCE[group][0]}: its PASS in {source}", flush=True)
                took, how = run_pytest(select, folder / tag, folder / f"{tag}.log",
                                       min(args.timeout_s, left - 30))  # fmt: skip
                row = read_run(group, folder / tag, took, how, round_) | {"reused": source}
                rows.append(row)
                (folder / "runs.json").write_text(json.dumps(rows, indent=2) + "\n")
                outcomes = {n: s.get("outcome") for n, s in row["serves"].items()}
                said = "  (suite/load trouble)" if row["suite_trouble"] else ""
                print(f"  {took:7.1f} s {how} gate 07: {outcomes}{said}", flush=True)
                if not row["suite_trouble"]:
                    break


def report(rows: list[dict[str, Any]]) -> list[str]:
    good = [r for r in rows if not r["suite_trouble"]]
    out = []
    for group, (_, pairs) in GROUPS.items():
        runs = [r for r in good if r["group"] == group]
        if not runs:
            continue
        for name, reference in pairs:
            per = [r["serves"][name] for r in runs]
            outcomes = ", ".join(str(p["outcome"]) for p in per)
            theirs = ", ".join(str(p["figures"].get("reference_run")) for p in per)
            out += [f"\n### {name} vs {reference}: {len(per)} runs, gate 07: {outcomes}", "",
                    f"reference runs: {theirs}", ""]  # fmt: skip
            out += table(per, PAIR, "pair")
        serves = sorted({n for pair in pairs for n in pair})
        for name in serves:
            per = [r["serves"][name] for r in runs if r["serves"][name]["figures"]]
            out += [f"\n### {name} on its own: {len(per)} runs", ""]
            out += table(per, SERVE, "serve")
    out += ["\n### Compact: worst run (median) · margin, per pair", ""]
    out += compact({f"{c} vs {ref}": [r["serves"][c] for r in good if c in r["serves"]]
                    for _, pairs in GROUPS.values() for c, ref in pairs}, PAIR)  # fmt: skip
    serves = sorted({n for _, pairs in GROUPS.values() for pair in pairs for n in pair})
    out += ["\n### Compact: worst run (median) · margin, per serve", ""]
    out += compact({n: [r["serves"][n] for r in good if n in r["serves"]] for n in serves}, SERVE)
    cut = [r for r in rows if r["suite_trouble"]]
    out += [f"\nSuite/load trouble (re-run, not counted): {len(cut)} run(s)"]
    out += [f"- {r['group']} round {r['round']}: {r['how']}, "
            f"{ {n: s.get('outcome') for n, s in r['serves'].items()} }" for r in cut]  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--groups", default="vllm,llamacpp")
    parser.add_argument("--timeout-s", type=float, default=3600.0)
    parser.add_argument("--retries", type=int, default=1, help="re-runs of a run the suite cut")
    parser.add_argument("--stop-at", help="HH:MM UTC: no run goes past it (a running one is cut)")
    parser.add_argument("--from", dest="again", type=Path, help="re-print a folder's runs.json")
    parser.add_argument("--folder", type=Path, help="add rounds to this folder's runs.json")
    parser.add_argument("--reuse-reference", action="store_true",
                        help="after a group's first good run, judge against that run's PASS of "
                        "its first reference instead of qualifying it again")  # fmt: skip
    args = parser.parse_args(argv)
    args.groups = [g for g in args.groups.split(",") if g]
    args.stop_at = _stop_at(args.stop_at)
    if args.again:
        folder = args.again
        rows = json.loads((folder / "runs.json").read_text())
    else:
        check_pairs(args.groups)
        folder = args.folder.resolve() if args.folder else results_dir("agreement-spread")
        rows = json.loads((folder / "runs.json").read_text()) if args.folder else []
        print(f"folder: {folder}\nstart {load_text()}", flush=True)
        began = time.monotonic()
        measure(args, folder, rows)
        print(f"wall {time.monotonic() - began:.0f} s; end {load_text()}")
    lines = report(rows)
    (folder / "spread.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def _stop_at(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    hour, minute = (int(x) for x in text.split(":"))
    now = dt.datetime.now(dt.UTC)
    stop = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    return stop if stop > now else stop + dt.timedelta(days=1)


if __name__ == "__main__":
    raise SystemExit(main())
