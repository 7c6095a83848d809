"""Every error the suite raises on purpose, as one small tree.

    QualError
    ├── CandidateError        a candidate file is malformed or names something that does not exist
    ├── PinMismatch           the model file or image on disk is not the pinned one
    ├── ResponseTimeout       alive, but no answer within the request's time budget
    └── ServerError           a server did not come up or stopped serving
        ├── StartupExited     the process/container exited during start-up
        ├── StartupTimeout    not ready before the readiness deadline
        └── ServerDied        it was ready, then died mid-run

Each of these speaks about the candidate (a gate that raises one FAILs); any other exception in
a gate is the suite's own fault and reads as a suite error.

Each carries the candidate's name and, where there is one, the log path, so a message always says
what and where.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class QualError(Exception):
    def __init__(self, message: str, *, candidate: str = "", log_path: Path | None = None):
        self.candidate = candidate
        self.log_path = log_path
        prefix = f"[{candidate}] " if candidate else ""
        suffix = f"\n(log: {log_path})" if log_path else ""
        super().__init__(f"{prefix}{message}{suffix}")


class CandidateError(QualError):
    """A candidate file failed its schema or a reference inside it does not resolve."""


class PinMismatch(QualError):
    """What is on disk is not what the candidate pins (model sha256, image digest); ``facts``:
    what was found, for gate 00 to record (``verify`` judges them again)."""

    def __init__(
        self,
        message: str,
        *,
        candidate: str = "",
        log_path: Path | None = None,
        facts: dict[str, Any] | None = None,
    ):
        super().__init__(message, candidate=candidate, log_path=log_path)
        self.facts = facts


class ResponseTimeout(QualError):
    """The server is alive but did not answer within the request's time budget."""


class ServerError(QualError):
    """The server is not serving."""


class StartupExited(ServerError):
    pass


class StartupTimeout(ServerError):
    pass


class ServerDied(ServerError):
    pass
