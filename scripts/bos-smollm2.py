#!/usr/bin/env python3
"""Make a copy of the converted SmolLM2-135M whose tokenizer prepends a BOS to every prompt.

SmolLM2's own tokenizer adds nothing (its post_processor is a bare TemplateProcessing, and the
GGUF says add_bos_token false). The campaign's DeepSeek tokenizers add one (add_bos_token: true),
and vLLM and SGLang then echo it as the first row of a reread, outside the prompt's text. This
copy lets gate 07 meet that on a real engine (candidates/smollm2-135m-bos-vllm.toml).

The BOS is <|endoftext|> (id 0), the separator SmolLM2 was pretrained with between documents, so
a plain-text prompt after it reads as a document's start (config.json names <|im_start|>, id 1,
the chat turn's opener, which would make every prompt a malformed chat turn). It is added by the
fast tokenizer's post_processor (TemplateProcessing), the path vLLM 0.32.0's tokenizer
(transformers 5.19 TokenizersBackend) runs on encode; tokenizer_config.json says the same
(bos_token, add_bos_token). The weights are the same file, hard-linked (a copy where the link
fails), so the candidate's sha256 pin is the base model's.

Usage: bos-smollm2.py SRC_DIR OUT_DIR   (SRC_DIR: scripts/convert-smollm2-hf.py's output)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

BOS, BOS_ID = "<|endoftext|>", 0
COPIED = ("chat_template.jinja", "config.json", "generation_config.json", "tp2qual-conversion.json")


def with_bos(tokenizer: dict) -> dict:
    """The tokenizer.json with a post_processor that prepends BOS to single and pair inputs."""
    bos = {"SpecialToken": {"id": BOS, "type_id": 0}}
    a, b = {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}
    tokenizer["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [bos, a],
        "pair": [bos, a, b],
        "special_tokens": {BOS: {"id": BOS, "ids": [BOS_ID], "tokens": [BOS]}},
    }
    return tokenizer


def main(src: Path, out: Path) -> None:
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in COPIED:
        shutil.copyfile(src / name, tmp / name)
    try:
        os.link(src / "model.safetensors", tmp / "model.safetensors")
    except OSError:
        shutil.copyfile(src / "model.safetensors", tmp / "model.safetensors")
    tokenizer = json.loads((src / "tokenizer.json").read_text())
    (tmp / "tokenizer.json").write_text(json.dumps(with_bos(tokenizer), ensure_ascii=False))
    config = json.loads((src / "tokenizer_config.json").read_text())
    config |= {"bos_token": BOS, "add_bos_token": True}
    (tmp / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
