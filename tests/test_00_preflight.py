"""Gate 00 — preflight, before anything starts.

Pass means: the model the candidate pins resolves to exactly the pinned bytes or revision; for
a GPU candidate, NVML shows at least TP-size GPUs with the memory the candidate needs, none busy
with another serve (``--allow-busy`` overrides, recorded); WSL2 and the topology (names, UUIDs,
PCIe, NVLink, P2P status) are recorded. Artifacts: ``identity/model.json``, ``topology.json``,
``busy.json``.
"""

from __future__ import annotations

import pytest

from tp2qual import gpu
from tp2qual.checks import topology
from tp2qual.identity import model_identity

pytestmark = pytest.mark.preflight


def test_model_pin_resolves(candidate, record, claim):
    facts = model_identity(candidate)  # raises PinMismatch naming file/revision and pin
    record.identity["model"] = facts
    record.evidence.write_json("identity/model.json", facts)
    claim("resolved_revision", "identity/model.json", op="field", path="resolved_revision")


def test_gpus_fit_and_are_free(candidate, record, request):
    snapshot = gpu.snapshot()
    record.identity["topology"] = snapshot
    record.evidence.write_json("topology.json", snapshot)
    needed = candidate.gpus.get("count", 0)
    if not needed:
        pytest.skip("the candidate needs no GPU (topology recorded as found)")
    allow_busy = request.config.getoption("allow_busy")
    verdict = topology.check(
        snapshot,
        tp_size=max(needed, candidate.tp),
        min_memory_gib_per_gpu=candidate.gpus.get("memory_gib", 0),
        allow_busy=allow_busy,
    )
    record.evidence.write_json(
        "busy.json",
        {"allow_busy": allow_busy, "ok": verdict.ok, "reason": verdict.reason, **verdict.measures},
    )
    assert verdict.ok, verdict.reason
