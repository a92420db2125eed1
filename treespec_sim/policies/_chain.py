"""The DFlash chain: the drafter's argmax token at every depth."""

from __future__ import annotations

import numpy as np

from ..marginals import LazyLogMarginals
from ..paths import LogQ
from ..tree import DraftTree
from ..validation import check_budget, check_log_q, check_root_token

__all__ = ["chain"]


def chain(log_q: LogQ, length: int | None = None, *, root_token: int = -1) -> DraftTree:
    r"""The argmax chain :math:`u_d = \arg\max_a \log q_d(a)` for ``d = 1..length``.

    This is DFlash's own draft (``dflash/model.py``: every block position takes the argmax of
    the draft logits, at any temperature).

    Parameters
    ----------
    log_q : array_like of float, shape (L, V), or LazyLogMarginals
        Drafter log-probabilities at depths ``1..L`` (a lazy one is read through ``argmax()``).
    length : int, optional
        Chain length (default ``L``; values above ``L`` are capped at ``L``).
    root_token : int, optional
        Token stored at the root; ``-1`` if unknown.

    Returns
    -------
    DraftTree
        A path of ``min(length, L)`` nodes; ties go to the smaller token id.
    """
    if isinstance(log_q, LazyLogMarginals):
        lp = None
        L = log_q.shape[0]
    else:
        lp, _ = check_log_q(log_q)
        L = lp.shape[0]
    vocab = log_q.shape[1] if lp is None else lp.shape[1]
    root_token = check_root_token(root_token, vocab_size=vocab)
    n = L if length is None else min(check_budget(length, "length"), L)
    parent = np.arange(-1, n, dtype=np.int64)
    token = np.empty(n + 1, dtype=np.int64)
    token[0] = root_token
    token[1:] = log_q.argmax()[:n] if lp is None else np.argmax(lp[:n], axis=1)
    depth = np.arange(n + 1, dtype=np.int64)
    for a in (parent, token, depth):
        a.flags.writeable = False
    return DraftTree(parent, token, depth)
