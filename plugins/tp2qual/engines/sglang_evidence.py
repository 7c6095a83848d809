"""Which SGLang facts a real SGLang answer holds, and which are source only, and why.

Issue 38's "done when": each SGLang-specific rule in the gates and in the diagnosis has a test
on a real SGLang capture, or is listed as source only with the reason. One row per fact of
``engines/sglang.py`` (an ``Engine`` field or ``sources`` key), per diagnosis rule SGLang's logs
feed (``diagnosis:<rule>``, or a reading the diagnosis makes of SGLang's lines) and per SGLang
fact kept outside the engine module (``<module>:<name>``). The captures are the suite's own
SGLang 0.5.23 serve on the CPU (``plugins/tests/data/sglang-0.5.23/``, README there) and real
SGLang logs of the start-up corpus (``plugins/tests/data/diagnosis/startup/``, each with its
source). ``plugins/tests/test_engine_evidence.py`` holds every row to a capture and a test that
exists, or to a reason, and ``docs/sglang.md`` shows the table.
"""

from __future__ import annotations

from tp2qual.engines.engine import Evidence

_DATA = "plugins/tests/data/sglang-0.5.23/"
_CORPUS = "plugins/tests/data/diagnosis/startup/"
_REC = "plugins/tests/test_sglang_recorded.py::"
_STARTUP = "plugins/tests/test_startup_corpus.py::"
_CAUSE = _STARTUP + "test_startup_log_gets_the_cause_its_source_established"
_REMEDY = _STARTUP + "test_remedy_never_asks_for_what_is_already_set"
_GPU = "GPU-only"

