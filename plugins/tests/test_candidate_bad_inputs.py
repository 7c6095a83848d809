"""Every malformed candidate file gets one line per problem naming the file, the field and the
problem, and pytest stops with a usage error: never a traceback, never an INTERNALERROR.

The table holds the hand-written cases plus, for every table the schema declares, the table
given as a scalar and one of its fields given the wrong type (generated from the schema, so a
new table is tried as soon as it exists).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tp2qual.candidate
from tp2qual.candidate import load_candidates
from tp2qual.exceptions import CandidateError

SCHEMA: dict[str, Any] = json.loads(
    Path(tp2qual.candidate.__file__).with_name("candidate.schema.json").read_text()
)
REVISION = "0123456789abcdef0123456789abcdef01234567"

# A valid candidate with every table present, so a row's change is its only problem (but
# lane.changes, which needs a baseline to include, and model.draft, which the command must name:
# LANE_ROWS and DRAFT_ROWS build those).
BASE: dict[str, Any] = {
    "name": "cand",
    "description": "every table, valid",
    "lane": {"kind": "baseline", "why": "the reference serve"},
    "model": {"repo": "org/model", "revision": REVISION, "served_name": "m"},
    "engine": {"kind": "vllm", "version": "0.1", "parsers": {"tool": "hermes"}},
    "launch": {
        "kind": "process",
        "command": ["serve", "--port", "{port}", "--max-num-seqs", "1"],
        "env": {"A": "1"},
        "env_overrides": {
            "NCCL_P2P_DISABLE": {"value": "0", "reason": "NVLink bridge on this host"}
        },
        "docker": {"image": "img", "pin": "sha256:" + "0" * 64, "ulimits": {"memlock": -1}},
    },
    "gpus": {"count": 0, "memory_gib": 1.0},
    "serve": {"tensor_parallel_size": 1, "max_model_len": 4096},
    "baseline": {"date": "2026-01-01", "source": "a test", "tp": 1, "figures": {"tpot_ms": 10.0}},
    "gates": {
        "not_applicable": {"nccl": "one GPU here"},
        "deterministic": {"prompts": [{"id": "a", "prompt": "2+2?", "expect": ["4"]}]},
        "repetition": {"max_tokens": 64, "thresholds": {"ratio": 0.5}},
        "tool_calls": {
            "tool": {"name": "f", "description": "d", "parameters": {"type": "object"}},
            "prompt": "call f",
            "arguments_expect": {"x": "y"},
            "result": "r",
            "result_expect": ["r"],
        },
        "capacity": {"fill": 0.9},
        "throughput": {"samples": 5, "floors": {"decode_tok_s_median": 1.0}, "why": "a test"},
        "nccl": {"probe_timeout_s": 10.0},
    },
}

Content = str | bytes | dict[str, Any]


@dataclass(frozen=True)
class Bad:
    """One malformed input: the files of its candidates folder and the fragments one problem
    line must hold (``{dir}`` stands for the folder)."""

    id: str
    files: dict[str, Content]
    expect: tuple[str, ...]
    table: str | None = None  # the schema table this row gives the wrong type
    folder: bool = True  # False: the candidates folder itself is missing
    dirs: tuple[str, ...] = ()  # sub-folders to make


def changed(changes: dict[str, Any], base: dict[str, Any] = BASE) -> dict[str, Any]:
    """BASE with dotted paths set (``{"serve.max_model_len": -1}``)."""
    spec = copy.deepcopy(base)
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = spec
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return spec


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        pairs = (f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items())
        return "{ " + ", ".join(pairs) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)  # numbers; strings as TOML basic strings


def to_toml(spec: dict[str, Any]) -> str:
    return "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in spec.items())


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    return SCHEMA["$defs"][ref.rsplit("/", 1)[1]] if ref else node


def schema_tables(node: dict[str, Any] = SCHEMA, prefix: str = "") -> dict[str, dict[str, Any]]:
    """Dotted path -> schema of every named table (a property whose type is object)."""
    found: dict[str, dict[str, Any]] = {}
    for name, sub in node.get("properties", {}).items():
        sub = _resolve(sub)
        if sub.get("type") == "object":
            found[prefix + name] = sub
            found |= schema_tables(sub, f"{prefix}{name}.")
    return found


WRONG: dict[str, Any] = {
    "string": 7,
    "integer": "seven",
    "number": "seven",
    "boolean": "yes",
    "array": 7,
    "object": 7,
}


def typed_member(table: dict[str, Any]) -> tuple[str, str] | None:
    """A member of the table with one declared type, as (name, type): its first typed field
    that is not itself a table (those have their own rows), or any key of a typed map."""
    for name, sub in table.get("properties", {}).items():
        kind = _resolve(sub).get("type")
        if isinstance(kind, str) and kind != "object":
            return name, kind
    extra = table.get("additionalProperties")
    if isinstance(extra, dict) and isinstance(kind := _resolve(extra).get("type"), str):
        return "X", kind
    return None


def wrong_type_rows() -> list[Bad]:
    rows = []
    for table, schema in schema_tables().items():
        rows.append(
            Bad(
                f"{table}-not-a-table",
                {"cand.toml": changed({table: 7})},
                ("{dir}/cand.toml", f": {table}: ", "7 is not of type 'object'"),
                table=table,
            )
        )
        if member := typed_member(schema):
            name, kind = member
            wrong = WRONG[kind]
            rows.append(
                Bad(
                    f"{table}.{name}-wrong-type",
                    {"cand.toml": changed({f"{table}.{name}": wrong})},
                    ("{dir}/cand.toml", f": {table}.{name}: ", f"is not of type '{kind}'"),
                    table=table,
                )
            )
    return rows


def _part(include: list[str]) -> str:
    return to_toml({"include": include})


# A lane over BASE (as base.toml): it includes its baseline and states only its changes.
LANE_BASE = changed({"name": "base", "launch.command": ["serve", "--eager", "--port", "{port}"]})


def _lane(changes: dict[str, Any], **more: Any) -> dict[str, Content]:
    lane = {"include": ["base.toml"], "name": "cand", "lane": {"kind": "optional", "after": "base"}}
    lane["lane"]["changes"] = changes
    for dotted, value in more.items():
        lane = changed({dotted.replace("__", "."): value}, lane)
    return {"base.toml": LANE_BASE, "cand.toml": lane}


LANE_ROWS: list[Bad] = [
    Bad(
        "lane-replaces-a-flag-the-baseline-lacks",
        _lane({"replace": {"--nope": "1"}}),
        ("{dir}/cand.toml: lane.changes.replace.--nope: ", "not in the baseline's command"),
    ),
    Bad(
        "lane-replaces-a-flag-without-a-value",
        _lane({"replace": {"--eager": "1"}}),
        ("{dir}/cand.toml: lane.changes.replace.--eager: ", "takes no value"),
    ),
    Bad(
        "lane-removes-a-flag-the-baseline-lacks",
        _lane({"remove": ["--nope"]}),
        ("{dir}/cand.toml: lane.changes.remove: ", "--nope is not in the baseline's command"),
    ),
    Bad(
        "lane-adds-a-flag-the-baseline-has",
        _lane({"add": ["--port", "1"]}),
        ("{dir}/cand.toml: lane.changes.add: ", "--port is already in the baseline's command"),
    ),
    Bad(
        "lane-unsets-a-variable-the-baseline-lacks",
        _lane({"env_unset": ["NOPE"]}),
        ("{dir}/cand.toml: lane.changes.env_unset: ", "NOPE is not in the baseline's launch.env"),
    ),
    Bad(
        "lane-replace-key-not-a-flag",
        _lane({"replace": {"port": "1"}}),
        ("{dir}/cand.toml", ": lane.changes.replace: ", "'port' does not match"),
    ),
    Bad(
        "lane-copies-the-baseline-command",
        _lane({}, launch__command=["serve", "--eager", "--port", "{port}", "--x"]),
        ("{dir}/cand.toml: launch.command: ", "a lane states only what it changes", "'base'"),
    ),
    Bad(
        "lane-changes-without-its-baseline",
        {"cand.toml": changed({"lane": {"kind": "optional", "after": "b", "changes": {}}})},
        ("{dir}/cand.toml: lane.changes: ", "the baseline the file includes", '"b.toml"'),
    ),
]

# A speculative draft is pinned as the model is and named by the command through placeholders.
DRAFT_CMD = ["serve", "--port", "{port}", "--draft", "{draft_repo}@{draft_revision}"]
DRAFT_ROWS: list[Bad] = [
    Bad(
        "draft-revision-unpinned",
        {"cand.toml": changed({"model.draft": {"repo": "org/draft", "revision": "main"}})},
        ("{dir}/cand.toml", ": model.draft.revision: ", "'main' does not match"),
    ),
    Bad(
        "draft-the-command-never-names",
        {"cand.toml": changed({"model.draft": {"repo": "org/draft", "revision": REVISION}})},
        ("{dir}/cand.toml: launch.command: ", "pins org/draft", "never names {draft_repo}"),
    ),
    Bad(
        "draft-named-but-not-pinned",
        {"cand.toml": changed({"launch.command": DRAFT_CMD})},
        ("{dir}/cand.toml: launch.command: ", "no [model.draft] pins a draft"),
    ),
    Bad(
        "draft-in-another-cache",
        {
            "cand.toml": changed(
                {
                    "launch.command": DRAFT_CMD,
                    "model.hf_cache": "/hub",
                    "model.draft": {"repo": "o/d", "revision": REVISION, "hf_cache": "/other"},
                }
            )
        },
        ("{dir}/cand.toml: model.draft.hf_cache: ", "is not model.hf_cache"),
    ),
]

# model.hf_cache names a host path or a Docker volume (volume:<name>, read only by a container).
VOLUME_ROWS: list[Bad] = [
    Bad(
        "hf-cache-volume-badly-named",
        {"cand.toml": changed({"model.hf_cache": "volume:my cache"})},
        ("{dir}/cand.toml: model.hf_cache: ", "'volume:my cache' is not a host path nor volume:"),
    ),
    Bad(
        "hf-cache-volume-unnamed",
        {"cand.toml": changed({"model.hf_cache": "volume:"})},
        ("{dir}/cand.toml: model.hf_cache: ", "'volume:' is not a host path nor volume:<name>"),
    ),
    Bad(
        "hf-cache-volume-for-a-process",
        {"cand.toml": changed({"model.hf_cache": "volume:vllm-hfcache"})},
        (
            "{dir}/cand.toml: model.hf_cache: ",
            "'volume:vllm-hfcache' is a Docker volume, which only a container reads",
            "launch.kind is 'process'",
        ),
    ),
]


HAND: list[Bad] = [
    Bad("broken-toml", {"cand.toml": "name = \n"}, ("{dir}/cand.toml: not valid TOML", "line 1")),
    Bad(
        "unknown-key",
        {"cand.toml": changed({"serve.speculative_decoding": True})},
        ("{dir}/cand.toml", ": serve: ", "'speculative_decoding' was unexpected"),
    ),
    Bad(
        "unknown-top-level-key",
        {"cand.toml": changed({"colour": "red"})},
        ("{dir}/cand.toml", ": (top level): ", "'colour' was unexpected"),
    ),
    Bad(
        "missing-include",
        {"cand.toml": changed({"include": ["_missing.toml"]})},
        ("{dir}/cand.toml: include: ", "_missing.toml", "No such file"),
    ),
    Bad(
        "name-file-mismatch",
        {"cand.toml": changed({"name": "other"})},
        ("{dir}/cand.toml: name: ", "'other' must match the file name 'cand'"),
    ),
    Bad("missing-folder", {}, ("{dir}: candidate folder does not exist",), folder=False),
    Bad(
        "negative-context",
        {"cand.toml": changed({"serve.max_model_len": -1})},
        ("{dir}/cand.toml", ": serve.max_model_len: ", "-1 is less than the minimum of 256"),
    ),
    Bad(
        "unpinned-revision",
        {"cand.toml": changed({"model.revision": "main"})},
        ("{dir}/cand.toml", ": model.revision: ", "'main' does not match"),
    ),
    Bad(
        "tensor-parallel-size-two",
        {"cand.toml": changed({"serve.tensor_parallel_size": "two"})},
        ("{dir}/cand.toml", ": serve.tensor_parallel_size: ", "'two' is not of type 'integer'"),
    ),
    Bad(
        "only-a-name",
        {"cand.toml": 'name = "cand"\n'},
        ("{dir}/cand.toml", ": (top level): ", "'model' is a required property"),
    ),
    Bad(
        "empty-file",
        {"cand.toml": ""},
        ("{dir}/cand.toml", ": (top level): ", "'name' is a required property"),
    ),
    Bad(
        "non-utf8",
        {"cand.toml": b'name = "caf\xe9"\n'},
        ("{dir}/cand.toml: cannot read: ", "can't decode byte 0xe9"),
    ),
    Bad(
        "include-cycle",
        {
            "cand.toml": changed({"include": ["_a.toml"]}),
            "_a.toml": _part(["_b.toml"]),
            "_b.toml": _part(["_a.toml"]),
        },
        ("{dir}/cand.toml: include: ", "'_a.toml' closes a cycle", "(in _b.toml)"),
    ),
    Bad(
        "includes-itself",
        {"cand.toml": changed({"include": ["cand.toml"]})},
        ("{dir}/cand.toml: include: ", "'cand.toml' closes a cycle: cand.toml -> cand.toml"),
    ),
    Bad(
        "include-a-folder",
        {"cand.toml": changed({"include": ["parts"]})},
        ("{dir}/cand.toml: include: ", "parts: cannot read", "Is a directory"),
        dirs=("parts",),
    ),
    Bad(
        "include-not-an-array",
        {"cand.toml": changed({"include": "_shared.toml"})},
        ("{dir}/cand.toml: include: ", "is not an array of file names"),
    ),
    Bad(
        "include-a-number",
        {"cand.toml": changed({"include": [1]})},
        ("{dir}/cand.toml: include: ", "[1] is not an array of file names"),
    ),
    Bad(
        "included-part-broken",
        {"cand.toml": changed({"include": ["_part.toml"]}), "_part.toml": "[model\n"},
        ("{dir}/cand.toml: include: ", "_part.toml: not valid TOML"),
    ),
    Bad(
        "command-empty",
        {"cand.toml": changed({"launch.command": []})},
        ("{dir}/cand.toml", ": launch.command: ", "[]"),
    ),
    Bad(
        "alloc-conf-not-a-string",
        {"cand.toml": changed({"launch.env.PYTORCH_CUDA_ALLOC_CONF": 7})},
        ("{dir}/cand.toml", ": launch.env.PYTORCH_CUDA_ALLOC_CONF: ", "is not of type 'string'"),
    ),
    Bad(
        "tp2-transport-env-not-a-string",
        {
            "cand.toml": changed(
                {"serve.tensor_parallel_size": 2, "launch.env.NCCL_CUMEM_ENABLE": 1}
            )
        },
        ("{dir}/cand.toml", ": launch.env.NCCL_CUMEM_ENABLE: ", "1 is not of type 'string'"),
    ),
    # The one-request rule when the flag is absent: each engine's own flag, at any TP.
    Bad(
        "vllm-baseline-without-max-num-seqs",
        {"cand.toml": changed({"launch.command": ["serve", "--port", "{port}"]})},
        ("{dir}/cand.toml", ": launch.command: no --max-num-seqs 1: ", "vLLM 0.32.0 admits 256"),
    ),
    Bad(
        "sglang-tp2-baseline-without-max-running-requests",
        {
            "cand.toml": changed(
                {
                    "engine.kind": "sglang",
                    "serve.tensor_parallel_size": 2,
                    "launch.command": ["--tp", "2", "--port", "{port}"],
                }
            )
        },
        ("{dir}/cand.toml", ": launch.command: no --max-running-requests 1: ", "SGLang 0.5.23"),
    ),
    Bad(
        "sglang-baseline-with-the-vllm-flag",
        {"cand.toml": changed({"engine.kind": "sglang"})},  # BASE's command has --max-num-seqs
        ("{dir}/cand.toml", ": launch.command: no --max-running-requests 1: "),
    ),
    # Floors: a known figure and statistic, and a source that can give them.
    Bad(
        "floor-key-without-a-statistic",
        {"cand.toml": changed({"gates.throughput.floors": {"decode_tok_s": 1.0}})},
        ("{dir}/cand.toml", ": gates.throughput.floors.decode_tok_s: not <figure>_<stat>"),
    ),
    Bad(
        "roofline-floor-on-a-latency",
        {
            "cand.toml": changed(
                {
                    "gates.throughput.derived_floors": {
                        "ttft_s_median": {"fraction": 2.0, "of": "roofline", "why": "w"}
                    }
                }
            )
        },
        ("{dir}/cand.toml", "derived_floors.ttft_s_median: the roofline bounds decode_tok_s"),
    ),
    Bad(
        "roofline-floor-without-its-inputs",
        {
            "cand.toml": changed(
                {
                    "gates.throughput.derived_floors": {
                        "decode_tok_s_median": {"fraction": 0.1, "of": "roofline", "why": "w"}
                    }
                }
            )
        },
        (
            "{dir}/cand.toml",
            "derived_floors.decode_tok_s_median: of the roofline, which needs ",
            "model.active_params_b, model.bits_per_weight, gpus.bandwidth_gbs",
        ),
    ),
    Bad(
        "baseline-floor-across-definitions",
        {
            "cand.toml": changed(
                {
                    "baseline.figures": {"decode_tok_s_median": 65.0},
                    "baseline.definitions": {"decode_tok_s_median": "aggregate output tok/s"},
                    "gates.throughput.derived_floors": {
                        "decode_tok_s_median": {"fraction": 0.8, "of": "baseline", "why": "w"}
                    },
                }
            )
        },
        (
            "{dir}/cand.toml",
            "derived_floors.decode_tok_s_median: the baseline's decode_tok_s_median is not ",
            "not the same definition as the suite's (perf/sampling.py): aggregate output tok/s",
        ),
    ),
    Bad(
        "baseline-floor-definition-not-stated",
        {
            "cand.toml": changed(
                {
                    "baseline.figures": {"decode_tok_s_median": 65.0},
                    "gates.throughput.derived_floors": {
                        "decode_tok_s_median": {"fraction": 0.8, "of": "baseline", "why": "w"}
                    },
                }
            )
        },
        ("{dir}/cand.toml", "its definition is not stated (baseline.definitions."),
    ),
    Bad(
        "derived-floor-of-something-else",
        {
            "cand.toml": changed(
                {
                    "gates.throughput.derived_floors": {
                        "decode_tok_s_median": {"fraction": 0.8, "of": "a guess", "why": "w"}
                    }
                }
            )
        },
        (
            "{dir}/cand.toml",
            "gates.throughput.derived_floors.decode_tok_s_median.of: ",
            "'a guess'",
        ),
    ),
    Bad(
        "prompt-entry-not-a-table",
        {"cand.toml": changed({"gates.deterministic.prompts": [1]})},
        ("{dir}/cand.toml", ": gates.deterministic.prompts.0: ", "1 is not of type 'object'"),
    ),
]

ROWS: list[Bad] = HAND + LANE_ROWS + DRAFT_ROWS + VOLUME_ROWS + wrong_type_rows()


def make_folder(tmp_path: Path, bad: Bad) -> Path:
    folder = tmp_path / "cands"
    if not bad.folder:
        return folder
    folder.mkdir()
    for name in bad.dirs:
        (folder / name).mkdir()
    for name, content in bad.files.items():
        path = folder / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content if isinstance(content, str) else to_toml(content))
    return folder


def expected(bad: Bad, folder: Path) -> tuple[str, ...]:
    return tuple(fragment.replace("{dir}", str(folder)) for fragment in bad.expect)


def problem_lines(text: str) -> list[str]:
    """The message's lines that state a problem (not the headers around them)."""
    headers = ("invalid candidate file", "candidate files rejected")
    return [s for line in text.splitlines() if (s := line.strip()) and not s.startswith(headers)]


