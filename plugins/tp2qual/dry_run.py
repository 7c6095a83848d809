"""``pytest --plan``: what a run of one candidate would do, section by section, starting nothing.

``plan_sections`` gives the sections in order: the exact launch, the image reference Docker is
asked for, the one-request flag, gate 08's floors (direction and source), gate 07's reference
(with the one-GPU arithmetic a TP1 reference rests on), the time the candidate may take at the
dated rates, and everything gate 00 (preflight) will check. ``others``: the run's other
candidates, by name (a reference's own dated rate, whether it runs first). Each section is
built from the same values and functions the run uses (the resolved launch, ``tp2qual.launch``,
and the launcher's ``plan()`` of it, ``image_reference``, ``perf.floors``, ``engine_env``), so the
plan cannot say one thing and the run do another.
Pure but for reading the shipped prompt set and for resolving a local build's
image pin (``.cache/…``, as the run does). A new section is one more entry in ``plan_sections``.
The last, "settings said out loud" (``settings_plan``), names what a serving engineer would
question; it fails nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from tp2qual.accuracy_asked import ItemsAsked, items_asked
from tp2qual.agreement_plan import agreement_lines
from tp2qual.budget import DEFAULT_FLOOR_TOK_S
from tp2qual.candidate import Candidate
from tp2qual.candidate_file import ADMISSION_FLAG, admission_flags
from tp2qual.checks.topology import BUSY_FLOOR_MIB
from tp2qual.draft import draft_pin
from tp2qual.engine_env import candidate_env_problems, env_basis
from tp2qual.engines import engine_for
from tp2qual.evidence.reference import PROMPT_SET
from tp2qual.exceptions import CandidateError
from tp2qual.image_ref import image_reference, is_by_digest
from tp2qual.lane_changes import plan_lines
from tp2qual.launch import ResolvedLaunch
from tp2qual.model_cache import cache_volume
from tp2qual.perf.comparison import compare_baseline, roofline_for
from tp2qual.perf.estimate import Estimate, Rate, estimate
from tp2qual.perf.expected_use import expectations_of
from tp2qual.perf.fit import one_gpu_fit, weights
from tp2qual.perf.floor_basis import unmeasured
from tp2qual.perf.floors import FloorSet, budget_floor, floor_plan_lines, judged_floors
from tp2qual.perf.ladder import plan_lines as ladder_lines
from tp2qual.perf.record_rates import rested_on
from tp2qual.rehearsal import Shipped, rehearse, shipped_from
from tp2qual.rehearsal import plan_lines as rehearsal_plan_lines
from tp2qual.serving.engine_check import plan_lines as engine_check_lines
from tp2qual.serving.launchers.docker.pins import resolve_pin
from tp2qual.serving.parser_venvs import plan_lines as recorded_answer_lines
from tp2qual.settings_plan import kv_support_lines, settings_lines
from tp2qual.tool_plan import tool_call_lines

FLOOR_KEY = "decode_tok_s_median"  # the floor an estimate falls back to
ARITHMETIC = PROMPT_SET.with_name("arithmetic_items.json")  # gate 07's items, beside its prompts


@dataclass(frozen=True)
class Section:
    """One titled part of the plan; ``lines`` are shown indented under the title."""

    title: str
    lines: tuple[str, ...]

    def render(self) -> str:
        return "\n".join([f"[{self.title}]", *(f"  {line}" for line in self.lines)])


def render(sections: list[Section]) -> str:
    return "\n".join(s.render() for s in sections)


def plan_sections(
    candidate: Candidate,
    launch: ResolvedLaunch,
    rendered: str,
    others: Mapping[str, Candidate] | None = None,
    peers: Sequence[Candidate] = (),
) -> list[Section]:
    """Every section, in order; ``launch``: the candidate's resolved launch, ``rendered`` the
    launcher's own rendering of it (``plan()``); ``others``: the run's candidates by name;
    ``peers``: every candidate loaded, against which the settings are compared and by which
    gate 07 asks its items or not (``tp2qual.accuracy_asked``)."""
    others = others or {}
    asked = items_asked(candidate, peers)
    return [
        Section("launch", tuple(rendered.splitlines())),
        Section("lane changes", tuple(lane_lines(candidate, launch))),
        Section("image", tuple(image_lines(candidate))),
        Section("one request at a time", tuple(one_request_lines(candidate, launch))),
        Section("reasoning control (every answer)", tuple(control_lines(candidate))),
        Section("floors (gate 08)", tuple(floor_lines(candidate))),
        Section("what gate 05 judges", tuple(tool_call_lines(candidate))),
        Section(
            "context ladder (gate 06)",
            tuple(ladder_lines(candidate.max_model_len, candidate.gate("capacity"))),
        ),
        Section("agreement reference (gate 07)", tuple(reference_lines(candidate, others))),
        Section("what gate 07 judges", tuple(agreement_lines(candidate, asked))),
        Section("time at the dated rates", tuple(estimate_for(candidate, others, peers).lines())),
        Section(
            "largest requests, their deadlines (rehearsal)",
            tuple(rehearsal_lines(candidate, asked)),
        ),
        Section("preflight checks (gate 00)", tuple(preflight_lines(candidate, launch))),
        Section("settings said out loud", tuple(settings_lines(candidate, launch, peers))),
    ]


_CONTROL_RULE = {
    "off": "every chat answer must come back with no reasoning field and no think tags",
    "on": "every chat answer must come back with reasoning (a reasoning field or think tags)",
    "engine default": "what each chat answer carries is recorded, not judged",
}


def control_lines(candidate: Candidate) -> list[str]:
    """The reasoning control every chat request asks for, how each answer proves it took
    (``checks.control``), and the short-answer budgets it is given."""
    request = candidate.request_settings
    asked = candidate.reasoning_control
    stated = "stated" if request.get("reasoning") else "unstated: the default for its parsers"
    parser = (candidate.spec["engine"].get("parsers") or {}).get("reasoning") or "none"
    extra = json.dumps(request.get("extra") or {}, sort_keys=True)
    budgets = ", ".join(
        f"{gate} {candidate.gate(gate).get(key)}"
        for gate, key in [("deterministic", "max_tokens"), ("tool_calls", "max_tokens"),
                          ("capacity", "needle_max_tokens")]
        if candidate.gate(gate).get(key)
    )  # fmt: skip
    return [
        f"reasoning {asked} ({stated}; reasoning parser {parser})",
        f"asked with {extra}" if request.get("extra") else "asked with no extra request field",
        f"proof: {_CONTROL_RULE[asked]} (<gate>_control.jsonl; a violation FAILs the gate)",
        f"short-answer budgets: {budgets or 'none set'}",
    ]


def lane_lines(candidate: Candidate, launch: ResolvedLaunch) -> list[str]:
    """A lane's difference against its baseline, placeholders filled as in the launch."""
    lines = plan_lines(candidate.spec, candidate.lane_changes, launch.fill)
    if lines:
        return lines
    after = candidate.spec.get("lane", {}).get("after")
    return [f"a lane of {after}, its launch written whole"] if after else ["none: not a lane"]


