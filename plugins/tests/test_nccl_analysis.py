"""NCCL log analysis on real H200 captures and on synthetic texts built from DESIGN.md §5."""

from __future__ import annotations

import json
from itertools import zip_longest
from pathlib import Path

import pytest

from tp2qual.checks.nccl import InitComplete, analyze, check

DATA = Path(__file__).parent / "data"
WANT_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_CUMEM_ENABLE": "0", "NCCL_CUMEM_HOST_ENABLE": "0"}


def read(*parts: str) -> str:
    return DATA.joinpath(*parts).read_text()


def codes(log) -> list[str]:
    return [s.code for s in log.signatures]


def rank_lines(
    rank: int,
    *,
    nranks: int = 2,
    via: str | None = "SHM/direct/direct",
    complete: bool = True,
    acks: bool = True,
    prefix: str = "",
) -> list[str]:
    """One rank's NCCL INFO lines, shaped like NCCL 2.2x output."""
    p = f"{prefix}host:{100 + rank}:{100 + rank} [{rank}] NCCL INFO "
    init = (
        f"ncclCommInitRankConfig comm 0x{rank}f rank {rank} nranks {nranks} cudaDev {rank}"
        f" nvmlDev {rank} busId {rank + 1}000 commId 0xfeed"
    )
    lines = [p + "NCCL version 2.27.3+cuda12.9", p + init + " - Init START"]
    if acks:
        lines += [
            p + "NCCL_CUMEM_HOST_ENABLE set by environment to 0.",
            p + "NCCL_CUMEM_ENABLE set by environment to 0.",
            p + "NCCL_P2P_DISABLE set by environment to 1",
        ]
    lines.append(p + f"Channel 00/02 : {' '.join(str(r) for r in range(nranks))}")
    if via:
        peer = (rank + 1) % nranks
        lines.append(p + f"Channel 00/0 : {rank}[{rank}] -> {peer}[{peer}] via {via}")
    if complete:
        lines.append(p + init + " - Init COMPLETE")
    return lines


def interleave(*ranks: list[str]) -> str:
    out = []
    for group in zip_longest(*ranks):
        out.extend(line for line in group if line is not None)
    return "\n".join(out) + "\n"


def two_ranks(**kw) -> str:
    return interleave(rank_lines(0, **kw), rank_lines(1, **kw))


# --- real captures (shared/logs/nccl-h200-2026-11-29, copied unchanged) -----------------------


def test_real_one_rank_p2p_off_cumem_off_passes():
    log = analyze(read("nccl", "nccl-1rank-p2p-off-cumem-off.log"))
    assert log.version == "2.28.9+cuda13.0"
    assert log.init_complete == (InitComplete(rank=0, nranks=1, cuda_dev=0, bus_id="60"),)
    assert log.init_started == (0,)
    assert log.pending == ()
    assert dict(log.env_acks) == WANT_ENV
    assert log.transports == frozenset()  # one rank: "Channel 00/64 : 0", no peer, no transport
    assert log.warnings == () and log.signatures == ()
    verdict = check(log, tp_size=1, expect_env=WANT_ENV, p2p_disabled=True)
    assert verdict.ok, verdict.reason
    assert verdict.measures["init_complete"] == [
        {"rank": 0, "nranks": 1, "cuda_dev": 0, "bus_id": "60"}
    ]
    json.dumps(verdict.measures)


def test_real_defaults_lack_the_acknowledgements():
    log = analyze(read("nccl", "nccl-1rank-defaults.log"))
    assert log.env_acks == {}
    assert check(log, tp_size=1, expect_env={}, p2p_disabled=False).ok
    verdict = check(log, tp_size=1, expect_env=WANT_ENV, p2p_disabled=True)
    assert not verdict.ok
    for key in WANT_ENV:
        assert f"{key}={WANT_ENV[key]} not acknowledged" in verdict.reason


def test_real_expandable_segments_capture_is_clean_on_linux():
    # The allocator only fails under WSL2: here init completed, so no signature may fire.
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    log = analyze(read("nccl", "nccl-1rank-expandable-segments.log"), env=env)
    assert log.signatures == ()
    assert check(log, tp_size=1, expect_env=WANT_ENV, p2p_disabled=True).ok


