"""Rules for failures of the platform under NCCL and the engine: CUDA 999 and cuMem, /dev/shm,
PyTorch's allocator and out-of-memory, peer mapping and P2P, NVLS, device visibility, ports,
model files offline. Each names a call site or message, a cause, and a remedy checked against
the settings in force."""

from __future__ import annotations

import re

from tp2qual.checks.diagnosis.model import Context, Finding, Line, evidence_of, is_set, p2p_off

# --- rules ----------------------------------------------------------------------------------


_CUDA_999 = re.compile(r"Cuda failure 999\b|CUDA_ERROR_UNKNOWN")
_CUMEM_SITE = re.compile(r"ncclCuMemMapAndSetAccess|\bcuMem(?:Map|SetAccess|Create)\b")
_SITE = re.compile(r"(?P<site>[\w/]+\.(?:cc|h|cu|cpp):\d+)")


def rule_cuda_999(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_CUDA_999, nccl=True)
    if not hits:
        return []
    cumem = ctx.grep(_CUMEM_SITE, nccl=True)
    site = _call_site(cumem[0] if cumem else hits[0])
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


def _call_site(line: Line) -> str:
    m = _SITE.search(line.text)
    return m["site"] if m else "an NCCL call"


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
            _shm_remedy(ctx),
            "high",
        )
    ]


def _shm_remedy(ctx: Context) -> str:
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
                "no GPU memory was left for the KV cache after the weights loaded",
                evidence_of(kv),
                "check no other process holds GPU memory (nvidia-smi), then give the engine more"
                " (--gpu-memory-utilization in vLLM, --mem-fraction-static in SGLang) or need"
                " less (lower --max-model-len / concurrent sequences, or a KV cache dtype of"
                " fewer bytes)",
                "high",
            )
        ]
    tp = f" at TP {ctx.tp}" if ctx.tp else ""
    return [
        Finding(
            "oom",
            f"the GPU ran out of memory{tp} while loading or running the model",
            evidence_of(hits),
            "check no other process holds GPU memory (nvidia-smi); if none does, the model"
            " does not fit: more GPUs (tensor parallel), a smaller quantization, or a smaller"
            " context / batch",
            "medium",
        )
    ]


_711 = re.compile(r"Cuda failure 711|peer mapping resources exhausted")
_205 = re.compile(
    r"Cuda failure 205|mapping of buffer object failed|cudaErrorMapBufferObjectFailed"
)


def rule_peer_mapping(ctx: Context) -> list[Finding]:
    found = []
    hits = ctx.grep(_711, nccl=True)
    if hits:
        found.append(
            Finding(
                "peer_mapping_711",
                f"the driver ran out of peer mappings (CUDA 711 at {_call_site(hits[0])}):"
                " one process mapped more peer GPUs than the driver allows",
                evidence_of(hits),
                _peer_remedy(ctx, "run one process per GPU, or fewer GPUs per process"),
                "high",
            )
        )
    hits = ctx.grep(_205, nccl=True)
    if hits:
        found.append(
            Finding(
                "bar_mapping_205",
                f"mapping a peer GPU's memory failed (CUDA 205 at {_call_site(hits[0])}): the"
                " PCIe BAR window is too small or the IOMMU blocks peer mappings",
                evidence_of(hits),
                _peer_remedy(
                    ctx,
                    "enable Resizable BAR / Above-4G decoding in the firmware and put the IOMMU"
                    " in passthrough (nvidia-smi -q shows BAR1 size)",
                ),
                "medium",
            )
        )
    return found


def _peer_remedy(ctx: Context, next_step: str) -> str:
    off = p2p_off(ctx)
    if off:
        return (
            f"P2P is already off ({off}) and it still fails: the mapping is made outside"
            f" NCCL's P2P transport (its allocator or the application): {next_step}"
        )
    return f"set NCCL_P2P_DISABLE=1 so NCCL stops mapping peer memory, or {next_step}"


