"""Repetition checks: realistic prose passes, the loop shapes seen in the wild fail."""

from __future__ import annotations

import pytest

from tp2qual.checks import repetition as rep

PROSE = """The history of the printing press is a story about how ideas travel. Before Johannes \
Gutenberg built his press in Mainz around 1440, books in Europe were copied by hand, usually by \
monks working in scriptoria. A single Bible could take a scribe more than a year to finish, and \
the result was so expensive that only monasteries, universities and wealthy families could afford \
one. Errors crept in with every copy, and each manuscript differed slightly from its source.
Gutenberg combined several existing technologies in a new way. He used a screw press adapted from \
wine making, an oil-based ink that stuck to metal, and, most importantly, movable type cast from \
an alloy of lead, tin and antimony. Each letter was a separate piece of metal that could be \
arranged into lines, locked into a frame, inked, printed and then taken apart and reused. A \
printer could now produce hundreds of identical pages in a day.
The consequences were enormous. Within fifty years there were printing shops in more than two \
hundred European cities, and millions of books had been produced. Prices fell sharply, literacy \
began to rise, and scholars could compare identical copies of a text instead of arguing over which \
manuscript was correct. The Reformation spread partly because Martin Luther's pamphlets could be \
printed quickly and cheaply, and scientific ideas circulated among researchers who had never met.
Printing also changed languages. Printers needed consistent spelling to sell books across regions, \
so local dialects slowly gave way to standard written forms. In England, William Caxton's choices \
about spelling influenced the language for centuries, sometimes in ways that still confuse learners.
There were, of course, people who worried about the new technology. Some church officials feared \
that unsupervised reading would lead to heresy, and some scholars complained that cheap books were \
full of mistakes. Governments introduced licensing and censorship to control what could be printed.
Historians still argue about how much credit Gutenberg deserves. Printing with movable type had \
been invented in China centuries earlier, and Korean printers used metal type before him. What \
made the European press so influential was perhaps not the invention itself but the conditions \
that allowed it to spread: a growing merchant class, expanding universities and a shared written \
language, Latin, that connected readers across borders.
"""

# Greedy small-model style: the same phrases again and again, but never stuck in a loop.
BLAND = """Education is very important for everyone. Education helps people to learn new things \
and to get a good job. In this essay, I will talk about why education is important and how it can \
help people in their lives.
First, education is important because it helps people to get a good job. When people have a good \
education, they can find a good job and earn more money. This is important because money helps \
people to take care of their families and to live a good life. People who have a good education \
are also more likely to be happy in their jobs.
Second, education is important because it helps people to understand the world around them. When \
people learn about science, history and math, they can understand how the world works. This helps \
them to make good decisions in their lives. For example, people who understand science can make \
good decisions about their health.
Third, education is important because it helps people to become good citizens. When people have a \
good education, they can understand the laws of their country and they can vote in elections. This \
is important because it helps to make the country a better place for everyone.
Fourth, education is important because it helps people to be creative. When people learn new \
things, they can come up with new ideas. These new ideas can help to solve problems in the world. \
For example, scientists use their education to find new medicines and new technologies.
There are many ways that people can get an education. People can go to school, they can go to \
college, or they can learn on their own by reading books and using the internet. It is important \
for people to keep learning throughout their lives, because the world is always changing.
In conclusion, education is very important for everyone. Education helps people to get a good \
job, to understand the world, to become good citizens and to be creative. Everyone should have the \
chance to get a good education, because education is the key to a better life and a better world.
"""

LISTY = """Here are ten tips for writing clean Python code:

1. Use descriptive names. A variable called `total_price` is easier to read than `tp`.
2. Keep functions short. A function should do one thing and do it well.
3. Write docstrings. A docstring should explain why the function exists, not just what it does.
4. Use type hints. Type hints make it easier to understand what a function expects.
5. Avoid global state. Global variables make code harder to test and harder to reason about.
6. Write tests. Tests make it easier to change code without breaking it.
7. Use a formatter. A formatter keeps the style consistent across a project.
8. Handle errors explicitly. Do not silently ignore exceptions; log them or re-raise them.
9. Prefer composition over inheritance. Composition keeps classes small and easy to change.
10. Read other people's code. Reading good code is one of the best ways to learn.

| Tip | Effort | Payoff |
|-----|--------|--------|
| Names | low | high |
| Tests | high | high |

Following these tips will not make your code perfect, but it will make it easier to read, easier \
to test and easier to change... ha ha ha!
"""

SENTENCE = (
    "The committee met again on Tuesday to discuss the budget, but no decision was reached "
    "and the members agreed to meet again next week. "
)


