"""The shipped tiny model pair, loaded once for every real-model test (``bundle``).

Tests must not change it: a test that needs another drafter or dtype loads its own
(``real_models.load(...)``), and training copies the drafter (``exittrain.train``).
"""

import pytest

import real_models


@pytest.fixture(scope="session")
def bundle():
    """``real_models.load()``: the shipped tiny Qwen3 target and DFlash drafter on the CPU."""
    return real_models.load()
