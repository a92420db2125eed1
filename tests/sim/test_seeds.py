"""The one seed convention (treespec_sim.seeds.cell_rng) draws the streams the families, the
calibration and the log fitter drew before it existed."""

import zlib

import numpy as np
import pytest

from treespec_sim.seeds import cell_rng


@pytest.mark.parametrize(("labels", "entropy"), [
    ((), 5),                                               # calibration: default_rng(seed)
    ((7,), [5, 7]),                                        # caddtree: [seed, 7]
    (("math500|T=1",), [5, zlib.crc32(b"math500|T=1")]),   # ddtree: [seed, crc32(key)]
    (("a|b|1.0", 0), [5, zlib.crc32(b"a|b|1.0"), 0]),      # stochastic: [seed, crc32(key), 0]
])
def test_cell_rng_is_the_old_conventions_stream(labels, entropy):
    assert np.array_equal(cell_rng(5, *labels).random(8), np.random.default_rng(entropy).random(8))


def test_cell_rng_labels_name_different_streams_and_bad_seeds_fail():
    assert not np.array_equal(cell_rng(1, "a").random(4), cell_rng(1, "b").random(4))
    assert np.array_equal(cell_rng(np.int64(3), 2).random(4), cell_rng(3, 2).random(4))
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="seed"):
            cell_rng(bad)
    with pytest.raises(ValueError, match="label"):
        cell_rng(0, -2)
