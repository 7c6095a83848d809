"""Where gate 07's reference comes from, and who made it: a named reference must exist and be
another serve (one clear line otherwise, and ``[reference]`` is never taken from an included
file); it runs before the candidates that name it; its transcript is taken only from a PASS of
the same prompt set and the same pinned bytes, the newest dated run first (``latest`` never);
one that FAILED or ERRORED in this run leaves the candidate not judged, naming it; and what is
recorded of it (``Reference.identity``) comes from its own evidence folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_candidate_bad_inputs import BASE, changed
from test_faults import dump_toml
from test_verify import NAME, fake_candidate, write_run

from tp2qual.artifacts.finding import ERROR, FAILED, NOT_APPLICABLE, PASSED
from tp2qual.candidate import Candidate, load_candidates
from tp2qual.evidence.reference import (
    REFERENCE_IDENTITY,
    TRANSCRIPT,
    Reference,
    find_reference,
    launch_digest,
    record_reference,
)
from tp2qual.evidence.run import RunState
from tp2qual.evidence.suite import CHECKOUT, suite_identity
from tp2qual.exceptions import CandidateError
from tp2qual.run_order import groups, run_order

MAIN = Path(__file__).resolve().parents[2]


def _write(folder: Path, spec: dict) -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{spec['name']}.toml").write_text(dump_toml(spec))


# ---------------------------------------------------------------- the candidate file


def test_a_reference_that_is_no_candidate_is_one_clear_line(tmp_path: Path) -> None:
    _write(tmp_path, changed({"reference": {"candidate": "nowhere"}}))
    with pytest.raises(CandidateError) as raised:
        load_candidates([tmp_path])
    assert str(raised.value) == (
        f"{tmp_path / 'cand.toml'}: reference.candidate: 'nowhere' is not a candidate in {tmp_path}"
    )


def test_a_reference_that_exists_loads(tmp_path: Path) -> None:
    _write(tmp_path, BASE)
    _write(tmp_path, changed({"name": "other", "reference": {"candidate": "cand"}}))
    found = {c.name: c for c in load_candidates([tmp_path])}
    assert found["other"].reference == "cand" and found["cand"].reference is None


def test_a_self_reference_is_refused_when_the_file_is_read(tmp_path: Path) -> None:
    _write(tmp_path, changed({"reference": {"candidate": "cand"}}))
    with pytest.raises(CandidateError) as raised:
        load_candidates([tmp_path])
    lines = str(raised.value).splitlines()
    assert lines[0] == "invalid candidate file" and len(lines) == 2, lines
    assert lines[1].strip().startswith(f"{tmp_path / 'cand.toml'}: reference.candidate: 'cand'")
    assert "is this candidate itself" in lines[1]


def test_a_reference_is_both_named_and_not_applicable_refused(tmp_path: Path) -> None:
    _write(tmp_path, BASE)
    both = {"candidate": "cand", "not_applicable": "no TP1 serve fits one GPU"}
    _write(tmp_path, changed({"name": "other", "reference": both}))
    with pytest.raises(CandidateError, match=r"other\.toml: reference: give exactly one of"):
        load_candidates([tmp_path])


def test_a_reference_is_never_taken_from_an_included_file(tmp_path: Path) -> None:
    """A TP1 file that includes its TP2 serve would otherwise name itself; a lane would be
    compared with its baseline's reference instead of its baseline."""
    _write(tmp_path, BASE)
    _write(tmp_path, changed({"name": "tp2", "reference": {"candidate": "cand"}}))
    (tmp_path / "tp2-tp1.toml").write_text(
        'include = ["tp2.toml"]\nname = "tp2-tp1"\n\n[serve]\ntensor_parallel_size = 1\n'
    )
    (tmp_path / "tp2-lane.toml").write_text(
        'include = ["tp2.toml"]\nname = "tp2-lane"\n\n[lane]\nkind = "optional"\nafter = "tp2"\n'
    )
    found = {c.name: c for c in load_candidates([tmp_path])}
    assert found["tp2"].reference == "cand"
    assert found["tp2-tp1"].reference is None and "reference" not in found["tp2-tp1"].spec
    assert found["tp2-lane"].reference == "tp2"


