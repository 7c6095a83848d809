"""The campaign's ``--plan`` time as one table: per candidate, the dated record it rests on (TP
size, protocol, source), its reasoning control, gate 05's N and the failure rate N excludes,
and its time expected and at most.

    python benchmarks/plan_table.py

The same functions ``pytest --plan -m campaign`` uses (``dry_run.estimate_for`` over the shipped
candidates, in run order); nothing is started. Prints Markdown.
"""

from __future__ import annotations

from _bench import ROOT

from tp2qual.candidate import load_candidates
from tp2qual.checks.tool_power import excluded_rate
from tp2qual.dry_run import estimate_for
from tp2qual.run_order import run_order
from tp2qual.run_plan import hmm

HEAD = (
    "| candidate | record it rests on (TP, date, protocol, source) | reasoning control "
    "(`[gates.request]`) | gate 05 N (rate excluded, 95 %) | expected (h:mm) | at most (h:mm) |"
)


def main() -> None:
    shipped = {c.name: c for c in load_candidates([ROOT / "candidates"])}
    campaign = [c for c in shipped.values() if c.spec.get("campaign")]
    print(HEAD)
    print("| --- | --- | --- | --- | --- | --- |")
    expected = most = 0.0
    for name in run_order(campaign):
        candidate = shipped[name]
        found = estimate_for(candidate, shipped, list(shipped.values()))
        n = int(candidate.gate("tool_calls").get("repeats") or 1)
        extra = candidate.request_settings.get("extra", {})
        print(
            f"| {name} | {found.rests_on or 'none: the decode floor'} | "
            f"{candidate.reasoning_control} `{extra}` | {n} ({excluded_rate(n):.1%}) | "
            f"{hmm(found.expected_seconds)} | {hmm(found.seconds)} |"
        )
        expected, most = expected + found.expected_seconds, most + found.seconds
    print(f"| all {len(campaign)}, one after another | | | | {hmm(expected)} | {hmm(most)} |")


if __name__ == "__main__":
    main()