def image_lines(candidate: Candidate) -> list[str]:
    """The reference looked up (and pulled with ``--pull``), and how the result is proven."""
    if candidate.launcher_kind != "docker":
        return [f"none: a process on this machine ({candidate.python()})"]
    docker = candidate.launch["docker"]
    pin = resolve_pin(candidate)
    ref = image_reference(docker["image"], pin.value)
    how = "by digest" if is_by_digest(ref) else "by tag, then the image id proven against the pin"
    return [
        f"looks up {ref} ({how})",
        f"--pull pulls {ref}; without it a missing image is refused, never pulled",
    ]


def one_request_lines(candidate: Candidate, launch: ResolvedLaunch) -> list[str]:
    known = ADMISSION_FLAG.get(candidate.engine)
    if known is None:
        return [f"{candidate.engine}: no admission flag; the gates send one request at a time"]
    flag, default = known
    value = admission_flags(launch.argv).get(flag)
    lane = candidate.spec.get("lane", {}).get("kind") == "optional"
    if value is None:
        return [f"{flag} not given: {default}" + ("; allowed in an optional lane" if lane else "")]
    return [f"{flag} {value}" + (" (optional lane)" if lane else "")]


def floor_lines(candidate: Candidate) -> list[str]:
    """Each derived floor's rule and fallback, then the floors as the candidate file alone gives
    them; at run time a measured basis (the reference's, a lane baseline's figure), NVML's
    bandwidth and a local baseline finding take their place when read."""
    settings = candidate.gate("throughput")
    comparison = compare_baseline({}, candidate.spec.get("baseline"))
    roof = roofline_for(candidate.model, candidate.gpus, None, candidate.tp, None)
    judged = judged_floors(settings, comparison, roof, unmeasured(candidate.spec, settings))
    lines = floor_plan_lines(settings, candidate.spec, judged)
    lines += [f"not derivable before the run: {why}" for why in judged.not_derived]
    if settings.get("derived_floors"):
        lines.append(
            "derived again at run time: a measured basis from this run's PASS (else the newest "
            "earlier dated one), the roofline from NVML's bandwidth where it reads one"
        )
    refused = [r for r in comparison.get("rows", []) if r.get("refused")]
    tp = (comparison.get("baseline") or {}).get("tp")
    record = f"dated TP{tp} record" if tp else "dated record"  # its own TP size, never assumed
    lines += [
        f"{record}: {r['figure']} {r['baseline']:g} not compared: {r['refused']}" for r in refused
    ]
    budget = candidate.time_budget(None, *_budget_floor(judged))
    lines.append(f"request budget: {budget.explain(2048)}")
    lines = protocol_plan_lines(settings.get("protocol")) or lines
    if candidate.not_applicable("throughput"):
        lines.insert(0, f"gate 08 not applicable: {candidate.not_applicable('throughput')}")
    return lines


