"""Placing qualification jobs on several hosts, and the simulated campaign, on hand-made sets."""

from __future__ import annotations

import itertools
import random

import pytest

from tp2qual.perf.schedule import RULES, Job, Placement, place, simulate

# Skewed: one long job first in the given order would be fine; here the long ones come last, so
# round-robin puts both on the same host.
SKEWED = [Job("a", 10), Job("b", 10), Job("c", 10), Job("d", 100), Job("e", 10), Job("f", 100)]

# A campaign in miniature: two baselines with a lane each, and two plain jobs.
CAMPAIGN = [
    Job("base1", 60),
    Job("lane1", 50, after="base1"),
    Job("base2", 40),
    Job("lane2", 45, after="base2"),
    Job("plain1", 30),
    Job("plain2", 20),
]


def test_longest_first_beats_in_order_on_a_skewed_set():
    naive = simulate(SKEWED, place(SKEWED, ["h1", "h2"], "in-order"))
    lpt = simulate(SKEWED, place(SKEWED, ["h1", "h2"], "longest-first"))
    # in-order: h1 = a, c, e = 30; h2 = b, d, f = 210. LPT: d | f, then 10s on the lighter host.
    assert naive.wall_seconds == 210
    assert lpt.wall_seconds == 120
    assert lpt.wall_seconds < naive.wall_seconds


def test_longest_first_can_make_a_lane_wait():
    jobs = [Job("base", 100), Job("lane", 90, after="base"), Job("other", 80)]
    placement = place(jobs, ["h1", "h2"], "longest-first")
    assert placement.by_host == {"h1": ["base"], "h2": ["other", "lane"]}
    sim = simulate(jobs, placement)
    assert sim.runs["lane"].start == 100  # h2 idled from 80 to 100
    assert sim.waiting_seconds == {"h1": 0, "h2": 20}
    assert sim.total_waiting_seconds == 20


@pytest.mark.parametrize("n_hosts", [1, 2, 3, 4, 5])
def test_lanes_with_baseline_never_makes_a_lane_wait(n_hosts):
    hosts = [f"h{i}" for i in range(n_hosts)]
    placement = place(CAMPAIGN, hosts)  # the default rule
    assert placement.rule == "lanes-with-baseline"
    sim = simulate(CAMPAIGN, placement)
    assert sim.total_waiting_seconds == 0
    for lane in ("lane1", "lane2"):
        baseline = CAMPAIGN[[j.name for j in CAMPAIGN].index(lane)].after
        assert placement.host_of(lane) == placement.host_of(baseline)
        assert sim.runs[lane].start >= sim.runs[baseline].end


def test_lanes_with_baseline_places_units_longest_first():
    placement = place(CAMPAIGN, ["h1", "h2"])
    # Units: base1+lane1 = 110, base2+lane2 = 85, plain1 = 30, plain2 = 20.
    # h1 <- 110, h2 <- 85, plain1 to h2 (85 < 110: 115), plain2 to h1 (110 < 115: 130).
    assert placement.by_host == {
        "h1": ["base1", "lane1", "plain2"],
        "h2": ["base2", "lane2", "plain1"],
    }
    assert simulate(CAMPAIGN, placement).wall_seconds == 130


def test_every_job_placed_once_under_every_rule():
    for rule in RULES:
        placement = place(CAMPAIGN, ["h1", "h2", "h3"], rule)
        placed = [name for names in placement.by_host.values() for name in names]
        assert sorted(placed) == sorted(job.name for job in CAMPAIGN), rule
        assert placement.unplaced == {}


def test_eligibility_respected_under_every_rule():
    jobs = [
        Job("big", 100, hosts=frozenset({"h2"})),
        Job("lane", 10, after="big", hosts=frozenset({"h2", "h3"})),
        Job("small", 5, hosts=frozenset({"h1", "h3"})),
        Job("any", 50),
    ]
    for rule in RULES:
        placement = place(jobs, ["h1", "h2", "h3"], rule)
        for host, names in placement.by_host.items():
            for name in names:
                job = next(j for j in jobs if j.name == name)
                assert job.may_run_on(host), (rule, name, host)
        assert placement.host_of("big") == "h2"
    # Together with its baseline, the lane can only be on h2.
    assert place(jobs, ["h1", "h2", "h3"]).host_of("lane") == "h2"


