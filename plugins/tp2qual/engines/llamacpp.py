"""llama.cpp through llama-cpp-python's server: what the suite knows about it, and where from.

Seen on llama-cpp-python 0.3.36 (the embedded candidate, ``smollm2-135m-local``; its real run in
``plugins/tests/data/smollm2-local-2026-12-01/``) and read in its source (paths under
``llama_cpp/``). llama.cpp's own ``llama-server`` differs (it has ``--metrics`` counters and a
``timings`` object): ``perf/metrics.py`` reads those where a candidate runs it.
"""

from __future__ import annotations

from tp2qual.engines.engine import OPENAI_ERROR, Engine, OverLength

# The perf block llama.cpp prints to stderr after every completion (llama-cpp-python's server is
# verbose by default): the only server-side timing it gives. Read by perf/metrics.py.
PERF_LINE = (
    r"llama_perf_context_print:\s+(?P<what>load|prompt eval|eval|total) time\s*=\s*"
    r"(?P<ms>[\d.]+) ms(?:\s*/\s*(?P<n>\d+) (?:tokens|runs))?"
)

# llama.cpp's own llama-server (--metrics): cumulative (seconds, tokens) counters per phase
# (the counters its server README lists under --metrics); llama-cpp-python has no /metrics.
SERVER_COUNTERS = {
    "decode": ("llamacpp:tokens_predicted_seconds_total", "llamacpp:tokens_predicted_total"),
    "prompt": ("llamacpp:prompt_seconds_total", "llamacpp:prompt_tokens_total"),
}

ENGINE = Engine(
    kind="llama.cpp",
    title="llama.cpp (llama-cpp-python)",
    neutral_sampling={"top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0},
    sampling_names={"repetition_penalty": "repeat_penalty"},
    identity_paths=(),  # no version endpoint: the installed package, or the image's label
    metrics_path=None,
    histograms={},
    metric_counters=SERVER_COUNTERS,
    kv_capacity=None,  # one slot of n_ctx tokens: the bound itself
    tool_finish={},
    over_length=OverLength(
        plain="HTTP 400, error envelope",
        streamed="HTTP 200 with an empty stream (no error in it): a silent answer",
        messages=(r"maximum context length is \d+ tokens",),
    ),
    envelopes=(OPENAI_ERROR,),
    env_prefix=None,
    python_package=("llama_cpp", "llama-cpp-python"),
    log_lines={"perf": PERF_LINE},
    reread_shift=1,
    sources={
        "reread_shift": (
            "llama-cpp-python 0.3.36 llama_cpp/llama.py _create_completion: with echo, prompt row "
            "i's token_logprobs is read from the score row that predicts token i+1, and each "
            "row's top_logprobs holds the next token's distribution plus the row's own misread "
            "value; the right value of token i is in row i-1's list (SmolLM2's GGUF adds no BOS). "
            "Measured: plugins/tests/data/completions-echo/README.md, 64 of 64 reread rows exact"
        ),
        "neutral_sampling": (
            "llama-cpp-python 0.3.36 llama_cpp/server/types.py: repeat_penalty defaults to 1.1 "
            "(repeat_penalty_field), top_k to 40, so 1.0 is stated; greedy at temperature 0"
        ),
        "identity_paths": "0.3.36 server has no version endpoint (llama_cpp/server/app.py)",
        "python_package": (
            "llama-cpp-python 0.3.36: the server is its llama_cpp.server module "
            "(candidates/smollm2-135m-local.toml runs '{python} -m llama_cpp.server')"
        ),
        "metric_counters": (
            "llama.cpp's own llama-server --metrics (tools/server/README.md): "
            "llamacpp:prompt_tokens_total, prompt_seconds_total, tokens_predicted_total, "
            "tokens_predicted_seconds_total; llama-cpp-python 0.3.36 has no /metrics"
        ),
        "metrics_path": (
            "0.3.36: no /metrics and no timings in any response; the perf block in its log"
        ),
        "over_length": (
            "0.3.36 llama_cpp/llama.py 'Requested tokens (N) exceed context window of M', "
            'answered HTTP 400 by llama_cpp/server/errors.py context_length_exceeded ("This '
            "model's maximum context length is M tokens…\"); streamed: an empty HTTP 200 "
            "(seen here; candidates/_smollm2-llamacpp.toml [gates.capacity] why)"
        ),
        "log_lines": (
            "llama.cpp's llama_perf_context_print block, seen in the 0.3.36 server log "
            "(plugins/tests/test_server_metrics.py quotes one)"
        ),
    },
)
