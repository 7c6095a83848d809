"""Gate 00 on a hub snapshot in a Docker named volume: the bytes are read where they are.

Under Docker Desktop a volume lives inside Docker's own VM, so no host path reaches it. A helper
container on the candidate's engine reads it instead: the volume mounted read-only, network
``none``, no GPU, a read-only root, running ``checks/content_address.py`` and
``serving/volume_walk.py`` (stdlib only) in the image's own ``python3``. It prints per file the
blob its link resolves to and the blob's digest; the host judges that with gate 00's own
functions (``hub_snapshot.judged_snapshot``), exactly as a host path is judged.

The engine is the one the launcher uses (``docker_client``: ``DOCKER_HOST``, which ``--hosts``
binds per worker), so Docker Desktop, a Linux engine and a remote engine are read alike. A
sha256 digest is cached under ``volume:<engine id>:<volume>:<path inside>:<size>:<mtime ns>``,
the size and mtime as the helper sees them: a blob rewritten in place is hashed again.
"""

from __future__ import annotations

import inspect
import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from tp2qual.checks import content_address
from tp2qual.launch import RUN_LABEL, SESSION, SESSION_LABEL
from tp2qual.serving import volume_walk
from tp2qual.serving.hub_snapshot import (
    DigestCache,
    SnapshotMismatch,
    index_facts,
    judged_snapshot,
)
from tp2qual.serving.launchers.docker.engine import docker_client, engine_url, unavailable

MOUNT = "/hf"  # where the helper sees the volume
HELPER_LABEL = "tp2qual.volume-check"  # the helper's label: the volume it reads
HELPER_RUN = "gate-00-volume-check"  # its tp2qual.run label: it belongs to no one run
TIMEOUT_S = 3600.0  # ~500 GB of campaign weights hashed once at ~0.5 GB/s; cached afterwards
API_TIMEOUT_S = 60.0  # creating, starting, reading and removing the helper


class VolumeUnreadable(RuntimeError):
    """The helper could not read the volume: no engine, no volume, no image, a failed run."""


def script() -> str:
    """The helper's program: the content-address rule, then the walker that uses it."""
    return inspect.getsource(content_address) + "\n" + inspect.getsource(volume_walk)


def repo_dir(repo: str) -> str:
    return "models--" + repo.replace("/", "--")


def helper_kwargs(image: str, volume: str, ask: Mapping[str, Any]) -> dict[str, Any]:
    """``containers.create`` arguments of the narrow helper: it reads, and can do nothing else
    (no network, no GPU, nothing writable, the volume read-only)."""
    return {
        "image": image,
        "entrypoint": ["python3", "-I", "-c", script()],
        "command": [json.dumps(dict(ask))],
        "name": f"tp2qual-volume-check-{uuid.uuid4().hex[:12]}",
        "network_mode": "none",
        "read_only": True,
        "volumes": {volume: {"bind": MOUNT, "mode": "ro"}},
        # the run label (with the session's) lets a later session's sweep remove a helper
        # left behind when this process was killed mid-check
        "labels": {HELPER_LABEL: volume, RUN_LABEL: HELPER_RUN, SESSION_LABEL: SESSION},
    }


def cache_prefix(engine_id: str, volume: str) -> str:
    return f"volume:{engine_id}:{volume}:"


