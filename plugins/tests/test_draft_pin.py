"""A speculative draft (``[model.draft]``) is pinned as the model is: preflight proves its hub
snapshot offline by content address, refuses it unresolved or missing, and the command's draft
is filled from the same pin, so the engine loads the draft preflight checked."""

from __future__ import annotations

import json
import textwrap
import tomllib
from pathlib import Path

import pytest
from test_verify_pins import hub_snapshot

from tp2qual.candidate import Candidate, load_candidate, load_candidates
from tp2qual.exceptions import CandidateError, PinMismatch
from tp2qual.launch import resolve_launch
from tp2qual.serving.hub_snapshot import DigestCache
from tp2qual.serving.identity import draft_identity, model_identity

ROOT = Path(__file__).resolve().parents[2]
MODEL_REV = "0123456789abcdef0123456789abcdef01234567"
DRAFT_REV = "fedcba9876543210fedcba9876543210fedcba98"
DRAFT_FILES = {"model.safetensors": b"draft weights" * 100, "config.json": b'{"n": 1}'}

CANDIDATE = """
name = "spec"
[lane]
kind = "optional"
after = "base"
[model]
repo = "org/model"
revision = "{model_rev}"
served_name = "m"
hf_cache = "{cache}"
[model.draft]
repo = "org/draft"
revision = "{draft_rev}"
how_to_pin = "hf download org/draft, then write its commit to .cache/unit-draft-revision"
[engine]
kind = "vllm"
[launch]
kind = "process"
command = ["sh", "-c", "exit 3", "--speculative-config",
  '{{"method":"dflash","model":"{{draft_repo}}","revision":"{{draft_revision}}"}}']
readiness_timeout_s = 30
[serve]
tensor_parallel_size = 1
max_model_len = 4096
"""


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TP2QUAL_CACHE", str(tmp_path / "tp2qual-cache"))
    monkeypatch.delenv("TP2QUAL_UNIT_DRAFT_REVISION", raising=False)


def write(folder: Path, cache: Path, draft_rev: str = "{unit_draft_revision}") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spec.toml"
    text = CANDIDATE.format(model_rev=MODEL_REV, cache=cache, draft_rev=draft_rev)
    path.write_text(textwrap.dedent(text))
    return path


def _spec_config(candidate: Candidate) -> dict:
    argv = list(resolve_launch(candidate, port=1).argv)
    return json.loads(argv[argv.index("--speculative-config") + 1])


def test_a_resolved_draft_is_proven_and_is_the_one_the_command_names(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    hub_snapshot(hub, "org/model", MODEL_REV)
    hub_snapshot(hub, "org/draft", DRAFT_REV, files=DRAFT_FILES)
    path = write(tmp_path / "cands", hub)
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "unit-draft-revision").write_text(DRAFT_REV + "\n")
    candidate = load_candidate(path)
    facts = model_identity(candidate)["draft"]
    assert (facts["repo"], facts["resolved_revision"]) == ("org/draft", DRAFT_REV)
    assert facts["requested_revision"] == "{unit_draft_revision}"
    assert facts["pin_source"] == str(tmp_path / ".cache" / "unit-draft-revision")
    assert set(facts["content_addresses"]) == set(DRAFT_FILES)
    assert _spec_config(candidate) == {
        "method": "dflash",
        "model": "org/draft",
        "revision": DRAFT_REV,
    }


def test_an_unresolved_draft_is_refused_with_how_to_pin(tmp_path: Path) -> None:
    candidate = load_candidate(write(tmp_path / "cands", tmp_path / "hub"))
    with pytest.raises(PinMismatch) as info:
        draft_identity(candidate, DigestCache(None))
    message = str(info.value)
    assert "model.draft.revision {unit_draft_revision} is unresolved" in message
    assert "$TP2QUAL_UNIT_DRAFT_REVISION unset and no .cache/unit-draft-revision" in message
    assert "the draft org/draft is not pinned; hf download org/draft" in message


def test_a_draft_missing_from_the_cache_or_changed_there_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = tmp_path / "hub"
    candidate = load_candidate(write(tmp_path / "cands", hub, draft_rev=DRAFT_REV))
    with pytest.raises(PinMismatch, match=rf"model.draft.revision {DRAFT_REV} is not in the cache"):
        draft_identity(candidate, DigestCache(None))
    snapshot = hub_snapshot(hub, "org/draft", DRAFT_REV, files=DRAFT_FILES)
    (snapshot / "model.safetensors").resolve().write_bytes(b"other bytes")
    with pytest.raises(PinMismatch, match=rf"model.draft.revision {DRAFT_REV}: model.safetensors"):
        draft_identity(candidate, DigestCache(None))
    monkeypatch.setenv("TP2QUAL_UNIT_DRAFT_REVISION", "main")
    with pytest.raises(
        CandidateError, match=r"model.draft.revision: \$TP2QUAL_UNIT_DRAFT_REVISION"
    ):
        draft_identity(load_candidate(write(tmp_path / "c2", hub)), DigestCache(None))


def test_preflight_fails_the_candidate_on_an_unpinned_draft(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """Gate 00 as it runs: the model pin resolves, the draft's does not: preflight FAILs with
    the reason, and the server never starts."""
    hub = tmp_path / "hub"
    hub_snapshot(hub, "org/model", MODEL_REV)
    cands = tmp_path / "cands"
    write(cands, hub)
    results = tmp_path / "results"
    recorded = results / "20260101T000000Z-0000" / "base"  # the lane's baseline passed earlier
    recorded.mkdir(parents=True)
    (recorded / "finding.json").write_text(json.dumps({"verdict": "PASS"}))
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    pytester.makeini("[pytest]\nmarkers =\n" + "".join(f"    {m}\n" for m in ini["markers"]))
    pytester.makepyfile(test_00_preflight=(ROOT / "tests" / "test_00_preflight.py").read_text())
    pytester.runpytest(f"--candidates={cands}", f"--results={results}", "-p", "no:cacheprovider")
    (finding,) = {p.resolve() for p in results.glob("*/spec/finding.json")}  # and latest/
    gate = json.loads(finding.read_text())["gates"]["preflight"]
    assert gate["outcome"] == "failed", gate
    assert "model.draft.revision {unit_draft_revision} is unresolved" in gate["reason"]
    assert not list(results.glob("*/spec/server.log"))


def test_the_dflash_lane_takes_its_draft_from_model_draft(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TP2QUAL_LAGUNA_DFLASH_DRAFT_REVISION", raising=False)
    (lane,) = [
        c for c in load_candidates([ROOT / "candidates"]) if c.name == "laguna-s-2.1-nvfp4-dflash"
    ]
    draft = lane.model["draft"]
    assert draft["repo"] == "poolside/Laguna-S-2.1-DFlash-NVFP4"
    assert draft["revision"] == "{laguna_dflash_draft_revision}"  # not invented: filled locally
    with pytest.raises(PinMismatch, match="is unresolved"):
        draft_identity(lane, DigestCache(None))
    monkeypatch.setenv("TP2QUAL_LAGUNA_DFLASH_DRAFT_REVISION", DRAFT_REV)
    config = _spec_config(lane)
    assert (config["model"], config["revision"]) == (draft["repo"], DRAFT_REV)
    assert config["method"] == "dflash" and config["num_speculative_tokens"] == 7
