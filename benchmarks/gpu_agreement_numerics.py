"""Gate 07's figures for bf16 arithmetic on a GPU, against its default bounds.

    python scripts/convert-smollm2-hf.py DIR      # the embedded GGUF as a plain bf16 folder
    python benchmarks/gpu_agreement_numerics.py --model DIR [--out FILE.json] [--settings F]

The bounds of gate 07 were sized on the healthy pairs of this machine's CPUs, in fp32
(docs/agreement.md "Healthy spread"). The campaign's serves compute in bf16 on GPUs, where a
decode and a prefill of the same tokens take other kernels and TP2 sums its row-parallel
partial products across ranks. This script measures, on one CUDA GPU, how far a real model's
logprobs move under that arithmetic, by the gate's own pure functions
(``tp2qual.checks.agreement``), on the gate's shipped prompts (plain completions, their own
``max_tokens``), with the embedded SmolLM2-135M-Instruct (the Q4_1 GGUF the llama.cpp candidate
serves, dequantized to bf16 by ``scripts/convert-smollm2-hf.py``, the vLLM candidates' folder),
run by transformers in bf16:

- **self**: a greedy decode (one token a step, KV cache) against a reread of prompt plus answer
  (one forward): the self-consistency part;
- **TP2, simulated on one card**: every row-parallel projection (``o_proj``, ``down_proj``) as
  two half-width partial products in bf16, added in bf16, as two ranks and an all-reduce do;
  every column-parallel one (q, k, v, gate, up) as two half-width products concatenated. Its
  reread of the TP1 decode's answers against that decode: the teacher-forced part; its own
  decode against the TP1 decode: the closeness walk;
- **warm against cold**: the prompt prefilled in two chunks (its first three quarters, then the
  rest on the cache, as a prefix cache does) and decoded, against the one-chunk decode.

What it does not simulate: another engine's kernels (FlashInfer, CUTLASS FP4 GEMMs, CUDA graphs),
NVFP4 weights or FP8 KV, other models' logit scales. It gives bf16's order of magnitude on one
real model, not the campaign serves' own figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))

from tp2qual.checks.agreement import closeness, scoring  # noqa: E402
from tp2qual.checks.agreement.rows import aligned  # noqa: E402

PROMPT_SET = ROOT / "plugins" / "tp2qual" / "data" / "agreement_prompts.json"  # the shipped set

SETTINGS: dict[str, Any] = {}  # gate 07's defaults (main: tp2qual.candidate, or --settings)
TOP_N = 5
DEVICE = "cuda"  # --device cpu: a quick check of the script itself, not a figure
ROW_PARALLEL = ("o_proj", "down_proj")
COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")


def _row_parallel(layer: torch.nn.Linear) -> None:
    def forward(x: torch.Tensor) -> torch.Tensor:
        k = x.shape[-1] // 2
        return F.linear(x[..., :k], layer.weight[:, :k]) + F.linear(x[..., k:], layer.weight[:, k:])

    layer.forward = forward  # type: ignore[method-assign]


def _column_parallel(layer: torch.nn.Linear) -> None:
    def forward(x: torch.Tensor) -> torch.Tensor:
        n = layer.weight.shape[0] // 2
        return torch.cat([F.linear(x, layer.weight[:n]), F.linear(x, layer.weight[n:])], dim=-1)

    layer.forward = forward  # type: ignore[method-assign]


def as_tp2(model: torch.nn.Module) -> torch.nn.Module:
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and module.bias is None:
            if name.endswith(ROW_PARALLEL):
                _row_parallel(module)
            elif name.endswith(COLUMN_PARALLEL):
                _column_parallel(module)
    return model


def _row(logits: torch.Tensor, token: int, names: list[str]) -> dict[str, Any]:
    """One position as gate 07 reads an engine's logprobs: the token's, and the top N."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    values, ids = torch.topk(logprobs, TOP_N)
    return {
        "token": names[token],
        "logprob": float(logprobs[token]),
        "top": [[names[int(i)], float(v)] for v, i in zip(values, ids, strict=True)],
    }


