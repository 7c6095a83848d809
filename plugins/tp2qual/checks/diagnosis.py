"""Name the cause of a failed NCCL probe, server start-up or crash from its log, with a remedy
that fits the settings in force.

One engine for every log the suite sees (probe output, server start-up and crash logs, TP1 or
TP2, process or container). Each rule names a call site / message pattern, the platform evidence
it needs (WSL2 only from a host fact or the log's own statement of the platform, never from an
error number), a cause, and a remedy checked against the settings in force: the environment and
container settings passed in, completed by what the log itself states (``KEY=VALUE`` on a
command line, NCCL's ``… set by environment to …``, ``--ipc=host``). A remedy never says "set X"
when X is set; when X is set and the failure persists it says so and gives the next step.

Known harmless warnings are reported as notices and never fail on their own. Hangs are read from
the log's timestamps (a stall after Init START or after a collective was issued), not from a
timeout flag. Pure: text and mappings in, frozen dataclasses out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

FAILURE, INCOMPLETE, NOTICE = "failure", "incomplete", "notice"
HANG_AFTER_S = 30.0

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# --- result types ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One diagnosed problem (or notice): what happened, the lines that show it, what to do."""

    rule: str
    cause: str
    evidence: tuple[tuple[int, str], ...]
    remedy: str
    confidence: str  # high | medium | low
    severity: str = FAILURE  # failure | incomplete | notice

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "cause": self.cause,
            "evidence": [{"line": n, "text": t} for n, t in self.evidence],
            "remedy": self.remedy,
            "confidence": self.confidence,
        }

    def line(self) -> str:
        """One terminal line: ``rule: cause -> remedy``."""
        return f"{self.rule}: {self.cause} -> {self.remedy}"


@dataclass(frozen=True)
class Diagnosis:
    """The verdict over all findings: ``failed`` if any failure, else ``incomplete`` if the log
    stops before it can show success or failure, else ``ok``."""

    verdict: str
    findings: tuple[Finding, ...] = ()
    settings: Mapping[str, str] = field(default_factory=dict)

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == FAILURE)

    @property
    def notices(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == NOTICE)

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "findings": [f.as_dict() for f in self.findings],
            "settings": dict(sorted(self.settings.items())),
        }

    def summary(self) -> str:
        """One line for a terminal or a finding's reason: the failures, else the verdict."""
        named = self.failures or tuple(f for f in self.findings if f.severity == INCOMPLETE)
        return "; ".join(f.line() for f in named) or self.verdict


# --- the log, and the settings in force -----------------------------------------------------


@dataclass(frozen=True)
class Line:
    no: int  # 1-based
    text: str
    ts: datetime | None  # own or inherited from the last stamped line


@dataclass(frozen=True)
class Context:
    lines: tuple[Line, ...]
    settings: Mapping[str, str]  # KEY -> value in force
    sources: Mapping[str, str]  # KEY -> "environment" | "log line N"
    container: Mapping[str, Any] | None
    wsl2: str | None  # how WSL2 is known, or None
    tp: int | None
    at_info: bool  # the log already carries NCCL INFO lines

    def grep(self, pattern: re.Pattern[str], *, nccl: bool = False) -> list[Line]:
        return [
            ln for ln in self.lines if pattern.search(ln.text) and (not nccl or _is_nccl(ln.text))
        ]

    def source(self, key: str) -> str:
        return f"{key}={self.settings[key]} ({self.sources[key]})"


_SETTING = re.compile(
    r"(?<![\w-])(?P<key>NCCL_[A-Z0-9_]+|PYTORCH_(?:CUDA_)?ALLOC_CONF|CUDA_VISIBLE_DEVICES"
    r"|HF_HUB_OFFLINE|TRANSFORMERS_OFFLINE)=(?P<value>[^\s'\"`;)]+)"
)
_ACK = re.compile(r"\b(?P<key>NCCL_[A-Z0-9_]+) set by environment to (?P<value>\S+?)\.?\s*$")
_ADVICE = re.compile(r"try setting|to silence|you can (?:either )?(?:set|increase)", re.I)
_IPC_HOST = re.compile(r"--ipc[= ]host\b")
_SHM_SIZE = re.compile(r"--shm-size[= ](?P<v>\S+)")
_GPUS = re.compile(r"--gpus[= ](?P<v>\S+)")
_WSL_STATED = re.compile(r"microsoft-standard-WSL2|\bWSL is detected\b|\bWSL2\b")
_NCCL_LINE = re.compile(r"\bNCCL\b|nccl|\w+\.(?:cc|h):\d+")


