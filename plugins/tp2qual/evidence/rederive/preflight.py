"""Gate 00 (preflight): each check judged again from what preflight recorded.

* the model pin: ``identity/model.json`` (the digests found on disk) against the pin the run
  recorded at its start, by ``checks.preflight.judge_model_pin``; with ``--rehash`` the files it
  names are hashed again and must give the digests recorded (a Docker volume's in a helper
  container on the engine ``DOCKER_HOST`` names, as gate 00 read them);
* the image pin: ``identity/image.json`` by ``checks.preflight.judge_image_pin``;
* the engine check: the engine's recorded answer (``engine_check.json``) through
  ``checks.engine_answer.judge``; the launch it asked about must be the one that started
  (``launch.json``'s argv, both from one resolved launch: tp2qual/launch.py);
* the GPUs: ``topology.json`` (NVML's snapshot) with the candidate's ``[gpus]``, its TP size
  and the run's ``--allow-busy`` / ``--desktop-mib`` by ``checks.preflight.judge_gpus``;
  ``busy.json`` must be what that gives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tp2qual.artifacts.layout import sha256_of
from tp2qual.checks import content_address
from tp2qual.checks import preflight as checks
from tp2qual.checks.content_address import address_kind
from tp2qual.checks.engine_answer import judge as judge_engine_answer
from tp2qual.checks.verdict import NotJudged
from tp2qual.evidence.rederive.common import (
    RESOLVED_CANDIDATE,
    GateRun,
    Mismatch,
    Rederived,
    Unrederivable,
    as_recorded,
)
from tp2qual.serving import volume_snapshot

ENGINE_CHECK = "engine_check.json"  # gate 00's engine answer (tests/test_00_preflight.py)
LAUNCH = "launch.json"  # what the server started (serving/managed.py)
MODEL, IMAGE = "identity/model.json", "identity/image.json"
BUSY, TOPOLOGY = "busy.json", "topology.json"


def preflight(run: GateRun) -> Rederived:
    out = Rederived()
    _model_pin(run, out)
    _image_pin(run, out)
    _engine_check(run, out)
    _gpus(run, out)
    return out


def _model_pin(run: GateRun, out: Rederived) -> None:
    facts = run.json(MODEL)
    if facts is None:
        out.missing["test_model_pin_resolves"] = MODEL
        return
    pins = run.resolved.get("model") or {}
    pinned = str(pins.get("revision") or facts.get("requested_revision"))
    verdict = checks.judge_model_pin(facts, pinned, pins.get("draft_pin"))
    out.judged("test_model_pin_resolves", verdict, MODEL)
    if run.rehash:
        _rehash(facts, out, MODEL)
        if isinstance(facts.get("draft"), dict):
            _rehash(facts["draft"], out, f"{MODEL} draft")


def _rehash(facts: dict[str, Any], out: Rederived, where: str) -> None:
    """The model's bytes hashed again (no digest cache): each must give its recorded digest."""
    recorded: dict[str, tuple[str, str | None, Any]]
    if "file_sha256" in facts:
        file = str(facts.get("file"))
        recorded = {Path(file).name: (file, "sha256", facts["file_sha256"])}
    else:
        recorded = {
            str(f["file"]): (str(f["target"]), address_kind(str(f["blob"])), f["digest"])
            for f in facts.get("files") or []
            if f.get("digest")
        }
    now = _volume_digests(facts, recorded) if facts.get("volume") else None
    for name, (target, kind, digest) in recorded.items():
        path = Path(target)
        if now is not None:  # read again where it lives, by a helper on the engine
            again = now.get(name, "<not in the volume now>")
        else:
            again = _digest(path, kind) if path.is_file() else "<not on disk here>"
        out.read.append(f"{where} {name} re-hashed")
        if again != digest:
            out.mismatches.append(Mismatch(f"{where} {name}", f"{kind} of {target}", digest, again))


def _volume_digests(facts: dict[str, Any], files: dict[str, Any]) -> dict[str, str]:
    """Each file's digest read again in the volume; where the engine cannot read it here,
    each file's says why (and so differs from the recorded one)."""
    try:
        return volume_snapshot.rehash(facts)
    except volume_snapshot.VolumeUnreadable as exc:
        return dict.fromkeys(files, f"<not readable here: {exc}>")


def _digest(path: Path, kind: str | None) -> str:
    return content_address.file_git_sha1(str(path)) if kind == "git-sha1" else sha256_of(path)


def _image_pin(run: GateRun, out: Rederived) -> None:
    facts = run.json(IMAGE)
    if facts is None:
        out.missing["test_image_pin_matches"] = IMAGE
        return
    revision = str((run.resolved.get("model") or {}).get("revision") or "")
    out.judged("test_image_pin_matches", checks.judge_image_pin(facts, revision), IMAGE)


def _engine_check(run: GateRun, out: Rederived) -> None:
    """The engine's recorded answer judged again (a run whose engine was never asked has none)."""
    recorded = run.json(ENGINE_CHECK)
    if recorded is None:
        out.missing["test_engine_accepts_launch"] = ENGINE_CHECK
        return
    try:
        verdict = judge_engine_answer(recorded["answer"], platform=recorded["platform"])
    except (KeyError, TypeError, AttributeError) as exc:
        raise Unrederivable(f"{ENGINE_CHECK} does not hold an engine answer: {exc!r}") from None
    new = {"accepted": verdict.ok, **verdict.measures}
    out.records = 1  # the engine's answer to the launch: an exchange with the engine itself
    out.compare(ENGINE_CHECK, ENGINE_CHECK, recorded, **new)
    out.rows[ENGINE_CHECK] = [{**recorded, **new}]
    out.judged("test_engine_accepts_launch", verdict, ENGINE_CHECK)
    _asked_is_started(run, recorded, out)


def _asked_is_started(run: GateRun, recorded: dict[str, Any], out: Rederived) -> None:
    """The argv the engine approved is the argv that started (a run recorded before gate 00
    kept it, or one whose server never started, has nothing to compare)."""
    started = run.json(LAUNCH)
    if "launch_argv" not in recorded or not isinstance(started, dict) or "argv" not in started:
        return
    if recorded["launch_argv"] != started["argv"]:
        what = f"{ENGINE_CHECK} launch_argv (vs {LAUNCH} argv)"
        out.mismatches.append(
            Mismatch(ENGINE_CHECK, what, recorded["launch_argv"], started["argv"])
        )
    out.read.append(LAUNCH)


def _gpus(run: GateRun, out: Rederived) -> None:
    test = "test_gpus_fit_and_are_free"
    snapshot, recorded = run.json(TOPOLOGY), run.json(BUSY)
    options = run.resolved.get("options") or {}
    allow_busy = options.get("allow_busy", (recorded or {}).get("allow_busy", False))
    verdict = checks.judge_gpus(
        snapshot or {},
        run.resolved.get("gpus") or {},
        tp=int(run.resolved.get("tp") or 1),
        allow_busy=bool(allow_busy),
        desktop_mib=options.get("desktop_mib"),
    )
    if isinstance(verdict, NotJudged):  # no GPU needed: decided by the recorded settings
        out.judged(test, verdict, RESOLVED_CANDIDATE)
        return
    if snapshot is None or recorded is None:  # the gate did not get as far as its verdict
        out.missing[test] = TOPOLOGY if snapshot is None else BUSY
        return
    out.judged(test, verdict, f"{TOPOLOGY} ({BUSY})")
    new = as_recorded({"ok": verdict.ok, "reason": verdict.reason, **verdict.measures})
    out.compare(BUSY, BUSY, recorded, **new)
    out.rows[BUSY] = [{**recorded, **new}]
