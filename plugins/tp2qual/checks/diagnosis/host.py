"""Rules for what the host around the engine lacks: a port already taken, model files missing
while offline. Each names the message, a cause, and a remedy checked against the settings in
force."""

from __future__ import annotations

import re

from tp2qual.checks.diagnosis.model import Context, Finding, evidence_of, is_set

_BIND = re.compile(r"Errno 98|EADDRINUSE|[Aa]ddress already in use|address already in use")
_PORT = re.compile(r"\('[\d.]*', (?P<p>\d+)\)|:(?P<q>\d{2,5})\b")


def rule_port_in_use(ctx: Context) -> list[Finding]:
    # NCCL's own bind warnings (RAS, bootstrap) are notices; this is the engine's or torch's.
    hits = [ln for ln in ctx.grep(_BIND) if "NCCL WARN" not in ln.text]
    if not hits:
        return []
    store = any(re.search(r"TCPStore|c10d|rendezvous", ln.text) for ln in ctx.lines)
    what = "torch.distributed's rendezvous port" if store else "the server's port"
    return [
        Finding(
            "port_in_use",
            f"{what} was already taken when the engine tried to bind it",
            evidence_of(hits),
            "stop whatever holds it (often a previous server that did not exit: ss -ltnp), or"
            " start on a free port"
            + (" (MASTER_PORT / the engine's dist-init port)" if store else ""),
            "high",
        )
    ]


_OFFLINE = re.compile(
    r"OfflineModeIsEnabled|LocalEntryNotFoundError|outgoing traffic has been disabled"
    r"|offline mode is enabled|find the requested files in the (?:local|disk) cache"
    r"|Cannot find an appropriate cached snapshot"
)
_NO_NET = re.compile(
    r"Failed to resolve '?huggingface\.co|Max retries exceeded with url: /api/models"
)


def rule_offline_missing(ctx: Context) -> list[Finding]:
    hits = ctx.grep(_OFFLINE)
    if hits:
        named = [k for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if is_set(ctx, k, "1")]
        said = f" ({', '.join(ctx.source(k) for k in named)})" if named else ""
        return [
            Finding(
                "offline_model_missing",
                f"downloads are disabled{said} and the model's files are not in the cache the"
                " engine reads",
                evidence_of(hits),
                "put the files there first (huggingface-cli download REPO --revision REV into"
                " the HF_HOME / HF_HUB_CACHE the engine uses; mount it into the container), or"
                " pass the local snapshot path as the model",
                "high",
            )
        ]
    hits = ctx.grep(_NO_NET)
    if not hits:
        return []
    offline = is_set(ctx, "HF_HUB_OFFLINE", "1")
    return [
        Finding(
            "hub_unreachable",
            "the engine tried to reach huggingface.co and there is no network",
            evidence_of(hits),
            "the files must come from the cache: check they are there (revision included)"
            if offline
            else "pre-download the model into the cache and set HF_HUB_OFFLINE=1",
            "high",
        )
    ]
