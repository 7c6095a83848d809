"""README.md's "Everyday use" commands, run as written from the repository root.

Each keeps the project's rootdir and ``pyproject.toml`` whatever its options; ``--candidates
DIR`` (space-separated) means the same as ``--candidates=DIR``. Only what would start a real
qualification is changed: ``--collect-only`` is added (unless the command is a ``--plan``), the
candidates folder and result paths point into a temporary folder.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_candidate import MINIMAL

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def everyday_commands() -> list[str]:
    """The commands of the fenced block after "Everyday use:", as the shell would split them
    (comments dropped), joined back with their quoting."""
    block = README.read_text().split("Everyday use:", 1)[1].split("```sh\n", 1)[1]
    lines = block.split("```", 1)[0].splitlines()
    return [shlex.join(shlex.split(line, comments=True)) for line in lines if line.strip()]


COMMANDS = everyday_commands()


def candidates_folder(path: Path, name: str) -> Path:
    path.mkdir(parents=True)
    (path / f"{name}.toml").write_text(MINIMAL.format(name=name, tp=1, launch_extra=""))
    return path


def run_pytest(args: list[str]) -> subprocess.CompletedProcess[str]:
    """``python -m pytest ARGS`` from the repository root, as a user would run it there."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def as_run_here(command: str, tmp: Path, mine: Path) -> list[str]:
    """The command's arguments with the user's paths in ``tmp``, and nothing started."""
    argv = shlex.split(command)
    assert argv[0] == "pytest", command
    args = [
        a.replace("~/my-candidates", str(mine)).replace("results/", f"{tmp}/results/")
        for a in argv[1:]
    ]
    args.append(f"--results={tmp}/runs")
    return args if "--plan" in args else [*args, "--collect-only"]


def assert_project_config(result: subprocess.CompletedProcess[str]) -> None:
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "INTERNALERROR" not in output, output
    header = result.stdout.splitlines()
    assert f"rootdir: {ROOT}" in header, output
    assert "configfile: pyproject.toml" in header, output


def test_the_everyday_block_is_found() -> None:
    assert len(COMMANDS) >= 5 and all(c.startswith("pytest") for c in COMMANDS)
    assert any(shlex.split(c)[1:3] == ["--candidates", "~/my-candidates"] for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_everyday_command_keeps_the_project_config(command: str, tmp_path: Path) -> None:
    mine = candidates_folder(tmp_path / "my-candidates", "extra-cand")
    result = run_pytest(as_run_here(command, tmp_path, mine))
    # Every command selects something here (-k/-m match shipped candidates), so 0, never 5.
    assert result.returncode == 0, result.stdout + result.stderr
    assert_project_config(result)
    if "--candidates" in command:  # the folder was read as candidates, not collected as tests
        assert "[extra-cand]" in result.stdout
        assert "plugins/tests" not in result.stdout and "<Dir plugins>" not in result.stdout


def test_space_and_equals_spellings_collect_the_same(tmp_path: Path) -> None:
    one = candidates_folder(tmp_path / "one", "extra-one")
    two = candidates_folder(tmp_path / "two", "extra-two")
    common = ["-k", "extra", "--collect-only", "-q", f"--results={tmp_path}/runs"]
    spaced = run_pytest(["--candidates", str(one), "--candidates", str(two), *common])
    joined = run_pytest([f"--candidates={one}", f"--candidates={two}", *common])
    assert (spaced.returncode, joined.returncode) == (0, 0), spaced.stdout + spaced.stderr
    ids = [line for line in joined.stdout.splitlines() if "::" in line]
    assert ids and [line for line in spaced.stdout.splitlines() if "::" in line] == ids
    assert any("[extra-one]" in i for i in ids) and any("[extra-two]" in i for i in ids)
    assert all(i.startswith("tests/") for i in ids), ids  # rootdir-relative: the project's


def test_no_candidates_at_all_is_a_usage_error(tmp_path: Path) -> None:
    result = run_pytest(["-o", "candidate_dirs=", "--collect-only", f"--results={tmp_path}"])
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert "no candidate files found" in result.stderr
    assert "Traceback" not in result.stderr and "INTERNALERROR" not in result.stdout
