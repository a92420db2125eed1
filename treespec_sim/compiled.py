"""The synthetic drafter's compiled module (``treespec_sim/cworld.c``), or ``None`` where it was
not built, and the CPU's name for benchmark headers.

:data:`world_kernel` is the synthetic drafter's -- its class chain, normalisers and top lists
(:mod:`treespec_sim.synth.drafter`) -- and the sampled fill's and the traversal's ``V``-length
steps (:mod:`treespec_sim.policies.sampled`, :mod:`treespec_sim.verify.traversal`), the numpy
code's floats bit for bit (``tests/sim/test_cworld.py``); ``world_kernel = None`` switches all of
them to numpy.
"""

from __future__ import annotations

import platform
from pathlib import Path
from types import ModuleType

__all__ = ["cpu_description", "cpu_name", "world_kernel"]

try:
    from . import cworld as _built_world
except ImportError:
    _built_world = None

#: The synthetic drafter's compiled chain, normalisers and top lists and the sampled fill's and
#: traversal's steps (``treespec_sim/cworld.c``: the same floats as their numpy code), or
#: ``None``.
world_kernel: ModuleType | None = _built_world


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
