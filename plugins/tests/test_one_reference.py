"""One rule chooses a candidate's reference run (evidence/reference_rule.py): gate 07 (its
transcript), gate 08 (the floors' measured basis), the overview (its ratios) and verify name the
same run, or all say none.

The false results two rules made: a reference that FAILED in this run was replaced, for gate
08's floors only, by an older PASS on another image (gate 07 refused to judge), so a TP2 serve
was held to a floor from bytes that are not its reference's.

Run folders are made by ``test_verify.write_run`` (the real core writes them).
"""

from __future__ import annotations

import json
from pathlib import Path

from test_verify import fake_candidate, rehash, write_run

from tp2qual.artifacts.finding import Finding
from tp2qual.candidate import Candidate
from tp2qual.evidence.overview_reference import reference_ratios
from tp2qual.evidence.reference import (
    REFERENCE_IDENTITY,
    TRANSCRIPT,
    find_reference,
    prompt_set_sha256,
)
from tp2qual.evidence.reference_rule import RunSeen, Standing, choose_reference
from tp2qual.evidence.run import RunState
from tp2qual.evidence.throughput_reference import THROUGHPUT_REFERENCE, as_record, measured_basis
from tp2qual.evidence.verify import verify_run
from tp2qual.evidence.verify_reference import recorded_runs, rule_again

OLD, MID, NEW = "20261101T000000Z-0001", "20261201T000000Z-0002", "20261202T000000Z-0003"
PROMPTS = prompt_set_sha256()  # the shipped prompt set, as gate 07 stamps its transcript
IMAGE, OTHER_IMAGE = "sha256:" + "1" * 64, "sha256:" + "2" * 64


def _tp1_today(root: Path) -> Candidate:
    """The reference's file as it stands: a Docker serve pinned to IMAGE."""
    tp1 = fake_candidate(root, "tp1")
    tp1.spec["launch"] = {"kind": "docker", "docker": {"image": "example/eng:1", "pin": IMAGE}}
    return tp1


def _tp1_passed(root: Path, run_id: str, image: str) -> None:
    run_dir = write_run(root, run_id=run_id, name="tp1")
    launch = json.loads((run_dir / "tp1" / "launch.json").read_text())
    (run_dir / "tp1" / "launch.json").write_text(json.dumps(launch | {"pin": {"value": image}}))
    line = {"kind": "transcript", "id": "factual", "prompt_set_sha256": PROMPTS, "tokens": []}
    (run_dir / "tp1" / TRANSCRIPT).write_text(json.dumps(line) + "\n")


def _tp2_judged(root: Path, tp1: Candidate, digest: str = PROMPTS) -> tuple[str | None, ...]:
    """tp2 judged in NEW against tp1: what gate 07 and gate 08 recorded (as they do), then the
    run each of the four names (None: none)."""
    run_dir = write_run(root, run_id=NEW, name="tp2")
    cand_dir = run_dir / "tp2"
    finding = json.loads((cand_dir / "finding.json").read_text())
    finding["candidate_spec"]["reference"] = {"candidate": "tp1"}
    (cand_dir / "finding.json").write_text(json.dumps(finding))
    # the finding states its PASS sentence as the core would with this [reference] named
    finding["pass_sentence"] = Finding.read(cand_dir / "finding.json").pass_sentence(run_dir)
    (cand_dir / "finding.json").write_text(json.dumps(finding))
    state = RunState(root, [tp1], run_id=NEW)
    gate_07 = find_reference(state, "tp1", digest)
    if not isinstance(gate_07, str):  # record_reference's artifact, as gate 07 writes it
        (cand_dir / REFERENCE_IDENTITY).write_text(json.dumps(gate_07.identity))
    gate_08 = measured_basis(root, NEW, "reference", "tp1", None, tp1)
    (cand_dir / THROUGHPUT_REFERENCE).write_text(json.dumps(as_record({"reference": gate_08})))
    rehash(run_dir)
    overview = reference_ratios(run_dir, cand_dir, Finding.read(cand_dir / "finding.json"))
    runs = {run for _, run in recorded_runs(cand_dir).values()}
    verify = rule_again(run_dir, "tp1", runs)
    assert verify_run(run_dir).ok, [p.line() for p in verify_run(run_dir).problems]
    return (
        None if isinstance(gate_07, str) else gate_07.run,
        None if isinstance(gate_08, str) else gate_08.run,
        overview.run or None,
        verify.run,
    )


