"""The host's state is never the candidate's FAIL: a missing local image, a failed pull, an absent
NVML (or GPUs too few, too small or busy) and an engine that answers without logprobs are each a
``SuiteError`` (the gate ERRORs, ``hooks/gating.blames_candidate`` is False) whose message says
what and what to do.

The image cases run the real Docker launcher against a stand-in client (no daemon needed); the
GPU case is a real inner run of gate 00 on this machine, which has no NVML; the logprobs case
the gate's own helpers (the engines here all give logprobs).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from docker.errors import APIError, ImageNotFound
from test_docker_launcher import make_candidate
from test_faults import run_inner, smollm2_spec, write_candidate

from tp2qual.candidate import load_candidate
from tp2qual.checks.agreement.rows import gives_no_logprobs, no_logprobs_said
from tp2qual.exceptions import (
    GpusUnavailable,
    ImageUnavailable,
    NoLogprobs,
    QualError,
    SuiteError,
)
from tp2qual.hooks.gating import blames_candidate
from tp2qual.redact import Redactor
from tp2qual.serving.launchers.docker.launcher import DockerLauncher
from tp2qual.serving.server import Exchange

MAIN = Path(__file__).resolve().parents[2]
PIN = "sha256:" + "7" * 64
IMAGE = "example/engine:1.0"


class _Images:
    """What ``client.images`` answers on a host that lacks the image and cannot pull it."""

    def get(self, ref: str) -> Any:
        raise ImageNotFound(f"No such image: {ref}")

    def list(self, repo: str) -> list[Any]:
        return []

    def pull(self, ref: str) -> Any:
        raise APIError(f"pull access denied for {ref}", explanation="registry unreachable")


class _Client:
    images = _Images()


def _launcher(tmp_path: Path, *, pull: bool) -> DockerLauncher:
    cand = make_candidate(tmp_path, "no-image-here", command=["true"], pin=PIN, image=IMAGE)
    return DockerLauncher(
        cand, tmp_path / "server.log", Redactor({}), run_id="r", client=_Client(), pull=pull
    )


def _blamed(error: BaseException) -> bool:
    with pytest.raises(BaseException) as caught:
        raise error
    return blames_candidate(caught)


@pytest.mark.parametrize(
    ("pull", "said"),
    [
        (False, f"image {IMAGE} is not present locally (pinned {PIN})"),
        (True, f"docker pull {IMAGE} failed: registry unreachable"),
    ],
    ids=["missing", "pull-failed"],
)
def test_a_missing_image_or_a_failed_pull_is_the_suites_error(
    tmp_path: Path, pull: bool, said: str
) -> None:
    launcher = _launcher(tmp_path, pull=pull)
    with pytest.raises(ImageUnavailable) as caught:
        launcher.verify_image()  # gate 00's pin check; start() takes the same path
    message = str(caught.value)
    assert said in message, message
    assert f"build or pull {IMAGE}" in message and "launch.docker.pin" in message  # what to do
    assert isinstance(caught.value, SuiteError) and not isinstance(caught.value, QualError)
    assert not _blamed(caught.value)


def test_an_engine_without_logprobs_is_the_suites_error() -> None:
    for absent in (None, {}, [], {"text_offset": [], "top_logprobs": None}):
        assert gives_no_logprobs(absent), absent
    assert not gives_no_logprobs({"tokens": [], "token_logprobs": []})  # nothing generated
    assert not gives_no_logprobs({"tokens": ["a"], "token_logprobs": [-0.1]})
    assert not gives_no_logprobs({"tokens": ["a"], "token_logprobs": "garbled"})  # the reply's
    said = no_logprobs_said("decode:factual", "vLLM", 5)
    assert "without token logprobs (logprobs: 5)" in said
    assert "--max-logprobs of at least 5" in said and "[gates.not_applicable] agreement" in said
    assert not _blamed(NoLogprobs(said))


class _NoLogprobsApi:
    """A serve that answers every completion with text and no logprobs."""

    def complete(self, tag: str, body: dict, **_: Any) -> Exchange:
        choice = {"index": 0, "text": " Paris.", "finish_reason": "stop", "logprobs": None}
        return Exchange(tag, 200, {"choices": [choice], "usage": {"prompt_tokens": 9}}, 0.1)


def test_gate_07_raises_the_suites_error_on_a_reply_without_logprobs() -> None:
    """The gate's own decode (tests/test_07_agreement.py ``_decode``), on such a reply."""
    spec = importlib.util.spec_from_file_location(
        "gate_07", MAIN / "tests" / "test_07_agreement.py"
    )
    assert spec is not None and spec.loader is not None
    gate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gate)
    candidate = load_candidate(MAIN / "candidates" / "smollm2-135m-local.toml")
    with pytest.raises(NoLogprobs) as caught:
        gate._decode(_NoLogprobsApi(), candidate, "factual", "Capital of France?", 8, {"top_n": 5})
    said = "decode:factual: llama.cpp (llama-cpp-python) answered HTTP 200 without token logprobs"
    assert said in str(caught.value)
    assert not blames_candidate(caught)


