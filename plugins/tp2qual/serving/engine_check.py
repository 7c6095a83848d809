"""Ask the engine itself whether it accepts a candidate's launch, before anything starts.

``serving/engine_check_entry.py`` runs where the server would: the engine's own Python for a
process candidate (``launch.python``), the pinned image for a Docker candidate (``docker run
--rm --network host`` of the verified image, the server's environment and read-only mounts, no
GPU, the engine never started). Where the engine's parser does not import there, the engine
variables fall back to the shipped table (``tp2qual.engine_env``), and the answer says so.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tp2qual.candidate import Candidate
from tp2qual.checks.engine_answer import engine_args
from tp2qual.engine_env import candidate_env_problems, env_basis
from tp2qual.engines import engine_for
from tp2qual.launch import ResolvedLaunch
from tp2qual.redact import Redactor
from tp2qual.serving import engine_check_entry

ENTRY = Path(engine_check_entry.__file__)
IN_IMAGE = "/tmp/tp2qual_engine_check.py"
TIMEOUT_S = 300.0  # vLLM 0.32.0 CPU: 36-54 s on 2 cores at load 8 (its import ~30 s of it)
ARTIFACT = "engine_check.json"


@dataclass(frozen=True)
class EngineQuestion:
    """What the engine is asked: its own arguments (the launch's argv after the entry point)
    and the engine variables set. ``port``: the one the launch was resolved with."""

    engine: str
    args: list[str]
    env: list[str]
    port: int = 0

    def as_json(self) -> str:
        return json.dumps({"engine": self.engine, "args": self.args, "env": self.env})

    def portless(self) -> EngineQuestion:
        """The same question with the launch's port asked as 0 (a recorded answer holds for
        any port the run picks)."""
        port = str(self.port)
        args = ["0" if self.port and a == port else a for a in self.args]
        return EngineQuestion(self.engine, args, self.env)

    def redacted(self, redactor: Redactor) -> EngineQuestion:
        """As shown in ``--plan`` and evidence: ``--api-key X`` masked."""
        return EngineQuestion(self.engine, redactor.argv(self.args), self.env, self.port)


_LEFT_FOR_WRAPPER = re.compile(r"\{[a-z_]+\}")


def question(candidate: Candidate, launch: ResolvedLaunch) -> EngineQuestion | None:
    """None when the engine has no parser to ask (llama.cpp) or the argv names no entry point
    of it (why: ``not_asked``)."""
    if engine_for(launch.engine).env_prefix is None:
        return None
    args = engine_args(launch.engine, list(launch.argv))
    if args is None:
        return None
    # A value left for a wrapper to fill ({{name}} in the command: e.g. the port a proxy in
    # front gives the engine) is asked as 0: the parser judges that a value is there, not which.
    args = ["0" if _LEFT_FOR_WRAPPER.fullmatch(a) else a for a in args]
    return EngineQuestion(launch.engine, args, sorted(candidate.env()), launch.port)


def not_asked(launch: ResolvedLaunch) -> str:
    if engine_for(launch.engine).env_prefix is None:
        return f"{launch.engine}: no engine parser to ask"
    return (
        f"the launch names no {launch.engine} entry point (`-m <module>` or "
        f"`{launch.engine} serve`): {shlex.join(launch.argv)[:200]}"
    )


def check_argv(launch: ResolvedLaunch, asked: EngineQuestion, *, image: str | None = None,
               python: Path | None = None) -> list[str]:  # fmt: skip
    """The check's command: the engine's Python on the entry file, or ``docker run`` of
    ``image`` (default: the launch's image reference) with the entry file mounted.
    ``python``: that Python instead, whatever the launcher (an engine wheel's parser venv)."""
    if python is not None:
        return [str(python), str(ENTRY), asked.as_json()]
    if launch.container is None:
        return [launch.python, str(ENTRY), asked.as_json()]
    from tp2qual.serving.launchers.docker.run_args import render_docker_run, run_kwargs

    server = run_kwargs(launch)
    volumes = {**server.get("volumes", {}), str(ENTRY): {"bind": IN_IMAGE, "mode": "ro"}}
    kwargs = {
        "image": image or server["image"],
        "name": f"{server['name']}-engine-check",
        "network_mode": "host",
        "environment": server["environment"],
        "labels": server["labels"],
        "volumes": volumes,
        "entrypoint": ["python3", IN_IMAGE],
        "command": [asked.as_json()],
        "auto_remove": True,
    }
    return shlex.split(render_docker_run(kwargs))


def platform_of(candidate: Candidate) -> str:
    """Where the candidate serves, in the words of the engines' platform notes."""
    return "cuda" if int(candidate.gpus.get("count", 0)) else "cpu"


@dataclass(frozen=True)
class EngineRun:
    argv: list[str]
    returncode: int
    output: str
    seconds: float
    answer: dict[str, Any] | None  # the entry's JSON line; None when it printed none


def ask_engine(launch: ResolvedLaunch, asked: EngineQuestion, *, image: str | None = None,
               timeout_s: float = TIMEOUT_S, python: Path | None = None) -> EngineRun:  # fmt: skip
    """Run the check bounded in time, with the server's environment."""
    argv = check_argv(launch, asked, image=image, python=python)
    env = {**os.environ, **launch.env}
    began = time.monotonic()
    try:
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code, output = 124, _text(exc.stdout) + _text(exc.stderr)
    seconds = round(time.monotonic() - began, 3)
    return EngineRun(argv, code, output, seconds, _answer(output))


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def _answer(output: str) -> dict[str, Any] | None:
    for line in reversed(output.splitlines()):
        if line.startswith(engine_check_entry.MARK):
            loaded: dict[str, Any] = json.loads(line[len(engine_check_entry.MARK) :])
            return loaded
    return None


def with_fallback(candidate: Candidate, answer: dict[str, Any]) -> dict[str, Any]:
    """Where the engine's parser did not import, the shipped table's word on the variables."""
    if answer.get("importable") or "env" in answer:  # the engine's registry answered
        return answer
    static = {"source": env_basis(candidate), "problems": candidate_env_problems(candidate)}
    return {**answer, "static": static}


def plan_lines(candidate: Candidate, launch: ResolvedLaunch) -> list[str]:
    """What gate 00 asks the engine, for ``--plan``."""
    asked, shown = question(candidate, launch), Redactor(candidate.env())
    if asked is None:
        return [f"engine check: not run: {not_asked(launch)}"]
    where = "in the pinned image" if launch.container else "in launch.python"
    prefix = engine_for(asked.engine).env_prefix or ""
    names = ", ".join(n for n in asked.env if n.startswith(prefix)) or f"no {prefix}* variable set"
    return [
        f"engine check, {where}: {asked.engine}'s own parser on the "
        f"{len(asked.args)} arguments after its entry point; its registry on the engine "
        f"variables ({names}); should its parser not import there: {env_basis(candidate)}",
        "  " + shlex.join(check_argv(launch, asked.redacted(shown))),
    ]
