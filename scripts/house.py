#!/usr/bin/env python3
"""The house drawing: the package's structure from its imports, as rooms on floors.

    python scripts/house.py                      # the drawing of plugins/tp2qual, as text
    python scripts/house.py --json               # the same, for machines
    python scripts/house.py --walk-plan smollm2-135m-local   # + the walk of a --plan run
    python scripts/house.py --walk-pytest "-k smollm2-135m-local -m 'not slow'"

Plain Python, stdlib only: the sources are read with ``ast``, nothing of the package is
imported (the walk runs pytest in a subprocess).

module
    each ``.py`` file under the package directory (``plugins/tp2qual``, package ``tp2qual``).
    Its import edges come from every ``import`` and ``from ... import`` anywhere in it, inside
    functions too, except those under ``if TYPE_CHECKING:`` (never run). Relative imports are
    resolved; ``from a.b import c`` is an edge to ``a.b.c`` where that is a module, else to
    ``a.b``. Only edges to the package's own modules count; modules loaded by a string
    (``pytest_plugins``, ``importlib.import_module``) are none.
room
    the first component under the package: a top-level module (``candidate.py`` is room
    ``candidate``) or a subpackage (``checks/``, ``serving/``...). The top package's
    ``__init__`` and ``__main__`` are in no room.
circle
    an import cycle between modules: a strongly connected component of more than one module
    of the module graph.
room graph
    an edge A -> B when a module in room A imports a module in room B (A != B).
up arrow
    an arrow running back up: a room edge inside a cycle of the room graph (both rooms in one
    strongly connected component), an edge that keeps the rooms from standing on floors. Each
    is listed with the imports that make it (importer -> imported, file:line).
floors
    on the room graph with its strongly connected components condensed: floor 0 imports no
    other room; a room's floor is 1 + the highest floor of the rooms it imports (the rooms of
    one component share a floor); the number of floors is the highest floor + 1.
walk
    the rooms a pytest run enters, in order: every Python call under the package whose
    arguments include a ``tp2qual.candidate.Candidate`` (scripts/house_walk.py traces them
    with ``sys.setprofile``). The figures: the rooms entered; the climbs back up (calls into
    a room on a higher floor than the caller's room, or between two rooms of one component);
    the returns to a room once left (a call that comes back into a room its own call path had
    left: A > B > A, the path being the candidate's calls on the stack above it). Each figure
    comes twice: for every such call, and without the candidate's own methods (the candidate
    only as ``self``: ``candidate.name`` and the like, which read its data and call nothing).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACKAGE_DIR = REPO / "plugins" / "tp2qual"
NOT_ROOMS = ("__init__", "__main__")  # the top package's own modules


@dataclass(frozen=True)
class Module:
    name: str  # dotted: tp2qual.checks.nccl
    path: Path
    lines: int
    is_package: bool  # an __init__.py


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    file: str  # relative to the package directory's parent
    line: int
    deferred: bool  # inside a function: run on the call, not on import

    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Drawing:
    package: str
    modules: dict[str, Module]
    imports: list[Import]
    rooms: dict[str, list[str]]  # room -> its modules
    room_lines: dict[str, int]
    circles: list[list[str]]  # module SCCs of more than one module
    room_edges: dict[tuple[str, str], list[Import]]
    room_sccs: list[list[str]]  # every component of the room graph
    up_arrows: dict[tuple[str, str], list[Import]]
    floors: dict[str, int]
    walk: Walk | None = None

    @property
    def floor_count(self) -> int:
        return max(self.floors.values(), default=-1) + 1


@dataclass
class Steps:
    """The figures of one ordered walk of rooms."""

    sequence: list[str]  # rooms entered, consecutive repeats collapsed
    rooms_entered: list[str] = field(default_factory=list)  # distinct, first entry first
    climbs: list[dict[str, Any]] = field(default_factory=list)  # calls, as the trace has them
    returns: list[dict[str, Any]] = field(default_factory=list)  # path, callee, count

    @property
    def climb_calls(self) -> int:
        return sum(c["count"] for c in self.climbs)


@dataclass
class Walk:
    command: list[str]
    returncode: int
    output_tail: str
    calls: list[dict[str, Any]]  # caller_room, callee_room, callee, own, count
    every: Steps  # every call given the candidate
    without_own_methods: Steps  # its own methods (the candidate as self) left out


# --- the modules and their imports -------------------------------------------------------------


def find_modules(package_dir: Path, package: str) -> dict[str, Module]:
    """Every .py under ``package_dir``, by dotted name (``__init__`` names its package)."""
    modules: dict[str, Module] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        name = ".".join([package, *parts])
        lines = len(path.read_text(encoding="utf-8").splitlines())
        modules[name] = Module(name, path, lines, is_package)
    return modules


def is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def resolve_base(module: Module, level: int, target: str | None) -> str | None:
    """The absolute name a ``from`` import reads from; None when it climbs above the top."""
    if level == 0:
        return target
    parts = module.name.split(".")
    if not module.is_package:
        parts = parts[:-1]  # a plain module's "." is its package
    up = level - 1
    if up > len(parts) - 1:
        return None
    base = parts[: len(parts) - up] if up else parts
    return ".".join([*base, target] if target else base)


def longest_module(name: str, modules: Mapping[str, Module]) -> str | None:
    """``name`` or its longest prefix that is one of the package's modules."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