def test_the_base_candidate_is_valid(tmp_path: Path) -> None:
    (tmp_path / "cand.toml").write_text(to_toml(BASE))
    assert [c.name for c in load_candidates([tmp_path])] == ["cand"]


@pytest.mark.parametrize("bad", ROWS, ids=[b.id for b in ROWS])
def test_load_names_file_field_and_problem(tmp_path: Path, bad: Bad) -> None:
    folder = make_folder(tmp_path, bad)
    with pytest.raises(CandidateError) as info:
        load_candidates([folder])
    lines = problem_lines(str(info.value))
    want = expected(bad, folder)
    assert any(all(f in line for f in want) for line in lines), (want, lines)
    # Every problem is one line that starts with the file (or folder) it is about.
    assert lines and all(line.startswith(f"{folder}") and ": " in line for line in lines), lines
    assert "Traceback" not in str(info.value)


@pytest.mark.parametrize("bad", ROWS, ids=[b.id for b in ROWS])
def test_pytest_stops_with_a_usage_error(
    pytester: pytest.Pytester, tmp_path: Path, bad: Bad
) -> None:
    folder = make_folder(tmp_path, bad)
    result = pytester.runpytest(f"--candidates={folder}", "-p", "no:cacheprovider")
    output = "\n".join(result.outlines + result.errlines)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    assert "Traceback" not in output and "INTERNALERROR" not in output, output
    result.stderr.fnmatch_lines(["*candidate files rejected, nothing was started*"])
    want = expected(bad, folder)
    assert any(all(f in line for f in want) for line in result.errlines), output


def test_every_schema_table_has_a_wrong_type_row() -> None:
    tables = set(schema_tables())
    assert {"model", "launch.docker", "launch.env_overrides", "gates.nccl"} <= tables
    assert tables <= {b.table for b in ROWS}
