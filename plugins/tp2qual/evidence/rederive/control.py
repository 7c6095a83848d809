"""Every gate: each answer's reasoning-control proof derived again from its raw exchange.

The gates write one proof row per answered chat completion into ``<gate>_control.jsonl`` as the
answer arrives (``serving.server.Api``, ``checks.control``). Here the same rule runs again on the
gate's raw exchanges (``<gate>.jsonl``) with the control the run recorded at its start
(``identity/candidate.json`` ``control``): the rows must be those it gives, in order, and a
row that fails is the gate's failure. A run recorded before controls were proven names none:
nothing to re-derive.
"""

from __future__ import annotations

from tp2qual.checks.control import control_rows
from tp2qual.evidence.rederive.common import GateRun, Mismatch, Rederived

_FIELDS = ("ok", "asked", "seen", "field", "reasoning_chars", "think_tags", "answer_chars")


def control(run: GateRun, gate: str, out: Rederived) -> None:
    """Add the control proofs of ``gate`` to ``out``: rows, mismatches and failures."""
    asked = run.resolved.get("control")
    if asked is None:
        return
    artifact = f"{gate}_control.jsonl"
    new = control_rows(str(asked), run.records(f"{gate}.jsonl", required=False))
    recorded = run.records(artifact, required=False)
    if not new and not recorded:
        return
    out.rows[artifact] = new
    out.read.append(artifact)  # verify lists it among the records judged again
    for i, row in enumerate(new):
        where = f"{gate}.jsonl {row['tag']}"
        if i >= len(recorded):
            out.mismatches.append(Mismatch(where, f"{artifact} row {i}", "<absent>", row["ok"]))
        else:
            out.compare(where, artifact, recorded[i], **{k: row[k] for k in _FIELDS})
        if not row["ok"]:
            out.failures.append(f"{where}: {row['reason']}")
    for i in range(len(new), len(recorded)):
        tag = recorded[i].get("tag")
        what = f"{artifact} row {i} ({tag})"
        out.mismatches.append(Mismatch(artifact, what, "a proof", "no answered chat exchange"))
