"""Wall time of a qualification campaign spread over N GPU hosts, under each placement rule.

    python benchmarks/campaign_schedule.py [--hosts N] [--run results/<run-id> | --plan]
                                           [--estimate mid|low|high] [--durations FILE]

Simulates the campaign with ``tp2qual.perf.schedule`` (one qualification at a time per host; a
lane placed apart from its baseline idles until the baseline ends) for N = 1, 2, 3, 4 hosts (or
``--hosts N``) and each rule (in-order, longest-first, lanes-with-baseline), and prints per rule:
wall time (h:mm), idle waiting, each host's utilisation (busy / wall); then, per N, the rule with
the least wall time (ties: the least idle waiting, then all tied rules named).

Under ``lanes-with-baseline`` a gate-07 reference (the TP1 serves) is placed with the candidates
judged against it, as a lane with its baseline.

Durations: by default the campaign's five TP2 candidates, three TP1 references and two lanes from
``benchmarks/data/campaign-durations.toml`` (estimates, each with its ``source``; which job is a
lane, after which baseline, is read from ``candidates/<name>.toml``). With ``--run``, the
candidates of a real run instead: each ``results/<run>/<candidate>/finding.json``, seconds =
the sum of ``gates.<gate>.seconds`` (the server start counts in the first gate that needs it),
lane = ``candidate_spec.lane.after``. With ``--plan``, every shipped campaign candidate at the
time ``pytest --plan`` gives it (``dry_run.estimate_for``: the dated record of its own TP size;
``--estimate high``: at most, else expected). Nothing is started; no results folder is written.
"""

from __future__ import annotations

import argparse
import json
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from _bench import ROOT

from tp2qual.candidate import load_candidate, load_candidates
from tp2qual.dry_run import estimate_for
from tp2qual.perf.schedule import RULES, Job, Simulation, place, simulate

DURATIONS = ROOT / "benchmarks" / "data" / "campaign-durations.toml"
HOST_COUNTS = (1, 2, 3, 4)
ESTIMATE_KEYS = {"mid": "seconds", "low": "low_seconds", "high": "high_seconds"}


@dataclass(frozen=True)
class Input:
    job: Job
    source: str


def hmm(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60}:{minutes % 60:02d}"


def shown(path: Path) -> str:
    """``path`` relative to the repository root where it lies under it."""
    path = path.resolve()
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def from_data_file(path: Path, estimate: str) -> list[Input]:
    """The campaign's jobs: seconds and source from ``path``, lanes from candidates/."""
    entries = tomllib.loads(path.read_text(encoding="utf-8"))["job"]
    inputs = []
    for entry in entries:
        candidate = load_candidate(ROOT / "candidates" / f"{entry['name']}.toml")
        after = (candidate.spec.get("lane") or {}).get("after")
        joins = candidate.reference if candidate.reference != after else None  # gate 07's
        seconds = float(entry.get(ESTIMATE_KEYS[estimate], entry["seconds"]))
        job = Job(entry["name"], seconds, after=after, joins=joins)
        inputs.append(Input(job, entry["source"]))
    return inputs


def from_plan(estimate: str) -> list[Input]:
    """The shipped campaign at ``--plan``'s time: at most for ``high``, else expected."""
    shipped = {c.name: c for c in load_candidates([ROOT / "candidates"])}
    most = estimate == "high"
    inputs = []
    for candidate in (c for c in shipped.values() if c.spec.get("campaign")):
        found = estimate_for(candidate, shipped, list(shipped.values()))
        after = (candidate.spec.get("lane") or {}).get("after")
        joins = candidate.reference if candidate.reference != after else None
        seconds = found.seconds if most else found.expected_seconds
        job = Job(candidate.name, seconds, after=after, joins=joins)
        figure = "at most" if most else "expected"
        inputs.append(Input(job, f"pytest --plan, {figure}: {found.rests_on or 'the floor'}"))
    return inputs


def resolve_run(text: str) -> Path:
    for path in (Path(text), ROOT / text, ROOT / "results" / text):
        if path.is_dir():
            return path.resolve()
    raise SystemExit(f"--run {text}: no such folder (tried it, under {ROOT} and under results/)")


def from_run(folder: Path) -> list[Input]:
    """One job per ``<candidate>/finding.json`` of a run: gate seconds summed, lane from spec."""
    inputs = []
    for finding_path in sorted(folder.glob("*/finding.json")):
        finding = json.loads(finding_path.read_text(encoding="utf-8"))
        gates = finding.get("gates") or {}
        seconds = sum(float(gate.get("seconds") or 0.0) for gate in gates.values())
        spec = finding.get("candidate_spec") or {}
        after = (spec.get("lane") or {}).get("after")
        joins = (spec.get("reference") or {}).get("candidate")
        name = finding.get("candidate") or finding_path.parent.name
        source = f"{shown(finding_path)}: sum of gates.*.seconds ({finding.get('verdict', '?')})"
        job = Job(name, seconds, after=after, joins=joins if joins != after else None)
        inputs.append(Input(job, source))
    if not inputs:
        raise SystemExit(f"--run {folder}: no <candidate>/finding.json in it")
    return inputs


