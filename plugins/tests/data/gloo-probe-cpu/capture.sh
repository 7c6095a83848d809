#!/usr/bin/env bash
# Real gloo captures of the suite's probe on this CPU machine: a healthy run, a rank that never
# joins, a rank that stalls before its first collective. PYTHON: an interpreter with torch
# (the vLLM CPU engine's venv, or any CPU torch). Run from the checkout's root.
set -u
python=${PYTHON:?set PYTHON to a python with torch}
here=plugins/tests/data/gloo-probe-cpu
probe=plugins/tp2qual/serving/nccl_probe.py
run() {  # name, probe arguments...
  local name=$1; shift
  { echo "\$ python $probe $*"; "$python" $probe "$@" 2>&1; echo "rc=$?"; } >"$here/$name.log"
}
run probe-2rank-ok --nprocs 2 --timeout 120 --backend gloo &
run probe-2rank-missing-rank1 --nprocs 2 --timeout 40 --backend gloo --start-ranks 0 &
run probe-2rank-rank1-stalls --nprocs 2 --timeout 40 --backend gloo --stall-rank 1 --stall-s 60 &
wait
"$python" -c 'import torch; print("torch", torch.__version__)' >"$here/versions.txt"
