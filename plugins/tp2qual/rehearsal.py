"""A rehearsal of a candidate's gates at its own size: every request the gates will send, with
its prompt, its reply budget, the fill it is judged by, the deadline the suite gives it and the
memory its prompt logprobs take, each checked against what the suite itself would fail.

Every figure comes from the candidate file and the functions the gates size their requests by
(``checks.needle.needle_plan``, ``checks.agreement.near_bound.near_bound_plan``, the time budget
of ``budget.py`` and ``candidate.time_budget``), so the rehearsal cannot say one thing while the
run does another; a gate that sends another request must be added here too (the gate modules in
``tests/`` are the list). A request is a problem when the suite itself would fail or time out on
it before the model is judged:

- its prompt fills less of the bound than its own threshold (``checks.needle.fill_reaches``), or
  prompt and reply budget do not fit the bound (the engine refuses it);
- its deadline is shorter than its prompt's prefill at the slowest rate on record with its
  margin (``prefill``) plus its reply at the decode floor the deadline assumes;
- its prompt logprobs need more memory than the launch leaves outside the engine's share
  (``echo_peak_gib``).

Prompt lengths of the short prompts are bounded by their characters (at most one token per
character of ASCII text), chat templates not counted: their prefill is under a second at any
rate on record. Pure: reads nothing but what it is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tp2qual import prefill
from tp2qual.accuracy_asked import ItemsAsked
from tp2qual.budget import MARGIN, TimeBudget
from tp2qual.candidate import Candidate
from tp2qual.checks.agreement.near_bound import near_bound_plan
from tp2qual.checks.needle import fill_reaches, needle_plan
from tp2qual.checks.tool_modes import long_aim, long_base
from tp2qual.checks.topology import DESKTOP_TYPICAL_MIB
from tp2qual.perf.comparison import compare_baseline, roofline_for
from tp2qual.perf.fit import fraction
from tp2qual.perf.floor_basis import unmeasured
from tp2qual.perf.floors import budget_floor, judged_floors
from tp2qual.prompts import filler

GIB = 1024**3
# vLLM V1 computes a chunk's prompt logprobs from its whole [scheduled tokens, vocab] logits
# (bf16, 2 B) and their float32 log-softmax (4 B), outside the memory its profiling measured
# (issue 35; vllm-project/vllm #5907, #52054). The same bytes are assumed for SGLang's input
# logprobs, chunked by --chunked-prefill-size.
ECHO_BYTES_PER_LOGIT = 6
CHUNK_FLAG = {"vllm": "--max-num-batched-tokens", "sglang": "--chunked-prefill-size"}


@dataclass(frozen=True)
class Request:
    """One request a gate sends, sized; ``problems``: why the suite would fail it."""

    gate: str
    name: str
    prompt_tokens: int
    max_tokens: int
    timeout_s: float
    needed_s: float  # prefill at the assumed rate plus the reply at the deadline's floor
    fill: float | None = None
    wanted_fill: float | None = None
    over_bound: bool = False  # sent over the bound on purpose: refused before any prefill
    echo_positions: int = 0
    peak_gib: float | None = None
    problems: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return 0 if self.over_bound else self.prompt_tokens + self.max_tokens


@dataclass(frozen=True)
class Room:
    """What a launch leaves outside the engine's share of one GPU, for prompt logprobs."""

    gib: float | None
    chunk: int | None  # tokens the engine schedules per step (its prefill chunk)
    vocab: int | None
    basis: str

    def peak_gib(self, positions: int) -> float | None:
        if not positions or self.vocab is None:
            return None
        scheduled = min(positions, self.chunk) if self.chunk else positions
        return scheduled * self.vocab * ECHO_BYTES_PER_LOGIT / GIB


@dataclass(frozen=True)
class Rehearsal:
    candidate: str
    budget: TimeBudget
    room: Room
    requests: tuple[Request, ...] = field(default=())
    near_check: str = ""  # how gate 07 checks its decode near the bound, and why

    @property
    def problems(self) -> list[str]:
        return [f"{r.gate} {r.name}: {p}" for r in self.requests for p in r.problems]

    def largest(self) -> dict[str, Request]:
        """Per gate, the request asking the most tokens of the serve (over-bound ones aside)."""
        out: dict[str, Request] = {}
        for r in self.requests:
            if r.gate not in out or r.size > out[r.gate].size:
                out[r.gate] = r
        return out


