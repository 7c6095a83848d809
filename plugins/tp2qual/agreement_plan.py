"""What gate 07 will judge for a candidate, for ``--plan``: its parts and tolerances, the
near-bound prompt's size, and the smallest accuracy drop its item count can see."""

from __future__ import annotations

from tp2qual.candidate import Candidate
from tp2qual.checks.accuracy import detectable_drop
from tp2qual.engines import engine_for


def agreement_lines(candidate: Candidate) -> list[str]:
    """Gate 07's parts for this serve, and the smallest accuracy drop its item count can see
    at three reference accuracies (80 % power, ``checks.accuracy.detectable_drop``)."""
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
    ]
    n, alpha, most = int(s["accuracy_items"]), float(s["accuracy_alpha"]), s["accuracy_max_drop"]
    if not n:
        return [*lines, "accuracy: no items asked (accuracy_items = 0)"]
    seen = []
    for p_ref in (0.9, 0.5, 0.1):
        drop = detectable_drop(n, p_ref, alpha)
        said = "none" if drop is None else f"{drop:.3f}"
        judged = drop is not None and drop <= most
        seen.append(f"{p_ref:.0%}: D {said}{'' if judged else ' (not judged: no power)'}")
    return [
        *lines,
        f"accuracy: {n} items at most, {s['accuracy_max_tokens']} tokens each (an item cut by "
        f"it is counted, not scored); a drop judged where D <= {most} at alpha {alpha}",
        "  smallest detectable drop D at reference accuracy " + "; ".join(seen),
    ]