def _is_nccl(text: str) -> bool:
    return _NCCL_LINE.search(text) is not None


_TS_FORMATS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b\d{4}-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})"), "iso"),
    (re.compile(r"\b(?:INFO|WARNING|ERROR|DEBUG) (\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})"), "vllm"),
    (re.compile(r"\[[EWI](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})"), "glog"),
)


def _timestamp(text: str) -> datetime | None:
    # Year dropped on purpose: engines mix formats with and without one in the same log.
    for pattern, _ in _TS_FORMATS:
        m = pattern.search(text)
        if m:
            mo, d, h, mi, s = (int(g) for g in m.groups())
            try:
                return datetime(2000, mo, d, h, mi, s)
            except ValueError:
                return None
    return None


def _lines(text: str) -> tuple[Line, ...]:
    out, last = [], None
    for no, raw in enumerate(text.splitlines(), 1):
        clean = _ANSI.sub("", raw).rstrip("\r")
        last = _timestamp(clean) or last
        out.append(Line(no, clean, last))
    return tuple(out)


def _settings(
    lines: tuple[Line, ...], env: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The environment passed in wins; the log fills in what it states itself."""
    settings = {k: str(v) for k, v in env.items()}
    sources = dict.fromkeys(settings, "environment")
    for ln in lines:
        found = [(m["key"], m["value"]) for m in _ACK.finditer(ln.text)]
        if not _ADVICE.search(ln.text) and "set by environment" not in ln.text:
            found += [(m["key"], m["value"]) for m in _SETTING.finditer(ln.text)]
        for key, value in found:
            if key not in settings:
                settings[key], sources[key] = value.rstrip(".,"), f"log line {ln.no}"
    return settings, sources


def _container(
    lines: tuple[Line, ...], container: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    stated: dict[str, Any] = {}
    for ln in lines:
        if _IPC_HOST.search(ln.text):
            stated.setdefault("ipc_host", True)
        for key, pattern in (("shm_size", _SHM_SIZE), ("gpus", _GPUS)):
            m = pattern.search(ln.text)
            if m:
                stated.setdefault(key, m["v"])
    if container is None and not stated:
        return None
    return {**stated, **(container or {})}


def _wsl2(lines: tuple[Line, ...], host: Mapping[str, Any] | None) -> str | None:
    host = host or {}
    if host.get("wsl2") or any("wsl" in str(v).lower() for v in host.values() if v):
        return "the host identity says WSL2"
    for ln in lines:
        if _WSL_STATED.search(ln.text):
            return f"the log states WSL (line {ln.no})"
    return None


def _is_set(ctx: Context, key: str, *values: str) -> bool:
    got = ctx.settings.get(key)
    return got is not None and (not values or got.strip().lower() in values)


def _p2p_off(ctx: Context) -> str | None:
    """How P2P is known to be off, if it is: NCCL_P2P_DISABLE=1 or NCCL_P2P_LEVEL=LOC/0."""
    if _is_set(ctx, "NCCL_P2P_DISABLE", "1"):
        return ctx.source("NCCL_P2P_DISABLE")
    if _is_set(ctx, "NCCL_P2P_LEVEL", "loc", "0"):
        return ctx.source("NCCL_P2P_LEVEL")
    return None


def _evidence(lines: list[Line], limit: int = 6) -> tuple[tuple[int, str], ...]:
    return tuple((ln.no, ln.text.strip()) for ln in lines[:limit])


# --- rules ----------------------------------------------------------------------------------

Rule = Callable[[Context], list[Finding]]

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
                _evidence(hits),
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
            _evidence(sorted({*cumem, *hits}, key=lambda ln: ln.no)),
            _cumem_remedy(ctx),
            "high" if cumem and ctx.wsl2 else "medium",
        )
    ]


_CUMEM_KEYS = ("NCCL_CUMEM_ENABLE", "NCCL_CUMEM_HOST_ENABLE")


def _already(ctx: Context, keys: tuple[str, ...]) -> str:
    done = [ctx.source(k) for k in keys if _is_set(ctx, k, "0")]
    return f" (already set: {', '.join(done)})" if done else ""


def _cumem_remedy(ctx: Context) -> str:
    missing = [k for k in _CUMEM_KEYS if not _is_set(ctx, k, "0")]
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
            _evidence(hits),
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
            _evidence(hits),
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
            _evidence(first[:2] + hits),
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
                _evidence(kv),
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
            _evidence(hits),
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
                _evidence(hits),
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
                _evidence(hits),
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
    off = _p2p_off(ctx)
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
            _evidence(hits),
            _p2p_remedy(ctx),
            "high",
        )
    ]


def _p2p_remedy(ctx: Context) -> str:
    off = _p2p_off(ctx)
    if off:
        return (
            f"P2P is disabled ({off}) yet NCCL used its P2P transport: the setting did not"
            " reach this process; check each rank logs 'NCCL_P2P_DISABLE set by environment"
            " to 1' (set it in the engine's / container's own environment)"
        )
    forcing = _is_set(ctx, "NCCL_P2P_LEVEL", *_P2P_FORCING)
    force = f"; remove {ctx.source('NCCL_P2P_LEVEL')}, which forces P2P" if forcing else ""
    return "set NCCL_P2P_DISABLE=1 (NCCL falls back to SHM)" + force


_NVLS = re.compile(r"transport/nvls\.cc.*(?:WARN|fail)|NVLS.*(?:failed|error)", re.I)


def rule_nvls(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_NVLS, nccl=True)
    if not hits:
        return []
    if _is_set(ctx, "NCCL_NVLS_ENABLE", "0"):
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
            _evidence(hits),
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
                _evidence(hits),
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
                _evidence(hits),
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
            _evidence(hits),
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
        named = [k for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if _is_set(ctx, k, "1")]
        said = f" ({', '.join(ctx.source(k) for k in named)})" if named else ""
        return [
            Finding(
                "offline_model_missing",
                f"downloads are disabled{said} and the model's files are not in the cache the"
                " engine reads",
                _evidence(hits),
                "put the files there first (huggingface-cli download REPO --revision REV into"
                " the HF_HOME / HF_HUB_CACHE the engine uses; mount it into the container), or"
                " pass the local snapshot path as the model",
                "high",
            )
        ]
    hits = ctx.grep(_NO_NET)
    if not hits:
        return []
    offline = _is_set(ctx, "HF_HUB_OFFLINE", "1")
    return [
        Finding(
            "hub_unreachable",
            "the engine tried to reach huggingface.co and there is no network",
            _evidence(hits),
            "the files must come from the cache: check they are there (revision included)"
            if offline
            else "pre-download the model into the cache and set HF_HUB_OFFLINE=1",
            "high",
        )
    ]


# -- init and collectives: what started, what completed, and how long the log went on ----------

_INIT = re.compile(
    r"\brank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev \d+.*?"
    r"(?:commId (?P<comm>0x[0-9a-fA-F]+))?.*? - Init (?P<phase>START|COMPLETE)\b"
)
_COLL = re.compile(
    r"NCCL INFO (?P<op>\w+): opCount (?P<n>[0-9a-fx]+) .*?comm (?P<comm>0x[0-9a-f]+)"
)
_RANK_TAG = re.compile(r"\[rank(\d+)\]|\bTP(\d+)\b|\brank (\d+)\b")
_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout|No available shared memory broadcast block"
    r" found in \d+ second|ProcessGroupNCCL's watchdog got stuck"
)
_PROGRESS = re.compile(
    r"TP2QUAL_PROBE_RESULT|Application startup complete|The server is fired up|Uvicorn running"
    r"|\"(?:GET|POST) /\S+ HTTP/1\.[01]\" 200|Avg prompt throughput"
)


def rule_init_pending(ctx: Context) -> list[Finding]:
    started: dict[tuple[str, int], Line] = {}
    for ln in ctx.lines:
        m = _INIT.search(ln.text)
        if not m:
            continue
        key = (m["comm"] or f"nranks{m['nranks']}", int(m["rank"]))
        if m["phase"] == "START":
            started[key] = ln
        else:
            started.pop(key, None)
    if not started:
        return []
    first = min(started.values(), key=lambda ln: ln.no)
    ranks = sorted({rank for _, rank in started})
    stall = _stall_after(ctx, first)
    evidence = _evidence(sorted(started.values(), key=lambda ln: ln.no))
    if stall is not None and stall >= HANG_AFTER_S:
        return [
            Finding(
                "init_hang",
                f"rank(s) {ranks} started NCCL init (Init START) and the log went on for"
                f" {stall:.0f} s without Init COMPLETE: a peer never joined",
                evidence + _evidence([ctx.lines[-1]], 1),
                _init_hang_remedy(ctx),
                "high",
            )
        ]
    return [
        Finding(
            "init_incomplete",
            f"rank(s) {ranks} started NCCL init and the log ends without Init COMPLETE or an"
            " error: the capture stopped early, or the rank was still waiting",
            evidence,
            "capture the log until the ranks finish or fail (a longer window); if it was cut by"
            " a timeout, that is a hang: " + _init_hang_remedy(ctx),
            "medium",
            INCOMPLETE,
        )
    ]


def _init_hang_remedy(ctx: Context) -> str:
    steps = ["check that every rank started and reached NCCL init (each rank's own log)"]
    if ctx.container is None or not (
        ctx.container.get("ipc_host") or ctx.container.get("shm_size")
    ):
        steps.append("give the container ipc=host or a large shm_size")
    if not _p2p_off(ctx):
        steps.append("set NCCL_P2P_DISABLE=1 if P2P channels were set up")
    return "; ".join(steps)


def _stall_after(ctx: Context, line: Line) -> float | None:
    """Seconds from ``line`` to the last time-stamped line, None when the log has no stamps."""
    last = next((ln.ts for ln in reversed(ctx.lines) if ln.ts), None)
    if line.ts is None or last is None:
        return None
    return (last - line.ts).total_seconds()


def rule_collective_hang(ctx: Context) -> list[Finding]:
    watchdog = ctx.grep(_WATCHDOG)
    if watchdog:
        return [_collective_finding(ctx, watchdog, "the engine's watchdog reports it", "high")]
    issued = [ln for ln in ctx.lines if _COLL.search(ln.text)]
    if not issued:
        return []
    last = issued[-1]
    later = [ln for ln in ctx.lines[last.no :] if _PROGRESS.search(ln.text)]
    stall = _stall_after(ctx, last)
    if later or stall is None or stall < HANG_AFTER_S:
        return []
    lag = _lagging_ranks(issued)
    why = f"the log went on for {stall:.0f} s after it with no progress" + lag
    return [_collective_finding(ctx, [last, ctx.lines[-1]], why, "high" if lag else "medium")]


def _lagging_ranks(issued: list[Line]) -> str:
    counts: dict[int, int] = {}
    for ln in issued:
        tag = _RANK_TAG.search(ln.text)
        rank = int(next(g for g in tag.groups() if g)) if tag else 0
        found = _COLL.search(ln.text)
        if found is None:
            continue
        counts[rank] = max(counts.get(rank, -1), int(found["n"], 0))
    top = max(counts.values())
    behind = sorted(r for r, n in counts.items() if n < top)
    return f"; rank(s) {behind} never issued opCount {top}" if behind else ""


def _collective_finding(ctx: Context, lines: list[Line], why: str, confidence: str) -> Finding:
    via = sorted({m.group(1) for ln in ctx.lines if (m := re.search(r" via (\S+)", ln.text))})
    p2p = [v for v in via if v.startswith("P2P")]
    if p2p and not _p2p_off(ctx):
        remedy = f"P2P channels were set up ({', '.join(p2p)}): set NCCL_P2P_DISABLE=1"
    else:
        used = f" (transport: {', '.join(via)})" if via else ""
        debug = (
            "NCCL_DEBUG_SUBSYS=INIT,COLL shows each rank's collectives"
            if ctx.at_info
            else "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL"
        )
        remedy = (
            f"a rank stopped or diverged{used}: read the lagging rank's own log for its error;"
            f" every rank must issue the same collectives; {debug}"
        )
    return Finding(
        "collective_hang",
        f"a collective was issued after NCCL init and never completed: {why}",
        _evidence(lines),
        remedy,
        confidence,
    )


# -- harmless notices, the remaining NCCL warnings, torch's wrapper error ----------------------

HARMLESS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "nccl_ras_bind",
        re.compile(r"NCCL WARN Call to bind failed: Address already in use"),
        "NCCL's RAS listener found its port taken; NCCL carries on without it",
    ),
    (
        "vllm_custom_allreduce_off",
        re.compile(r"Custom allreduce is disabled because"),
        "vLLM uses NCCL's all-reduce instead of its own P2P kernel: a notice, not an NCCL failure",
    ),
    (
        "torch_no_destroy_pg",
        re.compile(r"destroy_process_group\(\) was not called before program exit"),
        "PyTorch's shutdown reminder; says nothing about NCCL's health",
    ),
)


def rule_harmless(ctx: Context) -> list[Finding]:
    found = []
    for rule, pattern, why in HARMLESS:
        hits = ctx.grep(pattern)
        if hits:
            found.append(Finding(rule, why, _evidence(hits, 2), "none needed", "high", NOTICE))
    return found


_WARN = re.compile(r"NCCL WARN\b")
_DIST_ERROR = re.compile(r"DistBackendError|\bNCCL error(?: in)?:|ncclSystemError|ncclUnhandled")


def _other_warnings(ctx: Context, explained: set[int]) -> list[Finding]:
    found: dict[str, Finding] = {}
    for ln in ctx.grep(_WARN):
        if ln.no in explained:
            continue
        warn = _WARN.search(ln.text)
        message = ln.text[warn.end() :].strip() if warn else ln.text.strip()
        where = (
            "the NCCL INFO lines just before it show the call path"
            if ctx.at_info
            else "rerun the probe with NCCL_DEBUG=INFO to see the call path"
        )
        found.setdefault(
            message,
            Finding("nccl_warn", f"NCCL warned: {message}", _evidence([ln]), where, "low"),
        )
    return list(found.values())


def _dist_error(ctx: Context, named: list[Finding]) -> list[Finding]:
    hits = ctx.grep(_DIST_ERROR)
    if not hits:
        return []
    if named:
        remedy = f"follows from {named[0].rule}: see its remedy"
    elif ctx.at_info:
        remedy = "the NCCL WARN / 'Last error:' lines around it name the failing call"
    else:
        remedy = "rerun with NCCL_DEBUG=INFO to get NCCL's own warning"
    return [
        Finding(
            "dist_backend_error",
            "torch.distributed reported an NCCL error",
            _evidence(hits, 3),
            remedy,
            "low" if named else "medium",
        )
    ]


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
    rule_port_in_use,
    rule_offline_missing,
    rule_init_pending,
    rule_collective_hang,
)


# --- entry ----------------------------------------------------------------------------------


def context(
    text: str,
    *,
    tp: int | None = None,
    env: Mapping[str, str] | None = None,
    container: Mapping[str, Any] | None = None,
    host: Mapping[str, Any] | None = None,
) -> Context:
    lines = _lines(text)
    settings, sources = _settings(lines, env or {})
    return Context(
        lines=lines,
        settings=settings,
        sources=sources,
        container=_container(lines, container),
        wsl2=_wsl2(lines, host),
        tp=tp,
        at_info=any("NCCL INFO" in ln.text for ln in lines),
    )


def diagnose(
    text: str,
    *,
    tp: int | None = None,
    env: Mapping[str, str] | None = None,
    container: Mapping[str, Any] | None = None,
    host: Mapping[str, Any] | None = None,
) -> Diagnosis:
    """Every finding the log supports, named failures first, then notices.

    ``env``: the environment the ranks / engine ran with; ``container``: ``ipc_host`` (bool),
    ``shm_size``, ``gpus`` when it ran in a container (None: a local process, unless the log's
    own ``docker run`` line says otherwise); ``host``: the host identity (``wsl2`` or a kernel /
    platform string), the only source besides the log's own statement for WSL2."""
    ctx = context(text, tp=tp, env=env, container=container, host=host)
    named = [f for rule in RULES for f in rule(ctx)]
    failures = [f for f in named if f.severity == FAILURE]
    if failures:  # an error explains why init never completed: not a cut-off log
        named = [f for f in named if f.severity != INCOMPLETE]
    if not ctx.lines or not any(ln.text.strip() for ln in ctx.lines):
        named.append(_EMPTY)
    notices = rule_harmless(ctx)
    explained = {n for f in named + notices for n, _ in f.evidence}
    explained |= _explained_by_pattern(ctx, failures)
    rest = _other_warnings(ctx, explained) + _dist_error(ctx, failures)
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


def _explained_by_pattern(ctx: Context, failures: list[Finding]) -> set[int]:
    """Warnings a named failure covers beyond its first few evidence lines (all ranks' copies)."""
    patterns = {
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
    out: set[int] = set()
    for f in failures:
        pattern = patterns.get(f.rule)
        if pattern:
            out |= {ln.no for ln in ctx.grep(pattern)}
    return out


def _verdict(findings: tuple[Finding, ...]) -> str:
    severities = {f.severity for f in findings}
    if FAILURE in severities:
        return "failed"
    return "incomplete" if INCOMPLETE in severities else "ok"
