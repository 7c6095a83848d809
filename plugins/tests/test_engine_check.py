"""Gate 00 asks the engine itself whether it accepts the candidate's exact launch (issue #20):
vLLM 0.32.0's own parser and environment registry in its CPU venv, the same inside the vLLM CPU
image for the TP2 container candidate, and SGLang 0.5.23's registry from its wheel (installed
without dependencies: its parser does not import there, and the answer says so). Real engines
only; nothing is started (no server, no port, no GPU)."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest

from tp2qual.candidate import Candidate, cache_dir, load_candidate
from tp2qual.checks.engine_answer import engine_args, judge, parser_error
from tp2qual.evidence.rederive import GateRun, preflight
from tp2qual.hooks.candidates import why_not_runnable
from tp2qual.launch import resolve_launch
from tp2qual.serving import engine_check

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = ROOT / "candidates"
SGLANG_VENV = "venvs/sglang-0.5.23-nodeps"  # scripts/install-sglang-wheel.sh
CACHE = cache_dir()  # read before pytester points HOME elsewhere


def variant(tmp_path: Path, name: str, edits: dict[str, str]) -> Path:
    """A copy of a shipped candidate with text replaced (each edit must apply)."""
    text = (CANDIDATES / f"{name}.toml").read_text(encoding="utf-8")
    text = text.replace('include = ["', f'include = ["{CANDIDATES}/')
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / f"{name}-variant.toml"
    path.write_text(text.replace(f'name = "{name}"', f'name = "{name}-variant"'), "utf-8")
    return path


def runnable(candidate: Candidate) -> Candidate:
    if why := why_not_runnable(candidate):
        pytest.skip(f"self-test needs {candidate.name}: {why}")
    return candidate


def asked(candidate: Candidate, image: str | None = None) -> tuple[engine_check.EngineRun, dict]:
    launch = resolve_launch(candidate, run_id="check")
    question = engine_check.question(candidate, launch)
    assert question is not None
    run = engine_check.ask_engine(launch, question, image=image)
    assert run.answer is not None, run.output[-2000:]
    return run, engine_check.with_fallback(candidate, run.answer)


# -- pure ---------------------------------------------------------------------------------------


def test_the_engines_arguments_follow_its_entry_point() -> None:
    python_m = ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    assert engine_args("vllm", python_m) == ["--model", "m"]
    assert engine_args("vllm", ["vllm", "serve", "m", "--tp", "2"]) == ["m", "--tp", "2"]
    assert engine_args("sglang", ["python3", "-m", "sglang.launch_server", "--tp", "2"]) == [
        "--tp",
        "2",
    ]
    assert engine_args("vllm", ["sh", "-c", "echo"]) is None  # no entry point: not asked


def test_parser_error_keeps_the_engines_message_without_its_usage() -> None:
    text = "usage: x [-h] [--a A]\n              [--b B]\nx: error: unrecognized arguments: --c"
    assert parser_error(text) == "x: error: unrecognized arguments: --c"


def test_every_shipped_engine_candidate_is_shown_in_the_plan() -> None:
    for path in sorted(CANDIDATES.glob("[!_]*.toml")):
        cand = load_candidate(path)
        lines = engine_check.plan_lines(cand, resolve_launch(cand))
        if cand.engine == "llama.cpp":
            assert "not run" in lines[0]
        else:  # the campaign files and the vLLM candidates: the engine is asked
            assert f"{cand.engine}'s own parser" in lines[0], (cand.name, lines)
            assert engine_check.IN_IMAGE in lines[1] or str(engine_check.ENTRY) in lines[1]


def test_a_recorded_answer_re_derives_with_its_notices(tmp_path: Path) -> None:
    """The record gate 00 writes (the platform it judged on beside the verdict's measures)
    judges again to the same notices: the parser's platform words do not replace it."""
    answer = {
        "engine": "vllm", "version": "0.32.0", "importable": True, "parser": "p",
        "parse": {"accepted": True}, "platform": {"device_type": "cpu", "forced": False},
        "env": {"VLLM_CPU_KVCACHE_SPACE": {"known": True, "comment": "(CPU backend only) KV"}},
    }  # fmt: skip
    verdict = judge(answer, platform="cpu")
    assert verdict.ok and verdict.measures["notices"] == []  # a CPU variable on the CPU
    assert judge(answer, platform="cuda").measures["notices"]  # the same one on a GPU: ignored
    record = {"platform": "cpu", "answer": answer, "accepted": verdict.ok, **verdict.measures}
    (tmp_path / engine_check.ARTIFACT).write_text(json.dumps(record))
    again = preflight(GateRun(tmp_path, {}, "vllm", 2048))
    assert not again.mismatches, again.mismatches
    assert record["platform"] == "cpu"


# -- vLLM 0.32.0 CPU venv -----------------------------------------------------------------------


@pytest.mark.slow
def test_vllm_accepts_the_shipped_launch() -> None:
    cand = runnable(load_candidate(CANDIDATES / "smollm2-135m-vllm.toml"))
    run, answer = asked(cand)
    verdict = judge(answer, platform="cpu")
    assert verdict.ok, verdict.reason
    assert answer["version"] == "0.32.0" and answer["parse"]["accepted"]
    assert answer["parser"] == "vllm.entrypoints.launchers.cli_args.make_arg_parser"
    assert answer["parse"]["namespace"]["max_num_seqs"] == 1  # the engine read the flag
    assert set(answer["env"]) == {"VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND",
                                  "VLLM_NO_USAGE_STATS"}  # fmt: skip
    assert verdict.measures["notices"] == []
    # The same answer for a GPU serve: vLLM's envs.py says these are read by its CPU backend only
    on_gpus = judge(answer, platform="cuda").measures["notices"]
    assert [n.split(":")[0] for n in on_gpus] == [
        "launch.env.VLLM_CPU_KVCACHE_SPACE",
        "launch.env.VLLM_CPU_OMP_THREADS_BIND",
    ]
    assert "ignored on cuda: vllm 0.32.0's registry says '(CPU backend only)" in on_gpus[0]
    print(f"vLLM check: {run.seconds} s, of which importing the parser {answer['import_s']} s")


@pytest.mark.slow
def test_vllm_refuses_a_misspelt_flag_and_a_dead_variable_in_its_own_words(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through gate 00 itself: FAIL with vLLM's words, and the server is never started."""
    monkeypatch.setenv("TP2QUAL_CACHE", str(CACHE))
    runnable(load_candidate(CANDIDATES / "smollm2-135m-vllm.toml"))
    cands = tmp_path / "cands"
    cands.mkdir()
    variant(cands, "smollm2-135m-vllm", {
        '"--served-model-name"': '"--served-model-nam"',  # a prefix vLLM would take
        '"--dtype", "bfloat16"': '"--dtpye", "bfloat16"',  # a typo
        "[launch.env]\n": (  # gone after vLLM 0.23.0; a value vLLM's registry refuses
            '[launch.env]\nVLLM_FLASHINFER_MOE_BACKEND = "latency"\n'
            'VLLM_WORKER_MULTIPROC_METHOD = "thread"\n'
        ),
    })  # fmt: skip
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    pytester.makeini("[pytest]\nmarkers =\n" + "".join(f"    {m}\n" for m in ini["markers"]))
    for gate in sorted((ROOT / "tests").glob("test_0*.py")):
        pytester.makepyfile(**{gate.stem: gate.read_text()})
    results = tmp_path / "results"
    pytester.runpytest(f"--candidates={cands}", f"--results={results}", "-p", "no:cacheprovider",
                       "-k", "smollm2-135m-vllm-variant")  # fmt: skip
    folder = next(results.glob("*/smollm2-135m-vllm-variant"))
    finding = json.loads((folder / "finding.json").read_text())
    assert finding["verdict"] == "FAIL" and finding["failed_gate"] == "preflight"
    assert not (folder / "server.log").exists()  # refused before anything started
    recorded = json.loads((folder / engine_check.ARTIFACT).read_text())
    assert recorded["accepted"] is False
    assert recorded["refusals"][0][:200] in finding["gates"]["preflight"]["reason"]  # its head
    said = "\n".join(recorded["refusals"])
    assert len(recorded["refusals"]) == 4, said
    assert "error: unrecognized arguments: --dtpye" in said  # vLLM's argparse, its words
    # vLLM itself would take the prefix for the whole flag: refused by the suite, saying so
    # (an abbreviated --max-num-seqs is refused earlier still, by the one-request rule)
    assert (
        "--served-model-nam: not a vllm 0.32.0 flag; vllm 0.32.0 would read it as "
        "--served-model-name" in said
    )
    assert "Unknown vLLM environment variable detected: VLLM_FLASHINFER_MOE_BACKEND" in said
    assert "Invalid value 'thread' for VLLM_WORKER_MULTIPROC_METHOD. Valid options" in said
    # verify judges the recorded answer again and reaches the same refusals
    again = preflight(GateRun(folder, {}, "vllm", 2048))
    assert not again.mismatches, again.mismatches
    assert again.rows[engine_check.ARTIFACT][0]["refusals"] == recorded["refusals"]
    assert [f.split(": ", 1)[0] for f in again.failures] == [engine_check.ARTIFACT]  # one check


@pytest.mark.slow
def test_vllm_cpu_refuses_a_misspelt_tool_parser_from_its_registry(tmp_path: Path) -> None:
    """vLLM 0.32.0's argparse takes any --tool-call-parser; its registry refuses a misspelt one,
    in its words (issue #28). Its CPU build detects its own platform: nothing is forced."""
    runnable(load_candidate(CANDIDATES / "smollm2-135m-vllm.toml"))
    good = load_candidate(CANDIDATES / "smollm2-135m-vllm.toml")
    _run, answer = asked(good)
    assert answer["platform"] == {"device_type": "cpu", "forced": False}
    assert answer["parsers"]["--tool-call-parser"]["registered"] is True
    bad = load_candidate(
        variant(
            tmp_path,
            "smollm2-135m-vllm",
            {'"--tool-call-parser", "hermes"': '"--tool-call-parser", "hermz"'},
        )
    )
    _run, answer = asked(bad)
    verdict = judge(answer, platform="cpu")
    assert answer["parse"]["accepted"] and not verdict.ok
    assert verdict.measures["refusals"] == [
        "--tool-call-parser hermz: vllm 0.32.0 (vllm.tool_parsers.ToolParserManager): "
        "KeyError: \"Tool parser 'hermz' not found.\""
    ]


# -- the vLLM CPU image (Docker) ----------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.vllm_image
def test_vllm_in_the_pinned_image_accepts_the_tp2_container_launch(docker_engine: object) -> None:
    cand = runnable(load_candidate(CANDIDATES / "smollm2-135m-vllm-tp2.toml"))
    run, answer = asked(cand)
    assert run.argv[:3] == ["docker", "run", "--rm"] and "--gpus" not in run.argv
    verdict = judge(answer, platform="cpu")
    assert verdict.ok, verdict.reason
    assert answer["version"] == "0.32.0"
    assert answer["parse"]["namespace"]["tensor_parallel_size"] == 2
    print(f"vLLM check in the image: {run.seconds} s (parser import {answer['import_s']} s)")


# -- SGLang 0.5.23 from its wheel, no dependencies ----------------------------------------------


def sglang_wheel_candidate(tmp_path: Path, env: dict[str, str]) -> Candidate:
    if not (CACHE / SGLANG_VENV / "bin" / "python").is_file():
        pytest.skip(f"self-test needs {SGLANG_VENV}: run scripts/install-sglang-wheel.sh")
    lines = "".join(f'{k} = "{v}"\n' for k, v in env.items())
    path = tmp_path / "sglang-wheel.toml"
    path.write_text(f"""
name = "sglang-wheel"
[model]
repo = "org/model"
revision = "{"0" * 40}"
served_name = "m"
[engine]
kind = "sglang"
version = "0.5.23"
[launch]
kind = "process"
python = "{SGLANG_VENV}"
command = ["{{python}}", "-m", "sglang.launch_server", "--model-path", "org/model",
           "--max-running-requests", "1", "--port", "{{port}}"]
[launch.env]
{lines}
[serve]
tensor_parallel_size = 1
max_model_len = 4096
""", encoding="utf-8")  # fmt: skip
    return load_candidate(path)


def test_sglang_registry_from_its_wheel_refuses_dead_variables_and_notes_deprecated(
    tmp_path: Path,
) -> None:
    cand = sglang_wheel_candidate(tmp_path, {
        "SGLANG_ENABLE_UNIFIED_RADIX_TREE": "1",  # in no SGLang 0.5.23 source (was Inkling's)
        "SGLANG_ENABLE_CP_V2": "1",  # in its _DEPRECATED_ENVS: "removed without replacement"
        "SGLANG_USE_MODELSCOPE": "0",  # in its Envs registry
    })  # fmt: skip
    _run, answer = asked(cand)
    assert answer["importable"] is False
    assert "No module named 'numpy' (at sglang/srt/utils/common.py:84)" in answer["import_error"]
    verdict = judge(answer, platform="cpu")
    assert verdict.measures["refusals"] == [
        "launch.env.SGLANG_ENABLE_UNIFIED_RADIX_TREE: sglang 0.5.23: "
        "SGLANG_ENABLE_UNIFIED_RADIX_TREE occurs nowhere in sglang's sources "
        "(sglang/srt/environ.py Envs included): it is ignored without a warning"
    ]
    notices = verdict.measures["notices"]
    assert any("its parser does not import here" in n for n in notices)
    assert any(
        "SGLANG_ENABLE_CP_V2 is deprecated. Strategy-based prefill context parallelism" in n
        for n in notices
    )


def test_the_sglang_install_script_is_idempotent() -> None:
    """CI's line, run again where it already ran: it changes nothing and says so."""
    if not (CACHE / SGLANG_VENV / "bin" / "python").is_file():
        pytest.skip(f"self-test needs {SGLANG_VENV}: run scripts/install-sglang-wheel.sh")
    done = subprocess.run([str(ROOT / "scripts" / "install-sglang-wheel.sh")],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert "present:" in done.stdout
