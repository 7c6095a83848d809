"""How long a candidate's qualification takes, from its gate settings and dated records:
the time expected, and an upper bound.

A planning figure for ``--plan``, not a measurement. Both figures count the model's load at the
dated load rate and decode at the dated single-stream rate of the candidate's own TP size
(``dry_run.estimate_for`` says which record, or what it fell back to). They differ in the tokens
and the first tokens counted:

- *at most*: every request decodes its whole ``max_tokens``, and every short request waits the
  record's time to first output at its (longer) prompt;
- *expected*: a request decodes what its kind of answer took in the user's transcripts
  (perf/expected_use.py, each with its source), and a short request's first output is its share
  of the record's prefill (perf/prefill.py, ``SHORT_PROMPT_TOKENS``).

The long prompts (gate 05's long call, gate 06's needle, gate 07's near-bound prompt) are timed
at the record's prefill rows in both (perf/prefill.py: expected and at most). What is left out
is said (preflight's hashing, the NCCL probe: no dated rate). The requests counted per gate
follow the gate modules in ``tests/`` (one line each below; a gate that sends more must be
counted here too). Pure: no pytest, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tp2qual.accuracy_asked import ItemsAsked
from tp2qual.candidate import Candidate
from tp2qual.perf.expected_use import (
    LADDER_ROWS,
    Expectations,
    LongPrompt,
    expected_load,
    items_load,
    long_prompts,
)
from tp2qual.perf.ladder import ladder_plan
from tp2qual.perf.prefill import (
    SHORT_PROMPT_TOKENS,
    PrefillRow,
    basis_words,
    expected_seconds,
    upper_seconds,
)

LEFT_OUT = "preflight's hashing and the NCCL probe (no dated rate)"


@dataclass(frozen=True)
class Rate:
    value: float
    basis: str


@dataclass(frozen=True)
class GateLoad:
    """What a gate asks of the serve: requests, and the tokens they may decode at most."""

    requests: int
    tokens: int

    def __add__(self, other: GateLoad) -> GateLoad:
        return GateLoad(self.requests + other.requests, self.tokens + other.tokens)


@dataclass(frozen=True)
class LongTerm:
    """A long prompt's time to its first output, expected and at most, per pass."""

    prompt: LongPrompt
    expected_s: float
    upper_s: float


@dataclass(frozen=True)
class Prefill:
    """The record's prefill rows, and what a short and each long prompt take by them."""

    rows: tuple[PrefillRow, ...] = ()
    basis: str = "no dated prefill rows: long prompts not counted"
    long: tuple[LongTerm, ...] = ()

    def short_expected(self) -> float | None:
        return expected_seconds(self.rows, SHORT_PROMPT_TOKENS) if self.rows else None


