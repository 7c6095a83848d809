"""Gate 00's decisions, each a pure function of what preflight recorded.

The gate and ``verify`` call the same functions: the gate on the facts it has just gathered
(the model's digests, the image's id, NVML's snapshot), ``verify`` on the records the gate
wrote (``identity/model.json``, ``identity/image.json``, ``topology.json``) with the settings
the run recorded at its start. Gathering (hashing, NVML, Docker) lives in ``serving``; here
only the decision, so a record can be judged again anywhere.

A model's facts say what preflight found on disk: a local file's sha256, or a hub snapshot's
files, each with the blob its link resolves to and the digest of the blob's bytes, and the
shards the index names; where nothing was found, ``missing`` says what was looked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tp2qual.checks import topology
from tp2qual.checks.content_address import address_kind
from tp2qual.checks.verdict import NotJudged, Verdict

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")
INDEX = "model.safetensors.index.json"


def file_problem(entry: Mapping[str, Any]) -> str | None:
    """What is wrong with one snapshot file's record, or None: its link must resolve to a blob
    on disk under ``blobs/`` whose name is a content address its bytes hash to."""
    rel = entry.get("file")
    if not entry.get("on_disk"):
        return f"{rel} points at {entry.get('target')}, which is not on disk"
    if not entry.get("in_blobs"):
        return f"{rel} is not a link into the cache's blobs/: its content address is unknown"
    blob = str(entry.get("blob"))
    if address_kind(blob) is None:
        return f"{rel}: blob name {blob!r} is not a content address"
    if entry.get("digest") != blob:
        return (
            f"{rel}: blob {blob} holds bytes whose digest is {entry.get('digest')}: "
            "not the pinned revision's"
        )
    return None


def snapshot_problem(facts: Mapping[str, Any]) -> str | None:
    """The problems of a snapshot's record: every file's recorded problem (a host path's record
    stops at the first; a volume's holds every file), else the shards' problem; or None."""
    files = list(facts.get("files") or [])
    if not files:
        return f"{facts.get('snapshot')} holds no files: no pinned bytes to prove"
    if problems := [p for entry in files if (p := file_problem(entry))]:
        return "; ".join(problems)
    return shard_problem(facts, [str(f.get("file")) for f in files])


def shard_problem(facts: Mapping[str, Any], files: list[str]) -> str | None:
    """The shards present against those the index names (``index``: what the gate read)."""
    present = {f for f in files if f.endswith(".safetensors")}
    index = facts.get("index") or {}
    if not index.get("present"):
        if not present and not any(f.endswith(WEIGHT_SUFFIXES[1:]) for f in files):
            return f"{facts.get('snapshot')} holds no weight file"
        return None
    if index.get("error") is not None:
        return f"{INDEX} has no weight_map: {index['error']}"
    named = set(index.get("shards") or [])
    if missing := sorted(named - present):
        return f"the index names shards not in the snapshot: {missing}"
    if extra := sorted(present - named):
        return f"shards in the snapshot the index does not name: {extra}"
    return None


def snapshot_addresses(files: list[Mapping[str, Any]]) -> dict[str, str]:
    """Each proven file's content address, ``sha256:<hex>`` or ``git-sha1:<hex>``."""
    return {str(f["file"]): f"{address_kind(str(f['blob']))}:{f['digest']}" for f in files}


def local_file_problem(facts: Mapping[str, Any], pinned: str) -> str | None:
    """A local file pinned as ``<kind>:<sha256>`` must hash to exactly that."""
    if ":" not in pinned:
        return None
    kind = pinned.partition(":")[0]
    if pinned == f"{kind}:{facts.get('file_sha256')}":
        return None
    cached = " (digest from the cache)" if facts.get("file_sha256_cached") else ""
    return f"model.revision pins {pinned} but {facts.get('file')} has sha256 " + (
        f"{facts.get('file_sha256')}{cached}"
    )


def model_problem(facts: Mapping[str, Any], pinned: str, field: str) -> str | None:
    """The first problem of one model's (or draft's) record against its pin, or None."""
    if facts.get("missing"):
        return str(facts["missing"])
    if "file_sha256" in facts:
        return local_file_problem(facts, pinned)
    if facts.get("resolved_revision") != pinned:
        return f"{field} pins {pinned} but the snapshot read is {facts.get('resolved_revision')}"
    if problem := snapshot_problem(facts):
        return f"{field} {pinned}: {problem}"
    return None


def judge_model_pin(
    facts: Mapping[str, Any], pinned: str, draft_pinned: str | None = None
) -> Verdict:
    """Gate 00's model pin: the bytes preflight found are exactly the pinned ones (a local file
    by its sha256; a hub snapshot file by file against its content addresses, and its shards
    against the index), a speculative draft's the same way."""
    if facts.get("requested_revision") not in (None, pinned):
        return Verdict.failed(
            f"the record was made for revision {facts.get('requested_revision')}, the run "
            f"pinned {pinned}"
        )
    problem = model_problem(facts, pinned, "model.revision")
    draft = facts.get("draft")
    if problem is None and draft is not None:
        draft_pin = str(draft_pinned or draft.get("pin"))
        problem = model_problem(draft, draft_pin, "model.draft.revision")
    if problem:
        return Verdict.failed(problem)
    addresses = dict(facts.get("content_addresses") or {})
    return Verdict.passed(content_addresses=addresses)


def image_matches(attrs: Mapping[str, Any], pin: str) -> bool:
    """A pin is the image id (local build) or the digest in one of its RepoDigests."""
    return attrs.get("Id") == pin or any(
        d.rpartition("@")[2] == pin for d in attrs.get("RepoDigests") or []
    )


def model_label_problem(image_id: str, baked: str | None, revision: str) -> str | None:
    """An image that says which GGUF it carries (label ``tp2qual.model.sha256``) must carry
    the pinned one."""
    if baked and revision.startswith("gguf-sha256:") and revision != f"gguf-sha256:{baked}":
        return (
            f"model.revision pins {revision} but image {image_id} carries a GGUF with sha256 "
            f"{baked}"
        )
    return None


def judge_image_pin(facts: Mapping[str, Any], model_revision: str) -> Verdict:
    """A container's local image is the pinned one (``image_matches``) and carries the pinned
    model where its label names one. ``facts``: what ``identity/image.json`` records."""
    pin = (facts.get("pin") or {}).get("value")
    if not pin:
        pin_facts = facts.get("pin") or {}
        return Verdict.failed(
            f"pin {pin_facts.get('raw')} is unresolved ({pin_facts.get('source')})"
        )
    image_id = facts.get("image_id")
    if image_id is None:
        return Verdict.failed(f"no local image is pinned {pin}")
    attrs = {"Id": image_id, "RepoDigests": facts.get("repo_digests")}
    if not image_matches(attrs, pin):
        return Verdict.failed(
            f"image pinned to {pin} but the local image is {image_id} with RepoDigests "
            f"{facts.get('repo_digests') or []}"
        )
    if problem := model_label_problem(image_id, facts.get("model_label"), model_revision):
        return Verdict.failed(problem)
    return Verdict.passed(image_id=image_id)


def gpus_refusal(reason: str) -> str:
    """What the suite says when this host cannot give the candidate its GPUs now (a suite
    ERROR, never the candidate's FAIL): what, and what to do."""
    return (
        f"this host cannot run the candidate now: {reason}. Not the candidate's fault: NVML "
        "needs a driver and nvidia-ml-py, [gpus] its count and memory, busy GPUs their serve "
        "stopped or handed over (or --allow-busy, recorded); then run it again"
    )


def judge_gpus(
    snapshot: Mapping[str, Any],
    gpus: Mapping[str, Any],
    *,
    tp: int,
    allow_busy: bool,
    desktop_mib: float | None,
) -> Verdict | NotJudged:
    """Enough GPUs with enough memory, none busy (``checks.topology.check``) for a candidate
    with ``[gpus]`` as given; one that needs no GPU is not judged."""
    needed = int(gpus.get("count", 0) or 0)
    if not needed:
        return NotJudged("the candidate needs no GPU (topology recorded as found)")
    return topology.check(
        snapshot,
        tp_size=max(needed, tp),
        min_memory_gib_per_gpu=gpus.get("memory_gib", 0),
        allow_busy=allow_busy,
        desktop_mib=max(desktop_mib or 0, gpus.get("desktop_mib", 0)) or None,
    )
