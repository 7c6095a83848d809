"""What a gate has done so far, in one line: the request it is on, tokens and rate, time left.

Pure: the tally is fed by the request watch (``serving/server.Watch``) with times passed in, and
``line`` renders it; writing it to a terminal is ``hooks/progress.py``'s business. The rate is
output tokens over the wall time of the finished requests (prefill included: what the user
waits for). Time left is for the request in flight: its ``max_tokens`` at that rate (an upper
bound, since a request may stop early), less what it has already had.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class InFlight:
    tag: str
    number: int  # 1-based, in this gate
    max_tokens: int | None
    began: float
    chunks: int = 0


@dataclass
class GateProgress:
    label: str  # e.g. "[smollm2-135m-local] repetition"
    done: int = 0
    tokens: int = 0
    seconds: float = 0.0
    current: InFlight | None = field(default=None)

    def sent(self, tag: str, max_tokens: int | None, now: float) -> None:
        self.current = InFlight(tag, self.done + 1, max_tokens, now)

    def streamed(self, chunks: int) -> None:
        if self.current is not None:
            self.current.chunks = chunks

    def answered(self, tokens: int | None, now: float) -> None:
        if self.current is None:
            return
        self.done += 1
        self.tokens += tokens if tokens is not None else self.current.chunks
        self.seconds += max(0.0, now - self.current.began)
        self.current = None

    @property
    def rate(self) -> float | None:
        """Output tokens per second over the finished requests; None before the first."""
        return self.tokens / self.seconds if self.tokens and self.seconds > 0 else None

    def left_s(self, now: float) -> float | None:
        """Seconds the request in flight may still take, at the rate so far (its own when
        streamed, else the gate's); None when there is nothing to go on."""
        current = self.current
        if current is None or not current.max_tokens:
            return None
        elapsed = now - current.began
        if current.chunks > 1 and elapsed > 0:
            return max(0.0, (current.max_tokens - current.chunks) * elapsed / current.chunks)
        rate = self.rate
        return None if rate is None else max(0.0, current.max_tokens / rate - elapsed)

    def line(self, now: float) -> str:
        parts = [self.label]
        current = self.current
        if current is not None:
            streamed = f", {current.chunks} chunks" if current.chunks else ""
            parts.append(
                f"request {current.number} ({current.tag}) {now - current.began:.0f} s{streamed}"
            )
        if self.done:
            rate = self.rate
            speed = f" at {rate:.1f} tok/s" if rate is not None else ""
            parts.append(f"{self.done} done, {self.tokens} tokens{speed}")
        left = self.left_s(now)
        if left is not None and current is not None:
            parts.append(f"≤ {duration(left)} left (≤ {current.max_tokens} tokens)")
        return " | ".join(parts)


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
