"""The environment remedies a diagnosis names, as changes a re-run of the NCCL probe can apply.

Only remedies that live in the probe's own launch can be tried: NCCL and PyTorch environment
variables, and a container's IPC namespace. A remedy already in force is no remedy (the
diagnosis then says what to try next); a remedy outside the launch (remount /dev/shm, update a
driver) is reported, never tried. Pure: a diagnosis and the settings in force in, a plan out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tp2qual.checks.diagnosis import Diagnosis

# rule -> environment it asks for (None: unset the variable)
_ENV: dict[str, dict[str, str | None]] = {
    "cumem_cuda_999": {"NCCL_CUMEM_ENABLE": "0", "NCCL_CUMEM_HOST_ENABLE": "0"},
    "cuda_999": {"NCCL_CUMEM_ENABLE": "0", "NCCL_CUMEM_HOST_ENABLE": "0"},
    "p2p_failure": {"NCCL_P2P_DISABLE": "1"},
    "peer_mapping_711": {"NCCL_P2P_DISABLE": "1"},
    "bar_mapping_205": {"NCCL_P2P_DISABLE": "1"},
    "nvls_failure": {"NCCL_NVLS_ENABLE": "0"},
    "expandable_segments_alloc": {"PYTORCH_CUDA_ALLOC_CONF": None, "PYTORCH_ALLOC_CONF": None},
}


@dataclass(frozen=True)
class Remedy:
    rule: str
    env: dict[str, str | None] = field(default_factory=dict)  # None: unset
    container: dict[str, Any] = field(default_factory=dict)

    def words(self) -> str:
        parts = [f"{k}={v}" if v is not None else f"unset {k}" for k, v in self.env.items()]
        parts += ["--ipc=host" for k, v in self.container.items() if k == "ipc_host" and v]
        return ", ".join(parts)


def _env_changes(rule: str, env: Mapping[str, str]) -> dict[str, str | None]:
    wanted = _ENV.get(rule, {})
    return {
        key: value
        for key, value in wanted.items()
        if (value is None and key in env) or (value is not None and env.get(key) != value)
    }


def applicable(
    diagnosis: Diagnosis, env: Mapping[str, str], container: Mapping[str, Any] | None
) -> Remedy | None:
    """The first diagnosed failure whose remedy the probe's launch can apply and has not yet."""
    for finding in diagnosis.failures:
        if finding.rule == "shm_exhausted":
            if container is not None and not container.get("ipc_host"):
                return Remedy(finding.rule, container={"ipc_host": True})
            continue  # a process's /dev/shm is the host's: remounting it is the operator's call
        if changes := _env_changes(finding.rule, env):
            return Remedy(finding.rule, env=changes)
    return None
