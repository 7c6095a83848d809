"""Rules for memory the platform could not give: CUDA 999 from cuMem (WSL2 or not), /dev/shm
exhausted or unattachable, PyTorch's expandable segments, out-of-memory. Each names a call site or
message, a cause, and a remedy checked against the settings in force."""

from __future__ import annotations

import re

from tp2qual.checks.diagnosis.model import Context, Finding, call_site, evidence_of, is_set

_CUDA_999 = re.compile(r"Cuda failure 999\b|CUDA_ERROR_UNKNOWN")
_CUMEM_SITE = re.compile(r"ncclCuMemMapAndSetAccess|\bcuMem(?:Map|SetAccess|Create)\b")


def rule_cuda_999(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_CUDA_999, nccl=True)
    if not hits:
        return []
    cumem = ctx.grep(_CUMEM_SITE, nccl=True)
    site = call_site(cumem[0] if cumem else hits[0])
    if not cumem and not ctx.wsl2:
        return [
            Finding(
                "cuda_999",
                f"a CUDA call inside NCCL ({site}) returned 999 'unknown error'; the call site is"
                " not NCCL's cuMem mapping and nothing says the host is WSL2",
                evidence_of(hits),
                "check the GPU and driver state (nvidia-smi, kernel log for Xid errors) and"
                " that the container sees the driver; if the host is WSL2, say so (host"
                " identity) and disable NCCL's cuMem: NCCL_CUMEM_ENABLE=0"
                " NCCL_CUMEM_HOST_ENABLE=0" + _already(ctx, _CUMEM_KEYS),
                "low",
            )
        ]
    where = "; " + ctx.wsl2 if ctx.wsl2 else ""
    return [
        Finding(
            "cumem_cuda_999",
            f"NCCL's cuMem allocation failed with CUDA 999 at {site}, as it does under WSL2"
            f" (NVIDIA/nccl #1653){where}",
            evidence_of(sorted({*cumem, *hits}, key=lambda ln: ln.no)),
            _cumem_remedy(ctx),
            "high" if cumem and ctx.wsl2 else "medium",
        )
    ]


_CUMEM_KEYS = ("NCCL_CUMEM_ENABLE", "NCCL_CUMEM_HOST_ENABLE")


def _already(ctx: Context, keys: tuple[str, ...]) -> str:
    done = [ctx.source(k) for k in keys if is_set(ctx, k, "0")]
    return f" (already set: {', '.join(done)})" if done else ""


def _cumem_remedy(ctx: Context) -> str:
    missing = [k for k in _CUMEM_KEYS if not is_set(ctx, k, "0")]
    if missing:
        return "set " + " and ".join(f"{k}=0" for k in missing) + _already(ctx, _CUMEM_KEYS)
    return (
        f"{ctx.source(_CUMEM_KEYS[0])} and {ctx.source(_CUMEM_KEYS[1])} are already set and it"
        " still fails: check each rank acknowledges them ('NCCL_CUMEM_ENABLE set by environment"
        " to 0.'); if they do, the 999 comes from another cuMem user (PyTorch's expandable"
        " segments, the engine's own allocator): use the native allocator and update the"
        " Windows GPU driver"
    )


_SHM_FULL = re.compile(
    r"failed to extend /dev/shm|Error while creating shared memory segment"
    r"|posix_fallocate failed.*No space left"
)
_SHM_SIZE_IN_LOG = re.compile(r"\(size (?P<n>\d+)\)|to (?P<m>\d+) bytes")


def rule_shm_exhausted(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_SHM_FULL)
    if not hits:
        return []
    sizes = [
        int(m["n"] or m["m"]) for m in map(_SHM_SIZE_IN_LOG.search, (h.text for h in hits)) if m
    ]
    need = f" (a segment of {max(sizes) / 2**20:.1f} MiB)" if sizes else ""
    return [
        Finding(
            "shm_exhausted",
            f"NCCL could not create its shared-memory segment in /dev/shm{need}: /dev/shm is"
            " too small or full; NCCL's SHM transport (P2P off) and its proxy both need it",
            evidence_of(hits),
            shm_remedy(ctx),
            "high",
        )
    ]


