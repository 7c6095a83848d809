"""Rules over a GPU topology snapshot (``tp2qual.gpu.snapshot()``): can this host run TP now?

Exclusive TP2 needs as many GPUs as the TP size, enough memory on each, and no other serve on
them; WSL2 is recorded because the NCCL and allocator workarounds depend on it. A GPU that drives
a display holds the desktop's memory, which is not another serve's (``memory_holder``). Pure: the
snapshot dict in, a ``Verdict`` out; every figure the decision used goes into ``measures``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tp2qual.checks.gpu_holders import HAND_OVER_HOW, holders_sentence
from tp2qual.checks.verdict import Verdict

GIB = 1024**3
MIB = 1024**2
# NVML's v1 "used" includes the driver's reservation (616 MiB on an idle H200, where nvidia-smi
# says "Used 0 MiB"). Above this, on a GPU that drives no display, another serve is likely resident.
BUSY_FLOOR_MIB = 1024

# What a desktop holds on the GPU that drives its display. Under WSL2, NVML counts the Windows
# desktop's memory (its compositor and every window drawn on that GPU) as used, and lists no
# process for it. Seen with nvidia-smi under WSL2 on display GPUs ("Disp.A On"): 1,138 MiB on an
# RTX 5080 (driver 591.86, AlexsJones/llmfit#52), 2,880 MiB on a GeForce with applications open
# (driver 526.98, XuehaiPan/nvitop#49); GPUs driving no display read 53-161 MiB there
# (Syllo/nvtop#124). NVML still answers the display flags there (nvidia-smi -a under WSL2 with
# WDDM: "Display Active: Enabled", NVIDIA/nvidia-container-toolkit#271). So up to 3 GiB on a
# GPU with an active display and no compute process is the desktop's; a busier desktop (several
# 4K screens) can hold more: the candidate's ``[gpus] desktop_mib`` or ``--desktop-mib`` raises
# it, never lowers it.
DESKTOP_TYPICAL_MIB = 3072

# Who holds a GPU's memory (``memory_holder``).
FREE, DESKTOP, SERVE = "free", "desktop", "another serve"

# NVML reports the memory clock such that each pin moves two bits per clock: HBM's base clock is
# double-data-rate (H200: 3201 MHz -> 6.4 Gb/s per pin) and for GDDR6X/GDDR7 the reported clock
# is half the per-pin data rate (GDDR7 at 28 Gb/s reads 14001 MHz). So bytes/s =
# bus width / 8 x clock x 2. Check: H200, 6016 bit x 3201 MHz -> 4,814 GB/s (spec 4.8 TB/s);
# RTX PRO 6000 Blackwell, 512 bit x 14001 MHz -> 1,792 GB/s (spec 1,792 GB/s).
TRANSFERS_PER_CLOCK = 2

# Vendor-specified peak bandwidth (GB/s) for when NVML cannot tell; matched by name substring.
BANDWIDTH_TABLE_GBS = {
    "H200": 4800.0,
    "H100 NVL": 3900.0,
    "H100 80GB HBM3": 3350.0,
    "H100 PCIe": 2000.0,
    "A100-SXM4-80GB": 2039.0,
    "A100 80GB PCIe": 1935.0,
    "L40S": 864.0,
    "RTX PRO 6000 Blackwell": 1792.0,
    "RTX 5090": 1792.0,
    "RTX 4090": 1008.0,
}


def nvml_bandwidth_gbs(gpu: Mapping[str, Any]) -> float | None:
    """Peak DRAM bandwidth from NVML's bus width and max memory clock; None when either is
    missing (NVML refused the query, or a dump predates the fields)."""
    width, clock = gpu.get("memory_bus_width_bits"), gpu.get("max_memory_clock_mhz")
    if not width or not clock:
        return None
    return width / 8 * clock * 1e6 * TRANSFERS_PER_CLOCK / 1e9


def table_bandwidth_gbs(name: str | None) -> float | None:
    """The vendor figure for a GPU name; the longest matching key wins (H100 NVL before H100)."""
    if not name:
        return None
    lowered = name.lower()
    for key in sorted(BANDWIDTH_TABLE_GBS, key=len, reverse=True):
        if key.lower() in lowered:
            return BANDWIDTH_TABLE_GBS[key]
    return None


def memory_bandwidth_gbs(gpu: Mapping[str, Any]) -> float | None:
    """Peak memory bandwidth in GB/s (1e9 bytes/s): NVML first, the name table otherwise."""
    return nvml_bandwidth_gbs(gpu) or table_bandwidth_gbs(gpu.get("name"))


def used_mib(gpu: Mapping[str, Any]) -> float:
    """Memory in use beyond the driver's reservation, where NVML reports that reservation."""
    used = gpu.get("memory_used_bytes") or 0
    reserved = gpu.get("memory_reserved_bytes") or 0
    return max(0, used - reserved) / MIB