_P2P_WORDS = re.compile(r"transport/p2p|p2p\.cc|peer access|cudaIpc|IPC handle|P2P/(?:IPC|CUMEM)")
_FAIL_WORDS = re.compile(r"WARN|error|fail", re.I)
_P2P_FORCING = ("sys", "nvl", "phb", "pxb", "pix", "pxn", "5", "4", "3", "2")


def rule_p2p_failure(ctx: Context) -> list[Finding]:
    hits = [
        ln
        for ln in ctx.grep(_P2P_WORDS, nccl=True)
        if _FAIL_WORDS.search(ln.text) and not _711.search(ln.text) and not _205.search(ln.text)
    ]
    if not hits:
        return []
    return [
        Finding(
            "p2p_failure",
            "NCCL's P2P transport failed between the GPUs; P2P across PCIe without NVLink is"
            " unreliable on some platforms (local-inference-lab/rtx6kpro #15, NVIDIA/nccl #1999)",
            evidence_of(hits),
            _p2p_remedy(ctx),
            "high",
        )
    ]


def _p2p_remedy(ctx: Context) -> str:
    off = p2p_off(ctx)
    if off:
        return (
            f"P2P is disabled ({off}) yet NCCL used its P2P transport: the setting did not"
            " reach this process; check each rank logs 'NCCL_P2P_DISABLE set by environment"
            " to 1' (set it in the engine's / container's own environment)"
        )
    forcing = is_set(ctx, "NCCL_P2P_LEVEL", *_P2P_FORCING)
    force = f"; remove {ctx.source('NCCL_P2P_LEVEL')}, which forces P2P" if forcing else ""
    return "set NCCL_P2P_DISABLE=1 (NCCL falls back to SHM)" + force


_NVLS = re.compile(r"transport/nvls\.cc.*(?:WARN|fail)|NVLS.*(?:failed|error)", re.I)


def rule_nvls(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_NVLS, nccl=True)
    if not hits:
        return []
    if is_set(ctx, "NCCL_NVLS_ENABLE", "0"):
        remedy = (
            f"{ctx.source('NCCL_NVLS_ENABLE')} is already set and NVLS still fails: the setting"
            " did not reach NCCL (look for 'NCCL_NVLS_ENABLE set by environment to 0' in each"
            " rank's log)"
        )
    else:
        remedy = (
            "set NCCL_NVLS_ENABLE=0 (NCCL uses ring/tree instead), or make multicast work"
            " (fabric manager / IMEX running, driver and container allow multicast objects)"
        )
    return [
        Finding(
            "nvls_failure",
            "NVLink SHARP (NVLS multicast) setup failed in transport/nvls.cc: the driver,"
            " fabric manager or container does not support the multicast objects NCCL asked for",
            evidence_of(hits),
            remedy,
            "high",
        )
    ]


_DUPLICATE = re.compile(r"Duplicate GPU detected")
_ORDINAL = re.compile(r"invalid device ordinal|CUDA_ERROR_INVALID_DEVICE|cudaErrorInvalidDevice")


def rule_device_visibility(ctx: Context) -> list[Finding]:
    found = []
    hits = ctx.grep(_DUPLICATE)
    if hits:
        found.append(
            Finding(
                "duplicate_gpu",
                "two ranks were placed on the same GPU (Duplicate GPU detected)",
                evidence_of(hits),
                "give each rank its own GPU: " + _visibility(ctx),
                "high",
            )
        )
    hits = ctx.grep(_ORDINAL)
    if hits:
        found.append(
            Finding(
                "invalid_device_ordinal",
                "a rank asked for a GPU index the process cannot see (invalid device ordinal)",
                evidence_of(hits),
                "make the GPU indices the ranks use visible: " + _visibility(ctx),
                "high",
            )
        )
    return found


