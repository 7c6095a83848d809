"""The house drawing (scripts/house.py): rooms, floors, circles and up arrows drawn right on
small packages written here; the drawing of the real package runs; the walk's tracer and its
figures."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load(name: str) -> ModuleType:
    """A script as a module (dataclasses want it in sys.modules while it runs)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


house = load("house")


def package(root: Path, files: dict[str, str], name: str = "pkg") -> Path:
    """A package ``name`` under ``root`` with ``files`` (relative path -> source); every
    directory gets an ``__init__.py`` unless given one."""
    top = root / name
    for rel, source in files.items():
        path = top / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    for directory in [top, *(p for p in top.rglob("*") if p.is_dir())]:
        (directory / "__init__.py").touch()
    return top


def edges(drawing: object) -> set[tuple[str, str]]:
    return {(i.importer, i.imported) for i in drawing.imports}  # type: ignore[attr-defined]


def test_a_circle_is_found_with_its_members(tmp_path: Path) -> None:
    drawing = house.draw(
        package(
            tmp_path,
            {
                "a.py": "import pkg.b\n",
                "b.py": "def late():\n    from pkg import c\n",  # inside a function: counts
                "c.py": "from pkg.a import thing\n",
                "d.py": "import pkg.a\n",  # reaches the circle, is not in it
            },
        )
    )
    assert drawing.circles == [["pkg.a", "pkg.b", "pkg.c"]]
    deferred = [i for i in drawing.imports if i.deferred]
    assert [(i.importer, i.imported, i.line) for i in deferred] == [("pkg.b", "pkg.c", 2)]


def test_an_up_arrow_is_found_and_named_without_a_circle(tmp_path: Path) -> None:
    drawing = house.draw(
        package(
            tmp_path,
            {
                "low/x.py": "import os\n\nfrom pkg.high.y import helper\n",
                "high/y.py": "helper = 1\n",
                "high/z.py": "from pkg.low import w\n",
                "low/w.py": "",
                "base.py": "",
                "top.py": "import pkg.high.z\nimport pkg.base\n",
            },
        )
    )
    assert drawing.circles == []  # x -> y and z -> w: no module cycle
    assert set(drawing.up_arrows) == {("low", "high"), ("high", "low")}
    (up,) = drawing.up_arrows[("low", "high")]
    assert (up.importer, up.imported, up.where()) == ("pkg.low.x", "pkg.high.y", "pkg/low/x.py:3")
    assert ("top", "high") not in drawing.up_arrows  # an edge down is no up arrow
    text = house.render(drawing)
    assert "- low -> high  (1 imports)" in text
    assert "pkg.low.x -> pkg.high.y  pkg/low/x.py:3" in text
    assert drawing.floors == {"low": 0, "high": 0, "base": 0, "top": 1}  # one component


def test_floors_stand_one_above_the_highest_room_imported(tmp_path: Path) -> None:
    drawing = house.draw(
        package(
            tmp_path,
            {
                "base.py": "import json\n",
                "mid.py": "from pkg import base\n",
                "side.py": "from pkg.base import x\n",
                "top.py": "from pkg import mid, base\n",
                "roof/__init__.py": "from pkg import top\n",
                "roof/part.py": "from pkg import side\n",
                "__init__.py": "from pkg import roof\n",  # the top package: in no room
                "__main__.py": "from pkg import roof\n",
            },
        )
    )
    assert drawing.floors == {"base": 0, "mid": 1, "side": 1, "top": 2, "roof": 3}
    assert drawing.floor_count == 4
    assert sorted(drawing.rooms) == ["base", "mid", "roof", "side", "top"]
    assert drawing.rooms["roof"] == ["pkg.roof", "pkg.roof.part"]
    assert drawing.up_arrows == {}
    assert drawing.circles == []


def test_an_import_under_type_checking_is_no_edge(tmp_path: Path) -> None:
    drawing = house.draw(
        package(
            tmp_path,
            {
                "a.py": """\
                    import typing
                    from typing import TYPE_CHECKING

                    if TYPE_CHECKING:
                        from pkg.b import B
                    else:
                        from pkg import c
                    if typing.TYPE_CHECKING:
                        import pkg.d
                    """,
                "b.py": "from pkg import a\n",
                "c.py": "",
                "d.py": "",
            },
        )
    )
    assert edges(drawing) == {("pkg.a", "pkg.c"), ("pkg.b", "pkg.a")}
    assert drawing.circles == []
    assert drawing.up_arrows == {}


