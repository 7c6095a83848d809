"""Room on disk: the run's evidence, estimated gate by gate at each candidate's real bound, must
fit the results folder with a margin, or the run is refused before the first candidate, naming
both figures. Shown on a real 1 MiB tmpfs (mount needs root: skipped without it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from test_faults import run_inner, smollm2_spec, write_candidate

from tp2qual.candidate import GATES, load_candidate
from tp2qual.checks import disk_room

MAIN = Path(__file__).resolve().parents[2]
MIB = 1024**2


def _estimate(name: str) -> dict[str, int]:
    c = load_candidate(MAIN / "candidates" / f"{name}.toml")
    return disk_room.estimate(c.max_model_len, {g: c.gate(g) for g in GATES}, bool(c.reference))


def test_gate_07_at_a_262k_bound_is_most_of_a_campaign_candidates_evidence():
    estimate = _estimate("qwen3.5-122b-a10b-nvfp4")  # bound 262144, judged against its TP1
    assert estimate["agreement_07"] > sum(v for k, v in estimate.items() if k != "agreement_07")
    # the per-position figure scales with the bound: a 2048 bound writes 128 x less for it
    small = disk_room.agreement_bytes(2048, {"top_n": 5, "near_bound_fill": 0.75}, True)
    big = disk_room.agreement_bytes(262144, {"top_n": 5, "near_bound_fill": 0.75}, True)
    assert big > 40 * small


def test_refused_naming_free_room_and_estimate_plus_margin():
    verdict = disk_room.judge({"qwen": _estimate("qwen3.5-122b-a10b-nvfp4")}, 50 * MIB, "/r")
    assert not verdict.ok
    assert verdict.reason.startswith("the results folder /r has 50.0 MiB free; this run will")
    assert "plus a margin of 64 MiB" in verdict.reason
    need = verdict.measures["estimate_bytes"]
    assert disk_room.judge({"qwen": _estimate("qwen3.5-122b-a10b-nvfp4")}, need + 64 * MIB, "/r").ok


@pytest.mark.slow
def test_a_run_on_a_1_mib_tmpfs_is_refused_before_any_candidate(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("self-test mounts a tmpfs: needs root")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        write_candidate(tmp_path / "candidates", smollm2_spec("room-selftest"))
        inner = run_inner(tmp_path, ["room-selftest"], f"--results={small}", timeout_s=120)
    finally:
        subprocess.run(["umount", str(small)], check=True)
    assert inner.proc.returncode == 4, inner.output()  # pytest's usage error: nothing ran
    assert "the results folder" in inner.proc.stderr and "MiB free" in inner.proc.stderr
    assert "this run will write about" in inner.proc.stderr, inner.output()
    assert inner.events == []  # no gate ran, no server started
    print(inner.proc.stderr.strip().splitlines()[-1])  # the figures, for the closing note


def test_the_plan_says_the_estimate_against_the_free_room(tmp_path):
    from tp2qual.hooks.room import plan_line

    qwen = load_candidate(MAIN / "candidates" / "qwen3.5-122b-a10b-nvfp4.toml")
    line = plan_line([qwen], tmp_path / "results" / "run")
    assert line.startswith("evidence on disk: about 138.0 MiB for the run (the most:")
    assert line.endswith(": fits") and "gate 07 115.1 MiB" in line
