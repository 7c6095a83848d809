"""Gate 00 — preflight, before anything starts.

Pass means: the model the candidate pins resolves to exactly the pinned bytes — a local file by its
sha256, a hub snapshot file by file: each resolves to a blob whose digest is its name (sha256 for
LFS files, the git blob id for small ones) and the shards are those the index names; a
speculative draft (``[model.draft]``) the same way, at a resolved 40-hex revision; a
container candidate's local image matches its pinned digest or image id (never pulled unless
``--pull``); for a GPU candidate, NVML shows at least TP-size GPUs with the memory the candidate
needs, none busy with another serve — no compute process, no running container holding GPUs, no
memory held beyond what explains it (``--allow-busy`` overrides, recorded); a busy GPU's holders
are named as far as Docker (under WSL2 the only witness) and NVML can see them, with how to hand
them over (``--hand-over``, hooks/handover.py). A GPU that drives a
display may hold the desktop's memory (under WSL2 NVML counts the Windows desktop's): with the
display active, no compute process and no more than a desktop's typical figure (raised by
``[gpus] desktop_mib`` or ``--desktop-mib``) it is the desktop's, said in the claim
``gpu_memory_held_by``, not a busy GPU. WSL2 and the topology (names, UUIDs, PCIe, NVLink, P2P
status) are recorded; the engine's own argument parser and environment registry accept the exact
launch (run in the engine's Python or the pinned image, never starting the server: an unknown
flag, a rejected value or a variable the engine lacks fails in the engine's words; a variable it
ignores here is a notice); the attention backend serves the KV-cache dtype asked for on the
GPUs' compute capability, by the engine module's table of its pinned source (else refused,
naming the source lines and what would work). A host that cannot give the candidate its GPUs
now (NVML missing, too few or too small, busy) or lacks its pinned image (not present, or the
``--pull`` failed) is the suite's ERROR with what to do, never the candidate's FAIL.
Artifacts: ``identity/model.json``, ``identity/image.json``, ``engine_check.json``,
``kv_support.json``, ``topology.json``, ``busy.json``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tp2qual.checks import preflight
from tp2qual.checks.verdict import NotJudged
from tp2qual.exceptions import GpusUnavailable, PinMismatch
from tp2qual.gates import Candidate, CandidateRecord, Claimer
from tp2qual.launch import ResolvedLaunch

pytestmark = pytest.mark.preflight

IMAGE, BUSY = "identity/image.json", "busy.json"  # judged again by verify (rederive/preflight.py)


def test_model_pin_resolves(model_pin: dict[str, Any], claim: Claimer) -> None:
    # model_pin raised PinMismatch, naming the file and pin, if the bytes are not the pinned
    # ones (checks.preflight.judge_model_pin), and recorded what it found in identity/model.json
    assert model_pin["content_addresses"], "no model file proven"
    claim("content_addresses", "identity/model.json", op="field", path="content_addresses")
    if "draft" in model_pin:  # a speculative lane's draft, proven as the model is
        assert model_pin["draft"]["content_addresses"], "no draft file proven"
        claim(
            "draft_content_addresses",
            "identity/model.json",
            op="field",
            path="draft.content_addresses",
        )


def test_image_pin_matches(candidate: Candidate, record: CandidateRecord, claim: Claimer) -> None:
    if candidate.launcher_kind != "docker":
        pytest.skip("not a container candidate")
    from tp2qual.serving.launchers.docker.launcher import DockerLauncher

    launcher = DockerLauncher(
        candidate,
        record.evidence.path("preflight-image.log"),
        record.evidence.redactor,
        run_id=record.run_id,
    )
    try:
        facts = launcher.verify_image()  # PinMismatch names image, pin and what was found
    except PinMismatch as exc:
        if exc.facts is not None:  # what was found, for verify to judge again
            record.evidence.write_json(IMAGE, exc.facts)
        raise
    record.identity["image"] = facts  # matched by checks.preflight.judge_image_pin's rules
    record.evidence.write_json(IMAGE, facts)
    claim("image_id", IMAGE, op="field", path="image_id")


def test_engine_accepts_launch(
    candidate: Candidate, record: CandidateRecord, launch: ResolvedLaunch, claim: Claimer
) -> None:
    """The engine's own parser and variable registry, asked about the resolved launch the
    server will start (the same value: tp2qual.launch), in its venv or its pinned image."""
    from tp2qual.checks.engine_answer import judge
    from tp2qual.serving import engine_check

    asked = engine_check.question(candidate, launch)
    if asked is None:
        pytest.skip(engine_check.not_asked(launch))
    image = None
    if candidate.launcher_kind == "docker":  # run in exactly the image the pin check proved
        image = (record.identity.get("image") or {}).get("image_id")
        if not image:
            pytest.skip("the image pin is not verified: no image to ask the engine in")
    run = engine_check.ask_engine(launch, asked, image=image)
    record.evidence.write_text("engine_check.log", run.output)
    if run.answer is None:  # the check itself broke: the suite's fault, not the candidate's
        raise RuntimeError(
            f"the engine check printed no answer (exit {run.returncode} after {run.seconds} s; "
            f"engine_check.log): {run.output[-800:]}"
        )
    answer = engine_check.with_fallback(candidate, run.answer)
    platform = engine_check.platform_of(candidate)
    verdict = judge(answer, platform=platform)
    record.evidence.write_json(
        engine_check.ARTIFACT,
        {"argv": engine_check.check_argv(launch, asked.redacted(record.evidence.redactor),
                                         image=image),
         "launch_argv": record.evidence.redactor.argv(list(launch.argv)),
         "seconds": run.seconds,
         "platform": platform, "answer": answer, "accepted": verdict.ok, **verdict.measures},
    )  # fmt: skip
    claim("engine_accepts_launch", engine_check.ARTIFACT, op="field", path="accepted")
    claim("engine_notices", engine_check.ARTIFACT, op="field", path="notices")
    assert verdict.ok, verdict.reason


def test_engine_serves_the_kv_cache_on_these_gpus(
    candidate: Candidate,
    record: CandidateRecord,
    gpu_snapshot: dict[str, Any],
    launch: ResolvedLaunch,
    claim: Claimer,
) -> None:
    """The attention backend and KV-cache dtype asked for, against the engine module's table
    (each row its pinned source's file:line) at every compute capability NVML shows: a
    combination the engine's source refuses is refused here, before the server starts."""
    from tp2qual.settings_plan import kv_verdict

    if not candidate.gpus.get("count"):
        pytest.skip("the candidate needs no GPU: no compute capability to judge against")
    seen = sorted({tuple(g["compute_capability"]) for g in gpu_snapshot.get("gpus", [])
                   if g.get("compute_capability")})  # fmt: skip
    verdicts = [kv_verdict(candidate, launch, (c[0], c[1]), "NVML") for c in seen] or [
        kv_verdict(candidate, launch, None, "NVML read no compute capability")
    ]
    record.evidence.write_json("kv_support.json", {
        "ok": all(v.ok for v in verdicts),
        "verdicts": [{"ok": v.ok, "reason": v.reason, **v.measures} for v in verdicts],
    })  # fmt: skip
    claim("kv_support", "kv_support.json", op="field", path="ok")
    refused = [v.reason for v in verdicts if not v.ok]
    assert not refused, "; ".join(refused)


def test_gpus_fit_and_are_free(
    candidate: Candidate,
    record: CandidateRecord,
    gpu_snapshot: dict[str, Any],
    allow_busy: bool,
    desktop_mib: float | None,
    claim: Claimer,
) -> None:
    verdict = preflight.judge_gpus(
        gpu_snapshot, candidate.gpus, tp=candidate.tp, allow_busy=allow_busy,
        desktop_mib=desktop_mib,
    )  # fmt: skip
    if isinstance(verdict, NotJudged):
        pytest.skip(verdict.reason)
    record.evidence.write_json(
        BUSY,
        {"allow_busy": allow_busy, "ok": verdict.ok, "reason": verdict.reason, **verdict.measures},
    )
    if not verdict.ok:  # the host's state, which says nothing about the candidate: ERROR
        raise GpusUnavailable(preflight.gpus_refusal(verdict.reason), candidate=candidate.name)
    claim("gpu_memory_held_by", BUSY, op="field", path="memory_held_by")
