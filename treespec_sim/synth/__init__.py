"""Synthetic worlds for tree speculative decoding: exact targets and block-diffusion drafters.

Public API::

    from treespec_sim.synth import RegimeSpec, REGIMES, get_regime, make_world, World, Context

* :mod:`.kernel` -- :class:`SparseBoostKernel`, exact sparse-boost Markov kernels at large V.
* :mod:`.regimes` -- :class:`RegimeSpec` (all knobs), the named :data:`REGIMES` and the
  drafter variants of a regime (:data:`DRAFTER_VARIANTS`, :func:`drafter_variant`).
* :mod:`.world` -- :func:`make_world`, :class:`World`, :class:`Context` (the target chain).
* :mod:`.drafter` -- :class:`BlockDiffusionDrafter` (per-depth marginals, correction proposal).
* :mod:`.oracle` -- :class:`MarkovTargetOracle` (lazy target rows for a draft tree).
* :mod:`.diagnostics` -- greedy-chain acceptance length and marginal-sharpness profiles.
"""

from .diagnostics import argmax_mass_profile, chain_tau, mean_chain_tau
from .drafter import BlockDiffusionDrafter
from .kernel import SparseBoostKernel
from .oracle import MarkovTargetOracle
from .regimes import (
    DRAFTER_VARIANTS,
    REGIMES,
    RegimeSpec,
    drafter_variant,
    get_regime,
    is_regime_file,
    regime_file,
    register_regime,
    resolve_regime,
)
from .world import Context, World, make_world

__all__ = [
    "DRAFTER_VARIANTS",
    "REGIMES",
    "BlockDiffusionDrafter",
    "Context",
    "MarkovTargetOracle",
    "RegimeSpec",
    "SparseBoostKernel",
    "World",
    "argmax_mass_profile",
    "chain_tau",
    "drafter_variant",
    "get_regime",
    "is_regime_file",
    "make_world",
    "mean_chain_tau",
    "regime_file",
    "register_regime",
    "resolve_regime",
]
