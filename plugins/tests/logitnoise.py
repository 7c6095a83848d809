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


def reference_logits(positions: int, vocab: int, seed: int) -> np.ndarray:
    """Standard-normal logits with one token raised by a margin drawn from 4 to 14 nat: from
    open positions (top-1 p about 0.1) to near-certain ones, as a model's are."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((positions, vocab))
    logits[:, 0] += rng.uniform(4.0, 14.0, size=positions)
    return logits


def study(
    sigma: float = 0.0,
    sharpen: float = 1.0,
    positions: int = 400,
    vocab: int = 512,
    seed: int = 0,
) -> Study:
    """The pairs for a serve whose logits are ``sharpen`` x the reference's plus N(0, sigma²)."""
    ref = reference_logits(positions, vocab, seed)
    noise = np.random.default_rng(seed + 1).standard_normal(ref.shape) * sigma
    p, q = _log_softmax(ref), _log_softmax(ref * sharpen + noise)
    kl = float((np.exp(p) * (p - q)).sum(axis=-1).mean())
    chosen = p.argmax(axis=-1)
    flips = float((chosen != q.argmax(axis=-1)).mean())
    pairs = [(_row(p[i], int(t)), _row(q[i], int(t))) for i, t in enumerate(chosen)]
    return Study(pairs, kl, flips)


# Each judged figure, and the side of its bound that fails (scoring.judge's own table).
LIMITS = {
    "mean_abs_delta": ("max_mean_abs_delta", False),
    "p99_abs_delta": ("max_p99_abs_delta", False),
    "top1_agreement": ("min_top1_agreement", True),
    "mean_kl": ("max_mean_kl", False),
}


def first_fail(bounds: Any, step: float = 0.02, top: float = 1.6) -> dict[str, tuple[float, float]]:
    """Per figure, the smallest sigma on a ``step`` grid whose pairs fail that figure's bound,
    and the true KL per token there (a figure that never fails up to ``top`` is left out)."""
    found: dict[str, tuple[float, float]] = {}
    for i in range(1, round(top / step) + 1):
        sigma = round(i * step, 6)
        s = study(sigma=sigma)
        figures = _figures(s.pairs, len(s.pairs))
        for name, (limit, at_least) in LIMITS.items():
            value, bound = figures[name], getattr(bounds, limit)
            if name not in found and (value < bound if at_least else value > bound):
                found[name] = (sigma, round(s.true_kl, 4))
    return found


def _figures(pairs: Any, positions: int) -> dict[str, Any]:
    from tp2qual.checks.agreement.scoring import figures  # the gate's own reading

    return figures(pairs, positions)
