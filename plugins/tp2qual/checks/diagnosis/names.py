"""Rules for what the engine was asked to load and does not know or cannot split: an unknown
quantization method, model architecture, tool-call or reasoning parser (with the engine version
that printed it), shapes not divisible by the TP size, GPUs named by UUID where an index is read,
a model snapshot missing its files or a GGUF file that does not parse, a missing Python
dependency of a quantization path."""

from __future__ import annotations

import re

from tp2qual.checks.diagnosis.model import Context, Finding, evidence_of


def _version(ctx: Context) -> str:
    return f" (engine version {ctx.version})" if ctx.version else " (the log prints no version)"


_QUANT = re.compile(
    r"Unknown quantization method: (?P<name>[\w-]*)\. Must be one of|Found unknown quantization"
)


def rule_unknown_quantization(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_QUANT)
    if not hits:
        return []
    m = _QUANT.search(hits[0].text)
    name = m["name"] if m else None
    if name == "":
        what = "the checkpoint's quantization config names no method this engine reads"
        remedy = (
            f"{ctx.arg_source('quantization')} is already set: the checkpoint's own config"
            " (hf_quant_config.json / quantization_config) must match it; use an engine version"
            " that reads this export"
            if ctx.arg("quantization")
            else "pass the method explicitly (e.g. --quantization modelopt_fp4 for a ModelOpt"
            " NVFP4 export), or use an engine version that reads this export"
        )
    else:
        what = (
            f"the engine does not know the quantization method {name!r}"
            if name
            else ("the engine does not know the checkpoint's quantization method")
        )
        remedy = "use an engine version that supports it, or a method from the list it printed"
    return [
        Finding("unknown_quantization", what + _version(ctx), evidence_of(hits), remedy, "high")
    ]


_ARCH = re.compile(r"Model architectures? \[?'?(?P<arch>[\w, ']+?)'?\]? (?:are|is) not supported")
_ARCH_INSPECT = re.compile(r"Error in inspecting model architecture '(?P<arch>\w+)'")


def rule_unknown_architecture(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_ARCH)
    inspect = ctx.grep(_ARCH_INSPECT)
    if not hits and not inspect:
        return []
    m = _ARCH.search(hits[0].text) if hits else _ARCH_INSPECT.search(inspect[0].text)
    arch = m["arch"].strip("' ") if m else "the model's architecture"
    if inspect:
        cause = (
            f"the engine could not load the code for {arch}: importing it failed (the first"
            " exception after 'Error in inspecting model architecture' is the reason)"
        )
        remedy = (
            "fix what that import error names (a missing or mismatched package, a device"
            " setting); the architecture itself may be supported"
        )
    else:
        cause = f"this engine version does not support {arch}"
        remedy = (
            "use an engine version that lists it, or check an earlier import error did not hide it"
        )
    return [
        Finding(
            "unknown_architecture",
            cause + _version(ctx),
            evidence_of(sorted({*inspect[:1], *hits}, key=lambda ln: ln.no)),
            remedy,
            "medium" if inspect else "high",
        )
    ]


_PARSERS = (
    (
        "tool_call_parser",
        re.compile(
            r"invalid tool call parser: (?P<name>[\w.-]+)|argument --tool-call-parser: invalid"
            r" choice: '(?P<choice>[\w.-]+)'|Tool (?:call )?parser '(?P<quoted>[\w.-]+)' not found"
        ),
    ),
    (
        "reasoning_parser",
        re.compile(
            r"[Ii]nvalid reasoning parser: (?P<name>[\w.-]+)|argument --reasoning-parser: invalid"
            r" choice: '(?P<choice>[\w.-]+)'|Reasoning parser '(?P<quoted>[\w.-]+)' not found"
        ),
    ),
)


def rule_unknown_parser(ctx: Context) -> list[Finding]:
    found = []
    for key, pattern in _PARSERS:
        hits = ctx.grep(pattern)
        if not hits:
            continue
        m = pattern.search(hits[0].text)
        name = (m["name"] or m["choice"] or m["quoted"]) if m else "?"
        kind = key.replace("_", " ")
        said = f" (the candidate's {ctx.arg_source(key)})" if ctx.arg(key) else ""
        found.append(
            Finding(
                f"unknown_{key}",
                f"the engine has no {kind} named {name!r}{said}{_version(ctx)}",
                evidence_of(hits),
                f"use a {kind} this version lists (the line quotes its choices), or the engine"
                " version the candidate's recipe names",
                "high",
            )
        )
    return found


