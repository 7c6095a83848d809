"""Candidates plugin: load and validate candidate files, parametrize gates by candidate.

Each candidate is one session-scoped parameter whose id is its name, so ``-k inkling`` selects
one candidate and pytest groups each candidate's gates together (one server start each).
A candidate this machine cannot run is skipped with the reason, decided at collection.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

import pytest

from tp2qual.candidate import Candidate, load_candidates
from tp2qual.engines import engine_for
from tp2qual.evidence.run import RunState
from tp2qual.exceptions import CandidateError
from tp2qual.run_order import run_order

run_key = pytest.StashKey[RunState]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tp2qual", "serving-candidate qualification")
    group.addoption(
        "--candidates",
        action="append",
        default=[],
        metavar="DIR",
        help="add a folder of candidate TOML files (repeatable)",
    )
    group.addoption(
        "--results",
        default=None,
        metavar="DIR",
        help="where runs are written (default: ini results_dir)",
    )
    parser.addini(
        "candidate_dirs", type="paths", default=[], help="candidate folders read on every run"
    )
    parser.addini("results_dir", default="results", help="where runs are written")


# Options whose value is a path. pytest settles the rootdir and ini file before it loads this
# plugin (a pytest11 entry point), so then it takes the DIR of `--candidates DIR` for a test path:
# rootdir becomes DIR and pyproject.toml's settings are dropped (pytest-dev/pytest#8846).
PATH_OPTIONS = ("--candidates", "--results", "--hosts")


def joined_path_options(args: tuple[str, ...]) -> list[str] | None:
    """``args`` with each ``--candidates DIR`` written ``--candidates=DIR``; None if none was."""
    joined: list[str] = []
    i = 0
    while i < len(args):
        arg, value = args[i], args[i + 1] if i + 1 < len(args) else "-"
        if arg == "--":  # what follows is positional
            joined += args[i:]
            break
        if arg in PATH_OPTIONS and not value.startswith("-"):
            joined.append(f"{arg}={value}")
            i += 2
        else:
            joined.append(arg)
            i += 1
    return joined if len(joined) < len(args) else None


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | pytest.ExitCode | None:
    """Start again from ``--candidates=DIR`` when given ``--candidates DIR``.

    No hook of an entry-point plugin runs before pytest settles the rootdir and ini file
    (``Config.parse`` calls ``determine_setup`` before ``load_setuptools_entrypoints``), so the
    only public way to make both spellings mean the same is a fresh ``pytest.main`` on the joined
    arguments, before this configuration is used: nothing configured, nothing collected yet."""
    args = joined_path_options(config.invocation_params.args)
    if args is None:
        return None
    return pytest.main(args, plugins=list(config.invocation_params.plugins or ()))


def pytest_configure(config: pytest.Config) -> None:
    folders = list(config.getini("candidate_dirs"))
    folders += [Path(p).expanduser().resolve() for p in config.getoption("candidates")]
    try:
        candidates = load_candidates(folders)
    except CandidateError as exc:
        raise pytest.UsageError(f"candidate files rejected, nothing was started:\n{exc}") from None
    if not candidates:  # else every gate is collected with a NOTSET candidate, which hooks read
        looked = ", ".join(map(str, folders)) or "no folder"
        raise pytest.UsageError(
            f"no candidate files found ({looked}): add --candidates=DIR or ini candidate_dirs"
        )
    results = Path(config.getoption("results") or config.getini("results_dir"))
    if not results.is_absolute():
        results = config.rootpath / results
    config.stash[run_key] = RunState(results, in_run_order(candidates))
    config.addinivalue_line(
        "markers",
        f"{CAMPAIGN}: a campaign's candidate ([campaign] in its file): -m campaign runs them all",
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    config.stash.__delitem__(run_key) if run_key in config.stash else None


def in_run_order(candidates: list[Candidate]) -> list[Candidate]:
    """By name, then as a run takes them (``tp2qual.run_order``): a reference before the
    candidates judged against it, a baseline before its lanes, one model's serves together."""
    by_name = {c.name: c for c in sorted(candidates, key=lambda c: c.name)}
    return [by_name[name] for name in run_order(list(by_name.values()))]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "candidate" not in metafunc.fixturenames:
        return
    state = metafunc.config.stash[run_key]
    spread = bool(metafunc.config.getoption("hosts", None))  # hosts plugin: judged per host
    params = [
        pytest.param(c, id=c.name, marks=_campaign_marks(c) + ([] if spread else _skip_marks(c)))
        for c in state.candidates
    ]
    metafunc.parametrize("candidate", params, scope="session")


CAMPAIGN = "campaign"


def _campaign_marks(candidate: Candidate) -> list[pytest.MarkDecorator]:
    """``-m campaign`` selects every candidate whose file (or an included part) has
    ``[campaign]``: the whole campaign, run in its order by the gating plugin."""
    return [pytest.mark.campaign] if candidate.spec.get(CAMPAIGN) else []


def _skip_marks(candidate: Candidate) -> list[pytest.MarkDecorator]:
    reason = why_not_runnable(candidate)
    return [pytest.mark.skip(reason=f"cannot run here: {reason}")] if reason else []


def why_not_runnable(candidate: Candidate) -> str | None:
    """Why this machine cannot run the candidate at all, or None."""
    needed = candidate.gpus.get("count", 0)
    if needed and (have := gpu_count()) < needed:
        why = f"needs {needed} NVIDIA GPU(s), this machine has {have}"
        return why + (f" ({nvml_error()})" if not have and nvml_error() else "")
    if candidate.launcher_kind == "docker":
        from tp2qual.serving.launchers.docker.engine import unavailable as docker_unavailable
        from tp2qual.serving.launchers.docker.pins import pin_unresolved

        return docker_unavailable() or pin_unresolved(candidate)
    package = engine_for(candidate.engine).python_package
    if package and importlib.util.find_spec(package[0]) is None:
        return f"{package[1]} is not installed (scripts/install.sh local)"
    own_venv = candidate.launch.get("python")
    if own_venv and not candidate.python().is_file():
        return f"engine venv {own_venv} is not installed (scripts/install.sh {candidate.engine})"
    try:
        model_file = candidate.model_file()
    except CandidateError as exc:
        return str(exc)
    if model_file is not None and not model_file.is_file():
        hint = f" (scripts/install.sh {candidate.engine})" if own_venv else ""
        return f"model file {model_file} does not exist{hint}"
    return None


@cache
def gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library: no GPUs here
        return 0


@cache
def nvml_error() -> str:
    """Why NVML counts no GPU here, when it cannot be read at all: with what to do."""
    try:
        import pynvml
    except ImportError:
        return "NVML cannot be read: nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # no driver, no library
        return f"NVML cannot be read: {exc}; install the NVIDIA driver (WSL2: the Windows one)"
    pynvml.nvmlShutdown()
    return ""
