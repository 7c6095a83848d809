"""The gates' SGLang rules against real SGLang 0.5.23 answers, recorded from the embedded SGLang
serve on the CPU (plugins/tests/data/sglang-0.5.23/, README there: command lines and request
bodies). Until these, every rule below was read in SGLang's source only.

Named and required calls both end ``finish_reason "tool_calls"`` (not vLLM's "stop" for named);
without ``SGLANG_TOOL_STRICT_LEVEL=2`` the arguments are left free and come back schema-invalid
(``[]``), which the gate fails; a prompt over the context length is a plain HTTP 400 streamed or
not, and one within it but over the KV pool is refused by the scheduler inside an HTTP 200 stream;
an echo's prompt logprobs sit at their own row (``reread_shift`` 0); ``/server_info`` carries
``max_total_num_tokens``; the ``server_args=`` line names the kernels; and the stand-in for
``sgl_kernel`` was loaded in every SGLang process and called 0 times in a whole qualification.
The diagnosis reads SGLang's rank prefixes and names the failed TP2 start (``pynccl_on_cpu``).
Which SGLang facts these hold, and which stay source only: ``engines/sglang_evidence.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import recorded

from tp2qual.__main__ import main
from tp2qual.candidate import load_candidate
from tp2qual.checks import ranks
from tp2qual.checks.agreement.rows import reread_rows
from tp2qual.checks.diagnosis import context, diagnose
from tp2qual.checks.diagnosis.failure import earliest, error_lines
from tp2qual.checks.kernels import chosen_kernels
from tp2qual.checks.overlength import OverBound, classify
from tp2qual.checks.toolcalls import check_call, expected_finish, reassemble_stream
from tp2qual.engines import OBJECT_ERROR, OPENAI_ERROR, engine_for
from tp2qual.perf.metrics import histogram_totals, parse

DATA = Path(__file__).parent / "data" / "sglang-0.5.23"
CANDIDATES = Path(__file__).resolve().parents[2] / "candidates"
SGLANG = engine_for("sglang")
TOOL = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
STAND_IN = "tp2qual sgl_kernel stand-in"


def _load(name: str) -> dict[str, Any]:
    return recorded.load(DATA / name)


def _call(name: str) -> tuple[list[dict[str, Any]], str | None]:
    return recorded.tool_call(DATA / name)


@pytest.mark.parametrize("mode", ["named", "named-stream", "required", "required-stream"])
def test_tool_calls_pass_under_the_engine_rule(mode: str) -> None:
    calls, got = _call(f"tool-{mode}.json")
    assert got == "tool_calls"  # what SGLang really said, named included
    allowed, rule = expected_finish("sglang", mode)
    verdict = check_call(calls, got, "get_weather", TOOL, allowed, rule)
    assert verdict.ok, verdict.reason
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}


def test_a_named_call_that_ended_stop_would_fail_on_sglang() -> None:
    """SGLang's rule admits only 'tool_calls' (vLLM's admits 'stop' for named too): the real
    answer holds it, so a named call ending 'stop' is not SGLang's way and fails."""
    calls, _ = _call("tool-named.json")
    allowed, rule = expected_finish("sglang", "named")
    assert allowed == frozenset({"tool_calls"})
    assert not check_call(calls, "stop", "get_weather", TOOL, allowed, rule).ok


@pytest.mark.parametrize("mode", ["named", "named-stream", "required", "required-stream"])
def test_without_strict_arguments_the_call_fails_the_gate(mode: str) -> None:
    """SGLANG_TOOL_STRICT_LEVEL unset: only the hermes envelope is constrained and SmolLM2 wrote
    ``[]`` as the arguments; the candidate sets the level to 2 for that reason."""
    calls, got = _call(f"strict-off-tool-{mode}.json")
    assert calls[0]["function"]["arguments"] == "[]" and got == "tool_calls"
    allowed, rule = expected_finish("sglang", mode)
    assert not check_call(calls, got, "get_weather", TOOL, allowed, rule).ok