def test_relative_imports_are_resolved(tmp_path: Path) -> None:
    drawing = house.draw(
        package(
            tmp_path,
            {
                "sub/__init__.py": "from . import m\n",  # a package's "." is itself
                "sub/m.py": "from .. import top\nfrom .n import thing\nfrom ..other import f\n",
                "sub/n.py": "from . import m as again\nfrom .deep.leaf import x\n",
                "sub/deep/leaf.py": "from ...top import y\nfrom ... import other\n",
                "top.py": "",
                "other.py": "",
            },
        )
    )
    assert edges(drawing) == {
        ("pkg.sub", "pkg.sub.m"),
        ("pkg.sub.m", "pkg.top"),
        ("pkg.sub.m", "pkg.sub.n"),
        ("pkg.sub.m", "pkg.other"),  # f is no module: the edge is to pkg.other
        ("pkg.sub.n", "pkg.sub.m"),
        ("pkg.sub.n", "pkg.sub.deep.leaf"),
        ("pkg.sub.deep.leaf", "pkg.top"),
        ("pkg.sub.deep.leaf", "pkg.other"),
    }
    assert drawing.circles == [["pkg.sub.m", "pkg.sub.n"]]
    assert drawing.floors == {"sub": 1, "top": 0, "other": 0}


def test_from_a_package_import_a_name_or_a_module(tmp_path: Path) -> None:
    drawing = house.draw(
        package(
            tmp_path,
            {
                "a.py": "from pkg.b import c, not_a_module\nimport pkg.b.c.missing\n",
                "b/c.py": "",
            },
        )
    )
    assert edges(drawing) == {("pkg.a", "pkg.b.c"), ("pkg.a", "pkg.b")}


def test_the_walk_counts_rooms_climbs_and_returns(tmp_path: Path) -> None:
    drawing = house.draw(
        package(
            tmp_path,
            {"base.py": "", "mid.py": "import pkg.base\n", "top.py": "import pkg.mid\n"},
        )
    )
    trace = {
        "sequence": ["top", "mid", "base", "mid", "top", "base"],
        "sequence_without_own_methods": ["top", "mid"],
        "calls": [
            {"caller_room": None, "callee_room": "top", "callee": "top.py:f", "count": 1},
            {"caller_room": "top", "callee_room": "mid", "callee": "mid.py:g", "count": 2},
            {
                "caller_room": "base",
                "callee_room": "mid",
                "callee": "mid.py:h",
                "count": 3,
                "own": True,
            },
            {"caller_room": "mid", "callee_room": "top", "callee": "top.py:k", "count": 1},
        ],
        "paths": [
            {"path": ["top"], "callee": "top.py:f", "own": False, "count": 1, "returns": False},
            {
                "path": ["top", "mid", "top"],
                "callee": "top.py:k",
                "own": False,
                "count": 1,
                "returns": True,
            },
            {
                "path": ["top", "mid", "base", "mid"],
                "callee": "mid.py:h",
                "own": True,
                "count": 3,
                "returns": True,
            },
        ],
    }
    walk = house.read_walk(drawing, trace, ["--plan"], 0)
    steps = walk.every
    assert steps.rooms_entered == ["top", "mid", "base"]
    assert [(c["caller_room"], c["callee_room"]) for c in steps.climbs] == [
        ("base", "mid"),
        ("mid", "top"),
    ]
    assert [r["callee"] for r in steps.returns] == ["top.py:k", "mid.py:h"]
    text = "\n".join(house.render_walk(walk))
    assert "climbs back up: 4 calls (2 distinct)" in text
    assert "returns to a room once left: 4 calls (2 distinct)" in text
    assert "  top > mid > top: top.py:k x1" in text
    passing = walk.without_own_methods  # the mid.py:h call is an own method: left out
    assert [(c["caller_room"], c["callee_room"]) for c in passing.climbs] == [("mid", "top")]
    assert passing.sequence == ["top", "mid"]
    assert [r["callee"] for r in passing.returns] == ["top.py:k"]


