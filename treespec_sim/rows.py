"""Target rows: the target law after the path to each tree node.

Verifiers and the exit analysis read the target through one small interface, so the same code
serves a dense ``(n+1, V)`` array (tests, real models) and a lazy oracle that computes rows only
where a verifier looks (large-vocabulary synthetic worlds, where ``(n+1) x V`` floats would be
most of the cost of a round).

A *target oracle* is any object with

``shape``
    ``(n+1, V)``.
``row(v) -> ndarray float64 (V,)``
    the target's next-token law after the path to node ``v`` (a distribution).
``edge_probs(tree) -> ndarray float64 (n+1,)``
    entry ``v >= 1`` is ``row(parent[v])[token[v]]``; entry 0 is 1.

Dense arrays are wrapped by :func:`as_oracle`, which validates them once (vectorised).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from .tree import DraftTree
from .validation import as_float_array, check_tree, row_sum_tolerance

__all__ = ["ROW_SUM_TOL", "ArrayOracle", "TargetOracle", "as_oracle", "check_distribution_rows",
           "dense_rows", "same_tree"]

#: Tolerance on |sum(row) - 1| for rows handed to the simulator (float64 inputs).
ROW_SUM_TOL = 1e-9


@runtime_checkable
class TargetOracle(Protocol):
    """Protocol for lazily evaluated target rows (see module docstring)."""

    @property
    def shape(self) -> tuple[int, int]: ...

    def row(self, v: int) -> np.ndarray: ...

    def edge_probs(self, tree: DraftTree) -> np.ndarray: ...


def check_distribution_rows(rows, name: str, *, tol: float | None = None) -> np.ndarray:
    """Validate a 2-D array whose rows are probability vectors; return it as float64,
    each row renormalised to sum to 1.

    ``rows`` may be numpy, a list or a torch tensor of any float dtype
    (:func:`treespec_sim.validation.as_float_array`). ``tol`` defaults to the input dtype's
    tolerance (:data:`treespec_sim.validation.ROW_SUM_TOL_BY_DTYPE`: a float32 softmax passes,
    a row summing to 2 fails at every dtype).

    Raises ``ValueError`` naming ``name`` and the first offending row (and column) for NaN or
    infinite entries, negative entries, or rows that do not sum to 1 within ``tol``.
    """
    raw, source = as_float_array(rows, name)
    tol = row_sum_tolerance(source) if tol is None else tol
    arr = np.asarray(raw, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be two-dimensional (rows x vocabulary); got shape "
                         f"{arr.shape}")
    finite = np.isfinite(arr)
    if not finite.all():
        r, c = np.argwhere(~finite)[0]
        raise ValueError(f"{name}[{r}, {c}] = {float(arr[r, c])} is not finite")
    neg = arr < 0
    if neg.any():
        r, c = np.argwhere(neg)[0]
        raise ValueError(f"{name}[{r}, {c}] = {float(arr[r, c])} is negative")
    sums = arr.sum(axis=1)
    off = np.abs(sums - 1.0) > tol
    if off.any():
        r = int(np.flatnonzero(off)[0])
        raise ValueError(f"{name}[{r}] sums to {float(sums[r])!r}, not 1 (tolerance {tol:g} for "
                         f"{source} input)")
    # Renormalise in float64 so every verifier sees exact distributions (a float32 softmax is
    # off by ~1e-7 per row); exact rows are returned as they are.
    return arr / sums[:, None] if np.any(np.abs(sums - 1.0) > 1e-12) else arr


class ArrayOracle:
    """A dense, validated ``(n+1, V)`` array of target rows."""

    def __init__(self, rows: np.ndarray, tree: DraftTree, *, name: str = "target_rows"):
        arr = check_distribution_rows(rows, name)
        if arr.shape[0] != tree.n_nodes:
            raise ValueError(f"{name} has {arr.shape[0]} rows but the tree has {tree.n_nodes} "
                             f"nodes (root included)")
        if tree.size and int(tree.token[1:].max()) >= arr.shape[1]:
            v = int(np.argmax(tree.token[1:] >= arr.shape[1])) + 1
            raise ValueError(f"tree.token[{v}] = {tree.token[v]} is outside the vocabulary of "
                             f"{name} (V = {arr.shape[1]})")
        self.rows = arr

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows.shape  # type: ignore[return-value]

    def row(self, v: int) -> np.ndarray:
        return self.rows[v]

    def edge_probs(self, tree: DraftTree) -> np.ndarray:
        out = np.ones(tree.n_nodes, dtype=np.float64)
        out[1:] = self.rows[tree.parent[1:], tree.token[1:]]
        return out


#: Classes one of whose instances was a TargetOracle: isinstance against a runtime-checkable
#: Protocol costs ~10 us a call and a round asks several times, so the answer is kept per class
#: (an oracle class gives every instance the protocol's members; one that does not fails at the
#: first missing member with an AttributeError).
_ORACLE_CLASSES: set[type] = set()


def _is_oracle(obj) -> bool:
    cls = type(obj)
    if cls in _ORACLE_CLASSES:
        return True
    if isinstance(obj, np.ndarray) or not isinstance(obj, TargetOracle):
        return False
    _ORACLE_CLASSES.add(cls)
    return True


def as_oracle(target_rows, tree: DraftTree) -> TargetOracle:
    """Wrap ``target_rows`` (array or oracle) for ``tree``; validate shapes, and that an
    oracle which knows its tree (a ``tree`` attribute) was built for this one."""
    check_tree(tree)
    if _is_oracle(target_rows):
        if target_rows.shape[0] != tree.n_nodes:
            raise ValueError(f"target_rows has {target_rows.shape[0]} rows but the tree has "
                             f"{tree.n_nodes} nodes (root included)")
        built_for = getattr(target_rows, "tree", None)
        if built_for is not None and not same_tree(built_for, tree):
            raise ValueError("target_rows were built for another tree (same size, other "
                             "parents or tokens); build them for this tree")
        return target_rows
    return ArrayOracle(target_rows, tree)


def same_tree(a: DraftTree, b: DraftTree) -> bool:
    """Whether two trees have the same parents and tokens (the root token included)."""
    return a is b or (a.n_nodes == b.n_nodes and np.array_equal(a.parent, b.parent)
                      and np.array_equal(a.token, b.token))


def dense_rows(target_rows) -> np.ndarray:
    """The ``(n+1, V)`` float64 array of target rows (an array, or an oracle's ``row(v)``)."""
    if isinstance(target_rows, np.ndarray):
        return np.asarray(target_rows, dtype=np.float64)
    if isinstance(target_rows, ArrayOracle):
        return target_rows.rows
    return np.stack([np.asarray(target_rows.row(v), dtype=np.float64)
                     for v in range(target_rows.shape[0])])
