"""One resolved launch (tp2qual.launch): for every shipped candidate, lanes included, the argv
``--plan`` prints, the argv gate 00's engine check asks the engine about and the argv the
launcher starts (``Popen`` for a process, ``containers.create`` for a container) are one and
the same, byte for byte, and so is the argv the identity record and ``launch.json`` keep."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tp2qual.candidate import Candidate, load_candidates
from tp2qual.checks.engine_answer import engine_args
from tp2qual.hooks.server import plan_for
from tp2qual.launch import ResolvedLaunch, resolve_launch
from tp2qual.redact import Redactor
from tp2qual.serving import engine_check
from tp2qual.serving.launchers.docker.run_args import run_kwargs, sdk_kwargs
from tp2qual.serving.managed import build_launcher

MAIN = Path(__file__).resolve().parents[2]
SHIPPED = load_candidates([MAIN / "candidates"])


def _launch(candidate: Candidate) -> ResolvedLaunch:
    return resolve_launch(candidate, port=39123, run_id="one-launch", session="s", wsl2=False)


def _planned_argv(candidate: Candidate, launch: ResolvedLaunch) -> list[str]:
    """The argv in the plan's [launch] section, read back from the printed text."""
    plan = plan_for(candidate, "one-launch", launch=launch)
    section = plan.split("[launch]\n", 1)[1].split("\n[", 1)[0]
    words = shlex.split(section)
    if launch.container is None:  # VAR=value … argv
        return words[len(launch.env) :]
    image = words.index(launch.container.image)
    flag = words.index("--entrypoint") if "--entrypoint" in words[:image] else None
    entry = [words[flag + 1]] if flag is not None else []
    return [*entry, *words[image + 1 :]]


def _started_argv(candidate: Candidate, launch: ResolvedLaunch, tmp_path: Path) -> list[str]:
    """What ``start()`` hands the OS or the Docker SDK, built by the launcher the run uses."""
    launcher = build_launcher(
        candidate, tmp_path / "server.log", Redactor(), run_id="one-launch", launch=launch
    )
    if launch.container is None:
        return launcher.argv()  # type: ignore[attr-defined, no-any-return]
    created = sdk_kwargs(launcher.run_kwargs())  # type: ignore[attr-defined]
    return [*created.get("entrypoint", []), *created["command"]]


@pytest.mark.parametrize("shipped", SHIPPED, ids=[c.name for c in SHIPPED])
def test_plan_check_and_start_read_one_argv(shipped: Candidate, tmp_path: Path) -> None:
    candidate = shipped
    launch = _launch(candidate)
    argv = list(launch.argv)
    assert _planned_argv(candidate, launch) == argv
    assert _started_argv(candidate, launch, tmp_path) == argv
    asked = engine_check.question(candidate, launch)
    if asked is not None:  # the check's own command carries the question: read it back
        sent = json.loads(engine_check.check_argv(launch, asked)[-1])
        assert sent["args"] == engine_args(launch.engine, argv)
        assert argv[len(argv) - len(sent["args"]) :] == sent["args"]
    launcher = build_launcher(
        candidate, tmp_path / "server.log", Redactor(), run_id="one-launch", launch=launch
    )
    assert launcher.identity()["argv"] == argv  # what launch.json and the identity record keep


def test_the_shipped_set_has_lanes_and_both_launchers() -> None:
    """The test above covers what it says: lanes, processes and containers are among them."""
    kinds = {c.launcher_kind for c in SHIPPED}
    assert kinds == {"process", "docker"}
    assert any(c.spec.get("lane") for c in SHIPPED)


def test_a_launch_is_resolved_once_and_cannot_change() -> None:
    launch = _launch(SHIPPED[0])
    with pytest.raises(AttributeError):
        launch.argv = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        launch.env["X"] = "1"  # type: ignore[index]


def test_run_kwargs_fill_nothing(tmp_path: Path) -> None:
    """The Docker arguments are the resolved launch in the SDK's shape: a placeholder filled
    differently afterwards (another port) cannot reach them."""
    docker = next(c for c in SHIPPED if c.launcher_kind == "docker")
    launch = _launch(docker)
    kwargs = run_kwargs(launch)
    assert [*kwargs.get("entrypoint", []), *kwargs["command"]] == list(launch.argv)
    assert kwargs["environment"] == dict(launch.env)


def test_verify_names_an_approved_argv_that_is_not_the_started_one(tmp_path: Path) -> None:
    """verify's oracle: gate 00's ``launch_argv`` and ``launch.json``'s argv, from one value in
    a real run, are compared again; a run whose two differ is a mismatch, never a PASS."""
    from tp2qual.evidence.rederive.common import GateRun, Rederived
    from tp2qual.evidence.rederive.preflight import _asked_is_started

    (tmp_path / "launch.json").write_text(json.dumps({"argv": ["serve", "--port", "1"]}))
    run = GateRun(root=tmp_path, settings={}, engine="vllm", max_model_len=1)
    same, other = Rederived(), Rederived()
    _asked_is_started(run, {"launch_argv": ["serve", "--port", "1"]}, same)
    _asked_is_started(run, {"launch_argv": ["serve", "--port", "2"]}, other)
    assert same.mismatches == [] and "launch.json" in same.read
    assert [m.what for m in other.mismatches] == [
        "engine_check.json launch_argv (vs launch.json argv)"
    ]