def test_unplaceable_jobs_reported_not_placed():
    jobs = [
        Job("nowhere", 10, hosts=frozenset({"gone"})),
        Job("its-lane", 5, after="nowhere"),
        Job("fine", 10),
    ]
    for rule in RULES:
        placement = place(jobs, ["h1", "h2"], rule)
        placed = {name for names in placement.by_host.values() for name in names}
        assert placed == {"fine"}, rule
        assert set(placement.unplaced) == {"nowhere", "its-lane"}, rule
        assert "gone" in placement.unplaced["nowhere"]
        assert "nowhere" in placement.unplaced["its-lane"]
        assert simulate(jobs, placement).wall_seconds == 10


def test_lane_that_cannot_share_its_baselines_host_is_unplaced_under_lanes_with_baseline():
    jobs = [Job("base", 10, hosts=frozenset({"h1"})), Job("lane", 5, "base", frozenset({"h2"}))]
    placement = place(jobs, ["h1", "h2"])
    assert placement.by_host == {"h1": ["base"], "h2": []}
    assert "together with its baseline" in placement.unplaced["lane"]
    # longest-first places it apart, and it waits.
    apart = place(jobs, ["h1", "h2"], "longest-first")
    assert apart.unplaced == {}
    assert simulate(jobs, apart).runs["lane"].start == 10


def test_no_hosts_places_nothing():
    placement = place(CAMPAIGN, [])
    assert placement.by_host == {}
    assert set(placement.unplaced) == {job.name for job in CAMPAIGN}
    assert simulate(CAMPAIGN, placement).wall_seconds == 0


@pytest.mark.parametrize("rule", ["longest-first", "lanes-with-baseline"])
def test_deterministic_whatever_the_order_of_jobs_and_hosts(rule):
    tied = [*CAMPAIGN, Job("tie-b", 30), Job("tie-a", 30)]  # same seconds as plain1
    hosts = ["h1", "h2", "h3"]
    first = place(tied, hosts, rule)
    shuffler = random.Random(1234)
    for _ in range(30):
        jobs = shuffler.sample(tied, len(tied))
        for order in itertools.permutations(hosts):
            assert place(jobs, list(order), rule) == first


def test_in_order_deals_round_robin_in_the_given_order():
    jobs = [Job("x", 1), Job("y", 1), Job("z", 1), Job("w", 1)]
    # Hosts are taken in name order, jobs in the order given.
    assert place(jobs, ["h2", "h1"], "in-order").by_host == {"h1": ["x", "z"], "h2": ["y", "w"]}
    assert place(jobs[::-1], ["h1", "h2"], "in-order").by_host == {
        "h1": ["w", "y"],
        "h2": ["z", "x"],
    }


def test_lane_before_its_baseline_in_the_given_order_does_not_deadlock():
    jobs = [Job("lane", 10, after="base"), Job("base", 20), Job("other", 5)]
    for rule in RULES:
        placement = place(jobs, ["h1"], rule)
        order = placement.by_host["h1"]
        assert order.index("base") < order.index("lane"), rule
        assert simulate(jobs, placement).wall_seconds == 35


@pytest.mark.parametrize("rule", RULES)
def test_single_host_wall_time_is_the_sum_of_seconds(rule):
    sim = simulate(CAMPAIGN, place(CAMPAIGN, ["only"], rule))
    total = sum(job.seconds for job in CAMPAIGN)
    assert sim.wall_seconds == total
    assert sim.busy_seconds == {"only": total}
    assert sim.utilisation == {"only": 1.0}
    assert sim.total_waiting_seconds == 0


def test_utilisation_is_busy_over_wall():
    sim = simulate(SKEWED, place(SKEWED, ["h1", "h2"], "longest-first"))
    assert sim.busy_seconds == {"h1": 120, "h2": 120}
    assert sim.utilisation == {"h1": 1.0, "h2": 1.0}
    naive = simulate(SKEWED, place(SKEWED, ["h1", "h2"], "in-order"))
    assert naive.utilisation["h1"] == pytest.approx(30 / 210)


def test_lane_whose_baseline_is_not_a_job_waits_for_nothing():
    jobs = [Job("lane", 10, after="passed-earlier"), Job("x", 10)]
    sim = simulate(jobs, place(jobs, ["h1", "h2"], "longest-first"))
    assert sim.total_waiting_seconds == 0
    assert sim.wall_seconds == 10


