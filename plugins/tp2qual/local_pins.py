"""Pins a local step fills in. A candidate file may write a pin as ``{some_name}`` where the
value is only known on the machine that runs it (a local image build's id, the commit of a
draft model downloaded into the hub cache): it is read from ``TP2QUAL_SOME_NAME``, else from the
file ``.cache/some-name`` in the candidate file's folder or one above it, else the working
directory. Unresolved, ``value`` is None and ``source`` says where it looked."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tp2qual.exceptions import CandidateError

PLACEHOLDER = re.compile(r"^\{([a-z0-9_]+)\}$")


@dataclass(frozen=True)
class Pin:
    """A pin as written, what it resolved to and from where."""

    raw: str
    value: str | None
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"raw": self.raw, "value": self.value, "source": self.source}


@dataclass(frozen=True)
class PinRule:
    """Which field a pin is, and what a resolved value must look like."""

    field: str
    valid: re.Pattern[str]
    what: str  # the valid form, in words


def resolve_local_pin(
    raw: str,
    rule: PinRule,
    candidate_path: Path,
    environ: Mapping[str, str] | None = None,
    candidate: str = "",
) -> Pin:
    """``raw`` as written when it is no placeholder; else filled as the module says. A value
    that is not of the rule's form raises CandidateError naming the field and where it was."""
    match = PLACEHOLDER.match(raw)
    if match is None:
        return Pin(raw, raw, "candidate file")
    key = match.group(1)
    env_name = "TP2QUAL_" + key.upper()
    value = (environ if environ is not None else os.environ).get(env_name, "").strip()
    if value:
        return Pin(raw, _checked(value, f"${env_name}", rule, candidate), f"${env_name}")
    file_name = key.replace("_", "-")
    for folder in [*candidate_path.resolve().parents, Path.cwd()]:
        path = folder / ".cache" / file_name
        if path.is_file():
            text = path.read_text(encoding="utf-8").strip()
            return Pin(raw, _checked(text, str(path), rule, candidate), str(path))
    return Pin(raw, None, f"${env_name} unset and no .cache/{file_name} above {candidate_path}")


def _checked(value: str, where: str, rule: PinRule, candidate: str) -> str:
    if not rule.valid.fullmatch(value):
        raise CandidateError(
            f"{rule.field}: {where} holds {value[:80]!r}, not {rule.what}", candidate=candidate
        )
    return value
