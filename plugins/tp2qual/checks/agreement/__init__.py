"""Gate 07's pure checks: token rows (``rows``), the closeness walk and greedy rule
(``closeness``), position figures for self-consistency and teacher forcing (``scoring``), and
the judgement from a transcript (``evaluate``)."""

from tp2qual.checks.agreement.kinds import (
    ACCURACY,
    NEAR_BOUND,
    NOT_ASKED,
    OWN,
    REFERENCE,
    REFERENCE_ACCURACY,
    REREAD,
    STOPPED,
    SUMMARY,
    WARM,
)

__all__ = [
    "ACCURACY",
    "NEAR_BOUND",
    "NOT_ASKED",
    "OWN",
    "REFERENCE",
    "REFERENCE_ACCURACY",
    "REREAD",
    "STOPPED",
    "SUMMARY",
    "WARM",
]
