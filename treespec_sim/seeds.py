"""The one seed convention: a generator for a seed and the labels of what it draws for.

``cell_rng(seed, *labels)`` is ``numpy.random.default_rng([seed, *labels])`` with each string
label replaced by its CRC-32 (so a cell's key names its stream, and the same key always draws
the same numbers) and integer labels kept: ``cell_rng(s)`` is ``default_rng(s)``,
``cell_rng(s, 7)`` is ``default_rng([s, 7])``, ``cell_rng(s, "math500|q|1.0", 0)`` is
``default_rng([s, crc32(b"math500|q|1.0"), 0])``. Every family, the calibration and the log
fitter take their generators from here.
"""

from __future__ import annotations

import zlib

import numpy as np

from .validation import check_nonnegative_int

__all__ = ["cell_rng", "label_entropy"]


def label_entropy(label: int | str) -> int:
    """A label as a non-negative integer of a seed sequence: a string's CRC-32 of its UTF-8
    bytes, an integer as it is."""
    if isinstance(label, str):
        return zlib.crc32(label.encode())
    return check_nonnegative_int(label, "label")


def cell_rng(seed: int, *labels: int | str) -> np.random.Generator:
    """The generator for ``seed`` and ``labels`` (see the module's docstring).

    Parameters
    ----------
    seed : int
        A non-negative seed (the sweep's, a world's ``seed + i``, a fixed constant).
    *labels : int or str
        What the stream is for: strings (a cell's key) enter as their CRC-32, integers as
        they are.

    Returns
    -------
    numpy.random.Generator
    """
    seed = check_nonnegative_int(seed, "seed")
    if not labels:
        return np.random.default_rng(seed)
    return np.random.default_rng([seed, *(label_entropy(x) for x in labels)])
