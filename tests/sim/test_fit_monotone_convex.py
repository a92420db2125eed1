"""fit_monotone_convex: the solver-free (NNLS) fit against the cvxpy formulation it replaces."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from treespec_sim.cost import TabulatedCost, fit_monotone_convex

ROOT = Path(__file__).resolve().parents[2]
CPU_TINY = ROOT / "real_models" / "profiles" / "cpu_tiny.json"
A800 = sorted((ROOT / "treespec_sim" / "data" / "latency").glob("a800_*.json"))


def cvxpy_fit(tokens, seconds) -> np.ndarray:
    """The previous implementation: the constrained least squares solved by cvxpy/Clarabel."""
    cp = pytest.importorskip("cvxpy")
    n = np.asarray(tokens, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    scale = 1e3
    f = cp.Variable(n.size)
    slopes = cp.multiply(cp.diff(f), 1.0 / np.diff(n))
    constraints = [cp.diff(f) >= 0]
    if n.size >= 3:
        constraints.append(cp.diff(slopes) >= 0)
    problem = cp.Problem(cp.Minimize(cp.sum_squares(f - scale * t)), constraints)
    problem.solve(solver=cp.CLARABEL)
    assert problem.status == cp.OPTIMAL
    return np.maximum.accumulate(np.maximum(np.asarray(f.value) / scale, 0.0))


def _is_monotone_convex(n, f) -> bool:
    slopes = np.diff(f) / np.diff(n)
    return bool(np.all(np.diff(f) >= 0) and np.all(np.diff(slopes) >= -1e-12 * np.max(f)))


def test_equals_cvxpy_on_the_committed_cpu_profile():
    data = json.loads(CPU_TINY.read_text())
    n = data["node_counts"]
    for c in data["context_lengths"]:
        raw = np.asarray(data["raw_verify_s"][str(c)])
        fit = fit_monotone_convex(n, raw)
        ref = cvxpy_fit(n, raw)
        assert fit.dtype == np.float64
        np.testing.assert_allclose(fit, ref, rtol=1e-6, atol=0)
        # and the committed fit (made with cvxpy) is reproduced
        np.testing.assert_allclose(fit, data["verify_cost_s"][str(c)], rtol=1e-6, atol=0)
        # the raw row is not itself monotone-convex, so the fit had to move it
        assert not _is_monotone_convex(np.asarray(n, float), raw)
        assert np.max(np.abs(fit - raw)) > 1e-5


@pytest.mark.parametrize("path", A800, ids=lambda p: p.stem)
def test_committed_convex_fits_are_fixed_points(path):
    data = json.loads(path.read_text())
    n = data["node_counts"]
    for row in data["verify_cost_s"].values():
        # the released values are rounded to ~1e-9 s, so only nearly convex: rtol 1e-6
        np.testing.assert_allclose(fit_monotone_convex(n, row), row, rtol=1e-6, atol=0)
        np.testing.assert_allclose(cvxpy_fit(n, row), row, rtol=1e-6, atol=0)


def test_equals_cvxpy_on_random_curves_and_is_at_least_as_optimal():
    rng = np.random.default_rng(7)
    for _ in range(60):
        k = int(rng.integers(2, 20))
        n = np.cumsum(rng.integers(1, 60, k)).astype(float)
        knee = rng.uniform(n[0], n[-1])
        t = 2e-3 + 3e-6 * np.maximum(n - knee, 0) * rng.uniform(0, 4)
        t = np.abs(t + rng.normal(0, 3e-4, k))
        fit, ref = fit_monotone_convex(n, t), cvxpy_fit(n, t)
        assert _is_monotone_convex(n, fit)
        np.testing.assert_allclose(fit, ref, rtol=0, atol=1e-5 * np.max(ref))
        # NNLS is exact: its objective is no worse than the interior-point solver's
        assert np.sum((fit - t) ** 2) <= np.sum((ref - t) ** 2) * (1 + 1e-8)


def test_works_with_cvxpy_unimportable(monkeypatch):
    monkeypatch.setitem(sys.modules, "cvxpy", None)  # `import cvxpy` now raises ImportError
    monkeypatch.setitem(sys.modules, "clarabel", None)
    with pytest.raises(ImportError):
        import cvxpy  # noqa: F401
    n = np.array([1, 2, 4, 8, 16, 32, 64], dtype=float)
    t = np.array([5.0, 4.8, 5.1, 5.3, 6.2, 7.9, 11.5]) * 1e-3  # dips at n = 2
    fit = fit_monotone_convex(n, t)
    assert _is_monotone_convex(n, fit) and fit[0] <= t[0]
    model = TabulatedCost.from_measurements(n, [0], [t], 1e-3)
    assert model.is_convex


def test_small_and_degenerate_inputs():
    assert fit_monotone_convex([3], [0.5]).tolist() == [0.5]
    np.testing.assert_allclose(fit_monotone_convex([1, 2], [2.0, 1.0]), [1.5, 1.5])
    np.testing.assert_allclose(fit_monotone_convex([1, 5, 9], [0.0, 0.0, 0.0]), 0.0)
    line = 1e-3 + 2e-6 * np.arange(1, 11)
    np.testing.assert_allclose(fit_monotone_convex(np.arange(1, 11), line), line, rtol=1e-12)


@pytest.mark.parametrize(("tokens", "seconds", "match"), [
    ([], [], "non-empty"),
    ([1, 2], [1.0], "equal length"),
    ([1, 1], [1.0, 2.0], "strictly increasing"),
    ([1, 2], [1.0, -1.0], ">= 0"),
    ([1, 2], [1.0, np.nan], "finite"),
])
def test_bad_input(tokens, seconds, match):
    with pytest.raises(ValueError, match=match):
        fit_monotone_convex(tokens, seconds)
