"""The source edits tp2qual's SGLang images make to SGLang 0.5.23 (images/anvil-sglang/README.md).

Each edit replaces text that must occur exactly once in the named file of the installed
``sglang`` package; anything else (another SGLang, an edit already made) stops the build with
the edit, the file and the count. Standard library only: it runs in the image's own python3.

    python3 edits.py EDIT... [--root DIR]      # DIR: the sglang package (default: installed)
    python3 edits.py --list
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Replace:
    file: str  # relative to the sglang package
    old: str
    new: str


@dataclass(frozen=True)
class Edit:
    why: str
    replaces: tuple[Replace, ...]


EDITS: dict[str, Edit] = {
    "no-multimem-logits": Edit(
        "the logits all-gather over PyTorch symmetric memory (MultimemAllGatherer) fails in its "
        "rendezvous through the WSL2 CUDA proxy (SIGFPE, seen under Docker Desktop); disabled, "
        "the gatherer falls back to tensor_model_parallel_all_gather over NCCL",
        (
            Replace(
                "srt/layers/logits_processor.py",
                "            enabled=self.do_tensor_parallel_all_gather"
                " and not self.use_attn_tp_group,\n",
                "            enabled=False,"
                "  # tp2qual: NCCL all-gather, no symmetric memory (WSL2)\n",
            ),
        ),
    ),
    "pinned-quant-config-lookup": Edit(
        "SGLang looks for a ModelOpt hf_quant_config.json at the cache's refs/main, and Inkling's "
        "quantization config snapshot_downloads without a revision: a cache holding only the "
        "pinned commit (hf download --revision <commit>) has no refs/main, so with "
        "HF_HUB_OFFLINE=1 the checkpoint was not read as ModelOpt FP4. The lookups take "
        "--revision",
        (
            Replace(
                "srt/configs/model_config.py",
                "            return has_hf_quant_config(self.model_path)\n",
                "            return has_hf_quant_config(self.model_path, revision=self.revision)\n",
            ),
            Replace(
                "srt/utils/common.py",
                "def has_hf_quant_config(model_path: str) -> bool:\n",
                "def has_hf_quant_config(model_path: str, revision: str | None = None) -> bool:\n",
            ),
            Replace(
                "srt/utils/common.py",
                'result = try_to_load_from_cache(model_path, "hf_quant_config.json")\n',
                "result = try_to_load_from_cache(\n"
                '        model_path, "hf_quant_config.json", revision=revision\n'
                "    )\n",
            ),
            Replace(
                "srt/utils/common.py",
                'return hf_api.file_exists(model_path, "hf_quant_config.json")\n',
                'return hf_api.file_exists(model_path, "hf_quant_config.json",'
                " revision=revision)\n",
            ),
            Replace(
                "srt/models/inkling_common/quantization/config.py",
                '            allow_patterns="*.json",\n'
                "            local_files_only=huggingface_hub.constants.HF_HUB_OFFLINE,\n",
                '            allow_patterns="*.json",\n'
                '            revision=getattr(model_config, "revision", None),\n'
                "            local_files_only=huggingface_hub.constants.HF_HUB_OFFLINE,\n",
            ),
            Replace(
                "srt/models/inkling.py",
                "SimpleNamespace(hf_config=self.config, model_path=get_model().model_path)",
                "SimpleNamespace(hf_config=self.config, model_path=get_model().model_path, "
                'revision=getattr(get_model(), "revision", None))',
            ),
        ),
    ),
    "sm120-moe-stages": Edit(
        "Inkling's sparse-decode grouped GEMM asks for num_stages=4 (108 KB of shared memory); "
        "SGLang 0.5.23 drops to 3 only on SM 12.1 (its comment: 99 KB per block there), and "
        "SM 12.0 (RTX PRO 6000 Blackwell) has the same 99 KB per block",
        (
            Replace(
                "kernels/ops/moe/inkling_moe.py",
                '"num_stages": 3 if is_sm121() else 4,\n',
                '"num_stages": 3\n'
                "            if is_sm121() or torch.cuda.get_device_capability() == (12, 0)\n"
                "            else 4,\n",
            ),
        ),
    ),
}


def installed_root() -> Path:
    spec = importlib.util.find_spec("sglang")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("edits.py: no sglang package is installed here")
    return Path(next(iter(spec.submodule_search_locations)))


def apply(names: list[str], root: Path) -> list[str]:
    """Apply the named edits under ``root``; all are checked before any file is written."""
    texts: dict[Path, str] = {}
    problems: list[str] = []
    for name in names:
        for rep in EDITS[name].replaces:
            path = root / rep.file
            if path not in texts:
                texts[path] = path.read_text(encoding="utf-8") if path.is_file() else ""
            found = texts[path].count(rep.old)
            if found != 1:
                problems.append(f"{name}: {rep.file}: the text to replace occurs {found} times")
                continue
            texts[path] = texts[path].replace(rep.old, rep.new)
    if not problems:
        for path, text in texts.items():
            path.write_text(text, encoding="utf-8")
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("edits", nargs="*", metavar="EDIT", help=", ".join(EDITS))
    parser.add_argument("--root", type=Path, help="the sglang package folder")
    parser.add_argument("--list", action="store_true", help="print each edit and why")
    args = parser.parse_args(argv)
    if args.list or not args.edits:
        for name, edit in EDITS.items():
            print(f"{name}: {edit.why}")
        return 0
    if unknown := [name for name in args.edits if name not in EDITS]:
        parser.error(f"unknown edit(s) {', '.join(unknown)}; known: {', '.join(EDITS)}")
    root = args.root or installed_root()
    problems = apply(args.edits, root)
    for problem in problems:
        print(f"edits.py: {problem} under {root} (is this SGLang 0.5.23?)", file=sys.stderr)
    if not problems:
        print(f"edits.py: applied {', '.join(args.edits)} under {root}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
