"""Every dated ``[baseline]`` record is of the TP size of the candidate it is compared with
(issue 39): the user's 2026-08-01 capacity rows are exclusive-TP2 and sit with the TP2 serves,
the TP1 records with the TP1 references, and no text beside a TP2 figure calls it TP1.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tp2qual.candidate import Candidate, load_candidates
from tp2qual.candidate_file import read_candidate_file

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = load_candidates([ROOT / "candidates"])
WITH_RECORD = [c for c in SHIPPED if c.spec.get("baseline")]
# The 2026-08-01 exclusive-TP2 capacity rows (fakoli/anvil-serving
# docs/findings/2026-08-01-dual-pro-tp2-model-campaign.md), as tok/s figures.
TP2_ROWS = ("59.5", "73.5", "67.5", "70.9", "11.5")
# Where a figure could be called a record's: candidates, README, docs.
PROSE = [*sorted((ROOT / "candidates").glob("*.toml")), ROOT / "README.md"]
PROSE += sorted((ROOT / "docs").glob("*.md"))


def test_the_campaign_has_records() -> None:
    assert len(WITH_RECORD) >= 8, [c.name for c in WITH_RECORD]


@pytest.mark.parametrize("serve", WITH_RECORD, ids=lambda c: c.name)
def test_a_record_is_of_its_candidates_tp(serve: Candidate) -> None:
    record = serve.spec["baseline"]
    assert record.get("tp") == serve.tp, (
        f"{serve.name} (TP{serve.tp}) rests on a TP{record.get('tp')} record "
        f"of {record.get('date')}: {record.get('source')}"
    )
    words = " ".join(str(record.get(k, "")) for k in ("source", "note"))
    other = "TP2" if serve.tp == 1 else "TP1"
    assert f"({other}" not in words and f" {other} record" not in words, words


def test_a_tp1_file_never_keeps_its_tp2_files_figures() -> None:
    """A record is replaced whole by the including file's own (candidate_file._with_includes)."""
    tp1 = read_candidate_file(ROOT / "candidates" / "nemotron-3-super-120b-a12b-nvfp4-tp1.toml")
    assert tp1.spec["baseline"]["tp"] == 1 and "figures" not in tp1.spec["baseline"]


def _calls_tp1(line: str, at: int, end: int) -> bool:
    """TP1 in the words before a figure, and no TP2 near it, says the figure is a TP1 one."""
    before, near = line[max(0, at - 100) : at], line[max(0, at - 100) : end + 120]
    return re.search(r"\bTP1\b", before) is not None and "TP2" not in near


@pytest.mark.parametrize("path", PROSE, ids=lambda p: p.name)
def test_no_line_calls_a_tp2_row_tp1(path: Path) -> None:
    rows = [*map(re.escape, TP2_ROWS), "60-75"]  # 60-75: the range those rows span
    figure = re.compile(r"(?<![\d.])(" + "|".join(rows) + r")(?![\d])")
    wrong = [
        f"{path.name}:{n}: {line.strip()[:160]}"
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        for found in figure.finditer(line)
        if _calls_tp1(line, found.start(), found.end())
    ]
    assert not wrong, "\n".join(wrong)
