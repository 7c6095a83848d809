"""Re-derive each functional gate's verdicts from its raw exchanges, with the pure checks.

A verdict file (``deterministic_verdicts.jsonl`` …) is what a gate wrote about itself; the raw
request/response records beside it (``deterministic.jsonl`` …) are what the server said. Here the
same pure checks the gate ran (``checks.answers``, ``checks.repetition``, ``checks.toolcalls``,
``checks.overlength``, ``perf.sampling`` and ``checks.stats``) run again on the raw records, with
the settings the run recorded at its start (``identity/candidate.json``), never today's candidate
file. Each re-derivation gives the verdict rows as they should read (``rows``), what differs from
the rows recorded (``mismatches``, naming the raw record), and what fails (``failures``).

``REDERIVERS`` is keyed by gate name: a new gate plugs its re-derivation in with one entry.
No pytest and no writing here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tp2qual.checks import agreement as agreement_check
from tp2qual.checks import kernels
from tp2qual.checks.answers import (
    check_answer,
    check_budget,
    check_identical,
    check_reasoning_apart,
    split_reasoning,
)
from tp2qual.checks.engine_answer import judge as judge_engine_answer
from tp2qual.checks.overlength import PASSING, classify, over_bound_problems
from tp2qual.checks.repetition import Thresholds, check
from tp2qual.checks.stats import summarize
from tp2qual.checks.toolcalls import (
    check_call,
    check_twin,
    check_uses_result,
    expected_finish,
    reassemble_stream,
)
from tp2qual.engines import engine_for
from tp2qual.evidence.claims import same
from tp2qual.perf import floors
from tp2qual.perf.roofline import decode_bound
from tp2qual.perf.sampling import sample

RESOLVED_CANDIDATE = "identity/candidate.json"  # written before the candidate's first gate
FIGURES = ("ttft_s", "tpot_s", "decode_tok_s", "e2e_s")
# What roofline.json records of the bound's inputs (perf/comparison.py roofline_for).
ROOFLINE_INPUTS = ("active_params_b", "bits_per_weight", "bandwidth_gbs", "tp")


class Unrederivable(ValueError):
    """The raw exchanges or the recorded settings needed to re-derive a gate are not there."""


@dataclass(frozen=True)
class Mismatch:
    record: str  # the raw record, "deterministic.jsonl capital#0"
    what: str  # "deterministic_verdicts.jsonl correct"
    recorded: Any
    rederived: Any

    def line(self) -> str:
        return f"{self.what} recorded {self.recorded!r}, raw exchanges give {self.rederived!r}"


@dataclass
class Rederived:
    records: int = 0  # raw exchanges re-checked
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # artifact -> rows
    mismatches: list[Mismatch] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # what fails, by the raw exchanges

    def compare(self, record: str, artifact: str, recorded: Mapping[str, Any], **new: Any) -> None:
        for key, value in new.items():
            if key not in recorded or not _same(recorded[key], value):
                self.mismatches.append(
                    Mismatch(record, f"{artifact} {key}", recorded.get(key, "<absent>"), value)
                )


@dataclass(frozen=True)
class GateRun:
    """One gate of one candidate as the run recorded it."""

    root: Path  # the candidate's evidence folder
    settings: dict[str, Any]  # the gate's settings, as resolved at the run's start
    engine: str
    max_model_len: int

    def records(self, artifact: str, *, required: bool = True) -> list[dict[str, Any]]:
        path = self.root / artifact
        if not path.is_file():
            if required:
                raise Unrederivable(f"{artifact} is not on disk: nothing to re-derive from")
            return []
        try:
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except (UnicodeDecodeError, ValueError) as exc:
            raise Unrederivable(f"{artifact} does not parse: {exc}") from None
        if not all(isinstance(r, dict) for r in rows):
            raise Unrederivable(f"{artifact} holds a line that is not a JSON object")
        return rows


def read_settings(root: Path) -> dict[str, Any]:
    """The resolved candidate the run recorded (raises Unrederivable when it did not)."""
    path = root / RESOLVED_CANDIDATE
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        raise Unrederivable(
            f"{RESOLVED_CANDIDATE} is not on disk: the settings the gates ran with are unknown"
        ) from None
    except (OSError, ValueError) as exc:
        raise Unrederivable(f"{RESOLVED_CANDIDATE} is unreadable: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("gates"), dict):
        raise Unrederivable(f"{RESOLVED_CANDIDATE} names no gate settings")
    return body


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and same(a, b, rel_tol=1e-6)
    return bool(a == b)


def _by_tag(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The last exchange under each tag (a retried tag keeps the one the gate judged)."""
    return {str(r.get("tag")): r for r in records}


