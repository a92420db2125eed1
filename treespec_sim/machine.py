"""The CPU a run measured on, for benchmark and profile headers."""

from __future__ import annotations

import platform
from pathlib import Path

__all__ = ["cpu_description", "cpu_name"]

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
    17)"``: a virtual machine often hides the name, and a benchmark's ratios depend on the
    generation, so benchmarks print this."""
    info = _cpuinfo()
    if "cpu family" in info and "model" in info:
        return f"{cpu_name()} (family {info['cpu family']}, model {info['model']})"
    return cpu_name()
