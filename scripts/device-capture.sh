#!/usr/bin/env bash
# Prove the GPU-facing gates on a real NVIDIA machine (no Docker needed) and keep what they saw:
# preflight idle and with another process holding 20 GiB; the NCCL gate's probe with the campaign
# settings (TP = number of GPUs, P2P off, cuMem off); a 2-rank probe with NCCL defaults for
# comparison; nvidia-smi topology. Everything lands in $OUT/capture.tgz plus $OUT/summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}; work=$(mktemp -d)
# The probe candidates' pin: a one-file hub snapshot whose blob is named by its sha256, as the hub
# lays it out (preflight proves every snapshot file against its content address).
repo=/tmp/tp2qual-hf/hub/models--probe--none snap=$repo/snapshots/0123456789abcdef0123456789abcdef01234567
mkdir -p "$out" "$snap" "$repo/blobs"
printf 'probe' > "$repo/blobs/tmp"; sha=$(sha256sum "$repo/blobs/tmp" | cut -c1-64)
mv "$repo/blobs/tmp" "$repo/blobs/$sha"; ln -sfn "../../blobs/$sha" "$snap/model.safetensors"
ngpu=$(python3 -c "import torch; print(torch.cuda.device_count())")
pick="h200-tp$ngpu"
gates() {  # $1 label, $2 marker expression
  python3 -m pytest -p tp2qual.plugin -p no:cacheprovider -q -rs -m "$2" -k "$pick" \
    --candidates=plugins/tests/data/h200-candidates --results="$work/results-$1" \
    tests/test_00_preflight.py tests/test_01_nccl.py --deselect \
    "tests/test_01_nccl.py::test_server_log_analysis[$pick]" >"$work/pytest-$1.txt" 2>&1
  echo "== pytest $1 (rc=$?)"; tail -6 "$work/pytest-$1.txt"
}
{
  echo "gpus: $ngpu"; nvidia-smi topo -m > "$work/nvidia-smi-topo.txt" 2>&1
  gates idle "preflight or nccl"
  python3 -c "import torch,time; x=torch.empty(20*2**30,dtype=torch.uint8,device='cuda'); time.sleep(120)" &
  holder=$!; sleep 12
  gates busy "preflight"
  kill $holder; wait $holder 2>/dev/null
  if [ "$ngpu" -ge 2 ]; then
    env -u NCCL_P2P_DISABLE -u NCCL_CUMEM_ENABLE -u NCCL_CUMEM_HOST_ENABLE NCCL_DEBUG=INFO \
      timeout 200 python3 plugins/tp2qual/serving/nccl_probe.py --nprocs 2 --timeout 150 \
      --log-dir "$work/probe-2rank-defaults" > "$work/probe-2rank-defaults.log" 2>&1
    echo "== 2-rank probe, NCCL defaults: rc=$?"; tail -1 "$work/probe-2rank-defaults.log"
  fi
  for f in "$work"/results-*/*/"$pick"/finding.json; do
    python3 -c "import json; d=json.load(open('$f')); print('$f'.split('/')[-3], d['verdict'], {g: v['outcome'] + (': ' + v['reason'][:160] if v['reason'] else '') for g, v in d['gates'].items() if v['outcome'] != 'not_run'})"
  done
} 2>&1 | tee "$out/summary.txt"
tar -C "$work" -czf "$out/capture.tgz" .