@dataclass(frozen=True)
class Shipped:
    """The suite's shipped prompt data, as the gates read it: gate 07's prompts as
    (characters, max_tokens), its arithmetic items' question lengths in characters."""

    agreement: tuple[tuple[int, int], ...]
    item_chars: tuple[int, ...]


def _flag(argv: Sequence[str], flag: str) -> str | None:
    args = [str(a) for a in argv]
    for arg, value in zip(args, [*args[1:], ""], strict=False):
        name, eq, inline = arg.partition("=")
        if name == flag:
            return inline if eq else value
    return None


def room_of(candidate: Candidate) -> Room:
    """(1 - the engine's share) x one GPU's memory, less a desktop's share on the display GPU
    (``checks.topology``): what prompt logprobs may take beyond the engine's own budget."""
    campaign = candidate.spec.get("campaign") or {}
    vocab = candidate.model.get("vocab_size")
    chunk = _flag(candidate.command, CHUNK_FLAG.get(candidate.engine, ""))
    if not campaign.get("gpu_memory_gib"):
        return Room(None, None, vocab, "no GPU memory stated ([campaign] gpu_memory_gib)")
    share, where = fraction(candidate.engine, candidate.command)
    desktop = max(DESKTOP_TYPICAL_MIB, candidate.gpus.get("desktop_mib", 0)) / 1024
    gib = (1 - share) * float(campaign["gpu_memory_gib"]) - desktop
    said = f"{vocab:,} ({candidate.model.get('vocab_source', 'stated')})" if vocab else None
    basis = (
        f"(1 - {share:g}) x {campaign['gpu_memory_gib']} GiB ({where}) - {desktop:g} GiB of "
        f"desktop = {gib:.2f} GiB; chunk {chunk or 'not stated (the whole prompt)'}; vocab "
        f"{said or 'not on record ([model] vocab_size): no peak computed'}"
    )
    return Room(gib, int(chunk) if chunk else None, vocab, basis)


def echo_fits(candidate: Candidate, positions: int) -> tuple[bool, str]:
    """Whether an echo with logprobs at ``positions`` is known to fit beside the serve, and why
    (gate 07's near-bound check, ``checks.agreement.near_bound``). Unknown is no."""
    if not candidate.gpus.get("count"):
        return True, "a CPU serve: its prompt logprobs take host memory, not a GPU's slack"
    room = room_of(candidate)
    peak = room.peak_gib(positions)
    if peak is None or room.gib is None:
        return False, f"an echo's prompt-logprob peak is not known here: {room.basis}"
    said = f"an echo's prompt logprobs peak at {peak:.2f} GiB"
    if peak > room.gib:
        return False, f"{said}, over the {room.gib:.2f} GiB the launch leaves"
    return True, f"{said}, within the {room.gib:.2f} GiB the launch leaves"


def budget_of(candidate: Candidate, gate: str | None = None) -> TimeBudget:
    """The deadline's budget as the plan resolves it from the file alone (``dry_run``'s
    request budget): the floor gate 08 judges, the file's prefill allowance."""
    settings = candidate.gate("throughput")
    comparison = compare_baseline({}, candidate.spec.get("baseline"))
    roof = roofline_for(candidate.model, candidate.gpus, None, candidate.tp, None)
    judged = judged_floors(settings, comparison, roof, unmeasured(candidate.spec, settings))
    floor = budget_floor(judged)
    if floor is None:
        return candidate.time_budget(gate)
    return candidate.time_budget(gate, floor.value, floor.brief())


