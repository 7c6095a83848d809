"""Rules for the engine's worker processes and what they share: CUDA initialised before a fork,
a worker killed by SIGBUS on a small /dev/shm, a stale /dev/shm mapping from an earlier run, a
custom all-reduce between GPUs without peer access, the symmetric-memory rendezvous that dies
with SIGFPE under WSL2, an illegal memory access (native KV offload's pinned mmap under WSL2),
a worker that died before any error of its own."""

from __future__ import annotations

import re

from tp2qual.checks.diagnosis.failure import error_lines, when
from tp2qual.checks.diagnosis.memory import shm_remedy
from tp2qual.checks.diagnosis.model import Context, Finding, evidence_of, is_set
from tp2qual.engines import any_engine_line

_FORK = re.compile(r"Cannot re-initialize CUDA in forked subprocess")


def rule_fork_after_cuda(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_FORK)
    if not hits:
        return []
    if is_set(ctx, "VLLM_WORKER_MULTIPROC_METHOD", "spawn"):
        remedy = (
            f"{ctx.source('VLLM_WORKER_MULTIPROC_METHOD')} is already set: the fork is the"
            " caller's (a wrapper that touched CUDA and then forked): start the engine from a"
            " fresh process"
        )
    else:
        remedy = (
            "start workers with spawn (VLLM_WORKER_MULTIPROC_METHOD=spawn for vLLM), and keep"
            " CUDA untouched in the parent before the engine starts"
        )
    return [
        Finding(
            "fork_after_cuda",
            "a worker was forked after its parent had initialised CUDA, and CUDA cannot be"
            " initialised again in a forked child",
            evidence_of(hits),
            remedy,
            "high",
        )
    ]


_SIGBUS = re.compile(
    r"SIGBUS received|Fatal Python error: Bus error|Unexpected bus error encountered in worker"
    r"|crashed with exit code -7\b"
)
_SHM_SMALL = re.compile(r"/dev/shm has only (?P<n>\d+) bytes available")


def rule_shm_sigbus(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_SIGBUS)
    if not hits:
        return []
    small = ctx.grep(_SHM_SMALL)
    m = _SHM_SMALL.search(small[0].text) if small else None
    size = f" (the log says /dev/shm has {int(m['n']) / 2**20:.0f} MiB)" if m else ""
    return [
        Finding(
            "shm_sigbus",
            f"a worker died of SIGBUS writing shared memory: /dev/shm is too small for the"
            f" engine's inter-process buffers{size}",
            evidence_of(sorted({*small[:1], *hits}, key=lambda ln: ln.no)),
            shm_remedy(ctx),
            "high" if small or ctx.container is not None else "medium",
        )
    ]


_STALE_OPEN = re.compile(r"Opened existing mmap file (?P<path>/dev/shm/\S+)")
_BAD_ADDRESS = re.compile(r"OSError: \[Errno 14\] Bad address|madvise")


def rule_stale_shm_mapping(ctx: Context) -> list[Finding]:
    opened = ctx.grep(_STALE_OPEN)
    bad = ctx.grep(_BAD_ADDRESS)
    if not (opened and bad):
        return []
    return [
        Finding(
            "stale_shm_mapping",
            "the engine reopened a /dev/shm mapping left by an earlier run and could not map"
            " it: orphan offload files from runs that did not clean up fill /dev/shm",
            evidence_of(sorted({*opened, *bad}, key=lambda ln: ln.no)),
            "remove only the orphan files (vllm_offload_*.mmap no live process maps: check with"
            " lsof / fuser, and that their containers are gone), then start again; df -h"
            " /dev/shm shows the space",
            "high",
        )
    ]


_PEER = re.compile(r"peer access is not supported between these two devices")


def rule_custom_allreduce_peer(ctx: Context) -> list[Finding]:
    hits = [ln for ln in ctx.grep(_PEER) if "NCCL WARN" not in ln.text]
    if not hits:
        return []
    if ctx.arg("disable_custom_all_reduce") in ("true", "True"):
        remedy = (
            f"{ctx.arg_source('disable_custom_all_reduce')} is already set, so the peer access is"
            " asked elsewhere (NCCL's P2P: NCCL_P2P_DISABLE=1, or the engine's own IPC buffers)"
        )
    else:
        remedy = (
            "start with --disable-custom-all-reduce (vLLM, SGLang) so all-reduce goes through"
            " NCCL; these GPUs cannot address each other's memory"
        )
    return [
        Finding(
            "custom_allreduce_peer",
            "the engine's custom all-reduce needs GPU peer access and the GPUs do not have it",
            evidence_of(hits),
            remedy,
            "high",
        )
    ]


