"""Identity facts: which model bytes and which engine build a finding is about.

``model_identity`` checks the pins *before* anything starts (a wrong file or revision is one
clear error): a local file by its sha256, a hub snapshot file by file against the content
addresses the cache names its blobs by (``hub_snapshot``), and a speculative draft's snapshot the
same way; a cache in a Docker volume (``model.hf_cache = "volume:<name>"``) is read where it
lives, by a helper container (``volume_snapshot``). Digests are cached across runs by (device,
inode, size, mtime), a volume's by its own key, and the facts say how many came from that cache.
``engine_identity`` asks the running server what it is.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tp2qual.candidate import Candidate, cache_dir
from tp2qual.checks import preflight
from tp2qual.checks.replies import excerpt
from tp2qual.draft import draft_pin
from tp2qual.engines import engine_for
from tp2qual.exceptions import LookupTimedOut, PinMismatch
from tp2qual.gpu import host_info
from tp2qual.image_ref import image_reference
from tp2qual.model_cache import cache_volume
from tp2qual.serving.hub_snapshot import DigestCache, SnapshotMismatch, check_snapshot
from tp2qual.serving.launchers.docker.pins import resolve_pin
from tp2qual.serving.volume_snapshot import volume_snapshot

DIGESTS = "digests.json"  # under the tp2qual cache: sha256 by (device, inode, size, mtime)
VERSION_TIMEOUT_S = 5.0  # the engine's version look-up: a control request, it generates nothing
PACKAGE_TIMEOUT_S = 30.0  # the engine's Python asked for its package's version (an import)


def model_identity(candidate: Candidate) -> dict[str, Any]:
    """Resolve the model the candidate pins and prove it is the pinned one (PinMismatch, with
    the facts found, when it is not: gate 00 records them, ``verify`` judges them again)."""
    facts = model_facts(candidate)
    draft = candidate.model.get("draft")
    verdict = preflight.judge_model_pin(
        facts, candidate.model["revision"], (facts.get("draft") or {}).get("pin") if draft else None
    )
    if not verdict.ok:
        raise PinMismatch(verdict.reason, candidate=candidate.name, facts=facts)
    return facts


def model_facts(candidate: Candidate) -> dict[str, Any]:
    """What preflight finds of the model the candidate pins (and its draft): digests of the
    bytes on disk, or ``missing`` saying what was not there. Decides nothing."""
    model = candidate.model
    pinned = model["revision"]
    facts: dict[str, Any] = {
        "repo": model["repo"],
        "requested_revision": pinned,
        "served_name": candidate.served_name,
        "quantization": model.get("quantization"),
    }
    digests = DigestCache.load(cache_dir() / DIGESTS)
    path = candidate.model_file()
    if path is None:
        facts |= hf_snapshot(candidate, digests)
    elif not path.is_file():
        facts |= {"file": str(path), "missing": f"model.file: {path} does not exist"}
    else:
        digest, cached = digests.sha256(path)
        kind = pinned.partition(":")[0] if ":" in pinned else "sha256"  # gguf-sha256 or sha256
        facts.update(
            file=str(path),
            file_sha256=digest,
            file_sha256_cached=cached,
            file_bytes=path.stat().st_size,
            resolved_revision=f"{kind}:{digest}",
            content_addresses={path.name: f"sha256:{digest}"},
        )
    if (draft := draft_facts(candidate, digests)) is not None:
        facts["draft"] = draft
    digests.save()
    return facts | {"digests_cached": digests.hits, "digests_hashed": digests.hashed}


def hf_snapshot(candidate: Candidate, digests: DigestCache) -> dict[str, Any]:
    """The Hugging Face cache snapshot the engine will load, when the cache is local, read
    file by file with the content addresses of its blobs."""
    model = candidate.model
    return _snapshot(candidate, model["repo"], model["revision"], "model.revision", digests)


def draft_identity(candidate: Candidate, digests: DigestCache) -> dict[str, Any] | None:
    """The speculative draft (``[model.draft]``), proven exactly as the model's snapshot is; an
    unresolved revision is refused: the engine would load whatever the cache's main is."""
    facts = draft_facts(candidate, digests)
    if facts is None:
        return None
    if problem := preflight.model_problem(facts, str(facts["pin"]), "model.draft.revision"):
        raise PinMismatch(problem, candidate=candidate.name, facts=facts)
    return facts


def draft_facts(candidate: Candidate, digests: DigestCache) -> dict[str, Any] | None:
    """What preflight finds of the speculative draft; ``missing`` when its pin is unresolved."""
    draft = candidate.model.get("draft")
    if draft is None:
        return None
    pin = draft_pin(draft, candidate.path, candidate.name)
    head = {"repo": draft["repo"], "requested_revision": pin.raw, "pin_source": pin.source}
    if pin.value is None:
        how = draft.get("how_to_pin")
        missing = (
            f"model.draft.revision {pin.raw} is unresolved ({pin.source}): the draft "
            f"{draft['repo']} is not pinned" + (f"; {how}" if how else "")
        )
        return head | {"pin": None, "missing": missing}
    facts = _snapshot(candidate, draft["repo"], pin.value, "model.draft.revision", digests)
    return head | {"pin": pin.value} | facts


