"""What the suite knows about one engine, as data: the typed description each engine module fills.

One frozen ``Engine`` per engine kind (``engines/vllm.py``, ``sglang.py``, ``llamacpp.py``), as
testcontainers-python keeps one module per technology: its sampling field names, identity and
KV-capacity endpoints, metrics, tool-call finish rules, over-length behaviour, error envelopes
and the log lines the suite reads, each with the file and version it came from (``sources``).
Data and tiny pure functions only: no I/O, nothing from the layers below.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# A tool call that ends as OpenAI's does: what every engine says unless its module says otherwise.
DEFAULT_TOOL_FINISH = frozenset({"tool_calls"})


@dataclass(frozen=True)
class ErrorEnvelope:
    """One shape of a JSON error body, and where the message sits in it.

    ``key`` None: the body itself is the error (``{"object": "error", "message": …}``);
    otherwise the error is the object under ``key`` (OpenAI's ``{"error": {"message": …}}``).
    """

    name: str
    key: str | None

    def error_of(self, body: Any) -> dict[str, Any] | None:
        """The error object of ``body`` in this shape, or None when ``body`` is not one."""
        if not isinstance(body, Mapping):
            return None
        inner = body if self.key is None else body.get(self.key)
        if not isinstance(inner, Mapping):
            return None
        if self.key is None and inner.get("object") != "error":
            return None
        return dict(inner) if isinstance(inner.get("message"), str) else None


# OpenAI's shape, also vLLM's (``ErrorResponse{error: ErrorInfo}``, vLLM 0.32.0
# ``entrypoints/serve/engine/protocol.py``) and SGLang 0.5.23's streamed error chunk
# (``serving_base.py`` ``create_streaming_error_response``: ``{"error": ErrorResponse}``).
OPENAI_ERROR = ErrorEnvelope("openai: {error: {message, type, code}}", "error")
# SGLang's own ``ErrorResponse`` (``object: "error"``, message, type, param, code) as the whole
# body: its non-streamed 400 (0.5.23 ``serving_base.py`` ``create_error_response``), and the
# bodies NVIDIA-NeMo/Switchyard PR #426 quotes from v0.5.15-0.5.17.
OBJECT_ERROR = ErrorEnvelope("sglang: {object: error, message, type, code}", None)
ENVELOPES: tuple[ErrorEnvelope, ...] = (OPENAI_ERROR, OBJECT_ERROR)


@dataclass(frozen=True)
class OverLength:
    """What the engine answers a prompt over its context bound with.

    ``plain`` / ``streamed``: in words, non-streamed and streamed. ``rejects_in_stream``: the
    engine may reject a streamed prompt inside an HTTP 200 stream (an error chunk) instead of
    with a 4xx: its way, recorded as such, not a silent truncation. ``messages``: regexes of the
    engine's own over-length messages (the evidence says whether the rejection named the length).
    """

    plain: str
    streamed: str
    rejects_in_stream: bool = False
    messages: tuple[str, ...] = ()
    in_stream_note: str = ""  # what the evidence says of a rejection inside a stream

    def names_length(self, message: str) -> bool:
        return any(re.search(pattern, message) for pattern in self.messages)


@dataclass(frozen=True)
class KvCapacity:
    """Where the engine states its KV capacity: a GET on the first of ``paths`` that is not a
    404, and ``read`` of its body (text or JSON) giving ``fact``; None when it is not stated."""

    fact: str
    paths: tuple[str, ...]
    read: Callable[[Any], int | None]


@dataclass(frozen=True)
class KernelLine:
    """A log line by which the engine says which kernel or backend it chose: ``kind`` (attention,
    moe, gemm, all_reduce …) and a regex whose ``value`` group names the choice."""

    kind: str
    pattern: str


Capability = tuple[int, int]  # CUDA compute capability (major, minor): SM 12.0 is (12, 0)


@dataclass(frozen=True)
class KvSupport:
    """One attention backend serving some KV-cache dtypes on a range of compute capabilities
    (both ends included), as the pinned engine's source says at ``source``."""

    backend: str  # the engine's --attention-backend value
    kv_dtypes: frozenset[str]  # its --kv-cache-dtype values
    lowest: Capability
    highest: Capability
    source: str

    def serves(self, kv_dtype: str, capability: Capability) -> bool:
        return kv_dtype in self.kv_dtypes and self.lowest <= capability <= self.highest

    def on(self, capability: Capability) -> bool:
        return self.lowest <= capability <= self.highest


@dataclass(frozen=True)
class Control:
    """A baseline control a launch sets by flag: ``on`` / ``off`` flags, or one ``valued`` flag.
    ``note`` says, with its source, what it changes where that is not obvious."""

    name: str
    on: tuple[str, ...] = ()
    off: tuple[str, ...] = ()
    valued: str | None = None
    note: str = ""


@dataclass(frozen=True)
class MemoryRule:
    """The flag giving the engine its share of each GPU's memory, and the headroom the engine's
    own default leaves outside it (``headroom_gib(gpu_gib)``), with its source."""

    flag: str
    default: str  # what the engine does without the flag, in words
    headroom_gib: Callable[[float], float]
    headroom_words: str  # the rule, and where it is written


@dataclass(frozen=True)
class StepWatch:
    """How the engine says a model step is late and when it gives up on it (the diagnosis's
    ``stalled_step``). ``waiter`` (who waits on the workers' answer) logs ``wait`` (group ``s``:
    the seconds) every ``interval_var`` seconds, and ``gave_up`` (group ``method``: the call) once
    ``timeout_var`` (default ``timeout_default_s``) ran out; ``wait_said`` / ``gave_up_said``:
    those lines in words (``{s}``, ``{method}`` filled in). Neither line names a rank:
    ``no_rank`` says why, and ``worker`` is a worker process's title, to dump its stack."""

    wait: str
    wait_said: str
    gave_up: str
    gave_up_said: str
    interval_var: str
    timeout_var: str
    timeout_default_s: int
    waiter: str
    worker: str
    no_rank: str


@dataclass(frozen=True)
class Evidence:
    """Whether one of the engine's facts was seen in a real answer of the engine.

    ``fact``: an ``Engine`` field or ``sources`` key, or ``diagnosis:<rule>`` (a diagnosis rule
    the engine's logs feed), or ``<module>:<name>`` for a fact kept outside the engine module.
    Either ``capture`` (files of a real answer or log, paths from the repository root, globs
    allowed) with the ``tests`` that read it (``plugins/tests/<file>.py::<test>``), or
    ``source_only``: why no real capture holds it (a GPU-only path, a parser that needs another
    model's tokenizer). ``note``: what the capture does not show, or where the real answer
    differed from the reading and what changed.
    """

    fact: str
    capture: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    source_only: str = ""
    note: str = ""


@dataclass(frozen=True)
class Engine:
    kind: str  # candidate ``engine.kind``
    title: str  # how the evidence names it
    # Greedy, the distribution untruncated, no penalty: the engine's own request field names.
    neutral_sampling: Mapping[str, float | int]
    # The suite's sampling name -> the engine's (``[gates.request].sampling`` is written once).
    sampling_names: Mapping[str, str] = field(default_factory=dict)
    # GET paths that say the engine's version (JSON ``version``), tried in order; 404 -> next.
    identity_paths: tuple[str, ...] = ()
    # Prometheus histograms per server-side figure (``ttft_s``, ``itl_s``, ``e2e_s``), newest
    # name first; empty: the engine exports none (``metrics_path`` None: no /metrics at all).
    metrics_path: str | None = None
    histograms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Where the server exports cumulative counters instead: per phase (``decode``, ``prompt``),
    # the (seconds, tokens) counters whose deltas give seconds per token (``perf/metrics.py``).
    metric_counters: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    kv_capacity: KvCapacity | None = None
    # tool_choice mode ("named", "required", "auto") -> the finish reasons a correct call may
    # end with, and the rule in words; modes not named end "tool_calls".
    tool_finish: Mapping[str, tuple[frozenset[str], str]] = field(default_factory=dict)
    over_length: OverLength = OverLength("HTTP 4xx", "HTTP 4xx")
    envelopes: tuple[ErrorEnvelope, ...] = (OPENAI_ERROR,)
    env_prefix: str | None = None  # the environment variables the engine owns
    # The flag that bounds the requests served at once, and what the engine admits without it
    # (a baseline sets it to 1: docs/campaign.md); None: the suite sets no bound for it.
    admission: tuple[str, str] | None = None
    # How a launch names the engine's server: ``-m MODULE`` or ``SCRIPT SUBCOMMAND``; the
    # arguments after it are the engine's own (gate 00 asks its parser about them).
    entry_modules: tuple[str, ...] = ()
    entry_script: tuple[str, str] | None = None
    # The Python package a process launch serves from, where it runs in the suite's own Python:
    # (import name, distribution); a candidate of this engine cannot run here without it.
    python_package: tuple[str, str] | None = None
    # Log lines the suite reads, by name -> regex (checks compile them; a log whose engine is
    # not known is read through ``engines.any_engine_line``).
    log_lines: Mapping[str, str] = field(default_factory=dict)
    # The stamp the engine's own logger puts on its lines where it is not ISO's or glog's: a
    # regex of five groups, month, day, hour, minute, second (the diagnosis times a hang by it).
    log_stamp: str | None = None
    # A model step the engine logs as late, and gives up on (``checks/diagnosis/steps.py``).
    step_watch: StepWatch | None = None
    # The lines that name the backend the engine chose (``checks/kernels.py`` reads them), and
    # the launch flags that ask for one: flag -> the ``KernelLine.kind`` it asks for.
    kernel_lines: tuple[KernelLine, ...] = ()
    backend_flags: Mapping[str, str] = field(default_factory=dict)
    # Which attention backend serves which KV-cache dtype on which GPUs (``checks/kv_support``):
    # the two flags, what the engine does when no backend is named, and the rows it knows.
    kv_flags: tuple[str, str] = ("--attention-backend", "--kv-cache-dtype")
    kv_default: str = "auto"  # the --kv-cache-dtype value when the flag is not given
    kv_unnamed: str = ""  # how the engine picks a backend when none is named, with its source
    kv_picks: tuple[str, ...] = ()  # the order it tries backends in, where known
    kv_support: tuple[KvSupport, ...] = ()
    # The controls --plan compares across candidates of this engine, and its memory share.
    controls: tuple[Control, ...] = ()
    memory: MemoryRule | None = None
    # Gate 07's reread (``/v1/completions`` with ``echo`` and ``logprobs``): where a prompt
    # token's logprob is placed (0: its own row; 1: the previous row's top list,
    # ``checks/agreement/rows.py``); None: the engine cannot reread, and gate 07 says so.
    reread_shift: int | None = None
    # fact (a field above, or "field.key") -> where it came from: file and version, or seen where.
    sources: Mapping[str, str] = field(default_factory=dict)
    # Which facts a real answer of the engine holds, and which are source only, and why
    # (``plugins/tests/test_engine_evidence.py`` holds every fact to one or the other).
    evidence: tuple[Evidence, ...] = ()

    def tool_finish_for(self, mode: str) -> tuple[frozenset[str], str]:
        """The finish reasons a correct call in ``mode`` ends with (a ``-stream`` mode: its
        base mode's), and the rule that says so."""
        base = mode.removesuffix("-stream")
        return self.tool_finish.get(base, (DEFAULT_TOOL_FINISH, "a tool call ends 'tool_calls'"))

    def log_line(self, name: str) -> re.Pattern[str]:
        return re.compile(self.log_lines[name])
