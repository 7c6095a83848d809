"""How long a candidate's qualification may take, from its gate settings and dated rates.

An upper-bound planning figure for ``--plan``, not a measurement: every request is counted as
decoding its whole ``max_tokens`` at the dated single-stream rate, plus the dated time to its
first token, plus the model's load at the dated load rate. Each term says where it comes from;
a rate that is not dated is named and the slower basis used in its place. What is left out is
said (the capacity needle's long prefill, preflight's hashing, the NCCL probe): those have no
dated rate here. The requests counted per gate follow the gate modules in ``tests/`` (one line
each below; a gate that sends more must be counted here too). Pure: no pytest, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tp2qual.candidate import Candidate

LEFT_OUT = (
    "the capacity needle's, gate 05's long-prompt and gate 07's near-bound prefills, "
    "preflight's hashing and the NCCL probe (no dated rate)"
)


@dataclass(frozen=True)
class Rate:
    value: float
    basis: str


@dataclass(frozen=True)
class GateLoad:
    """What a gate asks of the serve: requests, and the tokens they may decode at most."""

    requests: int
    tokens: int


@dataclass(frozen=True)
class Estimate:
    candidate: str
    decode: Rate  # tok/s
    first_token: Rate  # s per request
    load: Rate  # s, the whole load
    gates: dict[str, GateLoad]

    def gate_seconds(self, gate: str) -> float:
        load = self.gates[gate]
        return load.tokens / self.decode.value + load.requests * self.first_token.value

    @property
    def seconds(self) -> float:
        return self.load.value + sum(self.gate_seconds(g) for g in self.gates)

    def lines(self) -> list[str]:
        counted = ", ".join(
            f"{g} {self.gate_seconds(g) / 60:.1f}" for g in self.gates if self.gates[g].requests
        )
        return [
            f"about {self.seconds / 60:.0f} min at most: load {self.load.value / 60:.1f} min, "
            f"gates (min) {counted}",
            f"  decode: {self.decode.value:.3g} tok/s, {self.decode.basis}",
            f"  first token: {self.first_token.value:.3g} s a request, {self.first_token.basis}",
            f"  load: {self.load.basis}",
            f"  left out: {LEFT_OUT}",
        ]


def _tokens(settings: Mapping[str, Any], count: int, key: str = "max_tokens") -> GateLoad:
    return GateLoad(count, count * int(settings.get(key) or 0))


def _deterministic(s: Mapping[str, Any], _: Sequence[int]) -> GateLoad:
    return _tokens(s, len(s.get("prompts") or ()) * int(s.get("repeats") or 1))


def _repetition(s: Mapping[str, Any], _: Sequence[int]) -> GateLoad:
    return _tokens(s, len(s.get("prompts") or ()))


def _tool_calls(s: Mapping[str, Any], _: Sequence[int]) -> GateLoad:
    """``repeats`` requests per mode; a streamed mode whose plain twin is required asks the
    twin too; ``result``: the call, then the answer to the tool's result; with ``long_fill``,
    two one-token calibrations and the call after the long prompt."""
    modes = list(s.get("modes") or ())
    twins = sum(m.endswith("-stream") and m.removesuffix("-stream") in modes for m in modes)
    calls = (len(modes) + twins + ("result" in modes)) * int(s.get("repeats") or 1)
    if float(s.get("long_fill") or 0) > 0:
        return GateLoad(calls + 3, (calls + 1) * int(s.get("max_tokens") or 0) + 2)
    return _tokens(s, calls)


def _capacity(s: Mapping[str, Any], _: Sequence[int]) -> GateLoad:
    """Two calibration requests; the context ladder, each row one streamed needle decoding at
    most ``needle_max_tokens`` (the needle's own row, each of ``ladder_fractions`` and each of
    ``ladder_tokens``: at most, as the bound may skip or merge rows, checks/ladder.py), and a
    one-token count of its prompt where the stream reports none (llama-cpp-python); the
    over-bound prompt (streamed too, where asked) and one short request after it."""
    rows = 1 + len(s.get("ladder_fractions") or ()) + len(s.get("ladder_tokens") or ())
    requests = 2 + 2 * rows + 2 + bool(s.get("stream_over_bound"))
    return GateLoad(requests, rows * (int(s.get("needle_max_tokens") or 0) + 1) + 8 + 2)


def _agreement(s: Mapping[str, Any], prompt_tokens: Sequence[int]) -> GateLoad:
    """Each shipped prompt decoded twice (cold, then its prefix cached) and reread twice (its
    own answer, the reference's: one token each); the near-bound prompt sized, decoded and
    reread; then at most ``accuracy_items`` arithmetic items (asking may stop earlier)."""
    prompt_tokens = prompt_tokens[: int(s.get("prompts") or 0) or None]
    items = int(s.get("accuracy_items") or 0)
    near = int(s.get("near_bound_max_tokens") or 0)
    tokens = 2 * sum(prompt_tokens) + 2 * len(prompt_tokens) + near + 2
    tokens += items * int(s.get("accuracy_max_tokens") or 0)
    return GateLoad(4 * len(prompt_tokens) + 3 + items, tokens)


def _throughput(s: Mapping[str, Any], _: Sequence[int]) -> GateLoad:
    return _tokens(s, int(s.get("samples") or 0) + int(s.get("warmup") or 0))


GATE_LOADS: dict[str, Callable[[Mapping[str, Any], Sequence[int]], GateLoad]] = {
    "deterministic": _deterministic,
    "repetition": _repetition,
    "tool_calls": _tool_calls,
    "capacity": _capacity,
    "agreement": _agreement,
    "throughput": _throughput,
}


def estimate(
    candidate: Candidate,
    *,
    decode: Rate,
    first_token: Rate,
    load: Rate,
    agreement_prompt_tokens: Sequence[int],
) -> Estimate:
    """The candidate's gates as it would run them (a gate not applicable asks nothing)."""
    gates = {
        gate: how(candidate.gate(gate), agreement_prompt_tokens)
        for gate, how in GATE_LOADS.items()
        if not candidate.not_applicable(gate)
    }
    return Estimate(candidate.name, decode, first_token, load, gates)


def dated_rate(baseline: Mapping[str, Any] | None, figure: str) -> Rate | None:
    """A ``[baseline]`` figure as a rate, with its date, source and definition, or None."""
    if not baseline or (value := (baseline.get("figures") or {}).get(figure)) is None:
        return None
    definition = (baseline.get("definitions") or {}).get(figure)
    said = f"; measured as: {' '.join(definition.split())}" if definition else ""
    where = f"TP{baseline.get('tp', '?')} record of {baseline.get('date', '?')}"
    return Rate(float(value), f"the dated {where} ([baseline] {figure}){said}")
