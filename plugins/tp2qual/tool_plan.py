"""What gate 05 will judge for a candidate, for ``--plan``: its modes, the calls per mode (N)
and the failure rate N passing calls exclude (``checks.tool_power``), judged against the
candidate's tolerance or "not judged: no power", and the call after a long prompt."""

from __future__ import annotations

from tp2qual.candidate import Candidate
from tp2qual.checks.tool_modes import long_aim, long_base
from tp2qual.checks.tool_power import power_statement


def tool_call_lines(candidate: Candidate) -> list[str]:
    if why := candidate.not_applicable("tool_calls"):
        return [f"not applicable: {' '.join(why.split())}"]
    s = candidate.gate("tool_calls")
    n, tolerance = int(s["repeats"]), float(s["max_failure_rate"])
    judged, said = power_statement(n, tolerance)
    power = said.split(": ", 1)[1] if judged else said
    lines = [
        f"modes {', '.join(s['modes'])}: N = {n} calls each on one shared prefix",
        f"all passing: {power}",
    ]
    fill, base = float(s["long_fill"]), long_base(s["modes"])
    if fill > 0 and base is not None:
        wanted = long_aim(candidate.max_model_len, fill, int(s["max_tokens"]))[0]
        lines.append(
            f"one {base} call after a prompt of at least {wanted} tokens ({fill:.0%} of "
            f"{candidate.max_model_len})"
        )
    else:
        lines.append("no call after a long prompt (long_fill 0)")
    return lines
