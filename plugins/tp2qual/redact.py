"""Secrets never reach evidence: redact tokens, keys, secrets and passwords.

Two layers: names that look secret have their values replaced in any mapping we record, and the
values of such variables in the environment are scrubbed from any text we write (a server may echo
its own token into its log).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

MASK = "***REDACTED***"
# A name is secret when its last word is one of these (HF_TOKEN, OPENAI_API_KEY, DB_PASSWORD,
# AWS_SECRET_ACCESS_KEY), or it contains SECRET/PASSWORD anywhere; not MAX_TOKENS or TOKENIZER.
_SECRET_NAME = re.compile(
    r"((^|_)(TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASS|CREDENTIALS?|AUTH)$)|SECRET|PASSWORD",
    re.IGNORECASE,
)
_MIN_SECRET_LEN = 6  # shorter values would scrub ordinary words out of logs


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name.replace("-", "_")))


class Redactor:
    """Scrubs the known secret values from text; built from every environment we pass on."""

    def __init__(self, *environments: Mapping[str, str]):
        values = {
            value
            for env in (os.environ, *environments)
            for name, value in env.items()
            if is_secret_name(name) and len(value) >= _MIN_SECRET_LEN
        }
        # Longest first, so a secret containing another is masked whole.
        self._values = sorted(values, key=len, reverse=True)

    def text(self, text: str) -> str:
        for value in self._values:
            text = text.replace(value, MASK)
        return text

    def mapping(self, env: Mapping[str, str]) -> dict[str, str]:
        return {k: (MASK if is_secret_name(k) else self.text(v)) for k, v in env.items()}

    def argv(self, argv: list[str]) -> list[str]:
        """Mask values that follow a secret-looking flag (``--api-key X``) and known values."""
        out: list[str] = []
        hide_next = False
        for arg in argv:
            if hide_next:
                out.append(MASK)
                hide_next = False
                continue
            flag, eq, _value = arg.partition("=")
            if flag.startswith("-") and is_secret_name(flag.lstrip("-").replace("-", "_")):
                out.append(f"{flag}={MASK}" if eq else arg)
                hide_next = not eq
                continue
            out.append(self.text(arg))
        return out
