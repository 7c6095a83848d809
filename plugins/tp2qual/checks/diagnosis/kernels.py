"""Rules for kernels the GPU cannot run: no kernel image for its compute capability (a torch,
engine or attention library built without it), a Triton kernel ptxas cannot compile for it, a
kernel asking for more shared memory per block than the GPU has, a kernel shipped without its
tuned config for this GPU. Each quotes the engine's line; remedies skip what is already set."""

from __future__ import annotations

import re

from tp2qual.checks.diagnosis.model import Context, Finding, evidence_of

_NO_IMAGE = re.compile(r"no kernel image is available for execution on the device")
_TORCH_ARCH = re.compile(
    r"with CUDA capability (?P<sm>sm_\d+) is not compatible with the current PyTorch"
)
_TORCH_SUPPORTS = re.compile(r"current PyTorch install supports CUDA capabilities (?P<list>.+)")
_BACKEND_ARCH = re.compile(
    r"(?P<what>FA3|FA4|FlashAttention\w*|FlashInfer|flashinfer|Cutlass|CUTLASS)\b[^\n]{0,80}?"
    r"(?:only supports|is only supported on|not supported on|does not support|requires)"
    r"[^\n]{0,60}?(?:Hopper|Blackwell|compute capability|sm_?\d+|SM ?\d+|GPUs)"
)


def _sm(ctx: Context) -> str | None:
    for ln in ctx.grep(_TORCH_ARCH):
        m = _TORCH_ARCH.search(ln.text)
        if m:
            return m["sm"]
    m = next(
        (re.search(r"\bsm_?(\d{2,3})a?\b", ln.text) for ln in ctx.lines if "sm_" in ln.text), None
    )
    return f"sm_{m.group(1)}" if m else None


def rule_arch_unsupported(ctx: Context) -> list[Finding]:
    torch_arch = ctx.grep(_TORCH_ARCH)
    no_image = ctx.grep(_NO_IMAGE)
    # Engines warn and fall back when a backend refuses the GPU: only a raised error is a failure.
    backend = [ln for ln in ctx.grep(_BACKEND_ARCH) if "Error" in ln.text]
    if not (torch_arch or no_image or backend):
        return []
    sm = _sm(ctx)
    gpu = f" ({sm})" if sm else ""
    supports = [
        m["list"] for ln in ctx.grep(_TORCH_SUPPORTS) if (m := _TORCH_SUPPORTS.search(ln.text))
    ]
    if torch_arch:
        cause = f"this torch build has no kernels for the GPU's compute capability{gpu}" + (
            f"; it supports {supports[0].strip()}" if supports else ""
        )
        remedy = (
            "use a torch build that includes it (for sm_120: the CUDA 12.8+ wheels) and an"
            " engine built against it"
        )
    elif backend and not no_image:
        what = _BACKEND_ARCH.search(backend[0].text)
        name = what["what"] if what else "an attention backend"
        cause = f"{name} does not support this GPU's compute capability{gpu}"
        remedy = _backend_remedy(ctx, name)
    else:
        cause = (
            f"a CUDA kernel has no image for this GPU's compute capability{gpu}: torch, the"
            " engine or one of its kernel libraries was built without it"
        )
        remedy = (
            "use an engine build (image) compiled for this GPU's architecture (its"
            " TORCH_CUDA_ARCH_LIST must include it, e.g. 12.0 for SM120); if the failing kernel"
            " is attention: " + _backend_remedy(ctx, "that backend")
        )
    return [
        Finding(
            "arch_unsupported",
            cause,
            evidence_of(sorted({*torch_arch, *no_image, *backend}, key=lambda ln: ln.no)),
            remedy,
            "high" if torch_arch or backend else "medium",
        )
    ]


