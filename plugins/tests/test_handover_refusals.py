"""A hand-over that cannot be done is refused in one line before anything stops or any candidate
starts: a name that names nothing, a malformed URL, no Docker engine, a bad ``[handover]``
table (the file and field named). Inner runs refused at their start: seconds each."""

from __future__ import annotations

import pytest
from test_faults import run_inner, smollm2_spec, write_candidate


@pytest.fixture
def candidate_dir(tmp_path):
    write_candidate(tmp_path / "candidates", smollm2_spec("handover-refused"))
    return tmp_path


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (
            ["--hand-over=label=role"],
            "--hand-over: 'label=role': a label is named as label=KEY=VALUE",
        ),
        (["--hand-over=colour=red"], "--hand-over: 'colour=red' names no serve"),
        (["--hand-over=x", "--hand-over-url=x"], "--hand-over-url: 'x': expected NAME=http://"),
    ],
)
def test_a_bad_option_is_one_line_and_nothing_runs(candidate_dir, options, said):
    inner = run_inner(candidate_dir, ["handover-refused"], *options, timeout_s=120)
    assert inner.proc.returncode == 4, inner.output()
    assert f"ERROR: {said}" in inner.proc.stderr, inner.output()
    assert "Traceback" not in inner.output() and inner.events == []


def test_no_docker_engine_is_said_before_anything_runs(candidate_dir, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{candidate_dir}/no-such.sock")
    inner = run_inner(candidate_dir, ["handover-refused"], "--hand-over=llm-primary", timeout_s=120)
    assert inner.proc.returncode == 4, inner.output()
    assert "ERROR: hand-over of llm-primary: " in inner.proc.stderr, inner.output()
    assert "no-such.sock" in inner.proc.stderr and inner.events == []


def test_a_bad_handover_table_names_the_file_and_field(tmp_path):
    spec = smollm2_spec("handover-table")
    spec["handover"] = {"containers": ["x"], "health_urls": {"x": "localhost:8000"}}
    write_candidate(tmp_path / "candidates", spec)
    inner = run_inner(tmp_path, ["handover-table"], timeout_s=120)
    assert inner.proc.returncode != 0 and inner.events == []
    assert "handover-table.toml" in inner.output() and "health_urls" in inner.output()
