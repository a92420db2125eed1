"""The compiled kernel (``treespec_sim/ckernel.c``), or ``None`` where it was not built.

``pip install -e .`` compiles it (``setup.py``; optional: without a C compiler the install
succeeds and every caller runs its pure-numpy path). Two callers use it, each with a numpy path
that gives the same result and is tested equal to it (``tests/sim/test_ckernel.py``):

* :func:`treespec_sim.validation.check_log_q` -- one fused pass per row: maximum, NaN flag and
  the row's total mass; the verdict is numpy's (rows within :data:`ROW_SUM_MARGIN` of the
  tolerance are re-checked by numpy);
* :func:`treespec_sim.policies._ddtree.build_nodes` -- candidate extraction, a certified bound
  on the B-th best score, and the tree (every node above the bound, sorted by the heap's key;
  or DDTree's best-first heap), the same nodes in the same order.

Callers read :data:`kernel` at call time, so a test or a benchmark switches every path to numpy
with ``monkeypatch.setattr(treespec_sim.compiled, "kernel", None)``. Design and measurements:
docs/performance.md.

:data:`world_kernel` (``treespec_sim/cworld.c``) is the synthetic drafter's -- its class chain,
normalisers and top lists (:mod:`treespec_sim.synth.drafter`) -- and the sampled fill's and the
traversal's ``V``-length steps (:mod:`treespec_sim.policies.sampled`,
:mod:`treespec_sim.verify.traversal`) and a stable argsort
(:func:`treespec_sim.numerics.stable_argsort`), the numpy code's floats bit for bit
(``tests/sim/test_cworld.py``); ``world_kernel = None`` switches all of them to numpy.
"""

from __future__ import annotations

import platform
from pathlib import Path
from types import ModuleType

__all__ = ["ROW_SUM_MARGIN", "cpu_description", "cpu_name", "kernel", "simd", "world_kernel"]

try:
    from . import ckernel as _built
except ImportError:  # no C compiler at install time: the numpy paths run
    _built = None
try:
    from . import cworld as _built_world
except ImportError:
    _built_world = None

#: The extension module, or ``None``.
kernel: ModuleType | None = _built

#: The synthetic drafter's compiled chain, normalisers and top lists and the sampled fill's and
#: traversal's steps (``treespec_sim/cworld.c``: the same floats as their numpy code), or
#: ``None``.
world_kernel: ModuleType | None = _built_world

#: Relative error bound on the kernel's row sums, with a 3x margin: ``exp`` to < 3e-7 (Cody-Waite
#: reduction, degree-6 Taylor polynomial) in float32, float64 entries rounded to float32 first
#: (< 5.2e-6 for entries >= -87), lanes summing <= 16 float32 terms (< 1e-6) before a float64
#: accumulator. A row whose sum is within this of the tolerance is decided by numpy.
ROW_SUM_MARGIN = 2e-5


def simd() -> str:
    """The kernel's vector path on this CPU (``"avx2"``, ``"generic"``), or ``"numpy"``."""
    return kernel.simd() if kernel is not None else "numpy"


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        return _first_processor(Path("/proc/cpuinfo").read_text())
    except OSError:  # not Linux
        return {}


def _first_processor(text: str) -> dict[str, str]:
    """``key: value`` fields of a ``/proc/cpuinfo`` text up to the first blank line."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break                               # the first processor's block ends here
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` knows."""
    return _cpuinfo().get("model name") or platform.processor() or platform.machine()


def cpu_description() -> str:
    """:func:`cpu_name` with the family and model numbers, e.g. ``"AMD EPYC (family 25, model
    17)"``: a virtual machine often hides the name, and the compiled paths' speed depends on the
    generation (on AMD Zen 4, family 25, a vector compress to memory is microcoded:
    ``docs/performance.md``, "Session 16"), so benchmarks print this."""
    info = _cpuinfo()
    if "cpu family" in info and "model" in info:
        return f"{cpu_name()} (family {info['cpu family']}, model {info['model']})"
    return cpu_name()
