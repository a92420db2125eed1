r"""The one draft type every builder returns: a tree and what its verifier must be told.

A deterministic builder (``chain``, ``ddtree``, ``caddtree``, ...) returns a :class:`Draft`
with no proposal; a sampled builder (sampled chains, Tsubame, sampled DDTree, ...) returns the
tree with the exact law each node's children were drawn from, the drawing scheme and the
temperature the proposal was tempered to. The verifier needs exactly these facts
(condition C4 of ``docs/theory/tsubame.md``): the rule must match the scheme, and the target must
sample at the proposal's temperature.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from ..tree import DraftTree

__all__ = ["MATCHING_RULES", "Draft", "ProposalRows"]

#: Verifier rules that are exact for each way of filling children (condition C4 of
#: ``docs/theory/tsubame.md``); ``"deterministic"`` is any tree whose tokens were chosen, not
#: drawn (and the ``T = 0`` top-k fill of a sampled policy).
MATCHING_RULES = {
    "iid": ("rrs",),
    "without_replacement": ("rrsw", "traversal", "univer", "univer-guided", "univer-fixed"),
    "greedy": ("univer-fixed",),
    "deterministic": ("follow", "tev"),
}


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
        if isinstance(key, tuple) and key and _is_int(key[0]):
            rest = key[1:]
            return self.row(key[0])[rest] if rest else self.row(key[0])
        if _is_int(key):
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


def _is_int(x) -> bool:
    if isinstance(x, (bool, np.bool_)):
        return False
    try:
        operator.index(x)
    except TypeError:
        return False
    return True


@dataclass(frozen=True)
class Draft:
    """A drafted tree with what its verifier must be told.

    Attributes
    ----------
    tree : DraftTree
        Children in draw order.
    proposal : ProposalRows, ndarray float64 (n+1, V), or None
        Row ``v`` = the exact law ``v``'s children were drawn from (zeros, or any law, for
        leaves: never read); None for a deterministic tree. Sampled builders return
        :class:`ProposalRows`; a dense array is accepted as well.
    scheme : str
        ``"iid"``, ``"without_replacement"``, ``"greedy"`` or ``"deterministic"``.
    temperature : float or None
        The temperature the proposal was tempered to (the target must sample at the same one);
        None for a deterministic tree, which any target temperature may verify.
    """

    tree: DraftTree
    proposal: ProposalRows | np.ndarray | None = None
    scheme: str = "deterministic"
    temperature: float | None = None

    def __post_init__(self) -> None:
        if self.scheme not in MATCHING_RULES:
            raise ValueError(f"scheme must be one of {', '.join(MATCHING_RULES)}; "
                             f"got {self.scheme!r}")
        if (self.proposal is None) != (self.scheme == "deterministic"):
            raise ValueError("a deterministic draft has no proposal and a sampled draft needs "
                             f"one; got scheme {self.scheme!r} with proposal "
                             f"{'None' if self.proposal is None else 'rows'}")

    @property
    def sampled(self) -> bool:
        """Whether the tokens were drawn (the verifier needs :attr:`proposal`)."""
        return self.proposal is not None

    def check_rule(self, rule: str, *, target_temperature: float | None = None) -> None:
        """Raise ``ValueError`` if ``rule`` does not match the draws (C4), or if the target
        samples at a different temperature than the proposal was tempered to."""
        ok = MATCHING_RULES[self.scheme]
        if rule not in ok:
            raise ValueError(f"rule {rule!r} does not match {self.scheme!r} draws (exact rules: "
                             f"{', '.join(ok)})")
        if (self.sampled and target_temperature is not None
                and float(target_temperature) != self.temperature):
            raise ValueError(
                f"temperature mismatch: the draft was sampled at T = {self.temperature!r} but "
                f"the target is verified at T = {target_temperature!r}; draw and verify at the "
                "same temperature")