def protocol_plan_lines(profile: Mapping[str, Any] | None) -> list[str]:
    """A capacity protocol (run instead of the single-stream samples): its requests, sizes and
    the records it is put beside; no floor is judged on it."""
    if not profile:
        return []
    lines = [
        f"runs {profile['name']} instead of the single-stream samples: {profile['requests']} "
        f"requests at c1, each a {profile['prompt_tokens']:,}-token prompt (the engine's count, "
        f"calibrated by 3 one-token requests), capped at {profile['max_tokens']} tokens; no floor",
    ]
    if profile.get("scaled"):
        lines.append(f"scaled: {profile['scaled']}")
    lines += [
        f"beside: the {r['date']} TP{r['tp']} record of {r['serve']} ({r['path']}); divided "
        f"only like for like, prompt within {profile['prompt_tolerance']:.0%}"
        for r in profile.get("records", [])
    ]
    return lines


def _budget_floor(judged: FloorSet) -> tuple[float | None, str]:
    floor = budget_floor(judged)
    return (floor.value, floor.brief()) if floor else (None, "")


def reference_lines(candidate: Candidate, others: Mapping[str, Candidate]) -> list[str]:
    """The reference, where its transcript comes from, what is recorded of it, and for a
    campaign serve the arithmetic of whether a TP1 reference fits one GPU."""
    if candidate.not_applicable("agreement"):
        return [f"not applicable: {candidate.not_applicable('agreement')}"]
    named = candidate.spec.get("reference", {})
    if candidate.reference is None:
        why = named.get("not_applicable") or "none named ([reference] candidate)"
        judged = [c.name for c in others.values() if c.reference == candidate.name]
        serves = [f"the reference of {', '.join(judged)} in this run"] if judged else []
        return [f"none: not applicable: {' '.join(why.split())}", *serves, *fit_lines(candidate)]
    here = candidate.reference in others
    why = named.get("why", "") if named.get("candidate") else "the lane's baseline ([lane] after)"
    return [
        f"{candidate.reference}: its transcript from this run if it passed here"
        + (" (it runs first in this run)" if here else "")
        + ", else its newest PASS in a dated run folder under the results folder (never "
        "latest); none, or a FAIL or ERROR of it in this run: not judged (INCOMPLETE)",
        "recorded of it: model revision, engine and version, image, launch digest, suite "
        "commit, its dated run (identity/reference.json)",
        *([f"why: {' '.join(why.split())}"] if why else []),
        *fit_lines(candidate),
    ]


