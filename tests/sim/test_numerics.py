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

from treespec_sim.numerics import dot, fixed_exp, fixed_log, fixed_log1, log_into

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


def test_dot_adds_in_eight_lanes_in_index_order():
    # the stated order spelled out in Python (product i into lane i % 8, each lane in index
    # order), and close to the exact sum
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 8, 9, 129, 10_001, 32_768):
        a = rng.random(n) * np.exp(rng.uniform(-30, 0, n))
        b = rng.random(n)
        lanes = [0.0] * 8
        for i, (x, y) in enumerate(zip(a.tolist(), b.tolist(), strict=True)):
            lanes[i % 8] += x * y
        want = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + \
            ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
        got = dot(a, b)
        assert got == want
        assert got == pytest.approx(math.fsum(a * b), rel=1e-13, abs=1e-300)


def test_verifier_rounds_give_the_same_floats_with_one_and_two_blas_threads():
    one, two = _run(1), _run(2)
    assert one.split() and one == two


def _ulps(got, want):
    want = np.asarray(want)
    return np.abs(got - want) / np.spacing(np.abs(want))


# numpy's own exp / log differ by an ulp between its vector paths (CPUs): the bounds allow it
def test_fixed_exp_is_within_a_few_ulps_of_numpys_exp():
    rng = np.random.default_rng(1)
    x = -np.abs(rng.standard_normal(200_000)) * rng.choice([1e-3, 1.0, 30.0, 300.0, 700.0],
                                                           200_000)
    assert _ulps(fixed_exp(x), np.exp(x)).max() <= 3.0
    # the edges: -inf, subnormal and zero results, 0 exactly
    edge = np.array([-np.inf, -1000.0, -745.2, -744.4, -708.5, -1e-300, 0.0])
    assert np.array_equal(fixed_exp(edge)[[0, 1, 2, 6]], [0.0, 0.0, 0.0, 1.0])
    assert abs(fixed_exp(edge)[3] - np.exp(-744.4)) <= 2 * 5e-324
    assert _ulps(fixed_exp(edge)[4:5], np.exp(edge[4:5])).max() <= 3.0


def test_fixed_log_is_within_a_few_ulps_of_numpys_log():
    rng = np.random.default_rng(2)
    v = np.exp(rng.uniform(-740.0, 0.0, 200_000)) * rng.uniform(0.5, 2.0, 200_000)
    near_one = rng.uniform(0.5, 2.0, 100_000)
    assert _ulps(fixed_log(v), np.log(v)).max() <= 3.0
    assert np.abs(fixed_log(near_one) - np.log(near_one)).max() <= 3.4e-16
    edge = np.array([0.0, 5e-324, 2.2e-308, 1.0, 2.0])
    got = fixed_log(edge)
    assert got[0] == -np.inf and got[3] == 0.0
    assert _ulps(got[[1, 2, 4]], np.log(edge[[1, 2, 4]])).max() <= 3.0


def test_the_vector_log_gives_the_scalar_logs_floats():
    # log_into splits a float by its bits, fixed_log1 by frexp: the same floats, also where
    # log_into hands an entry to fixed_log1 (zero, subnormal, inf, NaN) and at the mantissa's
    # switch (sqrt(1/2)) and powers of two
    rng = np.random.default_rng(4)
    v = np.exp(rng.uniform(-745.0, 709.0, 50_000))
    edge = [0.0, 5e-324, 1e-310, 2.2250738585072014e-308, np.inf, np.nan, 1.0, 2.0, 0.5,
            np.nextafter(np.sqrt(0.5), 0.0), np.sqrt(0.5), np.nextafter(np.sqrt(0.5), 1.0),
            np.finfo(float).max]
    v = np.concatenate([edge, v, np.ldexp(1.0, np.arange(-1074, 1024))])
    got = np.empty_like(v)
    log_into(v, got)
    want = np.array([fixed_log1(x) for x in v.tolist()])
    assert np.array_equal(got.view(np.int64), want.view(np.int64))
