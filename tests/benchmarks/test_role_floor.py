"""The role-level floor computes the estimators' numbers: a floor that gives other numbers would time less work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.core_estimators import role_z_floor
from rllm_plugins.estimators import prpo


@pytest.mark.parametrize("seed", range(5))
def test_the_floor_gives_prpos_numbers(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 2, 10_000).astype(np.float64) + rng.normal(0.0, 0.1, 10_000)
    offsets = np.arange(0, values.size + 1, 8)
    mean = values.mean()
    plain = (values - mean) / (np.sqrt(((values - mean) ** 2).mean()) + 1e-6)
    np.testing.assert_allclose(role_z_floor(values), plain, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(role_z_floor(values), prpo(values, offsets), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(("value", "size"), [(0.1, 3), (0.7, 3), (123.456, 5)])
def test_a_constant_role_gets_exactly_zero(value: float, size: int) -> None:
    values = np.full(size, value)
    assert (values - values.sum() / size).any()  # without the mean's correction the deviations are not 0
    assert not role_z_floor(values).any()
    assert not prpo(values, np.array([0, size])).any()


def test_the_docs_number_for_a_floor_without_the_correction() -> None:
    values = np.full(3, 0.1)
    centred = values - values.sum() / values.size
    naive = centred / (np.sqrt((centred * centred).mean()) + 1e-6)
    said = f"{naive[0]:.1e}"
    assert said == "-1.4e-11" and np.all(naive == naive[0])
    text = (Path(__file__).parents[2] / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert f"`[0.1] * 3` gets advantages of {said} instead of 0" in text
