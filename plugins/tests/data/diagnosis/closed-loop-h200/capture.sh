#!/usr/bin/env bash
# Closed-loop /dev/shm capture on a lent one-GPU H200 machine (run as root from the repo root).
# One GPU cannot host two ranks (NCCL: Duplicate GPU detected), so the two ranks get distinct
# NCCL_HOSTID values: NCCL then treats them as two hosts and connects them over NET/Socket, whose
# proxy keeps its op pool in /dev/shm. Cases: baseline; /dev/shm shrunk to 512k (must fail with
# "Error while creating shared memory segment ... No space left on device"); /dev/shm restored
# (the remedy: a working shm size; must pass); a rank that never joins.
set -u
out=${OUT:-out}; work=$(mktemp -d); mkdir -p "$out"
probe=plugins/tp2qual/serving/nccl_probe.py
export NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1 NCCL_CUMEM_ENABLE=0 NCCL_CUMEM_HOST_ENABLE=0
orig_kb=$(df -k --output=size /dev/shm | tail -1 | tr -d ' ')
restore() { mount -o remount,size="${orig_kb}k" /dev/shm 2>/dev/null; rm -f /dev/shm/tp2qual-fill; }
trap restore EXIT
two_hosts() {  # $1 label: rank r runs with NCCL_HOSTID=tp2qual-host-r, output prefixed [rankr]
  local port=$((29500 + RANDOM % 1000)) log="$work/$1.log" pids=()
  echo "\$ NCCL_HOSTID=tp2qual-host-<rank> NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1 NCCL_CUMEM_ENABLE=0 NCCL_CUMEM_HOST_ENABLE=0 python3 $probe --worker --rank <r> --nprocs 2 --port $port" >"$log"
  for r in 0 1; do
    (NCCL_HOSTID=tp2qual-host-$r timeout 90 python3 $probe --worker --rank $r --nprocs 2 \
      --port $port 2>&1 | sed -u "s/^/[rank$r] /") >>"$log" &
    pids+=($!)
  done
  local rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
  echo "== $1: rc=$rc $(grep -c 'Init COMPLETE' "$log") Init COMPLETE, $(grep -c 'No space left' "$log") 'No space left'"
}
{
  date -u; uname -r; id -un
  python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "/dev/shm: $(findmnt -no FSTYPE,OPTIONS /dev/shm) size_kb=$orig_kb"
  two_hosts baseline-2rank-net
  if mount -o remount,size=512k /dev/shm; then how="remount size=512k"; else
    free_kb=$(df -k --output=avail /dev/shm | tail -1 | tr -d ' ')
    fallocate -l $(( (free_kb - 256) * 1024 )) /dev/shm/tp2qual-fill; how="filled to 256k free"
  fi
  echo "== /dev/shm shrunk ($how): $(df -h /dev/shm | tail -1)"
  timeout 90 python3 $probe --nprocs 1 --timeout 60 >"$work/shm512k-1rank.log" 2>&1
  echo "== shm512k-1rank: rc=$? $(grep -c 'No space left' "$work/shm512k-1rank.log") 'No space left'"
  two_hosts shm512k-2rank-net
  restore; echo "== /dev/shm restored: $(df -h /dev/shm | tail -1)"
  two_hosts remedy-2rank-net
  timeout 60 python3 $probe --worker --rank 0 --nprocs 2 --port 29999 >"$work/rank1-never-joins.log" 2>&1
  echo "== rank1-never-joins: rc=$? (124 = killed by timeout 60)"
} 2>&1 | tee "$out/summary.txt"
cp "$work"/*.log "$out"/ 2>/dev/null
ls -la "$out"
