"""The agreement and accuracy figures the overview shows, by claim name, in one place.

Gate 07 claims many figures; the overview shows a few, named, so a reader sees what was
compared and how closely, never a run-on list of keys. Each entry is a claim name, the words it
is shown with and how its value is written; a claim absent from a finding is left out (an older
finding, or a check that did not run), and nothing here judges: a judgement is shown only where
the gate recorded one (``accuracy_judgement``), never inferred (no "holds" from a flag).
Renaming a claim in gate 07 is a one-line change here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def _share(value: Any) -> str:
    return f"{float(value):.0%}"


def _num(value: Any) -> str:
    return f"{float(value):.3g}"


def _text(value: Any) -> str:
    return " ".join(str(value).split())


def _yes(value: Any) -> str:
    return "yes" if value is True else "no" if value is False else _text(value)


# (claim, shown as, how its value is written)
Figure = tuple[str, str, Callable[[Any], str]]
AGREEMENT: tuple[Figure, ...] = (
    ("agrees_with_reference", "agrees", _yes),
    ("exact_share", "identical answers", _share),
    ("max_abs_delta_logprob", "max |Δ logprob|", _num),
    ("tf_mean_abs_delta", "teacher-forced mean |Δ|", _num),
    ("tf_p99_abs_delta", "p99 |Δ|", _num),
    ("tf_top1_agreement", "top-1 agreement", _share),
    ("tf_mean_kl", "mean KL", _num),
    ("self_mean_abs_delta", "self-consistency mean |Δ|", _num),
    ("self_p99_abs_delta", "p99 |Δ|", _num),
    ("agreement_not_judged", "", _text),  # each part with its own words: not judged, not applicable
)
ACCURACY: tuple[Figure, ...] = (
    ("accuracy", "accuracy", _share),
    ("accuracy_items", "items scored", _text),
    ("accuracy_cut", "cut by their budget", _text),
    ("reference_accuracy", "reference", _share),
    ("accuracy_judgement", "", _text),
    ("accuracy_detectable_drop", "smallest detectable drop", _share),
)
INTERVAL = ("accuracy_wilson_low", "accuracy_wilson_high")  # shown beside accuracy
REFERENCE = ("reference_candidate", "reference_run", "reference_source")
NAMES = tuple(n for n, _, _ in (*AGREEMENT, *ACCURACY)) + INTERVAL + REFERENCE


def named(claims: Mapping[str, Any]) -> dict[str, Any]:
    """The named figures a finding's gate-07 claims hold, in the list's order."""
    return {n: claims[n] for n in NAMES if n in claims and claims[n] is not None}


def agreement_words(figures: Mapping[str, Any]) -> str:
    """``agrees yes · identical answers 60% · max |Δ logprob| 0.17 · …``, or "" for none."""
    return _words(AGREEMENT, figures)


def accuracy_words(figures: Mapping[str, Any]) -> str:
    """``accuracy 30% [17%, 48%] · items scored 30 · reference 33% · no drop detected · …``."""
    words = _words(ACCURACY, figures)
    low, high = (figures.get(k) for k in INTERVAL)
    if words and _number(low) and _number(high):
        head, sep, rest = words.partition(" · ")
        words = f"{head} [{_share(low)}, {_share(high)}]{sep}{rest}"
    if words and "accuracy_judgement" not in figures:
        words += " · no judgement recorded"
    return words


def _words(figures: tuple[Figure, ...], values: Mapping[str, Any]) -> str:
    shown = []
    for name, label, write in figures:
        if name in values:
            try:
                text = write(values[name])
            except (TypeError, ValueError):
                text = _text(values[name])
            shown.append(f"{label} {text}".strip())
    return " · ".join(shown)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
