"""Server-side latency figures, to set beside the client's: pure functions, no I/O.

vLLM (``/metrics``) and SGLang (``--enable-metrics``, ``/metrics``) export Prometheus histograms
of TTFT, inter-token latency and end-to-end latency. A histogram's ``_sum`` and ``_count`` only
grow, so the mean over a window is (sum after - sum before) / (count after - count before) from
two scrapes: one before the measured samples, one after them (the warm-up stays outside). The
names each engine exports, its counters and the log line llama.cpp prints are its module's in
``tp2qual.engines``, handed in by the caller (``Engine.histograms``, ``metric_counters``,
``log_lines["perf"]``).

Semantics worth knowing when comparing with the client:

- TTFT and E2E are observed once per request: their window mean is a per-request mean.
- Inter-token latency (vLLM ``inter_token_latency_seconds``, formerly
  ``time_per_output_token_seconds``; SGLang the same two names) is observed once per decode gap,
  so its window mean is token-weighted: equal to the client's per-request mean TPOT when every
  request has the same output length (the throughput gate fixes it), not otherwise.
- Both are measured inside the engine: no HTTP, no detokenise-and-stream cost. Server TTFT is
  expected a little below the client's, server ITL very close to the client's TPOT.

llama.cpp: llama.cpp's own ``llama-server`` (``--metrics``) exports counters, not histograms
(``llamacpp:tokens_predicted_total`` / ``..._seconds_total``, ``prompt_tokens_total`` /
``prompt_seconds_total``) and puts a ``timings`` object in its responses. llama-cpp-python's
server (0.3.36) exposes neither: no ``/metrics``, no timings in any response; with ``verbose``
(its default) it prints llama.cpp's ``llama_perf_context_print`` block to stderr after every
completion, which ``llama_perf_from_log`` reads from the server log.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)"
    r"(?:\{(?P<labels>.*)\})?"
    r"\s+(?P<value>\S+)"
    r"(?:\s+(?P<timestamp>-?\d+(?:\.\d*)?))?\s*$"
)
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class Sample:
    """One line of the exposition: metric name, labels, value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


def _labels(text: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for match in _LABEL.finditer(text):
        value = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], match.group(2))
        pairs.append((match.group(1), value))
    return tuple(sorted(pairs))


def parse(text: str) -> list[Sample]:
    """Samples of a Prometheus text exposition (comments, HELP/TYPE and junk lines skipped)."""
    samples = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        try:
            value = float(match.group("value"))
        except ValueError:
            continue
        samples.append(Sample(match.group("name"), _labels(match.group("labels") or ""), value))
    return samples


def _matches(sample: Sample, labels: Mapping[str, str] | None) -> bool:
    return not labels or all(sample.label(k) == v for k, v in labels.items())


def histogram_totals(
    samples: Iterable[Sample], base: str, labels: Mapping[str, str] | None = None
) -> tuple[float, float] | None:
    """(sum, count) of histogram ``base`` over every series matching ``labels`` (e.g. all
    engines of one model); None when the histogram is absent."""
    total_sum = total_count = 0.0
    seen = False
    for sample in samples:
        if not _matches(sample, labels):
            continue
        if sample.name == f"{base}_sum":
            total_sum += sample.value
            seen = True
        elif sample.name == f"{base}_count":
            total_count += sample.value
            seen = True
    return (total_sum, total_count) if seen else None


@dataclass(frozen=True)
class WindowMean:
    """Mean of one histogram between two scrapes; ``mean_s`` is None with a reason when none
    can be given (histogram absent, nothing observed, counters reset)."""

    metric: str | None
    mean_s: float | None
    observations: float
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def window_mean(
    before: Sequence[Sample],
    after: Sequence[Sample],
    names: Sequence[str],
    labels: Mapping[str, str] | None = None,
) -> WindowMean:
    """(Δsum / Δcount) of the first histogram in ``names`` present in the later scrape."""
    for name in names:
        end = histogram_totals(after, name, labels)
        if end is None:
            continue
        start = histogram_totals(before, name, labels) or (0.0, 0.0)
        d_sum, d_count = end[0] - start[0], end[1] - start[1]
        if d_count < 0 or d_sum < 0:
            return WindowMean(name, None, d_count, "counters went down: server restarted")
        if d_count == 0:
            return WindowMean(name, None, 0.0, "no observations in the window")
        mean = d_sum / d_count
        if not math.isfinite(mean):
            return WindowMean(name, None, d_count, "not a finite mean")
        return WindowMean(name, mean, d_count)
    return WindowMean(None, None, 0.0, f"none of {', '.join(names)} exposed")