def _snapshot(
    candidate: Candidate, repo: str, revision: str, field: str, digests: DigestCache
) -> dict[str, Any]:
    cache = candidate.model.get("hf_cache") or os.environ.get("HF_HUB_CACHE", "")
    if not cache:
        return {
            "missing": "model.hf_cache: no local Hugging Face cache named (nor HF_HUB_CACHE set), "
            "so the pinned revision cannot be resolved before the start"
        }
    if (volume := cache_volume(cache)) is not None:  # read where it lives: a helper container
        image = volume_helper_image(candidate)
        return volume_snapshot(volume, repo, revision, field, image, digests)
    repo_dir = Path(cache).expanduser() / ("models--" + repo.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / revision
    if not snapshot.is_dir():
        return {
            "snapshot": str(snapshot),
            "missing": f"{field} {revision} is not in the cache at {repo_dir} "
            f"(hf download {repo} --revision {revision} --cache-dir {cache})",
        }
    try:
        checked = check_snapshot(snapshot, digests)
    except SnapshotMismatch as exc:  # judged by the caller, from the facts
        checked = exc.facts
    return {"resolved_revision": snapshot.name, **checked}


def volume_helper_image(candidate: Candidate) -> str:
    """The image gate 00 reads a volume cache in: ``launch.docker.volume_helper_image``, else
    the candidate's own pinned image (it has the engine's python3)."""
    docker = candidate.launch.get("docker") or {}
    if helper := docker.get("volume_helper_image"):
        return str(helper)
    return image_reference(docker["image"], resolve_pin(candidate).value)


def engine_identity(
    candidate: Candidate, base_url: str, launch: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Ask the engine what it is; for llama.cpp (no version endpoint) use the package installed
    in the Python the engine runs under (``launch.python``), or the version label our local
    image carries. A look-up that times out is the suite's ``LookupTimedOut``: the version is
    unknown, not wrong, so it is never the candidate's FAIL."""
    facts: dict[str, Any] = {
        "kind": candidate.engine,
        "chat_format": candidate.spec["engine"].get("chat_format"),
    }
    paths = engine_for(candidate.engine).identity_paths  # tried in order; a 404 tries the next
    for path in paths:
        found = _ask_version(candidate, base_url, path)
        if found is None:
            continue
        if "version_error" in found:
            facts["version_error"] = found["version_error"]
            continue
        facts.update(found)
        facts.pop("version_error", None)
        break
    if paths:
        return facts
    package = engine_for(candidate.engine).python_package  # an engine served from its package
    if candidate.launcher_kind == "process" and package is not None:
        facts["version"], facts["version_source"] = _engine_package_version(candidate, package[1])
    else:
        labels = (launch or {}).get("image_labels") or {}
        facts["version"] = labels.get("tp2qual.engine.version")
    return facts


def _ask_version(candidate: Candidate, base_url: str, path: str) -> dict[str, Any] | None:
    """What ``GET path`` says the engine is (None: a 404, try the next path)."""
    try:
        response = httpx.get(base_url + path, timeout=VERSION_TIMEOUT_S, trust_env=False)
    except httpx.TimeoutException:
        raise LookupTimedOut(
            f"GET {path} did not answer within {VERSION_TIMEOUT_S:g} s: the engine's version is "
            "unknown (the suite's own look-up, not a statement about the candidate)",
            candidate=candidate.name,
        ) from None
    except httpx.HTTPError as exc:
        return {"version_error": f"GET {path}: {exc!r}"}
    if response.status_code == 404:
        return None
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code != 200 or not isinstance(body, dict):
        said = excerpt(body if body is not None else response.text)
        return {"version_error": f"GET {path}: HTTP {response.status_code}: {said}"}
    return {"version": body.get("version"), "server_info": body, "version_source": path}


PACKAGE_VERSION = (  # run in the engine's own Python: its installed copy, not the suite's
    "import importlib.metadata as m, sys\n"
    "try:\n    print(m.version(sys.argv[1]))\n"
    "except m.PackageNotFoundError:\n    pass\n"
)


def _engine_package_version(candidate: Candidate, package: str) -> tuple[str | None, str]:
    """The engine's package version (``Engine.python_package``: llama-cpp-python) as installed
    in the Python the candidate's engine runs under (``launch.python``, else the suite's own)."""
    python = candidate.python()
    if python == Path(sys.executable):
        return _package_version(package), "the suite's Python"
    try:
        done = subprocess.run(
            [str(python), "-c", PACKAGE_VERSION, package],
            capture_output=True,
            text=True,
            timeout=PACKAGE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise LookupTimedOut(
            f"{python} did not say its {package} version within {PACKAGE_TIMEOUT_S:g} s",
            candidate=candidate.name,
        ) from None
    return done.stdout.strip() or None, f"launch.python ({python})"


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def host_identity() -> dict[str, Any]:
    """Host facts (the same reader the topology snapshot uses) plus Python and packages."""
    packages = [
        "pytest",
        "openai",
        "httpx",
        "jsonschema",
        "docker",
        "nvidia-ml-py",
        "llama-cpp-python",
        "tp2qual",
    ]
    return host_info() | {
        "python": sys.version.split()[0],
        "packages": {p: _package_version(p) for p in packages},
    }


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str)
