"""Decode roofline on hand-computed figures."""

from __future__ import annotations

import dataclasses

import pytest

from tp2qual.perf.roofline import Roofline, decode_bound, fraction


def test_tp2_weights_only():
    # 10 B active params at 4 bits = 5.0 GB; TP2 -> 2.5 GB per GPU per token;
    # 1,792 GB/s / 2.5 GB = 716.8 tokens/s.
    r = decode_bound(10, 4, 1792, 2)
    assert r.bytes_per_gpu_per_token == pytest.approx(2.5e9)
    assert r.memory_time_s == pytest.approx(2.5e9 / 1.792e12)
    assert r.allreduce_time_s == 0.0
    assert r.bound_tok_s == pytest.approx(716.8)


def test_tp1_is_half_of_tp2():
    assert decode_bound(10, 4, 1792, 1).bound_tok_s == pytest.approx(358.4)


def test_kv_bytes_add_to_each_gpu():
    # 2.5 GB weights + 0.5 GB KV per GPU = 3.0 GB -> 1,792 / 3 = 597.33 tokens/s.
    r = decode_bound(10, 4, 1792, 2, kv_bytes_per_token=0.5e9)
    assert r.bytes_per_gpu_per_token == pytest.approx(3.0e9)
    assert r.bound_tok_s == pytest.approx(597.333, abs=1e-3)


def test_allreduce_latency_per_layer():
    # 2 all-reduces x 48 layers x 20 us = 1.92 ms; memory 2.5e9 / 1.792e12 = 1.39509 ms;
    # 1 / 3.31509 ms = 301.65 tokens/s.
    r = decode_bound(10, 4, 1792, 2, layers=48, allreduce_latency_us=20)
    assert r.allreduce_time_s == pytest.approx(1.92e-3)
    assert r.bound_tok_s == pytest.approx(301.65, abs=0.01)
    assert (r.layers, r.allreduce_latency_us) == (48, 20)


def test_no_allreduce_term_at_tp1_or_when_half_given():
    assert decode_bound(10, 4, 1792, 1, layers=48, allreduce_latency_us=20).allreduce_time_s == 0
    assert decode_bound(10, 4, 1792, 2, layers=48).allreduce_time_s == 0


def test_h200_nvfp4_example():
    # 12 B active at 4.5 bits (NVFP4 with its scales) = 6.75 GB on one H200 at 4,814.3 GB/s.
    r = decode_bound(12, 4.5, 4814.3, 1)
    assert r.bound_tok_s == pytest.approx(4814.3 / 6.75, rel=1e-9)


def test_fraction():
    r = decode_bound(10, 4, 1792, 2)
    assert fraction(358.4, r) == pytest.approx(0.5)
    assert fraction(0, r) == 0
    with pytest.raises(ValueError):
        fraction(-1, r)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"active_params_b": 0},
        {"bits_per_weight": -4},
        {"bandwidth_gbs": 0},
        {"tp": 0},
        {"kv_bytes_per_token": -1},
    ],
)
def test_rejects_impossible_inputs(kwargs):
    args = {"active_params_b": 10, "bits_per_weight": 4, "bandwidth_gbs": 1792, "tp": 2}
    with pytest.raises(ValueError):
        decode_bound(**{**args, **kwargs})


def test_roofline_is_frozen():
    r = decode_bound(10, 4, 1792, 2)
    assert isinstance(r, Roofline)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.bound_tok_s = 1.0  # type: ignore[misc]
