import os

from hypothesis import HealthCheck, settings

# CI: bounded examples and no deadline (shared 2-core machines are noisy).
settings.register_profile(
    "ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
