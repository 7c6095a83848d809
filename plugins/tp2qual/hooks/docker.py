"""Docker plugin: containers never leak across runs.

At the start of a session that selected a Docker candidate, containers left with our labels by an
earlier (crashed) run are removed and reported, their inspect JSON and log tail kept under
``results/<run>/leftovers/``; at the end, anything this session created is removed, which covers
an interrupt that landed between creating a container and the launcher holding it.
"""

from __future__ import annotations

import pytest

from tp2qual.hooks.candidates import run_key
from tp2qual.hooks.gating import candidate_of
from tp2qual.serving.launchers.docker.engine import docker_client, unavailable

swept_key = pytest.StashKey[list[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tp2qual")
    group.addoption(
        "--pull",
        action="store_true",
        help="pull a Docker candidate's image when missing (the pin is still enforced)",
    )


@pytest.fixture(scope="session")
def pull_images(request: pytest.FixtureRequest) -> bool:
    """``--pull``: a missing image may be pulled (its pin still holds)."""
    return bool(request.config.getoption("pull"))


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.getoption("plan", False) or session.config.getoption("hosts", None):
        return  # with --hosts the controller sweeps each host (hooks/hosts.py)
    if not _wants_docker(session):
        return
    from tp2qual.serving.launchers.docker.sweep import sweep

    state = session.config.stash[run_key]
    with docker_client() as client:
        removed = sweep(
            client,
            reason="leftover from an earlier run",
            keep_run=state.run_id,
            save_to=state.run_dir / "leftovers",
        )
    session.config.stash[swept_key] = removed
    if removed:
        session.config.get_terminal_writer().line(
            f"tp2qual: removed {len(removed)} container(s) left by an earlier run: "
            + ", ".join(removed)
        )


def _wants_docker(session: pytest.Session) -> bool:
    selected = {c.name: c for item in session.items if (c := candidate_of(item)) is not None}
    wanted = any(c.launcher_kind == "docker" for c in selected.values())
    return wanted and unavailable() is None


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if swept_key not in session.config.stash:
        return
    from tp2qual.launch import SESSION
    from tp2qual.serving.launchers.docker.sweep import sweep

    with docker_client() as client:
        sweep(client, reason="session end", only_session=SESSION)
