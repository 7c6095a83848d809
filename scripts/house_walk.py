"""The house drawing's walk: a pytest plugin tracing the rooms a run enters (scripts/house.py).

    PYTHONPATH=scripts:plugins HOUSE_WALK_OUT=walk.json python -m pytest -p house_walk --plan ...

From its import on (``-p`` loads it before the suite's plugins configure), while
``HOUSE_WALK_OUT`` is set, ``sys.setprofile`` sees every Python call. A call counts when its
callee's code lies under the package directory (``HOUSE_WALK_PACKAGE_DIR``, default
``plugins/tp2qual`` beside this script) and one of its arguments
(``co_varnames[:co_argcount + co_kwonlyargcount]`` in ``f_locals``) is a
``tp2qual.candidate.Candidate``. Its callee's room and its caller's room (the calling frame's
file, None outside the package) are recorded. At the end of the run (or of the process) the
JSON file ``HOUSE_WALK_OUT`` gets ``sequence``: the rooms entered in order, consecutive repeats
collapsed; ``sequence_without_own_methods``: the same without the calls of the candidate's own
methods (the candidate is ``self`` and no other argument), which only read the candidate's own
data; ``calls``: each (caller room, callee room, callee, own method or not) with its count,
first seen first; and ``paths``: each call's path, the rooms of the calls given the candidate
that are on the stack above it (consecutive repeats collapsed, its own room last), with
``returns`` true where the call comes back into a room its path had left (A > B > A: a
call from B into A, with A above B on the stack). Stdlib only;
nothing of the package is imported here.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
from pathlib import Path
from types import FrameType

PACKAGE_DIR = Path(
    os.environ.get("HOUSE_WALK_PACKAGE_DIR")
    or Path(__file__).resolve().parents[1] / "plugins" / "tp2qual"
).resolve()
CANDIDATE = ("tp2qual.candidate", "Candidate")  # by module and name: never imported here
OUTSIDE = "<outside>"  # a file outside the package, cached as such (no room is named so)


class Tracer:
    def __init__(self, package_dir: Path) -> None:
        self.prefix = str(package_dir) + os.sep
        self.rooms: dict[str, str | None] = {}  # co_filename -> room, None (none) or OUTSIDE
        self.candidate_types: dict[type, bool] = {}
        self.sequence: list[str] = []  # every call given the candidate
        self.passed: list[str] = []  # the candidate's own methods left out
        self.calls: dict[tuple[str | None, str, str, bool], int] = {}
        self.active: dict[int, tuple[str, bool]] = {}  # frame id -> room, own: on the stack now
        self.paths: dict[tuple[tuple[str, ...], str, bool, bool], int] = {}
        self.written = False

    def room_of(self, filename: str) -> str | None:
        if (room := self.rooms.get(filename)) is not None or filename in self.rooms:
            return room
        path = os.path.realpath(filename)
        if not path.startswith(self.prefix):
            room = OUTSIDE
        else:
            first = path[len(self.prefix) :].split(os.sep)[0]
            name = first.removesuffix(".py")
            room = None if name in ("__init__", "__main__") else name
        self.rooms[filename] = room
        return room

    def is_candidate(self, value: object) -> bool:
        kind = type(value)
        if (known := self.candidate_types.get(kind)) is not None:
            return known
        known = any((c.__module__, c.__name__) == CANDIDATE for c in kind.__mro__)
        self.candidate_types[kind] = known
        return known

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "return":
            self.active.pop(id(frame), None)
            return
        if event != "call":
            return
        code = frame.f_code
        room = self.room_of(code.co_filename)
        if room is None or room == OUTSIDE:
            return
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if not names:
            return
        local = frame.f_locals
        given = [n for n in names if self.is_candidate(local.get(n))]
        if not given:
            return
        own = given == ["self"]  # the candidate's own method: it reads the candidate's data
        caller = frame.f_back
        caller_room = self.room_of(caller.f_code.co_filename) if caller else None
        if caller_room == OUTSIDE:
            caller_room = None
        enter(self.sequence, room)
        if not own:
            enter(self.passed, room)
        callee = f"{Path(code.co_filename).name}:{code.co_qualname}"
        key = (caller_room, room, callee, own)
        self.calls[key] = self.calls.get(key, 0) + 1
        above = self.path_above(frame, own)
        came_back = bool(above) and above[-1] != room and room in above
        path = (*above, room) if not above or above[-1] != room else tuple(above)
        key2 = (path, callee, own, came_back)
        self.paths[key2] = self.paths.get(key2, 0) + 1
        self.active[id(frame)] = (room, own)

    def path_above(self, frame: FrameType, own: bool) -> list[str]:
        """The rooms of the candidate's calls on the stack above ``frame``, outermost first
        (for a call not of the candidate's own methods, those methods left out)."""
        rooms: list[str] = []
        caller = frame.f_back
        while caller is not None:
            if (entry := self.active.get(id(caller))) is not None and (own or not entry[1]):
                rooms.append(entry[0])
            caller = caller.f_back
        collapsed: list[str] = []
        for room in reversed(rooms):
            enter(collapsed, room)
        return collapsed

    def write(self, out: Path) -> None:
        if self.written:
            return
        self.written = True
        calls = [
            {
                "caller_room": caller,
                "callee_room": callee,
                "callee": name,
                "own": own,
                "count": count,
            }
            for (caller, callee, name, own), count in self.calls.items()
        ]
        paths = [
            {
                "path": list(path),
                "callee": name,
                "own": own,
                "count": count,
                "returns": came_back,
            }
            for (path, name, own, came_back), count in self.paths.items()
        ]
        trace = {
            "package_dir": str(PACKAGE_DIR),
            "sequence": self.sequence,
            "sequence_without_own_methods": self.passed,
            "calls": calls,
            "paths": paths,
        }
        out.write_text(json.dumps(trace, indent=1), encoding="utf-8")


def enter(sequence: list[str], room: str) -> None:
    if not sequence or sequence[-1] != room:  # consecutive repeats collapsed
        sequence.append(room)


TRACER = Tracer(PACKAGE_DIR)


def start() -> None:
    sys.setprofile(TRACER.profile)
    threading.setprofile(TRACER.profile)
    atexit.register(stop)  # a run that ends without unconfiguring still leaves its trace


def stop() -> None:
    sys.setprofile(None)
    threading.setprofile(None)
    if out := os.environ.get("HOUSE_WALK_OUT"):
        TRACER.write(Path(out))


def pytest_unconfigure(config: object) -> None:
    stop()


if os.environ.get("HOUSE_WALK_OUT"):  # traced from import on; imported alone, it traces nothing
    start()
