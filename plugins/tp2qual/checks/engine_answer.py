"""Judge the engine's own answer on a candidate's launch (``serving/engine_check_entry.py``):
what the engine refuses, in its own words, and what it accepts but ignores here (notices).

Pure: the answer is the JSON the entry printed, plus what the suite added where the engine could
not be run (``static``: the shipped table's problems, ``tp2qual.engine_env``). ``verify`` runs
the same judgement on the recorded answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tp2qual.checks.verdict import Verdict
from tp2qual.engines import engine_for

# Platform words in vLLM's envs.py comments ("(CPU backend only)", "ROCm only", …).
_PLATFORM_WORDS = {
    "cpu": r"\bCPU\b",
    "rocm": r"\bROCm\b|\bAMD\b",
    "tpu": r"\bTPU\b",
    "xpu": r"\bXPU\b",
    "cuda": r"\bCUDA\b|\bNVIDIA\b",
}
_CONDITIONAL = re.compile(r"\bignored\b|\bonly\b|\bno effect\b|\bunless\b", re.IGNORECASE)


def engine_args(engine: str, argv: Sequence[str]) -> list[str] | None:
    """The arguments the engine's parser reads, from the full launch argv: what follows
    ``-m <entry module>`` or ``<engine> serve``; None when the argv names neither."""
    argv = list(argv)
    for i, part in enumerate(argv[:-1]):
        if part == "-m" and argv[i + 1] in engine_for(engine).entry_modules:
            return argv[i + 2 :]
    script, sub = engine_for(engine).entry_script or ("", "")
    for i, part in enumerate(argv[:-1]):
        if part.rsplit("/", 1)[-1] == script and argv[i + 1] == sub:
            return argv[i + 2 :]
    return None


def parser_error(text: str) -> str:
    """argparse's own message without its usage block: from ``prog: error:`` on."""
    found = re.search(r"^\S[^\n]*?: error: .*", text, re.MULTILINE | re.DOTALL)
    return (found.group(0) if found else text).strip()


def judge(answer: Mapping[str, Any], *, platform: str) -> Verdict:
    """Refusals (the engine's words) fail; notices are recorded beside a pass. ``platform``
    is where the candidate serves: ``cuda`` with GPUs, ``cpu`` without."""
    engine = f"{answer.get('engine')} {answer.get('version') or ''}".strip()
    refusals: list[str] = []
    notices: list[str] = []
    if not answer.get("importable"):
        static = answer.get("static") or {}
        basis = "its own registry" if "env" in answer else static.get("source", "no table")
        notices.append(
            f"{engine}: its parser does not import here ({answer.get('import_error')}): the "
            f"arguments are not checked by the engine; engine variables checked against {basis}"
        )
        refusals += [] if "env" in answer else list(static.get("problems", []))
    else:
        refusals += _parse_refusals(engine, answer) + _abbreviations(engine, answer)
        found, said = _named_parsers(engine, answer)
        refusals += found
        notices += said
    for name, fact in sorted((answer.get("env") or {}).items()):
        refusal, notice = _env_fact(engine, name, fact, platform)
        refusals += [refusal] if refusal else []
        notices += [notice] if notice else []
    measures = {"checked_by": answer.get("parser") or "static table", "refusals": refusals,
                "notices": notices, "parser_platform": platform_words(answer)}  # fmt: skip
    if refusals:
        return Verdict.failed("; ".join(refusals), **measures)
    return Verdict.passed(**measures)


def _parse_refusals(engine: str, answer: Mapping[str, Any]) -> list[str]:
    parse = answer.get("parse") or {}
    where = answer.get("parser", "its parser")
    if not parse.get("accepted"):
        return [f"{engine} refuses the arguments ({where}): {parser_error(parse.get('error', ''))}"]
    if parse.get("validation_error"):
        return [f"{engine} refuses the arguments (its serve checks): {parse['validation_error']}"]
    return []


def platform_words(answer: Mapping[str, Any]) -> str:
    """On which of the engine's platforms its parser was built, in words."""
    platform = answer.get("platform") or {}
    if not platform:
        return "the engine's own"
    if platform.get("forced"):
        return (
            f"{platform['device_type']}, forced: the engine detected none here "
            f"({platform.get('detected')}); its parser's options do not depend on it"
        )
    return f"{platform['device_type']} (the engine's own detection)"


def _named_parsers(engine: str, answer: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """A tool-call or reasoning parser name the engine's registry lacks is refused in the
    engine's words; with a parser plugin given, the plugin may register it at start: a notice."""
    refusals: list[str] = []
    notices: list[str] = []
    for flag, fact in sorted((answer.get("parsers") or {}).items()):
        if fact.get("registered"):
            continue
        said = fact.get("refusal") or fact.get("error") or "not registered"
        line = (
            f"{flag} {fact.get('name')}: {engine} ({fact.get('registry', 'its registry')}): {said}"
        )
        if fact.get("plugin"):
            notices.append(f"{line}; {fact['plugin']} may register it at start: not judged")
        else:
            refusals.append(line)
    return refusals, notices


def _abbreviations(engine: str, answer: Mapping[str, Any]) -> list[str]:
    """A flag the engine reads only as a prefix of a longer one. The engine accepts it (argparse's
    allow_abbrev: vLLM 0.32.0 reads ``--max-num-seq 1`` as ``--max-num-seqs 1``), but the suite
    reads the launch by full flag names (the one-request rule, lanes), so it would misread it:
    refused by the suite, with the engine's reading stated."""
    found = (answer.get("parse") or {}).get("abbreviations") or {}
    return [
        f"{written}: not a {engine} flag; {engine} would read it as {full} (argparse takes a "
        f"unique prefix), and the suite reads flags by full name: write {full}"
        for written, full in sorted(found.items())
    ]


def _env_fact(
    engine: str, name: str, fact: Mapping[str, Any], platform: str
) -> tuple[str | None, str | None]:
    if not fact.get("known"):
        return f"launch.env.{name}: {engine}: {fact.get('error')}", None
    if fact.get("error"):
        return f"launch.env.{name}: {engine} rejects its value: {fact['error']}", None
    if fact.get("deprecated"):
        return None, f"launch.env.{name}: {engine}: {fact['deprecated']}"
    return None, _comment_notice(engine, name, str(fact.get("comment") or ""), platform)


def _comment_notice(engine: str, name: str, comment: str, platform: str) -> str | None:
    """A known variable whose registry comment says it is read only somewhere: ignored here
    when that is another platform, conditional otherwise."""
    platforms = {p for p, words in _PLATFORM_WORDS.items() if re.search(words, comment)}
    said = f"{engine}'s registry says {comment!r}"
    if not _CONDITIONAL.search(comment):
        return None
    if platforms and platform not in platforms:
        return f"launch.env.{name}: ignored on {platform}: {said}"
    return None if platforms else f"launch.env.{name}: read only under a condition: {said}"