def test_streamed_text_after_the_call_is_content_the_unstreamed_reply_leaves_out() -> None:
    """Real SGLang: streamed, what the model wrote after the call comes as content deltas;
    non-streamed, content is "". Gate 05's stream = non-stream rule compares the calls only."""
    streamed = reassemble_stream(_load("tool-named-stream.json")["chunks"])
    plain = _load("tool-named.json")["response"]["choices"][0]["message"]
    assert streamed["content"].strip() and plain["content"] == ""
    assert streamed["tool_calls"][0]["function"] == plain["tool_calls"][0]["function"]
    assert streamed["name_deltas"] == [1] and streamed["id_deltas"] == [1]


@pytest.mark.parametrize("name", ["over-bound.json", "over-bound-stream.json"])
def test_over_the_context_length_is_a_plain_400_streamed_or_not(name: str) -> None:
    got = _load(name)
    assert "chunks" not in got  # the tokenizer's check answers before any stream starts
    answer = classify(got["status"], got["response"], [] if "stream" in name else None,
                      SGLANG.over_length)  # fmt: skip
    assert answer.outcome is OverBound.REJECTED and answer.status == 400, answer
    assert answer.envelope == OBJECT_ERROR.name and answer.names_length, answer.message
    assert answer.message.startswith("The input (5521 tokens) is longer than the model's context")


def test_over_the_kv_pool_is_refused_inside_an_http_200_stream() -> None:
    """The scheduler's admission check (a prompt within the context, over the pool), streamed:
    the error chunk, then a usage chunk with no choices, then [DONE] (sgl-project/sglang#12081)."""
    got = _load("over-pool-stream.json")
    assert got["status"] == 200 and got["chunks"][1]["choices"] == []
    answer = classify(200, None, got["chunks"], SGLANG.over_length)
    assert answer.outcome is OverBound.REJECTED_IN_STREAM and answer.ok, answer
    assert (answer.code, answer.envelope) == (400, OPENAI_ERROR.name)
    assert answer.names_length and answer.message.startswith("Input length (1601 tokens) exceeds")
    plain = _load("over-pool.json")
    answer = classify(plain["status"], plain["response"], None, SGLANG.over_length)
    assert answer.outcome is OverBound.REJECTED and answer.envelope == OBJECT_ERROR.name
    assert answer.names_length


def test_echo_rows_hold_their_own_logprob() -> None:
    """reread_shift 0 on a real echo: each prompt token's logprob is in its own row's top list
    (at shift 1 it would be in the previous row's). The first row has none, and text_offset is
    -1 throughout (the suite does not read it)."""
    logprobs = _load("echo-logprobs.json")["response"]["choices"][0]["logprobs"]
    assert set(logprobs["text_offset"]) == {-1} and logprobs["token_logprobs"][0] is None
    rows = reread_rows(logprobs, SGLANG.reread_shift, 2)
    assert rows is not None and rows[0]["logprob"] is None
    for row in rows[1:]:
        assert row["token"] in dict(row["top"]) or len(row["top"]) == 2, row
        if row["token"] in dict(row["top"]):
            assert dict(row["top"])[row["token"]] == pytest.approx(row["logprob"])
    assert sum(row["token"] in dict(row["top"]) for row in rows[1:]) >= len(rows) - 2


def test_server_info_gives_the_kv_pool_and_version() -> None:
    info = _load("server-info.json")["response"]
    capacity = SGLANG.kv_capacity
    assert capacity is not None and capacity.read(info) == 8192
    assert (info["version"], info["tp_size"]) == ("0.5.23", 1)
    card = _load("v1-models.json")["response"]["data"][0]
    assert (card["max_model_len"], card["owned_by"]) == (2048, "sglang")


def test_metrics_carry_the_histograms_the_throughput_gate_reads() -> None:
    samples = parse((DATA / "metrics-histograms.txt").read_text())
    for names in SGLANG.histograms.values():
        totals = [t for t in (histogram_totals(samples, n) for n in names) if t is not None]
        assert totals and totals[0][0] > 0 and totals[0][1] > 0, names


def _qualification_log() -> list[str]:
    return (DATA / "qualification-tp1-server.log").read_text().splitlines()


def test_the_server_args_line_names_the_kernels() -> None:
    chosen = {c.kind: c.value for c in chosen_kernels(SGLANG, _qualification_log())}
    assert chosen["attention"] == "torch_native" and chosen["moe"] == "auto"