def test_each_campaign_baseline_names_a_tp1_reference_or_says_why_not() -> None:
    shipped = {c.name: c for c in load_candidates([MAIN / "candidates"])}
    campaign = [c for c in shipped.values() if c.spec.get("campaign") and c.tp > 1]
    baselines = [c for c in campaign if not c.spec.get("lane")]
    assert len(baselines) == 5, sorted(c.name for c in baselines)
    for baseline in baselines:
        table = baseline.spec["reference"]
        if named := table.get("candidate"):
            tp1 = shipped[named]
            assert (tp1.tp, tp1.gpus["count"], tp1.reference) == (1, 1, None), named
            assert tp1.launch["docker"] == baseline.launch["docker"]  # same image
            assert tp1.model["revision"] == baseline.model["revision"]  # same checkpoint
            assert tp1.request_settings == baseline.request_settings  # same sampling
            assert tp1.command == baseline.command  # the same flags, {tp} filled with 1
        else:
            assert "does not fit" not in table["not_applicable"]  # the arithmetic is --plan's
            assert "GiB" in table["not_applicable"], baseline.name
    lanes = [c for c in campaign if c.spec.get("lane")]
    assert {c.name: c.reference for c in lanes} == {c.name: c.spec["lane"]["after"] for c in lanes}


# ---------------------------------------------------------------- the order a run takes


def test_references_run_first() -> None:
    """b names d, d names a lane baseline c; e and c name each other (a loop keeps its order)."""
    specs = {
        "a": {},
        "b": {"reference": {"candidate": "d"}},
        "c": {"reference": {"candidate": "e"}},
        "d": {"lane": {"after": "c"}},
        "e": {"reference": {"candidate": "c"}},
    }
    met = [Candidate(Path(f"{n}.toml"), {"name": n, **s}) for n, s in specs.items()]
    assert run_order(met) == ["a", "e", "c", "d", "b"]


def test_one_model_at_a_time_tp1_then_tp2_then_its_lanes() -> None:
    """The shipped campaign: each TP1 reference, its TP2 baseline, then that baseline's lanes,
    and only then the next model."""
    shipped = load_candidates([MAIN / "candidates"])
    campaign = sorted((c for c in shipped if c.spec.get("campaign")), key=lambda c: c.name)
    found = groups(campaign)
    assert [g for g in found if g[0].startswith(("laguna", "qwen", "nemotron"))] == [
        ["laguna-s-2.1-nvfp4-tp1", "laguna-s-2.1-nvfp4", "laguna-s-2.1-nvfp4-capacity-v3",
         "laguna-s-2.1-nvfp4-dflash"],
        ["nemotron-3-super-120b-a12b-nvfp4-tp1", "nemotron-3-super-120b-a12b-nvfp4",
         "nemotron-3-super-120b-a12b-nvfp4-capacity-v3"],
        ["qwen3.5-122b-a10b-nvfp4-tp1", "qwen3.5-122b-a10b-nvfp4",
         "qwen3.5-122b-a10b-nvfp4-capacity-v3", "qwen3.5-122b-a10b-nvfp4-thinking"],
    ]  # fmt: skip
    assert ["inkling-small-nvfp4", "inkling-small-nvfp4-capacity-v4-reasoning",
            "inkling-small-nvfp4-mxfp8kv"] in found  # fmt: skip
    assert run_order(campaign) == [name for group in found for name in group]


# ---------------------------------------------------------------- where the transcript comes from


def _passed_run(root: Path, run_id: str, prompt_set: str, name: str = NAME) -> Path:
    run_dir = write_run(root, run_id=run_id, name=name)
    line = {"kind": "transcript", "id": "factual", "prompt_set_sha256": prompt_set, "tokens": []}
    (run_dir / name / TRANSCRIPT).write_text(json.dumps(line) + "\n")
    return run_dir


def test_the_newest_pass_of_the_same_prompt_set(tmp_path: Path) -> None:
    root = tmp_path / "results"
    _passed_run(root, "20260101T000000Z-aaaa", "s1")
    _passed_run(root, "20260102T000000Z-bbbb", "s1")
    _passed_run(root, "20260103T000000Z-cccc", "s2")  # another prompt set: never compared
    assert (root / "latest").is_symlink()  # the newest run's link sorts ahead of the dated ones
    found = find_reference(RunState(root, []), NAME, "s1")
    assert isinstance(found, Reference)
    assert (found.run, found.source) == ("20260102T000000Z-bbbb", str(root / found.run))
    assert found.identity["run"] == found.run and "latest" not in found.identity["run_dir"]
    assert [r["id"] for r in found.records] == ["factual"]


def test_no_pass_anywhere_says_so(tmp_path: Path) -> None:
    root = tmp_path / "results"
    run_dir = _passed_run(root, "20260101T000000Z-aaaa", "s1")
    finding = json.loads((run_dir / NAME / "finding.json").read_text())
    finding["verdict"] = "FAIL"
    (run_dir / NAME / "finding.json").write_text(json.dumps(finding))
    why = find_reference(RunState(root, []), NAME, "s1")
    assert isinstance(why, str)
    assert why.startswith(f"reference {NAME!r} has no PASS in this run or an earlier dated run")
    assert str(root) in why


