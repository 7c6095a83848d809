"""How long ``verify`` takes on a run folder, with and without ``--rehash``.

    python benchmarks/verify_time.py results/latest [--repeats 5]

Times ``verify_run`` (what ``python -m tp2qual verify`` runs) ``--repeats`` times each way and
prints the median and the range, the run's size (files, bytes, raw exchanges re-checked) and the
bytes ``--rehash`` hashed again (the model files ``identity/model.json`` names). The first
``--rehash`` pass may read the weights from disk; later ones from the page cache: both are
printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from tp2qual.evidence.verify import resolve_run, verify_run


def rehashed_bytes(run_dir: Path) -> int:
    """Bytes of model files the run's identity records name (what --rehash reads)."""
    total = 0
    for model in run_dir.glob("*/identity/model.json"):
        facts = json.loads(model.read_text())
        for part in (facts, facts.get("draft") or {}):
            if part.get("file") and Path(part["file"]).is_file():
                total += Path(part["file"]).stat().st_size
            total += sum(
                Path(f["target"]).stat().st_size
                for f in part.get("files") or []
                if f.get("target") and Path(f["target"]).is_file()
            )
    return total


def timed(run_dir: Path, repeats: int, rehash: bool) -> list[float]:
    seconds = []
    for _ in range(repeats):
        began = time.perf_counter()
        result = verify_run(run_dir, rehash=rehash)
        seconds.append(time.perf_counter() - began)
        if not result.ok:
            sys.exit(f"verify found problems: {result.summary()}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    run_dir = resolve_run(args.run)
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    print(f"run {run_dir.name}: {len(files)} files, {sum(p.stat().st_size for p in files):,} bytes")
    print(verify_run(run_dir).summary())
    for rehash in (False, True):
        seconds = timed(run_dir, args.repeats, rehash)
        print(
            f"verify{' --rehash' if rehash else ''}: median {statistics.median(seconds):.3f} s "
            f"(min {min(seconds):.3f}, max {max(seconds):.3f}, first {seconds[0]:.3f}; "
            f"n={len(seconds)})"
        )
    print(f"--rehash read {rehashed_bytes(run_dir):,} bytes of model files again")


if __name__ == "__main__":
    main()