def fit_lines(candidate: Candidate) -> list[str]:
    """Whether the model fits one GPU, for a campaign serve that is not a lane."""
    campaign = candidate.spec.get("campaign")
    if not campaign or candidate.spec.get("lane", {}).get("after"):
        return []
    fit = one_gpu_fit(candidate.model, campaign, candidate.engine, candidate.command)
    if isinstance(fit, str):
        return [f"one GPU: not computed: {fit}"]
    return [f"one GPU: {line}" if i == 0 else line for i, line in enumerate(fit.lines())]


def estimate_for(
    candidate: Candidate, others: Mapping[str, Candidate], catalogue: Sequence[Candidate]
) -> Estimate:
    """The candidate's time, expected and at most (perf/estimate.py), at the dated record of its
    own TP size, else its model's other-TP record converted (perf/record_rates.py), else its
    decode floor (the slowest a PASS allows), each said; gate 07's items counted where
    ``tp2qual.accuracy_asked`` asks them over ``catalogue``, every candidate loaded (the -k
    selection or not: a run of one decides as a run of all)."""
    rested = rested_on(candidate, others)
    no_ttft = Rate(0.0, "no dated TTFT: not counted")
    return estimate(
        candidate,
        decode=rested.decode if rested else _floor_rate(candidate),
        first_token=(rested.first_token if rested else None) or no_ttft,
        load=_load(candidate),
        agreement_prompt_tokens=_agreement_prompt_tokens(),
        asked=items_asked(candidate, catalogue),
        prefill=rested.prefill if rested else (),
        prefill_basis=rested.prefill_basis if rested else "",
        expectations=expectations_of(candidate.spec),
        rests_on=rested.words() if rested else "",
    )


def _floor_rate(candidate: Candidate) -> Rate:
    settings = candidate.gate("throughput")
    comparison = compare_baseline({}, candidate.spec.get("baseline"))
    roof = roofline_for(candidate.model, candidate.gpus, None, candidate.tp, None)
    found = [f for f in judged_floors(settings, comparison, roof).floors if f.key == FLOOR_KEY]
    if found:
        return Rate(found[0].value, f"no dated rate: the decode floor ({found[0].source})")
    return Rate(DEFAULT_FLOOR_TOK_S, "no dated rate and no floor: the request budget's 2 tok/s")


def _load(candidate: Candidate) -> Rate:
    campaign = candidate.spec.get("campaign") or {}
    size, rate = weights(candidate.model), campaign.get("load_gib_per_s")
    if isinstance(size, str) or not rate:
        return Rate(0.0, "no dated load rate ([campaign] load_gib_per_s): not counted")
    source = campaign.get("load_source", "stated")
    return Rate(size.gib / rate, f"{size.gib:.1f} GiB at {rate:g} GiB/s ({source})")


def rehearsal_lines(candidate: Candidate, asked: ItemsAsked) -> list[str]:
    """Per gate, its largest request, the deadline the suite gives it and the prefill rate
    that deadline assumes; a request the suite itself would fail, named (``tp2qual.rehearsal``;
    gate 07's items where ``asked``, ``tp2qual.accuracy_asked``'s answer, says they are)."""
    return rehearsal_plan_lines(rehearse(candidate, _shipped(), asked))


