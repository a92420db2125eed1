"""treespec_sim: tree speculative decoding with block-diffusion drafters, simulated exactly.

What a user needs first is importable from here::

    from treespec_sim import make_world, run_round
    world = make_world("math500", seed=0)
    rnd = run_round(world, world.sample_context(rng), method="ddtree", budget=64, rng=rng)

``run_round``, ``run_rounds``, ``decode`` and ``Round`` (:mod:`treespec_sim.engine`, the one
round loop; ``decode`` is the simulator's decoding loop over any backend, the real-model one is
``real_models.decode``), ``make_world`` (:mod:`treespec_sim.synth`), ``METHODS`` and
``register`` (:mod:`treespec_sim.methods`, the one method registry), ``get_cost_model``
(:mod:`treespec_sim.cost`) and ``DraftTree`` (:mod:`treespec_sim.tree`). Each stays importable
from its module as well. Everything here is numpy/scipy-level; torch, cvxpy, matplotlib and
dask are imported only inside the modules that need them. See ``docs/usage.md``.
"""

from .cost import get_cost_model
from .engine import Round, decode, run_round, run_rounds
from .methods import METHODS, register
from .provenance import VERSION as __version__
from .synth import make_world
from .tree import DraftTree

__all__ = ["METHODS", "DraftTree", "Round", "__version__", "decode", "get_cost_model",
           "make_world", "register", "run_round", "run_rounds"]