def test_real_duplicate_gpu_two_ranks():
    text = read("nccl", "nccl-2rank-same-gpu-rank0.log") + read(
        "nccl", "nccl-2rank-same-gpu-rank1.log"
    )
    log = analyze(text)
    assert codes(log) == ["duplicate_gpu", "dist_backend_error"]
    assert log.signatures[0].line.endswith(
        "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60"
    )
    assert log.init_started == (0, 1) and log.pending == (0, 1)
    assert log.init_complete == ()
    assert len(log.warnings) == 2
    verdict = check(log, tp_size=2, expect_env={}, p2p_disabled=False)
    assert not verdict.ok
    assert "duplicate_gpu" in verdict.reason and "own GPU" in verdict.reason
    assert "rank 0 never reached Init COMPLETE" in verdict.reason
    assert "rank 1 never reached Init COMPLETE" in verdict.reason
    assert "init_hang" not in verdict.reason  # an error explains it; not a hang


# --- synthetic: success shapes ------------------------------------------------------------------


@pytest.mark.parametrize("via", ["SHM/direct/direct", "SHM/direct"])
def test_two_rank_shm_success(via):
    log = analyze(two_ranks(via=via))
    assert log.transports == frozenset({via})
    assert log.transport_kinds == frozenset({"SHM"})
    assert [ic.rank for ic in log.init_complete] == [0, 1]
    assert [ic.bus_id for ic in log.init_complete] == ["1000", "2000"]
    verdict = check(log, tp_size=2, expect_env=WANT_ENV, p2p_disabled=True)
    assert verdict.ok, verdict.reason
    assert verdict.measures["transports"] == [via]


def test_interleaved_server_log_with_prefixes_and_colours():
    rank0 = rank_lines(0, prefix="\x1b[36m(VllmWorker TP0 pid=4101)\x1b[0m ")
    rank1 = rank_lines(1, prefix="[2026-11-29 15:57:18] (VllmWorker TP1 pid=4102) ")
    noise = ["INFO 11-29 15:57:18 [api_server.py] starting", "Loading safetensors 3/8"]
    text = interleave(rank0, noise + rank1)
    log = analyze(text)
    assert sorted(ic.rank for ic in log.init_complete) == [0, 1]
    assert {ic.cuda_dev for ic in log.init_complete} == {0, 1}
    assert log.version == "2.27.3+cuda12.9"
    assert check(log, tp_size=2, expect_env=WANT_ENV, p2p_disabled=True).ok


def test_repeated_communicators_are_counted_once_per_line_shape():
    text = two_ranks() + two_ranks()
    log = analyze(text)
    assert len(log.init_complete) == 2
    assert check(log, tp_size=2, expect_env=WANT_ENV, p2p_disabled=True).ok


# --- synthetic: rank and size problems -------------------------------------------------------


def test_missing_rank_fails():
    log = analyze("\n".join(rank_lines(0)))
    verdict = check(log, tp_size=2, expect_env=WANT_ENV, p2p_disabled=True)
    assert not verdict.ok
    assert "rank 1 never reached Init COMPLETE" in verdict.reason
    assert "rank 0" not in verdict.reason


def test_nranks_mismatch_fails():
    log = analyze(two_ranks(nranks=1, via=None))
    assert {ic.nranks for ic in log.init_complete} == {1}
    verdict = check(log, tp_size=2, expect_env=WANT_ENV, p2p_disabled=True)
    assert not verdict.ok
    assert "rank 0 reached Init COMPLETE only with nranks [1], expected 2" in verdict.reason


def test_single_rank_needs_no_channel():
    log = analyze("\n".join(rank_lines(0, nranks=1, via=None)))
    assert check(log, tp_size=1, expect_env=WANT_ENV, p2p_disabled=True).ok


# --- synthetic: transports and acknowledgements -------------------------------------------------


@pytest.mark.parametrize("via", ["P2P/IPC", "P2P/CUMEM/read", "P2P/direct pointer"])
def test_p2p_channel_with_p2p_disabled_fails(via):
    log = analyze(two_ranks(via=via))
    assert log.transport_kinds == frozenset({"P2P"})
    verdict = check(log, tp_size=2, expect_env=WANT_ENV, p2p_disabled=True)
    assert not verdict.ok
    assert f"P2P channels ['{via}'] although P2P is disabled" in verdict.reason
    assert "no SHM channel" in verdict.reason
    # The same log is fine when P2P was allowed.
    assert check(log, tp_size=2, expect_env={}, p2p_disabled=False).ok


