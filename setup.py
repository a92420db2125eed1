"""Build hook for the compiled parts (the rest is pyproject.toml).

* ``treespec_sim.cworld`` -- the synthetic drafter's class chain and top lists, the same floats
  as their numpy code (``-ffp-contract=off``: no fused multiply-add may change a rounding).

``optional=True``: without a C compiler the install still succeeds,
``treespec_sim.compiled.world_kernel`` is ``None`` and the pure-numpy paths run (the
same trees, verdicts and floats; docs/performance.md).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "treespec_sim.cworld",
            ["treespec_sim/cworld.c"],
            depends=["treespec_sim/cworld_norms.h", "treespec_sim/radix_sort.h"],
            extra_compile_args=["-O3", "-ffp-contract=off"],
            optional=True,
        ),
    ]
)
