"""Gate 07 asks its arithmetic items only where a drop can be judged from them (issue 40's
leftover): the one rule (``tp2qual.accuracy_asked``) on the shipped candidates, its override,
the transcript it leaves when nothing is asked (judged, re-derived and flagged by verify), and
``--plan``'s time and gate-07 lines, which count the items by the same rule. Pure and fast: no
engine; the shipped candidate files and the embedded run's recorded evidence.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from test_pass_sentence import HEAD, LOCAL, four_places, state_sentence

from tp2qual.accuracy_asked import NO_DROP_TO_JUDGE, RECORD_UNJUDGED, items_asked
from tp2qual.agreement_plan import agreement_lines
from tp2qual.artifacts.claims import make_claim
from tp2qual.artifacts.layout import write_manifest
from tp2qual.candidate import Candidate, load_candidate, load_candidates
from tp2qual.checks.agreement import ACCURACY, NOT_ASKED, STOPPED, SUMMARY
from tp2qual.checks.agreement.evaluate import PARTS, evaluate
from tp2qual.dry_run import estimate_for
from tp2qual.evidence.rederive.accuracy_items import check_not_asked
from tp2qual.evidence.rederive.common import Rederived
from tp2qual.evidence.verify import verify_run
from tp2qual.exceptions import CandidateError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {c.name: c for c in load_candidates([ROOT / "candidates"])}
ALL = list(SHIPPED.values())
DEEPSEEK, INKLING = SHIPPED["deepseek-v4-flash-0731"], SHIPPED["inkling-small-nvfp4"]
LANE = "inkling-small-nvfp4-mxfp8kv"
TRANSCRIPT, EXCHANGES = "agreement_transcript.jsonl", "agreement.jsonl"


def recording(candidate: Candidate) -> Candidate:
    """The candidate with ``accuracy_record_unjudged = true`` in its ``[gates.agreement]``."""
    spec = copy.deepcopy(candidate.spec)
    spec.setdefault("gates", {}).setdefault("agreement", {})[RECORD_UNJUDGED] = True
    return dataclasses.replace(candidate, spec=spec)


def test_a_serve_with_no_reference_and_none_judged_against_it_asks_none() -> None:
    """DeepSeek: no TP1 reference fits, and its one lane judged against it (the capacity lane)
    has gate 07 not applicable, so it counts for nothing."""
    capacity = SHIPPED["deepseek-v4-flash-0731-capacity-v4-reasoning"]
    assert capacity.reference == DEEPSEEK.name and capacity.not_applicable("agreement")
    found = items_asked(DEEPSEEK, ALL)
    assert not found.asked and found.why == NO_DROP_TO_JUDGE and found.referrers == ()
    assert found.items(DEEPSEEK.gate("agreement")) == 0
    assert items_asked(DEEPSEEK, [DEEPSEEK]) == found  # -k deepseek decides the same


def test_a_serve_judged_against_asks_them_whatever_is_selected() -> None:
    """Inkling has no reference either, but its MXFP8 KV lane is judged against it; its
    capacity lane (gate 07 not applicable) is not among those who count."""
    found = items_asked(INKLING, ALL)
    assert found.asked and found.referrers == (LANE,)
    assert "inkling-small-nvfp4-capacity-v4-reasoning" not in found.referrers
    assert found.items(INKLING.gate("agreement")) == 91
    assert found.why == f"asked: the reference of {LANE}"
    assert not items_asked(INKLING, [c for c in ALL if c.name != LANE]).asked  # the lane's doing


@pytest.mark.parametrize("name", [c.name for c in ALL if c.reference is not None])
def test_a_serve_with_a_reference_always_asks_them(name: str) -> None:
    assert items_asked(SHIPPED[name], [SHIPPED[name]]).asked


def test_the_tp1_references_and_the_embedded_reference_ask_them() -> None:
    for tp1 in ("laguna-s-2.1-nvfp4-tp1", "nemotron-3-super-120b-a12b-nvfp4-tp1",
                "qwen3.5-122b-a10b-nvfp4-tp1"):  # fmt: skip
        found = items_asked(SHIPPED[tp1], ALL)
        assert found.asked and tp1.removesuffix("-tp1") in found.referrers, tp1
    assert items_asked(SHIPPED["smollm2-135m-local"], ALL).referrers == ("smollm2-135m-docker",)


def test_accuracy_record_unjudged_asks_them_anyway(tmp_path: Path) -> None:
    found = items_asked(recording(DEEPSEEK), ALL)
    assert found.asked and RECORD_UNJUDGED in found.why
    assert DEEPSEEK.gate("agreement")[RECORD_UNJUDGED] is False  # the default
    # a candidate file may say it, as a boolean only (candidate.schema.json)
    for name in ("smollm2-135m-local.toml", "_smollm2-llamacpp.toml"):
        shutil.copy(ROOT / "candidates" / name, tmp_path / name)
    path = tmp_path / "smollm2-135m-local.toml"
    text = path.read_text()
    path.write_text(text + f"\n[gates.agreement]\n{RECORD_UNJUDGED} = true\n")
    assert load_candidate(path).gate("agreement")[RECORD_UNJUDGED] is True
    path.write_text(text + f'\n[gates.agreement]\n{RECORD_UNJUDGED} = "yes"\n')
    with pytest.raises(CandidateError, match=RECORD_UNJUDGED):
        load_candidate(path)


# --- the transcript: judged, re-derived, flagged ---

SETTINGS = {**DEEPSEEK.gate("agreement"), "prompts": 0}
LINE = {"kind": NOT_ASKED, "why": NO_DROP_TO_JUDGE, "referrers": []}


def test_a_not_asked_line_is_the_accuracy_parts_reason_never_a_judgement() -> None:
    judged = evaluate([LINE], SETTINGS)
    assert not judged.problems
    assert judged.not_judged[PARTS["accuracy"]] == NO_DROP_TO_JUDGE
    assert judged.claims["accuracy_judged"] is False
    assert judged.claims["accuracy_judgement"] == NO_DROP_TO_JUDGE


@pytest.mark.parametrize(
    "beside, said",
    [
        ({"kind": ACCURACY, "id": "arith-000", "correct": True}, "1 item or stop line(s)"),
        ({"kind": STOPPED, "after": 0, "why": "certain"}, "1 item or stop line(s)"),
        ({"kind": "reference", "id": "p", "tokens": []}, "a reference transcript"),
    ],
)
def test_a_not_asked_line_beside_what_asking_leaves_is_a_problem(beside: dict, said: str) -> None:
    judged = evaluate([LINE, beside], SETTINGS)
    assert any("not asked, yet" in p and said in p for p in judged.problems), judged.problems
    out = Rederived()
    check_not_asked([LINE, beside], {}, out)
    assert bool(out.mismatches) == (beside["kind"] != "reference")
    recording_too = evaluate([LINE], {**SETTINGS, RECORD_UNJUDGED: True})
    assert any(RECORD_UNJUDGED in p for p in recording_too.problems)


def not_asked_run(tmp_path: Path) -> Path:
    """The embedded run (SmolLM2 on llama.cpp, no reference) as a run where nothing was judged
    against it would have left it: the items' lines and exchanges gone, the not-asked line in
    their place, the summary, claims and skipped parts as the gate writes them."""
    (recorded,) = [p for p in LOCAL.iterdir() if p.is_dir()]
    run_dir = Path(shutil.copytree(recorded, tmp_path / "results" / recorded.name))
    root = run_dir / "smollm2-135m-local"
    lines = [json.loads(x) for x in (root / TRANSCRIPT).read_text().splitlines()]
    body = [r for r in lines if r["kind"] not in (ACCURACY, STOPPED, SUMMARY)] + [LINE]
    resolved = json.loads((root / "identity/candidate.json").read_text())
    judged = evaluate(body, resolved["gates"]["agreement"])
    rows = [*body, {"kind": SUMMARY, **judged.claims}]
    (root / TRANSCRIPT).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    exchanges = [x for x in (root / EXCHANGES).read_text().splitlines()
                 if not json.loads(x)["tag"].startswith("item:")]  # fmt: skip
    (root / EXCHANGES).write_text("".join(x + "\n" for x in exchanges))
    finding = json.loads((root / "finding.json").read_text())
    gate = finding["gates"]["agreement"]
    gate["claims"] = [
        make_claim(root, n, TRANSCRIPT, {"op": "field", "path": n}).as_dict() for n in judged.claims
    ]
    gate["skipped"] = {k: v for k, v in gate["skipped"].items() if k != PARTS["accuracy"]}
    gate["skipped"] |= judged.not_judged
    (root / "finding.json").write_text(json.dumps(finding, indent=2, sort_keys=True) + "\n")
    state_sentence(root)  # the sentence stated, the manifest written again
    return run_dir


def test_a_run_that_asked_none_says_so_in_every_place_and_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = not_asked_run(tmp_path)
    said = four_places(run_dir, "smollm2-135m-local", capsys)
    assert said == HEAD + (
        "gate 07 no reference (none named); judged: greedy is argmax, self-consistency, "
        f"self-consistency near the bound, cached prefix; not judged: accuracy ({NO_DROP_TO_JUDGE})"
    )
    result = verify_run(run_dir)
    assert result.ok, [p.line() for p in result.problems]
    assert result.rechecked["agreement"] == 24  # the 34 exchanges less the ten items


def test_verify_flags_an_item_beside_the_not_asked_line(tmp_path: Path) -> None:
    run_dir = not_asked_run(tmp_path)
    root = run_dir / "smollm2-135m-local"
    rows = [json.loads(x) for x in (root / TRANSCRIPT).read_text().splitlines()]
    item = {"kind": ACCURACY, "id": "arith-000", "items_sha256": "x", "correct": None}
    rows.insert(len(rows) - 1, item)  # before the summary
    (root / TRANSCRIPT).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    write_manifest(run_dir, run_id=run_dir.name, final=True, interrupted=False)  # hashes agree
    result = verify_run(run_dir)
    assert not result.ok
    found = [p.line() for p in result.problems]
    assert any(f"{NOT_ASKED} lines asked" in line for line in found), found


# --- --plan: the same rule counts the items for time and power ---


def test_the_plan_asks_deepseek_nothing_and_its_time_drops_by_the_items() -> None:
    found = estimate_for(DEEPSEEK, SHIPPED, ALL)
    asking = estimate_for(recording(DEEPSEEK), SHIPPED, ALL)  # the same serve, asking them
    assert found.accuracy_items == (0, 1024) and asking.accuracy_items == (91, 1024)
    assert found.gates["agreement"].requests == asking.gates["agreement"].requests - 91
    for expected in (True, False):
        items = asking.accuracy_seconds(91, 1024, expected=expected)
        total = found.expected_seconds if expected else found.seconds
        other = asking.expected_seconds if expected else asking.seconds
        assert total == pytest.approx(other - items)
    assert round(asking.accuracy_seconds(91, 1024, expected=True) / 60, 1) == 49.7
    lines = found.lines()
    assert f"  of gate 07, its accuracy items: none, {NO_DROP_TO_JUDGE}" in lines
    assert not any("its 91 accuracy items" in line for line in lines)
    said = agreement_lines(DEEPSEEK, items_asked(DEEPSEEK, ALL))
    assert said[-1] == f"accuracy: {NO_DROP_TO_JUDGE}"


def test_the_plan_of_inkling_is_unchanged_it_asks_its_91_items() -> None:
    found = estimate_for(INKLING, {}, ALL)  # selected alone: -k inkling
    assert found.accuracy_items == (91, 1024) and not found.items_not_asked
    assert found == estimate_for(recording(INKLING), {}, ALL)  # as if it always asked
    assert any("its 91 accuracy items" in line for line in found.lines())
    said = agreement_lines(INKLING, items_asked(INKLING, ALL))
    assert said[-3].startswith("accuracy: 91 items at most") and LANE in said[-2]
