#!/usr/bin/env bash
# Real NCCL captures of the suite's probe on a lent one-GPU H200 (run from the repo root). One GPU
# cannot host two ranks (NCCL: Duplicate GPU detected), so each rank gets its own NCCL_HOSTID and
# NCCL connects them over NET/Socket, as in ../diagnosis/closed-loop-h200. Cases: a healthy
# two-rank probe (every size and dtype), rank 1 stalling after Init COMPLETE (the first
# collective never returns; torch's own timeout 45 s), rank 1 never started.
set -u
out=${OUT:-out}; mkdir -p "$out"
probe=plugins/tp2qual/serving/nccl_probe.py
export NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1 NCCL_CUMEM_ENABLE=0 NCCL_CUMEM_HOST_ENABLE=0
two_hosts() {  # name, ranks to start, extra worker args...
  local name=$1 ranks=$2; shift 2
  local port=$((29500 + RANDOM % 1000)) log="$out/$name.log"
  echo "\$ NCCL_HOSTID=tp2qual-host-<rank> NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1 NCCL_CUMEM_ENABLE=0 NCCL_CUMEM_HOST_ENABLE=0 timeout 75 python3 $probe --worker --rank <r> --nprocs 2 --port $port $*" >"$log"
  for r in $ranks; do
    (NCCL_HOSTID=tp2qual-host-$r timeout 75 python3 $probe --worker --rank $r --nprocs 2 \
      --port $port "$@" 2>&1 | sed -u "s/^/[rank$r] /") >>"$log" &
  done
  wait
  echo "[$(date -u '+%Y-%m-%d %H:%M:%S')] capture: every rank ended" >>"$log"
}
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())' | tee "$out/versions.txt"
two_hosts probe-2rank-ok "0 1" --backend nccl --torch-timeout 45
two_hosts probe-2rank-rank1-stalls "0 1" --backend nccl --torch-timeout 45 --stall-rank 1 --stall-s 90 &
two_hosts probe-2rank-missing-rank1 "0" --backend nccl --torch-timeout 45 &
wait
for f in "$out"/probe-*.log; do
  echo "== $f: $(grep -c 'Init COMPLETE' "$f") Init COMPLETE, $(grep -c 'Watchdog caught' "$f") watchdog, $(wc -l <"$f") lines"
done | tee "$out/summary.txt"
