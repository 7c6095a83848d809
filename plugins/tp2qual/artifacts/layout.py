"""Per-candidate evidence folder: every artifact written as it is produced, redacted.

``results/<run-id>/<candidate>/`` holds raw requests and responses (JSONL, one line per
exchange, flushed per line), JSON documents (written atomically) and the server log (written by
the launcher's log sink). Nothing is kept in memory only.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from tp2qual.redact import Redactor


def _dumps(obj: Any, **kw: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str, **kw)


class Evidence:
    def __init__(self, root: Path, redactor: Redactor):
        self.root = root
        self.redactor = redactor
        root.mkdir(parents=True, exist_ok=True)

    def path(self, rel: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def write_text(self, rel: str, text: str) -> str:
        atomic_write(self.path(rel), self.redactor.text(text))
        return rel

    def write_json(self, rel: str, obj: Any) -> str:
        return self.write_text(rel, _dumps(obj, indent=2, sort_keys=True) + "\n")

    def as_written(self, record: dict[str, Any]) -> Any:
        """``record`` as a JSONL line holds it once written: redacted, read back. A check that
        ``verify`` repeats on the record judges these bytes, never the unredacted ones."""
        return json.loads(self.redactor.text(_dumps(record, sort_keys=True)))

    def append_jsonl(self, rel: str, record: dict[str, Any]) -> str:
        with self.path(rel).open("a", encoding="utf-8") as fh:
            fh.write(self.redactor.text(_dumps(record, sort_keys=True)) + "\n")
            fh.flush()
        return rel


def atomic_write(path: Path, text: str) -> Path:
    """Write ``path`` whole or not at all: a crash leaves the previous version, never half."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # workers may write the same file
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


FINDING = "finding.json"
MANIFEST = "manifest.json"
REPORT = "report.html"
NOT_HASHED = (MANIFEST, REPORT)  # the manifest itself; the report is regenerated from the run


_hashed: dict[tuple[str, int, int], str] = {}


def sha256_unchanged(path: Path) -> str:
    """sha256, hashed again only when the file's size or mtime changed. The manifest is rewritten
    after every gate test, and most artifacts (and a model file) do not change in between;
    ``verify`` always hashes afresh with ``sha256_of``."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _hashed:
        _hashed[key] = sha256_of(path)
    return _hashed[key]


def manifest(run_dir: Path, *, exclude: tuple[str, ...] = ("manifest.json",)) -> dict[str, Any]:
    """sha256 and size of every file under the run folder, by relative path."""
    files = {}
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(run_dir).as_posix()
        if path.name in exclude or rel.endswith(".tmp"):
            continue
        files[rel] = {"sha256": sha256_unchanged(path), "bytes": path.stat().st_size}
    return {"algorithm": "sha256", "files": files}


def write_manifest(run_dir: Path, **meta: Any) -> Path:
    """Hash the run folder now and replace ``manifest.json`` atomically (a crash keeps the last)."""
    body = manifest(run_dir, exclude=NOT_HASHED) | meta
    return atomic_write(run_dir / MANIFEST, _dumps(body, indent=2, sort_keys=True) + "\n")


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object artifact, or {} when it is missing, unreadable or of another shape."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
