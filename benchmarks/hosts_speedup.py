"""Measured speed-up of ``--hosts`` on two Docker engines of this machine, beside the simulation.

    python benchmarks/hosts_speedup.py [-k smollm2] [--hosts docs/hosts-local.toml] [--rounds 1]

Runs the same selection twice per round, as its own pytest process each: on this machine alone
(``pytest -k K``), then spread over the hosts (``pytest --hosts FILE -k K``), and prints both
wall times, their ratio, each run's verdicts, and what ``perf/schedule.simulate`` predicts for
the hosts run from the sequential run's own per-candidate seconds. Needs both engines
(scripts/start-dockerd.sh; scripts/start-dockerd.sh second). On a 2-core machine the candidates
of the two hosts share the cores, so the measured ratio is below the simulated one, which
assumes hosts that do not share anything.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from _bench import ROOT, results_dir
from wall_time import timed

from tp2qual.artifacts.finding import Finding
from tp2qual.candidate import load_candidates
from tp2qual.hosts import load_hosts
from tp2qual.perf.schedule import Job, simulate
from tp2qual.placement import Fleet, placement_for


def latest_findings() -> dict[str, Finding]:
    run = (ROOT / "results" / "latest").resolve()
    return {p.parent.name: Finding.read(p) for p in sorted(run.glob("*/finding.json"))}


def predicted(findings: dict[str, Finding], hosts_file: Path) -> float:
    """Wall seconds the simulation gives for the hosts run, from measured per-candidate time."""
    chosen = [c for c in load_candidates([ROOT / "candidates"]) if c.name in findings]
    fleet = Fleet(load_hosts(hosts_file))
    placement = placement_for(chosen, fleet, ROOT / "results", run_id="")
    jobs = [
        Job(
            c.name,
            sum(g.seconds for g in findings[c.name].gates.values()),
            after=c.spec.get("lane", {}).get("after")
            if c.spec.get("lane", {}).get("after") in findings
            else None,
        )
        for c in chosen
    ]
    by_host = {h.name: [n for n, host in placement.items() if host == h.name] for h in fleet.hosts}
    return simulate(jobs, by_host).wall_seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="select", default="smollm2")
    parser.add_argument("--hosts", type=Path, default=ROOT / "docs" / "hosts-local.toml")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    args = parser.parse_args(argv)
    folder = results_dir("hosts-speedup")
    alone, spread, predictions, rows = [], [], [], []
    for round_ in range(args.rounds):
        for kind, extra in (("alone", []), ("hosts", [f"--hosts={args.hosts}"])):
            log = folder / f"{kind}-{round_}.log"
            took, code, notes = timed(
                [*extra, "-k", args.select, "-p", "no:cacheprovider"], args.timeout_s, log
            )
            findings = latest_findings()
            verdicts = {n: f.verdict for n, f in findings.items()}
            placed = {
                n: (f.identity.get("docker_host") or {}).get("name", "-")
                for n, f in findings.items()
            }
            rows.append({"round": round_, "kind": kind, "seconds": round(took, 1), "rc": code,
                         "verdicts": verdicts, "hosts": placed, "notes": notes})  # fmt: skip
            print(f"round {round_} {kind:<5} {took:7.1f} s  rc={code}  {verdicts}  {placed}")
            if kind == "alone":
                alone.append(took)
                predictions.append(predicted(findings, args.hosts))
            else:
                spread.append(took)
    (folder / "runs.json").write_text(json.dumps(rows, indent=2) + "\n")
    a, h, p = statistics.median(alone), statistics.median(spread), statistics.median(predictions)
    print(f"median wall: alone {a:.1f} s, two hosts {h:.1f} s -> speed-up {a / h:.2f}x measured")
    print(f"simulated wall on two hosts from the alone run's candidate seconds: {p:.1f} s "
          f"-> {a / p:.2f}x if the hosts shared no cores")  # fmt: skip
    print(f"logs: {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
