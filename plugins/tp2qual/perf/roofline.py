"""Single-stream decode roofline: the tokens/s that memory bandwidth allows, to judge a measure.

At batch 1 each generated token reads every active weight once. Under tensor parallelism each
GPU reads its 1/TP share, in parallel, so a token costs
``active_params x bits/8 / TP (+ KV bytes) / bandwidth_per_GPU`` seconds, plus, over PCIe, the
latency of two all-reduces per layer (after attention and after the MLP). The bound ignores
compute, kernel launches and sampling, so a real server reaches a fraction of it; that fraction
is what the throughput gate reports.
"""

from __future__ import annotations

from dataclasses import dataclass

ALLREDUCES_PER_LAYER = 2


@dataclass(frozen=True)
class Roofline:
    """The inputs and the bound they give; times are per generated token."""

    active_params_b: float
    bits_per_weight: float
    bandwidth_gbs: float
    tp: int
    kv_bytes_per_token: float
    layers: int | None
    allreduce_latency_us: float | None
    bytes_per_gpu_per_token: float
    memory_time_s: float
    allreduce_time_s: float
    bound_tok_s: float


def decode_bound(
    active_params_b: float,
    bits_per_weight: float,
    bandwidth_gbs: float,
    tp: int,
    kv_bytes_per_token: float = 0,
    layers: int | None = None,
    allreduce_latency_us: float | None = None,
) -> Roofline:
    """Upper bound on single-stream decode tokens/s.

    ``active_params_b`` in billions (the active experts' share for MoE), ``bandwidth_gbs`` per
    GPU in 1e9 bytes/s, ``kv_bytes_per_token`` the KV bytes *each GPU* reads per token. The
    all-reduce term applies when TP > 1 and both ``layers`` and ``allreduce_latency_us`` are given.
    """
    _require_positive(
        active_params_b=active_params_b, bits_per_weight=bits_per_weight,
        bandwidth_gbs=bandwidth_gbs, tp=tp,
    )  # fmt: skip
    if kv_bytes_per_token < 0:
        raise ValueError("kv_bytes_per_token must be >= 0")
    weight_bytes = active_params_b * 1e9 * bits_per_weight / 8 / tp
    bytes_per_gpu = weight_bytes + kv_bytes_per_token
    memory_time = bytes_per_gpu / (bandwidth_gbs * 1e9)
    allreduce_time = _allreduce_time_s(tp, layers, allreduce_latency_us)
    return Roofline(
        active_params_b=active_params_b,
        bits_per_weight=bits_per_weight,
        bandwidth_gbs=bandwidth_gbs,
        tp=tp,
        kv_bytes_per_token=kv_bytes_per_token,
        layers=layers,
        allreduce_latency_us=allreduce_latency_us,
        bytes_per_gpu_per_token=bytes_per_gpu,
        memory_time_s=memory_time,
        allreduce_time_s=allreduce_time,
        bound_tok_s=1.0 / (memory_time + allreduce_time),
    )


def _require_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")


def _allreduce_time_s(tp: int, layers: int | None, latency_us: float | None) -> float:
    """Two all-reduces per layer, each paying the link latency; none at TP 1."""
    if tp == 1 or layers is None or latency_us is None:
        return 0.0
    if layers < 0 or latency_us < 0:
        raise ValueError("layers and allreduce_latency_us must be >= 0")
    return ALLREDUCES_PER_LAYER * layers * latency_us * 1e-6


def fraction(measured_tok_s: float, roofline: Roofline) -> float:
    """Measured tokens/s as a share of the bound (1.0 = at the roofline; above 1 means the
    inputs were wrong, e.g. fewer active parameters or bits than assumed)."""
    if measured_tok_s < 0:
        raise ValueError("measured tokens/s must be >= 0")
    return measured_tok_s / roofline.bound_tok_s