class _Sizer:
    """Sizes each request as the gate's budget gives its deadline, and checks it."""

    def __init__(self, candidate: Candidate, room: Room):
        self.candidate, self.room = candidate, room

    def request(self, gate: str, name: str, prompt: int, max_tokens: int, *,
                timeout_tokens: int | None = None, counted: int | None = None, echo: int = 0,
                **extra: Any) -> Request:  # fmt: skip
        """``timeout_tokens``: the tokens the gate sizes the deadline by, where it is not the
        reply budget (an echo reread: its positions); ``counted``: the prompt tokens the gate
        tells the deadline, where not the prompt's own (the needle: what fits the bound)."""
        budget = budget_of(self.candidate, gate)
        counted = prompt if counted is None else counted
        timeout = budget.seconds_for(timeout_tokens or max_tokens, counted)
        needed = prompt / prefill.assumed_tok_s() + max_tokens / budget.floor_tok_s
        made = Request(gate, name, prompt, max_tokens, timeout, needed, echo_positions=echo,
                       peak_gib=self.room.peak_gib(echo), **extra)  # fmt: skip
        return replace(made, problems=tuple(self._problems(made)))

    def _problems(self, r: Request) -> list[str]:
        bound = self.candidate.max_model_len
        found = []
        if r.wanted_fill is not None and not fill_reaches(r.fill, r.wanted_fill):
            found.append(f"its prompt fills {r.fill:.1%} of the bound, below its own threshold "
                         f"({r.wanted_fill:.1%} less the slack)")  # fmt: skip
        if not r.over_bound and r.prompt_tokens + r.max_tokens > bound:
            found.append(f"prompt {r.prompt_tokens} + reply {r.max_tokens} tokens exceed the "
                         f"bound {bound}: the engine refuses it")  # fmt: skip
        if not r.over_bound and r.timeout_s < r.needed_s:
            found.append(f"deadline {r.timeout_s:.0f} s is shorter than its prefill at "
                         f"{prefill.assumed_tok_s():.0f} tok/s plus its reply at the floor "
                         f"({r.needed_s:.0f} s)")  # fmt: skip
        if r.peak_gib is not None and self.room.gib is not None and r.peak_gib > self.room.gib:
            found.append(f"prompt logprobs at {r.echo_positions} positions peak at "
                         f"{r.peak_gib:.2f} GiB, over the {self.room.gib:.2f} GiB the launch "
                         "leaves")  # fmt: skip
        return found


def _chars(text: str) -> int:
    return len(text)


