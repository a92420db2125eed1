"""Small exact samplers shared by verifiers and worlds."""

from __future__ import annotations

import numpy as np


def sample_categorical(p: np.ndarray, rng: np.random.Generator) -> int:
    """One draw from the (possibly unnormalised, non-negative) weights ``p``.

    Inverse-CDF on the cumulative sum: ``O(V)`` with no validation pass (callers pass
    validated rows), and zero-weight entries are never returned.
    """
    cdf = np.cumsum(p)
    total = cdf[-1]
    if not total > 0:
        raise ValueError("cannot sample from a row with zero total mass")
    idx = int(np.searchsorted(cdf, rng.random() * total, side="right"))
    if idx >= cdf.size:  # u * total rounded up to total: take the last positive entry
        idx = int(np.flatnonzero(p > 0)[-1])
    return idx
