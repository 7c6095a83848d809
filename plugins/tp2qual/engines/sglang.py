"""SGLang: what the suite knows about it, and where each fact came from.

No SGLang serve runs here (it needs a GPU): every fact is read in the source of the campaign's
SGLang 0.5.23 (its PyPI wheel, paths under ``sglang/``), or quoted from a public report where
the source does not show it; ``sources`` says which.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tp2qual.engines.engine import (
    OBJECT_ERROR,
    OPENAI_ERROR,
    Engine,
    KernelLine,
    KvCapacity,
    OverLength,
)

# The engine's two over-length messages (0.5.23): the declared-context check and the KV-pool
# admission check; the scheduler's comes back after the stream began, as an error chunk.
CONTEXT_MESSAGE = (
    r"The input \(\d+ tokens\) is longer than the model's context length \(\d+ tokens\)"
)
ADMISSION_MESSAGE = r"Input length \(\d+ tokens\) exceeds the maximum allowed length \(\d+ tokens\)"
TOTAL_MESSAGE = r"Requested token count exceeds the model's maximum context length of \d+ tokens"


def _max_total_num_tokens(body: Any) -> int | None:
    value = body.get("max_total_num_tokens") if isinstance(body, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _resolved(kind: str, name: str) -> KernelLine:
    """One field of the ``server_args={…}`` line: the resolved settings' dict, printed once the
    arguments are resolved (0.5.23 srt/entrypoints/engine.py:311, ``resolved_dict()``)."""
    return KernelLine(kind, rf"\bserver_args=\{{.*'{name}': '?(?P<value>[^',}}]+)")


# The lines by which SGLang 0.5.23 says which kernels it runs with (read in the wheel, not run).
KERNEL_LINES = (
    _resolved("attention", "attention_backend"),
    _resolved("prefill_attention", "prefill_attention_backend"),
    _resolved("decode_attention", "decode_attention_backend"),
    _resolved("moe", "moe_runner_backend"),
    _resolved("fp4_gemm", "fp4_gemm_runner_backend"),
    _resolved("fp8_gemm", "fp8_gemm_runner_backend"),
    _resolved("custom_all_reduce_disabled", "disable_custom_all_reduce"),
    # srt/arg_groups/model_hook.py:694 "Using X as attention backend for <arch>."
    KernelLine("attention", r"\bUsing (?P<value>\w+) as attention backend for \w+"),
)

# /server_info first; /get_server_info is its deprecated alias (older builds have only it).
_SERVER_INFO = ("/server_info", "/get_server_info")

ENGINE = Engine(
    kind="sglang",
    admission=(
        "--max-running-requests",
        "SGLang 0.5.23 leaves max_running_requests unset (arg_groups/fields/schedule.py) and "
        "sizes it from memory, 2048 to 4096 requests (model_executor/pool_configurator.py "
        "_resolve_max_running_requests_per_worker)",
    ),
    entry_modules=("sglang.launch_server",),
    entry_script=("sglang", "serve"),
    title="SGLang",
    neutral_sampling={"top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0},
    identity_paths=_SERVER_INFO,
    metrics_path="/metrics",
    histograms={
        "ttft_s": ("sglang:time_to_first_token_seconds",),
        "itl_s": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        "e2e_s": ("sglang:e2e_request_latency_seconds",),
    },
    kv_capacity=KvCapacity("max_total_num_tokens", _SERVER_INFO, _max_total_num_tokens),
    tool_finish={},  # named and required both end "tool_calls", the default
    over_length=OverLength(
        plain="HTTP 400, top-level {object: error} body",
        streamed=(
            "HTTP 400 when the tokenizer's context check trips before the stream starts; "
            "HTTP 200 with the error as the stream's first chunk when the scheduler's "
            "admission check trips (and in builds without the pre-stream check)"
        ),
        rejects_in_stream=True,
        messages=(CONTEXT_MESSAGE, ADMISSION_MESSAGE, TOTAL_MESSAGE),
        in_stream_note="SGLang's way when its scheduler refuses it: sgl-project/sglang#12081",
    ),
    envelopes=(OBJECT_ERROR, OPENAI_ERROR),
    env_prefix="SGLANG_",
    kernel_lines=KERNEL_LINES,
    backend_flags={
        "--attention-backend": "attention",
        "--moe-runner-backend": "moe",
        "--fp4-gemm-backend": "fp4_gemm",
    },
    sources={
        "kernel_lines": (
            "0.5.23 srt/entrypoints/engine.py:311 logger.info(f'server_args={…}') of "
            "server_args.resolved_dict() (srt/server_args.py:316): the resolved "
            "attention_backend, prefill/decode_attention_backend, moe_runner_backend, "
            "fp4/fp8_gemm_runner_backend, disable_custom_all_reduce; srt/arg_groups/"
            "model_hook.py:694 'Using X as attention backend for <arch>.'"
        ),
        "backend_flags": (
            "0.5.23 srt/arg_groups/fields/exec_.py: --attention-backend, --moe-runner-backend, "
            "--fp4-gemm-backend (cli_name of fp4_gemm_runner_backend)"
        ),
        "neutral_sampling": (
            "0.5.23 srt/entrypoints/openai/protocol.py ChatCompletionRequest top_p/top_k/min_p/"
            "repetition_penalty; unset, SGLang applies the model's generation_config.json"
        ),
        "identity_paths": (
            "0.5.23 srt/entrypoints/http_server.py: /server_info (version, server args, "
            "max_total_num_tokens); /get_server_info its deprecated alias"
        ),
        "histograms": (
            "0.5.23 srt/observability/metrics_collector.py (--enable-metrics, GET /metrics); "
            "time_per_output_token_seconds: the inter-token histogram's older name"
        ),
        "kv_capacity": "0.5.23 /server_info max_total_num_tokens",
        "tool_finish": (
            "0.5.23 srt/entrypoints/openai/serving_chat.py: a call that stopped naturally "
            "ends 'tool_calls' whatever the tool_choice, named and required included"
        ),
        "over_length": (
            "0.5.23 srt/managers/tokenizer_manager.py _validate_one_request ('The input (N "
            "tokens) is longer than the model's context length (M tokens).', raised before the "
            "stream: serving_chat.py _handle_streaming_request kick-starts the generator and "
            "answers HTTP 400); srt/managers/utils.py validate_input_length ('Input length (N "
            "tokens) exceeds the maximum allowed length (M tokens). Use a shorter input or "
            "enable --allow-auto-truncate.'), an abort with status 400 from the scheduler: "
            "serving_chat.py _generate_chat_stream yields it as the first chunk of an HTTP "
            "200 stream; reported as sgl-project/sglang#12081 (open), #22785; both messages "
            "quoted from v0.5.15-0.5.17 by NVIDIA-NeMo/Switchyard PR #426"
        ),
        "envelopes": (
            "0.5.23 srt/entrypoints/openai/protocol.py ErrorResponse (object 'error', message, "
            "type, param, code): non-streamed, the whole body (serving_base.py "
            "create_error_response); streamed, under 'error' (create_streaming_error_response, "
            "type = the HTTPStatus name, e.g. 'BAD_REQUEST', code 400); the top-level form is "
            "also what Switchyard PR #426 quotes"
        ),
        "env_prefix": "SGLANG_*: every SGLANG_ name in the 0.5.23 wheel (engine_env.json)",
    },
)