def _small(sizer: _Sizer, c: Candidate) -> list[Request]:
    """Gates 03, 04, 05 and 08: short prompts, their reply budgets."""
    out = []
    s = c.gate("deterministic")
    for p in s.get("prompts") or ():
        out.append(sizer.request("deterministic", p["id"], _chars(p["prompt"]), s["max_tokens"]))
    s = c.gate("repetition")
    for n, text in enumerate(s.get("prompts") or ()):
        out.append(sizer.request("repetition", f"long-{n}", _chars(text), s["max_tokens"]))
    s = c.gate("tool_calls")
    tool = str(s.get("tool", ""))
    out.append(sizer.request("tool_calls", "call", _chars(s.get("prompt", "") + tool),
                             s["max_tokens"]))  # fmt: skip
    fill, base = float(s.get("long_fill") or 0), long_base(s.get("modes") or ())
    if fill > 0 and base is not None:  # gate 05's call after a long prompt, at the size aimed
        aim = long_aim(c.max_model_len, fill, s["max_tokens"])[1]
        out.append(sizer.request("tool_calls", "long", aim, s["max_tokens"],
                                 counted=c.max_model_len - s["max_tokens"]))  # fmt: skip
    s = c.gate("throughput")
    words = filler(max(1, s["prompt_words"] // 20)) + " Now write a long story about the harbour."
    out.append(sizer.request("throughput", "sample", _chars(words), s["max_tokens"]))
    return out


def _capacity(sizer: _Sizer, c: Candidate) -> list[Request]:
    s = c.gate("capacity")
    plan = needle_plan(c.max_model_len, s)
    fill = plan.prompt_tokens / c.max_model_len
    over = int(c.max_model_len * s["over_by"])
    needle = sizer.request(
        "capacity", "needle", plan.prompt_tokens, plan.budget, fill=fill,
        wanted_fill=plan.wanted_fill, counted=c.max_model_len - plan.budget,
    )  # fmt: skip
    return [needle, sizer.request("capacity", "over-bound", over, 16, over_bound=True)]


def _agreement(sizer: _Sizer, c: Candidate, shipped: Shipped, asked: ItemsAsked) -> list[Request]:
    s = c.gate("agreement")
    out = []
    for n, (chars, max_tokens) in enumerate(shipped.agreement[: s["prompts"] or None]):
        positions = chars + max_tokens
        out.append(sizer.request("agreement", f"decode-{n}", chars, max_tokens))
        out.append(sizer.request("agreement", f"reread-{n}", positions, 1,
                                 timeout_tokens=positions, echo=positions))  # fmt: skip
        out.append(sizer.request("agreement", f"warm-{n}", chars, max_tokens))
    sized = near_bound_plan(c.max_model_len, s)
    fits, _ = echo_fits(c, sized.prompt_tokens + sized.max_tokens)
    plan = near_bound_plan(c.max_model_len, s, fits)
    out.append(sizer.request("agreement", "near-bound", plan.prompt_tokens, plan.max_tokens))
    if plan.echo_positions:
        out.append(sizer.request("agreement", "near-bound-reread", plan.echo_positions, 1,
                                 timeout_tokens=plan.echo_positions,
                                 echo=plan.echo_positions))  # fmt: skip
    else:  # the warm decode of the same prompt
        out.append(sizer.request("agreement", "near-bound-warm", plan.prompt_tokens,
                                 plan.max_tokens))  # fmt: skip
    for n, chars in enumerate(shipped.item_chars[: asked.items(s)]):  # none where not asked
        out.append(sizer.request("agreement", f"item-{n}", chars, s["accuracy_max_tokens"]))
    return out


def rehearse(candidate: Candidate, shipped: Shipped, asked: ItemsAsked) -> Rehearsal:
    """Every request of every gate that applies to the candidate, sized and checked; gate 07's
    arithmetic items where ``asked`` (``tp2qual.accuracy_asked``) says they are."""
    room = room_of(candidate)
    sizer = _Sizer(candidate, room)
    requests = [*_small(sizer, candidate), *_capacity(sizer, candidate)]
    requests += _agreement(sizer, candidate, shipped, asked)
    kept = tuple(r for r in requests if not candidate.not_applicable(r.gate))
    return Rehearsal(candidate.name, budget_of(candidate), room, kept, _near_check(candidate))


def _near_check(candidate: Candidate) -> str:
    sized = near_bound_plan(candidate.max_model_len, candidate.gate("agreement"))
    fits, why = echo_fits(candidate, sized.prompt_tokens + sized.max_tokens)
    how = "an echo reread" if fits else "a warm decode of the same prompt, not an echo"
    return f"gate 07 near the bound: {how} ({why})"


def shipped_from(prompts: Mapping[str, Any], items: Mapping[str, Any]) -> Shipped:
    """``Shipped`` from the parsed shipped sets (``data/agreement_prompts.json``,
    ``data/arithmetic_items.json``): what gate 07 sends of them."""
    suffix = " Give the final answer as a number."  # tests/test_07_agreement.py _ask_items
    return Shipped(
        tuple((len(p["text"]), int(p["max_tokens"])) for p in prompts["prompts"]),
        tuple(len(i["question"] + suffix) for i in items["items"]),
    )


def plan_lines(rehearsal: Rehearsal) -> list[str]:
    """``--plan``: per gate, the largest request, its deadline and the prefill rate assumed."""
    b = rehearsal.budget
    lines = [
        f"prefill assumed: {prefill.basis()}",
        f"a deadline: {b.prefill_s:g} s + the prompt at {b.prefill_tok_s:.0f} tok/s + the "
        f"reply x {MARGIN} at {b.floor_tok_s:.3g} tok/s ({b.floor_source}); it needs the prompt "
        "at that rate and the reply at the floor (short prompts counted by their characters)",
        f"prompt logprobs room: {rehearsal.room.basis}",
        rehearsal.near_check,
    ]
    for gate, r in rehearsal.largest().items():
        peak = f"; prompt logprobs peak {r.peak_gib:.2f} GiB" if r.peak_gib is not None else ""
        lines.append(
            f"{gate}: {r.name}, {r.prompt_tokens:,} prompt + {r.max_tokens:,} reply tokens; "
            f"deadline {r.timeout_s:.0f} s (needs {r.needed_s:.0f} s){peak}"
        )
    lines += [f"WOULD FAIL: {p}" for p in rehearsal.problems]
    return lines
