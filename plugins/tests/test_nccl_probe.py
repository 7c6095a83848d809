"""The probe's launcher: arguments, results, failure and timeout paths, with fake ranks (no
torch, no GPU); what the real probe printed on the H200 on 2026-11-30; and the real probe on gloo
with two ranks in the vLLM CPU engine's venv, chosen from the candidate."""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tp2qual.candidate import Candidate, load_candidate
from tp2qual.checks.nccl import analyze, check
from tp2qual.checks.probe_result import check_report, parse_report
from tp2qual.serving import nccl_probe
from tp2qual.serving.probe import backend_of, probe_argv, run_probe

DATA = Path(__file__).parent / "data" / "h200-2026-11-30"
PLUGINS = Path(__file__).resolve().parents[1]


def fake_rank(body: str):
    """worker_argv that runs ``body`` (with rank, world, tag defined) instead of a torch rank."""
    prelude = "import sys, time, json; rank, world = int(sys.argv[1]), int(sys.argv[2]); "
    prelude += f"tag = {nccl_probe.RESULT_TAG!r}; "
    return lambda r, w, port: [sys.executable, "-c", prelude + body, str(r), str(w)]


GOOD = "print('NCCL INFO hello', flush=True); print(tag + json.dumps({'ok': True, 'sum': world}))"


def test_parse_args_defaults_and_limits(tmp_path):
    args = nccl_probe.parse_args([])
    assert (args.nprocs, args.timeout, args.worker, args.log_dir) == (2, 120.0, False, None)
    plan = nccl_probe.plan_of(args)
    assert (plan.backend, plan.sizes, plan.dtypes) == ("nccl", (4096, 1 << 20, 32 << 20),
                                                        ("bf16", "fp32"))  # fmt: skip
    assert (plan.warmup, plan.iters, plan.torch_timeout_s) == (5, 20, 90.0)
    args = nccl_probe.parse_args(["--backend", "gloo", "--sizes", "8,2KiB,1M", "--dtypes", "fp32"])
    assert nccl_probe.plan_of(args).sizes == (8, 2048, 1 << 20)
    args = nccl_probe.parse_args(["--nprocs", "1", "--timeout", "2.5", "--log-dir", str(tmp_path)])
    assert (args.nprocs, args.timeout, args.log_dir) == (1, 2.5, tmp_path)
    for bad in (["--nprocs", "0"], ["--timeout", "0"], ["--nprocs", "x"], ["--sizes", "0"],
                ["--sizes", "4X"], ["--sizes", "6"], ["--dtypes", "int8"],
                ["--backend", "mpi"]):  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            nccl_probe.parse_args(bad)
        assert exc.value.code == 2


def test_module_imports_without_torch():
    assert "torch" not in nccl_probe.__dict__
    code = "import sys, tp2qual.serving.nccl_probe; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(PLUGINS)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_default_worker_argv_runs_the_file_itself():
    # By path, so the probe works when mounted alone into a candidate's image.
    argv = nccl_probe.default_worker_argv(1, 2, 29500)
    assert argv[1:9] == [
        nccl_probe.__file__, "--worker", "--rank", "1", "--nprocs", "2", "--port", "29500"
    ]  # fmt: skip
    # The plan travels whole: a worker parses back what the launcher was given.
    plan = nccl_probe.Plan(backend="gloo", sizes=(4096, 1 << 20), stall_rank=1, stall_s=3)
    args = nccl_probe.parse_args(nccl_probe.default_worker_argv(1, 2, 29500, plan)[2:])
    assert nccl_probe.plan_of(args) == plan


def test_success_collects_results_and_logs(tmp_path):
    out = io.StringIO()
    report = nccl_probe.launch(2, 30, out=out, log_dir=tmp_path, worker_argv=fake_rank(GOOD))
    assert report.ok and not report.timed_out and report.exit_code == 0
    assert [(r["rank"], r["ok"], r["sum"], r["returncode"]) for r in report.ranks] == [
        (0, True, 2, 0),
        (1, True, 2, 0),
    ]
    assert "[rank0] NCCL INFO hello" in out.getvalue()
    assert "[rank1] NCCL INFO hello" in out.getvalue()
    assert (tmp_path / "rank1.log").read_text().startswith("NCCL INFO hello\n")


