"""``model.hf_cache = "volume:<name>"``: the weights in a Docker named volume (pure parts).

The spelling, the serve's read-only mount of the volume (offline, as a host path), what the plan
says, and that a remote ``--hosts`` engine may serve it (the volume is read on that engine, not
on this machine). The volume read on a real engine is in test_volume_docker.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tp2qual.candidate import Candidate, load_candidate
from tp2qual.dry_run import model_lines
from tp2qual.exceptions import PinMismatch
from tp2qual.launch import CONTAINER_HF_CACHE, resolve_launch
from tp2qual.model_cache import cache_volume
from tp2qual.placement import _files_of_this_machine
from tp2qual.serving.identity import model_identity
from tp2qual.serving.launchers.docker.run_args import render_docker_run, run_kwargs

REVISION = "0123456789abcdef0123456789abcdef01234567"


def docker_candidate(folder: Path, hf_cache: str) -> Candidate:
    path = folder / "vol.toml"
    path.write_text(
        f"""
name = "vol"
[model]
repo = "org/model"
revision = "{REVISION}"
served_name = "m"
hf_cache = "{hf_cache}"
[engine]
kind = "llama.cpp"
[launch]
kind = "docker"
command = ["serve", "--port", "{{port}}"]
[launch.docker]
image = "img:tag"
pin = "sha256:{"0" * 64}"
[gpus]
count = 0
[serve]
tensor_parallel_size = 1
max_model_len = 2048
"""
    )
    return load_candidate(path)


def test_the_spelling_names_a_volume_and_nothing_else() -> None:
    assert cache_volume("volume:vllm-hfcache") == "vllm-hfcache"
    assert cache_volume("/home/u/.cache/huggingface/hub") is None
    assert cache_volume("~/volume:x") is None
    assert cache_volume(None) is None


def test_the_serve_mounts_the_volume_read_only_and_offline(tmp_path: Path) -> None:
    launch = resolve_launch(docker_candidate(tmp_path, "volume:vllm-hfcache"), port=8000)
    assert launch.container is not None
    (mount,) = launch.container.mounts
    assert (mount.host, mount.inside, mount.mode, mount.volume) == (
        "vllm-hfcache",
        CONTAINER_HF_CACHE,
        "ro",
        True,
    )
    kwargs = run_kwargs(launch)
    assert kwargs["volumes"] == {"vllm-hfcache": {"bind": CONTAINER_HF_CACHE, "mode": "ro"}}
    assert kwargs["environment"]["HF_HUB_OFFLINE"] == "1"
    assert kwargs["environment"]["HF_HUB_CACHE"] == CONTAINER_HF_CACHE
    assert f"--volume vllm-hfcache:{CONTAINER_HF_CACHE}:ro" in render_docker_run(kwargs)


def test_a_host_path_is_still_bound_as_an_absolute_path(tmp_path: Path) -> None:
    launch = resolve_launch(docker_candidate(tmp_path, str(tmp_path / "hub")), port=8000)
    assert launch.container is not None
    (mount,) = launch.container.mounts
    assert (mount.host, mount.volume) == (str(tmp_path / "hub"), False)


def test_a_volume_is_no_file_of_this_machine_for_a_remote_engine(tmp_path: Path) -> None:
    assert _files_of_this_machine(docker_candidate(tmp_path, "volume:vllm-hfcache")) == ""
    host_path = docker_candidate(tmp_path, str(tmp_path / "hub"))
    assert _files_of_this_machine(host_path) == "the model cache"


def test_the_plan_says_where_the_snapshot_is_read(tmp_path: Path) -> None:
    (line,) = model_lines(docker_candidate(tmp_path, "volume:vllm-hfcache"))
    assert "in Docker volume vllm-hfcache (read in a helper container" in line
    assert "no network, no GPU" in line


def test_no_engine_is_refused_in_one_line_naming_the_volume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/tp2qual-volume.sock")
    monkeypatch.setenv("TP2QUAL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(PinMismatch) as refused:
        model_identity(docker_candidate(tmp_path, "volume:vllm-hfcache"))
    said = str(refused.value)
    assert f"model.revision {REVISION}: volume vllm-hfcache cannot be read: gate 00 " in said
    assert "needs a running Docker engine (none answers at unix:///nonexistent/" in said
    assert "\n" not in said
