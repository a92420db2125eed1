"""Build hook for the one compiled part, ``treespec_sim.ckernel`` (the rest is pyproject.toml).

``optional=True``: without a C compiler the install still succeeds,
``treespec_sim.compiled.kernel`` is ``None`` and the pure-numpy paths run (the same trees and
verdicts; docs/performance.md).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "treespec_sim.ckernel",
            ["treespec_sim/ckernel.c"],
            depends=["treespec_sim/ckernel_simd.h"],
            extra_compile_args=["-O3", "-Wno-psabi"],  # -Wno-psabi: 32-byte vectors, inlined
            optional=True,
        )
    ]
)