class _ImportVisitor(ast.NodeVisitor):
    def __init__(self, module: Module, modules: Mapping[str, Module], file: str) -> None:
        self.module, self.modules, self.file = module, modules, file
        self.found: list[Import] = []
        self.depth = 0  # inside how many functions

    def add(self, imported: str | None, node: ast.stmt) -> None:
        if imported is None or imported == self.module.name:
            return
        found = Import(self.module.name, imported, self.file, node.lineno, self.depth > 0)
        if found not in self.found:  # `from m import a, b` is one import of m
            self.found.append(found)

    def visit_If(self, node: ast.If) -> None:
        if is_type_checking(node.test):  # never run: only its else branch counts
            for stmt in node.orelse:
                self.visit(stmt)
            return
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.add(longest_module(alias.name, self.modules), node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = resolve_base(self.module, node.level, node.module)
        if base is None:
            return
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if alias.name != "*" and sub in self.modules:
                self.add(sub, node)
            else:
                self.add(longest_module(base, self.modules), node)


def imports_of(module: Module, modules: Mapping[str, Module], root: Path) -> list[Import]:
    """The module's import edges to the package's own modules, in source order."""
    tree = ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))
    visitor = _ImportVisitor(module, modules, module.path.relative_to(root).as_posix())
    visitor.visit(tree)
    return visitor.found


# --- graphs --------------------------------------------------------------------------------------


def strongly_connected(nodes: Iterable[str], edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's components (iterative: deep import chains must not hit the recursion limit),
    each sorted, in reverse topological order (a component before those that reach it)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[str, Iterable[str]]] = []
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        work.append((root, iter(sorted(edges.get(root, ())))))
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(edges.get(succ, ())))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def room_of(module: str, package: str) -> str | None:
    """The first component under the package; None for the top package's own modules."""
    parts = module.split(".")
    if parts[0] != package or len(parts) < 2 or parts[1] in NOT_ROOMS:
        return None
    return parts[1]


def compute_floors(
    sccs: Sequence[Sequence[str]], edges: Mapping[str, Iterable[str]]
) -> dict[str, int]:
    """Floor of each node on the condensed graph; ``sccs`` in reverse topological order."""
    component_of = {node: i for i, scc in enumerate(sccs) for node in scc}
    floor_of: dict[int, int] = {}
    for i, scc in enumerate(sccs):  # every component it reaches came before it
        below = {component_of[t] for n in scc for t in edges.get(n, ())} - {i}
        floor_of[i] = 1 + max((floor_of[j] for j in below), default=-1)
    return {node: floor_of[component_of[node]] for node in component_of}


