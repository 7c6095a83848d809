"""The I/O side of the topology gate: read what NVML says about this host's GPUs into one dict.

The dict (the *snapshot*) is the raw evidence written as topology JSON and the only input of the
pure rules in ``tp2qual.checks.topology``, so it holds plain JSON values and never raises: a host
without NVML yields a snapshot that says so (``nvml_available: False`` and ``error``), and each
query NVML refuses is recorded as ``None`` or an ``"error: ..."`` string rather than crashing.

Shape (schema 1)::

    {
      "schema": 1,
      "source": "nvml" | "nvml-dump",
      "nvml_available": bool,
      "error": str | None,
      "host": {"hostname", "os", "kernel", "wsl2": bool, "wsl2_evidence": [str]},
      "driver_version": str | None, "cuda_driver_version": int | None,
      "nvml_version": str | None,
      "gpus": [{
        "index", "name", "uuid", "pci_bus_id",
        "memory_total_bytes", "memory_used_bytes", "memory_reserved_bytes" (None when unknown),
        "pcie": {"gen_current", "width_current", "gen_max", "width_max"},
        "nvlink": {"supported": bool, "active_links": int | None, "states": {link: str}},
        "compute_processes": [{"pid", "used_memory_bytes"}],
        "display_active": bool | None, "display_mode": bool | None,
        "memory_bus_width_bits", "max_memory_clock_mhz",
        "compute_capability": [major, minor] | None, "power_limit_w": float | None,
      }],
      "pairs": [{"a", "b", "topology": str | None, "p2p": {"read", "write", "nvlink", ...}}],
    }
"""

from __future__ import annotations

import platform
import socket
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

SCHEMA = 1
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS on Hopper/Blackwell

# nvmlGpuP2PCapsIndex_t values -> our names (NVML_P2P_CAPS_INDEX_*).
P2P_CAPS = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3, "pci": 4}
# nvmlGpuP2PStatus_t values -> words (NVML_P2P_STATUS_*).
P2P_STATUS = {
    0: "ok",
    1: "chipset not supported",
    2: "gpu not supported",
    3: "topology not supported",
    4: "disabled by regkey",
    5: "not supported",
    6: "unknown",
}
# nvmlGpuTopologyLevel_t values -> nvidia-smi topo -m words.
TOPOLOGY_LEVEL = {0: "internal", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def detect_wsl2(proc_version: str, dxg_exists: bool) -> list[str]:
    """Evidence that we run under WSL2 (empty when none): its kernel names Microsoft or WSL,
    and /dev/dxg is the paravirtual GPU device WSL2 exposes."""
    evidence = []
    lowered = proc_version.lower()
    if "microsoft" in lowered or "wsl" in lowered:
        evidence.append(f"/proc/version: {proc_version.strip()[:120]}")
    if dxg_exists:
        evidence.append("/dev/dxg exists")
    return evidence


def host_info() -> dict[str, Any]:
    """Hostname, OS, kernel and the WSL2 flag; WSL2 matters because cuMem and the expandable
    allocator fail there and Docker can only pass ``--gpus all``."""
    try:
        proc_version = Path("/proc/version").read_text(errors="replace")
    except OSError:
        proc_version = ""
    evidence = detect_wsl2(proc_version, Path("/dev/dxg").exists())
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "kernel": platform.release(),
        "wsl2": bool(evidence),
        "wsl2_evidence": evidence,
    }


def _text(value: Any) -> Any:
    """pynvml returns bytes on old versions and str on new ones."""
    return value.decode() if isinstance(value, bytes) else value


def _ask(call: Callable[[], Any], default: Any = None) -> Any:
    """One NVML query; a refusal (Not Supported, no permission) becomes ``default``."""
    try:
        return _text(call())
    except Exception:
        return default


def empty_snapshot(source: str, error: str | None) -> dict[str, Any]:
    """The snapshot skeleton; with an error it is the whole answer on a host without NVML."""
    return {
        "schema": SCHEMA,
        "source": source,
        "nvml_available": error is None,
        "error": error,
        "host": host_info(),
        "driver_version": None,
        "cuda_driver_version": None,
        "nvml_version": None,
        "gpus": [],
        "pairs": [],
    }


