#!/usr/bin/env bash
# Start a Docker engine for the container tests when none answers: no bridge, no iptables
# (containers use host networking; bridge networks are never created), logs under .cache/.
set -euo pipefail
cd "$(dirname "$0")/.."
if docker info >/dev/null 2>&1; then
  echo "dockerd: already running"
  exit 0
fi
mkdir -p .cache
nohup dockerd --bridge=none --iptables=false >.cache/dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    echo "dockerd: started"
    exit 0
  fi
  sleep 1
done
echo "dockerd did not answer within 60 s; last log lines:" >&2
tail -20 .cache/dockerd.log >&2
exit 1
