"""Provoke the two NCCL hangs on one GPU (ranks split by NCCL_HOSTID): ``init`` — rank 1 joins
the store but never enters NCCL, so rank 0 stays between Init START and Init COMPLETE;
``collective`` — both complete init and one all-reduce, then only rank 0 issues a second one."""

import os
import sys
import time

import torch
import torch.distributed as dist

mode, rank, port = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.cuda.set_device(0)
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
t = torch.ones(1, device="cuda:0")
if mode == "init" and rank == 1:
    time.sleep(float(os.environ.get("HOLD_S", "45")))
    sys.exit(0)
dist.all_reduce(t)
torch.cuda.synchronize()
print(f"rank {rank}: first all_reduce done, sum={t.item()}", flush=True)
if mode == "collective":
    if rank == 1:
        time.sleep(float(os.environ.get("HOLD_S", "45")))
        sys.exit(0)
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print(f"rank {rank}: second all_reduce done", flush=True)
