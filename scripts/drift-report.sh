#!/usr/bin/env bash
# Drift: what the newest releases change against scripts/constraints.txt, and whether the fast
# self-tests still pass with them. Informational: the lock is what the suite vouches for, and an
# upstream release that breaks us must be seen (here, in CI's log) before the lock moves, not
# block unrelated work. Usage: scripts/drift-report.sh PYTHON_OF_A_VENV_WITH_THE_NEWEST
set -uo pipefail
cd "$(dirname "$0")/.."
python=${1:?python of the newest-release venv}
newest=$("$python" -m pip freeze --exclude-editable 2>/dev/null)
changed=$(python3 - "$newest" <<'PY'
import sys
def pins(text):
    out = {}
    for line in text.splitlines():
        if "==" in line and not line.startswith("#"):
            name, _, version = line.partition("==")
            out[name.strip().lower().replace("_", "-")] = version.strip()
    return out
locked = pins(open("scripts/constraints.txt").read())
newest = pins(sys.argv[1])
for name in sorted(set(locked) | set(newest)):
    a, b = locked.get(name, "-"), newest.get(name, "-")
    if a != b:
        print(f"  {name}: {a} -> {b}")
PY
)
if [ -z "$changed" ]; then
  echo "drift: none — the newest releases are the locked ones"
else
  echo "drift: $(wc -l <<<"$changed") package(s) differ from scripts/constraints.txt:"
  echo "$changed"
fi
rc=0
DOCKER_HOST=unix:///nonexistent/docker.sock "$python" -m pytest plugins/tests -q -p no:cacheprovider \
  -m "not slow and not docker" -x >/tmp/tp2qual-drift-tests.log 2>&1 || rc=$?
if [ "$rc" -eq 0 ]; then
  echo "drift: fast self-tests pass with the newest releases ($(tail -1 /tmp/tp2qual-drift-tests.log))"
else
  echo "DRIFT: fast self-tests FAIL with the newest releases (rc=$rc); the lock still holds. Tail:"
  tail -25 /tmp/tp2qual-drift-tests.log
fi
