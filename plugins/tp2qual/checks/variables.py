"""Who reads each environment variable a launch sets: the engine (its registry, or its sources
naming it), another program the launch runs (NCCL, the hub client, CUDA, PyTorch, FlashInfer),
or nobody known. Said by ``--plan`` for every variable, the suite's own included.

Pure: the caller passes the engine's table (``engine_env.json``: its registry names and the
lines of its sources that name other programs' variables).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

# Variables other programs own, by prefix or name, and where each reads them.
OWNERS: tuple[tuple[str, str], ...] = (
    ("NCCL_", "NCCL (libnccl reads NCCL_* as a communicator initialises: NCCL's "
     "environment-variable documentation)"),
    ("HF_", "the Hugging Face hub client (huggingface_hub/constants.py)"),
    ("CUDA_DEVICE_ORDER", "the CUDA runtime (how it numbers the devices)"),
    ("CUDA_VISIBLE_DEVICES", "the CUDA runtime (which devices it shows)"),
    ("TORCH_CUDA_ARCH_LIST", "PyTorch's extension builder (torch/utils/cpp_extension.py), "
     "only when an extension is compiled"),
    ("FLASHINFER_CUDA_ARCH_LIST", "FlashInfer's JIT compiler, only when it compiles a kernel"),
    ("PYTORCH_CUDA_ALLOC_CONF", "PyTorch's CUDA caching allocator"),
    ("PYTORCH_ALLOC_CONF", "PyTorch's caching allocator"),
    ("OMP_", "the OpenMP runtime"),
)  # fmt: skip
# Paths in an engine's sources that are not its server's (an SGLang launch_server never runs
# sglang/multimodal_gen, and tests run nowhere).
_ASIDE = ("/test/", "/tests/", "multimodal_gen/", "collect_env.py")


def owner_of(name: str) -> str | None:
    return next((who for key, who in OWNERS if name == key or name.startswith(key)), None)


def readers(engine: str, version: str, env: Mapping[str, str], prefix: str | None,
            registry: Collection[str] | None,
            mentions: Mapping[str, Sequence[str]]) -> list[str]:  # fmt: skip
    """One line per variable: ``NAME=value: read by …``."""
    lines = []
    name_of_engine = f"{engine} {version}"
    for name in sorted(env):
        said = f"{name}={env[name]}: "
        if prefix and name.startswith(prefix):
            known = registry is not None and name in registry
            lines.append(said + (f"{name_of_engine} (its own variable)" if known else
                                 f"NOBODY: {name_of_engine} does not know it"))  # fmt: skip
            continue
        who = owner_of(name)
        named = list(mentions.get(name, ()))
        serving = [m for m in named if not any(a in m for a in _ASIDE)]
        parts = [who] if who else []
        if serving:
            parts.append(f"{name_of_engine} also names it ({', '.join(serving)})")
        elif named:
            parts.append(f"{name_of_engine} names it only outside its server ({', '.join(named)})")
        elif registry is not None:
            parts.append(f"{name_of_engine} never names it")
        if not who and not serving:
            parts.insert(0, "NOBODY known")
        lines.append(said + "; ".join(parts))
    return lines
