"""An ``NCCL WARN`` no diagnosis rule explains is a notice while the probe and every rank came
up, and a failure (the lead to follow) when the probe or a rank failed — on real captures with
one such line added:

* data/h200x2-2026-11-30/probe-2rank-campaign-settings.log: gate 01's probe on two H200s with
  the campaign settings, both ranks Init COMPLETE over SHM, rc=0;
* data/nccl/nccl-1rank-p2p-off-cumem-off.log: one rank (shared/logs/nccl-h200-2026-11-29,
  copied unchanged);
* data/nccl-h200-ranks/probe-2rank-missing-rank1.log: rank 1 never started, rank 0's TCP
  store timed out and its probe result says ``"ok": false``.

The added line is shaped as NCCL prints a warning (host:pid:tid [dev] file:line NCCL WARN …),
with a message no rule names.
"""

from __future__ import annotations

from pathlib import Path

from tp2qual.checks.diagnosis import FAILURE, NOTICE, diagnose
from tp2qual.checks.nccl import analyze, check

DATA = Path(__file__).parent / "data"
CAMPAIGN = {"NCCL_P2P_DISABLE": "1", "NCCL_CUMEM_ENABLE": "0", "NCCL_CUMEM_HOST_ENABLE": "0"}
UNKNOWN = "NET/Plugin: unknown plugin symbol ncclNetPlugin_v99, falling back to internal net"


def with_unknown_warn(name: str, prefix: str = "[rank1] vm:680:680 [1] ") -> str:
    """The capture with one unexplained warning after its first line that starts an init
    (NCCL's ``Init START``, the probe's ``init_process_group … START``)."""
    lines = (DATA / name).read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.endswith("START")) + 1
    lines.insert(at, f"{prefix}misc/net.cc:142 NCCL WARN {UNKNOWN}")
    return "\n".join(lines) + "\n"


def unknown(log) -> list[tuple[str, str]]:
    return [(f.rule, f.severity) for f in log.diagnosis.findings if UNKNOWN in f.cause]


def test_an_unknown_warning_on_a_healthy_two_rank_probe_is_a_notice():
    text = with_unknown_warn("h200x2-2026-11-30/probe-2rank-campaign-settings.log")
    log = analyze(text, env=CAMPAIGN, tp=2)
    assert unknown(log) == [("nccl_warn", NOTICE)]
    assert log.signatures == () and log.diagnosis.verdict == "ok"
    verdict = check(log, tp_size=2, expect_env=CAMPAIGN, p2p_disabled=True)
    assert verdict.ok, verdict.reason
    (notice,) = verdict.measures["notices"]
    assert notice.startswith(f"nccl_warn: NCCL warned: {UNKNOWN} (no rule explains it) ->")
    assert verdict.measures["ranks_complete"] == [0, 1]
    # The log of a failed gate is read by the same engine: nothing to blame on this warning.
    assert diagnose(text, tp=2, env=CAMPAIGN).failures == ()


def test_an_unknown_warning_on_one_rank_is_a_notice():
    text = with_unknown_warn("nccl/nccl-1rank-p2p-off-cumem-off.log", prefix="vm:1:1 [0] ")
    log = analyze(text, tp=1)
    assert unknown(log) == [("nccl_warn", NOTICE)]
    assert check(log, tp_size=1, expect_env=CAMPAIGN, p2p_disabled=True).ok


def test_the_same_warning_fails_when_the_probe_process_failed():
    text = with_unknown_warn("h200x2-2026-11-30/probe-2rank-campaign-settings.log")
    log = analyze(text, env=CAMPAIGN, tp=2, failed=True)  # a non-zero exit or a timeout
    assert unknown(log) == [("nccl_warn", FAILURE)]
    verdict = check(log, tp_size=2, expect_env=CAMPAIGN, p2p_disabled=True)
    assert not verdict.ok and f"nccl_warn: NCCL warned: {UNKNOWN}" in verdict.reason


def test_the_same_warning_fails_when_a_rank_never_came_up():
    lines = with_unknown_warn("h200x2-2026-11-30/probe-2rank-campaign-settings.log").splitlines()
    text = "\n".join(ln for ln in lines if not ("rank 1 nranks 2" in ln and "COMPLETE" in ln))
    log = analyze(text, env=CAMPAIGN, tp=2)
    assert unknown(log) == [("nccl_warn", FAILURE)]
    verdict = check(log, tp_size=2, expect_env=CAMPAIGN, p2p_disabled=True)
    assert not verdict.ok
    assert "rank 1 never reached Init COMPLETE" in verdict.reason and "nccl_warn" in verdict.reason


def test_the_same_warning_fails_beside_a_probe_that_reported_failure():
    text = with_unknown_warn("nccl-h200-ranks/probe-2rank-missing-rank1.log", "[rank0] vm:1:1 ")
    log = analyze(text, env=CAMPAIGN, tp=2)
    assert unknown(log) == [("nccl_warn", FAILURE)]
    assert "missing_rank" in [s.code for s in log.signatures]  # the named cause stays first
    assert log.signatures[0].code == "missing_rank"
