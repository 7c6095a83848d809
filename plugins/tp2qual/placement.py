"""Where each candidate of a ``--hosts`` run goes, and why one goes nowhere.

The placement is a pure function of what every process of the run sees alike — the selected
candidates, the hosts file, earlier runs' findings — so the controller (which schedules) and the
workers (which bind to a host) agree without talking. The rule is ``perf/schedule.place``'s
``lanes-with-baseline``: a baseline and its lanes on one host, and a gate-07 reference with the
candidates judged against it (so they run on one worker, the reference first, and see each
other's records), heaviest first by the time the newest earlier finding took. What keeps a
placed candidate from running (host down, image missing, files of this machine on a remote
host) is decided here too, before anything starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tp2qual.artifacts.finding import read_finding
from tp2qual.candidate import Candidate
from tp2qual.evidence.reference_runs import dated_runs
from tp2qual.hosts import Host, bound
from tp2qual.model_cache import cache_volume
from tp2qual.perf.schedule import Job, place

LocalCheck = Callable[[Candidate], str | None]  # why this machine cannot run it, or None
DEFAULT_SECONDS = 1800.0  # a candidate never run before: the campaign's typical half hour


@dataclass
class Fleet:
    """The hosts of this run, which are down, and where each selected candidate runs."""

    hosts: list[Host]
    down: dict[str, str] = field(default_factory=dict)  # host name -> why it cannot be reached
    placement: dict[str, str] = field(default_factory=dict)  # candidate -> host name
    bound: Host | None = None  # the host this worker drives

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)


def placement_for(
    candidates: list[Candidate], fleet: Fleet, results: Path, run_id: str
) -> dict[str, str]:
    """candidate -> host. Deterministic, from what every process sees alike (the collection,
    the hosts file, earlier runs' findings), so workers and controller agree without talking."""
    names = {c.name for c in candidates}
    jobs = [
        Job(
            c.name,
            seconds_of(results, c.name, run_id),
            after=after if (after := c.spec.get("lane", {}).get("after")) in names else None,
            hosts=frozenset(h.name for h in fleet.hosts if h.why_not(c) is None),
            joins=c.reference if c.reference in names and c.reference != after else None,
        )
        for c in candidates
    ]
    plan = place(jobs, [h.name for h in fleet.hosts])
    return {job: host for host, jobs_ in plan.by_host.items() for job in jobs_}


def why_not_run(
    candidates: list[Candidate], fleet: Fleet, *, pull: bool, here: LocalCheck
) -> dict[str, str]:
    """candidate -> why it runs nowhere in this run (no host fits, host down, image missing)."""
    why_not = {}
    for candidate in candidates:
        host = fleet.placement.get(candidate.name)
        if host is None:
            why_not[candidate.name] = _nowhere(fleet, candidate)
        elif host in fleet.down:
            why_not[candidate.name] = f"host {host} cannot be reached ({fleet.down[host]})"
        elif why := _unrunnable(fleet.host(host), candidate, pull=pull, here=here):
            why_not[candidate.name] = f"on host {host}: {why}"
    return why_not


def _unrunnable(host: Host, candidate: Candidate, *, pull: bool, here: LocalCheck) -> str | None:
    if not host.local and (needs := _files_of_this_machine(candidate)):
        return (
            f"host {host.name} is remote and the candidate needs {needs} of this machine there;"
            " the suite checks and mounts those only on this machine's engines so far"
        )
    if candidate.launcher_kind == "docker":
        return _image_unresolved(host, candidate, pull=pull)
    return here(candidate)  # a process on this machine: this machine's checks


def candidate_in(nodeid: str, candidates: list[Candidate]) -> Candidate | None:
    """The candidate a gate test's id names (``test_x[<candidate>]`` or ``[<candidate>-<param>]``;
    the longest name wins, so a lane named after its baseline is told apart)."""
    params = nodeid.rpartition("[")[2].rstrip("]") if nodeid.endswith("]") else ""
    fits = [c for c in candidates if params == c.name or params.startswith(c.name + "-")]
    return max(fits, key=lambda c: len(c.name), default=None)


def in_collection(candidate: Candidate, collection: list[str] | None) -> bool:
    return any(candidate_in(n, [candidate]) for n in collection or ())


def _files_of_this_machine(candidate: Candidate) -> str:
    """What of this machine a launch relies on: preflight hashes a host model cache here (a
    Docker volume is read on the host's own engine), bind mounts name paths here, the NCCL
    probe (TP > 1) is mounted from here."""
    docker = candidate.launch.get("docker", {})
    hf_cache = candidate.model.get("hf_cache")
    needs = [
        what
        for what, needed in (
            ("the model cache", hf_cache and cache_volume(hf_cache) is None),
            ("its mounts", docker.get("mounts")),
            ("the NCCL probe file", candidate.tp > 1),
        )
        if needed
    ]
    return ", ".join(needs)


def _image_unresolved(host: Host, candidate: Candidate, *, pull: bool) -> str | None:
    """Bad input found before anything starts: an unresolved pin, an image the host lacks or
    holds under another id (``--pull`` may fetch a missing one; its pin still holds)."""
    from tp2qual.image_ref import image_reference
    from tp2qual.serving.launchers.docker.engine import docker_client
    from tp2qual.serving.launchers.docker.pins import image_matches, pin_unresolved, resolve_pin

    if why := pin_unresolved(candidate):
        return why
    pin = resolve_pin(candidate).value or ""
    name = image_reference(candidate.launch["docker"]["image"], pin)
    with bound(host), docker_client() as client:
        try:
            attrs = client.images.get(name).attrs
        except Exception as exc:  # NotFound, or the engine refusing: the same answer here
            return None if pull else f"image {name} is not on the host ({type(exc).__name__})"
    if not image_matches(attrs, pin):
        return f"image {name} on the host is {attrs.get('Id')}, not the pin {pin}"
    return None


def _nowhere(fleet: Fleet, candidate: Candidate) -> str:
    reasons = "; ".join(
        f"{h.name}: {h.why_not(candidate) or 'its baseline or reference runs elsewhere'}"
        for h in fleet.hosts
    )
    return f"no host can run it ({reasons})"


def seconds_of(results: Path, name: str, run_id: str) -> float:
    """How long the candidate took in its newest earlier finding (gate seconds, start-up
    included), or the default: placement balances hosts by what was measured, not by guesses."""
    for run in dated_runs(results):  # newest first, never the moving "latest" link
        finding = read_finding(run / name, results) if run.name != run_id else None
        seconds = sum(g.seconds for g in finding.gates.values()) if finding else 0.0
        if seconds > 0:
            return seconds
    return DEFAULT_SECONDS
