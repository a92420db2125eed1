"""Proposal rows: the law each node's children were drawn from, each distinct law stored once;
and the conditional proposal a round hands a sampled builder.

:class:`ProposalRows` is what a sampled builder (:mod:`treespec_sim.policies`) hands its
verifier (:mod:`treespec_sim.verify`) besides the tree; it sits below both so that neither
imports the other for it. :class:`ConditionalProposal` is what the round loop hands a sampled
builder when the backend corrects its drafter given a sampled parent: the law, and what it
declares about itself (it reads whole paths; it can batch a level).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from .validation import is_index

__all__ = ["ConditionalProposal", "ProposalRows"]


@dataclass(frozen=True, eq=False)
class ProposalRows(NDArrayOperatorsMixin):
    """The ``(n+1, V)`` proposal table of a sampled tree, each distinct law stored once.

    Reads like the dense array it stands for: ``rows[v]`` is node ``v``'s row (a read-only
    view, zeros where ``row_of[v] == -1``), ``rows[v, x]`` one entry, ``.shape``/``len`` the
    dense shape, and ``np.asarray(rows)`` -- or any ufunc or arithmetic operator, which goes
    through it -- the dense float64 array. Other indexing (slices, fancy) reads the dense array.

    Attributes
    ----------
    laws : tuple of ndarray float64 (V,)
        The distinct laws, not copied (sampled builders mark them read-only).
    row_of : ndarray intp (n+1,)
        ``laws[row_of[v]]`` is row ``v``; ``-1`` is an all-zero row (a leaf: never read).
    vocab_size : int
        ``V`` (needed when no node has a law).
    law_stats : tuple of (float, float), optional
        ``(law.min(), law.sum())`` of each law, computed by the builder while the law was still
        in cache, so the verifier's proposal check need not read every ``(V,)`` law again
        (the same floats; only for read-only laws, which cannot change afterwards).
    """

    laws: tuple[np.ndarray, ...]
    row_of: np.ndarray
    vocab_size: int
    law_stats: tuple[tuple[float, float], ...] | None = field(default=None, compare=False,
                                                              repr=False)

    def __post_init__(self) -> None:
        laws = tuple(np.asarray(q, dtype=np.float64) for q in self.laws)
        v = operator.index(self.vocab_size)
        bad = [i for i, q in enumerate(laws) if q.shape != (v,)]
        if bad:
            raise ValueError(f"laws[{bad[0]}] has shape {laws[bad[0]].shape}; every law must "
                             f"have shape (V,) = ({v},)")
        row_of = np.asarray(self.row_of)
        if row_of.ndim != 1 or row_of.size < 1 or not np.issubdtype(row_of.dtype, np.integer):
            raise ValueError(f"row_of must be a 1-D integer array (n+1,); got dtype "
                             f"{row_of.dtype} shape {row_of.shape}")
        if ((row_of < -1) | (row_of >= len(laws))).any():
            raise ValueError(f"row_of entries must be in [-1, {len(laws)}); got "
                             f"{row_of[(row_of < -1) | (row_of >= len(laws))][0]}")
        row_of = row_of.astype(np.intp, copy=True)
        row_of.flags.writeable = False
        if self.law_stats is not None and (
                len(self.law_stats) != len(laws) or any(q.flags.writeable for q in laws)):
            raise ValueError("law_stats needs one (min, sum) per law, and read-only laws")
        object.__setattr__(self, "laws", laws)
        object.__setattr__(self, "row_of", row_of)
        object.__setattr__(self, "vocab_size", v)

    @property
    def shape(self) -> tuple[int, int]:
        """``(n+1, V)``, the dense table's shape."""
        return (self.row_of.size, self.vocab_size)

    @property
    def ndim(self) -> int:
        return 2

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float64)

    def __len__(self) -> int:
        return self.row_of.size

    def row(self, v: int) -> np.ndarray:
        """Row ``v`` (float64 (V,), read-only): the law ``v``'s children were drawn from."""
        r = int(self.row_of[v])
        if r < 0:
            zero = np.zeros(self.vocab_size)
            zero.flags.writeable = False
            return zero
        q = self.laws[r].view()
        q.flags.writeable = False
        return q

    def __getitem__(self, key):
        if isinstance(key, tuple) and key and is_index(key[0]):
            rest = key[1:]
            return self.row(key[0])[rest] if rest else self.row(key[0])
        if is_index(key):
            return self.row(key)
        return np.asarray(self)[key]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        if copy is False:
            raise ValueError("ProposalRows has no dense array to share: np.asarray builds one")
        out = np.zeros(self.shape)
        for r, q in enumerate(self.laws):
            out[self.row_of == r] = q
        return out if dtype is None else out.astype(dtype, copy=False)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # arithmetic reads the dense table (rare: test doubles, ad-hoc analysis)
        inputs = tuple(np.asarray(x) if isinstance(x, ProposalRows) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def with_laws(self, laws) -> ProposalRows:
        """The same node-to-law map over replacement ``laws`` (e.g. renormalised)."""
        return ProposalRows(tuple(laws), self.row_of, self.vocab_size)


@dataclass(frozen=True)
class ConditionalProposal:
    """A conditional proposal with its declared capabilities (a sampled builder's
    ``ProposalFn``, :mod:`treespec_sim.policies.sampled`).

    Calling it, ``proposal(depth, parent_token, **path)``, returns the normalised ``(V,)``
    law of a child at ``depth`` given its parent's token.

    Attributes
    ----------
    law : callable
        ``law(depth, parent_token, **path) -> (V,)``: the law itself.
    conditions_on_path : bool
        The law reads each node's whole sampled path: it is then called with ``path=`` (the
        tokens at depths ``1..depth - 1``, the parent last) and :attr:`prefetch` with
        ``paths=``.
    prefetch : callable, optional
        ``prefetch(depth, parent_tokens, **paths) -> None``: told a level's parents at once
        before their laws are asked for (one batched drafter pass); ``None`` when the law is
        computed one parent at a time.
    """

    law: Callable[..., np.ndarray]
    conditions_on_path: bool = False
    prefetch: Callable[..., None] | None = None

    def __call__(self, depth: int, parent_token: int, **path) -> np.ndarray:
        return self.law(depth, parent_token, **path)
