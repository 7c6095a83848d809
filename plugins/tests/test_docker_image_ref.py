"""Self-tests of digest-pinned image references (issue #20).

Pure: how ``launch.docker.image`` and the pin become the reference Docker is asked for, and that
every campaign candidate renders ``repo@sha256:…`` where it pins a registry digest without a tag.
Against the real engine: a real registry (Debian's ``docker-registry``) on 127.0.0.1 gives the
base image a real registry digest; the launcher finds it by ``repo@digest``, pulls it by digest
with ``--pull``, accepts ``repo:tag@digest``, and refuses a wrong digest with one message naming
the candidate file, the reference and what to do.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.errors import ImageNotFound

from tp2qual.candidate import load_candidate
from tp2qual.exceptions import ImageUnavailable
from tp2qual.image_ref import image_reference, split_image
from tp2qual.launch import resolve_launch
from tp2qual.redact import Redactor
from tp2qual.serving.launchers.docker.launcher import DockerLauncher
from tp2qual.serving.launchers.docker.run_args import run_kwargs

DIGEST = "sha256:" + "d" * 64
OTHER = "sha256:" + "e" * 64
BASE_IMAGE = "tp2qual/debian-base:bookworm"  # scripts/build-local-image.sh
CANDIDATES = Path(__file__).resolve().parents[2] / "candidates"


@pytest.mark.parametrize(
    ("image", "pin", "expected"),
    [
        ("nvcr.io/nvidia/vllm", DIGEST, f"nvcr.io/nvidia/vllm@{DIGEST}"),
        ("vllm/vllm-openai", DIGEST, f"vllm/vllm-openai@{DIGEST}"),
        ("127.0.0.1:5000/x/y", DIGEST, f"127.0.0.1:5000/x/y@{DIGEST}"),  # a port is no tag
        (f"nvcr.io/nvidia/vllm:26.06-py3@{DIGEST}", DIGEST, f"nvcr.io/nvidia/vllm@{DIGEST}"),
        (f"nvcr.io/nvidia/vllm@{DIGEST}", OTHER, f"nvcr.io/nvidia/vllm@{DIGEST}"),  # proven after
        ("anvil-sglang:inkling", DIGEST, "anvil-sglang:inkling"),  # tag-only: local build id
        ("127.0.0.1:5000/x:t1", DIGEST, "127.0.0.1:5000/x:t1"),
        ("tp2qual/smollm2-llamacpp:local", "{smollm2_image_id}", "tp2qual/smollm2-llamacpp:local"),
        ("tp2qual/bare", "{unresolved}", "tp2qual/bare"),
    ],
)
def test_reference_from_image_and_pin(image: str, pin: str, expected: str) -> None:
    assert image_reference(image, pin) == expected


def test_split_keeps_registry_port_apart_from_tag() -> None:
    ref = split_image(f"127.0.0.1:5000/a/b:t@{DIGEST}")
    assert (ref.repo, ref.tag, ref.digest) == ("127.0.0.1:5000/a/b", "t", DIGEST)


@pytest.mark.parametrize(
    "name", ["nemotron-3-super-120b-a12b-nvfp4", "qwen3.5-122b-a10b-nvfp4", "laguna-s-2.1-nvfp4"]
)
def test_campaign_digest_pins_render_by_digest(name: str) -> None:
    cand = load_candidate(CANDIDATES / f"{name}.toml")
    kwargs = run_kwargs(resolve_launch(cand, port=1, run_id="r", session="s", wsl2=False))
    pin = cand.launch["docker"]["pin"]
    assert kwargs["image"] == f"{cand.launch['docker']['image']}@{pin}"


# ---------------------------------------------------------------------------------------------
# A real registry on loopback, the real engine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def client(docker_engine: Any) -> Any:
    try:
        docker_engine.base_id = docker_engine.images.get(BASE_IMAGE).id
    except Exception:
        pytest.skip(f"{BASE_IMAGE} is not built here: run scripts/build-local-image.sh")
    return docker_engine


@pytest.fixture(scope="module")
def registry(client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``docker-registry`` (Debian's distribution/registry) on 127.0.0.1:PORT, no auth."""
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    folder = tmp_path_factory.mktemp("registry")
    port = _free_port()
    config = folder / "config.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {folder / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n",
        encoding="utf-8",
    )
    log = (folder / "registry.log").open("wb")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.2)
        else:
            pytest.skip("docker-registry did not listen within 20 s")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def pushed(client: Any, registry: str) -> Iterator[tuple[str, str]]:
    """The base image pushed to the registry: (repository, its registry digest)."""
    repo = f"{registry}/tp2qual-selftest/base"
    client.images.get(BASE_IMAGE).tag(repo, "t1")
    client.images.push(repo, tag="t1")
    digests = [d for d in client.images.get(f"{repo}:t1").attrs["RepoDigests"] if repo in d]
    try:
        yield repo, digests[0].rpartition("@")[2]
    finally:
        _drop_local(client, repo)


