"""Floors against another candidate's measured figure, on the real engine: real inner runs.

Three copies of the embedded candidate (SmolLM2-135M on llama.cpp, CPU), each behind the fault
proxy (plugins/tests/faultproxy.py), in one run:

* ``REF``, the proxy transparent: the TP1 reference whose measured figures the others' floors
  are fractions of;
* ``HALF``, a TP2-like serve naming ``REF`` as its ``[reference]``, with the campaign's own
  floors of its reference (candidates/_campaign-tp2.toml: decode ≥ 0.6 x), behind the proxy's
  ``slow_decode`` with ``--stretch 2.5``: the real engine's streamed decode rate divided by 2.5,
  under half, so that the load swinging between the two serves' measurements on a shared
  machine (the same engine was seen at 18.9 and 21 tok/s minutes apart, which lifted a /2 copy
  to 0.57 of its reference) cannot lift it over 0.6; a serve at exactly half fails the same
  floor by its arithmetic (test_floors.py);
* ``LANE``, a speculative lane after ``REF`` with the DFlash lane's floors of its baseline
  (candidates/laguna-s-2.1-nvfp4-dflash.toml), the same slow proxy by its lane changes.

Proved from the inner runs' findings and artifacts: the reference passes; both slow serves
pass every functional gate and FAIL throughput, the reason naming the floor, its fraction, the
reference and the run its figure came from; the floor is that fraction of the reference's
figure exactly; every request was budgeted by that floor; ``verify`` re-derives it all from the
candidate's own folder. A second run holding ``HALF`` alone takes its reference's figure from
the first (the newest earlier dated run), and says so.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_faults import (
    MAIN,
    Inner,
    assert_failed_and_blocked,
    assert_nothing_left,
    run_inner,
    smollm2_spec,
    with_fault,
    write_candidate,
)

from tp2qual.perf.floor_keys import statistic

pytestmark = [pytest.mark.slow, pytest.mark.paired_rates]

REF, HALF, LANE = "floors-a-reference", "floors-b-half-speed", "floors-a-reference-lane"
CAMPAIGN = MAIN / "candidates" / "_campaign-tp2.toml"
DFLASH = MAIN / "candidates" / "laguna-s-2.1-nvfp4-dflash.toml"
DECODE = "decode_tok_s_median"
SLOWER = 2.5  # HALF's decode rate: the engine's own divided by this


def _rules(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())["gates"]["throughput"]["derived_floors"]


def _proxied(name: str, fault: str, stretch: float) -> dict[str, Any]:
    spec = with_fault(smollm2_spec(name), fault)
    command = spec["launch"]["command"]
    at = command.index("--fault") + 2
    spec["launch"]["command"] = [*command[:at], "--stretch", str(stretch), *command[at:]]
    # 32 tokens a sample: the decode rate of 31 gaps, not of 15
    spec["gates"]["throughput"].update(max_tokens=32)
    return spec


def _half_speed() -> dict[str, Any]:
    spec = _proxied(HALF, "slow_decode", SLOWER)
    spec["reference"] = {"candidate": REF, "why": "self-test: its TP1 serve, proxied untouched"}
    throughput = spec["gates"]["throughput"]
    throughput["floors"] = {}  # only the campaign's floors of the reference
    throughput["derived_floors"] = copy.deepcopy(_rules(CAMPAIGN))
    return spec


LANE_FILE = """include = ["{ref}.toml"]
name = "{lane}"
description = "self-test: a speculative lane that decodes at half its baseline's rate"

[lane]
kind = "optional"
after = "{ref}"
why = "self-test of a speed lane's floor of its baseline"

[lane.changes]
replace = {{ "--fault" = "slow_decode", "--stretch" = "2.0" }}

[gates.throughput]
floors = {{}}
"""


def _lane_file(folder: Path) -> None:
    text = LANE_FILE.format(ref=REF, lane=LANE)
    for key, rule in _rules(DFLASH).items():
        body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in rule.items() if k != "fallback")
        text += f"\n[gates.throughput.derived_floors.{key}]\n{body}\n"
    (folder / f"{LANE}.toml").write_text(text)
    tomllib.loads(text)  # a valid file, before the inner run reads it


# Loaded into the inner run: each gate's request budget, as the server handle gave it.
BUDGET_PLUGIN = """
import json, os
from tp2qual.serving import server

real = server.Server.api

def api(self, artifact, gate=None, watch=None):
    made = real(self, artifact, gate, watch)
    with open(os.environ["INNER_BUDGETS"], "a") as fh:
        fh.write(json.dumps({"candidate": self.candidate.name, "gate": gate,
                             "floor_tok_s": made.budget.floor_tok_s,
                             "source": made.budget.floor_source}) + "\\n")
    return made

server.Server.api = api
"""


@dataclass
class Pinned(Inner):
    """An inner run whose folder stays this run's after a later run moves ``latest``."""

    pinned: Path = Path()

    @property
    def run_dir(self) -> Path:
        return self.pinned


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Inner]:
    tmp = tmp_path_factory.mktemp("relative-floors")
    folder = tmp / "candidates"
    write_candidate(folder, _proxied(REF, "none", 1.0))
    write_candidate(folder, _half_speed())
    _lane_file(folder)
    (tmp / "inner_budget.py").write_text(BUDGET_PLUGIN)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("INNER_BUDGETS", str(tmp / "budgets.jsonl"))
        inner = run_inner(tmp, [REF, HALF, LANE], "-p", "inner_budget")
    return tmp, Pinned(inner.proc, inner.results, inner.events, inner.junit, inner.run_dir)