FACTS = (
    Evidence(
        "log_lines",
        (_DATA + "qualification-tp2-server.log",),
        (
            _REC + "test_gate_01_reads_sglangs_own_rank_lines",
            _REC + "test_a_rank_that_never_ended_its_parallel_init_fails_gate_01",
            _REC + "test_a_world_of_the_wrong_size_fails_gate_01",
        ),
        note="the CPU lines (init_threads_binding); no line names the backend, and the verdict "
        "says so",
    ),
    Evidence(
        "reread_shift",
        (_DATA + "echo-logprobs.json",),
        (_REC + "test_echo_rows_hold_their_own_logprob",),
        note="the first row null and text_offset -1 throughout, which the source did not show",
    ),
    Evidence(
        "kernel_lines",
        (_DATA + "qualification-tp1-server.log",),
        (_REC + "test_the_server_args_line_names_the_kernels",),
        note="the server_args={…} line only; 'Using X as attention backend for <arch>.' "
        "(model_hook.py:694) is printed for models with an override, not SmolLM2: source only",
    ),
    Evidence(
        "backend_flags",
        (_DATA + "qualification-tp1-server.log",),
        (_REC + "test_the_server_args_line_names_the_kernels",),
        note="--attention-backend torch_native, as asked; --moe-runner-backend and "
        "--fp4-gemm-backend are GPU kernels: source only",
    ),
    Evidence(
        "neutral_sampling",
        (_DATA + "chat.json",),
        (_REC + "test_the_neutral_sampling_names_are_sglangs",),
        note="top_p, top_k and repetition_penalty accepted (HTTP 200); min_p was not sent in "
        "any capture: source only",
    ),
    Evidence(
        "identity_paths",
        (_DATA + "server-info.json",),
        (_REC + "test_server_info_gives_the_kv_pool_and_version",),
        note="/server_info; its deprecated alias /get_server_info: source only",
    ),
    Evidence(
        "metrics_path",
        (_DATA + "metrics-histograms.txt",),
        (_REC + "test_metrics_carry_the_histograms_the_throughput_gate_reads",),
    ),
    Evidence(
        "histograms",
        (_DATA + "metrics-histograms.txt",),
        (_REC + "test_metrics_carry_the_histograms_the_throughput_gate_reads",),
    ),
    Evidence(
        "kv_capacity",
        (_DATA + "server-info.json",),
        (_REC + "test_server_info_gives_the_kv_pool_and_version",),
    ),
    Evidence(
        "tool_finish",
        (_DATA + "tool-named*.json", _DATA + "tool-required*.json"),
        (
            _REC + "test_tool_calls_pass_under_the_engine_rule",
            _REC + "test_a_named_call_that_ended_stop_would_fail_on_sglang",
        ),
        note="named and required end 'tool_calls' as read; the real answer added two things "
        "the source reading missed: arguments left free without SGLANG_TOOL_STRICT_LEVEL=2 "
        "(strict-off-tool-*.json, the candidate sets it), and streamed text after the call "
        "as content deltas",
    ),
    Evidence(
        "over_length",
        (_DATA + "over-bound*.json", _DATA + "over-pool*.json"),
        (
            _REC + "test_over_the_context_length_is_a_plain_400_streamed_or_not",
            _REC + "test_over_the_kv_pool_is_refused_inside_an_http_200_stream",
        ),
        note="the TOTAL_MESSAGE form ('Requested token count exceeds…') was not provoked: "
        "source only",
    ),
    Evidence(
        "envelopes",
        (_DATA + "over-bound.json", _DATA + "over-pool-stream.json"),
        (
            _REC + "test_over_the_context_length_is_a_plain_400_streamed_or_not",
            _REC + "test_over_the_kv_pool_is_refused_inside_an_http_200_stream",
        ),
    ),
    Evidence(
        "env_prefix",
        (_DATA + "qualification-tp2-server.log",),
        (_REC + "test_pynccl_stays_off_on_the_tp2_serve",),
        note="an SGLANG_ variable read by the ranks (SGLANG_NCCL_SO_PATH); the whole name list "
        "is the wheel's (engine_env.json)",
    ),
    Evidence(
        "admission",
        (_DATA + "server-info.json",),
        (_REC + "test_server_info_echoes_the_launch_the_suite_set",),
        note="--max-running-requests 1 taken as set; the default's sizing from GPU memory "
        "(pool_configurator.py): source only",
    ),
    Evidence(
        "entry_modules",
        (_DATA + "qualification-tp1-server.log",),
        (_REC + "test_server_info_echoes_the_launch_the_suite_set",),
        note="python -m sglang.launch_server serves, with a warning that 'sglang serve' is "
        "the recommended entrypoint",
    ),
    Evidence(
        "entry_script",
        source_only="the candidates launch with -m sglang.launch_server; no capture starts "
        "'sglang serve' (0.5.23's own warning recommends it: qualification-tp1-server.log "
        "line 1)",
    ),
    Evidence(
        "kv_unnamed",
        source_only=f"{_GPU}: the backend picked per model and compute capability "
        "(model_overrides/); the CPU serve names torch_native",
    ),
    Evidence(
        "kv_support",
        source_only=f"{_GPU}: fa4/triton against CUDA compute capabilities and fp8/mxfp8 "
        "caches; no GPU here",
    ),
    Evidence(
        "controls",
        source_only=f"{_GPU}: radix cache, CUDA graphs, custom all-reduce, KV dtype, chunked "
        "prefill and page size are compared across candidate files by --plan, not read "
        "from an answer; the CPU serve turns CUDA graphs off itself ('Cuda graph is "
        "disabled because of using torch native attention backend')",
    ),
    Evidence(
        "memory",
        source_only=f"{_GPU}: --mem-fraction-static's default is computed from GPU memory "
        "(memory_hook.py:290-327); the CPU serve's pool is --max-total-tokens",
    ),
    # --- the diagnosis --------------------------------------------------------------------
    Evidence(
        "diagnosis:pynccl_on_cpu",
        (_DATA + "failed-start-tp2-pynccl.log", _CORPUS + "sglang-cpu/pynccl-tp2.log"),
        (
            _REC + "test_a_failed_tp2_start_is_diagnosed_as_pynccl_on_the_cpu",
            _REC + "test_the_tp2_candidate_sets_what_the_pynccl_remedy_asks_for",
            _CAUSE,
            _REMEDY,
        ),
        note="the suite's own failed TP2 start; before the rule it was 'cause not recognised'",
    ),
    Evidence(
        "diagnosis:rank prefixes, ERROR level and time stamps",
        (_DATA + "failed-start-tp2-pynccl.log",),
        (_REC + "test_the_diagnosis_reads_sglangs_rank_prefixes_and_stamps",),
        note="'[<time> TP<r>]' names the rank, 'Scheduler hit an exception' is an error line, "
        "the ISO stamp orders them (failure.py)",
    ),
    Evidence(
        "diagnosis:scheduler_<i> rank label",
        source_only="SGLang's subprocess watchdog names its schedulers scheduler_<i> "
        "(0.5.23 srt/entrypoints/engine.py:1312); it speaks only when a scheduler dies "
        "after the start, which no capture shows",
    ),
    Evidence(
        "diagnosis:server_args (engine_args.py)",
        (_DATA + "qualification-tp1-server.log", _DATA + "failed-start-tp2-pynccl.log"),
        (_REC + "test_the_resolved_server_args_are_not_read_as_the_candidates_settings",),
        note="differs from the reading: 0.5.23 prints server_args={…}, every resolved "
        "setting with its defaults, not server_args=ServerArgs(…); it is not read as what "
        "the candidate set (a remedy would call a default 'already set'), and the "
        "candidate's command, passed in, gives the settings. No version line either: "
        "the diagnosis names no SGLang version from a 0.5.23 log",
    ),
    Evidence(
        "diagnosis:custom_allreduce_peer",
        (_CORPUS + "sglang-4814-custom-ar-peer.log",),
        (_CAUSE, _REMEDY),
        note=f"{_GPU}: a real SGLang TP2 log from sgl-project/sglang#4814 (RTX 4090), "
        "not the suite's own capture: custom all-reduce is CUDA IPC",
    ),
    Evidence(
        "diagnosis:symm_mem_sigfpe",
        (_CORPUS + "anvil-deepseek-wsl2-symm-mem-sigfpe.log",),
        (_CAUSE, _REMEDY),
        note=f"{_GPU}: the user's real SGLang TP2 record under WSL2 (fakoli/anvil-serving); "
        "multimem all-gather",
    ),
    Evidence(
        "diagnosis:helion_config_missing",
        (_CORPUS + "anvil-inkling-sm120-helion-config.log",),
        (_CAUSE,),
        note=f"{_GPU}: the user's real SGLang record on SM120 (fakoli/anvil-serving)",
    ),
    Evidence(
        "diagnosis:shared_memory_per_block",
        (
            _CORPUS + "sglang-8513-triton-smem.log",
            _CORPUS + "anvil-inkling-sm120-grouped-gemm-smem.log",
        ),
        (_CAUSE,),
        note=f"{_GPU}: real SGLang logs (sgl-project/sglang#8513, the user's SM120 record); "
        "the rule is not SGLang's alone",
    ),
    Evidence(
        "diagnosis:SGLang's flags in remedies",
        source_only=f"{_GPU}: --mem-fraction-static (capacity.py, memory.py) and "
        "--attention-backend triton for an unsupported GPU (kernels.py) answer GPU memory "
        "and compute-capability failures; the CPU serve has neither",
    ),
    # --- SGLang facts kept outside the engine module --------------------------------------
    Evidence(
        "rehearsal:CHUNK_FLAG",
        source_only=f"{_GPU}: --chunked-prefill-size bounds the echo's logits memory on a GPU "
        "(an estimate carried over from vLLM's, issue 35); the CPU serve's echo is 5 tokens",
    ),
    Evidence(
        "engine_check:SGLang's own argument parser",
        ("plugins/tp2qual/engines/recorded_answers.json",),
        (
            "plugins/tests/test_campaign_engine_check.py::"
            "test_each_campaign_launch_is_accepted_by_its_engines_own_parser",
            "plugins/tests/test_campaign_engine_check.py::"
            "test_sglang_refuses_the_tp_abbreviation_and_takes_the_full_names",
        ),
        note="0.5.23's ServerArgs parser and parser registries, run in its parser venv on each "
        "campaign launch (slow tier); the DeepSeek-V4 and Inkling parser names are taken by "
        "the registry there, never run on their models",
    ),
    Evidence(
        "engine_env:an unknown SGLANG_ name is ignored",
        source_only="no capture sets an SGLANG_ name the 0.5.23 wheel lacks; SGLang reads its "
        "variables by name (srt/environ.py Envs, os.environ elsewhere) and says nothing of the "
        "others",
    ),
    Evidence(
        "variables:paths aside from the server",
        source_only="which of the wheel's files the server never runs (multimodal_gen/, "
        "tests) is read in the wheel; a capture shows what ran, not what never does",
    ),
    Evidence(
        "control:reasoning parsers",
        source_only="no reasoning parser on the SmolLM2 serve: qwen3's split (the whole "
        "answer in reasoning_content unless enable_thinking is false) was seen by hand "
        "(issue 38) and not recorded; inkling's (ignores enable_thinking) and the "
        "DeepSeek-V4 parsers need those models' tokenizers",
    ),
)
