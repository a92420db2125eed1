"""Hypothesis profiles, the one place a property test's budget is set; numba's compile, paid
once before the test workers start.

``ci`` (derandomized: the same examples on every machine) under CI, ``dev`` (random examples,
a few more) locally, ``thorough`` on request before a release or after touching a verifier:
``HYPOTHESIS_PROFILE=thorough make test``. No test sets its own ``max_examples``.
"""

import os

from hypothesis import HealthCheck, settings

from treespec_sim.warmup import warm_up

_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}

settings.register_profile("ci", derandomize=True, max_examples=100, print_blob=True, **_COMMON)
settings.register_profile("dev", max_examples=150, **_COMMON)
settings.register_profile("thorough", max_examples=2000, print_blob=True, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_configure(config):
    """Compile the kernels in pytest's main process, before xdist starts its workers: they then
    load numba's cache instead of each compiling the same code."""
    if not hasattr(config, "workerinput"):
        warm_up()
