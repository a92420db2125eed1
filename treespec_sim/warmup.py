"""numba's compile paid once per machine: :func:`warm_up` runs one small round of each kind a
sweep runs and the DDTree builder on raw arrays, so that every compiled kernel is compiled (or
loaded from numba's on-disk cache, ``cache=True``) before the work starts.

Processes that start together on one machine (a sweep's workers, pytest's, dask's) take a file
lock around it: the first compiles and writes the cache, the others wait, then load it. A
sweep warms up in its parent before it forks its workers (they inherit the compiled code);
dask workers and pytest's workers warm up on first use, under the lock.
"""

from __future__ import annotations

import os
import time

import numpy as np

from .engine import run_round
from .jit import machine_lock
from .policies import ddtree
from .synth import make_world

__all__ = ["ROUNDS", "warm_up"]

#: (method, rule, temperature, extra run_round arguments): one round each covers the compiled
#: kernels of a sweep's rounds (the ranked DDTree builder, the class chain, the sampled fill's
#: laws, the traversal's residual); :func:`warm_up` adds the builder on raw float64 and float32
#: arrays.
ROUNDS: tuple[tuple[str, str, float, dict], ...] = (
    ("ddtree", "follow", 0.0, {}),
    ("ddtree", "follow", 1.0, {}),
    ("ddtree", "tev", 1.0, {}),
    ("ddtree", "follow", 0.0, {"nested": True}),
    ("tsubame", "univer", 1.0, {}),
    ("tsubame", "rrsw", 1.0, {}),
    ("tsubame", "traversal", 1.0, {}),
)

_done = False


def warm_up() -> float:
    """Compile (or load from the cache) every kernel of :data:`ROUNDS` and the builder on raw
    arrays, once per process, under the machine's lock; returns the seconds it took (``0.0``
    when already done in this process or when ``NUMBA_DISABLE_JIT`` is set)."""
    global _done
    if _done or os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
        _done = True
        return 0.0
    start = time.perf_counter()
    with machine_lock():
        # V = 8192 with word classes: large enough for the ranked top lists (V >= 4096)
        world = make_world("math500", seed=0, vocab_size=8192)
        rng = np.random.default_rng(0)
        ctx = world.sample_context(rng)
        for method, rule, temperature, extra in ROUNDS:
            exact = run_round(world, ctx, method=method, budget=16, rule=rule,
                              temperature=temperature, rng=rng, sample=False, **extra)
            _ = exact.expected_tau
            run_round(world, ctx, method=method, budget=16, rule=rule,
                      temperature=temperature, rng=rng, sample=True, **extra)
        # the builder on raw arrays of both dtypes (small vocabularies, traces, real models)
        log_q = np.log(rng.dirichlet(np.ones(64), size=4))
        for dtype in (np.float64, np.float32):
            ddtree(log_q.astype(dtype), 8)
    _done = True
    return time.perf_counter() - start
