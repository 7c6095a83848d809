"""Start-up failures on real logs: public issue-thread excerpts, the user's own records from
fakoli/anvil-serving, and torch failures provoked on an H200 (data/diagnosis/startup/README.md
lists each source). No failed start is "ok": each gets the cause its source established, or
"failed, cause not recognised" with its earliest error. Remedies never ask for what is set."""

from __future__ import annotations

from pathlib import Path

import pytest

from tp2qual.candidate import load_candidate
from tp2qual.checks.diagnosis import context, diagnose
from tp2qual.checks.diagnosis.failure import earliest, error_lines
from tp2qual.serving.diagnose import diagnose_log, settings_in_force

STARTUP = Path(__file__).parent / "data" / "diagnosis" / "startup"
CANDIDATES = Path(__file__).resolve().parents[2] / "candidates"

# file -> (first failure rule, text the cause must carry)
CAUSES: dict[str, tuple[str, str]] = {
    "vllm-14452-sm120-no-kernel-image.log": ("arch_unsupported", "no image"),
    "sdwebui-nix-9-torch-without-sm120.log": ("arch_unsupported", "(sm_120); it supports sm_50"),
    "gpustack-1382-llamabox-no-kernel-image.log": ("arch_unsupported", "no image"),
    "flash-attention-1481-fa3-arch.log": ("arch_unsupported", "FlashAttention"),
    "sglang-8513-triton-smem.log": ("shared_memory_per_block", "147,456 bytes"),
    "freetoken-246-triton-smem-turing.log": ("shared_memory_per_block", "Turing"),
    "anvil-inkling-sm120-grouped-gemm-smem.log": ("shared_memory_per_block", "RTX PRO 6000"),
    "triton-8539-ptxas-sm121a.log": ("ptxas_compile", "'sm_121a'"),
    "fish-speech-907-ptxas-sm120.log": ("ptxas_compile", "'sm_120'"),
    "vllm-10517-max-seq-len-kv.log": ("kv_cache_short", "holds 23,648 tokens"),
    "bonito-7-max-seq-len-kv.log": ("kv_cache_short", "max_model_len 32,768"),
    "vllm-49064-mamba-blocks-h100.log": ("mamba_cache_blocks", "1024 against 969"),
    "vllm-38632-mamba-blocks-worker.log": ("mamba_cache_blocks", "1024 against 600"),
    "retail-assistant-95-nemotron-mamba-blocks.log": ("mamba_cache_blocks", "1024 against 524"),
    "vllm-1919-unknown-quant.log": ("unknown_quantization", "'gptq'"),
    "modelopt-261-empty-quant-method.log": ("unknown_quantization", "names no method"),
    "vllm-recipes-51-tool-parser.log": ("unknown_tool_call_parser", "'openai'"),
    "vllm-9312-tool-parser-choice.log": ("unknown_tool_call_parser", "'llama3_json'"),
    "glm45-16-tool-parser-choice.log": ("unknown_tool_call_parser", "--tool-call-parser glm45"),
    "vllm-9515-arch-not-supported.log": ("unknown_architecture", "LlamaForCausalLM"),
    "vllm-9624-arch-inspect-failed.log": ("unknown_architecture", "importing it failed"),
    "fsdrive-21-heads-not-divisible.log": (
        "tp_indivisible",
        "(12) does not split evenly across TP 8",
    ),
    "adaptthink-1-heads-not-divisible.log": ("tp_indivisible", "(28)"),
    "anvil-qwen35-gpu-uuid-attempt1.log": ("gpu_uuid_as_index", "by UUID"),
    "vllm-3329-no-weights.log": ("model_files_missing", "lacks files"),
    "anvil-inkling-modelopt-accelerate.log": ("missing_dependency", "'accelerate'"),
    "vllm-7077-fork-after-cuda.log": ("fork_after_cuda", "forked"),
    "pytorch-145170-fork-after-cuda-2ranks.log": ("fork_after_cuda", "forked"),
    "h200/fork-after-cuda-2rank.log": ("fork_after_cuda", "forked"),
    "vllm-1091-ray-sigbus.log": ("shm_sigbus", "SIGBUS"),
    "vllm-859-sigbus.log": ("shm_sigbus", "SIGBUS"),
    "anvil-deepseek-256k-stale-shm.log": ("stale_shm_mapping", "earlier run"),
    "sglang-4814-custom-ar-peer.log": ("custom_allreduce_peer", "peer access"),
    "anvil-deepseek-wsl2-symm-mem-sigfpe.log": ("symm_mem_sigfpe", "SIGFPE"),
    "anvil-inkling-sm120-helion-config.log": ("helion_config_missing", "silu_and_mul"),
    "anvil-deepseek-r16-kv-offload-illegal-access.log": ("illegal_memory_access", "illegal"),
    "h200/illegal-access.log": ("illegal_memory_access", "illegal"),
    "trtllm-7818-weights-oom-rank7.log": ("oom_weights", "40.62 MiB free of 22.07 GiB"),
    "vllm-2140-torch-oom.log": ("oom", "ran out of memory"),
    "vllm-cpu/reasoning.log": ("unknown_reasoning_parser", "'bogus_reasoner'"),
    "vllm-cpu/tool.log": ("unknown_tool_call_parser", "engine version 0.32.0"),
    "vllm-cpu/kv-budget.log": ("oom_kv_cache", "printed: Explicitly set (0.0/23.54) GiB"),
    "vllm-cpu/kv-short.log": ("kv_cache_short", "holds 1,920 tokens (0.18 GiB needed, 0.04 GiB"),
    "vllm-cpu/tp2-heads.log": ("tp_indivisible", "heads (9) does not split evenly across TP 2"),
    "llamacpp/bad-gguf.log": ("model_file_corrupt", "not a readable GGUF"),
    "llamacpp/trunc-gguf.log": ("model_file_corrupt", "not a readable GGUF"),
    "sglang-cpu/pynccl-tp2.log": ("pynccl_on_cpu", "PyNccl communicator for CPU ranks"),
}

