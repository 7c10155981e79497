"""PH representations (α, A): validation, moments and closure under sums and mixtures."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.approximation.phase_type import (
    PhaseType,
    erlang,
    erlang_with_mean,
    exponential,
    mean,
    mixture,
    moments,
    sample,
    scaled,
    series,
)

# (phases, rate): Erlang moments E[X] = k/λ, E[X²] = k(k+1)/λ², E[X³] = k(k+1)(k+2)/λ³
ERLANGS = [(1, 1.0), (1, 0.25), (3, 2.0), (5, 0.5), (12, 7.0)]


@pytest.mark.parametrize(("phases", "rate"), ERLANGS)
def test_erlang_moments(phases: int, rate: float) -> None:
    k = phases
    expected = [k / rate, k * (k + 1) / rate**2, k * (k + 1) * (k + 2) / rate**3]
    assert moments(erlang(phases, rate), 3) == pytest.approx(expected, rel=1e-10)
    assert mean(erlang(phases, rate)) == pytest.approx(k / rate, rel=1e-12)


def test_erlang_with_mean_sets_mean_and_variability() -> None:
    m1, m2 = moments(erlang_with_mean(6.0, 4), 2)
    assert m1 == pytest.approx(6.0)
    assert (m2 - m1**2) / m1**2 == pytest.approx(1 / 4)


# (alpha, A, message fragment)
INVALID = [
    ([], [[]], "non-empty"),
    ([1.0], [[-1.0, 0.0]], "shape"),
    ([0.7, 0.7], [[-1.0, 0.0], [0.0, -1.0]], "sum to at most 1"),
    ([-0.1, 1.0], [[-1.0, 0.0], [0.0, -1.0]], "non-negative"),
    ([1.0, 0.0], [[-1.0, -0.5], [0.0, -1.0]], "off-diagonal"),
    ([1.0, 0.0], [[-1.0, 2.0], [0.0, -1.0]], "row sums"),
    ([1.0], [[0.0]], "negative diagonal"),
    ([1.0], [[np.nan]], "finite"),
]


@pytest.mark.parametrize(("alpha", "generator", "message"), INVALID)
def test_invalid_representations_are_refused(
    alpha: list[float], generator: list[list[float]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        PhaseType(np.array(alpha), np.array(generator))


def test_representation_is_read_only() -> None:
    ph = exponential(1.0)
    with pytest.raises(ValueError, match="read-only"):
        ph.A[0, 0] = -2.0


def test_exit_rates() -> None:
    ph = PhaseType(np.array([1.0, 0.0]), np.array([[-3.0, 1.0], [0.0, -2.0]]))
    assert ph.exit_rates.tolist() == [2.0, 2.0]


@given(rates=st.lists(st.floats(0.05, 20.0), min_size=1, max_size=6))
def test_series_of_exponentials_adds_means_and_variances(rates: list[float]) -> None:
    ph = series([exponential(r) for r in rates])
    m1, m2 = moments(ph, 2)
    assert m1 == pytest.approx(sum(1 / r for r in rates), rel=1e-8)
    assert m2 - m1**2 == pytest.approx(sum(1 / r**2 for r in rates), rel=1e-7)


def test_series_skips_a_stage_with_an_atom_at_zero() -> None:
    # The middle stage is absent with probability 0.4: mean 1 + 0.6·2 + 3.
    maybe = PhaseType(np.array([0.6]), np.array([[-0.5]]))
    ph = series([exponential(1.0), maybe, erlang_with_mean(3.0, 2)])
    assert mean(ph) == pytest.approx(1.0 + 0.6 * 2.0 + 3.0)
    leading = series([maybe, exponential(1.0)])
    assert leading.alpha.sum() == pytest.approx(1.0)
    assert mean(leading) == pytest.approx(0.6 * 2.0 + 1.0)


def test_mixture_weights_the_moments() -> None:
    ph = mixture([0.25, 0.75], [exponential(1.0), erlang(2, 1.0)])
    assert moments(ph, 2) == pytest.approx([0.25 * 1 + 0.75 * 2, 0.25 * 2 + 0.75 * 6])


@pytest.mark.parametrize("speedup", [0.5, 1.0, 3.0])
def test_scaled_divides_the_time(speedup: float) -> None:
    base = erlang_with_mean(4.0, 3)
    assert moments(scaled(base, speedup), 2) == pytest.approx(
        moments(base, 2) / np.array([speedup, speedup**2])
    )


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf")])
def test_bad_parameters_are_refused(bad: float) -> None:
    with pytest.raises(ValueError):
        exponential(bad)
    with pytest.raises(ValueError):
        erlang_with_mean(bad, 2)
    with pytest.raises(ValueError):
        scaled(exponential(1.0), bad)


def test_sample_matches_the_moments() -> None:
    ph = series([exponential(1.0), mixture([0.5, 0.5], [erlang(3, 2.0), exponential(0.5)])])
    draws = sample(ph, np.random.default_rng(5), 40_000)
    m1, m2 = moments(ph, 2)
    assert draws.mean() == pytest.approx(m1, rel=0.02)
    assert (draws**2).mean() == pytest.approx(m2, rel=0.05)


@pytest.mark.parametrize(
    "generator",
    [
        [[-3.0, 1.0, 0.5], [0.0, -2.0, 1.0], [0.0, 0.0, -1.0]],  # forward only: triangular solve
        [[-3.0, 1.0, 0.5], [0.7, -2.0, 1.0], [0.2, 0.3, -1.0]],  # feedback: general solve
    ],
)
def test_moments_agree_with_the_explicit_inverse(generator: list[list[float]]) -> None:
    A = np.array(generator)
    alpha = np.array([0.5, 0.3, 0.2])
    inverse = np.linalg.inv(-A)
    expected = [alpha @ inverse @ np.ones(3), 2 * alpha @ inverse @ inverse @ np.ones(3)]
    assert moments(PhaseType(alpha, A), 2) == pytest.approx(expected, rel=1e-12)