def shm_remedy(ctx: Context) -> str:
    c = ctx.container
    if c is None:
        return (
            "free or enlarge /dev/shm on this host (df -h /dev/shm; remove stale /dev/shm/nccl-*"
            " files; mount -o remount,size=… /dev/shm); in a container run it with --ipc=host"
            " or a large --shm-size (Docker's default is 64 MB)"
        )
    if c.get("ipc_host"):
        return (
            "the container already runs with --ipc=host, so /dev/shm is the host's and it is"
            " full: free it (df -h /dev/shm; remove stale /dev/shm/nccl-* files) or enlarge it"
            " on the host"
        )
    if c.get("shm_size"):
        return (
            f"the container's shm_size is {c['shm_size']} and that is not enough: run it with"
            " --ipc=host, or raise --shm-size (several GB for TP2 with P2P off)"
        )
    return (
        "run the container with --ipc=host, or with a large --shm-size (Docker's default is 64 MB)"
    )


_SHM_ATTACH = re.compile(r"Error while attaching to shared memory segment")


def rule_shm_attach(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_SHM_ATTACH)
    if not hits:
        return []
    return [
        Finding(
            "shm_attach",
            "a rank could not open the shared-memory segment its peer created: the ranks do not"
            " share one /dev/shm (different containers or IPC namespaces) or it was removed",
            evidence_of(hits),
            "run all ranks in one container (or share the IPC namespace: --ipc=host), and keep"
            " systemd from removing IPC objects (RemoveIPC=no)",
            "medium",
        )
    ]


_EXPANDABLE = re.compile(r"expandable_segments\s*:\s*True", re.I)
_ALLOC_KEYS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
_ALLOC_UNKNOWN = re.compile(
    r"CUDA driver error: unknown error|CUDA error: unknown error|CUDA driver error"
)
_OOM = re.compile(
    r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|cudaErrorMemoryAllocation"
    r"|Cuda failure 2 'out of memory'|No available memory for the cache blocks"
    r"|(?:not enough|insufficient) (?:GPU )?memory .*KV cache|KV cache .*(?:exceeds|larger than)"
)
_FIRST_ALLOC = re.compile(
    r"torch\.(?:zeros|ones|empty)\(|init_device|ExpandableSegment|cuMemSetAccess"
)


def _expandable(ctx: Context) -> str | None:
    for key in _ALLOC_KEYS:
        if _EXPANDABLE.search(ctx.settings.get(key, "")):
            return ctx.source(key)
    return None


def rule_expandable_segments(ctx: Context) -> list[Finding]:
    on = _expandable(ctx)
    if not on:
        return []
    unknown = ctx.grep(_ALLOC_UNKNOWN)
    first = ctx.grep(_FIRST_ALLOC)
    hits = unknown or (ctx.grep(_OOM) if first else [])
    if not hits:
        return []
    return [
        Finding(
            "expandable_segments_alloc",
            "a CUDA allocation failed while PyTorch's expandable-segment allocator was on"
            f" ({on}); its cuMemSetAccess fails under WSL2 at the first allocation"
            " (pytorch/pytorch #192330)",
            evidence_of(first[:2] + hits),
            "use PyTorch's native allocator: remove expandable_segments:True from"
            f" {on.split('=')[0]} (or set expandable_segments:False)",
            "high" if first else "medium",
        )
    ]


