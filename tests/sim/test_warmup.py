"""numba's compile is paid once per machine: two processes starting together on an empty cache,
one compiles, the other waits on the lock and loads what the first wrote."""

import json
import os
import subprocess
import sys

SCRIPT = """
import json, sys
from numba.core.registry import CPUDispatcher
from treespec_sim.warmup import warm_up
warm_up()
hits = misses = 0
for name, module in list(sys.modules.items()):
    if name.startswith("treespec_sim"):
        for value in vars(module).values():
            if isinstance(value, CPUDispatcher) and value.__module__ == name:
                hits += sum(value.stats.cache_hits.values())
                misses += sum(value.stats.cache_misses.values())
print(json.dumps({"hits": hits, "misses": misses}))
"""


def test_two_processes_on_an_empty_cache_compile_once(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "TMPDIR": str(tmp_path),
           "OPENBLAS_NUM_THREADS": "1"}
    env.pop("NUMBA_DISABLE_JIT", None)
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    stats = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
        stats.append(json.loads(out.strip().splitlines()[-1]))
    compiled, loaded = sorted(stats, key=lambda s: -s["misses"])
    assert compiled["misses"] > 0             # the first compiled (an empty cache)
    assert loaded["misses"] == 0 and loaded["hits"] > 0   # the second only loaded