_SIGFPE = re.compile(r"Fatal Python error: Floating point exception|crashed with exit code -8\b")
_SYMM = re.compile(r"_symmetric_memory|symm_mem|rendezvous|multimem", re.I)


def rule_symm_mem_sigfpe(ctx: Context) -> list[Finding]:
    fpe = ctx.grep(_SIGFPE)
    symm = ctx.grep(_SYMM)
    if not (fpe and symm):
        return []
    wsl = f"; {ctx.wsl2}" if ctx.wsl2 else ""
    symm_flag = ctx.arg("enable_torch_symm_mem")
    also = (
        f"; {ctx.arg_source('enable_torch_symm_mem')} turns on another symmetric-memory path:"
        " turn it off too"
        if symm_flag in ("true", "True")
        else ""
    )
    return [
        Finding(
            "symm_mem_sigfpe",
            "a rank died of SIGFPE inside PyTorch's symmetric-memory rendezvous (the multimem"
            " all-gather SGLang's TP logits use), as it does under WSL2's CUDA proxy" + wsl,
            evidence_of(sorted({*fpe, *symm[:3]}, key=lambda ln: ln.no)),
            "keep the multimem logits all-gather off so the NCCL all-gather is used (an engine"
            " build or pinned patch that disables it on this platform)" + also,
            "high" if ctx.wsl2 else "medium",
        )
    ]


_ILLEGAL = re.compile(r"an illegal memory access was encountered")
_OFFLOAD = re.compile(
    r"kv[_-]offloading[_-]size|OffloadingConnector|CPUOffloadingSpec|vllm_offload_"
)


def rule_illegal_access(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_ILLEGAL)
    if not hits:
        return []
    offload = ctx.grep(_OFFLOAD) or (
        [hits[0]] if ctx.arg("kv_offloading_size") not in (None, "0") else []
    )
    blocking = is_set(ctx, "CUDA_LAUNCH_BLOCKING", "1")
    attribute = (
        f"{ctx.source('CUDA_LAUNCH_BLOCKING')} is already set, so the frame above is the"
        " faulting call"
        if blocking
        else "rerun with CUDA_LAUNCH_BLOCKING=1 to name the faulting call (CUDA reports it late)"
    )
    if offload:
        on = f" ({ctx.arg_source('kv_offloading_size')})" if ctx.arg("kv_offloading_size") else ""
        return [
            Finding(
                "illegal_access_kv_offload",
                f"a CUDA illegal memory access with native CPU KV offload on{on}: its"
                " process-shared /dev/shm mmap, registered as pinned host memory, faulted under"
                " WSL2 (the user's 2026-08-02 record)",
                evidence_of(sorted({*offload[:1], *hits}, key=lambda ln: ln.no)),
                "run without native KV offload, or with an engine build that skips pinning the"
                f" shared offload mmap on WSL2; {attribute}",
                "medium",
            )
        ]
    return [
        Finding(
            "illegal_memory_access",
            "a CUDA kernel made an illegal memory access; the frame shown may not be the one"
            " that faulted (CUDA errors are asynchronous)",
            evidence_of(hits),
            attribute,
            "low",
        )
    ]


_DIED = any_engine_line("worker_died")  # the engine's own "Worker proc X died unexpectedly"


def rule_worker_died(ctx: Context) -> list[Finding]:
    """A worker the engine saw die before any error of its own: it was killed from outside or
    died in native code, so its log says nothing more (after another error it is the cascade)."""
    deaths = [ln for ln in ctx.lines if _DIED.search(ln.text)]
    if not deaths:
        return []
    first = deaths[0]
    if any(e.primary and e.when() < when(first) for e in error_lines(ctx)):
        return []
    m = _DIED.search(first.text)
    proc = m["proc"] if m else "a worker"
    code = (m["code"] or "").strip() if m else ""
    how = f"exit code {code}" if code and code != "None" else "no exit code logged"
    return [
        Finding(
            "worker_died",
            f"worker {proc} died ({how}) before printing an error of its own: it was killed"
            " from outside (the kernel's OOM killer, a kill) or died in native code",
            evidence_of([first]),
            "read the host's kernel log (dmesg / journalctl -k: 'Out of memory: Killed"
            " process') and the container's memory limit; host RAM must also hold what the"
            " workers stage while loading",
            "medium",
        )
    ]
