"""The suite's pytest plugins, listed in one place; registered through the ``pytest11`` entry
point so that options like ``--candidates DIR`` exist before any conftest is found."""

pytest_plugins = [
    "tp2qual.hooks.candidates",
    "tp2qual.hooks.gating",
    "tp2qual.hooks.gpus",
    "tp2qual.hooks.server",
    "tp2qual.hooks.progress",
    "tp2qual.hooks.evidence",
    "tp2qual.hooks.docker",
    "tp2qual.hooks.room",
    "tp2qual.hooks.handover",
    "tp2qual.hooks.hosts",
    "tp2qual.hooks.interrupts",
]
