"""Engine facts are reached one way: through ``tp2qual.engines`` (``engine_for(kind)``, the
``Engine``'s fields, ``all_engines`` / ``any_engine_line`` for a log whose engine is unknown).

No module of the package outside ``engines/`` imports an engine module (``tp2qual.engines.vllm``
…) or decides by comparing a value with an engine's name (``== "llama.cpp"``, ``in ("vllm",
…)``, ``case "sglang":``). ``serving/engine_check_entry.py`` is the exception: it runs alone in
the engine's own Python or image, without tp2qual. Read with ``ast``: comments and docstrings
may name engines freely.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tp2qual.engines import ENGINES

PACKAGE = Path(__file__).resolve().parents[1] / "tp2qual"
ENGINES_DIR = PACKAGE / "engines"
EXEMPT = {PACKAGE / "serving" / "engine_check_entry.py"}  # runs in the engine's image alone
# The per-engine modules: every module of engines/ but the package and the Engine's own types.
ENGINE_MODULES = frozenset(
    p.stem for p in ENGINES_DIR.glob("*.py") if p.stem not in {"__init__", "engine"}
)
ENGINE_NAMES = frozenset(ENGINES)
_COMPARING = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _module_of(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


def _engine_module(name: str) -> str | None:
    """The engine module ``name`` is or lies in (``tp2qual.engines.vllm[.x]``), else None."""
    parts = name.split(".")
    if parts[:2] == ["tp2qual", "engines"] and len(parts) > 2 and parts[2] in ENGINE_MODULES:
        return ".".join(parts[:3])
    return None


def _imported(node: ast.Import | ast.ImportFrom, module: str) -> Iterator[str]:
    """Every module name an import statement reaches, relative imports resolved."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = module.split(".")[: -node.level]
        base = ".".join([*package, *([base] if base else [])])
    yield base
    yield from (f"{base}.{alias.name}" for alias in node.names)


def _names_an_engine(node: ast.expr) -> str | None:
    """The engine name a literal is, or holds (a tuple, list or set of strings)."""
    if isinstance(node, ast.Constant) and node.value in ENGINE_NAMES:
        return str(node.value)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return next(filter(None, (_names_an_engine(e) for e in node.elts)), None)
    return None


def _imports_by_name(call: ast.Call) -> str | None:
    """The engine module ``importlib.import_module("…")`` / ``__import__("…")`` names."""
    func = call.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = call.args[0] if call.args else None
    if called not in {"import_module", "__import__"} or not isinstance(first, ast.Constant):
        return None
    return _engine_module(str(first.value))


def offences(source: str, module: str) -> Iterator[tuple[int, str]]:
    """(line, what) for each engine-module import and engine-name comparison in ``source``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            reached = {_engine_module(name) for name in _imported(node, module)} - {None}
            yield from ((node.lineno, f"imports {found}") for found in sorted(reached))
        elif isinstance(node, ast.Call) and (found := _imports_by_name(node)):
            yield node.lineno, f"imports {found}"
        elif isinstance(node, ast.Compare) and any(isinstance(o, _COMPARING) for o in node.ops):
            for side in (node.left, *node.comparators):
                if name := _names_an_engine(side):
                    yield node.lineno, f"compares with the engine name {name!r}"
        elif isinstance(node, ast.MatchValue) and (name := _names_an_engine(node.value)):
            yield node.lineno, f"matches the engine name {name!r}"


def _modules() -> Iterator[Path]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if ENGINES_DIR not in path.parents and path not in EXEMPT:
            yield path


def test_no_module_outside_engines_reaches_an_engine_module_or_names_an_engine() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parents[1])}:{line}: {what}"
        for path in _modules()
        for line, what in offences(path.read_text(), _module_of(path))
    ]
    assert not found, "engine facts reached another way than tp2qual.engines:\n" + "\n".join(found)


def test_the_reader_finds_each_way_round() -> None:
    """The reader is not blind: each shape it forbids, in a module of checks/."""
    bad = """\
import tp2qual.engines.vllm
from tp2qual.engines import llamacpp, engine_for
from tp2qual.engines.sglang import ENGINE
from ..engines import vllm
importlib.import_module("tp2qual.engines.sglang")
if kind == "llama.cpp": pass
if "vllm" != kind: pass
if kind in ("sglang", "other"): pass
match kind:
    case "vllm": pass
"""
    got = list(offences(bad, "tp2qual.checks.x"))
    assert [line for line, _ in got] == [1, 2, 3, 4, 5, 6, 7, 8, 10], got
    fine = """\
from tp2qual.engines import engine_for, all_engines
from tp2qual.engines.engine import Engine
x = {"vllm": 1}
if engine_for(kind).env_prefix is None: pass
"""
    assert not list(offences(fine, "tp2qual.checks.x"))
