"""Synthetic teacher-forced pairs with a known fault: a reference's logits, and a serve whose
logits are the same plus Gaussian noise of sigma (or scaled, "sharpened"), as rows that
``tp2qual.checks.agreement.scoring`` reads. The true KL per token is computed over the whole
vocabulary, so each bound can be stated as the smallest fault it catches.

The reference's rows are a greedy decode (its token is its argmax); the serve's rows are its
reread of the same tokens (the reference's token, at the serve's logprob). Logits: a Gaussian
vocabulary of ``vocab`` tokens with one token raised by a per-position margin, so that most
positions are confident and some are open, as in the real transcripts. Seeded: the same arguments
give the same pairs. numpy is the venv's (a test helper, never the package).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

TOP_N = 5


@dataclass(frozen=True)
class Study:
    pairs: list[tuple[dict[str, Any], dict[str, Any]]]
    true_kl: float  # mean KL(reference || serve) per position over the whole vocabulary
    flip_rate: float  # share of positions whose argmax differs


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _row(lp: np.ndarray, token: int) -> dict[str, Any]:
    top = np.argsort(-lp)[:TOP_N]
    return {"token": f"t{token}", "logprob": float(lp[token]),
            "top": [[f"t{int(t)}", float(lp[t])] for t in top]}  # fmt: skip


# The open reference's runner-up sits an exponential gap of this mean below the top token: the
# top-1/top-2 gaps of the recorded SmolLM2 decode rows fit it (test_agreement_flips.py).
RUNNER_UP_GAP_MEAN = 2.0


def reference_logits(positions: int, vocab: int, seed: int, open_ties: bool = False) -> np.ndarray:
    """Standard-normal logits with one token raised by a margin drawn from 4 to 14 nat: from
    open positions (top-1 p about 0.1) to near-certain ones, as a model's are. With
    ``open_ties`` a runner-up (token 1) sits an Exp(RUNNER_UP_GAP_MEAN) gap below the top, so
    near-ties are as common as in real answers (the margin alone leaves almost none)."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((positions, vocab))
    logits[:, 0] += rng.uniform(4.0, 14.0, size=positions)
    if open_ties:  # its own stream: the default pairs stay the same draws
        gaps = np.random.default_rng(seed + 2).exponential(RUNNER_UP_GAP_MEAN, size=positions)
        logits[:, 1] = logits[:, 0] - gaps
    return logits


def swap_near_ties(logits: np.ndarray, within: float) -> np.ndarray:
    """The near-tie fault: where the top two logits are within ``within`` nat, swap them (a
    serve that breaks near-ties the other way). The chosen token moves by less than ``within``
    and the distribution keeps its values, so |Δ| and KL barely move while argmax flips."""
    out = logits.copy()
    order = np.argsort(-logits, axis=-1)
    rows = np.arange(len(logits))
    first, second = order[:, 0], order[:, 1]
    near = logits[rows, first] - logits[rows, second] < within
    out[rows[near], first[near]] = logits[rows[near], second[near]]
    out[rows[near], second[near]] = logits[rows[near], first[near]]
    return out


def study(
    sigma: float = 0.0,
    sharpen: float = 1.0,
    positions: int = 400,
    vocab: int = 512,
    seed: int = 0,
    open_ties: bool = False,
    swap_within: float = 0.0,
) -> Study:
    """The pairs for a serve whose logits are ``sharpen`` x the reference's plus N(0, sigma²),
    then with its near-ties within ``swap_within`` nat swapped (0: none)."""
    ref = reference_logits(positions, vocab, seed, open_ties)
    noise = np.random.default_rng(seed + 1).standard_normal(ref.shape) * sigma
    serve = ref * sharpen + noise
    if swap_within > 0:
        serve = swap_near_ties(serve, swap_within)
    p, q = _log_softmax(ref), _log_softmax(serve)
    kl = float((np.exp(p) * (p - q)).sum(axis=-1).mean())
    chosen = p.argmax(axis=-1)
    flips = float((chosen != q.argmax(axis=-1)).mean())
    pairs = [(_row(p[i], int(t)), _row(q[i], int(t))) for i, t in enumerate(chosen)]
    return Study(pairs, kl, flips)


# Each judged figure, and the side of its bound that fails (scoring.judge's own table; the
# top-1 share is judged by its flip count, flips.py).
LIMITS = {
    "mean_abs_delta": ("max_mean_abs_delta", False),
    "p99_abs_delta": ("max_p99_abs_delta", False),
    "top1_agreement": ("min_top1_agreement", True),
    "mean_kl": ("max_mean_kl", False),
}


def failing(figures: dict[str, Any], bounds: Any) -> set[str]:
    """The figures whose bound fails, by the rule ``scoring.judge`` applies."""
    from tp2qual.checks.agreement.flips import flips_fail

    out = set()
    for name, (limit, at_least) in LIMITS.items():
        value, bound = figures[name], getattr(bounds, limit)
        if name == "top1_agreement" and bounds.flip_alpha is not None:
            n, rate = figures["top1_positions"], 1 - bound
            bad = flips_fail(figures["flips"], n, rate, bounds.flip_alpha)
        else:
            bad = value < bound if at_least else value > bound
        if bad:
            out.add(name)
    return out


def first_fail(
    bounds: Any, step: float = 0.02, top: float = 1.6, knob: str = "sigma", **fault: Any
) -> dict[str, tuple[float, float]]:
    """Per figure, the smallest ``knob`` (sigma, or the near-tie window ``swap_within``) on a
    ``step`` grid whose pairs fail that figure's bound, and the true KL per token there (a
    figure that never fails up to ``top`` is left out); the rest of the serve as ``fault``
    says (e.g. open_ties and a healthy sigma)."""
    found: dict[str, tuple[float, float]] = {}
    for i in range(1, round(top / step) + 1):
        s = study(**{**fault, knob: round(i * step, 6)})
        for name in failing(_figures(s.pairs, len(s.pairs)), bounds):
            found.setdefault(name, (round(i * step, 6), round(s.true_kl, 4)))
    return found


def _figures(pairs: Any, positions: int) -> dict[str, Any]:
    from tp2qual.checks.agreement.scoring import figures  # the gate's own reading

    return figures(pairs, positions)