def test_one_failing_rank_fails_the_probe_and_peers_are_reaped():
    body = (
        "print(tag + json.dumps({'ok': rank == 1, 'error': 'boom'}), flush=True); "
        "sys.exit(1) if rank == 0 else time.sleep(60)"
    )
    report = nccl_probe.launch(2, 30, out=io.StringIO(), worker_argv=fake_rank(body),
                               fail_grace_s=0.5)  # fmt: skip
    assert not report.ok and not report.timed_out and report.exit_code == 1
    assert report.wall_s < 20  # the hanging peer was killed after the grace, not at the timeout
    assert report.ranks[0]["error"] == "boom" and report.ranks[0]["returncode"] == 1
    assert report.ranks[1]["ok"] is False  # it said ok, but it never exited cleanly


def test_rank_without_a_result_line_fails():
    report = nccl_probe.launch(1, 30, out=io.StringIO(), worker_argv=fake_rank("pass"))
    assert report.ranks[0]["error"] == "rank reported no result"
    assert report.exit_code == 1


def test_timeout_kills_everything_and_exits_124(monkeypatch, capsys):
    sleeper = fake_rank("time.sleep(60)")
    monkeypatch.setattr(
        nccl_probe, "default_worker_argv", lambda r, w, port, plan: sleeper(r, w, port)
    )
    code = nccl_probe.main(["--nprocs", "2", "--timeout", "0.5"])
    assert code == 124
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2] == "nccl_probe: timed out after 0.5 s; killed all ranks"
    assert lines[-1].startswith(nccl_probe.REPORT_TAG)
    final = json.loads(lines[-1][len(nccl_probe.REPORT_TAG) :])
    assert final["timed_out"] is True and final["ok"] is False
    assert [r["returncode"] for r in final["ranks"]] == [-15, -15]  # SIGTERM sufficed
    assert final["wall_s"] < 10


CASES = (
    "cases = [{'dtype': d, 'bytes': n, 'ok': True, 'seconds': 0.001 * (rank + 1)} "
    "for d in ('bf16', 'fp32') for n in (4096, 1048576)]; "
    "print(tag + json.dumps({'ok': True, 'cases': cases}))"
)


def test_cases_are_joined_over_ranks_with_nccl_tests_figures():
    report = nccl_probe.launch(2, 30, out=io.StringIO(), worker_argv=fake_rank(CASES))
    assert report.ok and len(report.cases) == 4
    one = next(c for c in report.cases if (c["dtype"], c["bytes"]) == ("fp32", 1048576))
    # mean of the ranks' 1 ms and 2 ms; algbw = bytes / s; busbw = algbw * 2(n-1)/n = algbw at n=2
    assert one["seconds"] == pytest.approx(0.0015)
    assert one["algbw_gbps"] == pytest.approx(1048576 / 0.0015 / 1e9, abs=1e-4)
    assert one["busbw_gbps"] == one["algbw_gbps"] and one["ranks"] == 2 and one["ok"]


def test_busbw_follows_nccl_tests_for_all_reduce():
    four = nccl_probe.bandwidth(8 << 20, 0.01, 4)
    assert four["algbw_gbps"] == pytest.approx(0.8389, abs=1e-4)
    assert four["busbw_gbps"] == pytest.approx(0.8389 * 1.5, abs=1e-3)
    assert nccl_probe.bandwidth(1000, 1.0, 1)["busbw_gbps"] == 0.0


def test_a_case_one_rank_got_wrong_fails_and_carries_no_figures():
    body = CASES.replace("'ok': True, 'seconds'", "'ok': rank == 0, 'seconds'")
    wrong = "{'error': '3 of 3 differ', 'wrong_elements': 3, 'first_wrong': 0, 'found': 1.0}"
    body = body.replace("print(tag", f"cases[0].update({{}} if rank == 0 else {wrong}); print(tag")
    report = nccl_probe.launch(2, 30, out=io.StringIO(), worker_argv=fake_rank(body))
    first = report.cases[0]
    assert not first["ok"] and "seconds" not in first and first["error"] == "rank 1: 3 of 3 differ"
    assert first["wrong"] == [{"rank": 1, "wrong_elements": 3, "first_wrong": 0, "found": 1.0}]


# --- the fill: by rank and position, so a chunk in the wrong place sums wrong ------------------


@pytest.mark.parametrize(
    ("dtype", "world", "modulus"),
    [("bf16", 2, 127), ("bf16", 8, 31), ("fp16", 2, 1021), ("fp32", 2, 65521), ("bf16", 300, None)],
)
def test_the_fill_modulus_keeps_every_sum_exact(dtype, world, modulus):
    assert nccl_probe.fill_modulus(dtype, world) == modulus
    if modulus is not None:  # the largest sum of `world` values below the modulus is exact
        assert world * (modulus - 1) <= nccl_probe.EXACT_UP_TO[dtype]