def _json(inner: Inner, name: str, artifact: str) -> Any:
    return json.loads((inner.evidence(name) / artifact).read_text())


def _samples(inner: Inner, name: str) -> list[dict[str, Any]]:
    lines = (inner.evidence(name) / "throughput_samples.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["phase"] == "sample"]


def _decode_floor(inner: Inner, name: str) -> dict[str, Any]:
    """The derived decode floor (a lane keeps its baseline's written one beside it)."""
    floors = _json(inner, name, "throughput_floors.json")["floors"]
    return next(f for f in floors if f["key"] == DECODE and f["basis"] != "written")


def _verify(run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tp2qual", "verify", str(run_dir)],
        cwd=MAIN, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_reference_passes_through_the_transparent_proxy(
    campaign: tuple[Path, Inner],
) -> None:
    _, inner = campaign
    assert inner.finding(REF)["verdict"] == "PASS", inner.output()
    assert_nothing_left(inner, REF)


def test_a_tp2_serve_at_half_its_references_rate_fails_throughput_with_the_basis_named(
    campaign: tuple[Path, Inner],
) -> None:
    _, inner = campaign
    finding = assert_failed_and_blocked(inner, HALF, "throughput")
    reason = finding["gates"]["throughput"]["reason"]
    run = inner.run_dir.name
    assert f"{DECODE} = " in reason and f"(0.6 x the reference {REF}'s " in reason, reason
    assert f", run {run})" in reason, reason  # the reference's figure, from this very run
    floor = _decode_floor(inner, HALF)
    reference = statistic(DECODE, _samples(inner, REF))
    assert (floor["basis"], floor["of_candidate"], floor["of_run"]) == ("reference", REF, run)
    assert floor["of_value"] == pytest.approx(reference) and floor["fraction"] == 0.6
    assert floor["value"] == pytest.approx(0.6 * reference)
    own = statistic(DECODE, _samples(inner, HALF))
    assert own is not None and reference is not None
    print(f"\nreference {reference:.1f} tok/s, half-speed {own:.1f} ({own / reference:.2f})")
    assert own / reference < 0.6  # what the 0.6 floor needs to bind
    copied = _json(inner, HALF, "throughput_reference.json")["reference"]
    assert (copied["candidate"], copied["run"], len(copied["samples"])) == (REF, run, 5)
    claims = {c["name"]: c["value"] for c in finding["gates"]["throughput"]["claims"]}
    assert f"{DECODE}: reference {REF} (run {run})" in claims["floor_bases"]
    assert_nothing_left(inner, HALF)


def test_every_request_was_budgeted_by_the_floor_that_applies(
    campaign: tuple[Path, Inner],
) -> None:
    """Each gate's requests are budgeted by the decode floor gate 08 judged (budget.py: 60 s +
    1.25 x tokens / floor), derived from the reference before the first request was sent."""
    tmp, inner = campaign
    floor = _decode_floor(inner, HALF)["value"]
    given = [json.loads(line) for line in (tmp / "budgets.jsonl").read_text().splitlines()]
    mine = [g for g in given if g["candidate"] == HALF]
    assert {g["gate"] for g in mine} >= {"deterministic", "repetition", "throughput"}, mine
    for budget in mine:
        assert budget["floor_tok_s"] == pytest.approx(floor), budget
        assert f"(0.6 x the reference {REF}'s " in budget["source"], budget
    ref = {g["source"] for g in given if g["candidate"] == REF}
    assert ref == {f"{DECODE} ≥ 0.1 (written)"}  # its own written floor


def test_a_speed_lane_slower_than_its_baseline_fails_throughput(
    campaign: tuple[Path, Inner],
) -> None:
    _, inner = campaign
    finding = assert_failed_and_blocked(inner, LANE, "throughput")
    reason = finding["gates"]["throughput"]["reason"]
    assert f"{DECODE} = " in reason and f"(1 x the lane baseline {REF}'s " in reason, reason
    floor = _decode_floor(inner, LANE)
    assert floor["value"] == pytest.approx(statistic(DECODE, _samples(inner, REF)))
    assert_nothing_left(inner, LANE)


def test_verify_rederives_the_floors_from_the_copied_reference(
    campaign: tuple[Path, Inner],
) -> None:
    _, inner = campaign
    checked = _verify(inner.run_dir)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_later_run_takes_the_reference_from_the_newest_earlier_run(
    campaign: tuple[Path, Inner],
) -> None:
    tmp, first = campaign
    again = run_inner(tmp, [HALF], "-m", "throughput")  # the reference is not in this run
    assert again.run_dir != first.run_dir
    floor = _decode_floor(again, HALF)
    assert (floor["of_candidate"], floor["of_run"]) == (REF, first.run_dir.name), floor
    reason = again.finding(HALF)["gates"]["throughput"]["reason"]
    assert f"run {first.run_dir.name})" in reason, reason
    copied = _json(again, HALF, "throughput_reference.json")["reference"]
    assert copied["source"] == "an earlier run"