def rule_oom(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_OOM)
    if not hits or (_expandable(ctx) and (ctx.grep(_FIRST_ALLOC) or ctx.grep(_ALLOC_UNKNOWN))):
        return []
    kv = [h for h in hits if re.search(r"cache blocks|KV cache|kv_cache", h.text, re.I)]
    if kv:
        return [
            Finding(
                "oom_kv_cache",
                "no GPU memory was left for the KV cache after the weights loaded"
                + _kv_figures(ctx),
                evidence_of(kv + ctx.grep(_KV_FIGURES)[:1]),
                _kv_budget_remedy(ctx),
                "high",
            )
        ]
    tp = f" at TP {ctx.tp}" if ctx.tp else ""
    if ctx.grep(_LOADING):
        return [_weights_oom(ctx, hits, tp)]
    more = f"more GPUs than TP {ctx.tp}" if ctx.tp else "more GPUs (tensor parallel)"
    return [
        Finding(
            "oom",
            f"the GPU ran out of memory{tp} while loading or running the model",
            evidence_of(hits),
            "check no other process holds GPU memory (nvidia-smi); if none does, the model"
            f" does not fit: {more}, a smaller quantization, or a smaller context / batch",
            "medium",
        )
    ]


# What the engine printed of the memory its KV cache got (vLLM GPU and CPU, SGLang).
_KV_FIGURES = re.compile(
    r"(?P<said>Available KV cache memory: -?[\d.]+ GiB|Explicitly set \([\d./]+\) GiB for KV"
    r" cache|# GPU blocks: \d+|max_total_num_tokens=\d+)"
)


def _kv_figures(ctx: Context) -> str:
    said = [m["said"] for ln in ctx.grep(_KV_FIGURES) if (m := _KV_FIGURES.search(ln.text))]
    return f" (the engine printed: {said[0]})" if said else ""


def _kv_budget_remedy(ctx: Context) -> str:
    if ctx.arg("kv_cache_memory_bytes"):
        return (
            f"the KV budget is set explicitly ({ctx.arg_source('kv_cache_memory_bytes')}) and"
            " holds no block: raise it, or drop it and let the memory share decide"
        )
    share = next((k for k in ("gpu_memory_utilization", "mem_fraction_static") if ctx.arg(k)), "")
    give = (
        f"raise {ctx.arg_source(share)}"
        if share
        else "give the engine more (--gpu-memory-utilization in vLLM, --mem-fraction-static in"
        " SGLang)"
    )
    return (
        f"check no other process holds GPU memory (nvidia-smi), then {give} or need less (lower"
        " --max-model-len / concurrent sequences, or a KV cache dtype of fewer bytes)"
    )


# The engine was loading the weights when memory ran out (vLLM, SGLang, TensorRT-LLM).
_LOADING = re.compile(
    r"load_model|Loading weights|load_weights|load_single_module|Loading safetensors"
    r"|Starting to load model"
)
_FIGURES = re.compile(
    r"Tried to allocate (?P<ask>[\d.]+ [KMG]iB)\. GPU \d+ has a total capacit?y of"
    r" (?P<total>[\d.]+ [KMG]iB) of which (?P<free>[\d.]+ [KMG]iB) is free"
)
_OTHERS = re.compile(r"Process \d+ has [\d.]+ [KMG]iB memory in use")


def _weights_oom(ctx: Context, hits: list, tp: str) -> Finding:
    m = next((f for h in hits if (f := _FIGURES.search(h.text))), None)
    figures = (
        f": it asked {m['ask']} with {m['free']} free of {m['total']}" if m is not None else ""
    )
    others = any(_OTHERS.search(h.text) for h in hits)
    more = f" than TP {ctx.tp}" if ctx.tp else ""
    return Finding(
        "oom_weights",
        f"the weights did not fit in GPU memory{tp} while the model loaded{figures}",
        evidence_of(hits),
        (
            "other processes hold memory on this GPU (the error lists them): stop them, then "
            if others
            else "check no other process holds GPU memory (nvidia-smi); if none does, "
        )
        + f"the model needs more GPUs{more}, a smaller quantization, or a lower memory share"
        " for other pools",
        "high" if m is not None else "medium",
    )


# Patterns whose every line a named failure explains (all ranks' copies, not only its evidence).
EXPLAINS: dict[str, re.Pattern[str]] = {
    "shm_exhausted": _SHM_FULL,
    "cumem_cuda_999": re.compile(f"{_CUDA_999.pattern}|{_CUMEM_SITE.pattern}"),
    "cuda_999": _CUDA_999,
    "shm_attach": _SHM_ATTACH,
}