# Logs whose thread never established the cause (or whose excerpt stops before it): the engine
# must say so and quote the earliest error, never a cause of another kind.
# file -> (line number of the earliest error, its rank or None, text of that line)
UNRECOGNISED: dict[str, tuple[int, str | None, str]] = {
    "gpustack-2097-engine-core-cut.log": (4, None, "EngineCore failed to start"),
    "vllm-21713-worker-failed-cut.log": (2, "rank 3", "Traceback"),
    "vllm-22906-nvfp4-traceback-cut.log": (3, "APIServer pid 15764", "Traceback"),
    "vllm-9377-arch-import-error.log": (1, None, "ImportError"),
}


def test_every_real_startup_log_is_covered_and_none_is_ok():
    logs = {str(p.relative_to(STARTUP)) for p in STARTUP.rglob("*.log")}
    assert logs == set(CAUSES) | set(UNRECOGNISED)
    for name in sorted(logs):
        result = diagnose((STARTUP / name).read_text(), tp=2)
        assert result.verdict == "failed", (name, result.summary())


@pytest.mark.parametrize("name", sorted(CAUSES))
def test_startup_log_gets_the_cause_its_source_established(name):
    rule, cause = CAUSES[name]
    result = diagnose((STARTUP / name).read_text())
    first = result.failures[0]
    assert first.rule == rule, result.summary()
    assert cause in first.cause, first.cause
    assert first.evidence and all(n > 0 for n, _ in first.evidence)
    assert first.remedy and result.headline() == "failed"