def draw(package_dir: Path, package: str | None = None) -> Drawing:
    """The drawing of the package in ``package_dir`` (its name: the directory's, by default)."""
    package = package or package_dir.name
    root = package_dir.parent
    modules = find_modules(package_dir, package)
    imports = [imp for m in modules.values() for imp in imports_of(m, modules, root)]

    module_edges: dict[str, set[str]] = {name: set() for name in modules}
    for imp in imports:
        module_edges[imp.importer].add(imp.imported)
    circles = [c for c in strongly_connected(modules, module_edges) if len(c) > 1]

    rooms: dict[str, list[str]] = {}
    for name in modules:
        if (room := room_of(name, package)) is not None:
            rooms.setdefault(room, []).append(name)
    room_lines = {room: sum(modules[m].lines for m in members) for room, members in rooms.items()}

    room_edges: dict[tuple[str, str], list[Import]] = {}
    for imp in imports:
        a, b = room_of(imp.importer, package), room_of(imp.imported, package)
        if a is not None and b is not None and a != b:
            room_edges.setdefault((a, b), []).append(imp)
    room_successors: dict[str, set[str]] = {room: set() for room in rooms}
    for a, b in room_edges:
        room_successors[a].add(b)
    room_sccs = strongly_connected(sorted(rooms), room_successors)
    component_of = {room: i for i, scc in enumerate(room_sccs) for room in scc}
    up_arrows = {
        edge: imps
        for edge, imps in sorted(room_edges.items())
        if component_of[edge[0]] == component_of[edge[1]]
    }
    floors = compute_floors(room_sccs, room_successors)
    return Drawing(
        package,
        modules,
        imports,
        rooms,
        room_lines,
        sorted(circles, key=lambda c: (-len(c), c)),
        dict(sorted(room_edges.items())),
        room_sccs,
        up_arrows,
        floors,
    )


# --- the walk ------------------------------------------------------------------------------------


def same_component(drawing: Drawing, a: str, b: str) -> bool:
    return any(a in scc and b in scc for scc in drawing.room_sccs)


def is_climb(drawing: Drawing, caller: str | None, callee: str | None) -> bool:
    """A call into a room on a higher floor than its caller's, or across one component."""
    if caller is None or callee is None or caller == callee:
        return False
    if caller not in drawing.floors or callee not in drawing.floors:
        return False
    if same_component(drawing, caller, callee):
        return True
    return drawing.floors[callee] > drawing.floors[caller]


def steps_of(
    drawing: Drawing,
    sequence: Sequence[str],
    calls: Iterable[Mapping[str, Any]],
    paths: Iterable[Mapping[str, Any]] = (),
) -> Steps:
    """Rooms entered, climbs back up and returns of one collapsed sequence, its calls and
    their call paths."""
    steps = Steps(list(sequence))
    for room in sequence:
        if room not in steps.rooms_entered:
            steps.rooms_entered.append(room)
    steps.returns = [
        {"path": list(p["path"]), "callee": p["callee"], "count": p["count"]}
        for p in paths
        if p.get("returns")
    ]
    steps.climbs = [
        dict(call)
        for call in calls
        if is_climb(drawing, call.get("caller_room"), call.get("callee_room"))
    ]
    return steps


def read_walk(
    drawing: Drawing, trace: Mapping[str, Any], command: list[str], rc: int, output: str = ""
) -> Walk:
    """The walk's figures from the trace house_walk.py wrote."""
    calls = [dict(c) for c in trace.get("calls", [])]
    paths = [dict(p) for p in trace.get("paths", [])]
    every = steps_of(drawing, trace.get("sequence", []), calls, paths)
    passing = steps_of(
        drawing,
        trace.get("sequence_without_own_methods", []),
        [c for c in calls if not c.get("own")],
        [p for p in paths if not p.get("own")],
    )
    return Walk(command, rc, output[-2000:], calls, every, passing)