def test_simulate_accepts_a_plain_mapping_and_reports_deadlock():
    jobs = [Job("b1", 10), Job("l1", 5, after="b1"), Job("b2", 10), Job("l2", 5, after="b2")]
    assert simulate(jobs, {"h1": ["b1", "l2"], "h2": ["b2", "l1"]}).wall_seconds == 15
    with pytest.raises(ValueError, match="deadlocks"):
        simulate(jobs, {"h1": ["l2", "b1"], "h2": ["l1", "b2"]})


@pytest.mark.parametrize(
    ("jobs", "hosts", "rule", "message"),
    [
        ([Job("a", 1), Job("a", 2)], ["h"], "in-order", "twice"),
        ([Job("a", -1)], ["h"], "in-order", "negative"),
        ([Job("a", 1, after="a")], ["h"], "in-order", "itself"),
        ([Job("a", 1), Job("b", 1, "a"), Job("c", 1, "b")], ["h"], "in-order", "itself a lane"),
        ([Job("a", 1)], ["h", "h"], "in-order", "twice"),
        ([Job("a", 1)], ["h"], "fastest", "unknown rule"),
    ],
)
def test_malformed_input_refused(jobs, hosts, rule, message):
    with pytest.raises(ValueError, match=message):
        place(jobs, hosts, rule)


def test_simulate_refuses_a_placement_that_does_not_match_the_jobs():
    jobs = [Job("b", 1), Job("l", 1, after="b")]
    with pytest.raises(ValueError, match="not a job"):
        simulate(jobs, {"h": ["zzz"]})
    with pytest.raises(ValueError, match="placed twice"):
        simulate(jobs, {"h1": ["b"], "h2": ["b"]})
    with pytest.raises(ValueError, match="baseline 'b' is not"):
        simulate(jobs, Placement("in-order", {"h": ["l"]}, {"b": "no host"}))


def test_keeping_lanes_together_can_cost_wall_time():
    # The trade-off, stated: a unit heavier than the rest cannot be split. Longest-first runs
    # one lane beside the baseline's host after it (no wait: x ends when base ends).
    jobs = [Job("base", 100), Job("lane-a", 50, "base"), Job("lane-b", 50, "base"), Job("x", 100)]
    together = simulate(jobs, place(jobs, ["h1", "h2"], "lanes-with-baseline"))
    apart = simulate(jobs, place(jobs, ["h1", "h2"], "longest-first"))
    assert (together.wall_seconds, together.total_waiting_seconds) == (200, 0)
    assert (apart.wall_seconds, apart.total_waiting_seconds) == (150, 0)


# ---------------------------------------------------------------- a reference joins its candidates

# A model in miniature: a TP1 reference, its TP2 baseline (judged against it), the baseline's lane.
MODEL = [
    Job("m-tp1", 30, hosts=frozenset({"one-gpu", "two-gpu"})),
    Job("m", 40, joins="m-tp1", hosts=frozenset({"two-gpu"})),
    Job("m-lane", 20, after="m", hosts=frozenset({"two-gpu"})),
    Job("other", 100),
]


def test_a_reference_runs_first_on_the_host_of_the_candidates_judged_against_it():
    placement = place(MODEL, ["one-gpu", "two-gpu"])
    # The unit (90 s) may run only where all three can: two-gpu; "other" takes the lighter host.
    assert placement.by_host == {"one-gpu": ["other"], "two-gpu": ["m-tp1", "m", "m-lane"]}
    sim = simulate(MODEL, placement)
    assert sim.runs["m"].start >= sim.runs["m-tp1"].end and sim.total_waiting_seconds == 0


def test_a_job_that_cannot_share_its_references_host_is_unplaced_with_the_reason():
    jobs = [
        Job("ref", 10, hosts=frozenset({"h1"})),
        Job("cand", 10, joins="ref", hosts=frozenset({"h2"})),
    ]
    placement = place(jobs, ["h1", "h2"])
    assert placement.by_host == {"h1": ["ref"], "h2": []}
    assert placement.unplaced["cand"].startswith("no host may run it together with its reference")


def test_the_jobs_of_an_unplaced_reference_are_unplaced_too():
    jobs = [Job("ref", 10, hosts=frozenset({"gone"})), Job("cand", 10, joins="ref")]
    placement = place(jobs, ["h1"])
    assert placement.unplaced["cand"] == "its reference 'ref' is not placed"


def test_joins_itself_is_refused():
    with pytest.raises(ValueError, match="joins itself"):
        place([Job("a", 1, joins="a")], ["h"])
