"""The diagnosis engine on real logs: public issue-thread excerpts and the suite's own GPU
captures (plugins/tests/data/diagnosis/README.md lists sources and confirmed resolutions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tp2qual.checks.diagnosis import diagnose

DATA = Path(__file__).parent / "data"
CORPUS = DATA / "diagnosis"
LOOP = CORPUS / "closed-loop-h200"

# file -> (first failure rule, diagnose kwargs, remedy must contain, remedy must not contain)
CASES: dict[str, tuple[str, dict, str, str | None]] = {
    "nccl-1653-cuda999-alloc-h.log": ("cuda_999", {}, "host is WSL2", None),
    "wsl-12467-vllm-shm.log": ("shm_exhausted", {"host": {"wsl2": True}}, "/dev/shm", None),
    "pytorch-ci-infra-490-shm.log": ("shm_exhausted", {}, "/dev/shm", None),
    "nccl-525-kubeflow-shm.log": ("shm_exhausted", {"container": {}}, "--ipc=host", None),
    "nccl-342-docker-shm.log": ("shm_exhausted", {"container": {}}, "--shm-size", None),
    "xgboost-5963-shm.log": ("shm_exhausted", {}, "/dev/shm", None),
    "nccl-tests-166-shm.log": ("shm_exhausted", {}, "/dev/shm", None),
    "fal-speedrun-2-docker-shm.log": ("shm_exhausted", {}, "--ipc=host", None),
    "nccl-tests-324-711-p2p-off.log": (
        "peer_mapping_711",
        {},
        "already off (NCCL_P2P_DISABLE=1 (log line 1))",
        "set NCCL_P2P_DISABLE",
    ),
    "open-gpu-kernel-38-205.log": ("bar_mapping_205", {}, "Resizable BAR", None),
    "sglang-6246-p2p-invalid-argument.log": ("p2p_failure", {}, "set NCCL_P2P_DISABLE=1", None),
    "nccl-1672-nvls.log": ("nvls_failure", {}, "NCCL_NVLS_ENABLE=0", None),
    "horovod-3929-duplicate-gpu.log": ("duplicate_gpu", {}, "own GPU", None),
    "megatron-661-duplicate-gpu.log": ("duplicate_gpu", {}, "own GPU", None),
    "vllm-1016-invalid-ordinal.log": (
        "invalid_device_ordinal",
        {"tp": 2},
        "CUDA_VISIBLE_DEVICES=3,6 (log line 3) exposes 2 GPU(s) for 2 ranks",
        None,
    ),
    "pytorch-192330-expandable-wsl2.log": (
        "expandable_segments_alloc",
        {},
        "remove expandable_segments:True from PYTORCH_ALLOC_CONF",
        None,
    ),
    "vllm-7514-port-in-use.log": ("port_in_use", {}, "free port", None),
    "vllm-11617-tcpstore-port.log": ("port_in_use", {}, "MASTER_PORT", None),
    "vllm-3719-offline.log": ("offline_model_missing", {}, "local snapshot path", None),
    "vllm-1986-no-network.log": ("hub_unreachable", {}, "set HF_HUB_OFFLINE=1", None),
    "vllm-10439-kv-cache-oom.log": ("oom_kv_cache", {}, "--gpu-memory-utilization", None),
    "llamafactory-7396-watchdog-hang.log": ("collective_hang", {}, "same collectives", None),
    "nccl-1111-watchdog-hang.log": ("collective_hang", {}, "same collectives", None),
    "closed-loop-h200/shm512k-1rank.log": ("shm_exhausted", {}, "/dev/shm", "NCCL_DEBUG=INFO"),
    "closed-loop-h200/shm512k-2rank-net.log": ("shm_exhausted", {"tp": 2}, "/dev/shm", None),
    # rank 1 joined torch's store and never entered NCCL: named as the missing rank it is
    "closed-loop-h200/hang-init.log": ("missing_rank", {"tp": 2}, "missing rank", None),
    "closed-loop-h200/hang-collective.log": (
        "collective_hang",
        {"tp": 2},
        "NCCL_DEBUG_SUBSYS=INIT,COLL shows",  # already at INFO: no "rerun with NCCL_DEBUG=INFO"
        "rerun with NCCL_DEBUG=INFO",
    ),
}

PASSING = [
    "vllm-4383-shm-success-custom-ar.log",
    "nccl-1410-p2p-cumem-channels.log",
    "closed-loop-h200/baseline-2rank-net.log",
    "closed-loop-h200/remedy-2rank-net.log",
]


@pytest.mark.parametrize("name", sorted(CASES))
def test_excerpt_gets_its_cause_and_a_fitting_remedy(name):
    rule, kwargs, must, must_not = CASES[name]
    result = diagnose((CORPUS / name).read_text(), **kwargs)
    assert result.verdict == "failed"
    first = result.failures[0]
    assert first.rule == rule, result.summary()
    assert first.evidence and all(n > 0 for n, _ in first.evidence)
    assert must in first.remedy, first.remedy
    if must_not:
        assert must_not not in first.remedy
    assert "RTX PRO 6000" not in first.remedy


@pytest.mark.parametrize("name", PASSING)
def test_successes_and_notices_do_not_fail(name):
    result = diagnose((CORPUS / name).read_text())
    assert result.verdict == "ok", result.summary()


def test_custom_allreduce_notice_is_not_a_p2p_failure():
    result = diagnose((CORPUS / "vllm-4383-shm-success-custom-ar.log").read_text())
    assert [f.rule for f in result.findings] == ["vllm_custom_allreduce_off"]
    assert result.findings[0].severity == "notice"


def test_ras_bind_warning_appended_to_the_passing_2xh200_capture_stays_ok():
    text = (DATA / "h200x2-2026-11-30" / "probe-2rank-campaign-settings.log").read_text()
    ras = (
        "vm:470:512 [0] misc/socket.cc:478 NCCL WARN Call to bind failed: Address already in use\n"
    )
    result = diagnose(text + ras, tp=2)
    assert result.verdict == "ok" and [f.rule for f in result.findings] == ["nccl_ras_bind"]


def test_the_711_log_is_not_told_to_set_what_it_set():
    result = diagnose((CORPUS / "nccl-tests-324-711-p2p-off.log").read_text())
    assert result.settings["NCCL_P2P_DISABLE"] == "1"
    assert "export" not in result.failures[0].remedy


def test_cuda_999_needs_platform_evidence_for_wsl2():
    text = (CORPUS / "nccl-1653-cuda999-alloc-h.log").read_text()
    assert diagnose(text).failures[0].rule == "cuda_999"
    wsl = diagnose(text, host={"kernel": "5.15.167.4-microsoft-standard-WSL2"}).failures[0]
    assert wsl.rule == "cumem_cuda_999" and "host identity says WSL2" in wsl.cause


def test_closed_loop_remedy_cures_the_shm_failure():
    failed = diagnose((LOOP / "shm512k-2rank-net.log").read_text(), tp=2)
    cured = diagnose((LOOP / "remedy-2rank-net.log").read_text(), tp=2)
    assert failed.failures[0].rule == "shm_exhausted" and cured.verdict == "ok"
    assert "No space left on device (28)" in failed.failures[0].evidence[0][1]


def test_a_rank_that_printed_nothing_is_incomplete():
    assert diagnose((LOOP / "rank1-never-joins.log").read_text()).verdict == "incomplete"


# --- remedy against the settings in force (synthetic lines in the shapes above) ---------------

SHM = "h:1:2 [0] misc/shmutils.cc:132 NCCL WARN Error while creating shared memory segment\n"
CUMEM = "h:1:2 [0] misc/cudawrap.cc:90 NCCL WARN Cuda failure 999 in ncclCuMemMapAndSetAccess\n"


def remedy(text: str, **kwargs) -> str:
    return diagnose(text, **kwargs).failures[0].remedy


def test_shm_remedy_follows_the_container_settings():
    assert "with --ipc=host, or with a large --shm-size" in remedy(SHM, container={})
    assert "already runs with --ipc=host" in remedy(SHM, container={"ipc_host": True})
    assert "shm_size is 64m" in remedy(SHM, container={"shm_size": "64m"})
    assert "already runs with --ipc=host" in remedy("docker run --ipc=host img\n" + SHM)


def test_cumem_remedy_sets_only_what_is_missing_then_gives_the_next_step():
    assert remedy(CUMEM).startswith("set NCCL_CUMEM_ENABLE=0 and NCCL_CUMEM_HOST_ENABLE=0")
    half = remedy(CUMEM, env={"NCCL_CUMEM_ENABLE": "0"})
    assert half.startswith("set NCCL_CUMEM_HOST_ENABLE=0") and "already set" in half
    both = remedy(CUMEM, env={"NCCL_CUMEM_ENABLE": "0", "NCCL_CUMEM_HOST_ENABLE": "0"})
    assert "are already set and it still fails" in both and not both.startswith("set ")


def test_p2p_remedy_with_p2p_off_by_level_says_it_did_not_reach_nccl():
    text = (
        "h:1:2 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to LOC\n"
        "h:1:2 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 'invalid argument'\n"
    )
    fix = remedy(text)
    assert "P2P is disabled (NCCL_P2P_LEVEL=LOC (log line 1))" in fix
    assert "did not reach" in fix


def test_expandable_remedy_names_the_variable_in_force_and_advice_is_not_a_setting():
    alloc = "torch.zeros(1)\nRuntimeError: CUDA driver error: unknown error\n"
    fix = remedy(alloc, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert "from PYTORCH_CUDA_ALLOC_CONF" in fix
    advice = "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid\n"
    # The advice is no setting, so no allocator cause; the RuntimeError is still a failure.
    unnamed = diagnose(advice + alloc).failures
    assert [f.rule for f in unnamed] == ["unrecognised_failure"], unnamed


def test_offline_remedy_depends_on_hf_hub_offline():
    no_net = "Failed to resolve 'huggingface.co' ([Errno -3] Temporary failure)\n"
    assert "set HF_HUB_OFFLINE=1" in remedy(no_net)
    assert "set HF_HUB_OFFLINE" not in remedy(no_net, env={"HF_HUB_OFFLINE": "1"})