def server_window(
    before_text: str,
    after_text: str,
    histograms: Mapping[str, Sequence[str]],
    labels: Mapping[str, str] | None = None,
) -> dict[str, WindowMean]:
    """TTFT, ITL and E2E window means from two ``/metrics`` scrapes; ``histograms``: the
    engine's names per figure, newest first (``Engine.histograms``, ``tp2qual.engines``)."""
    before, after = parse(before_text), parse(after_text)
    return {key: window_mean(before, after, names, labels) for key, names in histograms.items()}


# --- llama.cpp ------------------------------------------------------------------------------


def llamacpp_window(
    before_text: str, after_text: str, counters: Mapping[str, tuple[str, str]]
) -> dict[str, float | None]:
    """Seconds per decoded and per prompt token over a window, from two scrapes of llama.cpp's
    ``llama-server --metrics`` (cumulative counters); ``counters``: per phase, the (seconds,
    tokens) counters (``Engine.metric_counters``)."""
    before, after = parse(before_text), parse(after_text)

    def delta(name: str) -> float | None:
        end = [s.value for s in after if s.name == name]
        start = [s.value for s in before if s.name == name]
        return sum(end) - sum(start) if end else None

    def per(seconds: str, tokens: str) -> float | None:
        d_s, d_n = delta(seconds), delta(tokens)
        return d_s / d_n if d_s is not None and d_n else None

    return {
        f"{what}_s_per_token": per(seconds, tokens) for what, (seconds, tokens) in counters.items()
    }


def llama_server_timings(timings: Mapping[str, Any]) -> dict[str, float | None]:
    """llama-server's per-response ``timings`` object in the suite's units."""

    def ms(key: str) -> float | None:
        value = timings.get(key)
        return float(value) / 1000 if value is not None else None

    per_second = timings.get("predicted_per_second")
    return {
        "prompt_s": ms("prompt_ms"),
        "prompt_tokens": timings.get("prompt_n"),
        "decode_s": ms("predicted_ms"),
        "decoded_tokens": timings.get("predicted_n"),
        "tpot_s": ms("predicted_per_token_ms"),
        "decode_tok_s": float(per_second) if per_second is not None else None,
    }


@dataclass(frozen=True)
class LlamaPerf:
    """One completion's ``llama_perf_context_print`` block (llama-cpp-python, verbose)."""

    prompt_ms: float | None
    prompt_tokens: int | None
    eval_ms: float
    eval_runs: int
    total_ms: float | None

    @property
    def ms_per_eval(self) -> float | None:
        return self.eval_ms / self.eval_runs if self.eval_runs else None


def llama_perf_from_log(lines: Iterable[str], perf_line: str) -> list[LlamaPerf]:
    """Every perf block in a llama-cpp-python server log, in order; ``perf_line``: the engine's
    regex of one line of it (``Engine.log_lines["perf"]``). A block is closed by its
    ``total time`` line. Caveat seen on 0.3.36: the ``prompt eval`` figure can be near zero
    (0.08 ms for 139 tokens) while prompt processing took seconds, so use only ``eval``
    (decode: ms per run ~ TPOT) from it."""
    blocks: list[LlamaPerf] = []
    current: dict[str, tuple[float, int | None]] = {}
    perf = re.compile(perf_line)
    for line in lines:
        match = perf.search(line)
        if match is None:
            continue
        n = match.group("n")
        current[match.group("what")] = (float(match.group("ms")), int(n) if n else None)
        if match.group("what") == "total" and "eval" in current:
            prompt = current.get("prompt eval")
            eval_ms, runs = current["eval"]
            blocks.append(
                LlamaPerf(
                    prompt_ms=prompt[0] if prompt else None,
                    prompt_tokens=prompt[1] if prompt else None,
                    eval_ms=eval_ms,
                    eval_runs=runs or 0,
                    total_ms=current["total"][0],
                )
            )
            current = {}
    return blocks


def llama_perf_decode_s(blocks: Sequence[LlamaPerf]) -> float | None:
    """Run-weighted seconds per decode step over the blocks (a window of completions)."""
    runs = sum(b.eval_runs for b in blocks)
    return sum(b.eval_ms for b in blocks) / runs / 1000 if runs else None