def test_net_only_between_local_ranks_asks_for_shm():
    log = analyze(two_ranks(via="NET/Socket/0"))
    verdict = check(log, tp_size=2, expect_env=WANT_ENV, p2p_disabled=True)
    assert not verdict.ok
    assert "no SHM channel" in verdict.reason and "ipc=host" in verdict.reason


def test_no_channel_lines_at_tp2_says_so():
    log = analyze(two_ranks(via=None))
    verdict = check(log, tp_size=2, expect_env=WANT_ENV, p2p_disabled=True)
    assert "no channel lines (is NCCL_DEBUG=INFO set?)" in verdict.reason


def test_env_ack_trailing_dot_and_wrong_value():
    text = two_ranks(acks=False) + (
        "x [0] NCCL INFO NCCL_CUMEM_ENABLE set by environment to 0.\n"
        "x [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 0\n"
    )
    log = analyze(text)
    assert log.env_acks == {"NCCL_CUMEM_ENABLE": "0", "NCCL_P2P_DISABLE": "0"}
    verdict = check(log, tp_size=2, expect_env=WANT_ENV, p2p_disabled=True)
    assert "NCCL_P2P_DISABLE acknowledged as '0', expected '1'" in verdict.reason
    assert "NCCL_CUMEM_HOST_ENABLE=0 not acknowledged" in verdict.reason
    assert "NCCL_CUMEM_ENABLE" not in verdict.reason


# --- synthetic: failure signatures -------------------------------------------------------------

CUMEM_FAILURE = (
    "host:101:101 [0] misc/cudawrap.cc:202 NCCL WARN Cuda failure 999 'unknown error'\n"
    "host:101:101 [0] NCCL INFO include/alloc.h:220 -> 1\n"
    "host:101:101 [0] transport/shm.cc:590 NCCL WARN ncclCuMemMapAndSetAccess failed\n"
)


def test_cumem_999_under_wsl2():
    text = "\n".join(rank_lines(0, complete=False, acks=False)) + "\n" + CUMEM_FAILURE
    log = analyze(text, host={"wsl2": True})
    assert codes(log) == ["cumem_cuda_999"]
    sig = log.signatures[0]
    assert "Cuda failure 999" in sig.line and sig.confidence == "high"
    assert "NCCL_CUMEM_ENABLE=0" in sig.remedy and "NCCL_CUMEM_HOST_ENABLE=0" in sig.remedy
    verdict = check(log, tp_size=1, expect_env={}, p2p_disabled=True)
    assert not verdict.ok and "cumem_cuda_999" in verdict.reason
    # Without the host fact the cuMem call site still names cuMem, with less confidence.
    assert analyze(text).signatures[0].confidence == "medium"


def test_cuda_999_at_another_call_site_is_not_called_wsl2_cumem():
    text = (
        "h:1:2 [0] include/alloc.h:112 NCCL WARN Cuda failure 999 'unknown error'\n"
        "h:1:2 [0] NCCL INFO include/alloc.h:199 -> 1\n"
    )
    (sig,) = analyze(text).signatures
    assert sig.code == "cuda_999" and "include/alloc.h:112" in sig.cause
    assert sig.confidence == "low"
    assert (
        analyze(text, host={"kernel": "5.15.167.4-microsoft-standard-WSL2"}).signatures[0].code
        == "cumem_cuda_999"
    )


def test_p2p_failure_across_pcie():
    warn = (
        "host:101:101 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 'peer access is not"
        " supported between these two devices'"
    )
    text = interleave(
        rank_lines(0, via="P2P/IPC", complete=False), rank_lines(1, via="P2P/IPC", complete=False)
    )
    log = analyze(text + warn + "\n")
    assert codes(log) == ["p2p_failure"]
    assert "NCCL_P2P_DISABLE=1" in log.signatures[0].remedy
    verdict = check(log, tp_size=2, expect_env=WANT_ENV, p2p_disabled=False)
    assert not verdict.ok and "p2p_failure" in verdict.reason


def test_p2p_channels_then_timeout_is_a_p2p_hang():
    log = analyze(two_ranks(via="P2P/CUMEM"))
    assert log.signatures == ()
    verdict = check(log, tp_size=2, expect_env={}, p2p_disabled=False, timed_out=True)
    assert not verdict.ok
    got = [s["code"] for s in verdict.measures["signatures"]]
    assert got == ["collective_hang", "p2p_failure"]


