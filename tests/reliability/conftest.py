"""Hypothesis profiles of the reliability tests.

``ci`` (default): few derandomized examples, no deadline (the first Warp launch of a kernel
compiles it); ``all``: many more examples, still derandomized-free for exploration. Select
with ``WARPSPHCORE_HYPOTHESIS_PROFILE=all``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

settings.register_profile("ci", max_examples=40, derandomize=True, **_COMMON)
settings.register_profile("all", max_examples=300, derandomize=False, **_COMMON)
settings.load_profile(os.environ.get("WARPSPHCORE_HYPOTHESIS_PROFILE", "ci"))