def read_volume(
    volume: str,
    ask: dict[str, Any],
    image: str,
    digests: DigestCache | None,
    timeout_s: float = TIMEOUT_S,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the walker on ``volume`` in ``image`` on the engine ``DOCKER_HOST`` names; ``ask``
    without ``known`` (taken from ``digests``: None hashes every blob). Returns the walker's
    report and how it ran; raises VolumeUnreadable saying why in one line."""
    import docker.errors
    import requests.exceptions

    if why := unavailable():  # asked first: a failed connect through docker-py leaks its socket
        raise VolumeUnreadable(f"volume {volume} cannot be read: gate 00 {why}")
    try:
        with docker_client(API_TIMEOUT_S) as client:
            return _run_helper(client, volume, ask, image, digests, timeout_s)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise VolumeUnreadable(
            f"the Docker engine at {engine_url()} could not read volume {volume} "
            f"in {image}: {_said(exc)}"
        ) from None


def _run_helper(
    client: Any,
    volume: str,
    ask: dict[str, Any],
    image: str,
    digests: DigestCache | None,
    timeout_s: float,
) -> tuple[dict[str, Any], dict[str, Any]]:
    import docker.errors

    engine_id = str(client.info().get("ID") or engine_url())
    try:
        client.volumes.get(volume)
    except docker.errors.NotFound:
        raise VolumeUnreadable(
            f"volume {volume} does not exist on the Docker engine at {engine_url()} "
            "(docker volume ls)"
        ) from None
    known = digests.known(cache_prefix(engine_id, volume)) if digests is not None else {}
    kwargs = helper_kwargs(image, volume, ask | {"root": MOUNT, "known": known})
    began = time.monotonic()
    container = client.containers.create(**kwargs)
    try:
        container.start()
        status = container.wait(timeout=timeout_s)
        out = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
    finally:
        container.remove(force=True)
    seconds = round(time.monotonic() - began, 3)
    if status.get("StatusCode") != 0:
        raise VolumeUnreadable(
            f"the helper in {image} exited {status.get('StatusCode')} reading volume "
            f"{volume}: {err.strip()[-400:] or out.strip()[-400:]}"
        )
    try:
        report = json.loads(out)
    except ValueError:
        raise VolumeUnreadable(f"the helper in {image} printed no JSON: {out[-400:]!r}") from None
    how = {"engine": engine_url(), "engine_id": engine_id, "helper_image": image,
           "helper_image_id": client.images.get(image).id, "seconds": seconds}  # fmt: skip
    return report, how


def _said(exc: BaseException) -> str:
    text = str(getattr(exc, "explanation", None) or exc).strip()
    return f"{type(exc).__name__}: {text[:300]}"


def volume_snapshot(
    volume: str,
    repo: str,
    revision: str,
    field: str,
    image: str,
    digests: DigestCache,
) -> dict[str, Any]:
    """The facts gate 00 judges for a snapshot in a volume, in the shape a host path gives
    (``hub_snapshot.check_snapshot``), plus ``volume``: which engine, helper and how long.
    Decides nothing but what was missing: the caller judges (``checks.preflight``)."""
    where = f"volume:{volume}:/{repo_dir(repo)}/snapshots/{revision}"
    ask = {"repo_dir": repo_dir(repo), "revision": revision}
    try:
        report, how = read_volume(volume, ask, image, digests)
    except VolumeUnreadable as exc:
        return {"snapshot": where, "missing": f"{field} {revision}: {exc}"}
    head = {"snapshot": where, "volume": {"name": volume, **how}}
    if not report.get("snapshot_dir"):
        held = report.get("revisions")
        return head | {
            "missing": f"{field} {revision} is not in volume {volume} (its "
            f"/{repo_dir(repo)}/snapshots holds {held if held is not None else 'nothing'}; "
            f"download {repo} --revision {revision} into the volume)"
        }
    files = [_entry(volume, f, digests, how["engine_id"]) for f in report.get("files") or []]
    facts = head | {"files": files, "index": index_facts(report.get("index_text"))}
    try:
        return {"resolved_revision": revision, **judged_snapshot(facts)}
    except SnapshotMismatch as exc:  # judged by the caller, from the facts
        return {"resolved_revision": revision, **exc.facts}


def _entry(
    volume: str, found: Mapping[str, Any], digests: DigestCache, engine_id: str
) -> dict[str, Any]:
    """One file's record as a host path's (``target`` named in the volume); a digest the
    helper computed is kept in the cache."""
    entry = {k: v for k, v in found.items() if k != "key"}
    entry["target"] = f"volume:{volume}:{found.get('target')}"
    if (
        found.get("key")
        and not found.get("cached")
        and found.get("address", "").startswith("sha256:")
    ):
        key = cache_prefix(engine_id, volume) + str(found["key"])
        digests.remember(key, str(found["digest"]), int(found.get("bytes") or 0))
    elif found.get("cached"):
        digests.hits += 1
    return entry


def rehash(facts: Mapping[str, Any]) -> dict[str, str]:
    """``verify --rehash`` of a volume snapshot: every blob hashed again by a helper (no
    digest cache) from the image the run used, on the engine ``DOCKER_HOST`` names now.
    Returns each file's digest; raises VolumeUnreadable."""
    volume = dict(facts.get("volume") or {})
    snapshot = str(facts.get("snapshot") or "")
    _, _, path = snapshot.partition(f"volume:{volume.get('name')}:/")
    repo, _, revision = path.partition("/snapshots/")
    image = str(volume.get("helper_image_id") or volume.get("helper_image"))
    ask = {"repo_dir": repo, "revision": revision}
    report, _ = read_volume(str(volume.get("name")), ask, image, None)
    return {str(f["file"]): str(f.get("digest")) for f in report.get("files") or []}