def test_p2p_channels_with_an_unrelated_warning_do_not_blame_p2p():
    # Changed: any warning next to P2P channels used to be called a P2P failure.
    # Changed again: an unexplained warning while every rank came up is a notice, not a failure.
    text = two_ranks(via="P2P/IPC") + "h:1:1 [0] NCCL WARN Call to ibv_open failed\n"
    log = analyze(text, tp=2)
    assert codes(log) == []
    assert [(f.rule, f.severity) for f in log.diagnosis.notices] == [("nccl_warn", "notice")]


def test_expandable_segments_first_allocation_failure():
    text = "\n".join(rank_lines(0, acks=True)) + (
        '\n[rank0]:   File "worker.py", line 12, in init_device\n'
        "[rank0]:     torch.zeros(1, device='cuda')\n"
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB.\n"
    )
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    log = analyze(text, env=env)
    assert codes(log) == ["expandable_segments_alloc"]
    assert "native allocator" in log.signatures[0].remedy
    # Stated in the log (engines echo their env) instead of passed in: same diagnosis.
    echoed = "launch env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" + text
    assert codes(analyze(echoed)) == ["expandable_segments_alloc"]


def test_oom_advice_alone_is_not_expandable_segments():
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. If reserved but unallocated memory is"
        " large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid"
        " fragmentation.\n"
    )
    assert "expandable_segments_alloc" not in codes(analyze(oom))


def test_log_ending_after_init_start_is_incomplete_not_a_hang():
    # Changed: a log that simply ends after Init START used to be called init_hang.
    log = analyze(interleave(rank_lines(0, complete=False), rank_lines(1, complete=False)))
    assert log.pending == (0, 1)
    assert codes(log) == [] and log.diagnosis.verdict == "incomplete"
    verdict = check(log, tp_size=2, expect_env=WANT_ENV, p2p_disabled=True)
    assert not verdict.ok and "init_incomplete" in verdict.reason
    # The caller's timeout is what turns it into a hang.
    verdict = check(log, tp_size=2, expect_env=WANT_ENV, p2p_disabled=True, timed_out=True)
    assert [s["code"] for s in verdict.measures["signatures"]] == ["init_hang"]
    assert "init_hang" in verdict.reason and "ipc=host" in verdict.reason


def test_timeout_with_no_nccl_output_is_a_hang():
    verdict = check(analyze(""), tp_size=2, expect_env={}, p2p_disabled=False, timed_out=True)
    assert not verdict.ok
    assert verdict.measures["signatures"][0]["code"] == "init_hang"
    assert verdict.measures["timed_out"] is True


def test_dist_backend_error_alone():
    text = (
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: NCCLUtils.cpp:93,"
        " unhandled system error, NCCL version 2.28.9\n"
    )
    log = analyze(text)
    assert codes(log) == ["dist_backend_error"]
    assert log.version == "2.28.9"


def test_other_nccl_warnings_each_once():
    # Changed: an unexplained warning failed the gate even with every rank up; now a notice
    # (test_nccl_unknown_warn.py runs the same on real captures).
    warn = "h:1:1 [0] NCCL WARN NET/Socket : peer 127.0.0.1<4321> message truncated"
    text = two_ranks() + warn + "\n" + warn + "\n"
    log = analyze(text, tp=2)
    (notice,) = log.diagnosis.notices
    assert notice.rule == "nccl_warn" and "message truncated" in notice.cause
    assert len(log.warnings) == 2 and codes(log) == []
    verdict = check(log, tp_size=2, expect_env=WANT_ENV, p2p_disabled=True)
    assert verdict.ok and verdict.measures["notices"] == [notice.line()]
    failed = analyze(text, tp=2, failed=True)  # the process that wrote it failed
    assert codes(failed) == ["nccl_warn"]
    assert failed.signatures[0].cause.startswith("NCCL warned: NET/Socket : peer")
    verdict = check(failed, tp_size=2, expect_env=WANT_ENV, p2p_disabled=True)
    assert not verdict.ok and "nccl_warn" in verdict.reason


def test_every_problem_is_listed_with_a_remedy():
    log = analyze(CUMEM_FAILURE + "\n".join(rank_lines(0, via="P2P/IPC")))
    verdict = check(log, tp_size=2, expect_env=WANT_ENV, p2p_disabled=True)
    assert verdict.reason.count("->") >= 4  # cuMem, rank 1 missing, P2P channel, no SHM
    assert all(s["remedy"] for s in verdict.measures["signatures"])
    json.dumps(verdict.measures)