@pytest.mark.parametrize("name", sorted(UNRECOGNISED))
def test_unestablished_cause_is_not_invented(name):
    no, rank, text = UNRECOGNISED[name]
    result = diagnose((STARTUP / name).read_text())
    assert result.headline() == "failed, cause not recognised"
    first = result.failures[0]
    assert first.rule == "unrecognised_failure" and len(result.failures) == 1, result.summary()
    assert first.evidence[0][0] == no and text in first.evidence[0][1]
    assert f"line {no}" + (f" ({rank})" if rank else "") in first.cause


def test_earliest_error_leads_across_ranks_on_the_h200_capture():
    """Each rank's own log joined in rank order: rank 1 failed 1.5 s before rank 0, so its
    error, further down the file, leads; rank 0's and the parent's cascade follow."""
    text = (STARTUP / "h200" / "fork-after-cuda-2rank.log").read_text()
    lead, others = earliest(error_lines(context(text)))
    assert lead is not None and lead.rank == "rank 1" and lead.line.no == 17
    assert "Cannot re-initialize CUDA" in lead.line.text
    assert [(e.rank, e.line.no) for e in others] == [("rank 0", 8)]
    assert not any(e.primary for e in error_lines(context(text)) if "Worker proc" in e.line.text)
    evidence = diagnose(text).failures[0].evidence
    assert [n for n, _ in evidence] == [17, 8]


def test_earliest_error_past_the_wrapper_on_a_two_process_log():
    text = (STARTUP / "vllm-7077-fork-after-cuda.log").read_text()
    lead, others = earliest(error_lines(context(text)))
    assert lead is not None and lead.rank == "VllmWorkerProcess pid 13359" and lead.line.no == 4
    assert [e.rank for e in others] == ["VllmWorkerProcess pid 13360"]


def test_unrecognised_names_every_ranks_first_error():
    """The H200 capture with the fork rule's sentence cut: only the generic verdict is left."""
    text = (STARTUP / "h200" / "fork-after-cuda-2rank.log").read_text()
    text = text.replace("Cannot re-initialize CUDA in forked subprocess", "something odd")
    first = diagnose(text).failures[0]
    assert first.rule == "unrecognised_failure"
    assert first.cause.startswith("failed, cause not recognised: the earliest error is line 17")
    assert "(rank 1)" in first.cause and "line 8 (rank 0)" in first.cause


def test_a_failed_process_with_a_quiet_log_is_not_ok():
    result = diagnose("INFO starting\nINFO loading weights\n", failed=True)
    assert result.headline() == "failed, cause not recognised"
    assert result.failures[0].evidence == ((2, "INFO loading weights"),)
    assert diagnose("INFO starting\nINFO loading weights\n").verdict == "ok"


def test_engine_version_and_the_flag_are_named_with_an_unknown_name():
    result = diagnose((STARTUP / "vllm-cpu" / "reasoning.log").read_text())
    cause = result.failures[0].cause
    assert "engine version 0.32.0" in cause
    assert "--reasoning-parser bogus_reasoner (log line 12)" in cause


# --- remedies against the candidate's settings: each rule's remedy, set and not set ------------

