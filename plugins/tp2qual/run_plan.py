"""``pytest --plan``'s closing sections, for the whole selection: the order the run takes the
candidates in (each model's reference, then the serve judged against it, then its lanes), where
each one's GPUs come from and when they are freed, and the wall time at the dated rates:
expected, and at most (perf/estimate.py).

Built from what the run itself uses: ``run_order`` (the gating plugin sorts by it), the
per-candidate estimates of ``dry_run.estimate_for``, and under ``--hosts`` the placement
(``placement.placement_for``) simulated host by host (``perf.schedule.simulate``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tp2qual.candidate import Candidate
from tp2qual.dry_run import Section
from tp2qual.perf.estimate import Estimate
from tp2qual.perf.schedule import Job, simulate
from tp2qual.run_order import groups

ONE_AT_A_TIME = (
    "one candidate at a time: its server (a process group, or a container with every rank) "
    "starts at its first gate and is stopped, the container removed and the port free, before "
    "the next candidate's starts (one session-scoped server per candidate); until then the "
    "host's GPUs are that candidate's alone"
)
WHICH_GPUS = (
    "which GPUs: under WSL2 every GPU is passed (--gpus all, NVIDIA's WSL limits) and the "
    "engine uses the first N in CUDA_DEVICE_ORDER=PCI_BUS_ID order; elsewhere the first N free "
    "GPUs preflight found, by UUID"
)


def hmm(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60}:{minutes % 60:02d}"


def run_sections(
    ordered: Sequence[Candidate],
    estimates: Mapping[str, Estimate],
    hosts: Mapping[str, str] | None = None,
) -> list[Section]:
    """The closing sections; ``hosts``: candidate -> host under ``--hosts``, else None."""
    return [
        Section("run order", tuple(order_lines(ordered, estimates))),
        Section("GPU placement", tuple(placement_lines(ordered, hosts))),
        Section("run time at the dated rates", tuple(time_lines(ordered, estimates, hosts))),
        Section("the records the time rests on", tuple(record_lines(ordered, estimates))),
    ]


def order_lines(ordered: Sequence[Candidate], estimates: Mapping[str, Estimate]) -> list[str]:
    by_name = {c.name: c for c in ordered}
    position = {c.name: i + 1 for i, c in enumerate(ordered)}
    lines: list[str] = []
    for group in groups(ordered):
        lines.append(" -> ".join(group))
        for name in group:
            lines.append(f"  {position[name]}. {_described(by_name[name], position, estimates)}")
    return lines


def _described(
    candidate: Candidate, position: Mapping[str, int], estimates: Mapping[str, Estimate]
) -> str:
    gpus = candidate.gpus.get("count", 0)
    parts = [f"TP{candidate.tp}, {gpus} GPU{'s' if gpus != 1 else ''}" if gpus else "no GPU"]
    after = candidate.spec.get("lane", {}).get("after")
    if after:
        parts.append(f"lane after {after}" + _at(after, position))
    if candidate.reference and candidate.reference != after:
        parts.append(f"judged against {candidate.reference}" + _at(candidate.reference, position))
    elif not candidate.reference:
        parts.append("no reference")
    if candidate.name in estimates:
        found = estimates[candidate.name]
        parts.append(f"expected {hmm(found.expected_seconds)}, at most {hmm(found.seconds)}")
    return f"{candidate.name}: " + "; ".join(parts)


def _at(name: str, position: Mapping[str, int]) -> str:
    return f" (no. {position[name]})" if name in position else " (not in this run: a PASS of it)"


def placement_lines(ordered: Sequence[Candidate], hosts: Mapping[str, str] | None) -> list[str]:
    lines = [ONE_AT_A_TIME, WHICH_GPUS]
    for candidate in ordered:
        where = f"host {hosts.get(candidate.name, 'none')}" if hosts is not None else "this host"
        lines.append(f"{candidate.name}: {candidate.gpus.get('count', 0)} GPU(s) of {where}")
    return lines


def time_lines(
    ordered: Sequence[Candidate],
    estimates: Mapping[str, Estimate],
    hosts: Mapping[str, str] | None,
) -> list[str]:
    counted = [c for c in ordered if c.name in estimates]
    expected = sum(estimates[c.name].expected_seconds for c in counted)
    most = sum(estimates[c.name].seconds for c in counted)
    lines = [
        f"{len(counted)} candidate(s) one after another: expected {hmm(expected)}, at most "
        f"{hmm(most)} (h:mm), each candidate's terms and the record they rest on in its own "
        "'time at the dated rates' section"
    ]
    if hosts:
        by_host: dict[str, list[str]] = {}
        for candidate in counted:
            by_host.setdefault(hosts.get(candidate.name, "none"), []).append(candidate.name)
        walls = [
            simulate([_job(c, estimates, expected=e) for c in counted], by_host).wall_seconds
            for e in (True, False)
        ]
        lines.append(
            f"spread over {len(by_host)} host(s) as placed: expected {hmm(walls[0])}, at most "
            f"{hmm(walls[1])} (h:mm)"
        )
    return lines


def _job(candidate: Candidate, estimates: Mapping[str, Estimate], *, expected: bool) -> Job:
    """A lane waits for its baseline wherever each was placed (a baseline not in the run: no)."""
    after = candidate.spec.get("lane", {}).get("after")
    found = estimates[candidate.name]
    seconds = found.expected_seconds if expected else found.seconds
    return Job(candidate.name, seconds, after=after if after in estimates else None)


def record_lines(ordered: Sequence[Candidate], estimates: Mapping[str, Estimate]) -> list[str]:
    """Per candidate: the dated record its time rests on, its reasoning control, gate 05's N,
    and its time expected and at most."""
    lines = []
    for candidate in (c for c in ordered if c.name in estimates):
        found, tools = estimates[candidate.name], candidate.gate("tool_calls")
        n = f"gate 05 N {tools.get('repeats', 1)}" if "tool_calls" in found.gates else "no gate 05"
        control = f"{candidate.reasoning_control} {candidate.request_settings.get('extra', {})}"
        lines.append(
            f"{candidate.name}: {found.rests_on or 'no dated record: the decode floor'}; "
            f"reasoning {control}; {n}; expected {hmm(found.expected_seconds)}, at most "
            f"{hmm(found.seconds)}"
        )
    return lines