# Loaded into the inner run with -p: this host shows one GPU (so the candidate is not refused
# at collection) and gate 00 reads the snapshot given (no NVML, or one GPU held by a serve).
HOST_PLUGIN = """
import tp2qual.hooks.candidates as candidates
from tp2qual.gpu import empty_snapshot
from tp2qual.hooks.gpus import snapshot_reader_key

candidates.gpu_count = lambda: 1

def pytest_configure(config):
    config.stash[snapshot_reader_key] = lambda candidate: {snapshot}
"""
NO_NVML = 'empty_snapshot("nvml", "nvmlInit failed: NVML Shared Library Not Found")'
BUSY = (
    'empty_snapshot("nvml", None) | {"gpus": [{"index": 0, "name": "RTX PRO 6000", '
    '"memory_total_bytes": 96 * 2**30, "memory_used_bytes": 80 * 2**30, '
    '"compute_processes": [{"pid": 4242, "used_memory_bytes": 80 * 2**30}]}]}'
)


@pytest.mark.parametrize(
    ("host", "said"),
    [
        (NO_NVML, "NVML unavailable: nvmlInit failed: NVML Shared Library Not Found"),
        (BUSY, "GPU 0 (RTX PRO 6000) is busy: 1 compute process(es): pid 4242 (80.0 GiB)"),
    ],
    ids=["no-nvml", "busy-gpu"],
)
def test_a_host_without_free_gpus_is_gate_00s_error_never_the_candidates_fail(
    tmp_path: Path, host: str, said: str
) -> None:
    """The real gate 00 in an inner run (the model pin, the engine's check of the launch and
    the KV table run for real; only the GPU snapshot is given)."""
    (tmp_path / "host_plugin.py").write_text(HOST_PLUGIN.replace("{snapshot}", host))
    spec = smollm2_spec("gpu-host")
    spec["gpus"] = {"count": 1}
    write_candidate(tmp_path / "candidates", spec)
    inner = run_inner(tmp_path, ["gpu-host"], "-m", "preflight", "-p", "host_plugin")
    finding = inner.finding("gpu-host")
    gate = finding["gates"]["preflight"]
    assert (finding["verdict"], gate["outcome"]) == ("ERROR", "error"), inner.output()
    assert "this host cannot run the candidate now: " + said in gate["reason"], gate["reason"]
    assert "nvidia-ml-py" in gate["reason"] and "--allow-busy" in gate["reason"]  # what to do
    assert not _blamed(GpusUnavailable(gate["reason"]))


def test_no_nvml_refuses_a_gpu_candidate_before_start_saying_why() -> None:
    """Outside ``--hosts`` a GPU candidate on a host whose NVML counts too few GPUs is refused
    at collection (skipped, "cannot run here"); where NVML cannot be read the line says why."""
    from tp2qual.hooks.candidates import gpu_count, nvml_error, why_not_runnable

    if gpu_count():
        pytest.skip("NVML counts GPUs here")
    candidate = load_candidate(MAIN / "candidates" / "smollm2-135m-local.toml")
    candidate.spec["gpus"] = {"count": 1}
    why = why_not_runnable(candidate)
    assert why is not None and why.startswith("needs 1 NVIDIA GPU(s), this machine has 0"), why
    if nvml_error():
        assert why.endswith(f"({nvml_error()})") and "NVML cannot be read" in why