def test_the_tracer_records_calls_given_a_candidate(tmp_path: Path) -> None:
    """The walk's tracer on a package of its own: a call with a ``Candidate`` argument is
    recorded with its callee's and caller's rooms; a call without one is not."""
    walker = load("house_walk")
    top = package(
        tmp_path,
        {
            "candidate.py": "class Candidate:\n    def label(self):\n        return 'c'\n",
            "low.py": """\
                def use(candidate, n=1):
                    return candidate.label()

                def bare(n):
                    return n
                """,
            "high/run.py": """\
                from walkpkg import low

                def run(*, candidate):
                    low.bare(2)
                    return low.use(candidate)
                """,
        },
        name="walkpkg",
    )
    sys.path.insert(0, str(tmp_path))
    try:
        candidate_mod = importlib.import_module("walkpkg.candidate")
        candidate_mod.Candidate.__module__ = "tp2qual.candidate"  # the class the tracer knows
        run = importlib.import_module("walkpkg.high.run")
        tracer = walker.Tracer(top.resolve())
        sys.setprofile(tracer.profile)
        try:
            run.run(candidate=candidate_mod.Candidate())
        finally:
            sys.setprofile(None)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("walkpkg")]:
            del sys.modules[name]
    assert tracer.sequence == ["high", "low", "candidate"]
    assert tracer.passed == ["high", "low"]  # label() is the candidate's own method
    assert tracer.calls == {
        (None, "high", "run.py:run", False): 1,
        ("high", "low", "low.py:use", False): 1,
        ("low", "candidate", "candidate.py:Candidate.label", True): 1,
    }
    assert tracer.paths == {  # each call's path of rooms; none comes back to a room it left
        (("high",), "run.py:run", False, False): 1,
        (("high", "low"), "low.py:use", False, False): 1,
        (("high", "low", "candidate"), "candidate.py:Candidate.label", True, False): 1,
    }
    assert tracer.active == {}  # every traced frame returned


def test_the_tracer_sees_a_call_come_back_to_a_room_it_left(tmp_path: Path) -> None:
    """A > B > A on the stack: a low room calling back up into the room that called it."""
    walker = load("house_walk")
    top = package(
        tmp_path,
        {
            "candidate.py": "class Candidate:\n    pass\n",
            "low.py": "def use(candidate):\n    from backpkg import high\n"
            "    return high.back(candidate)\n",
            "high.py": "def run(candidate):\n    from backpkg import low\n"
            "    return low.use(candidate)\n\n\ndef back(candidate):\n    return 1\n",
        },
        name="backpkg",
    )
    sys.path.insert(0, str(tmp_path))
    try:
        candidate_mod = importlib.import_module("backpkg.candidate")
        candidate_mod.Candidate.__module__ = "tp2qual.candidate"
        high = importlib.import_module("backpkg.high")
        tracer = walker.Tracer(top.resolve())
        sys.setprofile(tracer.profile)
        try:
            high.run(candidate_mod.Candidate())
        finally:
            sys.setprofile(None)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("backpkg")]:
            del sys.modules[name]
    assert tracer.paths[(("high", "low", "high"), "high.py:back", False, True)] == 1


def test_the_real_package_is_drawn() -> None:
    drawing = house.draw(house.PACKAGE_DIR)
    assert len(drawing.modules) > 50
    assert {"candidate", "checks", "evidence", "hooks", "serving"} <= set(drawing.rooms)
    assert "__init__" not in drawing.rooms and "__main__" not in drawing.rooms
    assert drawing.floor_count >= 1
    text = house.render(drawing)
    for figure in ("modules", "rooms:", "floors:", "circles:", "up arrows:"):
        assert figure in text
    assert house.as_json(drawing)["rooms"].keys() == drawing.rooms.keys()


def test_the_walk_of_a_plan() -> None:
    """``--walk-plan``'s run on a candidate that plans without any engine or model installed:
    the plan runs, and the walk enters the rooms a plan goes through."""
    drawing = house.draw(house.PACKAGE_DIR)
    walk = house.run_walk(
        drawing, ["-p", "no:cacheprovider", "--plan", "-k", "smollm2-135m-vllm-tp2"]
    )
    assert walk.returncode == 0, walk.output_tail
    assert {"hooks", "dry_run", "serving"} <= set(walk.every.rooms_entered)
    assert set(walk.without_own_methods.rooms_entered) <= set(walk.every.rooms_entered)
    drawing.walk = walk
    assert "## walk: pytest -p house_walk" in house.render(drawing)
    assert house.as_json(drawing)["walk"]["every"]["sequence"] == walk.every.sequence


def test_the_package_stands_on_floors() -> None:
    """No import cycle between modules, no room that imports one that imports it back: every
    room on a floor of its own above what it imports (a new arrow up fails here, named)."""
    drawing = house.draw(house.PACKAGE_DIR)
    assert drawing.circles == []
    assert drawing.up_arrows == {}
