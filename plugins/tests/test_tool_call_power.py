"""Gate 05's stated power, pure: the failure rate N passing calls exclude, the verdict on one
mode's repeated calls, and a seeded simulation of the fault proxy's flaky parser (``tool_flaky``,
one call in five) judged by the gate's own rule at each campaign candidate's N.
"""

from __future__ import annotations

import random
import tomllib
from pathlib import Path

import faultproxy
import pytest

from tp2qual.candidate import load_candidate
from tp2qual.checks.tool_modes import call_tag, judge_long, long_aim, long_base, repeat_prompt
from tp2qual.checks.tool_power import excluded_rate, judge_repeats, repeats_needed

CANDIDATES = Path(__file__).resolve().parents[2] / "candidates"


def _includes_campaign(path: Path) -> bool:
    included = tomllib.loads(path.read_text()).get("include", [])
    return "_campaign-tp2.toml" in included or any(
        _includes_campaign(CANDIDATES / name) for name in included
    )


CAMPAIGN = [p for p in sorted(CANDIDATES.glob("[!_]*.toml")) if _includes_campaign(p)]


def test_the_excluded_rate_is_the_exact_one_sided_bound() -> None:
    assert excluded_rate(1) == pytest.approx(0.95)
    assert excluded_rate(20) == pytest.approx(0.13911, abs=1e-5)
    for n in (20, 100, 300):  # the rule of three, from above
        assert 3 / n * 0.9 < excluded_rate(n) < 3 / n
    for n in (3, 14, 20, 59):  # all-pass has probability exactly alpha at the bound
        assert (1 - excluded_rate(n)) ** n == pytest.approx(0.05)
    assert excluded_rate(0) == 1.0


def test_repeats_needed_is_the_fewest_that_exclude_the_tolerance() -> None:
    assert repeats_needed(0.2) == 14
    assert excluded_rate(14) <= 0.2 < excluded_rate(13)
    assert repeats_needed(0.05) == 59
    with pytest.raises(ValueError):
        repeats_needed(0.0)


def test_all_passing_states_the_rate_excluded_or_no_power() -> None:
    judged = judge_repeats("auto", [[]] * 20, 0.2)
    assert judged.ok and judged.measures["judged"]
    assert judged.measures["excluded_failure_rate"] == pytest.approx(0.139108, abs=1e-6)
    assert "a failure rate above 0.139 excluded at 95 %" in judged.measures["statement"]
    weak = judge_repeats("auto", [[]] * 5, 0.2)
    assert weak.ok and not weak.measures["judged"]
    assert weak.measures["statement"].startswith("not judged: no power: 5 passing calls")
    assert "tolerance 0.2 needs 14" in weak.measures["statement"]


def test_any_failed_call_fails_the_mode_naming_the_first() -> None:
    calls: list[list[str]] = [[], [], ["arguments: 42 is not of type 'string'"], [], ["x"]]
    verdict = judge_repeats("named", calls, 0.2)
    assert not verdict.ok and verdict.measures["failed_calls"] == [3, 5]
    assert verdict.reason.startswith("named: arguments: 42 is not of type 'string' [call #3;")
    assert "2 of 5 calls failed" in verdict.reason
    assert not judge_repeats("named", [], 0.2).ok  # no call made is never a pass


def test_each_repeat_shares_the_prefix_and_has_its_own_tag() -> None:
    assert call_tag("auto", 1) == "auto" and call_tag("auto", 7) == "auto#7"
    first, later = repeat_prompt("Weather?", 1, 20), repeat_prompt("Weather?", 7, 20)
    assert first == "Weather?" and later.startswith(first) and later.endswith("(request 7 of 20)")


def test_the_long_call_fills_at_least_its_share_of_the_bound() -> None:
    assert long_base(["auto", "named"]) == "named" and long_base(["auto-stream"]) is None
    wanted, aim = long_aim(2048, 0.5, 96)
    assert wanted == 1024 and wanted < aim <= 2048 - 96
    settings = {
        "modes": ["named"],
        "long_fill": 0.5,
        "tool": {"name": "f", "parameters": {"type": "object", "properties": {}}},
    }
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    got = {"tool_calls": [call], "finish_reason": "tool_calls"}
    _, problems, row = judge_long(got, settings, "sglang", 1100, 2048)
    assert not problems and row["fill"] == pytest.approx(0.5371, abs=1e-4)
    _, problems, _ = judge_long(got, settings, "sglang", 900, 2048)
    assert problems[0] == "long prompt of 900 tokens, 1024 wanted (50% of 2048)"


def _flaky_run(seed: int, n: int, rate: float = 0.2) -> list[list[str]]:
    """One mode's N calls through tool_flaky with ``seed``: the proxy's own draw per call."""
    rng = random.Random(seed)
    return [["arguments rejected"] if faultproxy.breaks(rng, rate) else [] for _ in range(n)]


@pytest.mark.parametrize("path", CAMPAIGN, ids=lambda p: p.stem)
def test_a_parser_failing_one_call_in_five_fails_19_of_20_seeded_runs(path: Path) -> None:
    """The weakest case: one mode alone, its N calls each broken with probability 0.2 (seeds
    0-19: 19 FAIL; 0.8 ** 20 = 1.2 % pass); then the whole gate's plain modes (all 20 FAIL)."""
    settings = load_candidate(path).gate("tool_calls")
    n, tolerance = int(settings["repeats"]), float(settings["max_failure_rate"])
    assert n == 20 and tolerance == 0.2 and settings["long_fill"] >= 0.5
    failed = sum(not judge_repeats("auto", _flaky_run(seed, n), tolerance).ok for seed in range(20))
    assert failed >= 19, f"{path.stem}: {failed} of 20 seeded runs FAILed at N = {n}"
    assert judge_repeats("auto", [[]] * n, tolerance).measures["judged"]
    # The whole gate: the proxy breaks non-streamed answers only, drawn in request order; the
    # plain modes come first (auto, required, named), each judged on its own N draws.
    plain = [m for m in ("auto", "required", "named") if m in settings["modes"]]

    def gate_fails(seed: int) -> bool:
        draws = _flaky_run(seed, n * len(plain))
        return any(not judge_repeats(m, draws[i * n : (i + 1) * n], tolerance).ok
                   for i, m in enumerate(plain))  # fmt: skip

    assert sum(gate_fails(seed) for seed in range(20)) == 20


def test_at_one_call_the_flaky_parser_passes_most_runs() -> None:
    """Why the repeats: the old gate (one call per mode) passed this parser about 4 in 5."""
    passed = sum(judge_repeats("auto", _flaky_run(seed, 1), 0.2).ok for seed in range(20))
    assert passed >= 12, passed
