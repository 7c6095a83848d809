"""What gate 07 will judge for a candidate, for ``--plan``: its parts and tolerances, the
near-bound prompt's size, and the smallest accuracy drop its item count can see, or why it asks
no item (``tp2qual.accuracy_asked``)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from tp2qual.accuracy_asked import ItemsAsked
from tp2qual.candidate import GATE_DEFAULTS, Candidate
from tp2qual.checks.accuracy import detectable_drop
from tp2qual.checks.agreement.flips import detectable_flip_rate, flip_threshold
from tp2qual.engines import engine_for
from tp2qual.evidence.reference import PROMPT_SET

# The smallest fault each default teacher-forced bound FAILs: Gaussian logit noise of sigma,
# and the true KL per token there, on the synthetic pairs of tests/logitnoise.py (400
# positions; test_agreement_power.py recomputes this table with ``first_fail``). Figure ->
# (setting, sigma, true KL nat/token).
TF_CATCHES = {
    "mean |Δ|": ("tf_max_mean_abs_delta", 0.28, 0.0152),
    "p99 |Δ|": ("tf_max_p99_abs_delta", 0.26, 0.0131),
    "top-1 (argmax flips)": ("tf_min_top1_agreement", 0.88, 0.1565),
    "KL": ("tf_max_mean_kl", 0.28, 0.0152),
}


# The fault only the flip bound catches: a serve that swaps its top two logits where they are
# within this many nat (on tests/logitnoise.py's open reference, whose near-ties are as common
# as in the recorded answers, with healthy noise sigma 0.05), and the true KL per token there;
# mean |Δ|, p99 and KL pass that serve up to the last window. test_agreement_flips.py
# recomputes it with ``first_fail(..., knob="swap_within")``.
FLIP_CATCH = {"swap_within": 0.14, "true_kl": 0.0009, "others_pass_to": 0.38}
_FLIP_KEYS = ("tf_min_top1_agreement", "flip_alpha")


def tf_positions(settings: Mapping[str, Any]) -> int:
    """The teacher-forced positions at most: the judged prompts' max_tokens summed (a
    reference answer that stops early has fewer)."""
    prompts = json.loads(PROMPT_SET.read_text())["prompts"][: int(settings["prompts"]) or None]
    return sum(int(p["max_tokens"]) for p in prompts)


def tf_catch_lines(settings: dict[str, object]) -> list[str]:
    """Each teacher-forced bound with the smallest fault it FAILs, where the bound is the
    default the table was measured on; a changed bound says its fault size is not measured."""
    lines = []
    for figure, (key, sigma, kl) in TF_CATCHES.items():
        if settings[key] == GATE_DEFAULTS["agreement"][key]:
            said = f"FAILs logit noise sigma >= {sigma} (true KL {kl} nat/token)"
        else:
            said = "fault size not measured for this bound (tests/logitnoise.first_fail)"
        lines.append(f"  teacher-forced {figure} bound {settings[key]}: {said}")
    return [*lines, flip_line(settings)]


def flip_line(settings: Mapping[str, Any]) -> str:
    """The flip bound's power over the gate's positions, and the near-tie fault it catches."""
    n, alpha = tf_positions(settings), float(settings["flip_alpha"])
    rate = 1 - float(settings["tf_min_top1_agreement"])
    need, seen = flip_threshold(n, rate, alpha), detectable_flip_rate(n, rate, alpha)
    said = (
        f"  argmax flips judged binomially (a flip rate of {rate:.0%} at alpha {alpha}): over "
        f"{n} positions FAIL from {need} flips, a true flip rate >= "
        f"{'none' if seen is None else f'{seen:.1%}'} with 80 % power"
    )
    if all(settings[k] == GATE_DEFAULTS["agreement"][k] for k in _FLIP_KEYS):
        c = FLIP_CATCH
        said += (
            f"; FAILs a serve that swaps near-ties within {c['swap_within']} nat (true KL "
            f"{c['true_kl']} nat/token), which mean |Δ|, p99 and KL pass up to "
            f"{c['others_pass_to']} nat"
        )
    return said


def warm_line(settings: Mapping[str, Any]) -> str:
    """The cached-prefix check's bound, as the smallest shift it FAILs: a token the cold
    decode chose at p 0.99 that the warm one gives this much less."""
    bound = float(settings["warm_max_abs_delta_logprob"])
    return (
        f"a cached prefix decodes as the cold one: common-prefix |Δ| <= {bound} nat, so it FAILs "
        f"a token chosen at p 0.99 cold and given p {0.99 * math.exp(-bound):.2f} or less warm"
    )


def agreement_lines(candidate: Candidate, asked: ItemsAsked) -> list[str]:
    """Gate 07's parts for this serve, and the smallest accuracy drop its item count can see
    at three reference accuracies (80 % power, ``checks.accuracy.detectable_drop``); ``asked``:
    whether it asks its items at all (``tp2qual.accuracy_asked``), and why."""
    if why := candidate.not_applicable("agreement"):
        return [f"not applicable: {' '.join(why.split())}"]
    s = candidate.gate("agreement")
    engine = engine_for(candidate.engine)
    reread = (
        f"{engine.title} rereads with echo (its rows shifted by {engine.reread_shift})"
        if engine.reread_shift is not None
        else f"not judged: {engine.title} cannot reread a prompt with its logprobs"
    )
    near = int(candidate.max_model_len * s["near_bound_fill"])
    lines = [
        f"greedy is argmax within {s['argmax_epsilon']} nat; closeness to the first differing "
        f"token (top {s['top_n']}, gap <= {s['max_divergence_gap']} nat, common prefix "
        f"|Δ| <= {s['max_abs_delta_logprob']}, ends compared)",
        f"self-consistency and teacher forcing: {reread}; self mean |Δ| <= "
        f"{s['self_max_mean_abs_delta']}, teacher-forced <= {s['tf_max_mean_abs_delta']}",
        f"near the bound: a prompt of about {near} tokens ({s['near_bound_fill']:.0%} of "
        f"{candidate.max_model_len}), {s['near_bound_max_tokens']} tokens decoded",
        warm_line(s),
        *tf_catch_lines(s),
    ]
    n, alpha, most = int(s["accuracy_items"]), float(s["accuracy_alpha"]), s["accuracy_max_drop"]
    if not asked.asked:
        return [*lines, f"accuracy: {asked.why}"]
    if not n:
        return [*lines, "accuracy: no items asked (accuracy_items = 0)"]
    gain, seen = float(s["accuracy_gain_rate"]), []
    for p_ref in (0.9, 0.5, 0.1):
        drop = detectable_drop(n, p_ref, alpha, gain=gain)
        said = "none" if drop is None else f"{drop:.3f}"
        judged = drop is not None and drop <= most
        seen.append(f"{p_ref:.0%}: D {said}{'' if judged else ' (not judged: no power)'}")
    return [
        *lines,
        f"accuracy: {n} items at most, {s['accuracy_max_tokens']} tokens each (an item cut by "
        f"it is counted, not scored); a drop judged where D <= {most} at alpha {alpha}",
        f"  {asked.why}",
        f"  smallest detectable drop D (80 % power, a {gain:.0%} prior share of the reference's "
        f"wrong items gained back) at reference accuracy " + "; ".join(seen),
    ]
