"""Room plugin: before the first candidate (and before any serve is handed over), the run's
estimated evidence, gate by gate at each candidate's real bound (``checks/disk_room.py``), must
fit the results folder's free space with a margin; else the run is refused, naming both figures.
The estimate and the free space are written to ``disk_room.json`` in the run folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tp2qual.candidate import GATES, Candidate
from tp2qual.checks import disk_room
from tp2qual.hooks.candidates import run_key
from tp2qual.hooks.gating import candidate_of

RECORD = "disk_room.json"
MIB = 1024**2


def _estimate(candidate: Candidate) -> dict[str, int]:
    gates = {g: candidate.gate(g) for g in GATES}
    return disk_room.estimate(candidate.max_model_len, gates, candidate.reference is not None)


def _free_bytes(folder: Path) -> int:
    """Free space where the run folder lives (its nearest existing parent, before it exists)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def plan_line(candidates: list[Candidate], run_dir: Path) -> str:
    """``--plan``'s one line on disk room: the estimate, the largest candidate, the free space
    and the margin, with the verdict the run itself will give."""
    estimates = {c.name: _estimate(c) for c in candidates}
    verdict = disk_room.judge(estimates, _free_bytes(run_dir), str(run_dir.parent))
    m = verdict.measures
    per = m["per_candidate_bytes"]
    largest = max(per, key=lambda n: per[n]) if per else "none"
    said = "fits" if verdict.ok else "REFUSED"
    return (
        f"evidence on disk: about {m['estimate_bytes'] / MIB:.1f} MiB for the run (the most:"
        f" {largest}, {per.get(largest, 0) / MIB:.1f} MiB, gate 07"
        f" {estimates.get(largest, {}).get('agreement_07', 0) / MIB:.1f} MiB of it) against"
        f" {m['free_bytes'] / MIB:.0f} MiB free under {m['folder']} with a margin of"
        f" {m['margin_bytes'] / MIB:.0f} MiB: {said}"
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if config.getoption("plan", False) or config.option.collectonly:
        return  # the plan says the figures (plan_line), and refuses nothing
    state = config.stash.get(run_key, None)
    chosen = {c.name: c for i in session.items if (c := candidate_of(i)) is not None}
    if state is None or not chosen or state.shared:
        return  # nothing to run here, or a shared run whose controller checked its own disk
    estimates = {name: _estimate(c) for name, c in chosen.items()}
    verdict = disk_room.judge(estimates, _free_bytes(state.run_dir), str(state.run_dir.parent))
    if verdict.ok:  # a refused run writes nothing more to the folder that has no room
        state.run_dir.mkdir(parents=True, exist_ok=True)
        (state.run_dir / RECORD).write_text(json.dumps(verdict.measures, indent=2) + "\n")
        return
    raise pytest.UsageError(verdict.reason)
