"""Does the engine serve the launch's KV-cache dtype with its attention backend on these GPUs?

Known before start from the engine module's ``kv_support`` rows (each with the pinned source's
file and line): a combination the engine's source refuses on the GPUs' compute capability is
refused, naming the rows and the combinations that would work there. A backend the table does
not hold, or no GPU to read a capability from, is not judged, and said so. Pure: the caller
passes the argv and the capability (NVML's at run time; the named GPU's for ``--plan``).
"""

from __future__ import annotations

from collections.abc import Sequence

from tp2qual.checks.verdict import Verdict
from tp2qual.engines import Engine
from tp2qual.engines.engine import Capability, KvSupport

# Compute capabilities of the GPUs candidate files name (``gpus.name_contains``), from NVIDIA's
# CUDA GPU list (developer.nvidia.com/cuda-gpus): what --plan judges against before NVML can.
KNOWN_CAPABILITY: dict[str, Capability] = {"RTX PRO 6000": (12, 0), "H200": (9, 0)}


def capability_of_name(name_contains: str | None) -> Capability | None:
    for name, capability in KNOWN_CAPABILITY.items():
        if name_contains and name.lower() in name_contains.lower():
            return capability
    return None


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` (``--flag v`` or ``--flag=v``; the last one wins, as argparse)."""
    found = None
    args = [str(a) for a in argv]
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


def sm(capability: Capability) -> str:
    return f"SM {capability[0]}.{capability[1]}"


def span(row: KvSupport) -> str:
    if row.lowest == (0, 0) and row.highest >= (99, 0):
        return "any GPU"
    high = "" if row.highest >= (99, 0) else f"{row.highest[0]}.{row.highest[1]}"
    return (
        f"{sm(row.lowest)}-{high}" if high != f"{row.lowest[0]}.{row.lowest[1]}" else sm(row.lowest)
    )


def _combos(rows: Sequence[KvSupport], backend: str | None, kv: str, here: Capability) -> list[str]:
    """What would work on ``here``: other backends for this dtype, other dtypes on this one."""
    out = [f"--attention-backend {r.backend} --kv-cache-dtype {kv}" for r in rows
           if r.serves(kv, here) and r.backend != backend]  # fmt: skip
    for r in rows:
        if r.backend == backend and r.on(here):
            out += [
                f"--attention-backend {backend} --kv-cache-dtype {d}" for d in sorted(r.kv_dtypes)
            ]
    return list(dict.fromkeys(out))


def judge_kv(engine: Engine, version: str, argv: Sequence[str], capability: Capability | None,
             where: str) -> Verdict:  # fmt: skip
    """``where`` says whose capability it is (``NVML``, ``gpus.name_contains 'RTX PRO 6000'``)."""
    backend_flag, kv_flag = engine.kv_flags
    backend, kv = flag_value(argv, backend_flag), flag_value(argv, kv_flag) or engine.kv_default
    rows = engine.kv_support
    asked = f"{backend_flag} {backend or '(not named)'} {kv_flag} {kv}"
    measures = {"asked": asked, "capability": list(capability) if capability else None,
                "capability_from": where}  # fmt: skip
    if not rows:
        return Verdict.passed(judged=False, why=f"{engine.kind}: no KV-support table", **measures)
    if capability is None:
        return Verdict.passed(
            judged=False, why=f"no compute capability known ({where})", **measures
        )
    name = f"{engine.kind} {version}"
    served = [r for r in rows if r.serves(kv, capability) and backend in (None, r.backend)]
    if served and backend is None and not engine.kv_picks:  # the engine picks per model
        return Verdict.passed(judged=False, why=f"no backend named: {engine.kv_unnamed}; "
                              f"{kv} is served on {sm(capability)} by "
                              f"{', '.join(sorted({r.backend for r in served}))}",
                              **measures)  # fmt: skip
    if served:
        picked = next((b for b in engine.kv_picks if any(r.backend == b for r in served)), None)
        by = f"{backend} serves it" if backend else f"{engine.kv_unnamed}: {picked}"
        return Verdict.passed(judged=True, why=f"{name} on {sm(capability)}: {by} "
                              f"({'; '.join(r.source for r in served)})", **measures)  # fmt: skip
    if backend is not None and all(r.backend != backend for r in rows):
        return Verdict.passed(judged=False, why=f"{backend}: not in {name}'s table", **measures)
    if backend is None and all(kv not in r.kv_dtypes for r in rows):
        return Verdict.passed(
            judged=False, why=f"{kv_flag} {kv}: not in {name}'s table", **measures
        )
    against = [r for r in rows if r.backend == backend or kv in r.kv_dtypes]
    works = _combos(rows, backend, kv, capability) or ["none in the table"]
    reason = (
        f"{name} does not serve {asked} on {sm(capability)} ({where}): "
        + "; ".join(
            f"{r.backend} {'/'.join(sorted(r.kv_dtypes))} on {span(r)}: {r.source}" for r in against
        )
        + f". On {sm(capability)} it would work with: "
        + ", ".join(works)
    )
    return Verdict.failed(reason, judged=True, works=works, **measures)
