"""The NCCL analysis and the topology rules on real two-GPU captures (2x H200, NCCL 2.28.9,
2026-11-30, ``scripts/device-capture.sh``): the campaign settings give SHM channels and pass;
NCCL's defaults give P2P/CUMEM channels, which the gate refuses when P2P is meant to be off."""

from __future__ import annotations

import json
from pathlib import Path

from tp2qual.checks import nccl, topology

DATA = Path(__file__).parent / "data" / "h200x2-2026-11-30"
CAMPAIGN = {"NCCL_P2P_DISABLE": "1", "NCCL_CUMEM_ENABLE": "0", "NCCL_CUMEM_HOST_ENABLE": "0"}


def analyzed(name: str) -> nccl.NcclLog:
    return nccl.analyze((DATA / name).read_text())


def test_campaign_settings_reach_init_complete_over_shm():
    log = analyzed("probe-2rank-campaign-settings.log")
    verdict = nccl.check(log, tp_size=2, expect_env=CAMPAIGN, p2p_disabled=True)
    assert verdict.ok, verdict.reason
    assert log.transports == frozenset({"SHM/direct/direct"})  # "Channel 00 : 0[0] -> 1[1] ..."
    assert sorted((i.rank, i.nranks) for i in log.init_complete) == [(0, 2), (1, 2)]
    assert set(log.env_acks) >= set(CAMPAIGN)


def test_nccl_defaults_use_p2p_which_the_campaign_refuses():
    log = analyzed("probe-2rank-nccl-defaults.log")
    assert log.transports == frozenset({"P2P/CUMEM"})  # "Channel 00/0 : ... via P2P/CUMEM"
    refused = nccl.check(log, tp_size=2, expect_env=CAMPAIGN, p2p_disabled=True)
    assert not refused.ok
    assert "P2P channels ['P2P/CUMEM'] although P2P is disabled" in refused.reason
    assert nccl.check(log, tp_size=2, expect_env={}, p2p_disabled=False).ok


def test_two_idle_gpus_fit_tp2():
    snapshot = json.loads((DATA / "topology-idle.json").read_text())
    verdict = topology.check(snapshot, tp_size=2, min_memory_gib_per_gpu=100)
    assert verdict.ok, verdict.reason
    assert verdict.measures["gpu_count"] == 2
    assert snapshot["pairs"][0]["p2p"]["nvlink"] == "ok"  # H200 SXM: NVLink, unlike the workstation


def test_a_process_holding_20_gib_makes_the_gpu_busy():
    snapshot = json.loads((DATA / "topology-busy.json").read_text())
    verdict = topology.check(snapshot, tp_size=2, min_memory_gib_per_gpu=100)
    assert not verdict.ok and "GPU 0 (NVIDIA H200) is busy: 1 compute process(es)" in verdict.reason
    assert topology.check(snapshot, tp_size=2, min_memory_gib_per_gpu=100, allow_busy=True).ok


def test_the_gate_recorded_the_same_busy_verdict_on_the_device():
    busy = json.loads((DATA / "busy-20gib-held.json").read_text())
    assert busy["ok"] is False and busy["busy_gpus"] == [0] and busy["allow_busy"] is False
