"""Stands in for the NCCL probe on a machine without GPUs, for the closed-loop self-test: it
prints a real probe log recorded on GPUs and exits as that probe did — the failing one, unless
the remedy's variable is in its environment, then the passing one.

    python replayprobe.py --fail LOG --pass LOG --cured-by KEY=VALUE [--nprocs N --timeout S]
"""

from __future__ import annotations

import argparse
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fail", required=True)
    parser.add_argument("--pass", dest="passed", required=True)
    parser.add_argument("--cured-by", required=True, help="KEY=VALUE that makes it pass")
    args, _ = parser.parse_known_args()
    key, _, value = args.cured_by.partition("=")
    cured = os.environ.get(key) == value
    with open(args.passed if cured else args.fail, encoding="utf-8", errors="replace") as fh:
        sys.stdout.write(fh.read())
    return 0 if cured else 1


if __name__ == "__main__":
    sys.exit(main())
