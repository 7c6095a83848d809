"""The GPU snapshot (``topology.json``, schema in ``tp2qual.gpu``) as tables a person reads:
the host and its WSL2 facts, one row per GPU, and the GPU-pair P2P matrix. Pure; a snapshot of
another shape (or none) gives what it can and says when NVML was not there."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GIB = 1 << 30
GPU_HEADER = ("GPU", "name", "memory total", "memory used", "PCIe link (now / max)", "NVLink",
              "compute processes", "bus id")  # fmt: skip


@dataclass(frozen=True)
class TopologyView:
    host: tuple[tuple[str, str], ...]  # label, value
    gpu_header: tuple[str, ...]
    gpus: tuple[tuple[str, ...], ...]
    p2p_header: tuple[str, ...]  # "", GPU 0, GPU 1, ...
    p2p: tuple[tuple[str, ...], ...]  # a row per GPU: its name, then one cell per other GPU
    note: str  # NVML unavailable and why; empty when it answered


def _gib(value: Any) -> str:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return f"{value / GIB:.1f} GiB" if ok else "—"


def _link(pcie: Mapping[str, Any]) -> str:
    def one(gen: Any, width: Any) -> str:
        return f"Gen{gen} x{width}" if gen is not None and width is not None else "?"

    now = one(pcie.get("gen_current"), pcie.get("width_current"))
    return f"{now} / {one(pcie.get('gen_max'), pcie.get('width_max'))}"


def _nvlink(nvlink: Mapping[str, Any]) -> str:
    if not nvlink.get("supported"):
        return "none"
    return f"{nvlink.get('active_links')} active links"


def _gpu_row(gpu: Mapping[str, Any]) -> tuple[str, ...]:
    return (
        str(gpu.get("index", "?")),
        str(gpu.get("name") or "?"),
        _gib(gpu.get("memory_total_bytes")),
        _gib(gpu.get("memory_used_bytes")),
        _link(gpu.get("pcie") or {}),
        _nvlink(gpu.get("nvlink") or {}),
        str(len(gpu.get("compute_processes") or [])),
        str(gpu.get("pci_bus_id") or "—"),
    )


def _pair_cell(pair: Mapping[str, Any]) -> str:
    p2p = pair.get("p2p") or {}
    said = ", ".join(f"{k} {v}" for k, v in sorted(p2p.items()) if isinstance(v, str))
    return f"{pair.get('topology') or '?'}; {said}" if said else str(pair.get("topology") or "?")


def _matrix(indices: list[str], pairs: list[Mapping[str, Any]]) -> tuple[tuple[str, ...], ...]:
    cells = {}
    for pair in pairs:
        a, b = str(pair.get("a")), str(pair.get("b"))
        cells[a, b] = cells[b, a] = _pair_cell(pair)
    return tuple(
        (f"GPU {a}", *("self" if a == b else cells.get((a, b), "—") for b in indices))
        for a in indices
    )


def _host(snapshot: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    host = snapshot.get("host") or {}
    evidence = "; ".join(host.get("wsl2_evidence") or [])
    wsl2 = host.get("wsl2")
    wsl_words = "unknown" if wsl2 is None else ("yes" if wsl2 else "no")
    facts = [
        ("hostname", host.get("hostname")),
        ("OS", host.get("os")),
        ("kernel", host.get("kernel")),
        ("WSL2", f"{wsl_words} ({evidence})" if evidence else wsl_words),
        ("driver", snapshot.get("driver_version")),
        ("CUDA driver", snapshot.get("cuda_driver_version")),
        ("NVML", snapshot.get("nvml_version")),
        ("read by", snapshot.get("source")),
        ("read on Docker host", (snapshot.get("read_on") or {}).get("name")),
    ]
    return tuple((k, str(v)) for k, v in facts if v not in (None, ""))


def topology_view(snapshot: Any) -> TopologyView | None:
    if not isinstance(snapshot, Mapping):
        return None
    gpus = [g for g in snapshot.get("gpus") or [] if isinstance(g, Mapping)]
    pairs = [p for p in snapshot.get("pairs") or [] if isinstance(p, Mapping)]
    indices = [str(g.get("index", k)) for k, g in enumerate(gpus)]
    available = snapshot.get("nvml_available")
    note = "" if available or gpus else f"NVML not available: {snapshot.get('error') or 'no GPUs'}"
    return TopologyView(
        _host(snapshot),
        GPU_HEADER,
        tuple(_gpu_row(g) for g in gpus),
        ("", *(f"GPU {i}" for i in indices)),
        _matrix(indices, pairs) if len(indices) > 1 else (),
        note,
    )