def run_walk(drawing: Drawing, pytest_args: Sequence[str], repo: Path = REPO) -> Walk:
    """Run pytest (in the repo root) with the walk's tracer, and read what it wrote."""
    scripts = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="house-walk-") as tmp:
        out = Path(tmp) / "walk.json"
        env = dict(os.environ)
        paths = [str(scripts), str(repo / "plugins"), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env["HOUSE_WALK_OUT"] = str(out)
        env["HOUSE_WALK_PACKAGE_DIR"] = str(repo / "plugins" / drawing.package)
        command = [sys.executable, "-m", "pytest", "-p", "house_walk", *pytest_args]
        done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)
        if not out.exists():
            tail = (done.stdout + done.stderr)[-3000:]
            raise SystemExit(f"the walk wrote no trace (pytest exit {done.returncode}):\n{tail}")
        trace = json.loads(out.read_text(encoding="utf-8"))
    return read_walk(drawing, trace, command[3:], done.returncode, done.stdout + done.stderr)


# --- output --------------------------------------------------------------------------------------


def as_json(drawing: Drawing) -> dict[str, Any]:
    def imp(i: Import) -> dict[str, Any]:
        return {
            "importer": i.importer,
            "imported": i.imported,
            "at": i.where(),
            "deferred": i.deferred,
        }

    return {
        "package": drawing.package,
        "modules": len(drawing.modules),
        "lines": sum(m.lines for m in drawing.modules.values()),
        "imports": len(drawing.imports),
        "rooms": {
            room: {
                "floor": drawing.floors[room],
                "lines": drawing.room_lines[room],
                "modules": len(members),
            }
            for room, members in sorted(drawing.rooms.items())
        },
        "floors": drawing.floor_count,
        "room_edges": len(drawing.room_edges),
        "circles": drawing.circles,
        "room_cycles": [scc for scc in drawing.room_sccs if len(scc) > 1],
        "up_arrows": [
            {"from": a, "to": b, "imports": [imp(i) for i in imps]}
            for (a, b), imps in drawing.up_arrows.items()
        ],
        "walk": walk_json(drawing.walk) if drawing.walk else None,
    }


def walk_json(walk: Walk) -> dict[str, Any]:
    out = asdict(walk)
    for key in ("every", "without_own_methods"):
        steps: Steps = getattr(walk, key)
        out[key]["figures"] = {
            "rooms_entered": len(steps.rooms_entered),
            "steps": len(steps.sequence),
            "climb_calls": steps.climb_calls,
            "climbs_distinct": len(steps.climbs),
            "return_calls": sum(r["count"] for r in steps.returns),
            "returns_distinct": len(steps.returns),
        }
    return out


