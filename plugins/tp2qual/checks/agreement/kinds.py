"""The kinds of line in gate 07's transcript (``agreement_transcript.jsonl``)."""

OWN = "transcript"  # this serve's greedy decode of one prompt
REREAD = "reread"  # this serve prefilling prompt plus an answer: ``of`` "self" or "forced"
WARM = "warm"  # the same prompt decoded again, its prefix now cached
REFERENCE = "reference"  # the reference's decode, copied with its run
ACCURACY, REFERENCE_ACCURACY = "accuracy", "reference_accuracy"  # one scored item per line
STOPPED = "accuracy_stopped"  # asking stopped early: the drop test's outcome was certain
NOT_ASKED = "accuracy_not_asked"  # no item asked: no drop to judge (tp2qual.accuracy_asked)
SUMMARY = "summary"
NEAR_BOUND = "near-bound"  # the prompt that fills the context towards its bound
