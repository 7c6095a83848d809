"""The engine's own timings over the throughput gate's sample window, beside the client's.

vLLM and SGLang expose TTFT / inter-token / E2E histograms on ``/metrics``: two scrapes give the
window means. llama-cpp-python exposes none; it writes a perf block per completion to its log,
whose decode figure (ms per eval run) is comparable with the client's TPOT.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from tp2qual.candidate import Candidate
from tp2qual.engines import engine_for
from tp2qual.perf.metrics import llama_perf_decode_s, llama_perf_from_log, server_window
from tp2qual.serving.server import Api


class ServerWindow:
    def __init__(self, api: Api, candidate: Candidate):
        self.api = api
        self.candidate = candidate
        self.engine = engine_for(candidate.engine)
        self._before: str | None = None
        self._log_mark = 0

    def _scrape(self, tag: str) -> str | None:
        if self.engine.metrics_path is None:  # llama-cpp-python: no /metrics
            return None
        got = self.api.request(tag, "GET", self.engine.metrics_path, timeout=10)
        return got.body if got.status == 200 and isinstance(got.body, str) else None

    def _log_lines(self) -> list[str]:
        return self.api.server.log_text().splitlines()

    def open(self) -> None:
        self._before = self._scrape("metrics-before")
        self._log_mark = len(self._log_lines())

    def close(self, client: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Server-side means for the window, with the client's means to compare."""
        means = {k: client[k]["mean"] for k in ("ttft_s", "tpot_s", "e2e_s") if k in client}
        after = self._scrape("metrics-after")
        if self._before is not None and after is not None:
            labels = {"model_name": self.candidate.served_name}
            means_by = server_window(self._before, after, self.engine.histograms, labels)
            window = {k: asdict(v) for k, v in means_by.items()}
            return {"source": "/metrics histograms", "server": window, "client_means": means}
        lines = self._log_lines()[self._log_mark :]
        perf_line = self.engine.log_lines.get("perf")  # llama.cpp's perf block, if it logs one
        decode_s = llama_perf_decode_s(llama_perf_from_log(lines, perf_line) if perf_line else [])
        return {
            "source": "llama.cpp perf log (eval ms per run)" if decode_s else "none exposed",
            "server": {"tpot_s": decode_s},
            "client_means": means,
            "client_over_server_tpot": means["tpot_s"] / decode_s if decode_s else None,
        }
