"""The evidence record as it is written, while the run produces it: the run folder's layout
and hashing (``layout``), claims and the artifacts they rest on (``claims``), and the finding
with each candidate's record (``finding``). Serving and the gates write through it; reading a
run back (report, overview, verify) is ``tp2qual.evidence``, built on it."""
