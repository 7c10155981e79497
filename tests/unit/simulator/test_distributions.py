"""Task-duration distributions: their means, shapes, determinism and the parsing of each."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from simulator.distributions import (
    MAX_DURATION,
    Distribution,
    Empirical,
    Exponential,
    Fixed,
    LogNormal,
    Pareto,
    WorkloadError,
    parse_distribution,
)

SEED = 20240601
DRAWS = 20_000


def draws(distribution: Distribution, n: int = DRAWS, seed: int = SEED) -> list[float]:
    rng = random.Random(seed)
    return [distribution.sample(rng) for _ in range(n)]


@pytest.mark.parametrize(
    ("distribution", "mean"),
    [
        (Fixed(30), 30.0),
        (Exponential(60), 60.0),
        (Pareto(alpha=3, t_min=10), 15.0),
        (Pareto(alpha=2.5, t_min=4), 2.5 * 4 / 1.5),
        (LogNormal(median=30, sigma=0.5), 30 * math.exp(0.125)),
        (Empirical((3, 5, 8)), 16 / 3),
    ],
)
def test_sample_mean_is_close_to_the_mean(distribution: Distribution, mean: float) -> None:
    assert distribution.mean == pytest.approx(mean)
    # The seed is fixed, so this cannot flake; 5% is several standard errors for each.
    assert statistics.fmean(draws(distribution)) == pytest.approx(mean, rel=0.05)


def test_pareto_is_at_least_t_min_and_has_its_tail() -> None:
    values = draws(Pareto(alpha=1.6, t_min=10))
    assert min(values) >= 10
    # P(X > 2 t_min) = 2 ** -alpha
    share = sum(value > 20 for value in values) / len(values)
    assert share == pytest.approx(2**-1.6, abs=0.02)


@pytest.mark.parametrize(("alpha", "mean"), [(1.0, math.inf), (0.5, math.inf), (2.0, 20.0)])
def test_pareto_mean(alpha: float, mean: float) -> None:
    assert Pareto(alpha=alpha, t_min=10).mean == mean


def test_lognormal_median() -> None:
    assert statistics.median(draws(LogNormal(median=30, sigma=1.0))) == pytest.approx(30, rel=0.05)


def test_empirical_draws_each_value_alike() -> None:
    values = draws(Empirical((3.0, 5.0, 8.0)), n=9_000)
    assert set(values) == {3.0, 5.0, 8.0}
    for value in (3.0, 5.0, 8.0):
        assert values.count(value) == pytest.approx(3_000, rel=0.1)


@pytest.mark.parametrize(
    "distribution",
    [Fixed(1), Exponential(2), Pareto(1.6, 10), LogNormal(30, 1), Empirical((1, 2, 3))],
)
def test_same_seed_same_draws(distribution: Distribution) -> None:
    assert draws(distribution, 100, seed=1) == draws(distribution, 100, seed=1)
    if not isinstance(distribution, Fixed):
        assert draws(distribution, 100, seed=1) != draws(distribution, 100, seed=2)


@pytest.mark.parametrize("distribution", [Pareto(alpha=1e-3, t_min=1), LogNormal(1, 1000)])
def test_heavy_tails_are_capped(distribution: Distribution) -> None:
    values = draws(distribution, 1_000)
    assert all(0 <= value <= MAX_DURATION for value in values)
    assert max(values) == MAX_DURATION


def test_lognormal_mean_overflows_to_inf() -> None:
    assert LogNormal(1, 1000).mean == math.inf


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (30, Fixed(30)),
        (2.5, Fixed(2.5)),
        ({"distribution": "fixed", "value": 30}, Fixed(30)),
        ({"distribution": "exponential", "mean": 60}, Exponential(60)),
        ({"distribution": "pareto", "alpha": 1.6, "t_min": 10}, Pareto(1.6, 10)),
        ({"distribution": "lognormal", "median": 30, "sigma": 1.0}, LogNormal(30, 1.0)),
        ({"distribution": "empirical", "values": [3, 5, 8]}, Empirical((3.0, 5.0, 8.0))),
    ],
)
def test_parse_distribution(document: object, expected: Distribution) -> None:
    assert parse_distribution(document, "d") == expected


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (-5, "d: must be a positive number, got -5"),
        (0, "d: must be a positive number, got 0"),
        (True, "d: must be a positive number or a mapping with 'distribution', not a boolean"),
        ("30s", "d: must be a positive number or a mapping with 'distribution', not a string"),
        (None, "d: must be a positive number or a mapping with 'distribution', not null"),
        (10**400, "d: must be at most 1e+09, got a huge number"),
        ({"alpha": 1}, "d.distribution: is required"),
        (
            {"distribution": "weibull"},
            "d.distribution: must be one of fixed, exponential, pareto, lognormal, empirical, "
            "got 'weibull'",
        ),
        ({"distribution": 3}, "d.distribution: must be one of"),
        ({"distribution": "fixed"}, "d.value: is required"),
        (
            {"distribution": "fixed", "value": 1, "mean": 2},
            "d.mean: unknown field (allowed: distribution, value)",
        ),
        (
            {"distribution": "fixed", "value": "3"},
            "d.value: must be a positive number, not a string",
        ),
        (
            {"distribution": "fixed", "value": True},
            "d.value: must be a positive number, not a boolean",
        ),
        (
            {"distribution": "fixed", "value": math.inf},
            "d.value: must be a finite positive number, got inf",
        ),
        (
            {"distribution": "fixed", "value": math.nan},
            "d.value: must be a finite positive number, got nan",
        ),
        (
            {"distribution": "exponential", "mean": 2e9},
            "d.mean: must be at most 1e+09, got 2000000000.0",
        ),
        (
            {"distribution": "exponential", "mean": -1.5},
            "d.mean: must be a positive number, got -1.5",
        ),
        (
            {"distribution": "pareto", "alpha": -1, "t_min": 10},
            "d.alpha: must be a positive number, got -1",
        ),
        ({"distribution": "pareto", "alpha": 1.6}, "d.t_min: is required"),
        (
            {"distribution": "pareto", "alpha": 1.6, "t_min": 0},
            "d.t_min: must be a positive number, got 0",
        ),
        (
            {"distribution": "lognormal", "median": 30, "sigma": 0},
            "d.sigma: must be a positive number, got 0",
        ),
        ({"distribution": "empirical", "values": []}, "d.values: must not be empty"),
        (
            {"distribution": "empirical", "values": [1, 0]},
            "d.values[1]: must be a positive number, got 0",
        ),
        (
            {"distribution": "empirical", "values": "1,2"},
            "d.values: must be a list of positive numbers, not a string",
        ),
        ({"distribution": "fixed", "value": 1, 7: 2}, "d: keys must be strings, not an integer"),
        ([1, 2], "d: must be a positive number or a mapping with 'distribution', not a list"),
    ],
)
def test_parse_distribution_refusals(document: object, message: str) -> None:
    with pytest.raises(WorkloadError) as caught:
        parse_distribution(document, "d")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value) == f"{caught.value.field}: {caught.value.problem}"


def test_field_path_is_in_the_message() -> None:
    with pytest.raises(WorkloadError) as caught:
        parse_distribution(
            {"distribution": "pareto", "alpha": -1, "t_min": 10}, "classes[1].phases[0].duration"
        )
    assert str(caught.value) == (
        "classes[1].phases[0].duration.alpha: must be a positive number, got -1"
    )
    assert caught.value.field == "classes[1].phases[0].duration.alpha"


@pytest.mark.parametrize(
    "make",
    [
        lambda: Fixed(-1),
        lambda: Exponential(0),
        lambda: Pareto(0, 1),
        lambda: Pareto(1, math.inf),
        lambda: LogNormal(1, -1),
        lambda: Empirical(()),
        lambda: Empirical((1.0, -2.0)),
    ],
)
def test_constructors_refuse_bad_parameters(make: object) -> None:
    with pytest.raises(WorkloadError):
        make()  # type: ignore[operator]
