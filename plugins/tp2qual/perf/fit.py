"""Whether a model fits one GPU: what a TP1 reference of a TP2 serve rests on.

Fits when the weights plus a stated headroom (KV for one request at the bounded context,
activations) are no more than the memory the engine may take on one GPU: that GPU's whole memory
times the fraction the launch gives the engine (``--gpu-memory-utilization``,
``--mem-fraction-static``). The weights' size is stated in the file where it was measured
(``model.weights_gib`` with ``weights_source``), else ``model.total_params_b`` x
``model.bits_per_weight``. The GPU's memory and the headroom come from ``[campaign]``, each with
its source. Every term is shown with where it comes from; a term not given is said, never
guessed. Pure: no pytest, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tp2qual.engines import engine_for

GIB = 2**30


@dataclass(frozen=True)
class Term:
    gib: float
    basis: str


@dataclass(frozen=True)
class Fit:
    """The arithmetic: weights + headroom against gpu x fraction."""

    weights: Term
    headroom: Term
    gpu: Term
    fraction: float
    fraction_basis: str

    @property
    def need_gib(self) -> float:
        return self.weights.gib + self.headroom.gib

    @property
    def have_gib(self) -> float:
        return self.gpu.gib * self.fraction

    @property
    def fits(self) -> bool:
        return self.need_gib <= self.have_gib

    def arithmetic(self) -> str:
        sign = "≤" if self.fits else ">"
        return (
            f"weights {self.weights.gib:.1f} GiB + headroom {self.headroom.gib:.1f} GiB = "
            f"{self.need_gib:.1f} GiB {sign} {self.fraction:g} x {self.gpu.gib:.1f} GiB = "
            f"{self.have_gib:.1f} GiB of one GPU: "
            + ("fits one GPU" if self.fits else "does not fit one GPU")
        )

    def lines(self) -> list[str]:
        terms = [
            ("weights", self.weights.basis),
            ("headroom", self.headroom.basis),
            ("one GPU", self.gpu.basis),
            ("fraction", self.fraction_basis),
        ]
        return [self.arithmetic(), *(f"  {what}: {' '.join(why.split())}" for what, why in terms)]


def weights(model: Mapping[str, Any]) -> Term | str:
    """The weights' size: stated where measured, else from the parameters and their bits."""
    if (stated := model.get("weights_gib")) is not None:
        return Term(float(stated), f"stated: {model.get('weights_source', 'no source given')}")
    params, bits = model.get("total_params_b"), model.get("bits_per_weight")
    if params is None or bits is None:
        return "no size stated (model.weights_gib, or model.total_params_b and bits_per_weight)"
    gib = params * 1e9 * bits / 8 / GIB
    return Term(
        gib, f"{params:g} B parameters x {bits:g} bits (model.total_params_b, bits_per_weight)"
    )


def fraction(engine: str, argv: Sequence[str]) -> tuple[float, str]:
    """The share of one GPU the launch gives the engine, and where it was read: the flag the
    engine takes its share of one GPU's memory from (``Engine.memory``)."""
    memory = engine_for(engine).memory
    flag = memory.flag if memory else None
    args = [str(a) for a in argv]
    for arg, value in zip(args, [*args[1:], ""], strict=False):
        name, eq, inline = arg.partition("=")
        if flag and name == flag:
            return float(inline if eq else value), f"{flag} {inline if eq else value} in the launch"
    return 1.0, f"no {flag or 'memory flag'} in the launch: the whole GPU (an upper bound)"


def one_gpu_fit(
    model: Mapping[str, Any], campaign: Mapping[str, Any], engine: str, argv: Sequence[str]
) -> Fit | str:
    """The arithmetic for one GPU, or why it cannot be done from what the file states."""
    size = weights(model)
    if isinstance(size, str):
        return size
    if campaign.get("gpu_memory_gib") is None:
        return "no GPU memory stated ([campaign] gpu_memory_gib)"
    gpu = Term(float(campaign["gpu_memory_gib"]), campaign.get("gpu_memory_source", "stated"))
    headroom = Term(
        float(campaign.get("tp1_headroom_gib", 0.0)),
        campaign.get("tp1_headroom_why", "none stated ([campaign] tp1_headroom_gib)"),
    )
    share, basis = fraction(engine, argv)
    return Fit(size, headroom, gpu, share, basis)
