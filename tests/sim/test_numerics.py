"""The simulator's floats do not depend on the BLAS thread count (treespec_sim.numerics).

OpenBLAS splits dot products of more than 10,000 entries across its threads; with ``np.dot``
the univer closed forms at ``V = 32768`` gave last bits that changed with
``OPENBLAS_NUM_THREADS``. The same rounds run in two processes, with one and with two BLAS
threads, must print the same floats.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from treespec_sim.numerics import dot

SCRIPT = """
import numpy as np
from treespec_sim.engine import run_round
from treespec_sim.synth import make_world
from treespec_sim.verify.univer import two_child_accepts
world = make_world("math500", seed=3)
rng = np.random.default_rng(7)
out = []
for _ in range(4):
    ctx = world.sample_context(rng)
    rnd = run_round(world, ctx, method="tsubame", budget=16, rule="univer", temperature=1.0,
                    rng=rng, sample=False)
    out.append(repr(rnd.expected_tau))
r = np.random.default_rng(1)
for step in ("traversal", "conditional", "reverse", "condrev"):
    mu, q = r.random(32768), r.random(32768)
    out += [repr(float(x)) for x in two_child_accepts(0.5 * mu / mu.sum(), q / q.sum(), step)]
k = world.target_kernel(0, 1.0)
mu = r.random((3, world.vocab_size))
out += [repr(float(x)) for x in k.push(mu / mu.sum(axis=1, keepdims=True)).sum(axis=1)]
print(" ".join(out))
"""


def _run(threads: int) -> str:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_dot_is_numpys_pairwise_sum_of_the_products():
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 129, 10_001, 32_768):
        a, b = rng.random(n), rng.random(n)
        got = dot(a, b)
        assert got == float(np.add.reduce(a * b))
        assert got == pytest.approx(math.fsum(a * b), rel=1e-13, abs=1e-300)
    out = np.empty(5)
    assert dot(np.ones(5), np.arange(5.0), out=out) == 10.0
    assert out.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]  # the products went into the scratch


def test_verifier_rounds_give_the_same_floats_with_one_and_two_blas_threads():
    one, two = _run(1), _run(2)
    assert one.split() and one == two
