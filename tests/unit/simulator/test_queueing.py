"""The M/M/c formulas the simulator is checked against (simulator/queueing.py)."""

from __future__ import annotations

import math

import pytest

from simulator.queueing import (
    erlang_b,
    erlang_c,
    mmc_mean_queue_length,
    mmc_mean_response,
    mmc_mean_wait,
    mmc_wait_quantile,
)


def _erlang_c_textbook(c: int, a: float) -> float:
    """The closed form with factorials, fine for small c: a^c/c! · c/(c−a) over the sum."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


@pytest.mark.parametrize(
    ("servers", "load", "expected"),
    [
        (1, 0.5, 0.5),  # M/M/1: C = ρ
        (1, 0.9, 0.9),
        (2, 1.0, 1 / 3),  # by hand: B(1) = 1/2, B(2) = 1/5, C = 0.4/1.2
        (3, 2.0, 4 / 9),  # by hand: B(3) = 4/19, C = (12/19)/(3 − 2·15/19) = 12/27
        (1, 0.0, 0.0),
        (5, 0.0, 0.0),
    ],
)
def test_erlang_c_known_values(servers: int, load: float, expected: float) -> None:
    assert erlang_c(servers, load) == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(("servers", "load"), [(2, 1.5), (4, 3.2), (7, 1.0), (10, 9.5), (20, 15.0)])
def test_erlang_c_matches_the_closed_form(servers: int, load: float) -> None:
    assert erlang_c(servers, load) == pytest.approx(_erlang_c_textbook(servers, load), rel=1e-10)


@pytest.mark.parametrize(
    ("servers", "load", "expected"),
    [(1, 1.0, 0.5), (2, 1.0, 0.2), (3, 2.0, 4 / 19), (1, 0.0, 0.0)],
)
def test_erlang_b_known_values(servers: int, load: float, expected: float) -> None:
    assert erlang_b(servers, load) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_erlang_b_allows_overload() -> None:
    assert 0 < erlang_b(2, 10.0) < 1


@pytest.mark.parametrize(("servers", "load"), [(1000, 950.0), (5000, 4900.0), (5000, 100.0)])
def test_large_server_counts_stay_finite(servers: int, load: float) -> None:
    c = erlang_c(servers, load)
    assert math.isfinite(c)
    assert 0 <= c < 1
    assert math.isfinite(mmc_mean_wait(servers, load, 1.0))


def test_more_servers_wait_less() -> None:
    values = [erlang_c(c, 8.0) for c in range(9, 30)]
    assert values == sorted(values, reverse=True)


@pytest.mark.parametrize(("arrival", "service"), [(0.5, 1.0), (3.0, 4.0), (0.09, 0.1)])
def test_mm1_mean_wait_and_response(arrival: float, service: float) -> None:
    rho = arrival / service
    assert mmc_mean_wait(1, arrival, service) == pytest.approx(rho / (service - arrival))
    assert mmc_mean_response(1, arrival, service) == pytest.approx(1 / (service - arrival))
    assert mmc_mean_queue_length(1, arrival, service) == pytest.approx(rho**2 / (1 - rho))


def test_mm2_by_hand() -> None:
    # λ = 1, μ = 1, c = 2: C = 1/3, Wq = C/(cμ − λ) = 1/3, W = 4/3.
    assert mmc_mean_wait(2, 1.0, 1.0) == pytest.approx(1 / 3)
    assert mmc_mean_response(2, 1.0, 1.0) == pytest.approx(4 / 3)


def test_wait_quantile() -> None:
    # M/M/1, λ = 0.5, μ = 1: C = 0.5, P(Wq > t) = 0.5·exp(−0.5 t).
    assert mmc_wait_quantile(1, 0.5, 1.0, 0.5) == 0.0
    assert mmc_wait_quantile(1, 0.5, 1.0, 0.3) == 0.0
    assert mmc_wait_quantile(1, 0.5, 1.0, 0.95) == pytest.approx(math.log(10) / 0.5)


@pytest.mark.parametrize(
    ("servers", "load"),
    [(1, 1.0), (2, 2.5), (0, 0.5), (-1, 0.5), (1, -0.1), (1, math.nan), (1, math.inf), (True, 0.5)],
)
def test_erlang_c_rejects_invalid_input(servers: int, load: float) -> None:
    with pytest.raises(ValueError, match=r"servers|load|unstable"):
        erlang_c(servers, load)


@pytest.mark.parametrize(
    ("servers", "arrival", "service"),
    [
        (1, 1.0, 1.0),
        (2, 3.0, 1.0),
        (1, 0.0, 1.0),
        (1, 0.5, 0.0),
        (1, 0.5, -1.0),
        (1, math.nan, 1.0),
    ],
)
def test_mmc_rejects_unstable_or_invalid_input(
    servers: int, arrival: float, service: float
) -> None:
    with pytest.raises(ValueError, match=r"rate|unstable"):
        mmc_mean_wait(servers, arrival, service)
    with pytest.raises(ValueError, match=r"rate|unstable"):
        mmc_mean_response(servers, arrival, service)


@pytest.mark.parametrize("quantile", [-0.1, 1.0, math.nan])
def test_wait_quantile_rejects_bad_quantiles(quantile: float) -> None:
    with pytest.raises(ValueError, match="quantile"):
        mmc_wait_quantile(1, 0.5, 1.0, quantile)
