#!/usr/bin/env bash
# Start a Docker engine for the container tests when none answers: no bridge, no iptables
# (containers use host networking; bridge networks are never created), logs under .cache/.
#
#   scripts/start-dockerd.sh            the default engine (/var/run/docker.sock)
#   scripts/start-dockerd.sh NAME       a second, separate engine on this machine, for the hosts
#                                       tests: its own data root, exec root, pid file, socket
#                                       (unix:///run/tp2qual-NAME.sock) and containerd namespace;
#                                       the local image is copied into it (same image id)
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:-}
mkdir -p .cache

wait_for() {  # $1: DOCKER_HOST, $2: log
  for _ in $(seq 1 60); do
    if DOCKER_HOST=$1 docker info >/dev/null 2>&1; then
      return 0
    fi
    sleep 1
  done
  echo "dockerd at $1 did not answer within 60 s; last log lines:" >&2
  tail -20 "$2" >&2
  return 1
}

if [ -z "$name" ]; then
  if docker info >/dev/null 2>&1; then
    echo "dockerd: already running"
    exit 0
  fi
  nohup dockerd --bridge=none --iptables=false >.cache/dockerd.log 2>&1 &
  wait_for unix:///var/run/docker.sock .cache/dockerd.log
  echo "dockerd: started"
  exit 0
fi

socket=unix:///run/tp2qual-$name.sock
if DOCKER_HOST=$socket docker info >/dev/null 2>&1; then
  echo "dockerd $name: already running at $socket"
else
  root=$PWD/.cache/dockerd-$name
  mkdir -p "$root"
  nohup dockerd --bridge=none --iptables=false --ip6tables=false \
    --data-root "$root/data" --exec-root "/run/tp2qual-$name" \
    --pidfile "/run/tp2qual-$name.pid" -H "$socket" \
    --containerd-namespace "tp2qual-$name" --containerd-plugins-namespace "tp2qual-$name-plugins" \
    >"$root.log" 2>&1 &
  wait_for "$socket" "$root.log"
  echo "dockerd $name: started at $socket"
fi
# The same locally built image, same id (docker save/load keep it), so the same pin holds.
for image in $(docker images --format '{{.Repository}}:{{.Tag}}' 'tp2qual/*' | grep -v '<none>'); do
  if [ "$(DOCKER_HOST=$socket docker images -q "$image")" != "$(docker images -q "$image")" ]; then
    docker save "$image" | DOCKER_HOST=$socket docker load -q
  fi
done
