"""Rules for the paths between GPUs and to them: peer mapping (CUDA 711/205), P2P transport
failures, NVLS, device visibility (duplicate GPU, invalid ordinal), and SGLang's PyNccl
communicator built for CPU ranks. Each names a call site or message, a cause, and a remedy
checked against the settings in force."""

from __future__ import annotations

import re

from tp2qual.checks.diagnosis.model import Context, Finding, call_site, evidence_of, is_set, p2p_off

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
                f"the driver ran out of peer mappings (CUDA 711 at {call_site(hits[0])}):"
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
                f"mapping a peer GPU's memory failed (CUDA 205 at {call_site(hits[0])}): the"
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


# SGLang's PyNccl on CPU ranks (0.5.23, read in the wheel): every TP group of more than one rank
# asks for a PyNccl communicator (srt/distributed/parallel_state.py:2180-2185, :463), which stays
# off only when the NCCL library fails to load (device_communicators/pynccl.py:73-79): the one
# SGLANG_NCCL_SO_PATH names, else torch's libnccl.so.2 on a CUDA build of torch
# (pynccl_wrapper.py:48-58). Loaded, rank 0 logs "sglang is using nccl==V" (pynccl.py:87) and
# torch.cuda.device(cpu) refuses the CPU (pynccl.py:116). Seen: the suite's own TP2 start on the
# CPU without the variable (data/sglang-0.5.23/failed-start-tp2-pynccl.log, both ranks).
_CPU_REFUSED = re.compile(r"Expected a cuda device, but got: cpu\b")
# SGLang's frame or its line, so vLLM's own PyNccl (vllm/distributed/…) is not called SGLang's.
_PYNCCL = re.compile(r"sglang/srt/distributed/device_communicators/pynccl\.py|sglang is using nccl")
_NCCL_LOADED = re.compile(r"sglang is using nccl==(?P<v>\S+)")
_SO_PATH = "SGLANG_NCCL_SO_PATH"
_SO_PATH_READ = re.compile(r"Found nccl from environment variable SGLANG_NCCL_SO_PATH=")


def rule_pynccl_on_cpu(ctx: Context) -> list[Finding]:
    refused = ctx.grep(_CPU_REFUSED)
    if not (refused and ctx.grep(_PYNCCL)):
        return []
    loaded = ctx.grep(_NCCL_LOADED)
    m = _NCCL_LOADED.search(loaded[0].text) if loaded else None
    said = f" (nccl {m['v']}, line {loaded[0].no})" if m else ""
    return [
        Finding(
            "pynccl_on_cpu",
            "SGLang built its PyNccl communicator for CPU ranks and it refuses a CPU device:"
            f" the NCCL library loaded{said}, which switches PyNccl on, as it does on a CUDA"
            " build of torch (SGLang 0.5.23 srt/distributed/device_communicators/pynccl.py:116)",
            evidence_of(sorted({*loaded[:1], *refused}, key=lambda ln: ln.no)),
            _pynccl_remedy(ctx),
            "high",
        )
    ]


def _pynccl_remedy(ctx: Context) -> str:
    if not is_set(ctx, _SO_PATH):
        return (
            f"set {_SO_PATH} to a path that does not load (e.g. /nonexistent/libnccl.so.2):"
            " SGLang then leaves PyNccl off and the CPU ranks talk over gloo, as"
            " smollm2-135m-sglang-tp2 does"
        )
    if ctx.grep(_SO_PATH_READ):  # the ranks read it, and the library it names loaded
        return (
            f"{ctx.source(_SO_PATH)} is already set and the ranks loaded the library it names:"
            " point it at a path that does not load (SGLang keeps PyNccl off only when loading"
            " fails)"
        )
    return (
        f"{ctx.source(_SO_PATH)} is already set, yet no rank logged 'Found nccl from environment"
        f" variable {_SO_PATH}=…' (pynccl_wrapper.py:52-54): it did not reach the scheduler"
        " processes; pass it in the engine's own environment (a launcher or container that"
        " drops it)"
    )


# Patterns whose every line a named failure explains (all ranks' copies, not only its evidence).
EXPLAINS: dict[str, re.Pattern[str]] = {
    "duplicate_gpu": _DUPLICATE,
    "peer_mapping_711": _711,
    "bar_mapping_205": _205,
    "p2p_failure": _P2P_WORDS,
    "nvls_failure": _NVLS,
    "pynccl_on_cpu": _CPU_REFUSED,
}