@torch.no_grad()
def decode(model: Any, prompt: list[int], max_tokens: int, eos: int, names: list[str],
           chunks: int = 1) -> tuple[list[int], list[dict[str, Any]]]:  # fmt: skip
    """Greedy, one token a step on the KV cache; the prompt prefilled in ``chunks`` parts."""
    ids = torch.tensor([prompt], device=DEVICE)
    cut = [0, *([len(prompt) * 3 // 4] if chunks == 2 else []), len(prompt)]
    cache, out = None, None
    for a, b in itertools.pairwise(cut):
        out = model(input_ids=ids[:, a:b], past_key_values=cache, use_cache=True)
        cache = out.past_key_values
    answer, rows = [], []
    logits = out.logits[0, -1]
    for _ in range(max_tokens):
        token = int(torch.argmax(logits))
        rows.append(_row(logits, token, names))
        answer.append(token)
        if token == eos:
            break
        out = model(input_ids=torch.tensor([[token]], device=DEVICE), past_key_values=cache,
                    use_cache=True)  # fmt: skip
        cache, logits = out.past_key_values, out.logits[0, -1]
    return answer, rows


@torch.no_grad()
def reread(
    model: Any, prompt: list[int], answer: list[int], names: list[str]
) -> list[dict[str, Any]]:
    """Prompt plus answer in one forward: each answer token's row from the position before it."""
    logits = model(input_ids=torch.tensor([prompt + answer], device=DEVICE)).logits[0]
    return [_row(logits[len(prompt) - 1 + i], t, names) for i, t in enumerate(answer)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="a Hugging Face folder")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--settings", type=Path, help="gate 07's defaults as JSON (where "
                        "tp2qual.candidate's own imports are not installed)")  # fmt: skip
    parser.add_argument("--prompts", type=int, default=0, help="the first N prompts (0: all)")
    args = parser.parse_args()
    global DEVICE, TOP_N
    DEVICE = args.device
    if args.settings:
        SETTINGS.update(json.loads(args.settings.read_text()))
    else:
        from tp2qual.candidate import GATE_DEFAULTS

        SETTINGS.update(GATE_DEFAULTS["agreement"])
    TOP_N = int(SETTINGS["top_n"])
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tp1 = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).to(DEVICE).eval()
    tp2 = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).to(DEVICE).eval()
    as_tp2(tp2)
    names = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    eos = int(tokenizer.eos_token_id)
    prompts = json.loads(PROMPT_SET.read_text())["prompts"][: args.prompts or None]
    pairs: dict[str, list[Any]] = {"self": [], "tp2_self": [], "tf": []}
    counts = dict.fromkeys(pairs, 0)
    walks, warm = [], []
    rule = closeness.Closeness(TOP_N, float("inf"), float("inf"))  # figures only, judged below
    for p in prompts:
        ids = tokenizer(p["text"], add_special_tokens=False)["input_ids"]
        answer, rows = decode(tp1, ids, int(p["max_tokens"]), eos, names)
        answer2, rows2 = decode(tp2, ids, int(p["max_tokens"]), eos, names)
        _, warm_rows = decode(tp1, ids, int(p["max_tokens"]), eos, names, chunks=2)
        for part, (decoded, rereads) in {
            "self": (rows, reread(tp1, ids, answer, names)),
            "tp2_self": (rows2, reread(tp2, ids, answer2, names)),
            "tf": (rows, reread(tp2, ids, answer, names)),  # the TP1 decode, TP2 forced on it
        }.items():
            pairs[part] += aligned(decoded, rereads)
            counts[part] += len(decoded)
        walk = closeness.compare(closeness.Decode(rows2, None), closeness.Decode(rows, None), rule)
        walks.append({"id": p["id"], **{k: walk.measures.get(k) for k in (
            "common_prefix", "own_tokens", "ref_tokens", "max_abs_delta_logprob",
            "divergence_gap")}})  # fmt: skip
        cold = closeness.compare(
            closeness.Decode(warm_rows, None), closeness.Decode(rows, None), rule
        )
        kept = ("common_prefix", "own_tokens", "max_abs_delta_logprob", "divergence_gap")
        warm.append({"id": p["id"], **{k: cold.measures.get(k) for k in kept}})
    settings = SETTINGS
    device = torch.cuda.get_device_name(0) if DEVICE == "cuda" else DEVICE
    found: dict[str, Any] = {"device": device, "torch": torch.__version__}
    for part, prefix in (("self", "self"), ("tp2_self", "self"), ("tf", "tf")):
        figures = scoring.figures(pairs[part], counts[part])
        verdict = scoring.judge(figures, scoring.Bounds.from_settings(settings, prefix), part)
        found[part] = {**figures, "judgement": verdict.measures.get("judgement"), "ok": verdict.ok,
                       "reason": None if verdict.ok else verdict.reason}  # fmt: skip
    found["walk_tp2_vs_tp1"] = walks
    found["warm_vs_cold"] = warm
    found["bounds"] = {k: settings[k] for k in settings if k.startswith(("self_", "tf_", "warm_",
                       "max_", "flip_"))}  # fmt: skip
    text = json.dumps(found, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
