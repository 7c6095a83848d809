"""Server-side metrics: Prometheus parsing and window means from two scrapes (no server)."""

from __future__ import annotations

import math

import pytest

from tp2qual.engines import engine_for, sglang, vllm
from tp2qual.perf.metrics import (
    histogram_totals,
    llama_perf_decode_s,
    llama_perf_from_log,
    llama_server_timings,
    llamacpp_window,
    parse,
    server_window,
    window_mean,
)

MODEL = "Qwen/Qwen3.5-122B-A10B-NVFP4"
VLLM, SGLANG = vllm.ENGINE.histograms, sglang.ENGINE.histograms  # the names each engine exports
LLAMA_CPP = engine_for("llama.cpp")  # its server's counters, its log's perf line


def vllm_text(ttft: tuple[float, int], itl: tuple[float, int], e2e: tuple[float, int]) -> str:
    """A vLLM v1 ``/metrics`` page (prometheus_client output: HELP/TYPE, buckets, _created)."""
    labels = f'engine="0",model_name="{MODEL}"'
    return f"""\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{labels}}} 0.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{{labels}}} 2304.0
vllm:generation_tokens_created{{{labels}}} 1.7645e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{{labels},le="0.04"}} 0.0
vllm:time_to_first_token_seconds_bucket{{{labels},le="0.1"}} {ttft[1]}.0
vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} {ttft[1]}.0
vllm:time_to_first_token_seconds_count{{{labels}}} {ttft[1]}.0
vllm:time_to_first_token_seconds_sum{{{labels}}} {ttft[0]}
vllm:time_to_first_token_seconds_created{{{labels}}} 1.7645e+09
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{{{labels},le="0.01"}} 0.0
vllm:inter_token_latency_seconds_bucket{{{labels},le="+Inf"}} {itl[1]}.0
vllm:inter_token_latency_seconds_count{{{labels}}} {itl[1]}.0
vllm:inter_token_latency_seconds_sum{{{labels}}} {itl[0]}
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{{{labels},le="+Inf"}} {e2e[1]}.0
vllm:e2e_request_latency_seconds_count{{{labels}}} {e2e[1]}.0
vllm:e2e_request_latency_seconds_sum{{{labels}}} {e2e[0]}
"""


def sglang_text(ttft_sum: float, ttft_n: int, tpot_sum: float, tpot_n: int) -> str:
    """An older SGLang ``--enable-metrics`` page: TPOT under its former name, a second model."""
    ours = 'model_name="smol",tp_rank="0"'
    other = 'model_name="other",tp_rank="0"'
    return f"""\
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum{{{ours}}} {ttft_sum}
sglang:time_to_first_token_seconds_count{{{ours}}} {ttft_n}
sglang:time_to_first_token_seconds_sum{{{other}}} 999.0
sglang:time_to_first_token_seconds_count{{{other}}} 3
# HELP sglang:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE sglang:time_per_output_token_seconds histogram
sglang:time_per_output_token_seconds_sum{{{ours}}} {tpot_sum}
sglang:time_per_output_token_seconds_count{{{ours}}} {tpot_n}
sglang:time_per_output_token_seconds_sum{{{other}}} 5.0
sglang:time_per_output_token_seconds_count{{{other}}} 50
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{{ours}}} 0.0
sglang:cache_hit_rate{{{ours}}} NaN
"""


def test_parse_reads_names_labels_values_and_skips_comments():
    samples = parse(vllm_text((1.5, 10), (3.0, 1270), (40.0, 10)))
    assert all(not s.name.startswith("#") for s in samples)
    count = next(s for s in samples if s.name == "vllm:time_to_first_token_seconds_count")
    assert count.value == 10.0
    assert count.label("model_name") == MODEL and count.label("engine") == "0"
    inf = [s for s in samples if s.label("le") == "+Inf"]
    assert len(inf) == 3