def test_a_reference_failed_here_and_an_older_pass_on_another_image_all_say_none(
    tmp_path: Path,
) -> None:
    root = tmp_path / "results"
    _tp1_passed(root, OLD, OTHER_IMAGE)
    write_run(root, run_id=NEW, name="tp1", capital="Lyon.")  # FAILs gate 03 in this run
    assert _tp2_judged(root, _tp1_today(root)) == (None, None, None, None)
    overview = reference_ratios(
        root / NEW, root / NEW / "tp2", Finding.read(root / NEW / "tp2" / "finding.json")
    )
    assert "FAILED in this run" in overview.where and "does not stand in" in overview.where


def test_the_same_older_pass_is_named_by_all_four_skipping_another_image(tmp_path: Path) -> None:
    root = tmp_path / "results"
    _tp1_passed(root, OLD, IMAGE)
    _tp1_passed(root, MID, OTHER_IMAGE)  # newer, but about other bytes
    assert _tp2_judged(root, _tp1_today(root)) == (OLD, OLD, OLD, OLD)
    cand_dir = root / NEW / "tp2"
    (cand_dir / THROUGHPUT_REFERENCE).unlink()  # a run from before gate 08 kept its copy:
    finding = Finding.read(cand_dir / "finding.json")  # the overview takes gate 07's run, not
    assert reference_ratios(root / NEW, cand_dir, finding).run == OLD  # the newest PASS (MID)


def test_verify_names_a_floor_taken_from_another_run_than_gate_07s(tmp_path: Path) -> None:
    """What the old rule of gate 08 did: its floors from the newest PASS, gate 07 from another."""
    root = tmp_path / "results"
    _tp1_passed(root, OLD, IMAGE)
    _tp1_passed(root, MID, OTHER_IMAGE)
    _tp2_judged(root, _tp1_today(root))
    cand_dir = root / NEW / "tp2"
    wrong = measured_basis(root, NEW, "reference", "tp1")  # no pins compared: MID
    assert not isinstance(wrong, str) and wrong.run == MID
    (cand_dir / THROUGHPUT_REFERENCE).write_text(json.dumps(as_record({"reference": wrong})))
    rehash(root / NEW)
    lines = [p.line() for p in verify_run(root / NEW).problems]
    assert lines == [
        f"REFERENCE tp2/finding.json: 'tp1' taken from different runs (gate 07's transcript: "
        f"run {OLD}; gate 08's reference floors: run {MID}); one rule names one run"
    ], lines


def test_verify_names_an_earlier_pass_taken_in_place_of_this_runs_fail(tmp_path: Path) -> None:
    root = tmp_path / "results"
    _tp1_passed(root, OLD, IMAGE)
    write_run(root, run_id=NEW, name="tp1", capital="Lyon.")  # FAILs gate 03 in this run
    _tp2_judged(root, _tp1_today(root))
    old = measured_basis(root, MID, "reference", "tp1")  # judged before NEW: OLD's PASS
    assert not isinstance(old, str) and old.run == OLD
    (root / NEW / "tp2" / THROUGHPUT_REFERENCE).write_text(
        json.dumps(as_record({"reference": old}))
    )
    rehash(root / NEW)
    (line,) = [p.line() for p in verify_run(root / NEW).problems]
    assert line.startswith(
        f"REFERENCE tp2/finding.json: 'tp1' taken from another run than the one rule names "
        f"(gate 08's reference floors: run {OLD}); it names none: reference 'tp1' FAILED in this "
        "run (gate deterministic: "
    ), line


def test_the_rule_itself() -> None:
    here_failed = RunSeen(NEW, Standing.FAIL, cause="gate deterministic: wrong")
    older = [RunSeen(MID, Standing.PASS, other_bytes="image x"), RunSeen(OLD, Standing.PASS)]
    vetoed = choose_reference("tp1", here_failed, older, "results")
    assert vetoed.run is None and "FAILED in this run (gate deterministic: wrong)" in vetoed.why
    assert choose_reference("tp1", None, older, "results").run == OLD
    assert choose_reference("tp1", RunSeen(NEW, Standing.OTHER), older, "r").run == OLD
    here = choose_reference("tp1", RunSeen(NEW, Standing.PASS), older, "r")
    assert (here.run, here.this_run) == (NEW, True)
    unsettled = choose_reference("tp1", RunSeen(NEW, Standing.UNSETTLED), older, "r")
    assert unsettled.run is None and "has not settled" in unsettled.why
    none = choose_reference("tp1", None, older[:1], "r")
    assert none.why.endswith("PASSes about other bytes skipped: " + f"{MID}: image x")
