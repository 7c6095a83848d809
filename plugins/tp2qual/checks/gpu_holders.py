"""Who holds the GPUs, from what Docker and NVML say: pure, an inspect dict or a holder in, words
out.

Under WSL2 NVML lists no process on a GPU, not even a serve's, so a busy GPU there can only be
named from the Docker engine: a container whose device requests take GPUs (``--gpus``), runs
with the nvidia runtime, or maps ``/dev/nvidia*``. The Docker read itself is
``serving/launchers/docker/sweep.py`` ``gpu_holders``; here only the judging and the sentences.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Where the user names serves to hand over (hooks/handover.py, the candidate file's [handover]).
HAND_OVER_HOW = (
    "hand it over (--hand-over NAME, or [handover] containers in the campaign's shared file):"
    " stopped before the first candidate, started again after the last"
)
COMPOSE_PROJECT = "com.docker.compose.project"


def gpu_claim(host_config: Mapping[str, Any]) -> list[str]:
    """How a container's HostConfig takes GPUs (empty: it takes none)."""
    how = []
    for request in host_config.get("DeviceRequests") or []:
        caps = [c for group in request.get("Capabilities") or [] for c in group or []]
        # --gpus asks for capability "gpu"; a request naming no capability and no driver is
        # read as one too: the one device driver Docker ships requests for is NVIDIA's.
        if (
            "gpu" in caps
            or request.get("Driver") == "nvidia"
            or not (caps or request.get("Driver"))
        ):
            ids = request.get("DeviceIDs") or []
            count = request.get("Count")
            what = (
                f"GPUs {','.join(ids)}"
                if ids
                else ("all GPUs" if count == -1 else f"{count} GPU(s)")
            )
            how.append(f"device request: {what}")
    if host_config.get("Runtime") == "nvidia":
        how.append("nvidia runtime")
    if any("nvidia" in (d.get("PathOnHost") or "") for d in host_config.get("Devices") or []):
        how.append("/dev/nvidia* devices")
    return how


def holder_of(attrs: Mapping[str, Any]) -> dict[str, Any] | None:
    """One container's inspect JSON -> a holder record, or None when it takes no GPU."""
    host = attrs.get("HostConfig") or {}
    how = gpu_claim(host)
    if not how:
        return None
    config = attrs.get("Config") or {}
    labels = dict(config.get("Labels") or {})
    return {
        "name": str(attrs.get("Name") or "").lstrip("/"),
        "id": str(attrs.get("Id") or "")[:12],
        "image": config.get("Image"),
        "status": (attrs.get("State") or {}).get("Status"),
        "compose_project": labels.get(COMPOSE_PROJECT),
        "labels": labels,
        "how": how,
        "device_ids": [
            i for r in host.get("DeviceRequests") or [] for i in r.get("DeviceIDs") or []
        ],
    }


def holds_gpu(holder: Mapping[str, Any], gpu: Mapping[str, Any]) -> bool:
    """A holder takes this GPU: it named it (index or UUID) or asked for GPUs without naming."""
    ids = holder.get("device_ids") or []
    return not ids or str(gpu.get("index")) in ids or gpu.get("uuid") in ids


def describe(holder: Mapping[str, Any]) -> str:
    """``container llm-primary (image vllm/x:1, compose project anvil, labels a=b; all GPUs)``."""
    parts = [f"image {holder.get('image')}"]
    if holder.get("compose_project"):
        parts.append(f"compose project {holder['compose_project']}")
    labels = {
        k: v for k, v in (holder.get("labels") or {}).items() if not k.startswith("com.docker.")
    }
    if labels:
        parts.append("labels " + ", ".join(f"{k}={v}" for k, v in sorted(labels.items())))
    status = holder.get("status")
    state = "" if status == "running" else f", {status}"
    return f"container {holder.get('name')} ({'; '.join(parts)}; {', '.join(holder['how'])}{state})"


def holders_sentence(gpu: Mapping[str, Any], holders: list[Mapping[str, Any]]) -> str:
    """Who holds this GPU, as far as Docker and NVML can tell, and how to hand it over."""
    seen = [describe(h) for h in holders if h.get("status") == "running" and holds_gpu(h, gpu)]
    if not seen:
        return ""
    return "held by " + "; ".join(seen) + f" -> {HAND_OVER_HOW}"
