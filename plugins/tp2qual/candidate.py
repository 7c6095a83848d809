"""Candidates: the model of one validated candidate file, the gates and their settings.

A candidate is one serve to qualify: model pin, engine, launch, bounded context and per-gate
settings. ``load_candidates`` reads a folder; reading and checking each file (includes, schema,
the campaign's baseline rules; every problem names the file and the field) is
``candidate_file.py``'s. Here: the model, the gates in order and their default settings.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tp2qual.budget import DEFAULT_FLOOR_TOK_S, DEFAULT_PREFILL_S, NO_FLOOR, TimeBudget
from tp2qual.candidate_file import ADMISSION_FLAG as ADMISSION_FLAG  # tests import it here
from tp2qual.candidate_file import (
    TP2_ENV_DEFAULTS,
    CandidateFile,
    read_candidate_file,
    read_candidate_files,
)
from tp2qual.draft import draft_placeholders
from tp2qual.exceptions import CandidateError
from tp2qual.lane_changes import Change

GATES = (
    "preflight",
    "nccl",
    "model_list",
    "deterministic",
    "repetition",
    "tool_calls",
    "capacity",
    "agreement",
    "throughput",
)

# Settings a gate gets when the candidate says nothing; the candidate's table is merged on top.
GATE_DEFAULTS: dict[str, dict[str, Any]] = {
    # finish_reasons: the endings a gate allows on every request (checks/answers.py
    # check_finish); known answers and the needle must stop, long outputs may hit their cap.
    "deterministic": {
        "repeats": 3,
        "seed": 1234,
        "max_tokens": 48,
        "prompts": [],
        "finish_reasons": ["stop"],
    },
    "repetition": {
        "max_tokens": 512,
        "prompts": [],
        "thresholds": {},
        "finish_reasons": ["stop", "length"],
    },
    "tool_calls": {
        "modes": ["auto", "required", "named", "auto-stream", "named-stream", "result"],
        "max_tokens": 128,
        # the answer after the tool's result; the calls end as the engine's rule says
        # (engines/*.py tool_finish, checks/toolcalls.py expected_finish)
        "finish_reasons": ["stop"],
        # Power (checks/tool_power.py): each required mode asked `repeats` times; all passing,
        # a failure rate above 1 - 0.05 ** (1 / repeats) is excluded at 95 %, judged against
        # max_failure_rate (a parser failing one call in five), else "not judged: no power".
        # One call by default: files that ask for power say so (the campaign: 20). long_fill:
        # one more call after a prompt of that share of max_model_len (0: none).
        "repeats": 1,
        "max_failure_rate": 0.2,
        "long_fill": 0.0,
    },
    "capacity": {
        "fill": 0.9,
        "over_by": 1.25,
        "stream_over_bound": False,
        "needle_max_tokens": 16,
        "finish_reasons": ["stop"],
        # The context ladder (perf/ladder.py): rows at these shares of the bound and at these
        # prompt sizes where the bound holds them, beside the needle's fill; rows within
        # ladder_merge of each other are one.
        "ladder_fractions": [0.125, 0.5],
        "ladder_tokens": [],
        "ladder_merge": 0.1,
    },
    # Gate 07 (docs/agreement.md). The closeness walk: at the first differing token each side's
    # token is in the other's top_n and at most max_divergence_gap nat below its own top choice;
    # over the common prefix the chosen tokens' logprobs differ by at most max_abs_delta_logprob.
    # Greedy is argmax within argmax_epsilon. Self-consistency (self_*, and near the bound:
    # a prompt of near_bound_fill x max_model_len) and teacher forcing on the reference's
    # answers (tf_*) bound mean and p99 |delta logprob|, top-1 agreement and a mean KL estimate,
    # judged when at least min_aligned_share of the positions align. The self bounds leave room
    # over the real pairs measured here (docs/agreement.md: self mean 0.02-0.06, top-1 0.98);
    # the tf bounds are sized below, and say the fault they catch in --plan. Accuracy: the
    # first accuracy_items of the shipped arithmetic set; a drop judged by the exact one-sided
    # McNemar test at accuracy_alpha, and only where that test can see a drop of
    # accuracy_max_drop. They are asked only where a drop can be judged from them
    # (tp2qual.accuracy_asked): the candidate has a reference, or a candidate loaded beside it is
    # judged against it; accuracy_record_unjudged asks them anyway, for a run to be brought in
    # later as another run's reference.
    "agreement": {
        "top_n": 5,
        "prompts": 0,
        "max_abs_delta_logprob": 0.5,
        "max_divergence_gap": 1.0,
        "min_exact_share": 0.0,
        "argmax_epsilon": 0.01,
        "min_aligned_share": 0.9,
        "self_max_mean_abs_delta": 0.1,
        "self_max_p99_abs_delta": 1.0,
        "self_min_top1_agreement": 0.95,
        "self_max_mean_kl": 0.05,
        # Warm against cold (the same prompt decoded again, its prefix cached): the largest
        # |Δ logprob| over the common prefix. Its own bound, sized on the healthy serves here at
        # about 2x their worst: 0.186 (llama-cpp-python's prompt cache), 0 on vLLM CPU (five
        # runs each), 9e-06 on SGLang CPU (docs/agreement.md "Healthy spread"). It was the self
        # p99 (1.0) before.
        "warm_max_abs_delta_logprob": 0.4,
        # Sized on the healthy pairs on record (worst of TP2-vs-TP1 vLLM CPU and docker-vs-local
        # llama.cpp: mean 0.031, p99 0.172, top-1 0.976, KL 0.0012) with about 2x room; each
        # FAILs Gaussian logit noise of sigma 0.26-0.28 (true KL 0.013-0.015 nat/token) on the
        # synthetic pairs of tests/logitnoise.py, so a 4-bit-size fault (KL >= 0.03) FAILs.
        # The top-1 share is judged by its argmax flips (checks/agreement/flips.py): FAIL when
        # more than a flip rate of 1 - min_top1_agreement explains at flip_alpha (binomial over
        # the positions). 0.97: the healthy pairs flip 1.3 and 2.4 %; over 400 positions it
        # FAILs from 22 flips, as the bare 0.95 did from 21, yet 32 positions at the self bound
        # (the near-bound prompt) need 6, not 2. A serve that swaps near-ties flips while |Δ|
        # and KL hold (docs/agreement.md).
        "tf_max_mean_abs_delta": 0.06,
        "tf_max_p99_abs_delta": 0.4,
        "tf_min_top1_agreement": 0.97,
        "tf_max_mean_kl": 0.004,
        "flip_alpha": 0.01,
        "near_bound_fill": 0.75,
        "near_bound_max_tokens": 32,
        "accuracy_items": 30,
        "accuracy_max_tokens": 96,
        "accuracy_alpha": 0.05,
        "accuracy_max_drop": 0.1,
        # A stated prior: a fifth of the reference's wrong items come back by TP-level churn
        # alone (a reasoning serve at temperature 0 flips items both ways); the power is sized
        # at it or the pair's own gain share, whichever is larger (checks.accuracy.drop_power).
        "accuracy_gain_rate": 0.2,
        "accuracy_record_unjudged": False,
    },
    "throughput": {
        "samples": 5,
        "warmup": 1,
        "prompt_words": 96,
        "max_tokens": 128,
        "floors": {},
        "finish_reasons": ["stop", "length"],  # a sample capped at max_tokens is still timed
    },
    "nccl": {"probe_timeout_s": 120.0},
}


def cache_dir() -> Path:
    """Where installs put what candidates load: engine venvs, converted models, wheels."""
    return Path(os.environ.get("TP2QUAL_CACHE") or "~/.cache/tp2qual").expanduser()


def usable_cpus() -> int:
    """The cores this process may run on (a container or taskset may allow fewer than exist)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def engine_threads() -> int:
    """``{threads}``: every usable core but one, which the suite's client and whatever else runs
    here keep. A CPU engine whose threads meet at spin barriers (llama.cpp) collapses when one of
    them is descheduled: on 2 cores with 2 CPU-bound neighbours, 2 threads decoded 5.5 tok/s and
    1 thread 55 (benchmarks/busy_machine.py, 2026-12-01)."""
    return max(1, usable_cpus() - 1)


