#!/usr/bin/env bash
# Real hang captures on one H200: every NCCL line time-stamped (NCCL_DEBUG_TIMESTAMP_LEVELS=ALL),
# collectives logged (NCCL_DEBUG_SUBSYS=INIT,COLL), a launcher heartbeat every 10 s (as engines
# log periodically), everything killed after 40 s.
set -u
out=${OUT:-out}; mkdir -p "$out"; here=plugins/tests/data/diagnosis/closed-loop-h200
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL NCCL_DEBUG_TIMESTAMP_LEVELS=ALL
export NCCL_P2P_DISABLE=1 NCCL_CUMEM_ENABLE=0 NCCL_CUMEM_HOST_ENABLE=0 HOLD_S=60
for mode in init collective; do
  log="$out/hang-$mode.log"; port=$((29600 + RANDOM % 300))
  echo "\$ NCCL_HOSTID=tp2qual-host-<rank> python3 $here/hang.py $mode <rank> $port" >"$log"
  for r in 0 1; do
    (NCCL_HOSTID=tp2qual-host-$r timeout 40 python3 $here/hang.py $mode $r $port 2>&1 \
      | sed -u "s/^/[rank$r] /") >>"$log" &
  done
  for i in 1 2 3 4; do sleep 10; echo "[$(date -u '+%Y-%m-%d %H:%M:%S')] capture: waiting ($((i*10)) s)" >>"$log"; done
  wait
  echo "== $mode: $(grep -c 'Init COMPLETE' "$log") Init COMPLETE, $(grep -c 'AllReduce' "$log") AllReduce lines, $(wc -l <"$log") lines"
done | tee "$out/summary-hangs.txt"
