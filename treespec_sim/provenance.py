"""Where a result came from: the code's commit, the versions, the machine.

Every run record (the sweep's ``run.json``, the calibration file) and every benchmark or
profile header takes these fields from here, so they are written one way.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

__all__ = ["VERSION", "cpu_description", "cpu_name", "git_commit", "versions"]

#: The package's version (re-exported as ``treespec_sim.__version__``).
VERSION = "0.1.0"

#: What :func:`git_commit` returns outside a git checkout (or without git).
UNKNOWN_COMMIT = "unknown"


def git_commit() -> str:
    """The checked-out commit of the source tree this module was loaded from, else
    ``"unknown"`` (an installed copy, or no ``git`` on the machine)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN_COMMIT
    return out.stdout.strip() or UNKNOWN_COMMIT


def versions() -> dict[str, str]:
    """The versions a run's numbers depend on (treespec, Python, NumPy, SciPy) and the
    platform string."""
    import scipy  # scipy is heavy to import and only run records need its version here

    return {"treespec": VERSION, "python": sys.version.split()[0],
            "numpy": np.__version__, "scipy": scipy.__version__,
            "platform": platform.platform()}


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
