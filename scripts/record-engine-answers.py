#!/usr/bin/env python3
"""Record what each shipped campaign launch's engine parser answers, from the engines' wheels
(the parser venvs of scripts/install-engine-parsers.sh), into
plugins/tp2qual/engines/recorded_answers.json: what `pytest --plan` shows, starting nothing.
plugins/tests/test_campaign_engine_check.py asks the parsers again and fails when this file
says otherwise. Run from the checkout with its venv active:

    scripts/install-engine-parsers.sh && python scripts/record-engine-answers.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tp2qual.candidate import load_candidates
from tp2qual.serving.parser_venvs import RECORDED, ask_parser

CANDIDATES = Path(__file__).resolve().parents[1] / "candidates"


def main() -> int:
    records = {}
    for candidate in load_candidates([CANDIDATES]):
        if candidate.tp < 2 or not candidate.gpus.get("count"):
            continue  # the campaign: TP2 on GPUs
        if candidate.gate("throughput").get("protocol"):
            continue  # a capacity-protocol lane launches its baseline, byte for byte
        asked = ask_parser(candidate)
        if asked is None:
            print(f"{candidate.name}: no parser venv for {candidate.engine} "
                  f"{candidate.spec['engine'].get('version')}", file=sys.stderr)  # fmt: skip
            return 1
        records[candidate.name] = asked["record"]
        head = "accepted" if asked["record"]["accepted"] else "REFUSED"
        print(f"{candidate.name}: {head} in {asked['seconds']} s")
    RECORDED.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {RECORDED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
