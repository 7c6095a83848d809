"""Root conftest of the qualification suite.

The plugins (candidates, gating, server, evidence) are listed in ``tp2qual.plugin`` and loaded
through the package's ``pytest11`` entry point (``pip install -e .``), so their options work from
any directory. Gate modules live in ``tests/``; candidate files in ``candidates/``.
"""