def _launcher(tmp_path: Path, client: Any, image: str, pin: str, pull: bool) -> DockerLauncher:
    path = tmp_path / "digest-pinned.toml"
    path.write_text(
        f"""
name = "digest-pinned"
[model]
repo = "example/none"
revision = "{"0" * 40}"
served_name = "none"
[engine]
kind = "llama.cpp"
[launch]
kind = "docker"
command = ["true"]
[launch.docker]
image = "{image}"
pin = "{pin}"
[serve]
tensor_parallel_size = 1
max_model_len = 2048
""",
        encoding="utf-8",
    )
    cand = load_candidate(path)
    return DockerLauncher(
        cand, tmp_path / "server.log", Redactor({}), run_id="digest", client=client, pull=pull
    )


def _drop_local(client: Any, repo: str) -> None:
    """Untag the registry's references only: the base image keeps its own tag (and stays)."""
    for image in client.images.list(repo):
        refs = [*image.tags, *(image.attrs.get("RepoDigests") or [])]
        for ref in [r for r in refs if r.startswith((f"{repo}:", f"{repo}@"))]:
            with contextlib.suppress(ImageNotFound):  # untagging repo:t1 drops its digest too
                client.images.remove(ref)
    assert client.images.get(BASE_IMAGE).id == client.base_id


@pytest.mark.docker
def test_untagged_digest_pin_is_found_pulled_and_refused_by_digest(
    tmp_path: Path, client: Any, pushed: tuple[str, str]
) -> None:
    repo, digest = pushed
    found = _launcher(tmp_path, client, repo, digest, pull=False).verify_image()
    assert found["image_id"] == client.base_id
    tag_and_digest = _launcher(tmp_path, client, f"{repo}:t1@{digest}", digest, pull=False)
    assert tag_and_digest.verify_image()["image_id"] == client.base_id
    assert tag_and_digest.plan().split()[-2] == f"{repo}@{digest}"  # create and plan: by digest

    _drop_local(client, repo)
    missing = _launcher(tmp_path, client, repo, digest, pull=False)
    with pytest.raises(ImageUnavailable) as caught:  # the host's state: a suite ERROR
        missing.verify_image()
    message = str(caught.value)
    for part in (str(tmp_path / "digest-pinned.toml"), f"{repo}@{digest}", "not present locally"):
        assert part in message
    assert f"docker pull {repo}@{digest}" in message

    pulled = _launcher(tmp_path, client, repo, digest, pull=True).verify_image()
    assert pulled["image_id"] == client.base_id
    assert f"{repo}@{digest}" in (pulled["repo_digests"] or [])
    assert not any(t.endswith(":latest") for t in client.images.get(pulled["image_id"]).tags)

    wrong = "sha256:" + "0" * 64
    with pytest.raises(ImageUnavailable) as caught:
        _launcher(tmp_path, client, repo, wrong, pull=True).verify_image()
    message = str(caught.value)
    assert f"docker pull {repo}@{wrong} failed" in message
    assert str(tmp_path / "digest-pinned.toml") in message
    with pytest.raises(ImageUnavailable, match="not present locally") as caught:
        _launcher(tmp_path, client, repo, wrong, pull=False).verify_image()
    assert digest in str(caught.value)  # what the repository does hold here is named
