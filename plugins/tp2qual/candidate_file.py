"""Candidate files: TOML, checked against a JSON Schema before anything starts.

A file is read with its includes (``include = [...]``, deep-merged under it), a lane's changes
applied on its baseline's launch, then checked: the schema first, then the rules a schema cannot
say well (a baseline's one-request and no-speculation flags, the TP2 transport defaults, the
throughput floors). ``read_candidate_files`` reads folders; every problem names the file and the
field. Also here: ``fill``, the ``{name}`` placeholders a file's launch strings hold.
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from tp2qual.draft import draft_problems
from tp2qual.engines import ENGINES
from tp2qual.exceptions import CandidateError
from tp2qual.floor_table import derivation_problems, key_problems
from tp2qual.lane_changes import Change, lane_overlay
from tp2qual.model_cache import cache_problems

# The campaign's transport controls for TP>1 (PCIe, no NVLink, WSL2; docs/campaign.md): P2P off
# with shared-memory fallback, NCCL cuMem off (CUDA error 999 under WSL2), logs on for gate 01.
TP2_ENV_DEFAULTS: dict[str, str] = {
    "NCCL_P2P_DISABLE": "1",
    "NCCL_CUMEM_ENABLE": "0",
    "NCCL_CUMEM_HOST_ENABLE": "0",
    "NCCL_DEBUG": "INFO",
}


@dataclass(frozen=True)
class CandidateFile:
    """One candidate file, read and validated: what ``candidate.Candidate`` is made of."""

    path: Path
    spec: dict[str, Any]  # the parsed TOML with its includes (and a lane's changes) merged
    lane_changes: tuple[Change, ...] = ()


@cache
def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((Path(__file__).with_name("candidate.schema.json")).read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


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
    # A field may say in words what its pattern refuses ("refusal": the schema's own annotation)
    if (
        error.validator == "pattern"
        and isinstance(error.schema, Mapping)
        and (refusal := error.schema.get("refusal"))
    ):
        return f"{path}: {where}: {error.instance!r} {refusal}"
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
    (docs/campaign.md). Called only on a schema-valid ``spec`` (``read_candidate_file``), so its
    fields have their declared types."""
    problems: list[str] = [
        *_baseline_flag_problems(spec),
        *draft_problems(spec),
        *cache_problems(spec),
        *_reference_problems(spec),
    ]
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


def _reference_problems(spec: Mapping[str, Any]) -> list[str]:
    """``[reference]`` names another serve, or says why there can be none. It is never taken
    from an included file: a TP1 reference that includes its TP2 serve's file would otherwise
    name itself, and a lane would be compared with its baseline's reference, not its baseline."""
    reference = spec.get("reference")
    if reference is None:
        return []
    named, absent = reference.get("candidate"), reference.get("not_applicable")
    if (named is None) == (absent is None):
        return [
            "reference: give exactly one of candidate (the serve to agree with) and "
            "not_applicable (why none can be)"
        ]
    if named == spec["name"]:
        return [
            f"reference.candidate: {named!r} is this candidate itself; a reference is another "
            "serve (a TP1 of the same checkpoint, a lane's baseline, another engine)"
        ]
    return []


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
        included = _with_includes(part, part_spec, chain)
        included.pop("reference", None)  # the including file's own (see _reference_problems)
        if "baseline" in spec:  # a record is replaced whole, never merged key by key: a TP1
            included.pop("baseline", None)  # file's record must not keep its TP2 file's figures
        merged = deep_merge(merged, included)
    return deep_merge(merged, {k: v for k, v in spec.items() if k != "include"})


def _include_error(chain: tuple[Path, ...], problem: str) -> CandidateError:
    """Name the candidate file the user edits, and the part that holds the bad include."""
    where = f" (in {chain[-1].name})" if len(chain) > 1 else ""
    return CandidateError(f"{chain[0]}: include: {problem}{where}")


def read_candidate_file(path: Path) -> CandidateFile:
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
    return CandidateFile(path=path, spec=spec, lane_changes=overlay.changes if overlay else ())


def read_candidate_files(folders: Iterable[Path]) -> list[CandidateFile]:
    """Every ``*.toml`` in the folders, validated; all problems reported together."""
    folders = list(folders)
    found: list[CandidateFile] = []
    problems: list[str] = []
    for folder in folders:
        if not folder.is_dir():
            problems.append(f"{folder}: candidate folder does not exist")
            continue
        for path in sorted(folder.glob("[!_]*.toml")):  # _*.toml: included parts
            try:
                found.append(read_candidate_file(path))
            except CandidateError as exc:
                problems.append(str(exc))
    names = [c.spec["name"] for c in found]
    problems += [
        f"{c.path}: reference.candidate: {named!r} is not a candidate "
        f"in {', '.join(str(f) for f in folders)}"
        for c in found
        if (named := c.spec.get("reference", {}).get("candidate")) and named not in names
    ]
    problems += [
        f"candidate name {n!r} is defined twice"
        for n in sorted({n for n in names if names.count(n) > 1})
    ]
    if problems:
        raise CandidateError("\n".join(problems))
    return found