@cache
def _shipped() -> Shipped:
    return shipped_from(json.loads(PROMPT_SET.read_text()), json.loads(ARITHMETIC.read_text()))


@cache
def _agreement_prompt_tokens() -> tuple[int, ...]:
    prompts = json.loads(PROMPT_SET.read_text())["prompts"]
    return tuple(int(p["max_tokens"]) for p in prompts)


def preflight_lines(candidate: Candidate, launch: ResolvedLaunch) -> list[str]:
    return [
        *model_lines(candidate),
        *gpu_lines(candidate),
        *image_pin_lines(candidate),
        *engine_check_lines(candidate, launch),
        *recorded_answer_lines(candidate, launch),
        *kv_support_lines(candidate, launch),
        *engine_env_lines(candidate),
    ]


def model_lines(candidate: Candidate) -> list[str]:
    model = candidate.model
    path = candidate.model_file()
    if path is not None:
        return [f"model: {path} must hash to {model['revision']}"]
    cache = model.get("hf_cache", "$HF_HUB_CACHE")
    if (volume := cache_volume(cache)) is not None:
        cache = (
            f"Docker volume {volume} (read in a helper container on the candidate's engine: "
            "volume read-only, no network, no GPU)"
        )
    lines = [
        f"model: {model['repo']} snapshot {model['revision']} in {cache}, every file against "
        "its blob's content address (served offline, HF_HUB_OFFLINE=1)"
    ]
    return lines + draft_lines(candidate)


def draft_lines(candidate: Candidate) -> list[str]:
    """A speculative lane's draft (``[model.draft]``), checked by preflight as the model is."""
    draft = candidate.model.get("draft")
    if draft is None:
        return []
    try:
        revision = draft_pin(draft, candidate.path).value
    except CandidateError as exc:
        return [f"draft: {draft['repo']} revision {draft['revision']}: {exc}"]
    if revision is None:
        return [
            f"draft: {draft['repo']} revision {draft['revision']} NOT PINNED yet: preflight "
            f"refuses the candidate until it is ({draft.get('how_to_pin', 'tp2qual.local_pins')})"
        ]
    return [
        f"draft: {draft['repo']} revision {revision}, every file against its blob's content "
        "address, as the model"
    ]


def gpu_lines(candidate: Candidate) -> list[str]:
    gpus = candidate.gpus
    if not gpus.get("count"):
        return ["GPUs: none needed (the topology is recorded as found)"]
    named = f", name contains {gpus['name_contains']!r}" if gpus.get("name_contains") else ""
    return [
        f"GPUs: at least {max(gpus['count'], candidate.tp)} with {gpus.get('memory_gib', 0)} GiB "
        f"each{named} (NVML)",
        f"busy: refused when a GPU runs a compute process, a running container holds GPUs or "
        f"more than {BUSY_FLOOR_MIB} MiB are in use (--allow-busy overrides, recorded)",
    ]


def image_pin_lines(candidate: Candidate) -> list[str]:
    if candidate.launcher_kind != "docker":
        return []
    pin = resolve_pin(candidate)
    if pin.value is None:
        return [f"image pin: unresolved ({pin.source}): the candidate is skipped"]
    return [f"image pin: the local image's digest or id must be {pin.value} ({pin.source})"]


def engine_env_lines(candidate: Candidate) -> list[str]:
    """What the engine variables are checked against, and each one refused before the start."""
    lines = [f"engine variables: {env_basis(candidate)}"]
    if engine_for(candidate.engine).env_prefix is None:
        return lines
    refused = [f"refused: {line}" for line in candidate_env_problems(candidate)]
    return lines + (refused or ["none set that the engine would ignore"])