def render(drawing: Drawing) -> str:
    lines_total = sum(m.lines for m in drawing.modules.values())
    out = [
        f"house of {drawing.package}: {len(drawing.modules)} modules, {lines_total} lines, "
        f"{len(drawing.imports)} imports",
        f"rooms: {len(drawing.rooms)}   floors: {drawing.floor_count}   "
        f"room edges: {len(drawing.room_edges)}",
        f"circles: {len(drawing.circles)}   up arrows: {len(drawing.up_arrows)}",
        "",
        "## rooms, top floor first",
        f"{'floor':>5}  {'room':<18} {'modules':>7} {'lines':>6}  imports rooms",
    ]
    rooms = sorted(drawing.rooms, key=lambda r: (-drawing.floors[r], r))
    for room in rooms:
        below = sorted(b for a, b in drawing.room_edges if a == room)
        out.append(
            f"{drawing.floors[room]:>5}  {room:<18} {len(drawing.rooms[room]):>7} "
            f"{drawing.room_lines[room]:>6}  {', '.join(below) or '-'}"
        )
    cycles = [scc for scc in drawing.room_sccs if len(scc) > 1]
    if cycles:
        out += ["", "## rooms that share a floor (a cycle of the room graph)"]
        out += [f"- {', '.join(scc)}" for scc in cycles]
    out += ["", f"## circles ({len(drawing.circles)})"]
    for i, circle in enumerate(drawing.circles, 1):
        out.append(f"{i}. {len(circle)} modules: {', '.join(circle)}")
        members = set(circle)
        for imp in drawing.imports:
            if imp.importer in members and imp.imported in members:
                out.append(f"     {imp.importer} -> {imp.imported}  {imp.where()}{_lazy(imp)}")
    out += ["", f"## up arrows ({len(drawing.up_arrows)})"]
    for (a, b), imps in drawing.up_arrows.items():
        out.append(f"- {a} -> {b}  ({len(imps)} imports)")
        out += [f"     {i.importer} -> {i.imported}  {i.where()}{_lazy(i)}" for i in imps]
    if drawing.walk:
        out += ["", *render_walk(drawing.walk)]
    return "\n".join(out)


def _lazy(imp: Import) -> str:
    return "  (in a function)" if imp.deferred else ""


SHOWN_STEPS = 40  # of a walk's sequence in the text; --json has all of it


def render_walk(walk: Walk) -> list[str]:
    out = [f"## walk: pytest {shlex.join(walk.command)}  (exit {walk.returncode})"]
    if walk.returncode != 0:
        out += ["pytest's last lines:", *walk.output_tail.splitlines()[-15:]]
    for title, steps in (
        ("every call given the candidate", walk.every),
        ("without the candidate's own methods", walk.without_own_methods),
    ):
        out += ["", f"### {title}", *render_steps(steps)]
    return out


def render_steps(steps: Steps) -> list[str]:
    shown = " > ".join(steps.sequence[:SHOWN_STEPS])
    more = len(steps.sequence) - SHOWN_STEPS
    calls_back = sum(r["count"] for r in steps.returns)
    out = [
        f"rooms entered: {len(steps.rooms_entered)}   steps: {len(steps.sequence)}   "
        f"climbs back up: {steps.climb_calls} calls ({len(steps.climbs)} distinct)   "
        f"returns to a room once left: {calls_back} calls ({len(steps.returns)} distinct)",
        f"entered, in order: {', '.join(steps.rooms_entered) or '-'}",
        f"sequence: {shown or '-'}" + (f" > ... ({more} more)" if more > 0 else ""),
    ]
    if steps.returns:
        out.append("returns (path > callee x calls):")
        out += [f"  {' > '.join(r['path'])}: {r['callee']} x{r['count']}" for r in steps.returns]
    if steps.climbs:
        out.append("climbs (caller room -> callee room: callee x calls):")
        out += [
            f"  {c['caller_room']} -> {c['callee_room']}: {c['callee']} x{c['count']}"
            for c in steps.climbs
        ]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--package-dir", type=Path, default=PACKAGE_DIR)
    parser.add_argument("--json", action="store_true", help="print the drawing as JSON")
    walk = parser.add_mutually_exclusive_group()
    walk.add_argument("--walk-plan", metavar="NAME", help="walk `pytest --plan -k NAME`")
    walk.add_argument("--walk-pytest", metavar="ARGS", help="walk `pytest ARGS` (any args)")
    args = parser.parse_args(argv)
    drawing = draw(args.package_dir.resolve())
    if args.walk_plan:
        drawing.walk = run_walk(drawing, ["-p", "no:cacheprovider", "--plan", "-k", args.walk_plan])
    elif args.walk_pytest:
        drawing.walk = run_walk(drawing, shlex.split(args.walk_pytest))
    print(json.dumps(as_json(drawing), indent=2) if args.json else render(drawing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
