"""Every error the suite raises on purpose, as one small tree.

    QualError
    ├── CandidateError        a candidate file is malformed or names something that does not exist
    ├── PinMismatch           the model file or image on disk is not the pinned one
    ├── MalformedReply        an HTTP 200 whose body is not the answer asked for (body quoted)
    ├── ControlNotApplied     an answer whose reasoning contradicts the control asked for
    ├── ResponseTimeout       alive, but no answer within the request's time budget
    └── ServerError           a server did not come up or stopped serving
        ├── StartupExited     the process/container exited during start-up
        ├── StartupTimeout    not ready before the readiness deadline
        └── ServerDied        it was ready, then died mid-run

    SuiteError                the suite or its host could not judge: never the candidate's FAIL
    ├── PortInUse             the port the server is to listen on is held by another process
    ├── LookupTimedOut        a look-up the suite makes of its own accord (the engine's version)
    ├── ImageUnavailable      the pinned image is not on this host, or pulling it failed
    ├── GpusUnavailable       NVML cannot be read, or the GPUs the candidate needs are not free
    └── NoLogprobs            the engine answers without the token logprobs gate 07 reads

Each ``QualError`` speaks about the candidate (a gate that raises one FAILs); a ``SuiteError``,
or any other exception in a gate, is the suite's own fault and reads as a suite error.

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


class MalformedReply(QualError):
    """The server answered HTTP 200, but not with what was asked for: no ``choices``, an empty
    list, no ``message``, no ``usage`` count, a body or a stream chunk that is not JSON."""


class ControlNotApplied(QualError):
    """An HTTP 200 answer whose reasoning contradicts the candidate's reasoning control
    (``checks.control``): reasoning returned with thinking off, or none with reasoning asked.
    The serve is not the one the control qualifies, whatever the answer's words."""


class SuiteError(Exception):
    """Raised on purpose where the suite, not the candidate, stops a gate: the gate is ERROR
    with this message, and the candidate is never blamed."""

    def __init__(self, message: str, *, candidate: str = ""):
        self.candidate = candidate
        super().__init__(f"[{candidate}] {message}" if candidate else message)


class PortInUse(SuiteError):
    pass


class LookupTimedOut(SuiteError):
    pass


class ImageUnavailable(SuiteError):
    """The host lacks the pinned image (not present, or ``--pull`` failed): the host's state,
    not a statement about the image's bytes (that is ``PinMismatch``)."""


class GpusUnavailable(SuiteError):
    """NVML absent, too few GPUs, too little memory, or GPUs busy with another serve: this host
    cannot run the candidate now, which says nothing about the candidate."""


class NoLogprobs(SuiteError):
    """An HTTP 200 without the token logprobs asked for: gate 07 has nothing to judge by. The
    engine (or its launch) cannot give them; the serve's answers are not wrong for it."""
