"""Shared fixtures: one SparkSession for the whole test run."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

import krishiv_py as kp

settings.register_profile(
    "krishiv",
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "krishiv"))


@pytest.fixture(scope="session")
def session() -> Iterator[kp.Session]:
    """The test run's one embedded Spark session (started on first use)."""
    s = kp.Session.embedded(app_name="krishiv-tests")
    yield s
    s.stop()
