"""The linear power model, sprinting at the paper's factor."""

from __future__ import annotations

import pytest

from policies.approximation.energy import PowerModel


@pytest.mark.parametrize(
    ("utilisation", "sprinting", "watts"),
    [
        (0.0, False, 180.0),
        (1.0, False, 250.0),
        (0.5, False, 215.0),
        (1.7, False, 250.0),  # clamped
        (-0.1, False, 180.0),
        (0.0, True, 270.0),  # the paper's 180 W -> 270 W
    ],
)
def test_power_is_linear_in_utilisation_and_scaled_while_sprinting(
    utilisation: float, sprinting: bool, watts: float
) -> None:
    assert PowerModel().power_w(utilisation, sprinting) == pytest.approx(watts)


def test_energy_is_power_times_time() -> None:
    assert PowerModel().energy_j(10.0, 1.0) == pytest.approx(2500.0)
    with pytest.raises(ValueError, match="backwards"):
        PowerModel().energy_j(-1.0, 0.5)


@pytest.mark.parametrize(
    "fields",
    [{"idle_w": 300.0}, {"idle_w": -1.0}, {"peak_w": float("inf")}, {"sprint_factor": 0.9}],
)
def test_bad_models_are_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        PowerModel(**fields)