# file -> (diagnose kwargs with the setting in force, rule, remedy must carry, must not carry)
ALREADY_SET: dict[str, tuple[dict, str, str, str]] = {
    "vllm-10517-max-seq-len-kv.log": (
        {
            "command": [
                "--max-model-len",
                "29000",
                "--gpu-memory-utilization",
                "0.97",
                "--kv-cache-dtype",
                "fp8",
            ]
        },
        "kv_cache_short",
        "lower --max-model-len 29000 (command line) to at most 23,648",
        "fp8 KV cache",
    ),
    "vllm-49064-mamba-blocks-h100.log": (
        {"command": ["--max-num-seqs", "1024"]},
        "mamba_cache_blocks",
        "lower --max-num-seqs 1024 (command line) to at most 969",
        "the default",
    ),
    "vllm-7077-fork-after-cuda.log": (
        {"env": {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}},
        "fork_after_cuda",
        "VLLM_WORKER_MULTIPROC_METHOD=spawn (environment) is already set",
        "start workers with spawn",
    ),
    "sglang-4814-custom-ar-peer.log": (
        {"command": ["--disable-custom-all-reduce"]},
        "custom_allreduce_peer",
        "--disable-custom-all-reduce true (command line) is already set",
        "start with --disable-custom-all-reduce",
    ),
    "triton-8539-ptxas-sm121a.log": (
        {"env": {"TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas"}},
        "ptxas_compile",
        "is already set and that ptxas does not know 'sm_121a' either",
        "point TRITON_PTXAS_PATH at a CUDA toolkit",
    ),
    "h200/illegal-access.log": (
        {"env": {"CUDA_LAUNCH_BLOCKING": "1"}},
        "illegal_memory_access",
        "CUDA_LAUNCH_BLOCKING=1 (environment) is already set",
        "rerun with CUDA_LAUNCH_BLOCKING=1",
    ),
    "vllm-14452-sm120-no-kernel-image.log": (
        {"command": ["--attention-backend", "TRITON_ATTN"]},
        "arch_unsupported",
        "already chosen (--attention-backend TRITON_ATTN (command line))",
        "choose an attention backend this GPU supports",
    ),
    "modelopt-261-empty-quant-method.log": (
        {"command": ["--quantization", "modelopt_fp4"]},
        "unknown_quantization",
        "--quantization modelopt_fp4 (command line) is already set",
        "pass the method explicitly",
    ),
    "vllm-1091-ray-sigbus.log": (
        {"container": {"ipc_host": True}},
        "shm_sigbus",
        "already runs with --ipc=host",
        "run the container with --ipc=host",
    ),
    "sglang-cpu/pynccl-tp2.log": (
        {"env": {"SGLANG_NCCL_SO_PATH": "/usr/lib/x86_64-linux-gnu/libnccl.so.2"}},
        "pynccl_on_cpu",
        "SGLANG_NCCL_SO_PATH=/usr/lib/x86_64-linux-gnu/libnccl.so.2 (environment) is already set",
        "set SGLANG_NCCL_SO_PATH to a path that does not load",
    ),
    "anvil-deepseek-wsl2-symm-mem-sigfpe.log": (
        {"command": ["--enable-torch-symm-mem"], "host": {"wsl2": True}},
        "symm_mem_sigfpe",
        "--enable-torch-symm-mem true (command line) turns on another",
        "@never",
    ),
}


@pytest.mark.parametrize("name", sorted(ALREADY_SET))
def test_remedy_never_asks_for_what_is_already_set(name):
    kwargs, rule, must, must_not = ALREADY_SET[name]
    text = (STARTUP / name).read_text()
    first = diagnose(text, **kwargs).failures[0]
    assert first.rule == rule and must in first.remedy, first.remedy
    assert must_not not in first.remedy
    # The same run without that setting (still a container, still WSL2 where it was one).
    bare = {
        k: {} if k == "container" else v for k, v in kwargs.items() if k in ("container", "host")
    }
    unset = diagnose(text, **bare).failures[0].remedy
    assert must not in unset and (must_not == "@never" or must_not in unset), unset


