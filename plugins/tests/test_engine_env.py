"""Engine variables the pinned engine version does not know are caught before anything starts
(issue #20): the pure check on the shipped table, the campaign files clean, and the variables the
campaign used to set flagged against the versions it pins."""

from __future__ import annotations

from pathlib import Path

import pytest

from tp2qual.candidate import load_candidate, load_candidates
from tp2qual.checks.engine_env import unknown_engine_env
from tp2qual.engine_env import candidate_env_problems, env_basis, known_env
from tp2qual.exceptions import CandidateError
from tp2qual.redact import Redactor
from tp2qual.serving.launchers.docker.launcher import DockerLauncher

CANDIDATES = Path(__file__).resolve().parents[2] / "candidates"
CAMPAIGN = [c for c in load_candidates([CANDIDATES]) if c.tp > 1]  # the TP2 campaign files


def test_pure_check_flags_only_the_engines_own_prefix() -> None:
    env = {"VLLM_GONE": "1", "VLLM_KEPT": "1", "NCCL_IB_DISABLE": "1", "SGLANG_X": "1"}
    problems = unknown_engine_env("vllm", "9.9", env, {"VLLM_KEPT"}, "envs.py")
    assert len(problems) == 1 and "VLLM_GONE" in problems[0] and "vllm 9.9" in problems[0]
    assert unknown_engine_env("llama.cpp", "1", env, set(), "-") == []


@pytest.mark.parametrize(
    ("engine", "version", "name", "known"),
    [
        ("vllm", "0.22.1", "VLLM_WSL2_ENABLE_PIN_MEMORY", False),  # from 0.24.0
        ("vllm", "0.25.1", "VLLM_WSL2_ENABLE_PIN_MEMORY", True),
        ("vllm", "0.22.1", "VLLM_FLASHINFER_MOE_BACKEND", True),  # up to 0.23.0
        ("vllm", "0.25.1", "VLLM_FLASHINFER_MOE_BACKEND", False),
        ("vllm", "0.25.1", "VLLM_USE_FLASHINFER_MOE_FP4", False),
        ("sglang", "0.5.23", "SGLANG_ENABLE_UNIFIED_RADIX_TREE", False),
        ("sglang", "0.5.23", "SGLANG_INKLING_KEEP_PACKED_TOPK", False),
    ],
)
def test_table_holds_what_the_engine_sources_say(
    engine: str, version: str, name: str, known: bool
) -> None:
    found = known_env(engine, version)
    assert found is not None
    assert (name in found[0]) is known


@pytest.mark.parametrize("cand", CAMPAIGN, ids=[c.name for c in CAMPAIGN])
def test_campaign_files_set_no_variable_their_engine_lacks(cand: object) -> None:
    assert "not checked" not in env_basis(cand)  # type: ignore[arg-type]
    assert candidate_env_problems(cand) == []  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "dead"),
    [
        ("qwen3.5-122b-a10b-nvfp4", "VLLM_WSL2_ENABLE_PIN_MEMORY"),
        ("inkling-small-nvfp4", "SGLANG_ENABLE_UNIFIED_RADIX_TREE"),
        ("inkling-small-nvfp4", "SGLANG_INKLING_KEEP_PACKED_TOPK"),
    ],
)
def test_the_variables_the_campaign_used_to_set_are_refused(
    tmp_path: Path, name: str, dead: str
) -> None:
    text = (CANDIDATES / f"{name}.toml").read_text(encoding="utf-8")
    text = text.replace('include = ["', f'include = ["{CANDIDATES}/').replace(
        "[launch.env]\n", f'[launch.env]\n{dead} = "1"\n', 1
    )
    (tmp_path / f"{name}.toml").write_text(text, encoding="utf-8")
    problems = candidate_env_problems(load_candidate(tmp_path / f"{name}.toml"))
    assert len(problems) == 1 and dead in problems[0]


def test_docker_launcher_refuses_an_unknown_engine_variable_before_docker(tmp_path: Path) -> None:
    """Refused at start() before any engine is asked (DOCKER_HOST points nowhere)."""
    path = tmp_path / "dead-env.toml"
    path.write_text(
        f"""
name = "dead-env"
[model]
repo = "example/none"
revision = "{"0" * 40}"
served_name = "none"
[engine]
kind = "vllm"
version = "0.22.1"
[launch]
kind = "docker"
command = ["--max-num-seqs", "1"]
[launch.env]
VLLM_WSL2_ENABLE_PIN_MEMORY = "1"
[launch.docker]
image = "nvcr.io/nvidia/vllm"
pin = "sha256:{"b" * 64}"
[serve]
tensor_parallel_size = 1
max_model_len = 2048
""",
        encoding="utf-8",
    )
    cand = load_candidate(path)
    launcher = DockerLauncher(cand, tmp_path / "server.log", Redactor({}), run_id="r", wsl2=False)
    with pytest.raises(CandidateError, match=r"VLLM_WSL2_ENABLE_PIN_MEMORY: vllm 0\.22\.1 has no"):
        launcher.start()
    assert launcher.stop().how == "not started"
