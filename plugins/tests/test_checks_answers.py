"""Known-answer matching, reasoning separation and byte-identical repeats."""

from __future__ import annotations

import pytest

from tp2qual.checks.answers import check_answer, check_identical, normalise, split_reasoning


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("  Paris.  ", "paris"),
        ("**Paris**!", "paris"),
        ("The   answer\n\nis  4.", "the answer is 4"),
        ("<think>2+2... maybe 5?</think>\n4", "4"),
        ("<THINK>hmm</THINK> Four", "four"),
        ("okay so 2+2</think>The answer is 4", "the answer is 4"),
        ("It costs 1,000,000 dollars", "it costs 1000000 dollars"),
        ("`x = 1`", "x = 1"),
        ("4.5", "4.5"),
        ("", ""),
    ],
)
def test_normalise(text: str, expected: str) -> None:
    assert normalise(text) == expected


@pytest.mark.parametrize(
    ("message", "answer", "reasoning"),
    [
        ({"role": "assistant", "content": "4"}, "4", ""),
        ({"content": "4", "reasoning_content": "2 plus 2 is 4."}, "4", "2 plus 2 is 4."),
        ({"content": "4", "reasoning": " two and two "}, "4", "two and two"),
        ({"content": "<think>\nadd them\n</think>\n\nThe sum is 4."}, "The sum is 4.", "add them"),
        ({"content": "step one</think>Result: 4"}, "Result: 4", "step one"),
        (
            {"content": "<think>still thinking when max_tokens hit"},
            "",
            "still thinking when max_tokens hit",
        ),
        ({"content": None, "reasoning_content": "only reasoning"}, "", "only reasoning"),
        (
            {"content": "<think>b</think>4", "reasoning_content": "a"},
            "4",
            "a\nb",
        ),
    ],
)
def test_split_reasoning(message: dict, answer: str, reasoning: str) -> None:
    assert split_reasoning(message) == (answer, reasoning)


@pytest.mark.parametrize(
    ("answer", "expected", "ok"),
    [
        ("2 + 2 = 4", ["4"], True),
        ("The answer is **4**.", ["4"], True),
        ("The answer is 14.", ["4"], False),
        ("The answer is 4.5.", ["4"], False),
        ("The answer is -4.", ["4"], False),
        ("About 0.4 of them", ["4"], False),
        ("4,5 in German notation", ["4"], False),
        ("In 4 years", ["4"], True),
        ("(4)", ["4"], True),
        ("x=4;", ["4"], True),
        ("The capital of France is Paris.", ["paris"], True),
        ("Parisian cafes", ["Paris"], False),
        ("It is  New\nYork City", ["new york"], True),
        ("The total is 1,000.", ["1000"], True),
        ("<think>it is 4</think>I think it is 5", ["4"], False),
        ("Blue, or maybe azure", ["red", "azure"], True),
        ("", ["4"], False),
    ],
)
def test_contains_mode(answer: str, expected: list[str], ok: bool) -> None:
    verdict = check_answer(answer, expected)
    assert verdict.ok is ok, verdict
    assert verdict.measures["mode"] == "contains"


@pytest.mark.parametrize(
    ("answer", "expected", "ok"),
    [
        ("Paris.", ["paris"], True),
        ("  **PARIS** ", ["Paris"], True),
        ("Paris, France", ["paris"], False),
        ("<think>x</think> 42", ["42"], True),
    ],
)
def test_exact_mode(answer: str, expected: list[str], ok: bool) -> None:
    assert check_answer(answer, expected, mode="exact").ok is ok


@pytest.mark.parametrize(
    ("answer", "pattern", "ok"),
    [
        ("The answer is 42.", r"\b42\b", True),
        ("ANSWER: yes", r"^answer:\s*yes$", True),
        ("Answer:\n  yes", r"answer: yes", True),
        ("<think>42</think>no idea", r"42", False),
        ("420", r"\b42\b", False),
    ],
)
def test_regex_mode(answer: str, pattern: str, ok: bool) -> None:
    assert check_answer(answer, [pattern], mode="regex").ok is ok


def test_failure_reason_and_measures() -> None:
    verdict = check_answer("I believe it is 5.", ["4", "four"])
    assert not verdict.ok
    assert (
        verdict.reason == "answer 'i believe it is 5' does not contains-match any of ['4', 'four']"
    )
    assert verdict.measures["matched"] == []
    passed = check_answer("four or 4", ["4", "four"])
    assert passed.measures["matched"] == ["4", "four"]


def test_check_answer_rejects_misuse() -> None:
    with pytest.raises(ValueError, match="unknown answer mode"):
        check_answer("4", ["4"], mode="fuzzy")
    with pytest.raises(ValueError, match="at least one"):
        check_answer("4", [])


def test_identical_outputs_pass() -> None:
    verdict = check_identical(["The sky is blue."] * 5)
    assert verdict.ok
    assert verdict.measures == {"n": 5, "distinct": 1, "chars": 16}


def test_first_difference_is_located() -> None:
    base = "Once upon a time there was a small robot who loved to paint the sea."
    changed = base.replace("paint", "print")
    verdict = check_identical([base, base, changed, changed + "!"])
    assert not verdict.ok
    at = base.index("paint") + 1
    assert verdict.measures == {
        "n": 4,
        "distinct": 3,
        "first_diff_output": 2,
        "first_diff_index": at,
    }
    assert f"output 2 differs from output 0 at char {at}: " in verdict.reason
    assert "…'loved to paint the sea.'" in verdict.reason
    assert "…'loved to print the sea.'" in verdict.reason


def test_prefix_difference_points_at_end_of_shorter() -> None:
    verdict = check_identical(["abc", "abcdef"])
    assert verdict.measures["first_diff_index"] == 3
    assert verdict.reason.endswith("'abc' vs 'abcdef'")


def test_excerpt_is_truncated_repr() -> None:
    a = "x" * 100 + "\nline" + "y" * 100
    verdict = check_identical([a, a.replace("\nline", "\tline")])
    assert "'xxxxxxxxxx\\nlineyyy" in verdict.reason  # newline shown escaped
    assert "…" in verdict.reason
    assert len(verdict.reason) < 160


def test_unicode_normalisation_forms_are_not_identical() -> None:
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert not check_identical([composed, decomposed]).ok


def test_check_identical_needs_two() -> None:
    with pytest.raises(ValueError, match="at least two"):
        check_identical(["only one"])
