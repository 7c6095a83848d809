#!/usr/bin/env python3
"""Pad SmolLM2-135M's attention heads so tensor parallelism 2 can split them, keeping the function.

SmolLM2-135M has 9 query heads and 3 KV heads (head_dim 64); 9 is not divisible by 2, so vLLM
refuses ``--tensor-parallel-size 2``. Padded to 12 query heads and 4 KV heads:

* q_proj gains 3 heads of zero rows, k_proj and v_proj 1 head of zero rows each;
* o_proj gains 3 heads of zero columns.

GQA keeps 3 query heads per KV head: query heads 0-8 still read KV heads 0-2 exactly as before;
the new query heads 9-11 read the new, zero KV head 3, and whatever they produce meets zero
columns in o_proj. So the model computes the same function, and at TP2 rank 0 holds query heads
0-5 with KV heads 0-1, rank 1 holds query heads 6-11 with KV heads 2-3.
``head_dim = 64`` is written into config.json because hidden_size / heads is no longer 64.

Usage: pad-smollm2-tp2.py SRC_DIR OUT_DIR   (SRC_DIR: scripts/convert-smollm2-hf.py's output)
Writes OUT_DIR atomically and prints the sha256 of its model.safetensors. Byte-reproducible:
the same SRC gives the same file. Run it with the engine venv's python (torch, safetensors).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

HEADS, KV_HEADS, HEAD_DIM = 12, 4, 64


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pad_rows(tensor: Any, heads: int) -> Any:  # torch tensors: torch is the engine venv's
    import torch

    extra = heads * HEAD_DIM - tensor.shape[0]
    return torch.cat([tensor, tensor.new_zeros(extra, tensor.shape[1])], dim=0)


def pad_cols(tensor: Any, heads: int) -> Any:
    import torch

    extra = heads * HEAD_DIM - tensor.shape[1]
    return torch.cat([tensor, tensor.new_zeros(tensor.shape[0], extra)], dim=1)


def pad(src: Path, out: Path) -> str:
    from safetensors.torch import load_file, save_file

    config = json.loads((src / "config.json").read_text())
    if (config["num_attention_heads"], config["num_key_value_heads"]) != (9, 3):
        sys.exit(
            f"{src}: expected 9/3 heads, found {config['num_attention_heads']}/"
            f"{config['num_key_value_heads']}"
        )
    tensors = load_file(str(src / "model.safetensors"))
    padded = {}
    for name, tensor in sorted(tensors.items()):
        if name.endswith("self_attn.q_proj.weight"):
            tensor = pad_rows(tensor, HEADS)
        elif name.endswith(("self_attn.k_proj.weight", "self_attn.v_proj.weight")):
            tensor = pad_rows(tensor, KV_HEADS)
        elif name.endswith("self_attn.o_proj.weight"):
            tensor = pad_cols(tensor, HEADS)
        padded[name] = tensor.contiguous()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for item in src.iterdir():  # tokenizer and generation files as they are
        if item.is_file() and item.name not in {"model.safetensors", "config.json"}:
            shutil.copy2(item, tmp / item.name)
    config.update(num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM)
    (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file(padded, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    digest = sha256(tmp / "model.safetensors")
    (tmp / "tp2qual-padding.json").write_text(
        json.dumps(
            {
                "source_sha256": sha256(src / "model.safetensors"),
                "heads": [9, HEADS],
                "kv_heads": [3, KV_HEADS],
                "head_dim": HEAD_DIM,
                "model_sha256": digest,
            },
            indent=2,
        )
        + "\n"
    )
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return digest


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(pad(Path(sys.argv[1]), Path(sys.argv[2])))
