"""Whose fault, decided without a server: which exceptions blame the candidate
(``hooks/gating.blames_candidate``), the busy-port refusal, and where llama.cpp's version is read.
The same attributions, end to end through real inner runs, are in test_whose_fault.py and
test_malformed_replies.py.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tp2qual.candidate import Candidate, load_candidate
from tp2qual.engines import engine_for
from tp2qual.exceptions import (
    LookupTimedOut,
    MalformedReply,
    PortInUse,
    QualError,
    ResponseTimeout,
    SuiteError,
)
from tp2qual.hooks.gating import blames_candidate
from tp2qual.launch import resolve_launch
from tp2qual.redact import Redactor
from tp2qual.serving.identity import engine_identity
from tp2qual.serving.launchers.base import LauncherBase

LLAMA_CPP_PACKAGE = engine_for("llama.cpp").python_package[1]  # type: ignore[index]
MAIN = Path(__file__).resolve().parents[2]
LOCAL = MAIN / "candidates" / "smollm2-135m-local.toml"


def _module(name: str, source: str) -> types.ModuleType:
    """A module compiled from ``source``, as pytest imports a gate module (its globals, its
    ``pytestmark``); an ``assert`` in it raises from its own frame."""
    module = types.ModuleType(name)
    module.__dict__["pytest"] = pytest
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


GATE = _module("test_03_fake", "pytestmark = pytest.mark.deterministic\ndef check(): assert 0, 'x'")
GATE_LIST = _module("test_04_fake", "pytestmark = [pytest.mark.repetition]\ndef check(): assert 0")
SUITE = _module("tp2qual_fake_helper", "def check(): assert 0, 'a plain assert in the suite'")
NOT_A_GATE = _module("test_fake_other", "pytestmark = pytest.mark.slow\ndef check(): assert 0")
CALLS_SUITE = _module("test_05_fake", "pytestmark = pytest.mark.tool_calls\ndef check(): run()")
CALLS_SUITE.run = SUITE.check  # type: ignore[attr-defined]


def _raised(call: object) -> pytest.ExceptionInfo[BaseException]:
    with pytest.raises(BaseException) as caught:
        call()  # type: ignore[operator]
    return caught


@pytest.mark.parametrize(
    ("call", "blamed"),
    [
        (GATE.check, True),  # a gate's own assert: its statement about the candidate
        (GATE_LIST.check, True),
        (SUITE.check, False),  # a plain assert in suite code: a bug
        (NOT_A_GATE.check, False),  # a test module that is no gate
        (CALLS_SUITE.check, False),  # raised in the suite's helper the gate called
    ],
    ids=["gate-assert", "gate-assert-marks-list", "suite-assert", "not-a-gate", "gate-calls-suite"],
)
def test_an_assert_blames_the_candidate_only_from_a_gate_module(call, blamed) -> None:
    excinfo = _raised(call)
    assert excinfo.errisinstance(AssertionError)
    assert blames_candidate(excinfo) is blamed


@pytest.mark.parametrize(
    ("error", "blamed"),
    [
        (MalformedReply("needle: HTTP 200 without a chat completion message: {}"), True),
        (ResponseTimeout("no response within 2 s"), True),
        (PortInUse("port 8000 on 127.0.0.1 is already in use"), False),
        (LookupTimedOut("GET /version did not answer within 5 s"), False),
        (SuiteError("throughput floor(s) not derived"), False),
        (KeyError("choices"), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_which_errors_blame_the_candidate(error: BaseException, blamed: bool) -> None:
    def fail() -> None:
        raise error

    assert blames_candidate(_raised(fail)) is blamed
    assert isinstance(error, QualError) is blamed


def test_a_busy_port_is_refused_as_the_hosts_state(tmp_path: Path) -> None:
    candidate = load_candidate(LOCAL)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        launch = resolve_launch(candidate, port=port)
        launcher = LauncherBase(candidate, launch, tmp_path / "server.log", Redactor({}))
        with pytest.raises(PortInUse) as refused:
            launcher.refuse_busy_port()
    assert not isinstance(refused.value, QualError)
    assert f"port {port} on 127.0.0.1" in str(refused.value)
    assert str(refused.value).startswith(f"[{candidate.name}] ")


# --- llama.cpp's version: read in the engine's own Python, not the suite's ------------------


def _engine_venv(cache: Path, version: str) -> str:
    """A real venv under the tp2qual cache with ``llama-cpp-python`` ``version`` installed (its
    metadata: all ``importlib.metadata`` reads)."""
    venv = cache / "venvs" / "llama-elsewhere"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    info = Path(site) / f"llama_cpp_python-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {LLAMA_CPP_PACKAGE}\nVersion: {version}\n"
    )
    return "venvs/llama-elsewhere"


def test_llama_cpp_version_comes_from_launch_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TP2QUAL_CACHE", str(tmp_path))
    base = load_candidate(LOCAL)
    spec = {
        **base.spec,
        "launch": {**base.spec["launch"], "python": _engine_venv(tmp_path, "9.9.9")},
    }
    engine = engine_identity(Candidate(base.path, spec), "http://127.0.0.1:9")
    assert engine["version"] == "9.9.9", engine
    assert engine["version_source"].startswith("launch.python ("), engine
    own = engine_identity(base, "http://127.0.0.1:9")  # no launch.python: the suite's Python
    assert own["version_source"] == "the suite's Python" and own["version"] != "9.9.9", own