def _visibility(ctx: Context) -> str:
    parts, tp = [], ctx.tp
    cvd = ctx.settings.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        n = len([d for d in cvd.split(",") if d.strip()])
        need = f" for {tp} ranks" if tp else ""
        parts.append(
            f"{ctx.source('CUDA_VISIBLE_DEVICES')} exposes {n} GPU(s){need}; rank r uses"
            " index r within that list"
        )
    gpus = (ctx.container or {}).get("gpus")
    if gpus and str(gpus).strip("'\"") != "all":
        parts.append(f"the container gets --gpus {gpus}; under WSL2 only --gpus all works")
    if not parts:
        parts.append(
            "expose at least TP GPUs (CUDA_VISIBLE_DEVICES unset or listing them; --gpus all"
            " for a container) and have rank r select local GPU r"
        )
    return "; ".join(parts)


_BIND = re.compile(r"Errno 98|EADDRINUSE|[Aa]ddress already in use|address already in use")
_PORT = re.compile(r"\('[\d.]*', (?P<p>\d+)\)|:(?P<q>\d{2,5})\b")


def rule_port_in_use(ctx: Context) -> list[Finding]:
    # NCCL's own bind warnings (RAS, bootstrap) are notices; this is the engine's or torch's.
    hits = [ln for ln in ctx.grep(_BIND) if "NCCL WARN" not in ln.text]
    if not hits:
        return []
    store = any(re.search(r"TCPStore|c10d|rendezvous", ln.text) for ln in ctx.lines)
    what = "torch.distributed's rendezvous port" if store else "the server's port"
    return [
        Finding(
            "port_in_use",
            f"{what} was already taken when the engine tried to bind it",
            evidence_of(hits),
            "stop whatever holds it (often a previous server that did not exit: ss -ltnp), or"
            " start on a free port"
            + (" (MASTER_PORT / the engine's dist-init port)" if store else ""),
            "high",
        )
    ]


_OFFLINE = re.compile(
    r"OfflineModeIsEnabled|LocalEntryNotFoundError|outgoing traffic has been disabled"
    r"|offline mode is enabled|find the requested files in the (?:local|disk) cache"
    r"|Cannot find an appropriate cached snapshot"
)
_NO_NET = re.compile(
    r"Failed to resolve '?huggingface\.co|Max retries exceeded with url: /api/models"
)


def rule_offline_missing(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_OFFLINE)
    if hits:
        named = [k for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if is_set(ctx, k, "1")]
        said = f" ({', '.join(ctx.source(k) for k in named)})" if named else ""
        return [
            Finding(
                "offline_model_missing",
                f"downloads are disabled{said} and the model's files are not in the cache the"
                " engine reads",
                evidence_of(hits),
                "put the files there first (huggingface-cli download REPO --revision REV into"
                " the HF_HOME / HF_HUB_CACHE the engine uses; mount it into the container), or"
                " pass the local snapshot path as the model",
                "high",
            )
        ]
    hits = ctx.grep(_NO_NET)
    if not hits:
        return []
    offline = is_set(ctx, "HF_HUB_OFFLINE", "1")
    return [
        Finding(
            "hub_unreachable",
            "the engine tried to reach huggingface.co and there is no network",
            evidence_of(hits),
            "the files must come from the cache: check they are there (revision included)"
            if offline
            else "pre-download the model into the cache and set HF_HUB_OFFLINE=1",
            "high",
        )
    ]


# -- init and collectives: what started, what completed, and how long the log went on ----------


# Patterns whose every line a named failure explains (all ranks' copies, not only its evidence).
EXPLAINS: dict[str, re.Pattern[str]] = {
    "shm_exhausted": _SHM_FULL,
    "cumem_cuda_999": re.compile(f"{_CUDA_999.pattern}|{_CUMEM_SITE.pattern}"),
    "cuda_999": _CUDA_999,
    "duplicate_gpu": _DUPLICATE,
    "peer_mapping_711": _711,
    "bar_mapping_205": _205,
    "p2p_failure": _P2P_WORDS,
    "nvls_failure": _NVLS,
    "shm_attach": _SHM_ATTACH,
}
