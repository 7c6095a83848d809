"""``python -m tp2qual diagnose``: exit codes, text and JSON output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tp2qual.__main__ import main

CORPUS = Path(__file__).parent / "data" / "diagnosis"
SHM = CORPUS / "closed-loop-h200" / "shm512k-2rank-net.log"
OK = CORPUS / "closed-loop-h200" / "remedy-2rank-net.log"


def test_failure_prints_cause_evidence_remedy_and_exits_1(capsys):
    assert main(["diagnose", str(SHM), "--tp", "2"]) == 1
    out = capsys.readouterr().out
    assert "shm_exhausted (high confidence)" in out and "cause:" in out and "remedy:" in out
    assert "No space left on device (28)" in out  # an evidence line, with its number


def test_json_is_one_object_with_verdict_and_findings(capsys):
    assert main(["diagnose", str(SHM), str(OK), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "failed"
    first = doc["findings"][0]
    assert first["rule"] == "shm_exhausted" and first["log"] == str(SHM)
    assert first["evidence"][0]["line"] > 0 and first["remedy"] and first["confidence"]


def test_clean_log_exits_0(capsys):
    assert main(["diagnose", str(OK), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"verdict": "ok", "findings": []}


def test_env_reaches_the_remedy(tmp_path, capsys):
    log = tmp_path / "alloc.log"
    log.write_text(
        "[rank0]: torch.zeros(1)\n[rank0]: RuntimeError: CUDA driver error: unknown error\n"
    )
    env = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    assert main(["diagnose", str(log), "--env", env, "--json"]) == 1
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert finding["rule"] == "expandable_segments_alloc"
    assert "PYTORCH_CUDA_ALLOC_CONF" in finding["remedy"]


def test_unreadable_file_and_bad_env_exit_2_with_one_line(tmp_path, capsys):
    assert main(["diagnose", str(tmp_path / "missing.log")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read" in err and "Traceback" not in err
    assert main(["diagnose", str(OK), "--env", "NOEQUALS"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


def test_as_a_module_without_arguments_exits_2():
    proc = subprocess.run(
        [sys.executable, "-m", "tp2qual", "diagnose"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