def _message(exchange: Mapping[str, Any]) -> dict[str, Any]:
    try:
        message = exchange["response"]["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return {}
    return message if isinstance(message, dict) else {}


def _finish(exchange: Mapping[str, Any]) -> str | None:
    try:
        return exchange["response"]["choices"][0].get("finish_reason")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


def _status(exchange: Mapping[str, Any] | None) -> int | None:
    return exchange.get("status") if exchange else None


def _chunks(exchange: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[float]]:
    pairs = [c for c in exchange.get("chunks") or [] if isinstance(c, dict)]
    return [c.get("data") or {} for c in pairs], [float(c["t"]) for c in pairs]


# ---------------------------------------------------------------- gate 03


def deterministic(run: GateRun) -> Rederived:
    raw = _by_tag(run.records("deterministic.jsonl"))
    verdicts = run.records("deterministic_verdicts.jsonl", required=False)
    prompts = {p["id"]: p for p in run.settings.get("prompts", [])}
    out = Rederived(rows={"deterministic_verdicts.jsonl": []})
    for row in verdicts:
        prompt = prompts.get(row.get("id"))
        if prompt is None:
            out.mismatches.append(
                Mismatch(
                    f"deterministic_verdicts.jsonl id={row.get('id')}",
                    "prompt",
                    "a verdict",
                    "no such prompt in the recorded candidate",
                )
            )
            out.rows["deterministic_verdicts.jsonl"].append(row)
            continue
        tags = [f"{prompt['id']}#{i}" for i in range(run.settings["repeats"])]
        exchanges = [raw.get(t) for t in tags]
        missing = [t for t, x in zip(tags, exchanges, strict=True) if _status(x) != 200]
        if missing:
            out.mismatches.append(
                Mismatch(
                    f"deterministic.jsonl {missing[0]}",
                    "exchange",
                    "a verdict",
                    "no HTTP 200 answer",
                )
            )
            out.rows["deterministic_verdicts.jsonl"].append(row)
            continue
        out.records += len(exchanges)
        new = _judge_prompt(prompt, [x for x in exchanges if x], run.settings["max_tokens"])
        out.compare(f"deterministic.jsonl {tags[0]}", "deterministic_verdicts.jsonl", row, **new)
        out.rows["deterministic_verdicts.jsonl"].append({**row, **new})
        for key in ("correct", "identical"):
            if not new[key]:
                out.failures.append(f"deterministic.jsonl {tags[0]}: {prompt['id']} not {key}")
    judged = {r.get("id") for r in verdicts}
    out.failures += [f"prompt {p}: no verdict" for p in prompts if p not in judged]
    return out


def _judge_prompt(prompt: dict[str, Any], exchanges: list[dict[str, Any]], budget: int) -> dict:
    """What gate 03 decides for one prompt, from its repeats' raw answers."""
    split = [split_reasoning(_message(x)) for x in exchanges]
    answers = [a for a, _ in split]
    answer, reasoning = split[0]
    verdict = check_budget(answer, reasoning, _finish(exchanges[0]), budget)
    if verdict.ok:
        verdict = check_answer(answer, prompt["expect"], prompt.get("mode", "contains"))
    if prompt.get("expect_reasoning") and verdict.ok:
        verdict = check_reasoning_apart(answer, reasoning)
    return {
        "answer": answer,
        "correct": verdict.ok,
        "identical": check_identical(answers).ok,
        "repeats": len(answers),
    }


# ---------------------------------------------------------------- gate 04


def repetition(run: GateRun) -> Rederived:
    raw = _by_tag(run.records("repetition.jsonl"))
    thresholds = Thresholds.from_mapping(run.settings.get("thresholds") or {})
    out = Rederived(rows={"repetition_metrics.jsonl": []})
    rows = run.records("repetition_metrics.jsonl", required=False)
    for row in rows:
        tag = f"long#{row.get('prompt')}"
        exchange = raw.get(tag)
        if _status(exchange) != 200 or exchange is None:
            out.mismatches.append(
                Mismatch(f"repetition.jsonl {tag}", "exchange", "a verdict", "no HTTP 200 answer")
            )
            out.rows["repetition_metrics.jsonl"].append(row)
            continue
        out.records += 1
        answer, reasoning = split_reasoning(_message(exchange))
        verdict = check("\n".join(part for part in (reasoning, answer) if part), thresholds)
        # The decision is compared, not the measures: the gate measured the text before the
        # evidence redacted any secret in it, and a redaction changes lengths and ratios.
        out.compare(f"repetition.jsonl {tag}", "repetition_metrics.jsonl", row, ok=verdict.ok)
        out.rows["repetition_metrics.jsonl"].append({**row, "ok": verdict.ok})
        if not verdict.ok:
            out.failures.append(f"repetition.jsonl {tag}: {verdict.reason}")
    expected = len(run.settings.get("prompts", []))
    if len(rows) < expected:
        out.failures.append(f"{len(rows)} of {expected} prompts have a verdict")
    return out


# ---------------------------------------------------------------- gate 05


def tool_calls(run: GateRun) -> Rederived:
    raw = _by_tag(run.records("tool_calls.jsonl"))
    settings = run.settings
    out = Rederived(rows={"tool_calls_verdicts.jsonl": []})
    rows = run.records("tool_calls_verdicts.jsonl", required=False)
    for row in rows:
        mode = str(row.get("mode"))
        tag = "result-answer" if mode == "result" else mode
        exchange = raw.get(tag)
        if _status(exchange) != 200 or exchange is None:
            out.mismatches.append(
                Mismatch(f"tool_calls.jsonl {tag}", "exchange", "a verdict", "no HTTP 200 answer")
            )
            out.rows["tool_calls_verdicts.jsonl"].append(row)
            continue
        out.records += 1
        if mode == "result":
            content = _message(exchange).get("content") or ""
            verdict = check_uses_result(content, settings["result_expect"])
            problems = [] if verdict.ok else [verdict.reason]
        else:
            problems = _judge_call(run, mode, exchange, raw)
            if mode.endswith("-stream") and f"{mode}-twin" in raw:
                out.records += 1  # its non-streamed twin was re-checked too
        new = {"ok": not problems, "problems": problems}
        out.compare(f"tool_calls.jsonl {tag}", "tool_calls_verdicts.jsonl", row, **new)
        out.rows["tool_calls_verdicts.jsonl"].append({**row, **new})
        out.failures += [f"tool_calls.jsonl {tag}: {p}" for p in problems]
    judged = {r.get("mode") for r in rows}
    out.failures += [f"mode {m}: no verdict" for m in settings.get("modes", []) if m not in judged]
    return out


def _judge_call(
    run: GateRun, mode: str, exchange: dict[str, Any], raw: dict[str, dict[str, Any]]
) -> list[str]:
    """What gate 05 decides for one tool_choice mode, from its raw exchange(s)."""
    tool = run.settings["tool"]
    if mode.endswith("-stream"):
        got = reassemble_stream(_chunks(exchange)[0])
        calls, finish = got["tool_calls"], got["finish_reason"]
    else:
        calls, finish = _message(exchange).get("tool_calls"), _finish(exchange)
    finishes, rule = expected_finish(run.engine, mode)
    verdict = check_call(calls, finish, tool["name"], tool["parameters"], finishes, rule)
    if not verdict.ok:
        return [verdict.reason]
    arguments = json.loads(calls[0]["function"]["arguments"])  # check_call parsed it already
    problems = [
        f"argument {key}={arguments.get(key)!r} does not contain {fragment!r}"
        for key, fragment in run.settings.get("arguments_expect", {}).items()
        if fragment.casefold() not in str(arguments.get(key, "")).casefold()
    ]
    base = mode.removesuffix("-stream")
    if not problems and mode != base and base in run.settings.get("modes", []):
        twin = raw.get(f"{mode}-twin") or {}
        matches = check_twin(got, _status(twin), twin.get("response"))
        problems += [] if matches.ok else [matches.reason]
    return problems


# ---------------------------------------------------------------- gate 06


def capacity(run: GateRun) -> Rederived:
    raw = _by_tag(run.records("capacity.jsonl"))
    out = Rederived(rows={"capacity_results.jsonl": []})
    rows = run.records("capacity_results.jsonl", required=False)
    for row in rows:
        if row.get("check") == "needle":
            tag, new = "needle", _needle(run, raw.get("needle"))
        else:
            tag, new = "over-bound", _over_bound(run, raw)
            if new is not None and "stream" not in row:  # a run from before the stream record:
                new.pop("stream", None)  # its verdict (ok) is still re-derived and compared
        if new is None:
            out.mismatches.append(
                Mismatch(f"capacity.jsonl {tag}", "exchange", "a verdict", "no such exchange")
            )
            out.rows["capacity_results.jsonl"].append(row)
            continue
        out.records += 1
        out.compare(f"capacity.jsonl {tag}", "capacity_results.jsonl", row, **new)
        out.rows["capacity_results.jsonl"].append({**row, **new})
        if not new["ok"]:
            out.failures.append(f"capacity.jsonl {tag}: check {row.get('check')} fails")
        if tag == "needle" and new["fill"] < run.settings["fill"] - 0.05:
            out.failures.append(f"capacity.jsonl needle: filled only {new['fill']:.0%}")
    checks = {r.get("check") for r in rows}
    out.failures += [f"check {c}: no result" for c in ("needle", "over_bound") if c not in checks]
    return out


def _needle(run: GateRun, exchange: dict[str, Any] | None) -> dict[str, Any] | None:
    if _status(exchange) != 200 or exchange is None:
        return None
    used = (exchange["response"].get("usage") or {}).get("prompt_tokens")
    text, reasoning = split_reasoning(_message(exchange))
    budget = run.settings["needle_max_tokens"]
    verdict = check_budget(text, reasoning, _finish(exchange), budget)
    answer = run.settings.get("needle_answer", "Lisbon")
    verdict = check_answer(text, [answer]) if verdict.ok else verdict
    fill = used / run.max_model_len if isinstance(used, int) else 0.0
    return {"prompt_tokens": used, "fill": fill, "answer": text, "expect": answer, "ok": verdict.ok}


def _over_bound(run: GateRun, raw: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Gate 06's over-bound check again, by the same pure rule (``checks.overlength``)."""
    over, after = raw.get("over-bound"), raw.get("after-over-bound")
    if over is None or after is None:
        return None
    known = engine_for(run.engine).over_length
    plain = classify(over.get("status"), over.get("response"), over_length=known)
    streamed = None
    if run.settings.get("stream_over_bound"):
        stream = raw.get("over-bound-stream") or {}
        chunks = _chunks(stream)[0] if "chunks" in stream else None
        streamed = classify(stream.get("status"), stream.get("error_body"), chunks, known)
    problems = over_bound_problems(plain, streamed, after.get("status"))
    new = {"status": over.get("status"), "after_status": after.get("status"), "ok": not problems}
    return new | ({"stream": streamed.as_dict()} if streamed else {})


# ---------------------------------------------------------------- gate 07


def throughput(run: GateRun) -> Rederived:
    raw = run.records("throughput.jsonl")
    out = Rederived(rows={"throughput_samples.jsonl": []})
    figures = _samples_from_streams(raw)
    rows = run.records("throughput_samples.jsonl", required=False)
    for row in rows:
        tag = f"{row.get('phase')}#{row.get('i')}"
        new = figures.get(tag)
        if new is None:
            out.mismatches.append(
                Mismatch(f"throughput.jsonl {tag}", "exchange", "a sample", "no such stream")
            )
            out.rows["throughput_samples.jsonl"].append(row)
            continue
        out.records += 1
        keys = ("ok", "ttft_s", "e2e_s", "tpot_s", "decode_tok_s", "output_tokens")
        out.compare(
            f"throughput.jsonl {tag}",
            "throughput_samples.jsonl",
            row,
            **{k: new[k] for k in keys if k in new},
        )
        out.rows["throughput_samples.jsonl"].append({**row, **new})
        if not new.get("ok"):
            out.failures.append(f"throughput.jsonl {tag}: {new.get('reason', 'under 2 tokens')}")
    samples = [r for r in out.rows["throughput_samples.jsonl"] if r.get("phase") == "sample"]
    if len(samples) < run.settings["samples"]:
        out.failures.append(f"{len(samples)} of {run.settings['samples']} samples")
    elif all(r.get("ok") for r in samples):
        _summary(run, samples, out)
    return out


def _samples_from_streams(raw: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each measured stream's sample, as ``perf.throughput.measure`` derives it: output tokens
    from ``usage``, else the ``tokenize`` exchange that follows the stream, else its chunks."""
    found: dict[str, dict[str, Any]] = {}
    for n, exchange in enumerate(raw):
        if "chunks" not in exchange:
            continue
        if exchange.get("status") != 200:
            found[str(exchange.get("tag"))] = {
                "ok": False,
                "reason": f"HTTP {exchange.get('status')}",
            }
            continue
        chunks, times = _chunks(exchange)
        usage = next((c["usage"] for c in reversed(chunks) if c.get("usage")), None)
        follow = raw[n + 1] if n + 1 < len(raw) else {}
        tokens = follow.get("response") if follow.get("tag") == "tokenize" else None
        if usage and usage.get("completion_tokens"):
            count, method = usage["completion_tokens"], "usage"
        elif follow.get("status") == 200 and isinstance(tokens, dict) and "tokens" in tokens:
            count, method = len(tokens["tokens"]), "server_tokenizer"
        else:
            count = sum(
                bool((c.get("choices") or [{}])[0].get("delta", {}).get("content")) for c in chunks
            )
            method = "chunks"
        found[str(exchange.get("tag"))] = sample(chunks, times, count, method)
    return found


def _summary(run: GateRun, samples: list[dict[str, Any]], out: Rederived) -> None:
    """checks.stats over the re-derived samples: the summary file, then the floors."""
    stats = {name: summarize([r[name] for r in samples]).as_dict() for name in FIGURES}
    recorded = run.root / "throughput_summary.json"
    try:
        written = json.loads(recorded.read_text()) if recorded.is_file() else None
    except ValueError:
        written = None
    if written is None:
        out.failures.append("throughput_summary.json is missing or unreadable")
    else:
        for name in FIGURES:
            for stat in ("median", "mean"):
                out.compare(
                    f"throughput.jsonl samples ({name})",
                    "throughput_summary.json",
                    {f"{name}.{stat}": (written.get(name) or {}).get(stat)},
                    **{f"{name}.{stat}": stats[name][stat]},
                )
    roof = _json(run.root / "roofline.json")
    if roof.get("computed"):  # a floor derived of the bound rests on its inputs, not its figure
        out.compare("roofline.json inputs", "roofline.json", roof, bound_tok_s=_bound(roof))
    judged = floors.judged_floors(
        run.settings, _json(run.root / "throughput_comparison.json"), roof
    )  # the gate's own derivation and check, in its direction (perf/floors.py)
    out.failures += [*judged.not_derived, *floors.misses(judged.floors, samples)]


def _bound(roof: Mapping[str, Any]) -> float | str:
    """The decode bound that roofline.json's own inputs give (perf/roofline.py)."""
    try:
        return decode_bound(*(roof[k] for k in ROOFLINE_INPUTS)).bound_tok_s
    except (KeyError, TypeError, ValueError) as exc:
        return f"no bound: {exc}"


def _json(path: Path) -> dict[str, Any]:
    """A JSON object the gate wrote beside its samples; {} when it is not there or unreadable."""
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def agreement(run: GateRun) -> Rederived:
    """The summary line of ``agreement_transcript.jsonl`` (where every claim is read from),
    derived again from the transcript's own, reference and accuracy lines."""
    records = run.records("agreement_transcript.jsonl")
    body = [r for r in records if r.get("kind") != agreement_check.SUMMARY]
    recorded: dict[str, Any] = next(
        (r for r in reversed(records) if r.get("kind") == agreement_check.SUMMARY), {}
    )
    claims = agreement_check.rederive(body, run.settings)
    out = Rederived(records=len(body))
    where = "agreement_transcript.jsonl"
    out.compare(where, f"{where} summary", recorded, **claims)
    summary = {**recorded, **claims, "kind": agreement_check.SUMMARY}
    out.rows["agreement_transcript.jsonl"] = [*body, summary]
    if claims.get("agrees_with_reference") is False:
        out.failures.append("the transcript does not agree with its reference's")
    return out


Rederiver = Callable[[GateRun], Rederived]

# One entry per gate that has raw exchanges to re-derive from.
ENGINE_CHECK = "engine_check.json"  # gate 00's engine answer (tests/test_00_preflight.py)


def preflight(run: GateRun) -> Rederived:
    """Gate 00's engine check: the engine's recorded answer judged again. (Its pins are
    re-checked by verify's own pin checks; a run whose engine was never asked has no answer.)"""
    out = Rederived()
    path = run.root / ENGINE_CHECK
    if not path.is_file():
        return out
    try:
        recorded = json.loads(path.read_text())
        verdict = judge_engine_answer(recorded["answer"], platform=recorded["platform"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise Unrederivable(f"{ENGINE_CHECK} does not hold an engine answer: {exc!r}") from None
    new = {"accepted": verdict.ok, **verdict.measures}
    out.records = 1
    out.compare(ENGINE_CHECK, ENGINE_CHECK, recorded, **new)
    out.rows[ENGINE_CHECK] = [{**recorded, **new}]
    out.failures += [f"{ENGINE_CHECK}: {r}" for r in verdict.measures["refusals"]]
    return out


def model_list(run: GateRun) -> Rederived:
    """Gate 02's record of the kernels the engine chose: read again from the first
    ``lines_read`` lines of ``server.log`` (the log grows after the gate), the backends asked
    from the launch the run recorded. A run from before this record has none: nothing to do."""
    out = Rederived()
    path = run.root / kernels.ARTIFACT
    if not path.is_file():
        return out
    log = run.root / "server.log"
    if not log.is_file():
        raise Unrederivable(f"{kernels.ARTIFACT} is read from server.log, which is not on disk")
    try:
        recorded = json.loads(path.read_text())
        lines = log.read_text(errors="replace").splitlines()[: int(recorded["lines_read"])]
    except (ValueError, KeyError, TypeError) as exc:
        raise Unrederivable(f"{kernels.ARTIFACT} is malformed: {exc!r}") from None
    command = read_settings(run.root).get("command")
    new = kernels.record(engine_for(run.engine), lines, command or [])
    if command is None:  # recorded before the launch was: the asked flags cannot be re-read
        new = {k: v for k, v in new.items() if k not in ("asked", "notices")}
    out.records = 1
    out.compare(kernels.ARTIFACT, kernels.ARTIFACT, recorded, **new)
    out.rows[kernels.ARTIFACT] = [{**recorded, **new}]
    return out


REDERIVERS: dict[str, Rederiver] = {
    "preflight": preflight,
    "model_list": model_list,
    "deterministic": deterministic,
    "repetition": repetition,
    "tool_calls": tool_calls,
    "capacity": capacity,
    "throughput": throughput,
    "agreement": agreement,
}


def _true(value: Any, _settings: Mapping[str, Any]) -> bool:
    return value is True


def _some(value: Any, _settings: Mapping[str, Any]) -> bool:
    return isinstance(value, int) and value > 0


# What a claim's value must be for its gate to have passed, by claim name (settings: the gate's).
SUPPORTS_PASS: dict[str, Callable[[Any, Mapping[str, Any]], bool]] = {
    "engine_accepts_launch": _true,
    "known_answers_correct": _true,
    "answers_identical_over_repeats": _true,
    "long_outputs_clean": _true,
    "long_outputs": _some,
    "tool_calls_ok": _true,
    "tool_calls_checked": _some,
    "needle_prompt_fill": lambda v, s: isinstance(v, int | float) and v >= s["fill"] - 0.05,
    "over_bound_status": lambda v, _s: isinstance(v, int) and 400 <= v < 500,
    "over_bound_stream": lambda v, _s: v in PASSING,
    "samples": lambda v, s: isinstance(v, int) and v >= s["samples"],
}


def supports_pass(name: str, value: Any, settings: Mapping[str, Any]) -> bool | None:
    """Whether a claim's value is one a passed gate can have; None when no rule applies.
    A throughput figure with a written floor must meet it in the floor's direction."""
    rule = SUPPORTS_PASS.get(name)
    if rule is not None:
        try:
            return rule(value, settings)
        except (KeyError, TypeError):
            return False
    return floors.claim_meets(name, value, settings)