@dataclass(frozen=True)
class Estimate:
    candidate: str
    decode: Rate  # tok/s
    first_token: Rate  # s per short request, at most
    load: Rate  # s, the whole load
    gates: dict[str, GateLoad]  # at most
    expected: dict[str, GateLoad] = field(default_factory=dict)  # none: as at most
    prefill: Prefill = field(default_factory=Prefill)
    expectations: Expectations = field(default_factory=Expectations)
    rests_on: str = ""  # the dated record, in words; "" when none (the floor)
    accuracy_items: tuple[int, int] = (0, 0)  # gate 07's items and each one's budget
    items_not_asked: str = ""  # why gate 07 asks none (tp2qual.accuracy_asked); "" when asked

    def short_first(self, *, expected: bool = False) -> float:
        """A short request's first output: at most the record's (smallest row or TTFT); expected,
        a short prompt's share of the prefill rows where the record has them."""
        share = self.prefill.short_expected() if expected else None
        return self.first_token.value if share is None else min(self.first_token.value, share)

    def gate_seconds(self, gate: str, *, expected: bool = False) -> float:
        load = (self.expected if expected else {}).get(gate) or self.gates[gate]
        long = [t for t in self.prefill.long if t.prompt.gate == gate]
        short = max(0, load.requests - sum(t.prompt.passes for t in long))
        first = self.short_first(expected=expected)
        prefill = sum(t.prompt.passes * (t.expected_s if expected else t.upper_s) for t in long)
        return load.tokens / self.decode.value + short * first + prefill

    @property
    def seconds(self) -> float:
        """The upper bound (what schedules and deadlines plan for)."""
        return self.load.value + sum(self.gate_seconds(g) for g in self.gates)

    @property
    def expected_seconds(self) -> float:
        return self.load.value + sum(self.gate_seconds(g, expected=True) for g in self.gates)

    def accuracy_seconds(self, items: int, budget: int, *, expected: bool = False) -> float:
        """Gate 07's arithmetic items alone: each decoding a short answer (expected) or its
        whole budget, after a short prompt's first output."""
        tokens = self.expectations.tokens("short_answer", budget) if expected else budget
        return items * (tokens / self.decode.value + self.short_first(expected=expected))

    def _accuracy_lines(self) -> list[str]:
        items, budget = self.accuracy_items
        if self.items_not_asked:
            return [f"  of gate 07, its accuracy items: none, {self.items_not_asked}"]
        if not items:
            return []
        expected, most = (
            self.accuracy_seconds(items, budget, expected=e) / 60 for e in (True, False)
        )
        return [
            f"  of gate 07, its {items} accuracy items ({budget} tokens each at most): expected "
            f"{expected:.1f} min, at most {most:.1f} min"
        ]

    def lines(self) -> list[str]:
        counted = ", ".join(
            f"{g} {self.gate_seconds(g, expected=True) / 60:.1f} / {self.gate_seconds(g) / 60:.1f}"
            for g in self.gates
            if self.gates[g].requests
        )
        share = self.prefill.short_expected()
        expected_first = (
            f"expected {share:.3g} s (a {SHORT_PROMPT_TOKENS:,}-token prompt's share of the "
            "prefill rows), "
            if share is not None
            else ""
        )
        return [
            f"expected about {self.expected_seconds / 60:.0f} min, at most {self.seconds / 60:.0f}"
            f" min: load {self.load.value / 60:.1f} min, gates (min, expected / at most) {counted}",
            f"  rests on: {self.rests_on or 'no dated record: the decode floor'}",
            f"  decode: {self.decode.value:.3g} tok/s, {self.decode.basis}",
            f"  first output of a short request: {expected_first}at most "
            f"{self.first_token.value:.3g} s, {self.first_token.basis}",
            f"  prefill rows: {self.prefill.basis}",
            *(
                f"  long prompt, {t.prompt.gate}: {t.prompt.what}, {t.prompt.tokens:,} tokens x "
                f"{t.prompt.passes}: expected {t.expected_s:.3g} s, at most {t.upper_s:.3g} s each"
                for t in self.prefill.long
            ),
            *self._accuracy_lines(),
            *(f"  expected answer: {line}" for line in self.expectations.lines()),
            "  at most: every request decodes its whole max_tokens",
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
    ``ladder_tokens``; ``LADDER_ROWS`` where ``estimate`` planned them for the bound, else
    every size named, perf/ladder.py), and a
    one-token count of its prompt where the stream reports none (llama-cpp-python); the
    over-bound prompt (streamed too, where asked) and one short request after it."""
    rows = int(s.get(LADDER_ROWS) or 0) or (
        1 + len(s.get("ladder_fractions") or ()) + len(s.get("ladder_tokens") or ())
    )
    requests = 2 + 2 * rows + 2 + bool(s.get("stream_over_bound"))
    return GateLoad(requests, rows * (int(s.get("needle_max_tokens") or 0) + 1) + 8 + 2)


def _agreement(s: Mapping[str, Any], prompt_tokens: Sequence[int]) -> GateLoad:
    """Each shipped prompt decoded twice (cold, then its prefix cached) and reread twice (its
    own answer, the reference's: one token each); the near-bound prompt sized, decoded and
    reread. Its arithmetic items are added by ``estimate``: at most ``accuracy_items`` where
    ``tp2qual.accuracy_asked`` asks them (asking may stop earlier), else none."""
    prompt_tokens = prompt_tokens[: int(s.get("prompts") or 0) or None]
    near = int(s.get("near_bound_max_tokens") or 0)
    tokens = 2 * sum(prompt_tokens) + 2 * len(prompt_tokens) + near + 2
    return GateLoad(4 * len(prompt_tokens) + 3, tokens)


def _throughput(s: Mapping[str, Any], _: Sequence[int]) -> GateLoad:
    """The single-stream samples, or the capacity protocol that runs instead: three one-token
    calibrations, then ``requests`` capped at its ``max_tokens``."""
    if protocol := s.get("protocol"):
        return GateLoad(3 + protocol["requests"], protocol["requests"] * protocol["max_tokens"] + 3)
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
    asked: ItemsAsked,
    prefill: Sequence[PrefillRow] = (),
    prefill_basis: str = "",
    expectations: Expectations | None = None,
    rests_on: str = "",
) -> Estimate:
    """The candidate's gates as it would run them (a gate not applicable asks nothing), at most
    and as expected; ``asked``: whether gate 07 asks its arithmetic items
    (``tp2qual.accuracy_asked`` over the candidates loaded); ``prefill``: the record's rows,
    smallest prompt first."""
    settings = {g: candidate.gate(g) for g in GATE_LOADS if not candidate.not_applicable(g)}
    if "capacity" in settings:  # the rows this bound holds, not every size the file names
        rungs = ladder_plan(candidate.max_model_len, settings["capacity"]).rungs
        settings["capacity"] = {**settings["capacity"], LADDER_ROWS: len(rungs)}
    gates = {g: GATE_LOADS[g](s, agreement_prompt_tokens) for g, s in settings.items()}
    expectations = expectations or Expectations(not_applied="none stated")
    expected = {
        g: GateLoad(*expected_load(g, settings[g], (u.requests, u.tokens), expectations))
        for g, u in gates.items()
    }
    items, budget = _items(settings.get("agreement") or {}, asked)
    if "agreement" in gates:  # the items apart: at their budget, and at a short answer
        gates["agreement"] += GateLoad(items, items * budget)
        expected["agreement"] += GateLoad(*items_load(items, budget, expectations))
    return Estimate(
        candidate.name,
        decode,
        first_token,
        load,
        gates,
        expected,
        _prefill(settings, candidate.max_model_len, tuple(prefill), prefill_basis),
        expectations,
        rests_on,
        (items, budget),
        "" if asked.asked or "agreement" not in gates else asked.why,
    )


def _items(agreement: Mapping[str, Any], asked: ItemsAsked) -> tuple[int, int]:
    """Gate 07's items asked at most (none where the rule asks none) and each one's budget."""
    return asked.items(agreement), int(agreement.get("accuracy_max_tokens") or 0)


def _prefill(
    settings: Mapping[str, Mapping[str, Any]],
    max_model_len: int,
    rows: tuple[PrefillRow, ...],
    basis: str,
) -> Prefill:
    if not rows:
        return Prefill()
    long = tuple(
        LongTerm(p, expected_seconds(rows, p.tokens), upper_seconds(rows, p.tokens))
        for p in long_prompts(settings, max_model_len)
    )
    return Prefill(rows, f"{basis_words(rows)}; {basis}" if basis else basis_words(rows), long)


def dated_rate(baseline: Mapping[str, Any] | None, figure: str) -> Rate | None:
    """A ``[baseline]`` figure as a rate, with its date, source and definition, or None."""
    if not baseline or (value := (baseline.get("figures") or {}).get(figure)) is None:
        return None
    definition = (baseline.get("definitions") or {}).get(figure)
    said = f"; measured as: {' '.join(definition.split())}" if definition else ""
    where = f"TP{baseline.get('tp', '?')} record of {baseline.get('date', '?')}"
    return Rate(float(value), f"the dated {where} ([baseline] {figure}){said}")
