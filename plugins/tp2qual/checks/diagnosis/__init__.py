"""Name the cause of a failed NCCL probe, server start-up or crash from its log, with a remedy
that fits the settings in force.

One engine for every log the suite sees (probe output, server start-up and crash logs, TP1 or
TP2, process or container). Each rule names a call site / message pattern, the platform evidence
it needs (WSL2 only from a host fact or the log's own statement of the platform, never from an
error number), a cause, and a remedy checked against the settings in force: the environment and
container settings and the engine's command line passed in, completed by what the log itself
states (``KEY=VALUE`` on a command line, NCCL's ``… set by environment to …``, ``--ipc=host``,
the engine's own list of its non-default arguments). A remedy never says "set X" when X is set;
when X is set and the failure persists it says so and gives the next step.

A failed start is never "ok": when no rule names the cause, the verdict is "failed, cause not
recognised" with the earliest error quoted (``failure.py``). Across ranks the first error in
time leads, and the cascade a TP start-up prints after it never does.

Known harmless warnings are reported as notices and never fail on their own. Hangs are read from
the log's timestamps (a stall after Init START or after a collective was issued), not from a
timeout flag. Pure: text and mappings in, frozen dataclasses out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tp2qual.checks.diagnosis import memory, transport
from tp2qual.checks.diagnosis.capacity import rule_kv_cache_short, rule_mamba_blocks
from tp2qual.checks.diagnosis.engine_args import args_of, version_of
from tp2qual.checks.diagnosis.failure import (
    error_lines,
    first_time,
    in_time_order,
    rule_unrecognised,
)
from tp2qual.checks.diagnosis.hangs import (
    dist_error,
    other_warnings,
    probe_failed,
    rule_collective_hang,
    rule_harmless,
    rule_init_pending,
)
from tp2qual.checks.diagnosis.host import rule_offline_missing, rule_port_in_use
from tp2qual.checks.diagnosis.kernels import (
    rule_arch_unsupported,
    rule_helion_untuned,
    rule_ptxas,
    rule_shared_memory,
)
from tp2qual.checks.diagnosis.memory import (
    rule_cuda_999,
    rule_expandable_segments,
    rule_oom,
    rule_shm_attach,
    rule_shm_exhausted,
)
from tp2qual.checks.diagnosis.model import (
    FAILURE,
    HANG_AFTER_S,
    INCOMPLETE,
    NOTICE,
    Context,
    Diagnosis,
    Finding,
    Line,
    Rule,
    container_of,
    lines_of,
    settings_of,
    wsl2_of,
)
from tp2qual.checks.diagnosis.names import (
    rule_gpu_uuid_index,
    rule_missing_dependency,
    rule_model_file_corrupt,
    rule_tp_indivisible,
    rule_unknown_architecture,
    rule_unknown_parser,
    rule_unknown_quantization,
    rule_weights_missing,
)
from tp2qual.checks.diagnosis.ranks import (
    ranks_short,
    rule_first_collective_hang,
    rule_missing_rank,
)
from tp2qual.checks.diagnosis.steps import rule_stalled_step
from tp2qual.checks.diagnosis.transport import (
    rule_device_visibility,
    rule_nvls,
    rule_p2p_failure,
    rule_peer_mapping,
    rule_pynccl_on_cpu,
)
from tp2qual.checks.diagnosis.workers import (
    rule_custom_allreduce_peer,
    rule_fork_after_cuda,
    rule_illegal_access,
    rule_shm_sigbus,
    rule_stale_shm_mapping,
    rule_symm_mem_sigfpe,
    rule_worker_died,
)

__all__ = [
    "FAILURE",
    "HANG_AFTER_S",
    "INCOMPLETE",
    "NOTICE",
    "Context",
    "Diagnosis",
    "Finding",
    "Line",
    "context",
    "diagnose",
]

EXPLAINS = memory.EXPLAINS | transport.EXPLAINS

RULES: tuple[Rule, ...] = (
    rule_cuda_999,
    rule_shm_exhausted,
    rule_shm_attach,
    rule_expandable_segments,
    rule_oom,
    rule_peer_mapping,
    rule_p2p_failure,
    rule_nvls,
    rule_device_visibility,
    rule_pynccl_on_cpu,
    rule_port_in_use,
    rule_offline_missing,
    rule_missing_rank,
    rule_first_collective_hang,
    rule_stalled_step,
    rule_init_pending,
    rule_collective_hang,
    # Start-up failures the engines print (kernels.py, capacity.py, names.py, workers.py).
    rule_arch_unsupported,
    rule_ptxas,
    rule_shared_memory,
    rule_helion_untuned,
    rule_kv_cache_short,
    rule_mamba_blocks,
    rule_unknown_quantization,
    rule_unknown_architecture,
    rule_unknown_parser,
    rule_tp_indivisible,
    rule_gpu_uuid_index,
    rule_weights_missing,
    rule_model_file_corrupt,
    rule_missing_dependency,
    rule_fork_after_cuda,
    rule_shm_sigbus,
    rule_stale_shm_mapping,
    rule_custom_allreduce_peer,
    rule_symm_mem_sigfpe,
    rule_illegal_access,
    rule_worker_died,
)

# A rule that names the fault more precisely replaces the vaguer ones the same lines trigger.
SUPERSEDES: dict[str, frozenset[str]] = {
    "missing_rank": frozenset({"init_hang", "init_incomplete"}),
    "first_collective_hang": frozenset({"collective_hang"}),
    # The engine's own waits on one step name a stall after work was done; the hang rules
    # would call it the first collective (the same wait lines) or a collective in general.
    "stalled_step": frozenset({"first_collective_hang", "collective_hang"}),
    # The figures the engine printed name the shortfall better than "no memory for the cache".
    "kv_cache_short": frozenset({"oom_kv_cache"}),
    # The import error behind "Error in inspecting model architecture" is the cause.
    "gpu_uuid_as_index": frozenset({"unknown_architecture"}),
    # The other rank's "invalid device ordinal" follows the SIGFPE at the same rendezvous.
    "symm_mem_sigfpe": frozenset({"invalid_device_ordinal"}),
    "custom_allreduce_peer": frozenset({"p2p_failure"}),
}


# --- entry ----------------------------------------------------------------------------------


def context(
    text: str,
    *,
    tp: int | None = None,
    env: Mapping[str, str] | None = None,
    container: Mapping[str, Any] | None = None,
    host: Mapping[str, Any] | None = None,
    quiet_s: float = 0.0,
    command: Sequence[str] | None = None,
) -> Context:
    lines = lines_of(text)
    settings, sources = settings_of(lines, env or {})
    texts = [(ln.no, ln.text) for ln in lines]
    args, arg_sources = args_of(texts, command)
    return Context(
        lines=lines,
        settings=settings,
        sources=sources,
        container=container_of(lines, container),
        wsl2=wsl2_of(lines, host),
        tp=tp,
        at_info=any("NCCL INFO" in ln.text for ln in lines),
        quiet_s=max(0.0, quiet_s),
        args=args,
        arg_sources=arg_sources,
        version=version_of(texts),
    )


def diagnose(
    text: str,
    *,
    tp: int | None = None,
    env: Mapping[str, str] | None = None,
    container: Mapping[str, Any] | None = None,
    host: Mapping[str, Any] | None = None,
    quiet_s: float = 0.0,
    failed: bool = False,
    command: Sequence[str] | None = None,
) -> Diagnosis:
    """Every finding the log supports, named failures first, then notices.

    ``env``: the environment the ranks / engine ran with; ``container``: ``ipc_host`` (bool),
    ``shm_size``, ``gpus`` when it ran in a container (None: a local process, unless the log's
    own ``docker run`` line says otherwise); ``host``: the host identity (``wsl2`` or a kernel /
    platform string), the only source besides the log's own statement for WSL2; ``quiet_s``: how
    long the log had been silent when it was read (a stall that left no later line to date it);
    ``failed``: the caller knows the process failed (a non-zero exit, a timeout), which the log
    alone may not say; ``command``: the engine's command line, whose settings remedies respect.
    An NCCL warning no rule explains is a notice unless the process or its ranks failed
    (``_failing``): then it is a failure, the lead to follow. A failure no rule names is said
    to be one, with its earliest error (``failure.rule_unrecognised``), never "ok"."""
    ctx = context(
        text, tp=tp, env=env, container=container, host=host, quiet_s=quiet_s, command=command
    )
    named = _most_precise([f for rule in RULES for f in rule(ctx)])
    failures = [f for f in named if f.severity == FAILURE]
    if failures:  # the earliest named cause leads: later ones follow from it
        failures = sorted(
            (in_time_order(f, ctx) for f in failures), key=lambda f: first_time(f, ctx)
        )
        named = failures + [f for f in named if f.severity != FAILURE]
    if failures:  # an error explains why init never completed: not a cut-off log
        named = [f for f in named if f.severity != INCOMPLETE]
    if not ctx.lines or not any(ln.text.strip() for ln in ctx.lines):
        named.append(_EMPTY)
    notices = rule_harmless(ctx)
    explained = {n for f in named + notices for n, _ in f.evidence}
    explained |= _explained_by_pattern(ctx, failures)
    torch_error = dist_error(ctx, failures)
    failing = failed or bool(named) or bool(torch_error) or _failing(ctx)
    rest = other_warnings(ctx, explained, FAILURE if failing else NOTICE) + torch_error
    if not failures:
        named = _unnamed(ctx, failed, rest) + named
    findings = (*named, *rest, *notices)
    return Diagnosis(_verdict(findings), tuple(findings), dict(ctx.settings))


_EMPTY = Finding(
    "empty_log",
    "the log is empty: the process printed nothing before it was stopped",
    (),
    "check the process started at all (its exit status, the launcher's own output)",
    "medium",
    INCOMPLETE,
)


def _unnamed(ctx: Context, failed: bool, rest: list[Finding]) -> list[Finding]:
    """No rule named a cause: say the start failed, with its earliest error, when the log shows
    an error of its own (an exception, a fatal signal), or when it failed and nothing else (an
    NCCL warning, torch's NCCL error) is there to follow."""
    others = any(f.severity == FAILURE for f in rest)
    if others and not any(e.primary for e in error_lines(ctx)):
        return []
    return rule_unrecognised(ctx, failed or others)


def _failing(ctx: Context) -> bool:
    """The log shows the probe or the ranks failed: a probe rank reported failure, or fewer
    ranks finished init than the world has."""
    return probe_failed(ctx) or ranks_short(ctx)


def _most_precise(named: list[Finding]) -> list[Finding]:
    dropped = set().union(*(SUPERSEDES.get(f.rule, frozenset()) for f in named))
    return [f for f in named if f.rule not in dropped]


def _explained_by_pattern(ctx: Context, failures: list[Finding]) -> set[int]:
    """Warnings a named failure covers beyond its first few evidence lines (all ranks' copies)."""
    out: set[int] = set()
    for f in failures:
        pattern = EXPLAINS.get(f.rule)
        if pattern:
            out |= {ln.no for ln in ctx.grep(pattern)}
    return out


def _verdict(findings: tuple[Finding, ...]) -> str:
    severities = {f.severity for f in findings}
    if FAILURE in severities:
        return "failed"
    return "incomplete" if INCOMPLETE in severities else "ok"