def snapshot() -> dict[str, Any]:
    """Query NVML now; never raises (a missing library or driver is reported in ``error``)."""
    try:
        import pynvml
    except ImportError as exc:
        return empty_snapshot("nvml", f"pynvml not importable (install nvidia-ml-py): {exc}")
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return empty_snapshot("nvml", f"nvmlInit failed: {exc}")
    try:
        return _snapshot(pynvml)
    finally:
        _ask(pynvml.nvmlShutdown)


def _snapshot(nv: Any) -> dict[str, Any]:
    snap = empty_snapshot("nvml", None)
    snap["driver_version"] = _ask(nv.nvmlSystemGetDriverVersion)
    snap["cuda_driver_version"] = _ask(nv.nvmlSystemGetCudaDriverVersion)
    snap["nvml_version"] = _ask(nv.nvmlSystemGetNVMLVersion)
    count = _ask(nv.nvmlDeviceGetCount, 0)
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    snap["gpus"] = [_gpu(nv, i, h) for i, h in enumerate(handles)]
    snap["pairs"] = [
        _pair(nv, a, b, handles[a], handles[b]) for a in range(count) for b in range(a + 1, count)
    ]
    return snap


def _gpu(nv: Any, index: int, h: Any) -> dict[str, Any]:
    mem = _ask(lambda: nv.nvmlDeviceGetMemoryInfo(h))
    cc = _ask(lambda: nv.nvmlDeviceGetCudaComputeCapability(h))
    power_mw = _ask(lambda: nv.nvmlDeviceGetPowerManagementLimit(h))
    return {
        "index": index,
        "name": _ask(lambda: nv.nvmlDeviceGetName(h)),
        "uuid": _ask(lambda: nv.nvmlDeviceGetUUID(h)),
        "pci_bus_id": _ask(lambda: nv.nvmlDeviceGetPciInfo(h).busId),
        "memory_total_bytes": getattr(mem, "total", None),
        "memory_used_bytes": getattr(mem, "used", None),
        "memory_reserved_bytes": _reserved_bytes(nv, h),
        "pcie": {
            "gen_current": _ask(lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            "width_current": _ask(lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(h)),
            "gen_max": _ask(lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(h)),
            "width_max": _ask(lambda: nv.nvmlDeviceGetMaxPcieLinkWidth(h)),
        },
        "nvlink": _nvlink(nv, h),
        "compute_processes": _processes(nv, h),
        # A display's memory is not another serve's (checks/topology.py memory_holder).
        "display_active": _feature(lambda: nv.nvmlDeviceGetDisplayActive(h)),
        "display_mode": _feature(lambda: nv.nvmlDeviceGetDisplayMode(h)),
        "memory_bus_width_bits": _ask(lambda: nv.nvmlDeviceGetMemoryBusWidth(h)),
        "max_memory_clock_mhz": _ask(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
        "compute_capability": list(cc) if cc else None,
        "power_limit_w": power_mw / 1000 if power_mw else None,
    }


def _feature(call: Callable[[], Any]) -> bool | None:
    """An NVML feature state (NVML_FEATURE_ENABLED = 1, DISABLED = 0); None when refused."""
    state = _ask(call)
    return None if state is None else bool(state)


def _reserved_bytes(nv: Any, h: Any) -> int | None:
    """The driver's reservation (NVML memory info v2), so the busy rule need not count it."""
    version = getattr(nv, "nvmlMemory_v2", None)
    if version is None:
        return None
    mem = _ask(lambda: nv.nvmlDeviceGetMemoryInfo(h, version=version))
    return getattr(mem, "reserved", None)


def _nvlink(nv: Any, h: Any) -> dict[str, Any]:
    """Per-link state; PCIe-only boards answer Not Supported on link 0, which we keep as such."""
    states: dict[str, str] = {}
    for link in range(NVLINK_MAX_LINKS):
        try:
            active = nv.nvmlDeviceGetNvLinkState(h, link)
        except Exception as exc:
            if link == 0:
                states["0"] = f"error: {exc}"
            break
        states[str(link)] = "active" if active else "inactive"
    supported = any(v in ("active", "inactive") for v in states.values())
    active_links = sum(v == "active" for v in states.values()) if supported else None
    return {"supported": supported, "active_links": active_links, "states": states}


def _processes(nv: Any, h: Any) -> list[dict[str, Any]]:
    procs = _ask(lambda: nv.nvmlDeviceGetComputeRunningProcesses(h), []) or []
    return [{"pid": p.pid, "used_memory_bytes": p.usedGpuMemory} for p in procs]


def _pair(nv: Any, a: int, b: int, ha: Any, hb: Any) -> dict[str, Any]:
    """What NVML says about peer access between two GPUs (the TP2 baseline turns PCIe P2P off)."""
    p2p: dict[str, str | None] = {}
    for name, caps_index in P2P_CAPS.items():
        status = _ask(partial(nv.nvmlDeviceGetP2PStatus, ha, hb, caps_index))
        p2p[name] = P2P_STATUS.get(status, f"status {status}") if status is not None else None
    level = _ask(lambda: nv.nvmlDeviceGetTopologyCommonAncestor(ha, hb))
    topology = TOPOLOGY_LEVEL.get(level, f"level {level}") if level is not None else None
    return {"a": a, "b": b, "topology": topology, "p2p": p2p}


def from_nvml_dump(dump: dict[str, Any]) -> dict[str, Any]:
    """Build a snapshot from the flat dump recorded on 2026-11-29 (plugins/tests/data/nvml/),
    so the rules can be tested on what a real H200 answered. Host facts are not in the dump."""
    snap = empty_snapshot("nvml-dump", None)
    snap["host"] = {
        "hostname": None,
        "os": None,
        "kernel": None,
        "wsl2": False,
        "wsl2_evidence": [],
    }
    snap["driver_version"] = dump.get("driver")
    snap["cuda_driver_version"] = dump.get("cuda_driver")
    snap["nvml_version"] = dump.get("nvml")
    snap["gpus"] = [_gpu_from_dump(g) for g in dump.get("gpus", [])]
    return snap


def _gpu_from_dump(g: dict[str, Any]) -> dict[str, Any]:
    link0 = g.get("nvlink0_state")
    nvlink_supported = isinstance(link0, bool | int)
    power_mw = g.get("power_limit_mw")
    return {
        "index": g["index"],
        "name": g.get("name"),
        "uuid": g.get("uuid"),
        "pci_bus_id": g.get("pci_bus_id"),
        "memory_total_bytes": g.get("memory_total"),
        "memory_used_bytes": g.get("memory_used"),
        "memory_reserved_bytes": None,
        "pcie": {
            "gen_current": g.get("pcie_gen_current"),
            "width_current": g.get("pcie_width_current"),
            "gen_max": g.get("pcie_gen_max"),
            "width_max": g.get("pcie_width_max"),
        },
        "nvlink": {
            "supported": nvlink_supported,
            "active_links": (1 if link0 else 0) if nvlink_supported else None,
            "states": {"0": f"error: {link0}" if not nvlink_supported else str(link0)},
        },
        "compute_processes": [
            {"pid": p.get("pid"), "used_memory_bytes": p.get("used_memory", p.get("usedGpuMemory"))}
            for p in g.get("compute_procs", [])
        ],
        "display_active": None,  # not in the 2026-11-29 dump
        "display_mode": None,
        "memory_bus_width_bits": g.get("mem_bus_width"),
        "max_memory_clock_mhz": g.get("max_mem_clock_mhz"),
        "compute_capability": g.get("compute_capability"),
        "power_limit_w": power_mw / 1000 if power_mw else None,
    }


def main() -> None:
    """``python -m tp2qual.gpu`` prints the snapshot as JSON (what the preflight gate stores)."""
    import json

    print(json.dumps(snapshot(), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
