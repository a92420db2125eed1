"""The CPU a run measured on (kept for the benchmarks' and profiles' imports): the names live
in :mod:`treespec_sim.provenance`, with the commit and the versions."""

from __future__ import annotations

from .provenance import cpu_description, cpu_name

__all__ = ["cpu_description", "cpu_name"]
