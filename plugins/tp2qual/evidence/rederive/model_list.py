"""Gate 02 (model_list): the record of the kernels the engine chose read again.

``checks.kernels.record`` runs again on the lines of ``server.log`` the gate read and the launch
command the run recorded (``identity/candidate.json``); ``kernels.json`` is compared with it.
"""

from __future__ import annotations

import json

from tp2qual.checks import kernels
from tp2qual.engines import engine_for
from tp2qual.evidence.rederive.common import GateRun, Rederived, Unrederivable, read_settings


def model_list(run: GateRun) -> Rederived:
    """Gate 02's record of the kernels the engine chose: read again from the first
    ``lines_read`` lines of ``server.log`` (the log grows after the gate), the backends asked
    from the launch the run recorded. A run from before this record has none: nothing to do."""
    out = Rederived()
    path = run.root / kernels.ARTIFACT
    if not path.is_file():
        return out
    log = run.root / "server.log"
    if not log.is_file():
        raise Unrederivable(f"{kernels.ARTIFACT} is read from server.log, which is not on disk")
    try:
        recorded = json.loads(path.read_text())
        lines = log.read_text(errors="replace").splitlines()[: int(recorded["lines_read"])]
    except (ValueError, KeyError, TypeError) as exc:
        raise Unrederivable(f"{kernels.ARTIFACT} is malformed: {exc!r}") from None
    command = read_settings(run.root).get("command")
    new = kernels.record(engine_for(run.engine), lines, command or [])
    if command is None:  # recorded before the launch was: the asked flags cannot be re-read
        new = {k: v for k, v in new.items() if k not in ("asked", "notices")}
    out.records = 1
    out.compare(kernels.ARTIFACT, kernels.ARTIFACT, recorded, **new)
    out.rows[kernels.ARTIFACT] = [{**recorded, **new}]
    return out