_DIVISIBLE = re.compile(
    r"(?P<what>[\w ()-]*?)\((?P<n>\d+)\) must be divisible by (?:tensor parallel size|tp_size|"
    r"mp_size|the tensor parallel size) \((?P<tp>\d+)\)"
    r"|(?P<what2>[\w_]+) \((?P<n2>\d+)\) (?:is )?not divisible by (?:tp_size|tensor parallel size|"
    r"weight quantization block_\w+) \(?(?P<tp2>\d+)\)?"
)


def rule_tp_indivisible(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_DIVISIBLE)
    if not hits:
        return []
    m = _DIVISIBLE.search(hits[0].text)
    assert m is not None
    what = (m["what"] or m["what2"] or "a dimension").strip()
    n, tp = int(m["n"] or m["n2"]), int(m["tp"] or m["tp2"])
    ok = [d for d in (1, 2, 4, 8) if n % d == 0]
    yours = f" (the candidate's TP is {ctx.tp})" if ctx.tp else ""
    return [
        Finding(
            "tp_indivisible",
            f"{what} ({n}) does not split evenly across TP {tp}{yours}",
            evidence_of(hits),
            f"a TP size that divides {n} ({', '.join(map(str, ok))}), or a checkpoint whose"
            " shapes divide by this TP (another quantization group size / export)",
            "high",
        )
    ]


_UUID_AS_INDEX = re.compile(
    r"invalid literal for int\(\) with base 10: '(?P<id>GPU-[\w-]+|MIG-[\w/-]+|\w*GPU_UUID\w*)'"
)


def rule_gpu_uuid_index(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_UUID_AS_INDEX)
    if not hits:
        return []
    cvd = ctx.settings.get("CUDA_VISIBLE_DEVICES")
    said = f" ({ctx.source('CUDA_VISIBLE_DEVICES')})" if cvd else ""
    return [
        Finding(
            "gpu_uuid_as_index",
            f"the GPUs were named by UUID{said} where this engine reads a device index"
            " (its device-id mapping calls int() on each entry)",
            evidence_of(hits),
            "name the GPUs by index in CUDA_VISIBLE_DEVICES (map UUID to index with nvidia-smi"
            " -L), or with Docker give the container its GPUs (--gpus) and leave the index"
            " mapping to it",
            "high",
        )
    ]


_WEIGHTS_MISSING = re.compile(
    r"Cannot find any model weights with|does not appear to have a file named"
    r"|is not a safetensors repo|EntryNotFoundError|No such file or directory: '[^']*"
    r"(?:config\.json|\.safetensors|tokenizer[\w.]*|\.gguf)'"
)


def rule_weights_missing(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_WEIGHTS_MISSING)
    if not hits:
        return []
    fmt = ctx.arg("load_format")
    remedy = (
        "check the snapshot holds every file of the pinned revision (huggingface-cli download"
        " REPO --revision REV into the cache the engine reads)"
    )
    if fmt and fmt != "auto":
        remedy += (
            f"; {ctx.arg_source('load_format')} asks for that format only: the snapshot must"
            " have those files"
        )
    return [
        Finding(
            "model_files_missing",
            "the model snapshot the engine read lacks files it needs (weights, config or"
            " tokenizer)",
            evidence_of(hits),
            remedy,
            "medium",
        )
    ]


_DEPENDENCY = re.compile(r"(?P<pkg>[\w-]+) is required for (?P<what>[\w ]+?)(?: quantization)?\.")


def rule_missing_dependency(ctx: Context) -> list[Finding]:
    hits = [
        ln for ln in ctx.grep(_DEPENDENCY) if "ImportError" in ln.text or "pip install" in ln.text
    ]
    if not hits:
        return []
    m = _DEPENDENCY.search(hits[0].text)
    assert m is not None
    return [
        Finding(
            "missing_dependency",
            f"the engine build lacks the Python package {m['pkg']!r} that its {m['what'].strip()}"
            " path imports",
            evidence_of(hits),
            f"use an image that includes {m['pkg']} (a pinned derived image, recorded with its"
            " digest), not an install into the running container",
            "high",
        )
    ]


# llama.cpp's GGUF reader: what it says before "error loading model" about the file itself.
_GGUF_BAD = re.compile(
    r"gguf_init_from_\w+: (?:invalid magic characters|failed to read|number of tensors .* but"
    r" must be|tensor .* data is not within the file bounds|invalid \w+)"
)


def rule_model_file_corrupt(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_GGUF_BAD)
    if not hits:
        return []
    return [
        Finding(
            "model_file_corrupt",
            "the model file is not a readable GGUF (bad magic, a header that does not parse, or"
            " tensor data past the end of the file: a corrupt or partial download, or another"
            " format)",
            evidence_of(hits),
            "download the file again and check its sha256 against the pinned one; check the"
            " path names the .gguf itself (not a folder or a safetensors checkpoint)",
            "high",
        )
    ]
