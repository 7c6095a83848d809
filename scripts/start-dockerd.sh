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

# A pid file left by an engine that is gone: a machine restored from a snapshot keeps /run, and
# dockerd refuses to start while the pid its file names is alive, though that pid may now be
# another program's (and dockerd takes a live pid in containerd's file for its containerd).
# Returns 1 when the pid is a live PROGRAM, whose engine is then waited for, not started again.
clear_stale() {  # $1: pid file, $2: program
  [ -f "$1" ] || return 0
  local pid
  pid=$(tr -dc 0-9 <"$1")
  if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]; then
    return 1
  fi
  echo "removing the stale pid file $1 (pid ${pid:-none} is not a running $2)"
  rm -f "$1"
}

# $1: pid file, $2: exec root, $3: DOCKER_HOST, $4: log. 0 when a dockerd of this pid file runs.
engine_running() {
  clear_stale "$2/containerd/containerd.pid" containerd || true
  if ! clear_stale "$1" dockerd; then
    echo "dockerd pid $(tr -dc 0-9 <"$1") holds $1 but does not answer at $3; waiting for it"
    wait_for "$3" "$4" || exit 1   # exit: this runs as an if's condition, where set -e is off
    return 0
  fi
  return 1
}

if [ -z "$name" ]; then
  if docker info >/dev/null 2>&1; then
    echo "dockerd: already running"
    exit 0
  fi
  if engine_running /var/run/docker.pid /var/run/docker unix:///var/run/docker.sock .cache/dockerd.log; then
    echo "dockerd: running"
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
elif engine_running "/run/tp2qual-$name.pid" "/run/tp2qual-$name" "$socket" "$PWD/.cache/dockerd-$name.log"; then
  echo "dockerd $name: running at $socket"
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
