"""Solving the ground-truth LPs: one place that picks the solver and checks its status."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings


@contextlib.contextmanager
def _quiet_stdout():
    """Silence the solver's C-level banner on file descriptor 1 (it would corrupt ``--json``)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def solve_lp(problem, what: str) -> float:
    """Solve a cvxpy LP with HiGHS (presolve off) and return its optimal value.

    HiGHS presolve wrongly reported "infeasible" on ~1% of stress instances whose masses are tiny
    (~1e-18); without presolve 0 of 3000. ``optimal_inaccurate`` is accepted with a
    ``RuntimeWarning``; any other non-optimal status raises ``RuntimeError`` naming ``what``.
    """
    import cvxpy as cp

    with _quiet_stdout():
        if cp.HIGHS in cp.installed_solvers():
            problem.solve(solver=cp.HIGHS, presolve="off", log_to_console=False)
        else:
            problem.solve()
    if problem.status == cp.OPTIMAL_INACCURATE:
        warnings.warn(f"{what}: solver status optimal_inaccurate", RuntimeWarning, stacklevel=3)
    elif problem.status != cp.OPTIMAL:
        raise RuntimeError(f"{what}: LP solver status {problem.status!r}")
    return float(problem.value)
