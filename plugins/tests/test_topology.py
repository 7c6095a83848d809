"""Topology rules and the NVML snapshot, on what real H200s answered and on fakes built from it.

Learned from NVML on the H200 (2026-11-29 dump and the 2026-11-30 snapshot, nvidia-ml-py
13.610.43, driver 580.159.04): memory bus width reads 6016 bits (not 6144), max memory clock
3201 MHz; NVML v1 "used" is 644,939,776 bytes on an idle GPU and equals the v2 "reserved" figure
(nvidia-smi shows it as Reserved 616 MiB, Used 0 MiB); NVLink state on a PCIe board raises
Not Supported on link 0; total memory is 150,754,820,096 bytes (140.4 GiB).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tp2qual import gpu as gpu_mod
from tp2qual.checks.topology import (
    check,
    memory_bandwidth_gbs,
    nvml_bandwidth_gbs,
    table_bandwidth_gbs,
    used_mib,
)

DATA = Path(__file__).parent / "data"
GIB = 1024**3


def dump_snapshot() -> dict:
    return gpu_mod.from_nvml_dump(json.loads((DATA / "nvml" / "nvml-dump.json").read_text()))


def real_snapshot() -> dict:
    return json.loads((DATA / "h200-2026-11-30" / "snapshot.json").read_text())


def two_gpus(snap: dict) -> dict:
    """A second GPU made from the first: another index, UUID and bus id."""
    snap = copy.deepcopy(snap)
    second = copy.deepcopy(snap["gpus"][0])
    second.update(
        index=1, uuid="GPU-00000000-0000-0000-0000-000000000001", pci_bus_id="00000000:00:07.0"
    )
    snap["gpus"].append(second)
    return snap


# --- the recorded data ---------------------------------------------------------------------------


def test_from_nvml_dump_shape():
    snap = dump_snapshot()
    assert snap["nvml_available"] is True and snap["error"] is None
    assert snap["driver_version"] == "580.159.04"
    assert snap["cuda_driver_version"] == 13000
    (gpu,) = snap["gpus"]
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["memory_total_bytes"] == 150754820096
    assert gpu["pcie"] == {"gen_current": 5, "width_current": 16, "gen_max": 5, "width_max": 16}
    assert gpu["nvlink"] == {
        "supported": False,
        "active_links": None,
        "states": {"0": "error: NVMLError: Not Supported"},
    }
    assert gpu["memory_bus_width_bits"] == 6016 and gpu["max_memory_clock_mhz"] == 3201
    assert gpu["power_limit_w"] == 700.0
    json.dumps(snap)


def test_real_snapshot_from_the_device():
    snap = real_snapshot()
    assert snap["nvml_available"] is True and snap["source"] == "nvml"
    assert snap["host"]["wsl2"] is False
    (gpu,) = snap["gpus"]
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["memory_bus_width_bits"] == 6016
    assert gpu["max_memory_clock_mhz"] == 3201
    assert gpu["memory_used_bytes"] == gpu["memory_reserved_bytes"] == 644939776
    assert used_mib(gpu) == 0
    assert gpu["nvlink"]["states"] == {"0": "error: Not Supported"}
    assert gpu["compute_capability"] == [9, 0]
    assert snap["pairs"] == []  # one GPU, no pair to ask about
    verdict = check(snap, tp_size=1, min_memory_gib_per_gpu=130)
    assert verdict.ok, verdict.reason
    assert verdict.measures["gpus"][0]["bandwidth_gbs"] == pytest.approx(4814.3, abs=0.1)
    assert verdict.measures["gpus"][0]["pcie"] == "Gen5 x16 (max Gen5 x16)"


# --- bandwidth ----------------------------------------------------------------------------------


def test_h200_bandwidth_from_nvml_matches_the_spec():
    gpu = dump_snapshot()["gpus"][0]
    # 6016 bit / 8 = 752 bytes per transfer, x 3201 MHz x 2 transfers per clock.
    assert nvml_bandwidth_gbs(gpu) == pytest.approx(752 * 3201e6 * 2 / 1e9)
    assert nvml_bandwidth_gbs(gpu) == pytest.approx(4800, rel=0.01)


def test_rtx_pro_6000_bandwidth_both_ways():
    name = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    from_nvml = {"name": name, "memory_bus_width_bits": 512, "max_memory_clock_mhz": 14001}
    assert memory_bandwidth_gbs(from_nvml) == pytest.approx(1792.128)
    assert memory_bandwidth_gbs({"name": name, "memory_bus_width_bits": None}) == 1792.0


def test_bandwidth_table_prefers_the_longest_name_and_may_not_know():
    assert table_bandwidth_gbs("NVIDIA H100 NVL") == 3900.0
    assert table_bandwidth_gbs("NVIDIA H100 80GB HBM3") == 3350.0
    assert table_bandwidth_gbs("NVIDIA GeForce GT 710") is None
    assert memory_bandwidth_gbs({"name": None}) is None


# --- rules --------------------------------------------------------------------------------------


def test_one_gpu_is_not_enough_for_tp2():
    verdict = check(dump_snapshot(), tp_size=2, min_memory_gib_per_gpu=90)
    assert not verdict.ok
    assert verdict.reason == "1 GPU(s) found (GPU 0 (NVIDIA H200)), TP=2 needs 2"
    assert verdict.measures["gpu_count"] == 1
    assert verdict.measures["gpu_names"] == ["NVIDIA H200"]


def test_two_gpus_pass_tp2_and_record_facts():
    verdict = check(two_gpus(dump_snapshot()), tp_size=2, min_memory_gib_per_gpu=90)
    assert verdict.ok, verdict.reason
    m = verdict.measures
    assert m["gpu_count"] == 2 and m["busy_gpus"] == [] and m["wsl2"] is False
    assert [g["memory_total_gib"] for g in m["gpus"]] == [140.4, 140.4]
    assert m["gpus"][1]["bandwidth_from"] == "nvml"
    assert m["gpus"][0]["nvlink_active_links"] is None
    json.dumps(m)


def test_too_little_memory_names_every_gpu():
    verdict = check(two_gpus(dump_snapshot()), tp_size=2, min_memory_gib_per_gpu=150)
    assert not verdict.ok
    assert "GPU 0 (NVIDIA H200) has 140.4 GiB, needs 150 GiB" in verdict.reason
    assert "GPU 1 (NVIDIA H200) has 140.4 GiB, needs 150 GiB" in verdict.reason


def test_busy_gpu_fails_unless_allowed():
    snap = two_gpus(dump_snapshot())
    snap["gpus"][1]["compute_processes"] = [{"pid": 4242, "used_memory_bytes": 40 * GIB}]
    snap["gpus"][1]["memory_used_bytes"] = 41 * GIB
    verdict = check(snap, tp_size=2, min_memory_gib_per_gpu=90)
    assert not verdict.ok
    assert "GPU 1 (NVIDIA H200) is busy: 1 compute process(es): pid 4242 (40.0 GiB)" in (
        verdict.reason
    )
    assert "GPU 0" not in verdict.reason
    allowed = check(snap, tp_size=2, min_memory_gib_per_gpu=90, allow_busy=True)
    assert allowed.ok
    assert allowed.measures["busy_gpus"] == [1] and allowed.measures["allow_busy"] is True


def test_memory_used_marks_busy_where_nvml_lists_no_process():
    # Under WSL2 NVML reports no processes; memory held by another serve still shows.
    snap = two_gpus(dump_snapshot())
    snap["host"]["wsl2"] = True
    snap["gpus"][0]["memory_used_bytes"] = 20 * GIB
    verdict = check(snap, tp_size=2, min_memory_gib_per_gpu=90)
    assert not verdict.ok and "GPU 0 (NVIDIA H200) is busy: 20480 MiB used" in verdict.reason
    assert verdict.measures["wsl2"] is True


def test_idle_reservation_is_not_busy():
    gpu = dump_snapshot()["gpus"][0]  # v1 used = 615 MiB of driver reservation, no v2 figure
    assert used_mib(gpu) == pytest.approx(615.07, abs=0.01)
    assert check(dump_snapshot(), tp_size=1, min_memory_gib_per_gpu=1).ok


def test_every_problem_in_one_reason():
    snap = dump_snapshot()
    snap["gpus"][0]["compute_processes"] = [{"pid": 7, "used_memory_bytes": GIB}]
    verdict = check(snap, tp_size=2, min_memory_gib_per_gpu=200)
    assert verdict.reason.count("; ") == 2
    assert "TP=2 needs 2" in verdict.reason and "needs 200 GiB" in verdict.reason
    assert "pid 7" in verdict.reason


def test_nvml_unavailable_fails_with_its_error():
    snap = gpu_mod.empty_snapshot("nvml", "nvmlInit failed: Driver Not Loaded")
    verdict = check(snap, tp_size=2, min_memory_gib_per_gpu=90)
    assert not verdict.ok
    assert verdict.reason == "NVML unavailable: nvmlInit failed: Driver Not Loaded"


# --- gpu.py I/O side ----------------------------------------------------------------------------


def test_detect_wsl2():
    wsl = "Linux version 6.6.87.2-microsoft-standard-WSL2 (root@host) #1 SMP"
    assert gpu_mod.detect_wsl2(wsl, False) == [f"/proc/version: {wsl}"]
    assert gpu_mod.detect_wsl2("Linux version 6.8.0-45-generic", True) == ["/dev/dxg exists"]
    assert gpu_mod.detect_wsl2("Linux version 6.8.0-45-generic", False) == []


def test_snapshot_without_pynvml_reports_instead_of_raising(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import now raises ImportError
    snap = gpu_mod.snapshot()
    assert snap["nvml_available"] is False
    assert "nvidia-ml-py" in snap["error"]
    assert snap["gpus"] == [] and snap["host"]["hostname"]
    assert check(snap, tp_size=1, min_memory_gib_per_gpu=1).ok is False


def test_snapshot_without_a_driver_reports_instead_of_raising(monkeypatch):
    def refuse():
        raise RuntimeError("Driver Not Loaded")

    monkeypatch.setitem(sys.modules, "pynvml", SimpleNamespace(nvmlInit=refuse))
    snap = gpu_mod.snapshot()
    assert snap["nvml_available"] is False
    assert snap["error"] == "nvmlInit failed: Driver Not Loaded"


class NotSupported(Exception):
    pass


class FakeNvml:
    """Two PCIe GPUs as NVML would answer for the target workstation (no NVLink, P2P refused
    by the chipset), to run gpu.snapshot's query code without a GPU."""

    NVML_CLOCK_MEM = 2
    nvmlMemory_v2 = 0x02000028

    def __init__(self):
        self.shut = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut = True

    def nvmlSystemGetDriverVersion(self):
        return b"581.42"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000

    def nvmlSystemGetNVMLVersion(self):
        return "13.581.42"

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}"

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=f"00000000:0{h + 1}:00.0".encode())

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        if version is not None:
            return SimpleNamespace(total=97_887 * 2**20, used=0, reserved=500 * 2**20)
        return SimpleNamespace(total=97_887 * 2**20, used=500 * 2**20)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 1  # idle links drop their generation: recorded, not judged

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetNvLinkState(self, h, link):
        raise NotSupported("Not Supported")

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=99, usedGpuMemory=3 * GIB)] if h == 1 else []

    def nvmlDeviceGetMemoryBusWidth(self, h):
        return 512

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        assert clock == self.NVML_CLOCK_MEM
        return 14001

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return (12, 0)

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return 300_000

    def nvmlDeviceGetP2PStatus(self, a, b, caps):
        return {0: 1, 1: 1, 2: 5, 3: 1, 4: 0}[caps]

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 40


