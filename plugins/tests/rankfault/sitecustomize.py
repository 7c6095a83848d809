"""Rank faults for test_tp2_serve_faults.py: loaded by the vLLM engine's Python as
``sitecustomize`` when this folder is on its ``PYTHONPATH``. Without the variables below this
file does nothing. Each fault is patched in as its vLLM 0.32.0 module is first imported.

``TP2QUAL_FAULT_HOLD_RANK=R`` (a rank that never joins): the worker of rank R sleeps, alive and
silent, where it would start vLLM's ``init_distributed_environment``
(vllm/distributed/parallel_state.py): it never logs its ``world_size=… rank=R`` line and never
joins the gloo group, so the other ranks wait for it. The hold is patched in before
``vllm.distributed`` re-exports the function the CPU worker calls (v1/worker/cpu_worker.py).

``TP2QUAL_FAULT_STALL_RANK=R`` with ``TP2QUAL_FAULT_STALL_FILE=F`` (a rank that stalls): once F
exists, the worker of rank R sleeps, alive and silent, at the start of its next model step
(``Worker.execute_model``, v1/worker/gpu_worker.py, which the CPU worker inherits), so the other
rank waits in its collective and the engine core for the step's answer.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import inspect
import os
import sys
import time
from collections.abc import Callable
from typing import Any

HOLD_S = 3600.0  # far past any bound: the suite's teardown ends it


def _hold_join(module: Any, rank: int) -> None:
    original = module.init_distributed_environment
    signature = inspect.signature(original)

    def init_distributed_environment(*args: Any, **kwargs: Any) -> Any:
        if signature.bind_partial(*args, **kwargs).arguments.get("rank") == rank:
            time.sleep(HOLD_S)
        return original(*args, **kwargs)

    module.init_distributed_environment = init_distributed_environment


def _stall_step(module: Any, rank: int) -> None:
    original = module.Worker.execute_model
    trigger = os.environ["TP2QUAL_FAULT_STALL_FILE"]

    def execute_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.rank == rank and os.path.exists(trigger):
            time.sleep(HOLD_S)
        return original(self, *args, **kwargs)

    module.Worker.execute_model = execute_model


class _Patch(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs ``patch(module, rank)`` right after ``target`` executes."""

    def __init__(self, target: str, patch: Callable[[Any, int], None], rank: int) -> None:
        self.target, self.patch, self.rank = target, patch, rank

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.target:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        self.real = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: Any) -> Any:
        return self.real.create_module(spec)  # type: ignore[union-attr]

    def exec_module(self, module: Any) -> None:
        self.real.exec_module(module)  # type: ignore[union-attr]
        self.patch(module, self.rank)


FAULTS = {
    "TP2QUAL_FAULT_HOLD_RANK": ("vllm.distributed.parallel_state", _hold_join),
    "TP2QUAL_FAULT_STALL_RANK": ("vllm.v1.worker.gpu_worker", _stall_step),
}
for variable, (target, patch) in FAULTS.items():
    if (rank := os.environ.get(variable, "")).isdigit():
        sys.meta_path.insert(0, _Patch(target, patch, int(rank)))