def _this_run(root: Path, outcome: str) -> RunState:
    """A run in progress whose reference candidate settled with ``outcome`` at gate 03 (PASSED:
    every gate through, none with anything to claim)."""
    candidate = fake_candidate(root, NAME)
    state = RunState(root, [candidate], run_id="20260105T000000Z-eeee")
    record = state.record(candidate)
    for gate in record.gates.values():
        gate.outcome = NOT_APPLICABLE
    if outcome != PASSED:
        record.gates["deterministic"].outcome = outcome
        record.gates["deterministic"].reason = "capital-of-france: expected 'Paris'"
    return state


@pytest.mark.parametrize(
    ("outcome", "said"), [(FAILED, "FAILED"), (ERROR, "ended in a suite ERROR")]
)
def test_a_reference_that_failed_in_this_run_is_not_replaced_by_an_older_pass(
    tmp_path: Path, outcome: str, said: str
) -> None:
    root = tmp_path / "results"
    _passed_run(root, "20260101T000000Z-aaaa", "s1")  # an older PASS that must not stand in
    why = find_reference(_this_run(root, outcome), NAME, "s1")
    assert isinstance(why, str), why
    assert why.startswith(f"reference {NAME!r} {said} in this run (gate deterministic: ")
    assert "capital-of-france" in why and "does not stand in" in why


def test_this_runs_pass_comes_first(tmp_path: Path) -> None:
    root = tmp_path / "results"
    _passed_run(root, "20260101T000000Z-aaaa", "s1")
    state = _this_run(root, PASSED)
    record = state.records[NAME]
    line = {"kind": "transcript", "id": "now", "prompt_set_sha256": "s1", "tokens": []}
    record.evidence.append_jsonl(TRANSCRIPT, line)
    found = find_reference(state, NAME, "s1")
    assert isinstance(found, Reference) and found.source == "this run"
    assert (found.run, [r["id"] for r in found.records]) == (state.run_id, ["now"])


def test_another_workers_unsettled_reference_is_not_waited_for(tmp_path: Path) -> None:
    """--hosts places a reference with its candidates; should it still be elsewhere, a record of
    this run not settled there is no reference yet: not judged, never an older PASS."""
    root = tmp_path / "results"
    _passed_run(root, "20260101T000000Z-aaaa", "s1")
    elsewhere = _this_run(root, PASSED)
    elsewhere.records[NAME].save()  # unfinished: the other worker is still on it
    here = RunState(root, elsewhere.candidates, run_id=elsewhere.run_id)
    why = find_reference(here, NAME, "s1")
    assert why == f"reference {NAME!r} runs in this run on another worker and has not settled"


def test_a_pass_about_other_bytes_is_skipped_and_said(tmp_path: Path) -> None:
    root = tmp_path / "results"
    _passed_run(root, "20260101T000000Z-aaaa", "s1")
    today = fake_candidate(root, NAME)
    today.model["revision"] = "sha256:" + "9" * 64  # the file pins other bytes now
    why = find_reference(RunState(root, [today]), NAME, "s1")
    assert isinstance(why, str)
    assert "PASSes about other bytes skipped: 20260101T000000Z-aaaa: model revision" in why


# ---------------------------------------------------------------- who made it


def test_the_identity_comes_from_the_references_own_folder(tmp_path: Path) -> None:
    root = tmp_path / "results"
    run_dir = _passed_run(root, "20260101T000000Z-aaaa", "s1")
    (run_dir / NAME / "identity" / "suite.json").write_text(
        json.dumps({"commit": "c0ffee" * 6 + "c0ff", "dirty": False})
    )
    found = find_reference(RunState(root, []), NAME, "s1")
    assert isinstance(found, Reference)
    launch = json.loads((run_dir / NAME / "launch.json").read_text())
    assert found.identity == {
        "candidate": NAME,
        "run": "20260101T000000Z-aaaa",
        "run_dir": str(run_dir),
        "verdict": "PASS",
        "model_revision": fake_candidate(root).model["revision"],
        "model_resolved": fake_candidate(root).model["revision"],
        "engine": "vllm",
        "engine_version": "0.0.test",
        "image": None,
        "image_id": None,
        "image_digests": None,
        "launch_sha256": launch_digest(launch),
        "suite_commit": "c0ffee" * 6 + "c0ff",
        "suite_dirty": False,
    }


def test_the_launch_digest_is_the_same_launch_on_another_port() -> None:
    one = {"argv": ["vllm", "--port", "41000"], "env": {"A": "1"}, "base_url": "http://h:41000"}
    two = {"argv": ["vllm", "--port", "41999"], "env": {"A": "1"}, "base_url": "http://h:41999"}
    other = {**two, "env": {"A": "2"}}
    assert launch_digest(one) == launch_digest(two) != launch_digest(other)


