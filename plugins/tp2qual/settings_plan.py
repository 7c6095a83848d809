"""The candidate-facing half of the engine-support and settings checks, for ``--plan`` and gate
00: which GPUs to judge against, the launch and its peers, each passed to the pure checks
(``checks/kv_support``, ``checks/settings``, ``checks/variables``).

Before NVML can be read (``--plan``), the GPUs are the ones the candidate file names: the
compute capability of ``gpus.name_contains`` (``checks.kv_support.KNOWN_CAPABILITY``) and the
least memory preflight admits (``gpus.memory_gib``). Gate 00 passes NVML's own figures. The
launch judged is the resolved one (``tp2qual.launch``) that starts; a peer's, its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from tp2qual.candidate import Candidate
from tp2qual.checks.kv_support import capability_of_name, flag_value, judge_kv
from tp2qual.checks.settings import Launch, differing_controls, memory_headroom
from tp2qual.checks.variables import readers
from tp2qual.checks.verdict import Verdict
from tp2qual.engine_env import known_env, source_mentions
from tp2qual.engines import engine_for
from tp2qual.engines.engine import Capability
from tp2qual.exceptions import CandidateError
from tp2qual.launch import ResolvedLaunch, resolve_launch


def named_gpus(candidate: Candidate) -> tuple[Capability | None, str]:
    """The compute capability of the GPUs the candidate file names, and where it comes from."""
    name = candidate.gpus.get("name_contains")
    capability = capability_of_name(name)
    if capability is None:
        return None, f"gpus.name_contains {name!r}: no known compute capability"
    return capability, f"gpus.name_contains {name!r}, NVIDIA's list; gate 00 reads NVML's"


def kv_verdict(
    candidate: Candidate, launch: ResolvedLaunch, capability: Capability | None, where: str
) -> Verdict:
    engine, version = engine_for(candidate.engine), candidate.spec["engine"].get("version", "")
    return judge_kv(engine, version or "", list(launch.argv), capability, where)


def kv_support_lines(candidate: Candidate, launch: ResolvedLaunch) -> list[str]:
    """Attention backend x KV-cache dtype on the named GPUs: refused before start, or why not."""
    if not candidate.gpus.get("count"):
        return []
    capability, where = named_gpus(candidate)
    verdict = kv_verdict(candidate, launch, capability, where)
    asked = verdict.measures.get("asked")
    if not verdict.ok:
        return [f"attention and KV cache: REFUSED before start: {verdict.reason}"]
    judged = "" if verdict.measures.get("judged") else "not judged: "
    return [f"attention and KV cache ({asked}): {judged}{verdict.measures.get('why')}"]


def _launch(candidate: Candidate, launch: ResolvedLaunch) -> Launch:
    """A lane's changed flags carry its ``lane.why``; ``launch.why`` gives the rest."""
    lane_why = " ".join(str(candidate.spec.get("lane", {}).get("why", "")).split())
    why = {c.name: f"the lane's change: {lane_why}" for c in candidate.lane_changes if lane_why}
    return Launch(candidate.name, launch.argv, {**why, **candidate.launch.get("why", {})})


def _peer_launch(peer: Candidate) -> ResolvedLaunch | None:
    """A peer's own launch; None where it cannot be resolved here (its model package missing):
    another candidate's plan is compared with the peers that resolve, never broken by one."""
    try:
        return resolve_launch(peer)
    except CandidateError:
        return None


def _is_lane(candidate: Candidate) -> bool:
    return candidate.spec.get("lane", {}).get("kind") == "optional"


def settings_lines(
    candidate: Candidate, launch: ResolvedLaunch, peers: Sequence[Candidate]
) -> list[str]:
    """Controls that differ from the engine's other candidates, the memory headroom, and who
    reads each variable the launch sets."""
    engine = engine_for(candidate.engine)
    # Baselines only: a lane differs from its baseline on purpose, by its [lane.changes].
    alike = [p for p in peers if p.engine == candidate.engine and bool(p.gpus.get("count")) ==
             bool(candidate.gpus.get("count")) and p.name != candidate.name
             and not _is_lane(p)]  # fmt: skip
    same = [_launch(p, peer) for p in alike if (peer := _peer_launch(p)) is not None]
    lines = [f"control: {line}"
             for line in differing_controls(engine, _launch(candidate, launch), same)]  # fmt: skip
    if not lines and engine.controls:
        compared = ", ".join(p.name for p in same) or "no other candidate loaded"
        lines.append(f"controls: none set otherwise than in {compared}")
    gpu_gib = candidate.gpus.get("memory_gib") or None
    where = "gpus.memory_gib, the least preflight admits; gate 00 records NVML's"
    lines += [f"memory: {line}" for line in memory_headroom(engine, list(launch.argv),
                                                            gpu_gib, where)]  # fmt: skip
    lines += lane_memory_lines(candidate, launch, peers)
    lines += [f"variable: {line}" for line in variable_lines(candidate, launch)]
    return lines or [f"{candidate.engine}: no controls or memory share compared, no variable set"]


def lane_memory_lines(
    candidate: Candidate, launch: ResolvedLaunch, peers: Sequence[Candidate]
) -> list[str]:
    """A lane that keeps its baseline's memory share while serving a longer context."""
    rule, after = engine_for(candidate.engine).memory, candidate.spec.get("lane", {}).get("after")
    baseline = next((p for p in peers if p.name == after), None)
    if rule is None or baseline is None:
        return []
    if (theirs_launch := _peer_launch(baseline)) is None:
        return []
    argvs = {candidate.name: launch.argv, baseline.name: theirs_launch.argv}
    share = {name: flag_value(list(argv), rule.flag) for name, argv in argvs.items()}
    mine, theirs = candidate.max_model_len, baseline.max_model_len
    if share[candidate.name] == share[baseline.name] and mine > theirs:
        return [f"memory: {rule.flag} {share[candidate.name] or '(default)'} kept from "
                f"{baseline.name} while max_model_len goes {theirs} -> {mine}"]  # fmt: skip
    return []


def variable_lines(candidate: Candidate, launch: ResolvedLaunch) -> list[str]:
    version = candidate.spec["engine"].get("version")
    found = known_env(candidate.engine, version) if version else None
    registry = found[0] if found else None
    return readers(candidate.engine, version or "?", dict(launch.env),
                   engine_for(candidate.engine).env_prefix, registry,
                   source_mentions(candidate.engine, version))  # fmt: skip
