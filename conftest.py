"""The qualification suite's plugins, listed in one place (pytest's own habit)."""

pytest_plugins = [
    "tp2qual.pytest_candidates",
    "tp2qual.pytest_gating",
    "tp2qual.pytest_server",
    "tp2qual.pytest_evidence",
]
