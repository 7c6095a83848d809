"""The suite's pytest plugins, listed in one place; registered through the ``pytest11`` entry
point so that options like ``--candidates DIR`` exist before any conftest is found."""

pytest_plugins = [
    "tp2qual.pytest_candidates",
    "tp2qual.pytest_gating",
    "tp2qual.pytest_server",
    "tp2qual.pytest_evidence",
    "tp2qual.pytest_docker",
]