def test_parse_special_values_escapes_timestamps_and_junk():
    text = (
        'a_metric{path="C:\\\\dir",msg="say \\"hi\\""} +Inf 1700000000000\n'
        "b_metric NaN\n"
        "c_metric -Inf\n"
        "not a sample line at all\n"
        "d_metric{} 2.5e-3\n"
    )
    samples = {s.name: s for s in parse(text)}
    assert samples["a_metric"].value == math.inf
    assert samples["a_metric"].label("path") == "C:\\dir"
    assert samples["a_metric"].label("msg") == 'say "hi"'
    assert math.isnan(samples["b_metric"].value)
    assert samples["c_metric"].value == -math.inf
    assert samples["d_metric"].value == pytest.approx(0.0025)
    assert "not" not in samples


def test_vllm_window_means_are_delta_sum_over_delta_count():
    before = vllm_text((0.4, 2), (0.6, 254), (8.0, 2))  # warm-up already counted
    after = vllm_text((0.4 + 5 * 0.09, 7), (0.6 + 5 * 127 * 0.0125, 254 + 5 * 127), (48.0, 7))
    got = server_window(before, after, VLLM, {"model_name": MODEL})
    assert got["ttft_s"].metric == "vllm:time_to_first_token_seconds"
    assert got["ttft_s"].mean_s == pytest.approx(0.09)
    assert got["ttft_s"].observations == 5
    assert got["itl_s"].metric == "vllm:inter_token_latency_seconds"
    assert got["itl_s"].mean_s == pytest.approx(0.0125)
    assert got["e2e_s"].mean_s == pytest.approx(8.0)


def test_older_vllm_name_is_used_when_the_new_one_is_absent():
    text = (
        'vllm:time_per_output_token_seconds_sum{model_name="m"} 2.0\n'
        'vllm:time_per_output_token_seconds_count{model_name="m"} 100\n'
    )
    got = server_window("", text, VLLM)
    assert got["itl_s"].metric == "vllm:time_per_output_token_seconds"
    assert got["itl_s"].mean_s == pytest.approx(0.02)  # empty "before": counted from zero


def test_sglang_old_names_and_label_filter_keep_other_models_out():
    before = sglang_text(1.0, 4, 2.0, 400)
    after = sglang_text(1.6, 8, 2.0 + 4 * 0.015 * 127, 400 + 4 * 127)
    got = server_window(before, after, SGLANG, {"model_name": "smol"})
    assert got["ttft_s"].metric == "sglang:time_to_first_token_seconds"
    assert got["ttft_s"].mean_s == pytest.approx(0.15)
    assert got["itl_s"].metric == "sglang:time_per_output_token_seconds"
    assert got["itl_s"].mean_s == pytest.approx(0.015)
    assert got["e2e_s"].mean_s is None and "none of" in got["e2e_s"].reason
    unfiltered = server_window(before, after, SGLANG)["ttft_s"]  # other model unchanged: same mean
    assert unfiltered.mean_s == pytest.approx(0.15)


def test_series_of_several_engines_are_summed():
    text = (
        'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.0\n'
        'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 10\n'
        'vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 3.0\n'
        'vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 10\n'
    )
    assert histogram_totals(parse(text), "vllm:time_to_first_token_seconds") == (4.0, 20.0)
    assert histogram_totals(parse(text), "vllm:time_to_first_token_seconds", {"engine": "1"}) == (
        3.0,
        10.0,
    )


def test_no_observations_reset_and_absent_give_reasons_not_numbers():
    same = vllm_text((1.0, 5), (1.0, 100), (5.0, 5))
    quiet = server_window(same, same, VLLM)["ttft_s"]
    assert quiet.mean_s is None and quiet.reason == "no observations in the window"
    restarted = server_window(same, vllm_text((0.1, 1), (0.1, 10), (1.0, 1)), VLLM)["ttft_s"]
    assert restarted.mean_s is None and "restarted" in restarted.reason
    missing = window_mean([], [], ["x:none_seconds"])
    assert missing.metric is None and missing.mean_s is None
    assert set(quiet.as_dict()) == {"metric", "mean_s", "observations", "reason"}


