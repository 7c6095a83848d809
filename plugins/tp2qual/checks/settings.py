"""Settings a serving engineer would question, said out loud by ``--plan``: a baseline control
set one way here and the other way by another candidate of the same engine with no reason
stated, and a memory share that leaves less of each GPU than the engine's own default does.

Pure: launches are argv lists; the controls and the memory rule are the engine module's
(``tp2qual.engines``, each with its source). Nothing here fails a run: the plan says it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tp2qual.engines.engine import Control, Engine


@dataclass(frozen=True)
class Launch:
    """One candidate's launch as the comparison reads it: name, argv, and ``launch.why``."""

    name: str
    argv: tuple[str, ...]
    why: Mapping[str, str] = field(default_factory=dict)


def control_state(control: Control, argv: Sequence[str]) -> tuple[str, str] | None:
    """(state, the flag that set it) as the launch leaves it, the last flag winning as in
    argparse; None when the launch leaves the engine's default."""
    found = None
    args = [str(a) for a in argv]
    for i, arg in enumerate(args):
        name, eq, inline = arg.partition("=")
        if control.valued and name == control.valued:
            found = (inline if eq else (args[i + 1] if i + 1 < len(args) else ""), name)
        elif arg in control.on:
            found = ("on", arg)
        elif arg in control.off:
            found = ("off", arg)
    return found


def _reason(control: Control, why: Mapping[str, str]) -> str | None:
    flags = (*control.on, *control.off, *([control.valued] if control.valued else []))
    return next((why[f] for f in flags if f in why), why.get(control.name))


def differing_controls(engine: Engine, mine: Launch, peers: Sequence[Launch]) -> list[str]:
    """One line per control this launch sets otherwise than a peer of the same engine sets it;
    a reason given in ``launch.why`` (by flag or control name) is shown, its absence said."""
    lines = []
    for control in engine.controls:
        here = control_state(control, mine.argv)
        if here is None:
            continue
        others: dict[str, list[str]] = {}
        for peer in peers:
            there = control_state(control, peer.argv)
            if peer.name != mine.name and there is not None and there[0] != here[0]:
                others.setdefault(f"{there[0]} ({there[1]})", []).append(peer.name)
        if not others:
            continue
        said = "; ".join(f"{state} in {', '.join(names)}" for state, names in others.items())
        reason = _reason(control, mine.why)
        because = f"why: {reason}" if reason else "no reason stated (launch.why)"
        note = f"; {control.note}" if control.note else ""
        lines.append(f"{control.name}: {here[0]} here ({here[1]}); {said}; {because}{note}")
    return lines


def memory_headroom(engine: Engine, argv: Sequence[str], gpu_gib: float | None,
                    where: str) -> list[str]:  # fmt: skip
    """What the launch's memory share leaves of each GPU, against the engine's own default."""
    rule = engine.memory
    if rule is None:
        return []
    found = control_state(Control(rule.flag, valued=rule.flag), argv)
    if found is None:
        return [f"{rule.flag} not given: {rule.default}"]
    try:
        fraction = float(found[0])
    except ValueError:
        return [f"{rule.flag} {found[0]}: not a number (the engine's parser says so at gate 00)"]
    if gpu_gib is None:
        return [f"{rule.flag} {fraction:g}: GPU memory unknown here ({where}), not judged"]
    left, wanted = (1 - fraction) * gpu_gib, rule.headroom_gib(gpu_gib)
    head = (f"{rule.flag} {fraction:g} leaves {left:.2f} GiB of each GPU's {gpu_gib:g} GiB "
            f"({where}) outside it")  # fmt: skip
    if left + 1e-9 < wanted:
        return [f"{head}: LESS than the {wanted:g} GiB headroom stated: {rule.headroom_words}"]
    return [f"{head}: at least the {wanted:.2f} GiB headroom stated: {rule.headroom_words}"]
