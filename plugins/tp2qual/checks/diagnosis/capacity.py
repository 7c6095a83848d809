"""Rules for what the memory left after the weights cannot hold: a KV cache smaller than one
request of ``max_model_len`` (with the figures the engine printed), Mamba / state cache blocks
fewer than ``max_num_seqs``. Remedies name the candidate's own values and skip what is set."""

from __future__ import annotations

import re

from tp2qual.checks.diagnosis.model import Context, Finding, evidence_of

_KV_SHORT = (
    # vLLM < 0.7: "The model's max seq len (29000) is larger than the maximum number of tokens
    # that can be stored in KV cache (23648)."
    re.compile(
        r"max seq len \((?P<want>\d+)\) is larger than the maximum number of tokens that can be"
        r" stored in KV cache \((?P<fit>\d+)\)"
    ),
    # vLLM V1: "… max seq len (N), (X GiB KV cache is needed, which is larger than the available
    # KV cache memory (Y GiB). … the estimated maximum model length is M."
    re.compile(
        r"max seq len \((?P<want>\d+)\), \((?P<need>[\d.]+) GiB KV cache is needed, which is"
        r" larger than the available KV cache memory \((?P<have>[\d.]+) GiB\)"
        r"(?:.*?estimated maximum model length is (?P<fit>\d+))?"
    ),
)


def rule_kv_cache_short(ctx: Context) -> list[Finding]:
    for pattern in _KV_SHORT:
        hits = ctx.grep(pattern)
        if hits:
            m = pattern.search(hits[0].text)
            assert m is not None
            return [_kv_finding(ctx, m, hits)]
    return []


def _kv_finding(ctx: Context, m: re.Match[str], hits: list) -> Finding:
    want, fit = int(m["want"]), m["fit"]
    figures = f"max_model_len {want:,}" + (
        f", the KV cache holds {int(fit):,} tokens" if fit else ""
    )
    if m.groupdict().get("need"):
        figures += f" ({m['need']} GiB needed, {m['have']} GiB available)"
    return Finding(
        "kv_cache_short",
        f"the KV cache left after the weights cannot hold one request of the full context:"
        f" {figures}",
        evidence_of(hits),
        _kv_remedy(ctx, fit),
        "high",
    )


def _kv_remedy(ctx: Context, fit: str | None) -> str:
    steps = []
    cap = f" to at most {int(fit):,}" if fit else ""
    if ctx.arg("max_model_len"):
        steps.append(f"lower {ctx.arg_source('max_model_len')}{cap}")
    else:
        steps.append(f"set --max-model-len{cap} (the model's default context is used now)")
    util = ctx.arg("gpu_memory_utilization") or ctx.arg("mem_fraction_static")
    key = "gpu_memory_utilization" if ctx.arg("gpu_memory_utilization") else "mem_fraction_static"
    if ctx.arg("kv_cache_memory_bytes"):  # an explicit budget: the memory share does not decide
        steps.append(f"or raise {ctx.arg_source('kv_cache_memory_bytes')}")
    elif util and _float(util) >= 0.95:
        steps.append(f"the memory share is already high ({ctx.arg_source(key)})")
    elif util:
        steps.append(f"or raise {ctx.arg_source(key)} if nothing else shares the GPU")
    else:
        steps.append("or raise --gpu-memory-utilization (vLLM) / --mem-fraction-static (SGLang)")
    dtype = (ctx.arg("kv_cache_dtype") or "auto").lower()
    if not dtype.startswith("fp8"):
        steps.append("or an fp8 KV cache (--kv-cache-dtype fp8) if the model allows it")
    return "; ".join(steps)


def _float(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return 0.0


_MAMBA = re.compile(
    r"max_num_seqs \((?P<seqs>\d+)\) exceeds available Mamba cache blocks \((?P<blocks>\d+)\)"
)


def rule_mamba_blocks(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_MAMBA)
    if not hits:
        return []
    m = _MAMBA.search(hits[0].text)
    assert m is not None
    seqs, blocks = int(m["seqs"]), int(m["blocks"])
    if ctx.arg("max_num_seqs"):
        remedy = f"lower {ctx.arg_source('max_num_seqs')} to at most {blocks}"
    else:
        remedy = (
            f"the default max_num_seqs ({seqs}) is above the pool:"
            f" set --max-num-seqs {blocks} or less"
        )
    return [
        Finding(
            "mamba_cache_blocks",
            f"a hybrid (Mamba / linear-attention) model needs one state-cache block per sequence:"
            f" max_num_seqs {seqs} against {blocks} blocks",
            evidence_of(hits),
            remedy
            + "; or free memory for the pool (a shorter max_model_len, a higher memory share)",
            "high",
        )
    ]
