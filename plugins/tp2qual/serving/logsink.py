"""Copy a server's output line by line into its evidence file, redacted, keeping a tail.

Both launchers feed one of these from a reader thread, so the log is on disk as it is produced
(nothing is lost on a crash) and the last lines are at hand for progress and failure messages.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from tp2qual.redact import Redactor


class LogSink:
    def __init__(self, path: Path, redactor: Redactor, *, keep: int = 200):
        self.path = path
        self._redactor = redactor
        self._tail: deque[str] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        path.parent.mkdir(parents=True, exist_ok=True)

    def pump(self, chunks: Iterable[bytes]) -> None:
        """Start a daemon thread copying byte chunks (lines or arbitrary pieces) to the file."""
        self._thread = threading.Thread(target=self._copy, args=(chunks,), daemon=True)
        self._thread.start()

    def _copy(self, chunks: Iterable[bytes]) -> None:
        pending = b""
        with self.path.open("a", encoding="utf-8") as fh:
            for chunk in chunks:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    self._write(fh, raw)
            if pending:
                self._write(fh, pending)

    def _write(self, fh, raw: bytes) -> None:  # type: ignore[no-untyped-def]
        line = self._redactor.text(raw.decode("utf-8", "replace").rstrip("\r"))
        fh.write(line + "\n")
        fh.flush()
        with self._lock:
            self._tail.append(line)

    def join(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def tail(self, n: int = 30) -> list[str]:
        with self._lock:
            return list(self._tail)[-n:]

    def tail_text(self, n: int = 25) -> str:
        """The last lines, indented, for a failure message."""
        lines = self.tail(n)
        return "\n".join("    " + line for line in lines) if lines else "    (no output)"

    def last_line(self) -> str:
        with self._lock:
            for line in reversed(self._tail):
                if line.strip():
                    return line.strip()
        return ""