def test_settings_the_log_states_reach_the_remedy_and_cause():
    budget = diagnose((STARTUP / "vllm-cpu" / "kv-budget.log").read_text()).failures[0]
    assert "(--kv-cache-memory-bytes 1000000 (log line 12)) and holds no block" in budget.remedy
    assert "--gpu-memory-utilization" not in budget.remedy  # the budget, not the share, decides
    short = diagnose((STARTUP / "vllm-cpu" / "kv-short.log").read_text()).failures[0].remedy
    assert short.startswith("lower --max-model-len 8192 (log line 12) to at most 1,920")
    assert "or raise --kv-cache-memory-bytes 50000000 (log line 12)" in short
    assert "--gpu-memory-utilization" not in short
    weights = diagnose((STARTUP / "vllm-3329-no-weights.log").read_text()).failures[0]
    assert "--load-format safe-tensors (log line 1)" in weights.remedy
    uuid_log = (STARTUP / "anvil-qwen35-gpu-uuid-attempt1.log").read_text()
    uuid = diagnose(uuid_log, env={"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}).failures[0]
    assert "(CUDA_VISIBLE_DEVICES=GPU-a,GPU-b (environment))" in uuid.cause
    heads = diagnose((STARTUP / "fsdrive-21-heads-not-divisible.log").read_text(), tp=8)
    assert "(the candidate's TP is 8)" in heads.failures[0].cause
    assert "divides 12 (1, 2, 4)" in heads.failures[0].remedy


def test_out_of_memory_remedies_count_from_the_tp_in_force():
    for name, rule in (("trtllm-7818-weights-oom-rank7.log", "oom_weights"),
                       ("vllm-2140-torch-oom.log", "oom")):  # fmt: skip
        text = (STARTUP / name).read_text()
        at_tp2 = diagnose(text, tp=2).failures[0]
        assert at_tp2.rule == rule and "more GPUs than TP 2" in at_tp2.remedy
        assert "than TP" not in diagnose(text).failures[0].remedy


def test_kv_offload_on_the_command_names_the_offload_access():
    text = (STARTUP / "anvil-deepseek-r16-kv-offload-illegal-access.log").read_text()
    first = diagnose(text, command=["--kv-offloading-size", "8"]).failures[0]
    assert first.rule == "illegal_access_kv_offload"
    assert "--kv-offloading-size 8 (command line)" in first.cause


def test_a_server_that_failed_carries_the_verdict_a_serving_one_only_named_causes(tmp_path):
    """The finding's path (serving/diagnose.py): a server that did not start or stay up is
    "failed, cause not recognised" when no rule names it; a gate failing on a serving server
    keeps only named causes (its log's own errors are no verdict on the start)."""
    candidate = load_candidate(CANDIDATES / "smollm2-135m-local.toml")
    log = tmp_path / "server.log"
    log.write_text((STARTUP / "gpustack-2097-engine-core-cut.log").read_text())
    assert diagnose_log(log, candidate, {}) is None
    failed = diagnose_log(log, candidate, {}, server_failed=True)
    assert failed is not None and failed.headline() == "failed, cause not recognised"
    log.write_text((STARTUP / "vllm-10517-max-seq-len-kv.log").read_text())
    named = diagnose_log(log, candidate, {})
    assert named is not None and named.failures[0].rule == "kv_cache_short"
    # The candidate's own --n_ctx {max_model_len}, filled as the launch fills it.
    command = settings_in_force(candidate, {})["command"]
    assert command[command.index("--n_ctx") + 1] == str(candidate.max_model_len)


def test_a_worker_killed_before_any_error_is_named_dead_not_the_cascade():
    """The suite's own vLLM 0.32.0 CPU TP2 capture (data/vllm-cpu-tp2/README.md): rank 1's
    worker SIGKILLed; the engine's 'died unexpectedly' line leads, not the RuntimeError it
    raised afterwards, and the same log without it would still lead with the death."""
    text = (STARTUP.parent.parent / "vllm-cpu-tp2" / "worker-killed.log").read_text()
    first = diagnose(text, tp=2).failures[0]
    assert first.rule == "worker_died" and "VllmWorker-1" in first.cause
    no, said = first.evidence[0]
    assert "Worker proc VllmWorker-1 died unexpectedly" in said
    lead, _ = earliest(error_lines(context(text)))
    assert lead is not None and lead.line.no == no
    fork = (STARTUP / "h200" / "fork-after-cuda-2rank.log").read_text()
    assert "worker_died" not in {f.rule for f in diagnose(fork).failures}  # the cascade there