def test_snapshot_queries_with_a_fake_nvml(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    snap = gpu_mod.snapshot()
    assert fake.shut is True
    assert snap["nvml_available"] is True and snap["driver_version"] == "581.42"
    g0, g1 = snap["gpus"]
    assert g0["pci_bus_id"] == "00000000:01:00.0"
    assert g0["memory_reserved_bytes"] == 500 * 2**20
    assert g0["nvlink"] == {
        "supported": False,
        "active_links": None,
        "states": {"0": "error: Not Supported"},
    }
    assert g1["compute_processes"] == [{"pid": 99, "used_memory_bytes": 3 * GIB}]
    assert g0["power_limit_w"] == 300.0 and g0["compute_capability"] == [12, 0]
    assert snap["pairs"] == [
        {
            "a": 0,
            "b": 1,
            "topology": "NODE",
            "p2p": {
                "read": "chipset not supported",
                "write": "chipset not supported",
                "nvlink": "not supported",
                "atomics": "chipset not supported",
                "pci": "ok",
            },
        }
    ]
    json.dumps(snap)
    verdict = check(snap, tp_size=2, min_memory_gib_per_gpu=90)
    assert not verdict.ok and "GPU 1" in verdict.reason and "pid 99 (3.0 GiB)" in verdict.reason
    assert verdict.measures["gpus"][0]["bandwidth_gbs"] == pytest.approx(1792.1)
    assert verdict.measures["gpus"][0]["memory_total_gib"] == pytest.approx(95.59, abs=0.01)