@pytest.mark.parametrize("text", [PROSE, BLAND, LISTY], ids=["prose", "bland", "list"])
def test_legit_text_passes_defaults(text: str) -> None:
    verdict = rep.check(text)
    assert verdict.ok, verdict.reason
    assert verdict.reason == ""
    assert len(text.split()) > 150


def test_bland_essay_is_measurably_repetitive_yet_passes() -> None:
    measures = rep.measure(BLAND)
    assert 2.4 < measures["compression_ratio"] < rep.DEFAULT.max_compression_ratio
    assert measures["seq_rep"] > rep.measure(PROSE)["seq_rep"]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("the cat " * 200, ["compression_ratio", "seq_rep", "tail_loop_chars"]),
        ("+" * 600, ["max_char_run", "tail_loop_chars", "compression_ratio"]),
        (PROSE + SENTENCE * 5, ["tail_loop_chars"]),
        (PROSE + (SENTENCE * 4)[:-37], ["tail_loop_chars"]),  # cut by max_tokens mid-block
        (PROSE + " ok" * 40, ["max_token_run"]),
        (PROSE + "\n" * 300, ["max_space_run"]),
        (PROSE + " " + BLAND.split("\n")[1] * 4, ["tail_loop_chars"]),  # 335-char paragraph
    ],
    ids=["cat", "plus", "sentence-x5", "truncated-loop", "token", "newlines", "paragraph-x4"],
)
def test_degenerate_text_fails_and_names_measures(text: str, named: list[str]) -> None:
    verdict = rep.check(text)
    assert not verdict.ok
    assert verdict.reason.startswith("degenerate output: ")
    for name in named:
        assert f"{name}={verdict.measures[name]} > " in verdict.reason


def test_reason_gives_value_and_limit() -> None:
    verdict = rep.check("+" * 600)
    assert "max_char_run=600 > 80" in verdict.reason
    assert verdict.measures["max_char_run"] == 600


@pytest.mark.parametrize("text", ["", "   ", "\n\n"])
def test_empty_output_fails(text: str) -> None:
    verdict = rep.check(text)
    assert not verdict.ok
    assert verdict.reason == "empty output"


def test_tail_loop_finds_period_and_partial_block() -> None:
    assert rep.tail_loop("intro: " + "abc" * 10) == (3, 10.0, 30)
    period, repeats, covered = rep.tail_loop("intro " + ("0123456789" * 5)[:-4])
    assert (period, repeats, covered) == (10, 4.6, 46)
    assert rep.tail_loop("no loop here at all.") == (0, 0.0, 0)
    assert rep.tail_loop("xx" + "ab" * 2, min_repeats=3) == (0, 0.0, 0)


def test_tail_loop_breaks_ties_by_shortest_period() -> None:
    # "ab" (period 2) and "abab" (period 4) cover the same tail; the shortest wins
    assert rep.tail_loop("zz" + "ab" * 20)[0] == 2


@pytest.mark.parametrize(
    ("text", "n", "expected"),
    [
        ("a b c d e", 4, 0.0),
        ("a b a b a b", 2, 1 - 2 / 5),
        ("x y z", 4, 0.0),
        ("w w w w w w", 1, 1 - 1 / 6),
    ],
)
def test_seq_rep_by_hand(text: str, n: int, expected: float) -> None:
    assert rep.seq_rep(text, n) == pytest.approx(expected)


def test_compression_ratio_matches_zlib() -> None:
    import zlib

    raw = PROSE.encode()
    assert rep.compression_ratio(PROSE) == pytest.approx(len(raw) / len(zlib.compress(raw)))
    assert rep.compression_ratio("") == 0.0


def test_runs_split_whitespace_from_visible_characters() -> None:
    measures = rep.measure("a" + "=" * 79 + "\n" + " " * 12 + "code  ok ok ok")
    assert measures["max_char_run"] == 79
    assert measures["max_space_run"] == 12
    assert measures["max_token_run"] == 3


def test_thresholds_from_mapping_overrides_and_rejects_unknown() -> None:
    strict = rep.Thresholds.from_mapping({"max_compression_ratio": 2.4, "max_char_run": 40})
    assert strict.max_compression_ratio == 2.4
    assert strict.seq_rep_n == rep.DEFAULT.seq_rep_n
    assert not rep.check(BLAND, strict).ok
    assert "compression_ratio=" in rep.check(BLAND, strict).reason
    with pytest.raises(ValueError, match=r"max_char_runs"):
        rep.Thresholds.from_mapping({"max_char_runs": 10})


def test_thresholds_are_frozen() -> None:
    with pytest.raises(AttributeError):
        rep.DEFAULT.max_char_run = 1  # type: ignore[misc]
