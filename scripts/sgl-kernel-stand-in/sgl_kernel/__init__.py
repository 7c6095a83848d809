"""tp2qual's stand-in for ``sgl_kernel`` in the SGLang 0.5.23 CPU venv (scripts/install-sglang.sh).

PyPI has no CPU build of sgl_kernel (upstream's CPU build compiles it from the repository).
SGLang imports a few ``*_cpu`` names from it at import time, e.g. ``copy_all_layer_kv_cache_cpu``
(sglang/kernels/ops/kvcache/cache_move.py:10), behind ``is_cpu()``; on the path the
smollm2-135m-sglang candidates take (``--attention-backend torch_native``, fp32, no
speculative decoding) none of them is called. This module gives each such name a function that
refuses: a call writes one line to stderr (the serve's log) and raises, naming the function, so a
call can never pass silently. The gates' self-test reads the serve's log: the ``loaded`` line
shows this module was in use, and no ``called`` line shows it was called 0 times.

Only names ending ``_cpu`` are given; any other name is an ``AttributeError`` as for a missing
attribute, so an import SGLang guards with ``try``/``except ImportError`` still takes its
fallback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

TAG = "tp2qual sgl_kernel stand-in"
calls = 0  # calls in this process; each also wrote a line

print(f"{TAG}: loaded in pid {os.getpid()} ({__file__})", file=sys.stderr, flush=True)


def _refusing(name: str) -> Callable[..., NoReturn]:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        global calls
        calls += 1
        line = (
            f"{TAG}: {name} called (call {calls} in pid {os.getpid()}); PyPI has no CPU "
            "sgl_kernel, this is a stand-in that refuses every call"
        )
        print(line, file=sys.stderr, flush=True)
        raise NotImplementedError(line)

    refuse.__name__ = refuse.__qualname__ = name
    return refuse


def __getattr__(name: str) -> Callable[..., NoReturn]:
    if not name.endswith("_cpu"):
        raise AttributeError(f"{TAG}: module 'sgl_kernel' has no attribute {name!r}")
    function = _refusing(name)
    globals()[name] = function
    return function
