"""The node's energy estimate: RAPL read from a recorded powercap tree, else the power model."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.metrics.energy import EnergyMeter, detect_rapl
from policies.approximation.energy import PowerModel


def powercap(root: Path, packages: dict[int, int]) -> Path:
    """A powercap tree as a two-socket Intel machine shows it (sub-domains included)."""
    for package, energy_uj in packages.items():
        domain = root / f"intel-rapl:{package}"
        domain.mkdir(parents=True)
        (domain / "name").write_text(f"package-{package}\n")
        (domain / "energy_uj").write_text(f"{energy_uj}\n")
        (domain / "max_energy_range_uj").write_text("262143328850\n")
        core = root / f"intel-rapl:{package}:0"
        core.mkdir()
        (core / "energy_uj").write_text("5\n")
        (core / "max_energy_range_uj").write_text("262143328850\n")
    return root


def test_rapl_packages_are_found_and_their_subdomains_left_out(tmp_path: Path) -> None:
    domains = detect_rapl(powercap(tmp_path, {0: 10, 1: 20}))
    assert [d.name for d in domains] == ["intel-rapl:0", "intel-rapl:1"]
    assert detect_rapl(tmp_path / "absent") == ()


def test_rapl_joules_are_the_counters_deltas_across_a_wrap(tmp_path: Path) -> None:
    root = powercap(tmp_path, {0: 262143328850 - 1_000_000})
    meter = EnergyMeter(PowerModel(), detect_rapl(root))
    assert meter.sample(0.0, 0.5, False).energy_j == 0.0  # the first read is the baseline
    (root / "intel-rapl:0/energy_uj").write_text("2000000\n")  # wrapped: 1 J + 2 J
    reading = meter.sample(1.0, 0.5, False)
    assert reading.source == "rapl"
    assert [reading.energy_j, reading.power_w] == pytest.approx([3.0, 3.0])


@pytest.mark.parametrize(
    ("utilisation", "sprinting", "watts"),
    [(0.0, False, 100.0), (1.0, False, 200.0), (0.5, True, 225.0)],
)
def test_without_rapl_the_power_model_is_integrated(
    utilisation: float, sprinting: bool, watts: float
) -> None:
    meter = EnergyMeter(PowerModel(100.0, 200.0, 1.5))
    meter.sample(10.0, utilisation, sprinting)
    reading = meter.sample(12.0, utilisation, sprinting)
    assert reading.source == "model"
    assert [reading.energy_j, reading.power_w] == pytest.approx([2 * watts, watts])
