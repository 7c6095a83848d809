"""A rank that never joins, for test_tp2_serve_faults.py: loaded by the vLLM engine's Python as
``sitecustomize`` when this folder is on its ``PYTHONPATH``.

``TP2QUAL_FAULT_HOLD_RANK=R``: the worker of rank R sleeps, alive and silent, where it would
start vLLM's ``init_distributed_environment`` (vllm/distributed/parallel_state.py, vLLM 0.32.0):
it never logs its ``world_size=… rank=R`` line and never joins the gloo group, so the other
ranks wait for it. The hold is patched in as parallel_state is first imported, before
``vllm.distributed`` re-exports the function the CPU worker calls (v1/worker/cpu_worker.py).
Without the variable this file does nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import inspect
import os
import sys
import time
from typing import Any

TARGET = "vllm.distributed.parallel_state"
HOLD_S = 3600.0  # far past any readiness bound: the suite's teardown ends it


def _holding(original: Any, rank: int) -> Any:
    signature = inspect.signature(original)

    def init_distributed_environment(*args: Any, **kwargs: Any) -> Any:
        if signature.bind_partial(*args, **kwargs).arguments.get("rank") == rank:
            time.sleep(HOLD_S)
        return original(*args, **kwargs)

    return init_distributed_environment


class _Patch(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.spec: importlib.machinery.ModuleSpec | None = None

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != TARGET:
            return None
        self.spec = importlib.machinery.PathFinder.find_spec(name, path)
        if self.spec is None:
            return None
        self.real = self.spec.loader
        self.spec.loader = self
        return self.spec

    def create_module(self, spec: Any) -> Any:
        return self.real.create_module(spec)  # type: ignore[union-attr]

    def exec_module(self, module: Any) -> None:
        self.real.exec_module(module)  # type: ignore[union-attr]
        original = module.init_distributed_environment
        module.init_distributed_environment = _holding(original, self.rank)


if (held := os.environ.get("TP2QUAL_FAULT_HOLD_RANK", "")).isdigit():
    sys.meta_path.insert(0, _Patch(int(held)))