@pytest.mark.parametrize(("log", "processes"), [("tp1", 3), ("tp2", 4)])
def test_the_kernel_stand_in_was_loaded_and_never_called(log: str, processes: int) -> None:
    """A whole qualification (every gate PASS): the stand-in loaded in each of SGLang's
    processes (server, detokenizer, one scheduler per TP rank) and no line says it was called."""
    text = (DATA / f"qualification-{log}-server.log").read_text().splitlines()
    lines = [line for line in text if STAND_IN in line]
    loaded = {m.group(1) for m in (re.search(r"loaded in pid (\d+)", x) for x in lines) if m}
    assert len(loaded) == processes, lines
    assert not [line for line in lines if " called " in line]


def _tp2_startup() -> str:
    return (DATA / "qualification-tp2-server.log").read_text()


def test_gate_01_reads_sglangs_own_rank_lines() -> None:
    """TP2 on the CPU: each rank's thread-binding line (world_size=2) and its 'Init parallel
    ends.'; the lines name no backend, which the verdict says."""
    verdict = ranks.check(ranks.analyze(_tp2_startup()), tp_size=2, backend="gloo")
    assert verdict.ok, verdict.reason
    assert verdict.measures["ranks_joined"] == [0, 1] and verdict.measures["world_sizes"] == [2]
    assert verdict.measures["backends"] == ["(not named in the engine's lines)"]


def test_a_rank_that_never_ended_its_parallel_init_fails_gate_01() -> None:
    cut = "\n".join(x for x in _tp2_startup().splitlines() if "TP1] Init parallel ends" not in x)
    verdict = ranks.check(ranks.analyze(cut), tp_size=2, backend="gloo")
    assert not verdict.ok and "rank 1 began to join but never logged" in verdict.reason


def test_a_world_of_the_wrong_size_fails_gate_01() -> None:
    verdict = ranks.check(ranks.analyze(_tp2_startup()), tp_size=4, backend="gloo")
    assert (
        not verdict.ok and "rank 0 began to join as [(2, '')], expected (4, gloo)" in verdict.reason
    )


def test_the_tp1_serve_logs_no_rank_lines() -> None:
    assert ranks.analyze("\n".join(_qualification_log())).started == ()


def test_pynccl_stays_off_on_the_tp2_serve() -> None:
    """The unloadable SGLANG_NCCL_SO_PATH: each rank says it could not load NCCL."""
    text = _tp2_startup()
    for rank in (0, 1):
        assert f"TP{rank}] Failed to load NCCL library from /nonexistent/" in text