@dataclass(frozen=True)
class Candidate:
    """One validated candidate file. ``spec`` is the parsed TOML, untouched."""

    path: Path
    spec: dict[str, Any] = field(repr=False)
    # A lane's [lane.changes] as applied on its baseline's launch (lane_changes.py), for --plan.
    lane_changes: tuple[Change, ...] = field(default=(), repr=False)

    @property
    def name(self) -> str:
        return self.spec["name"]

    @property
    def model(self) -> dict[str, Any]:
        return self.spec["model"]

    @property
    def engine(self) -> str:
        return self.spec["engine"]["kind"]

    @property
    def launch(self) -> dict[str, Any]:
        return self.spec["launch"]

    @property
    def launcher_kind(self) -> str:
        return self.launch["kind"]

    @property
    def tp(self) -> int:
        return self.spec["serve"]["tensor_parallel_size"]

    @property
    def max_model_len(self) -> int:
        return self.spec["serve"]["max_model_len"]

    @property
    def served_name(self) -> str:
        return self.model["served_name"]

    @property
    def gpus(self) -> dict[str, Any]:
        return self.spec.get("gpus", {"count": 0})

    @property
    def readiness_timeout_s(self) -> float:
        return float(self.launch.get("readiness_timeout_s", 600))

    def gate(self, name: str) -> dict[str, Any]:
        """The gate's settings: defaults with the candidate's own table merged on top."""
        merged = copy.deepcopy(GATE_DEFAULTS.get(name, {}))
        merged.update(copy.deepcopy(self.spec.get("gates", {}).get(name, {})))
        return merged

    @property
    def reference(self) -> str | None:
        """The candidate whose agreement transcript this one is compared with:
        ``[reference] candidate``, else a lane's baseline (``[lane] after``)."""
        named = self.spec.get("reference", {}).get("candidate")
        return named or self.spec.get("lane", {}).get("after")

    def time_budget(
        self, gate: str | None = None, floor_tok_s: float | None = None, floor_source: str = ""
    ) -> TimeBudget:
        """The per-request time budget: the decode floor that applies (``serve.min_decode_tok_s``
        if set, else ``floor_tok_s``, the one gate 08 judges in this run, else the written
        median floor) and the prefill allowance; a gate may fix its own."""
        serve = self.spec["serve"]
        written = self.gate("throughput").get("floors", {}).get("decode_tok_s_median")
        chosen = [
            (serve.get("min_decode_tok_s"), "serve.min_decode_tok_s"),
            (floor_tok_s, floor_source or "gate 08's decode floor"),
            (written, "gates.throughput.floors.decode_tok_s_median"),
        ]
        floor, source = next(((f, s) for f, s in chosen if f), (DEFAULT_FLOOR_TOK_S, NO_FLOOR))
        fixed = self.gate(gate).get("request_timeout_s") if gate else None
        return TimeBudget(
            floor_tok_s=float(floor),
            prefill_s=float(serve.get("prefill_budget_s", DEFAULT_PREFILL_S)),
            fixed_s=float(fixed) if fixed else None,
            floor_source=source,
        )

    @property
    def request_settings(self) -> dict[str, Any]:
        """``[gates.request]``: sampling over the neutral defaults and extra body fields."""
        return copy.deepcopy(self.spec.get("gates", {}).get("request", {}))

    @property
    def reasoning_control(self) -> str:
        """The reasoning control every chat answer is held to (``checks.control``): the stated
        ``[gates.request] reasoning``, else ``off`` for a serve with no reasoning parser (nothing
        may come back as reasoning) and ``engine default`` for one with a parser."""
        stated = self.request_settings.get("reasoning")
        if stated:
            return str(stated)
        parser = (self.spec.get("engine", {}).get("parsers") or {}).get("reasoning")
        return "engine default" if parser else "off"

    def python(self) -> Path:
        """The interpreter ``{python}`` names: the engine's own venv when ``launch.python`` says
        one, else the suite's."""
        venv = self.launch.get("python")
        return cache_dir() / venv / "bin" / "python" if venv else Path(sys.executable)

    def not_applicable(self, gate: str) -> str | None:
        """Why a gate does not apply to this candidate, or None when it does."""
        if gate == "nccl" and self.tp == 1:
            return "tensor_parallel_size = 1: no NCCL communicator is formed"
        return self.spec.get("gates", {}).get("not_applicable", {}).get(gate)

    def env(self) -> dict[str, str]:
        """Launch environment: campaign transport defaults for TP>1, then the candidate's own."""
        env: dict[str, str] = dict(TP2_ENV_DEFAULTS) if self.tp > 1 else {}
        env.update(self.launch.get("env", {}))
        for key, override in self.launch.get("env_overrides", {}).items():
            if override["value"] is None:
                env.pop(key, None)
            else:
                env[key] = override["value"]
        return env

    def with_launch_changes(
        self, env: Mapping[str, str | None], docker: Mapping[str, Any], reason: str
    ) -> Candidate:
        """This candidate with environment overrides (None: unset) and container settings
        changed, each override carrying ``reason`` — how a remedy is tried, never saved."""
        spec = copy.deepcopy(self.spec)
        overrides = spec["launch"].setdefault("env_overrides", {})
        for key, value in env.items():
            overrides[key] = {"value": value, "reason": reason}
        if docker:
            spec["launch"].setdefault("docker", {}).update(docker)
        return replace(self, spec=spec)

    def model_file(self) -> Path | None:
        """The local weights file, resolved (``pkg:<module>/<file>`` looks inside a package)."""
        ref = self.model.get("file")
        if ref is None:
            return None
        if ref.startswith("cache:"):
            return cache_dir() / ref[len("cache:") :]
        if ref.startswith("pkg:"):
            module, _, rel = ref[4:].partition("/")
            spec = importlib.util.find_spec(module)
            if spec is None or not spec.submodule_search_locations:
                raise CandidateError(
                    f"model.file: package {module!r} is not installed (pip install -e '.[local]')",
                    candidate=self.name,
                )
            return Path(next(iter(spec.submodule_search_locations))) / rel
        path = Path(ref).expanduser()
        return path if path.is_absolute() else (self.path.parent / path).resolve()

    def placeholders(self, *, port: int, host: str = "127.0.0.1") -> dict[str, str]:
        model_file = self.model_file()
        return {
            "python": str(self.python()),
            "host": host,
            "port": str(port),
            "threads": os.environ.get("TP2QUAL_THREADS") or str(engine_threads()),
            "model_file": str(model_file) if model_file else "",
            "model_dir": str(model_file.parent) if model_file else "",
            "model_repo": self.model["repo"],
            "revision": self.model["revision"],
            "served_name": self.served_name,
            "max_model_len": str(self.max_model_len),
            "tp": str(self.tp),
            "chat_format": self.spec["engine"].get("chat_format", ""),
        } | draft_placeholders(self.model, self.path)

    @property
    def command(self) -> list[str]:
        """``launch.command`` then ``launch.append``, placeholders unfilled."""
        return [*self.launch["command"], *self.launch.get("append", [])]


def load_candidate(path: Path) -> Candidate:
    """Parse and validate one file; raise CandidateError naming file, field and problem."""
    return _candidate(read_candidate_file(path))


def load_candidates(folders: Iterable[Path]) -> list[Candidate]:
    """Every ``*.toml`` in the folders, validated; all problems reported together."""
    return [_candidate(f) for f in read_candidate_files(folders)]


def _candidate(file: CandidateFile) -> Candidate:
    return Candidate(path=file.path, spec=file.spec, lane_changes=file.lane_changes)
