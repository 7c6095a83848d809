"""Candidate files: TOML, checked against a JSON Schema before anything starts.

A candidate is one serve to qualify: model pin, engine, launch, bounded context and per-gate
settings. ``load_candidates`` reads a folder; every problem names the file and the field.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from tp2qual.budget import DEFAULT_FLOOR_TOK_S, DEFAULT_PREFILL_S, TimeBudget
from tp2qual.draft import draft_placeholders, draft_problems
from tp2qual.engines import ENGINES
from tp2qual.exceptions import CandidateError
from tp2qual.lane_changes import Change, lane_overlay
from tp2qual.perf.floors import derivation_problems, key_problems

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

# The campaign's transport controls for TP>1 (PCIe, no NVLink, WSL2; docs/campaign.md): P2P off
# with shared-memory fallback, NCCL cuMem off (CUDA error 999 under WSL2), logs on for gate 01.
TP2_ENV_DEFAULTS: dict[str, str] = {
    "NCCL_P2P_DISABLE": "1",
    "NCCL_CUMEM_ENABLE": "0",
    "NCCL_CUMEM_HOST_ENABLE": "0",
    "NCCL_DEBUG": "INFO",
}

# Settings a gate gets when the candidate says nothing; the candidate's table is merged on top.
GATE_DEFAULTS: dict[str, dict[str, Any]] = {
    "deterministic": {"repeats": 3, "seed": 1234, "max_tokens": 48, "prompts": []},
    "repetition": {"max_tokens": 512, "prompts": [], "thresholds": {}},
    "tool_calls": {
        "modes": ["auto", "required", "named", "auto-stream", "named-stream", "result"],
        "max_tokens": 128,
    },
    "capacity": {"fill": 0.9, "over_by": 1.25, "stream_over_bound": False, "needle_max_tokens": 16},
    # Tolerances that pass a real TP1/TP2 pair (vLLM CPU, SmolLM2-135M, 2026-12-01): 3/5 greedy
    # outputs identical, 2 diverged at near-ties inside each other's top 5, largest |Δ logprob|
    # over the common prefix 0.17; 0.5 leaves room for that pair's kind of change, not for a
    # moved distribution. Exact agreement is not required: the closeness rule decides.
    # Accuracy: the first accuracy_items of the shipped arithmetic set, a drop against the
    # reference judged by the exact one-sided McNemar test at accuracy_alpha.
    "agreement": {
        "top_n": 5,
        "max_abs_delta_logprob": 0.5,
        "min_exact_share": 0.0,
        "accuracy_items": 30,
        "accuracy_max_tokens": 96,
        "accuracy_alpha": 0.05,
    },
    "throughput": {"samples": 5, "warmup": 1, "prompt_words": 96, "max_tokens": 128, "floors": {}},
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


@cache
def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((Path(__file__).with_name("candidate.schema.json")).read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


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

    def time_budget(self, gate: str | None = None) -> TimeBudget:
        """The per-request time budget: the decode floor (``serve.min_decode_tok_s``, else the
        throughput gate's median floor) and the prefill allowance; a gate may fix its own."""
        serve = self.spec["serve"]
        floors = self.gate("throughput").get("floors", {})
        floor = serve.get("min_decode_tok_s") or floors.get("decode_tok_s_median")
        fixed = self.gate(gate).get("request_timeout_s") if gate else None
        return TimeBudget(
            floor_tok_s=float(floor or DEFAULT_FLOOR_TOK_S),
            prefill_s=float(serve.get("prefill_budget_s", DEFAULT_PREFILL_S)),
            fixed_s=float(fixed) if fixed else None,
        )

    @property
    def request_settings(self) -> dict[str, Any]:
        """``[gates.request]``: sampling over the neutral defaults and extra body fields."""
        return copy.deepcopy(self.spec.get("gates", {}).get("request", {}))

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

    def argv(self, *, port: int, host: str = "127.0.0.1") -> list[str]:
        values = self.placeholders(port=port, host=host)
        return [fill(part, values) for part in self.command]


_PLACEHOLDER = re.compile(r"\{\{([a-z_]+)\}\}|\{([a-z_]+)\}")


def fill(text: str, values: Mapping[str, str]) -> str:
    """Replace known ``{name}`` placeholders only, so JSON arguments keep their braces;
    ``{{name}}`` escapes one (it becomes ``{name}``) for a wrapper to fill later."""

    def one(match: re.Match[str]) -> str:
        escaped, name = match.groups()
        return "{" + escaped + "}" if escaped else values.get(name, match.group(0))

    return _PLACEHOLDER.sub(one, text)


def _format_error(path: Path, error: jsonschema.ValidationError) -> str:
    where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
    return f"{path}: {where}: {error.message}"


# Engine flags that turn on speculative decoding / MTP, and flags that admit more than one request.
_SPECULATIVE = ("--speculative", "--num-speculative-tokens", "--spec-", "--draft-model", "--mtp")
# Each engine's own admission flag and what it admits when the flag is absent
# (tp2qual.engines). A baseline must set it to 1: neither default is one request.
ADMISSION_FLAG: dict[str, tuple[str, str]] = {
    kind: engine.admission for kind, engine in ENGINES.items() if engine.admission
}
_ADMISSION = tuple(flag for flag, _ in ADMISSION_FLAG.values())


def _baseline_flag_problems(spec: Mapping[str, Any]) -> list[str]:
    """A baseline serves one request at a time and never decodes speculatively
    (docs/campaign.md): a lane that does must say so (``lane.kind = "optional"``). ``spec`` is
    schema-valid."""
    if spec.get("lane", {}).get("kind") == "optional":
        return []
    launch = spec.get("launch", {})
    argv = [str(a) for a in (*launch.get("command", []), *launch.get("append", []))]
    problems = [
        f"launch.command: {arg.split('=')[0]} turns on speculative decoding; a baseline never "
        "does (make it an optional lane after the baseline)"
        for arg in argv
        if arg.startswith(_SPECULATIVE)
    ]
    given = admission_flags(argv)
    problems += [
        f"launch.command: {name} admits more than one request at a time"
        for name, value in given.items()
        if value not in ONE_REQUEST
    ]
    return problems + _admission_missing(spec.get("engine", {}).get("kind", ""), given)


ONE_REQUEST = ("1",)  # the value a baseline gives its admission flag


def admission_flags(argv: Iterable[str]) -> dict[str, str]:
    """The admission flags a command gives, with their values (``--flag v`` or ``--flag=v``)."""
    args = [str(a) for a in argv]
    given: dict[str, str] = {}
    # Each flag with the argument after it (the last one with ""); an empty command has no pairs.
    for flag, value in zip(args, [*args[1:], ""], strict=False):
        name, eq, inline = flag.partition("=")
        if name in _ADMISSION:
            given[name] = inline if eq else value
    return given


def _admission_missing(engine: str, given: Mapping[str, str]) -> list[str]:
    """A vLLM or SGLang baseline without its engine's admission flag admits many requests: at
    any TP, since the TP1 reference (gate 07) and the dated TP1 figures a TP2 serve is compared
    with must differ from it in the topology only (docs/campaign.md)."""
    if engine not in ADMISSION_FLAG:
        return []
    flag, default = ADMISSION_FLAG[engine]
    if flag in given:
        return []
    return [
        f"launch.command: no {flag} 1: {default}; a baseline serves one request at a time "
        f'(add "{flag}", "1", or make it an optional lane)'
    ]


def _semantic_problems(spec: Mapping[str, Any]) -> list[str]:
    """Rules a schema cannot say well: the campaign's baseline controls for TP>1
    (docs/campaign.md). Called only on a schema-valid ``spec`` (``load_candidate``), so its
    fields have their declared types."""
    problems: list[str] = [*_baseline_flag_problems(spec), *draft_problems(spec)]
    throughput = spec.get("gates", {}).get("throughput", {})
    problems += key_problems(throughput) + derivation_problems(throughput, spec)
    launch = spec.get("launch", {})
    overridden = launch.get("env_overrides", {})
    alloc = launch.get("env", {}).get("PYTORCH_CUDA_ALLOC_CONF", "")
    if "expandable_segments:true" in alloc.replace(" ", "").lower() and (
        "PYTORCH_CUDA_ALLOC_CONF" not in overridden
    ):
        problems.append(
            "launch.env.PYTORCH_CUDA_ALLOC_CONF: expandable_segments breaks the first worker "
            "allocation under WSL2; use the native allocator or add launch.env_overrides "
            "with a reason"
        )
    if spec.get("serve", {}).get("tensor_parallel_size", 1) > 1:
        for key, default in TP2_ENV_DEFAULTS.items():
            given = launch.get("env", {}).get(key)
            if given is not None and given != default and key not in overridden:
                problems.append(
                    f"launch.env.{key}: {given!r} differs from the TP2 default {default!r}; "
                    "move it to launch.env_overrides with a written reason"
                )
    return problems


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CandidateError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise CandidateError(f"{path}: not valid TOML: {exc}") from None


def deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge tables; the including file wins, arrays are replaced whole."""
    merged = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _with_includes(
    path: Path, spec: dict[str, Any], chain: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """``include = ["_shared.toml"]``: shared tables (e.g. campaign gate settings) under the file;
    an included file may include others (an optional lane includes its baseline). ``include`` is
    not in the schema (it is gone before validation), so its type is checked here."""
    chain = (*chain, path)
    rels = spec.get("include", [])
    if not isinstance(rels, list) or not all(isinstance(r, str) for r in rels):
        raise _include_error(chain, f"{rels!r} is not an array of file names")
    merged: dict[str, Any] = {}
    for rel in rels:
        part = path.parent / rel
        if part.resolve() in {p.resolve() for p in chain}:
            names = " -> ".join(p.name for p in (*chain, part))
            raise _include_error(chain, f"{rel!r} closes a cycle: {names}")
        try:
            part_spec = _read_toml(part)
        except CandidateError as exc:
            raise _include_error(chain, str(exc)) from None
        merged = deep_merge(merged, _with_includes(part, part_spec, chain))
    return deep_merge(merged, {k: v for k, v in spec.items() if k != "include"})


def _include_error(chain: tuple[Path, ...], problem: str) -> CandidateError:
    """Name the candidate file the user edits, and the part that holds the bad include."""
    where = f" (in {chain[-1].name})" if len(chain) > 1 else ""
    return CandidateError(f"{chain[0]}: include: {problem}{where}")


def load_candidate(path: Path) -> Candidate:
    """Parse and validate one file; raise CandidateError naming file, field and problem."""
    own = _read_toml(path)
    spec = _with_includes(path, own)
    errors = sorted(_validator().iter_errors(spec), key=lambda e: list(e.absolute_path))
    # The semantic rules read typed fields (`tensor_parallel_size > 1`, the command's flags), so
    # they run only on a file the schema accepted; otherwise the schema's lines say what is wrong.
    # A lane's changes are applied first: the rules judge the launch it will run.
    overlay, problems = None, []
    if not errors:
        base = _with_includes(path, {"include": own.get("include", [])})
        if overlay := lane_overlay(own, base, spec):
            spec = {**spec, "launch": overlay.launch}
        problems = [*(overlay.problems if overlay else ()), *_semantic_problems(spec)]
    lines = [_format_error(path, e) for e in errors] or [f"{path}: {p}" for p in problems]
    if lines:
        raise CandidateError("invalid candidate file\n  " + "\n  ".join(lines))
    if path.stem != spec["name"]:
        raise CandidateError(
            f"{path}: name: {spec['name']!r} must match the file name {path.stem!r}"
        )
    return Candidate(path=path, spec=spec, lane_changes=overlay.changes if overlay else ())


def load_candidates(folders: Iterable[Path]) -> list[Candidate]:
    """Every ``*.toml`` in the folders, validated; all problems reported together."""
    folders = list(folders)
    found: list[Candidate] = []
    problems: list[str] = []
    for folder in folders:
        if not folder.is_dir():
            problems.append(f"{folder}: candidate folder does not exist")
            continue
        for path in sorted(folder.glob("[!_]*.toml")):  # _*.toml: included parts
            try:
                found.append(load_candidate(path))
            except CandidateError as exc:
                problems.append(str(exc))
    names = [c.name for c in found]
    problems += [
        f"{c.path}: reference.candidate: {c.spec['reference']['candidate']!r} is not a candidate "
        f"in {', '.join(str(f) for f in folders)}"
        for c in found
        if "reference" in c.spec and c.spec["reference"]["candidate"] not in names
    ]
    problems += [
        f"candidate name {n!r} is defined twice"
        for n in sorted({n for n in names if names.count(n) > 1})
    ]
    if problems:
        raise CandidateError("\n".join(problems))
    return found