def test_a_failed_tp2_start_is_diagnosed_as_pynccl_on_the_cpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without SGLANG_NCCL_SO_PATH torch's NCCL loads, PyNccl is built for the CPU ranks and
    refuses the device in both: the diagnosis names it (``pynccl_on_cpu``, both ranks' errors
    and the NCCL line as evidence) and asks for an unloadable path, which the candidate sets."""
    assert main(["diagnose", str(DATA / "failed-start-tp2-pynccl.log"), "--tp", "2"]) == 1
    said = capsys.readouterr().out
    assert "cause not recognised" not in said and "pynccl_on_cpu" in said
    assert said.count("ValueError: Expected a cuda device, but got: cpu") == 2
    assert "43: [2026-12-05 02:20:20 TP0] sglang is using nccl==2.30.7" in said
    assert "set SGLANG_NCCL_SO_PATH to a path that does not load" in said


def test_the_tp2_candidate_sets_what_the_pynccl_remedy_asks_for() -> None:
    """The remedy never asks for what the candidate has: with the candidate's own environment
    (an unloadable path) on a log where no rank read it, the variable is set and did not reach
    the ranks, never "set it"."""
    candidate = load_candidate(CANDIDATES / "smollm2-135m-sglang-tp2.toml")
    path = candidate.env()["SGLANG_NCCL_SO_PATH"]
    text = (DATA / "failed-start-tp2-pynccl.log").read_text()
    first = diagnose(text, tp=2, env={"SGLANG_NCCL_SO_PATH": path}).failures[0]
    assert first.rule == "pynccl_on_cpu", first
    assert f"SGLANG_NCCL_SO_PATH={path} (environment) is already set" in first.remedy
    assert "did not reach the scheduler processes" in first.remedy
    assert "set SGLANG_NCCL_SO_PATH to" not in first.remedy
    started = diagnose(_tp2_startup(), tp=2)  # the serve that started (and was stopped)
    assert "pynccl_on_cpu" not in {f.rule for f in started.findings}


def test_a_path_the_ranks_read_and_loaded_is_named_as_loading() -> None:
    """The real log with a rank's 'Found nccl from environment variable' line put before the
    load: the variable reached the ranks and named a library that loads, and the remedy says so
    (the setting read from that line, not asked for)."""
    lines = (DATA / "failed-start-tp2-pynccl.log").read_text().splitlines()
    found = "[2026-12-05 02:20:20 TP0] Found nccl from environment variable "
    lines.insert(42, found + "SGLANG_NCCL_SO_PATH=/usr/lib/libnccl.so.2")
    first = diagnose("\n".join(lines), tp=2).failures[0]
    assert first.rule == "pynccl_on_cpu"
    assert first.remedy.startswith(
        "SGLANG_NCCL_SO_PATH=/usr/lib/libnccl.so.2 (log line 43) is already set and the ranks"
        " loaded the library it names"
    ), first.remedy


def test_the_neutral_sampling_names_are_sglangs() -> None:
    """The request fields the suite sends for neutral sampling, as SGLang names them, taken with
    HTTP 200 (min_p was not sent in any capture: source only)."""
    recorded = _load("chat.json")
    sent = set(recorded["request"])
    assert recorded["status"] == 200
    assert set(SGLANG.neutral_sampling) - sent == {"min_p"}


def test_server_info_echoes_the_launch_the_suite_set() -> None:
    """The admission bound the candidate sets (--max-running-requests 1), the attention backend
    and the device, as the server resolved them; the entry module serves, with 0.5.23's own
    warning that 'sglang serve' is the recommended one."""
    info = _load("server-info.json")["response"]
    admission = SGLANG.admission
    assert admission is not None and admission[0] == "--max-running-requests"
    assert info["max_running_requests"] == 1
    assert (info["attention_backend"], info["device"]) == ("torch_native", "cpu")
    first = _qualification_log()[0]
    assert f"'python -m {SGLANG.entry_modules[0]}' is still supported" in first
    assert SGLANG.entry_script is not None and "'sglang serve' is the recommended" in first


def test_the_diagnosis_reads_sglangs_rank_prefixes_and_stamps() -> None:
    """'[<time> TP<r>]' names each rank's 'Scheduler hit an exception'; the bare ValueError
    under it leads, the first error in time."""
    text = (DATA / "failed-start-tp2-pynccl.log").read_text()
    lead, others = earliest(error_lines(context(text)))
    assert lead is not None and lead.line.no == 71, lead
    assert "Expected a cuda device" in lead.line.text
    assert [(e.rank, e.line.no) for e in others] == [("TP0", 44), ("TP1", 75)]


def test_the_resolved_server_args_are_not_read_as_the_candidates_settings() -> None:
    """0.5.23 prints ``server_args={…}``, every resolved setting defaults included (not the
    ``ServerArgs(…)`` the diagnosis reads): a remedy must not take a default for a setting the
    candidate made, so the line gives no settings; and no line gives SGLang's version."""
    for name in ("qualification-tp1-server.log", "failed-start-tp2-pynccl.log"):
        text = (DATA / name).read_text()
        assert "server_args={'model_path'" in text
        ctx = context(text)
        assert dict(ctx.args) == {} and ctx.version is None, (name, dict(ctx.args))


def test_the_same_refusal_from_another_engines_pynccl_is_not_called_sglangs() -> None:
    """The rule keys on SGLang's own frame or line: the log with vLLM's paths in their place
    stays unnamed rather than blamed on SGLang."""
    text = (DATA / "failed-start-tp2-pynccl.log").read_text()
    other = text.replace("sglang/srt/distributed", "vllm/distributed")
    other = other.replace("sglang is using nccl", "vllm is using nccl")
    assert diagnose(other, tp=2).failures[0].rule == "unrecognised_failure"