@pytest.mark.parametrize("kind", nccl_probe.CORRUPTIONS)
def test_a_misplaced_chunk_sums_wrong_where_a_constant_fill_cannot_tell(kind):
    count, world, modulus = 2048, 2, nccl_probe.fill_modulus("bf16", 2)
    right = [nccl_probe.expected_sum(i, world, modulus) for i in range(count)]
    broken = nccl_probe.corrupted(right, kind)
    wrong = [i for i in range(count) if broken[i] != right[i]]
    chunk = count // nccl_probe.CHUNKS
    assert len(wrong) >= chunk - chunk // modulus - 1, (kind, len(wrong))
    assert wrong[0] < 2 * chunk  # the first chunks are the ones moved
    constant = [world * (world + 1) // 2] * count  # the probe's old fill: r+1 on rank r
    assert nccl_probe.corrupted(constant, kind) == constant


def test_each_rank_fills_differently_at_each_position():
    modulus = nccl_probe.fill_modulus("bf16", 2)
    rank0 = [nccl_probe.fill_value(0, i, modulus) for i in range(modulus)]
    rank1 = [nccl_probe.fill_value(1, i, modulus) for i in range(modulus)]
    assert len(set(rank0)) == len(set(rank1)) == modulus  # every value once per period
    # one position per period where the two ranks agree (i = 2i + 1 mod p), no more
    assert sum(a == b for a, b in zip(rank0, rank1, strict=True)) == 1
    assert rank1 not in (rank0[k:] + rank0[:k] for k in range(modulus))  # no shift of rank 0's


def test_a_rank_not_started_is_named_and_its_peer_reaped():
    """Fault injection: world size 2, only rank 0 started; rank 0 waits for its peer."""
    body = "print('waiting for the peer', flush=True); time.sleep(60)"
    report = nccl_probe.launch(2, 1.0, out=io.StringIO(), worker_argv=fake_rank(body),
                               start_ranks=[0])  # fmt: skip
    assert report.timed_out and report.exit_code == 124
    assert [r["error"] for r in report.ranks] == ["rank reported no result", "rank not started"]
    assert report.ranks[1]["returncode"] is None


def test_env_settings_are_recorded(monkeypatch):
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    monkeypatch.setenv("UNRELATED_SECRET", "x")
    report = nccl_probe.launch(1, 30, out=io.StringIO(), worker_argv=fake_rank(GOOD))
    assert report.env["NCCL_P2P_DISABLE"] == "1"
    assert "UNRELATED_SECRET" not in report.env


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_real_worker_without_torch_reports_the_import_error():
    proc = subprocess.run(
        [sys.executable, "-m", "tp2qual.serving.nccl_probe", "--nprocs", "1", "--timeout", "60"],
        env={**os.environ, "PYTHONPATH": str(PLUGINS)},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 1
    final = parse_report(proc.stdout)
    assert final.rank_errors[0] == "ModuleNotFoundError: No module named 'torch'"


# --- what the real probe printed on one H200 (device run, 2026-11-30) --------------------------


def final_json(name: str) -> tuple[dict, int]:
    lines = (DATA / name).read_text().strip().splitlines()
    assert lines[-1].startswith("rc=")
    return json.loads(lines[-2]), int(lines[-1][3:])


def test_h200_one_rank_probe_succeeded():
    final, rc = final_json("probe-1rank-p2p-off-cumem-off.log")
    assert rc == 0 and final["ok"] is True and final["timed_out"] is False
    (rank,) = final["ranks"]
    assert (rank["sum"], rank["device"], rank["nccl"]) == (1.0, 0, "2.28.9")
    assert rank["torch"] == "2.11.0+cu130"
    assert final["env"]["NCCL_P2P_DISABLE"] == "1" and final["env"]["NCCL_CUMEM_ENABLE"] == "0"
    assert 0 < final["wall_s"] < 30
    # The console copy (lines prefixed "[rank0] ") analyses like the raw rank log.
    expect = {"NCCL_P2P_DISABLE": "1", "NCCL_CUMEM_ENABLE": "0", "NCCL_CUMEM_HOST_ENABLE": "0"}
    for name in ("probe-1rank-p2p-off-cumem-off.log", "probe-1rank-rank0.log"):
        log = analyze((DATA / name).read_text())
        assert log.version == "2.28.9+cuda13.0"
        assert check(log, tp_size=1, expect_env=expect, p2p_disabled=True).ok


def test_h200_two_ranks_on_one_gpu_fail_with_duplicate_gpu():
    final, rc = final_json("probe-2rank-same-gpu.log")
    assert rc == 1 and final["ok"] is False and final["timed_out"] is False
    assert [r["returncode"] for r in final["ranks"]] == [1, 1]
    assert all(r["error"].startswith("DistBackendError: NCCL error") for r in final["ranks"])
    log = analyze((DATA / "probe-2rank-same-gpu.log").read_text())
    assert [s.code for s in log.signatures] == ["duplicate_gpu", "dist_backend_error"]
    assert log.init_started == (0, 1) and log.init_complete == ()
    # Rank 1 failed before NCCL read NCCL_P2P_DISABLE, so only two acknowledgements exist.
    rank1 = analyze((DATA / "probe-2rank-same-gpu-rank1.log").read_text())
    assert set(rank1.env_acks) == {"NCCL_CUMEM_ENABLE", "NCCL_CUMEM_HOST_ENABLE"}
    verdict = check(log, tp_size=2, expect_env={}, p2p_disabled=True)
    assert not verdict.ok and "duplicate_gpu" in verdict.reason


# --- the candidate decides the backend; the engine's own Python runs it ------------------------

REPO = Path(__file__).resolve().parents[2]


def cpu_tp2() -> Candidate:
    """The embedded vLLM CPU candidate at tensor-parallel size 2: no GPU, so gloo."""
    base = load_candidate(REPO / "candidates" / "smollm2-135m-vllm.toml")
    spec = copy.deepcopy(base.spec)
    spec["serve"]["tensor_parallel_size"] = 2
    return Candidate(base.path, spec)


def test_a_cpu_candidate_probes_with_gloo_under_the_engines_python():
    candidate = cpu_tp2()
    assert backend_of(candidate) == "gloo"
    argv = probe_argv(candidate, 60)
    assert argv[:2] == [str(candidate.python()), str(nccl_probe.Path(nccl_probe.__file__))]
    assert argv[argv.index("--backend") + 1] == "gloo"
    assert argv[argv.index("--nprocs") + 1] == "2"
    gpu = Candidate(candidate.path, {**candidate.spec, "gpus": {"count": 2}})
    assert backend_of(gpu) == "nccl"


def engine_python() -> Path:
    """The vLLM CPU engine venv's Python (its torch runs the real gloo ranks): a skip without
    it, a failure where CI says every engine is installed (``TP2QUAL_REQUIRE_ENGINES``)."""
    python = cpu_tp2().python()
    if not python.exists():
        why = "needs the vLLM CPU engine's venv (scripts/install.sh vllm)"
        pytest.fail(why) if os.environ.get("TP2QUAL_REQUIRE_ENGINES") else pytest.skip(why)
    return python


@pytest.mark.skipif(
    not cpu_tp2().python().exists(), reason="the vLLM CPU engine's venv is not installed"
)
def test_the_probe_runs_on_gloo_for_real_in_the_engines_venv():
    """Two real gloo ranks on this CPU: every size and dtype sums exactly, with figures."""
    run = run_probe(cpu_tp2(), 120)
    report = parse_report(run.output)
    assert run.returncode == 0, run.output[-2000:]
    assert (report.backend, report.nprocs, report.ranks_ok) == ("gloo", 2, (0, 1))
    assert len(report.cases) == 6 and all(c.ok and c.busbw_gbps for c in report.cases)
    assert check_report(report, tp=2, backend="gloo").ok


@pytest.mark.parametrize("kind", nccl_probe.CORRUPTIONS)
def test_a_real_probe_with_a_corrupted_chunk_fails_and_says_where(kind):
    """Two real gloo ranks; rank 1's summed 4 KiB bf16 buffer corrupted by whole chunks before
    the check (``--corrupt 1:KIND``): the probe fails that case on rank 1 only, naming the
    wrong elements, and its verdict fails."""
    python = engine_python()
    argv = [str(python), str(nccl_probe.Path(nccl_probe.__file__)), "--nprocs", "2",
            "--timeout", "120", "--backend", "gloo", "--sizes", "4K", "--dtypes", "bf16",
            "--corrupt", f"1:{kind}"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    report = parse_report(done.stdout)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    (case,) = report.cases
    (where,) = case.wrong
    chunk = 2048 // nccl_probe.CHUNKS
    assert not case.ok and where.rank == 1 and where.count >= chunk - 2, case
    assert where.first is not None and where.first < 2 * chunk, where
    assert case.error and case.error.startswith("rank 1: ") and "elements wrong" in case.error
    assert report.ranks_ok == (0,)
    verdict = check_report(report, tp=2, backend="gloo")
    assert not verdict.ok and "all_reduce bf16 4096 B failed: rank 1: " in verdict.reason
    assert "(injected)" in done.stdout
