"""Preflight tells a display's desktop memory apart from another serve's (checks/topology.py).

Under WSL2 NVML counts the Windows desktop's memory as used on the GPU that drives a display and
lists no process for it, so the 1 GiB busy floor alone would ask the operator to "stop the other
serve first" on an idle workstation. The snapshots are the real two-H200 ones
(data/h200x2-2026-11-30: idle, and another process holding 20 GiB of GPU 0) with the fields a
display GPU under WSL2 changes: the host's ``wsl2``, NVML's display flags (their shape as a real
H200 answered: data/nvml-display-h200-2026-12-02) and the memory the desktop holds (1,138 MiB:
the idle RTX 5080 desktop behind DESKTOP_TYPICAL_MIB).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from test_topology import FakeNvml

from tp2qual import gpu as gpu_mod
from tp2qual.checks.topology import (
    DESKTOP,
    DESKTOP_TYPICAL_MIB,
    FREE,
    SERVE,
    check,
    memory_holder,
)

DATA = Path(__file__).parent / "data"
MIB = 1024**2
DESKTOP_SEEN_MIB = 1138  # nvidia-smi under WSL2, RTX 5080 driving the desktop (llmfit#52)


def _snapshot(name: str) -> dict[str, Any]:
    return json.loads((DATA / "h200x2-2026-11-30" / name).read_text())


def wsl2_desktop(used_mib: float = DESKTOP_SEEN_MIB, *, active: bool = True) -> dict[str, Any]:
    """The idle pair under WSL2, GPU 0 driving the desktop and holding ``used_mib`` beyond the
    driver's reservation; GPU 1 drives nothing. Display mode reads enabled on both, as it does
    on a headless H200."""
    snap = copy.deepcopy(_snapshot("topology-idle.json"))
    snap["host"].update(wsl2=True, wsl2_evidence=["/dev/dxg exists"])
    for gpu in snap["gpus"]:
        gpu.update(display_mode=True, display_active=False)
    first = snap["gpus"][0]
    first["memory_used_bytes"] = first["memory_reserved_bytes"] + int(used_mib * MIB)
    first["display_active"] = active
    return snap


def test_the_recorded_h200_answers_have_the_shape_the_rule_reads():
    capture = json.loads((DATA / "nvml-display-h200-2026-12-02" / "nvml-display.json").read_text())
    (gpu,) = capture["gpus"]
    assert (gpu["display_mode"], gpu["display_active"]) == (1, 0)  # mode "enabled", headless
    assert gpu["compute_procs"] == [] and gpu["memory_used"] == 644939776
    snap = wsl2_desktop(2048, active=False)  # mode enabled, not active: the mode is ignored
    assert memory_holder(snap["gpus"][0], 1024) == SERVE


def test_a_wsl2_desktop_is_not_another_serve():
    verdict = check(wsl2_desktop(), tp_size=2, min_memory_gib_per_gpu=100)
    assert verdict.ok, verdict.reason
    m = verdict.measures
    assert m["busy_gpus"] == [] and m["wsl2"] is True and m["desktop_mib"] == DESKTOP_TYPICAL_MIB
    assert m["memory_held_by"] == ["GPU 0: desktop (1138 MiB used)", "GPU 1: free (0 MiB used)"]
    (notice,) = m["notices"]
    assert notice.startswith("GPU 0 (NVIDIA H200) drives a display: its 1138 MiB used are the")
    assert "under WSL2, NVML counts the Windows desktop's memory" in notice
    assert [g["memory_held_by"] for g in m["gpus"]] == [DESKTOP, FREE]
    json.dumps(m)


def test_the_same_memory_without_a_display_is_another_serve():
    verdict = check(wsl2_desktop(active=False), tp_size=2, min_memory_gib_per_gpu=100)
    assert not verdict.ok
    assert verdict.reason.startswith(
        "GPU 0 (NVIDIA H200) is busy: 1138 MiB used (floor 1024 MiB): another serve's"
        " -> stop the other serve first, or, if it is a container, hand it over"
    ), verdict.reason
    assert verdict.measures["memory_held_by"][0] == "GPU 0: another serve (1138 MiB used)"
    assert verdict.measures["notices"] == []


def test_more_than_a_desktop_holds_is_another_serve_beside_it():
    verdict = check(wsl2_desktop(20 * 1024), tp_size=2, min_memory_gib_per_gpu=100)
    assert not verdict.ok
    assert (
        "GPU 0 (NVIDIA H200) is busy: 20480 MiB used, more than a desktop holds (typical 3072 MiB)"
        " on this display GPU: another serve's"
    ) in verdict.reason
    assert "-> stop the other serve first; if it is the desktop alone" in verdict.reason
    assert "--desktop-mib" in verdict.reason and verdict.measures["busy_gpus"] == [0]


def test_a_compute_process_is_a_serve_even_on_a_display_gpu():
    snap = _snapshot("topology-busy.json")  # pid 774 holding 20.5 GiB of GPU 0, recorded
    snap["gpus"][0]["display_active"] = True
    verdict = check(snap, tp_size=2, min_memory_gib_per_gpu=100)
    assert not verdict.ok
    assert verdict.reason.startswith(
        "GPU 0 (NVIDIA H200) is busy: 1 compute process(es): pid 774 (20.5 GiB); 21007 MiB used,"
        " more than a desktop holds"
    ), verdict.reason
    assert "-> stop the other serve first, or, if it is a container" in verdict.reason
    assert "desktop alone" not in verdict.reason  # a process: no desktop allowance
    assert memory_holder(snap["gpus"][0], 1024) == SERVE


def test_the_desktop_figure_can_be_raised_never_lowered():
    busier = wsl2_desktop(4000)  # several screens
    assert not check(busier, tp_size=2, min_memory_gib_per_gpu=100).ok
    raised = check(busier, tp_size=2, min_memory_gib_per_gpu=100, desktop_mib=4096)
    assert raised.ok and raised.measures["desktop_mib"] == 4096
    lowered = check(wsl2_desktop(), tp_size=2, min_memory_gib_per_gpu=100, desktop_mib=512)
    assert lowered.ok and lowered.measures["desktop_mib"] == DESKTOP_TYPICAL_MIB


def test_allow_busy_still_records_who_holds_the_memory():
    verdict = check(wsl2_desktop(20 * 1024), tp_size=2, min_memory_gib_per_gpu=100, allow_busy=True)
    assert verdict.ok and verdict.measures["busy_gpus"] == [0]
    assert verdict.measures["memory_held_by"][0] == "GPU 0: another serve (20480 MiB used)"


class DisplayNvml(FakeNvml):
    """The workstation's pair, GPU 0 driving the Windows desktop, answering display queries
    with NVML's feature values (NVML_FEATURE_ENABLED = 1)."""

    def nvmlDeviceGetDisplayActive(self, h: int) -> int:
        return 1 if h == 0 else 0

    def nvmlDeviceGetDisplayMode(self, h: int) -> int:
        return 1


def test_snapshot_reads_the_display_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", DisplayNvml())
    g0, g1 = gpu_mod.snapshot()["gpus"]
    assert (g0["display_active"], g0["display_mode"]) == (True, True)
    assert (g1["display_active"], g1["display_mode"]) == (False, True)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())  # a driver that refuses the queries
    g0, _ = gpu_mod.snapshot()["gpus"]
    assert g0["display_active"] is None and g0["display_mode"] is None