def memory_holder(
    gpu: Mapping[str, Any], floor_mib: float, desktop_mib: float = DESKTOP_TYPICAL_MIB
) -> str:
    """Who holds the memory a GPU has in use: ``SERVE`` when NVML lists a compute process
    (a serve has one; the desktop never does), ``FREE`` at or under the floor, ``DESKTOP`` when
    NVML says a display is active on the GPU and no more than a desktop's typical figure is
    used, else ``SERVE``: more than a desktop holds, though NVML lists no process (as under
    WSL2, where it lists none even for a serve).

    Only the display's *active* state counts: NVML's display *mode* ("a display is connected")
    reads enabled on a headless H200 (plugins/tests/data/nvml-display-h200-2026-12-02)."""
    if gpu.get("compute_processes"):
        return SERVE
    used = used_mib(gpu)
    if used <= floor_mib:
        return FREE
    return DESKTOP if gpu.get("display_active") and used <= desktop_mib else SERVE


def busy_reasons(
    gpu: Mapping[str, Any],
    floor_mib: float,
    desktop_mib: float = DESKTOP_TYPICAL_MIB,
    holders: list[Mapping[str, Any]] | None = None,
) -> list[str]:
    """Why a GPU looks taken by another serve (empty when it is free or holds only the
    desktop's memory): its compute processes, the memory held above what explains it, and the
    running containers that take it (``holders``: the snapshot's ``gpu_containers``), which
    hold it even while its memory reads free (a serve between loads)."""
    named = holders_sentence(gpu, list(holders or []))
    if memory_holder(gpu, floor_mib, desktop_mib) != SERVE:
        return [named] if named else []
    reasons = []
    procs = gpu.get("compute_processes") or []
    if procs:
        listed = ", ".join(
            f"pid {p.get('pid')} ({(p.get('used_memory_bytes') or 0) / GIB:.1f} GiB)" for p in procs
        )
        reasons.append(f"{len(procs)} compute process(es): {listed}")
    used = used_mib(gpu)
    if gpu.get("display_active") and used > desktop_mib:
        reasons.append(
            f"{used:.0f} MiB used, more than a desktop holds (typical {desktop_mib:.0f} MiB) on"
            " this display GPU"
        )
    elif used > floor_mib:
        reasons.append(f"{used:.0f} MiB used (floor {floor_mib:.0f} MiB)")
    if named:
        reasons.append(named)
    return reasons


def desktop_notice(
    gpu: Mapping[str, Any], floor_mib: float, desktop_mib: float, wsl2: bool
) -> str | None:
    """One sentence for a GPU whose used memory is the desktop's; None for any other GPU."""
    if memory_holder(gpu, floor_mib, desktop_mib) != DESKTOP:
        return None
    where = " (under WSL2, NVML counts the Windows desktop's memory)" if wsl2 else ""
    return (
        f"{_gpu_label(gpu)} drives a display: its {used_mib(gpu):.0f} MiB used are the"
        f" desktop's{where}, not another serve's (display active, no compute process, within a"
        f" desktop's typical {desktop_mib:.0f} MiB); that memory is not the serve's"
    )


def _gpu_label(gpu: Mapping[str, Any]) -> str:
    return f"GPU {gpu.get('index')} ({gpu.get('name')})"


def _gpu_measures(gpu: Mapping[str, Any], floor_mib: float, desktop_mib: float) -> dict[str, Any]:
    pcie = gpu.get("pcie") or {}
    nvlink = gpu.get("nvlink") or {}
    nvml_bw = nvml_bandwidth_gbs(gpu)
    bandwidth = memory_bandwidth_gbs(gpu)
    return {
        "index": gpu.get("index"),
        "name": gpu.get("name"),
        "uuid": gpu.get("uuid"),
        "memory_total_gib": round((gpu.get("memory_total_bytes") or 0) / GIB, 2),
        "memory_used_mib": round(used_mib(gpu), 1),
        "memory_held_by": memory_holder(gpu, floor_mib, desktop_mib),
        "display_active": gpu.get("display_active"),
        "busy": busy_reasons(gpu, floor_mib, desktop_mib),
        "pcie": f"Gen{pcie.get('gen_current')} x{pcie.get('width_current')}"
        f" (max Gen{pcie.get('gen_max')} x{pcie.get('width_max')})",
        "nvlink_active_links": nvlink.get("active_links"),
        "bandwidth_gbs": round(bandwidth, 1) if bandwidth else None,
        "bandwidth_from": "nvml" if nvml_bw else ("table" if bandwidth else None),
    }


