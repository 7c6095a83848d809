"""The order a run takes its candidates in: each model's reference first, then the serve judged
against it, then that serve's lanes — a TP1 reference, its TP2 baseline, the baseline's lanes —
and only then the next model.

A candidate follows the candidates it needs: its gate-07 reference (``Candidate.reference``:
``[reference] candidate``, else a lane's baseline) and, for a lane, its baseline
(``[lane] after``), where they run in this run too. Those links make groups (one model's serves);
each group runs whole, in that order, before the next, so one candidate's server is stopped and
its GPUs freed before the next candidate starts and no model's serves are split across the run.
Groups, and candidates that need nothing, follow the order they are given in (the candidates
plugin gives them by name). A loop of references keeps the given order where it closes.
Pure: no pytest, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from tp2qual.candidate import Candidate


def needs(candidate: Candidate) -> list[str]:
    """What the candidate follows, where present: its reference, and a lane's baseline."""
    after = candidate.spec.get("lane", {}).get("after")
    return list(dict.fromkeys(n for n in (candidate.reference, after) if n))


def run_order(candidates: Sequence[Candidate]) -> list[str]:
    """The candidates' names in run order (see the module docstring)."""
    given = {c.name: i for i, c in enumerate(candidates)}
    parents = {c.name: [n for n in needs(c) if n in given and n != c.name] for c in candidates}
    children: dict[str, list[str]] = {name: [] for name in given}
    for name, found in parents.items():
        for parent in found:
            children[parent].append(name)
    order: list[str] = []

    def visit(name: str, path: frozenset[str]) -> None:
        if name in order or name in path:
            return
        path = path | {name}
        for parent in sorted(parents[name], key=given.__getitem__):
            visit(parent, path)  # what it needs first
        if name not in order:
            order.append(name)
        for child in sorted(children[name], key=given.__getitem__):
            visit(child, path)  # then what follows it, before anything else runs

    for name in given:
        visit(name, frozenset())
    return order


def groups(candidates: Sequence[Candidate]) -> list[list[str]]:
    """The run order cut into groups: candidates joined by a reference or a lane's baseline."""
    by_name = {c.name: c for c in candidates}
    root: dict[str, str] = {}
    for name in run_order(candidates):
        linked = [root[n] for n in needs(by_name[name]) if n in root]
        root[name] = linked[0] if linked else name
        for other in linked[1:]:  # two groups met: one group from now on
            root = {k: (linked[0] if v == other else v) for k, v in root.items()}
    found: dict[str, list[str]] = {}
    for name in run_order(candidates):
        found.setdefault(root[name], []).append(name)
    return list(found.values())
