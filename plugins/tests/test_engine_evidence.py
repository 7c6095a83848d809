"""Each engine fact a real answer holds names its capture and the test that reads it; each other
names why it is source only (issue 38). Structural and fast: the rows of ``Engine.evidence``
(SGLang's in ``engines/sglang_evidence.py``) against the ``Engine``'s own fields, the files in
the repository and the tests' own definitions, and the table in ``docs/sglang.md`` against the
rows. ``python plugins/tests/test_engine_evidence.py`` writes the table again.
"""

from __future__ import annotations

import ast
import dataclasses
import sys
from functools import cache
from pathlib import Path

import pytest

from tp2qual.engines import Engine, Evidence, engine_for

ROOT = Path(__file__).resolve().parents[2]
DIAGNOSIS = ROOT / "plugins" / "tp2qual" / "checks" / "diagnosis"
DOC = ROOT / "docs" / "sglang.md"
BEGIN, END = "<!-- evidence table: begin -->", "<!-- evidence table: end -->"
ENGINES_WITH_EVIDENCE = ("sglang",)
# Fields that name the engine or hold the record of it, not a fact about its answers.
NOT_FACTS = {"kind", "title", "sources", "evidence"}


def _facts(engine: Engine) -> set[str]:
    """The fields the engine module set (away from the default) and its ``sources`` keys."""
    plain = Engine(kind=engine.kind, title=engine.title, neutral_sampling={})
    fields = {
        f.name
        for f in dataclasses.fields(Engine)
        if f.name not in NOT_FACTS and getattr(engine, f.name) != getattr(plain, f.name)
    }
    return fields | {key.split(".")[0] for key in engine.sources}


@cache
def _defined(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text())
    return frozenset(n.name for n in tree.body if isinstance(n, ast.FunctionDef))


def _problems(row: Evidence) -> list[str]:
    if bool(row.capture) == bool(row.source_only):
        return ["needs either capture= (with tests=) or source_only=, not both or neither"]
    out = [f"capture {c} matches no file" for c in row.capture if not any(ROOT.glob(c))]
    if row.capture and not row.tests:
        out.append("a capture with no test that reads it")
    for test in row.tests:
        file, _, name = test.partition("::")
        if not (ROOT / file).is_file() or name not in _defined(ROOT / file):
            out.append(f"no test {test}")
    if row.source_only and len(row.source_only.split()) < 6:
        out.append("source_only= must say why")
    return out


@pytest.mark.parametrize("kind", ENGINES_WITH_EVIDENCE)
def test_every_row_names_a_capture_and_its_test_or_why_source_only(kind: str) -> None:
    rows = engine_for(kind).evidence
    problems = {row.fact: p for row in rows if (p := _problems(row))}
    assert not problems, problems
    facts = [row.fact for row in rows]
    assert len(facts) == len(set(facts)), "a fact listed twice"


@pytest.mark.parametrize("kind", ENGINES_WITH_EVIDENCE)
def test_every_fact_of_the_engine_has_a_row(kind: str) -> None:
    engine = engine_for(kind)
    listed = {row.fact for row in engine.evidence}
    assert _facts(engine) - listed == set(), "facts with neither capture nor source-only row"
    stale = {f for f in listed if ":" not in f} - _facts(engine)
    assert not stale, f"rows for facts the engine no longer states: {stale}"


def test_every_diagnosis_rule_row_names_a_rule_that_exists() -> None:
    """``diagnosis:<rule>`` names a finding some rule emits (a reading of the engine's lines,
    with spaces in its name, is free text)."""
    emitted = "".join(p.read_text() for p in DIAGNOSIS.glob("*.py"))
    rules = [
        row.fact.removeprefix("diagnosis:")
        for kind in ENGINES_WITH_EVIDENCE
        for row in engine_for(kind).evidence
        if row.fact.startswith("diagnosis:") and " " not in row.fact
    ]
    assert rules and [r for r in rules if f'"{r}"' not in emitted] == []


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(kind: str) -> str:
    """The rows as a markdown table: fact, what holds it, and the note."""
    lines = ["| fact | held by | note |", "|---|---|---|"]
    for row in engine_for(kind).evidence:
        if row.capture:
            files = ", ".join(f"`{c.removeprefix('plugins/tests/data/')}`" for c in row.capture)
            tests = ", ".join(f"`{t.split('/')[-1]}`" for t in row.tests)
            held = f"capture {files}; test {tests}"
        else:
            held = f"**source only**: {row.source_only}"
        lines.append(f"| `{row.fact}` | {_cell(held)} | {_cell(row.note)} |")
    return "\n".join(lines)


def _written(doc: str) -> str:
    return doc.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def test_the_doc_shows_the_rows_as_they_are() -> None:
    assert _written(DOC.read_text()) == table("sglang"), (
        "docs/sglang.md is behind: python plugins/tests/test_engine_evidence.py"
    )


if __name__ == "__main__":  # write the table again
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(f"{head}{BEGIN}\n{table('sglang')}\n{END}{rest.split(END, 1)[1]}")
    sys.exit(0)