def test_llamacpp_counters_give_per_token_seconds_over_the_window():
    def page(pred_n: int, pred_s: float, prompt_n: int, prompt_s: float) -> str:
        return (
            "# TYPE llamacpp:prompt_tokens_total counter\n"
            f"llamacpp:prompt_tokens_total {prompt_n}\n"
            f"llamacpp:prompt_seconds_total {prompt_s}\n"
            f"llamacpp:tokens_predicted_total {pred_n}\n"
            f"llamacpp:tokens_predicted_seconds_total {pred_s}\n"
            "llamacpp:predicted_tokens_seconds 61.2\n"
        )

    counters = LLAMA_CPP.metric_counters
    got = llamacpp_window(page(100, 2.0, 500, 1.0), page(740, 12.24, 1300, 1.8), counters)
    assert got["decode_s_per_token"] == pytest.approx(0.016)
    assert got["prompt_s_per_token"] == pytest.approx(0.001)
    nothing = {"decode_s_per_token": None, "prompt_s_per_token": None}
    assert llamacpp_window("", "", counters) == nothing


def test_llama_server_timings_in_seconds():
    got = llama_server_timings(
        {
            "prompt_n": 139,
            "prompt_ms": 410.5,
            "predicted_n": 128,
            "predicted_ms": 2048.0,
            "predicted_per_token_ms": 16.0,
            "predicted_per_second": 62.5,
        }
    )
    assert got["prompt_s"] == pytest.approx(0.4105)
    assert got["tpot_s"] == pytest.approx(0.016)
    assert got["decode_tok_s"] == 62.5
    assert got["decoded_tokens"] == 128


LLAMA_CPP_PYTHON_LOG = """\
INFO:     127.0.0.1:35986 - "GET /v1/models HTTP/1.1" 200 OK
llama_perf_context_print:        load time =       0.20 ms
llama_perf_context_print: prompt eval time =       0.03 ms /    12 tokens (    0.00 ms per token, 413793.10 tokens per second)
llama_perf_context_print:        eval time =       0.00 ms /     1 runs   (    0.00 ms per token,      inf tokens per second)
llama_perf_context_print:       total time =    4158.44 ms /    13 tokens
llama_perf_context_print:    graphs reused =          0
INFO:     127.0.0.1:35994 - "POST /v1/chat/completions HTTP/1.1" 200 OK
Llama.generate: 3 prefix-match hit, remaining 139 prompt tokens to eval
llama_perf_context_print:        load time =       0.20 ms
llama_perf_context_print: prompt eval time =       0.08 ms /   139 tokens (    0.00 ms per token, 1737500.00 tokens per second)
llama_perf_context_print:        eval time =    2032.00 ms /   127 runs   (   16.00 ms per token,    62.50 tokens per second)
llama_perf_context_print:       total time =    2480.35 ms /   266 tokens
llama_perf_context_print:    graphs reused =        125
llama_perf_context_print:        eval time =    1980.00 ms /   110 runs   (   18.00 ms per token,    55.55 tokens per second)
llama_perf_context_print:       total time =    2100.00 ms /   249 tokens
"""  # noqa: E501  (real lines from llama-cpp-python 0.3.36's server log; last block synthetic)


def test_llama_perf_blocks_from_a_llama_cpp_python_log():
    blocks = llama_perf_from_log(LLAMA_CPP_PYTHON_LOG.splitlines(), LLAMA_CPP.log_lines["perf"])
    assert len(blocks) == 3
    assert blocks[1].prompt_tokens == 139 and blocks[1].eval_runs == 127
    assert blocks[1].ms_per_eval == pytest.approx(16.0)
    assert blocks[2].prompt_ms is None  # a block without its prompt line still counts
    assert llama_perf_decode_s(blocks[1:]) == pytest.approx((2032.0 + 1980.0) / 237 / 1000)
    assert llama_perf_decode_s([]) is None