def print_inputs(inputs: Sequence[Input], origin: str) -> None:
    jobs = [i.job for i in inputs]
    names = {job.name for job in jobs}
    lanes = [job for job in jobs if job.after]
    total = sum(job.seconds for job in jobs)
    print(f"campaign: {len(jobs)} job(s), {len(lanes)} of them lane(s); "
          f"{hmm(total)} ({total:.0f} s) of work; from {origin}")  # fmt: skip
    sources: list[str] = []
    for item in inputs:
        if item.source not in sources:
            sources.append(item.source)
        job = item.job
        lane = ""
        if job.after:
            lane = f"lane after {job.after}" + ("" if job.after in names else " (not in the set)")
        mark = sources.index(item.source) + 1
        line = f"  {job.name:34} {hmm(job.seconds):>6} {job.seconds:8.0f} s  [{mark}] {lane}"
        print(line.rstrip())
    for number, source in enumerate(sources, 1):
        print(f"  [{number}] {source}")
    if len({job.seconds for job in jobs}) == 1 and len(jobs) > 1:
        print("  note: every job has the same duration d: no rule can beat ceil(jobs / N) x d, "
              "and rules\n  that reach it differ only in idle waiting.")  # fmt: skip


def describe(sim: Simulation, hosts: Sequence[str]) -> str:
    use = "  ".join(f"{host} {sim.utilisation[host]:4.0%}" for host in hosts)
    waiting = sim.total_waiting_seconds
    wall = sim.wall_seconds
    return f"{hmm(wall):>6} {wall:8.0f} s {hmm(waiting):>6} {waiting:7.0f} s   {use}"


def best_rule(results: dict[str, Simulation]) -> str:
    """The rule of least wall time; among rules tied on it, the least idle waiting."""
    fastest = min(round(sim.wall_seconds, 6) for sim in results.values())
    tied = [rule for rule, sim in results.items() if round(sim.wall_seconds, 6) == fastest]
    if len(tied) == 1:
        return tied[0]
    least = min(round(results[rule].total_waiting_seconds, 6) for rule in tied)
    winners = [rule for rule in tied if round(results[rule].total_waiting_seconds, 6) == least]
    if len(winners) == 1:
        others = ", ".join(rule for rule in tied if rule != winners[0])
        return f"{winners[0]} (wall time tied with {others}; less idle waiting)"
    return f"tie: {' = '.join(winners)} (same wall time and idle waiting)"


def compare(jobs: Sequence[Job], count: int) -> str:
    hosts = [f"host{i}" for i in range(1, count + 1)]
    print(f"\nN = {count} host{'s' if count > 1 else ''}")
    print(f"  {'rule':20} {'wall':>6} {'':10} {'idle waiting':>16}   utilisation per host")
    results: dict[str, Simulation] = {}
    plans: dict[str, dict[str, list[str]]] = {}
    for rule in RULES:
        placement = place(jobs, hosts, rule)
        results[rule] = simulate(jobs, placement)
        plans[rule] = placement.by_host
        print(f"  {rule:20} {describe(results[rule], hosts)}")
        for name, reason in placement.unplaced.items():
            print(f"    unplaced {name}: {reason}")
    for rule in RULES:
        sim = results[rule]
        cells = [
            " -> ".join(
                name + (f" (waits {hmm(sim.runs[name].waited)})" if sim.runs[name].waited else "")
                for name in plans[rule][host]
            )
            or "(idle)"
            for host in hosts
        ]
        print(f"  {rule}: " + " | ".join(f"{h}: {c}" for h, c in zip(hosts, cells, strict=True)))
    winner = best_rule(results)
    print(f"  least wall time: {winner}")
    return winner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, choices=range(1, 17), metavar="N",
                        help="one host count (default: 1, 2, 3 and 4)")  # fmt: skip
    parser.add_argument("--run", help="results/<run-id>: durations from its finding.json files")
    parser.add_argument("--plan", action="store_true",
                        help="durations from pytest --plan's estimates (expected; "
                             "--estimate high: at most)")  # fmt: skip
    parser.add_argument("--durations", type=Path, default=DURATIONS,
                        help="data file of estimates (default: %(default)s)")  # fmt: skip
    parser.add_argument("--estimate", choices=tuple(ESTIMATE_KEYS), default="mid",
                        help="which figure of each data-file entry: seconds (mid), "
                             "low_seconds or high_seconds")  # fmt: skip
    args = parser.parse_args(argv)
    if args.run:
        folder = resolve_run(args.run)
        inputs = from_run(folder)
        origin = shown(folder)
    elif args.plan:
        inputs = from_plan(args.estimate)
        origin = f"pytest --plan ({'at most' if args.estimate == 'high' else 'expected'})"
    else:
        inputs = from_data_file(args.durations, args.estimate)
        origin = f"{shown(args.durations)} ({args.estimate} estimate)"
    print_inputs(inputs, origin)
    jobs = [item.job for item in inputs]
    counts = [args.hosts] if args.hosts else HOST_COUNTS
    winners = {count: compare(jobs, count) for count in counts}
    print("\nleast wall time per host count:")
    for count, winner in winners.items():
        print(f"  N = {count}: {winner}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