def check(
    snapshot: Mapping[str, Any],
    *,
    tp_size: int,
    min_memory_gib_per_gpu: float,
    allow_busy: bool = False,
    busy_floor_mib: float = BUSY_FLOOR_MIB,
    desktop_mib: float | None = None,
) -> Verdict:
    """Pass iff NVML answered, at least ``tp_size`` GPUs exist, each of the first ``tp_size`` has
    the memory asked for, and none of them is busy with another serve (unless ``allow_busy``,
    recorded). A display GPU's desktop memory is a notice, not a busy GPU; ``desktop_mib``
    raises the desktop's typical figure (never below ``DESKTOP_TYPICAL_MIB``)."""
    host = snapshot.get("host") or {}
    holders = list(snapshot.get("gpu_containers") or [])
    desktop = max(DESKTOP_TYPICAL_MIB, desktop_mib or 0)
    base = {
        "tp_size": tp_size,
        "min_memory_gib_per_gpu": min_memory_gib_per_gpu,
        "allow_busy": allow_busy,
        "busy_floor_mib": busy_floor_mib,
        "desktop_mib": desktop,
        "wsl2": bool(host.get("wsl2")),
        "driver_version": snapshot.get("driver_version"),
        "cuda_driver_version": snapshot.get("cuda_driver_version"),
    }
    if not snapshot.get("nvml_available"):
        error = snapshot.get("error") or "no reason given"
        return Verdict.failed(f"NVML unavailable: {error}", **base)
    gpus = sorted(snapshot.get("gpus") or [], key=lambda g: g.get("index", 0))
    used = gpus[:tp_size]
    measures = {
        **base,
        "gpu_count": len(gpus),
        "gpu_names": [g.get("name") for g in gpus],
        "gpus": [_gpu_measures(g, busy_floor_mib, desktop) for g in gpus],
        "pairs": list(snapshot.get("pairs") or []),
        "busy_gpus": [
            g.get("index") for g in used if busy_reasons(g, busy_floor_mib, desktop, holders)
        ],
        "gpu_containers": holders,
        "gpu_containers_read": snapshot.get("gpu_containers_read"),
        "memory_held_by": [_held_by(g, busy_floor_mib, desktop) for g in used],
        "notices": [
            n
            for g in used
            if (n := desktop_notice(g, busy_floor_mib, desktop, bool(host.get("wsl2"))))
        ],
    }
    problems = _count_problems(gpus, tp_size)
    problems += _memory_problems(used, min_memory_gib_per_gpu)
    if not allow_busy:
        problems += _busy_problems(used, busy_floor_mib, desktop, holders)
    if problems:
        return Verdict.failed("; ".join(problems), **measures)
    return Verdict.passed(**measures)


def _count_problems(gpus: list[Mapping[str, Any]], tp_size: int) -> list[str]:
    if len(gpus) >= tp_size:
        return []
    names = ", ".join(_gpu_label(g) for g in gpus) or "none"
    return [f"{len(gpus)} GPU(s) found ({names}), TP={tp_size} needs {tp_size}"]


def _memory_problems(gpus: list[Mapping[str, Any]], min_gib: float) -> list[str]:
    problems = []
    for gpu in gpus:
        total = (gpu.get("memory_total_bytes") or 0) / GIB
        if total < min_gib:
            problems.append(f"{_gpu_label(gpu)} has {total:.1f} GiB, needs {min_gib:g} GiB")
    return problems


def _held_by(gpu: Mapping[str, Any], floor_mib: float, desktop_mib: float) -> str:
    """``GPU 0: desktop (1138 MiB)``: the finding's one line per GPU the candidate uses."""
    holder = memory_holder(gpu, floor_mib, desktop_mib)
    return f"GPU {gpu.get('index')}: {holder} ({used_mib(gpu):.0f} MiB used)"


def _busy_problems(
    gpus: list[Mapping[str, Any]],
    floor_mib: float,
    desktop_mib: float,
    holders: list[Mapping[str, Any]],
) -> list[str]:
    # A named holder's sentence already says how to hand the GPU over; else the general remedy.
    return [
        f"{_gpu_label(gpu)} is busy: {'; '.join(reasons)}"
        + ("" if holders_sentence(gpu, holders) else f": another serve's -> {remedy}")
        for gpu in gpus
        if (reasons := busy_reasons(gpu, floor_mib, desktop_mib, holders))
        and (remedy := _busy_remedy(gpu, desktop_mib))
    ]


def _busy_remedy(gpu: Mapping[str, Any], desktop_mib: float) -> str:
    if gpu.get("display_active") and not gpu.get("compute_processes"):
        return (
            "stop the other serve first; if it is the desktop alone that holds this much, raise"
            f" the desktop's figure above {desktop_mib:.0f} MiB ([gpus] desktop_mib or"
            f" --desktop-mib); if a container holds it, {HAND_OVER_HOW}"
        )
    return f"stop the other serve first, or, if it is a container, {HAND_OVER_HOW}"
