"""SGLang: what the suite knows about it, and where each fact came from.

Every fact is read in the source of the campaign's SGLang 0.5.23 (its PyPI wheel, paths under
``sglang/``), or quoted from a public report where the source does not show it; ``sources`` says
which. Since 2026-12-05 the same SGLang also serves SmolLM2 on the CPU (``smollm2-135m-sglang``,
``scripts/install.sh sglang``), and where a fact was seen in a real answer, its source names the
capture in ``plugins/tests/data/sglang-0.5.23/`` (``CAPTURES``) as well, held by
``plugins/tests/test_sglang_recorded.py``. A fact on a GPU-only path (CUDA graphs, the fa4/triton
backends, NCCL) stays source only. Which is which, fact by fact and for the diagnosis's SGLang
rules: ``engines/sglang_evidence.py`` (``ENGINE.evidence``; table in ``docs/sglang.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tp2qual.engines.engine import (
    OBJECT_ERROR,
    OPENAI_ERROR,
    Control,
    Engine,
    KernelLine,
    KvCapacity,
    KvSupport,
    MemoryRule,
    OverLength,
)
from tp2qual.engines.sglang_evidence import FACTS

CAPTURES = "plugins/tests/data/sglang-0.5.23"  # real SGLang 0.5.23 answers (CPU), README there

# The engine's two over-length messages (0.5.23): the declared-context check and the KV-pool
# admission check; the scheduler's comes back after the stream began, as an error chunk.
CONTEXT_MESSAGE = (
    r"The input \(\d+ tokens\) is longer than the model's context length \(\d+ tokens\)"
)
ADMISSION_MESSAGE = r"Input length \(\d+ tokens\) exceeds the maximum allowed length \(\d+ tokens\)"
TOTAL_MESSAGE = r"Requested token count exceeds the model's maximum context length of \d+ tokens"


# A TP rank's own lines on the CPU (0.5.23), each prefixed "[<time> TP<r>]" by its scheduler
# process (srt/managers/scheduler.py: " TP<r>" when tp_size > 1, " EP<e>" after it when ep_size >
# 1): the thread binding as the rank begins (srt/utils/numa_utils.py init_threads_binding, called
# by srt/distributed/bootstrap.py before the groups), and "Init parallel ends." once its groups
# exist (bootstrap.py init_parallel_runtime). Neither names the backend (gloo for --device cpu,
# _resolve_backend) and the second names no world size. Seen: qualification-tp2-server.log.
_RANK = r"\bTP(?P<rank>\d+)(?: EP\d+)?\] "
RANK_STARTS = _RANK + r"init_threads_binding: numa_index=\d+, world_size=(?P<world>\d+), "
GROUP_FORMED = _RANK + r"Init parallel ends\b"
WORKER_NAMED_ANY = r"\bTP(?P<tp>\d+)(?: EP\d+)?\] Init parallel ends\b"


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

# Which attention backend serves which KV-cache dtype where, read in the 0.5.23 wheel (paths
# under sglang/; kernels/ops/attention/ is KOA). Only the backends read are here: another one is
# "not in the table", never judged. An mxfp8 cache is served by fa4 alone: the FA backend raises
# "MXFP8 KV cache requires the FA4 backend." for fa3 (srt/layers/attention/
# flashattention_backend.py:451-454), no other backend reads its scale buffers
# (kv_cache_is_mxfp8 occurs only there), and triton's forward_extend/forward_decode take no
# q_descale (triton_backend.py:1669-1680, 2288-2299), which Inkling passes with an mxfp8 cache
# (models/inkling_common/attn.py:886-903). The launch check lets mxfp8 through on every
# Blackwell, SM 12.x included (srt/arg_groups/kv_cache_hook.py:100-109; is_blackwell is majors
# 10, 11 and 12, srt/utils/common.py:297-302), so on SM 12.x the server starts and fails at the
# first attention forward: refused here before it starts.
_ANY: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (99, 99))
KV_SUPPORT = (
    KvSupport(
        "triton",
        frozenset({"auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2"}),
        *_ANY,
        "0.5.23 srt/layers/attention/triton_backend.py: no compute-capability check; an fp8 "
        "cache written with layer.k_scale (:1721-1741); mem_cache/kv_cache_dtype.py:60-73",
    ),
    KvSupport(
        "fa4",
        frozenset({"auto", "bf16", "bfloat16"}),
        (8, 0),
        (12, 9),
        "0.5.23 KOA/flash_attn/cute/interface.py:621 (SM 8.x-11.x, and SM 12.x through the "
        "forward host of KOA/fa4_sm120/dispatch.py:12-20, loaded by srt/layers/attention/"
        "flashattention_backend.py:290-300); the SM120 kernel takes fp16/bf16 only "
        "(KOA/fa4_sm120/flash_fwd.py:818, runtime.py:949-963)",
    ),
    KvSupport(
        "fa4",
        frozenset({"fp8_e4m3", "fp8_e5m2", "mxfp8"}),
        (10, 0),
        (10, 9),
        "0.5.23 KOA/flash_attn/cute/interface.py:645 (an fp8 V is FP8) and :728-731 (assert "
        "arch // 10 == 10, 'FP8 is only supported on SM100 (compute capability 10.x) for FA4 "
        "CuTe'); mxfp8 is stored as float8_e4m3fn (srt/mem_cache/kv_cache_dtype.py:72-73)",
    ),
)

# The baseline controls --plan compares across the SGLang candidates (0.5.23 flags).
CONTROLS = (
    Control("radix (prefix) cache", off=("--disable-radix-cache",)),
    Control("CUDA graphs", off=("--disable-cuda-graph",)),
    Control("prefill CUDA graphs", off=("--disable-prefill-cuda-graph", "--disable-cuda-graph")),
    Control("custom all-reduce", off=("--disable-custom-all-reduce",)),
    Control("KV-cache dtype", valued="--kv-cache-dtype"),
    Control("chunked-prefill size", valued="--chunked-prefill-size"),
    Control("page size", valued="--page-size"),
)
# SGLang's own default --mem-fraction-static keeps at least 10 GiB of a GPU over 60 GiB out of
# the static pool, for activations, CUDA graphs and the rest (0.5.23 srt/arg_groups/
# memory_hook.py:314-315; its estimate, :305-313, is activations x 1.5 MiB/token + TP slack +
# graph buffers, floored there).
_FLOOR_GIB, _OVER_GIB = 10.0, 60.0
MEMORY = MemoryRule(
    "--mem-fraction-static",
    "computed from the GPU's memory (srt/arg_groups/memory_hook.py:290-327)",
    lambda gpu_gib: _FLOOR_GIB if gpu_gib > _OVER_GIB else 0.0,
    "the least SGLang 0.5.23's own default keeps out of the static pool: 10 GiB on a GPU of "
    "more than 60 GiB (srt/arg_groups/memory_hook.py:314-315)",
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
    kv_default="auto",
    kv_unnamed=(
        "SGLang 0.5.23 picks the backend per model when none is named (srt/arg_groups/"
        "model_overrides/; Inkling: fa4 on SM 9.0/10.x, triton elsewhere, inkling.py:68-73)"
    ),
    kv_support=KV_SUPPORT,
    controls=CONTROLS,
    memory=MEMORY,
    kernel_lines=KERNEL_LINES,
    backend_flags={
        "--attention-backend": "attention",
        "--moe-runner-backend": "moe",
        "--fp4-gemm-backend": "fp4_gemm",
    },
    reread_shift=0,
    log_lines={
        "rank_starts": RANK_STARTS,
        "rank_starts_short": RANK_STARTS,
        "group_formed": GROUP_FORMED,
        "worker_named_any": WORKER_NAMED_ANY,
    },
    sources={
        "log_lines": (
            "0.5.23 srt/utils/numa_utils.py init_threads_binding ('init_threads_binding: "
            "numa_index=N, world_size=W, local_omp_cpuid=C', on --device cpu), srt/distributed/"
            "bootstrap.py:190 'Init parallel ends. elapsed=…', each under its scheduler's "
            "' TP<r>' prefix (srt/managers/scheduler.py:6288-6289); seen: "
            f"{CAPTURES}/qualification-tp2-server.log"
        ),
        "reread_shift": (
            "0.5.23 srt/entrypoints/openai/serving_completions.py:88-90: echo with logprobs sets "
            "logprob_start_len = 0, so input_token_logprobs give every prompt token's own "
            f"logprob at its row; seen: {CAPTURES}/echo-logprobs.json (the first row null, "
            "text_offset -1 throughout)"
        ),
        "kernel_lines": (
            "0.5.23 srt/entrypoints/engine.py:311 logger.info(f'server_args={…}') of "
            "server_args.resolved_dict() (srt/server_args.py:316): the resolved "
            "attention_backend, prefill/decode_attention_backend, moe_runner_backend, "
            "fp4/fp8_gemm_runner_backend, disable_custom_all_reduce; srt/arg_groups/"
            "model_hook.py:694 'Using X as attention backend for <arch>.'; seen (the "
            f"server_args line): {CAPTURES}/qualification-tp1-server.log"
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
            "max_total_num_tokens); /get_server_info its deprecated alias; seen: "
            f"{CAPTURES}/server-info.json"
        ),
        "histograms": (
            "0.5.23 srt/observability/metrics_collector.py (--enable-metrics, GET /metrics); "
            "time_per_output_token_seconds: the inter-token histogram's older name; seen: "
            f"{CAPTURES}/metrics-histograms.txt"
        ),
        "kv_capacity": (
            f"0.5.23 /server_info max_total_num_tokens; seen: {CAPTURES}/server-info.json"
        ),
        "tool_finish": (
            "0.5.23 srt/entrypoints/openai/serving_chat.py: a call that stopped naturally "
            "ends 'tool_calls' whatever the tool_choice, named and required included; seen: "
            f"{CAPTURES}/tool-named*.json, tool-required*.json"
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
            "quoted from v0.5.15-0.5.17 by NVIDIA-NeMo/Switchyard PR #426; seen: "
            f"{CAPTURES}/over-bound*.json (the context check: HTTP 400 streamed or not), "
            "over-pool*.json (the scheduler's: HTTP 400, and streamed an error chunk in an "
            "HTTP 200 stream, then a usage chunk with no choices)"
        ),
        "envelopes": (
            "0.5.23 srt/entrypoints/openai/protocol.py ErrorResponse (object 'error', message, "
            "type, param, code): non-streamed, the whole body (serving_base.py "
            "create_error_response); streamed, under 'error' (create_streaming_error_response, "
            "type = the HTTPStatus name, e.g. 'BAD_REQUEST', code 400); the top-level form is "
            "also what Switchyard PR #426 quotes; seen: both, "
            f"{CAPTURES}/over-bound.json, over-pool-stream.json"
        ),
        "env_prefix": "SGLANG_*: every SGLANG_ name in the 0.5.23 wheel (engine_env.json)",
    },
    evidence=FACTS,  # each fact: the capture and test that hold it, or why source only
)
