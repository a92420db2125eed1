"""Hypothesis profiles, the one place a property test's budget is set.

``ci`` (derandomized: the same examples on every machine) under CI, ``dev`` (random examples,
a few more) locally, ``thorough`` on request before a release or after touching a verifier:
``HYPOTHESIS_PROFILE=thorough make test``. No test sets its own ``max_examples``.
"""

import os

from hypothesis import HealthCheck, settings

_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}

settings.register_profile("ci", derandomize=True, max_examples=100, print_blob=True, **_COMMON)
settings.register_profile("dev", max_examples=150, **_COMMON)
settings.register_profile("thorough", max_examples=2000, print_blob=True, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
