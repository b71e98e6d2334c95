"""Fixtures of the fused MALA's tests."""
import pytest


@pytest.fixture
def fresh_plans():
    """The op's plan cache, empty, and emptied again afterwards: its plans may
    come from a patched SM count or tile table. (A plan is a function of the
    case's sizes, and of the SM count, which is fixed per device.)"""
    from mavit_mm.ops.mala import function as mala_function
    mala_function.cached_launch_plan.cache_clear()
    yield mala_function.cached_launch_plan
    mala_function.cached_launch_plan.cache_clear()

