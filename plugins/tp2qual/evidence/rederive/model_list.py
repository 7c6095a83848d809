"""Gate 02 (model_list): each check judged again from its raw record, by the gate's own rules.

* the list: the ``models`` exchange of ``model_list.jsonl`` must list exactly the served name
  the run recorded (``checks.model_list.judge_listing``);
* the context: the ``models-context`` exchange against the recorded bound
  (``checks.model_list.judge_context``; not judged where the engine reports none);
* the version: ``identity/engine.json`` against the version the candidate stated
  (``checks.model_list.judge_version``);
* the kernels' record: ``checks.kernels.record`` again on the lines of ``server.log`` the gate
  read and the launch command the run recorded; ``kernels_chosen.json`` must be what it gives.
"""

from __future__ import annotations

from tp2qual.checks import kernels
from tp2qual.checks import model_list as checks
from tp2qual.checks.verdict import NotJudged, Verdict
from tp2qual.engines import engine_for
from tp2qual.evidence.rederive.common import GateRun, Rederived, Unrederivable, by_tag

EXCHANGES, ENGINE = "model_list.jsonl", "identity/engine.json"


def model_list(run: GateRun) -> Rederived:
    out = Rederived()
    _listing(run, out)
    _version(run, out)
    _kernels(run, out)
    return out


def _listing(run: GateRun, out: Rederived) -> None:
    raw = by_tag(run.records(EXCHANGES, required=False))
    served = str(run.recorded().get("served_name"))
    for tag, test in ((checks.LISTING, "test_lists_exactly_the_served_name"),
                      (checks.CONTEXT, "test_reported_context_is_the_bound")):  # fmt: skip
        exchange = raw.get(tag)
        if exchange is None:
            out.missing[test] = f"{EXCHANGES} {tag}"
            continue
        out.records += 1
        verdict: Verdict | NotJudged = (
            checks.judge_listing(exchange, served)
            if tag == checks.LISTING
            else checks.judge_context(exchange, run.max_model_len, run.engine)
        )
        out.judged(test, verdict, f"{EXCHANGES} {tag}", exchange=True)


def _version(run: GateRun, out: Rederived) -> None:
    test = "test_engine_is_the_stated_version"
    resolved = run.recorded()
    if "engine_version" not in resolved:  # recorded before it was (verify falls back on the spec)
        return
    stated = resolved["engine_version"]
    engine = run.json(ENGINE)
    if engine is None:
        if stated:  # stated, but the engine was never asked: the server never came up
            out.missing[test] = ENGINE
            return
        engine = {}
    out.judged(test, checks.judge_version(engine, stated), ENGINE)


def _kernels(run: GateRun, out: Rederived) -> None:
    """The record of the kernels the engine chose: read again from the first ``lines_read``
    lines of ``server.log`` (the log grows after the gate), the backends asked from the launch
    the run recorded. A run from before this record has none: nothing to do."""
    recorded = run.json(kernels.ARTIFACT)
    if recorded is None:
        return
    log = run.root / "server.log"
    if not log.is_file():
        raise Unrederivable(f"{kernels.ARTIFACT} is read from server.log, which is not on disk")
    try:
        lines = log.read_text(errors="replace").splitlines()[: int(recorded["lines_read"])]
    except (ValueError, KeyError, TypeError) as exc:
        raise Unrederivable(f"{kernels.ARTIFACT} is malformed: {exc!r}") from None
    command = run.recorded().get("command")
    new = kernels.record(engine_for(run.engine), lines, command or [])
    if command is None:  # recorded before the launch was: the asked flags cannot be re-read
        new = {k: v for k, v in new.items() if k not in ("asked", "notices")}
    out.read.append(f"server.log (first {recorded['lines_read']} lines, kernels)")
    out.compare(kernels.ARTIFACT, kernels.ARTIFACT, recorded, **new)
    out.rows[kernels.ARTIFACT] = [{**recorded, **new}]
