"""Gate 07's request near the bound: how long its prompt is, what it decodes, and how the
serve's decode there is checked again. The gate sizes it by this, and so does the rehearsal
(``tp2qual.rehearsal``). Pure.

The check is an echo reread (``ECHO``: the decode kernel against the prefill kernel at the same
positions) only where its prompt-logprob peak is known to fit what the launch leaves
(``tp2qual.rehearsal.echo_fits``: a CPU serve, or a GPU launch whose file states the vocabulary
and leaves room for one chunk of it); elsewhere a second, warm decode of the same prompt
(``WARM``), compared with the cold one position by position as a reread is
(``checks.agreement.evaluate``; issue 35). An echo with logprobs makes the engine compute
prompt logprobs at every position:
vLLM V1 builds each prefill chunk's whole [scheduled tokens, vocab] logits and their float32
log-softmax, outside the memory its profiling measured, so at Qwen3.5's 248,320-token vocabulary
and 8192-token chunks one chunk is 11.4 GiB against the 6.6 GiB a 0.90 launch leaves
(``tp2qual.rehearsal``); the engine dies and the candidate is blamed. No engine-neutral request
rereads only a window of a prompt's positions (vLLM's prompt logprobs have no start; a shorter
prompt would not reach the bound), and the chunk is the serve's own setting.

Why the warm decode still judges the KV near the bound: its answer's tokens sit just past a
prompt of ``near_bound_fill`` of the bound, and each attends over all of it; with the prefix
cached (vLLM's --enable-prefix-caching, SGLang's radix cache), it reads the KV blocks the cold
request wrote there, so stored KV that is corrupt at high block indices, a block table wrong
past some length, or a cache-hit path that computes differently near the bound moves its
top-N logprobs against the cold decode's. Without a prefix cache it is a second cold decode:
the same long-context KV computed twice must decode alike. What it no longer compares near the
bound is the decode kernel against the prefill kernel; the shipped prompts' echo rereads still
do, at a few hundred positions. Neither decode asks prompt logprobs: the memory is the decode
path the engine profiled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ECHO = "echo"  # the prompt plus the answer prefilled again, every position with its logprobs
WARM = "warm"  # the same prompt decoded again, its prefix cached where the engine caches


@dataclass(frozen=True)
class NearBoundPlan:
    prompt_tokens: int  # the target, on the server's own token count of a sample
    max_tokens: int
    check: str  # how the decode is checked again: ECHO or WARM

    @property
    def echo_positions(self) -> int:
        """Positions whose prompt logprobs the check asks for (0: none)."""
        return self.prompt_tokens + self.max_tokens if self.check == ECHO else 0


def near_bound_plan(
    max_model_len: int, settings: Mapping[str, Any], echo_fits: bool = False
) -> NearBoundPlan:
    """``echo_fits``: whether an echo of the prompt and answer is known to fit the serve's
    memory (``tp2qual.rehearsal.echo_fits``); unknown is no."""
    target = int(max_model_len * float(settings["near_bound_fill"]))
    check = ECHO if echo_fits else WARM
    return NearBoundPlan(target, int(settings["near_bound_max_tokens"]), check)
