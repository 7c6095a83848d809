"""Gate 00 — preflight, before anything starts.

Pass means: the model the candidate pins resolves to exactly the pinned bytes or revision; a
container candidate's local image matches its pinned digest or image id (never pulled unless
``--pull``); for a GPU candidate, NVML shows at least TP-size GPUs with the memory the candidate
needs, none busy with another serve — no compute process, no running container holding GPUs
(``--allow-busy`` overrides, recorded); WSL2 and the topology (names, UUIDs, PCIe, NVLink, P2P
status) are recorded. Artifacts: ``identity/model.json``, ``identity/image.json``,
``topology.json``, ``busy.json``.
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


def test_image_pin_matches(candidate, record, claim):
    if candidate.launcher_kind != "docker":
        pytest.skip("not a container candidate")
    from tp2qual.docker_launcher import DockerLauncher

    launcher = DockerLauncher(
        candidate,
        record.evidence.path("preflight-image.log"),
        record.evidence.redactor,
        run_id=record.run_id,
    )
    facts = launcher.verify_image()  # raises PinMismatch naming image, pin and what was found
    record.identity["image"] = facts
    record.evidence.write_json("identity/image.json", facts)
    claim("image_id", "identity/image.json", op="field", path="image_id")


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