def _backend_remedy(ctx: Context, name: str) -> str:
    chosen = ctx.arg("attention_backend") or ctx.settings.get("VLLM_ATTENTION_BACKEND")
    if chosen:
        where = (
            ctx.arg_source("attention_backend")
            if ctx.arg("attention_backend")
            else ctx.source("VLLM_ATTENTION_BACKEND")
        )
        return (
            f"the attention backend is already chosen ({where}) and {name} still fails: pick one"
            " this GPU supports (triton or flashinfer on SM120), or an engine build for it"
        )
    return (
        f"instead of {name}, choose an attention backend this GPU supports (vLLM"
        " --attention-backend, SGLang --attention-backend triton)"
    )


_PTXAS = re.compile(
    r"PTXASError|ptxas\S* fatal|is not defined for option 'gpu-name'"
    r"|ptxas'?, .*returned non-zero exit status"
)


_GPU_NAME = re.compile(r"(?:Value '|--gpu-name=)(?P<sm>sm_\w+)")


def rule_ptxas(ctx: Context) -> list[Finding]:
    ptxas = ctx.grep(_PTXAS)
    if not ptxas:
        return []
    sm = next((m["sm"] for ln in ctx.lines if (m := _GPU_NAME.search(ln.text))), None)
    target = f" '{sm}'" if sm else " this GPU's architecture"
    if "TRITON_PTXAS_PATH" in ctx.settings:
        remedy = (
            f"{ctx.source('TRITON_PTXAS_PATH')} is already set and that ptxas does not know"
            f"{target} either: point it at a newer CUDA toolkit's ptxas (CUDA 12.8+ for"
            " sm_120, 13 for sm_110/sm_121)"
        )
    else:
        remedy = (
            "point TRITON_PTXAS_PATH at a CUDA toolkit's ptxas that knows it (e.g."
            " /usr/local/cuda/bin/ptxas), or use a Triton built for this GPU"
        )
    return [
        Finding(
            "ptxas_compile",
            f"ptxas could not compile a Triton kernel: the ptxas in use does not know{target}",
            evidence_of(ptxas),
            remedy,
            "high",
        )
    ]


_SMEM = re.compile(
    r"OutOfResources: out of resource: shared memory, Required: (?P<need>\d+),"
    r" Hardware limit: (?P<have>\d+)"
)


# Per-block limits the message prints, and the GPUs that have them (CUDA's per-arch tables).
_SMEM_PARTS = {
    101376: " (the limit of SM 8.6/8.9/12.x parts, RTX PRO 6000 Blackwell included)",
    65536: " (the limit of SM 7.5 parts, Turing)",
    232448: " (the limit of SM 9.0/10.0 parts, H100/H200/B200)",
}


def rule_shared_memory(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_SMEM)
    if not hits:
        return []
    m = _SMEM.search(hits[0].text)
    assert m is not None
    need, have = int(m["need"]), int(m["have"])
    return [
        Finding(
            "shared_memory_per_block",
            f"a Triton kernel asked for {need:,} bytes of shared memory per block; this GPU"
            f" allows {have:,}{_SMEM_PARTS.get(have, '')}: its tile / stage config was tuned"
            " for a GPU with more",
            evidence_of(hits),
            "use an engine build whose config for this kernel fits this GPU (fewer num_stages or"
            " smaller blocks on this architecture), or another backend for that op (MoE runner,"
            " attention or GEMM backend)",
            "high",
        )
    ]


_HELION = re.compile(r"Helion kernel not tuned yet(?:.*?(?P<file>\w+_sm_\d+\w*\.json))?")


def rule_helion_untuned(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_HELION)
    if not hits:
        return []
    m = _HELION.search(hits[0].text)
    config = f" ({m['file']})" if m and m["file"] else ""
    return [
        Finding(
            "helion_config_missing",
            f"a Helion kernel has no tuned config for this GPU{config}: the engine build ships"
            " none for this architecture",
            evidence_of(hits),
            "use a build that ships the config for this GPU, or a code path without Helion for"
            " this op on this architecture; never reuse a tune made for another GPU, dtype,"
            " TP size or engine version",
            "high",
        )
    ]