def test_the_identity_is_recorded_in_the_judged_candidates_finding(tmp_path: Path) -> None:
    root = tmp_path / "results"
    _passed_run(root, "20260101T000000Z-aaaa", "s1")
    found = find_reference(RunState(root, []), NAME, "s1")
    assert isinstance(found, Reference)
    judged = fake_candidate(root, "judged")
    record = RunState(root, [judged], run_id="20260102T000000Z-bbbb").record(judged)
    record_reference(record, found)
    finding = json.loads((record.evidence.root / "finding.json").read_text())
    on_disk = json.loads((record.evidence.root / REFERENCE_IDENTITY).read_text())
    assert finding["identity"]["reference"] == on_disk == found.identity | {"source": found.source}


def test_the_suite_commit_is_this_checkouts() -> None:
    head = subprocess.run(
        ["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    facts = suite_identity()
    assert facts["commit"] == head and len(head) == 40
    assert isinstance(facts["dirty"], bool)


def test_under_hosts_a_reference_and_the_candidates_naming_it_share_a_host(tmp_path: Path) -> None:
    """One worker per host: on the same one, the reference runs first and its record of this
    run is the one the candidates see (as a lane goes with its baseline)."""
    from tp2qual.hosts import Host
    from tp2qual.placement import Fleet, placement_for

    folder = tmp_path / "c"
    _write(folder, changed({"name": "ref"}))
    _write(folder, changed({"name": "judged", "reference": {"candidate": "ref"}}))
    _write(
        folder, changed({"name": "judged-lane", "lane.kind": "optional", "lane.after": "judged"})
    )
    _write(folder, changed({"name": "heavy"}))
    found = {c.name: c for c in load_candidates([folder])}
    fleet = Fleet([Host("a", "unix:///a.sock"), Host("b", "unix:///b.sock")])
    for order in (sorted(found), sorted(found, reverse=True)):
        placement = placement_for([found[n] for n in order], fleet, tmp_path / "results", "run")
        assert placement["ref"] == placement["judged"] == placement["judged-lane"]
        assert placement["heavy"] != placement["ref"]  # the hosts are balanced around the unit


def test_the_report_shows_the_references_identity_in_the_candidate_section(
    tmp_path: Path,
) -> None:
    from tp2qual.evidence.report import build_run, render

    root = tmp_path / "results"
    ref_dir = _passed_run(root, "20260101T000000Z-aaaa", "s1")
    (ref_dir / NAME / "identity" / "suite.json").write_text(json.dumps({"commit": "ab" * 20}))
    found = find_reference(RunState(root, []), NAME, "s1")
    assert isinstance(found, Reference)
    run_dir = write_run(root, run_id="20260102T000000Z-bbbb", name="judged")
    finding_path = run_dir / "judged" / "finding.json"
    finding = json.loads(finding_path.read_text())
    finding["identity"]["reference"] = found.identity | {"source": found.source}
    finding_path.write_text(json.dumps(finding))
    page = render(build_run(run_dir))
    section = page.split('<section id="judged">', 1)[1].split("</section>", 1)[0]
    block = section.split("Gate 07's reference", 1)[1].split("<h3>Gates</h3>", 1)[0]
    for value in (NAME, "20260101T000000Z-aaaa", "ab" * 20, found.identity["launch_sha256"]):
        assert value in block, value
    assert "model revision (pin)" in block and "not recorded" in block  # its image: a process


def test_the_readmes_tp2_command_brings_its_tp1_reference_on_a_fresh_results_folder(
    tmp_path: Path,
) -> None:
    """``pytest -k smollm2-135m-vllm-tp2`` (README, "TP2 on the CPU") selects the TP2 serve and
    its lane, not ``smollm2-135m-vllm``: collected on a fresh ``--results`` folder, the
    reference is brought into the run, first, with one line saying so (nothing is started;
    ``test_reference_brought.py`` runs the same rule through every gate)."""
    from tp2qual.serving.launchers.docker.engine import unavailable

    if why := unavailable():
        pytest.skip(f"the TP2 serve runs in Docker, and no engine answers here: {why}")
    env = {**os.environ, "TP2QUAL_VLLM_CPU_IMAGE_ID": "sha256:" + "0" * 64}  # collection only
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-k", "smollm2-135m-vllm-tp2",
         f"--results={tmp_path / 'results'}", "-p", "no:cacheprovider"],
        cwd=MAIN, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stdout.splitlines() if "brought into this run" in line]
    assert len(said) == 1 and said[0].startswith(
        "tp2qual: smollm2-135m-vllm brought into this run: smollm2-135m-vllm-tp2 is judged"
    ), done.stdout
    ids = [line.rpartition("[")[2] for line in done.stdout.splitlines() if "::" in line]
    first = [i for i, n in enumerate(ids) if not n.startswith("smollm2-135m-vllm-tp2")]
    assert first and max(first) < min(set(range(len(ids))) - set(first)), ids  # it runs first
