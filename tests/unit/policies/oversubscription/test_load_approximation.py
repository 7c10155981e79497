"""Alg. 1 (load level approximation) and Alg. 2 (Tukey outlier elimination)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from policies.oversubscription.load_approximation import approximate_load, eliminate_outliers


def _monotonous(values: list[float]) -> bool:
    steps = np.diff(values)
    return bool((steps >= 0).all() or (steps <= 0).all())


def _mean(values: list[float]) -> float:
    """The module's documented mean: the values added one by one in ascending order, divided
    by their count. (np.mean sums pairwise from 8 values on, and Python 3.12's sum() compensates:
    either would differ in the last bits, enough to flip an exact monotonicity test.)"""
    total = 0.0
    for value in sorted(values):
        total += value
    return total / len(values)


def _tukey_mean(values: list[float], p: float) -> float:
    q1, q3 = np.percentile(values, [25, 75])
    iqr = q3 - q1
    kept = [v for v in values if q1 - p * iqr <= v <= q3 + p * iqr]
    return _mean(kept or values)


def reference(series: list[float], k: int = 5, p: float = 1.5) -> float:
    """Alg. 1 transcribed line by line for one series, the oracle for the vectorised code."""
    data = [v for v in series if math.isfinite(v)]
    if not data:
        return math.nan
    if _monotonous(data):  # lines 1-2
        return data[-1]
    if len(data) < k:  # lines 3-5
        return _tukey_mean(data, p)
    subsets: list[list[float]] = [[] for _ in range(k)]  # lines 8-16
    i = 0
    for d in data:
        subsets[i].append(d)
        if len(subsets[i]) >= math.ceil(len(data) / k):
            i += 1
    means = [_tukey_mean(s, p) for s in subsets if s]  # lines 18-22
    if _monotonous(means):  # lines 24-25
        return means[-1]
    return _tukey_mean(means, p)  # lines 26-28


@pytest.mark.parametrize(
    ("series", "expected"),
    [
        pytest.param([3.0], 3.0, id="single sample"),
        pytest.param([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 6.0, id="increasing: last"),
        pytest.param([9.0, 9.0, 7.0, 1.0], 1.0, id="non-increasing: last"),
        pytest.param([5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0], 5.0, id="constant"),
        pytest.param([1.0, 3.0, 2.0], 2.0, id="shorter than k: Tukey mean"),
        pytest.param([1.0, 3.0, 2.0, math.nan], 2.0, id="missing sample dropped"),
        pytest.param([math.nan, math.nan], math.nan, id="no sample"),
        # Segments of 2: (1,3)->2, (2,4)->3, (3,9)->6: D' increasing, so its last element.
        pytest.param([1.0, 3.0, 2.0, 4.0, 3.0, 9.0], 6.0, id="D' monotonous: last segment mean"),
        # Segments of 2: (4,6)->5, (1,3)->2, (5,5)->5, (2,2)->2, (4,4)->4; D' = 5,2,5,2,4 -> 3.6.
        pytest.param(
            [4.0, 6.0, 1.0, 3.0, 5.0, 5.0, 2.0, 2.0, 4.0, 4.0], 3.6, id="D' wiggles: Tukey mean"
        ),
    ],
)
def test_approximate_load_matches_the_algorithm_by_hand(
    series: list[float], expected: float
) -> None:
    assert approximate_load(np.array([series]))[0] == pytest.approx(expected, nan_ok=True)


def test_a_spike_is_removed_before_averaging() -> None:
    # A flat-but-noisy series with one spike in the middle: Tukey removes the spike.
    series = np.array([[0.50, 0.52, 0.49, 0.51, 0.50, 0.98, 0.51, 0.49, 0.50, 0.52]])
    spikeless = np.delete(series, 5, axis=1)
    assert approximate_load(series)[0] == pytest.approx(reference(list(spikeless[0])), abs=0.02)
    assert approximate_load(series)[0] < 0.55


@pytest.mark.parametrize("samples", [1, 2, 4, 5, 6, 7, 12, 13, 59, 60, 61, 90])
def test_vectorised_matches_reference_for_every_window_length(samples: int) -> None:
    rng = np.random.default_rng(samples)
    windows = rng.standard_normal((40, 3, samples))
    windows[rng.random(windows.shape) < 0.1] = np.nan
    windows[::5, 0] = np.sort(windows[::5, 0], axis=-1)  # some monotonous series
    windows[::7, 1, : samples // 2] = np.nan  # long gaps
    got = approximate_load(windows)
    assert got.shape == (40, 3)
    expected = np.array([[reference(list(series)) for series in machine] for machine in windows])
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        np.float64,
        st.tuples(st.integers(1, 6), st.integers(1, 30)),
        elements=st.one_of(
            st.floats(-1e3, 1e3, allow_nan=False), st.just(math.nan), st.sampled_from([0.0, 1.0])
        ),
    ),
    st.integers(1, 7),
    st.sampled_from([0.0, 1.5, 3.0]),
)
# Segments of 5, fence 0: (0, 0, 0, 0, 0), (1, 6.6e-122, 0, 0, 0) keeps [0, 6.6e-122] -> 1.7e-122,
# two zero segments, (1, 1, 0) -> 1. D' = 0, 1.7e-122, 0, 0, 1 wiggles, so its Tukey mean
# 4.1e-123. Taking the eliminated 1 off the segment sum 1 + 6.6e-122 == 1 gave a mean of 0, a
# monotonous D' and an estimate of 1.
@example(
    windows=np.array(
        [[0.0] * 23, [0.0] * 23, [0.0] * 5 + [1.0, 6.62993853e-122] + [0.0] * 13 + [1.0, 1.0, 0.0]]
    ),
    segments=5,
    fence=0.0,
)
def test_vectorised_equals_line_by_line_algorithm(
    windows: np.ndarray, segments: int, fence: float
) -> None:
    got = approximate_load(windows, segments=segments, fence=fence)
    expected = [reference(list(row), segments, fence) for row in windows]
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)


def test_an_outlier_does_not_absorb_the_kept_samples() -> None:
    # Fence 0 keeps [Q1, Q3] = [0, 6.6e-122] of the second segment: its mean is 1.7e-122, not
    # (1 + 6.6e-122 - 1) / 4 == 0, so D' = 0, 1.7e-122, 0, 0, 1 is not monotonous.
    series = [0.0] * 5 + [1.0, 6.62993853e-122] + [0.0] * 13 + [1.0, 1.0, 0.0]
    got = approximate_load(np.array([series]), fence=0.0)[0]
    assert got == reference(series, p=0.0) == pytest.approx(6.62993853e-122 / 16, rel=1e-12)


def test_means_do_not_depend_on_sample_order() -> None:
    # Segments of 3 and no outlier: 1 + -1 + 1e-300 adds up to 1e-300 in this order but to 0 in
    # the reverse one, and D' = 0, m, 0, 0, 5 wiggles (estimate ~0) or rises (estimate 5)
    # depending on it. Exact arithmetic would say 1e-300 / 3; the documented mean adds in
    # ascending order (-1 + 1e-300 + 1 == 0) whatever the order of the samples or the batch.
    windows = np.array(
        [[0.0] * 3 + segment + [0.0] * 6 + [5.0] * 3 for segment in ([1.0, -1.0, 1e-300],) * 2]
    )
    windows[1, 3:6] = windows[1, 5:2:-1]
    together = approximate_load(windows)
    apart = [approximate_load(window[None, :])[0] for window in windows]
    assert together.tolist() == apart == [reference(list(window)) for window in windows]
    assert together.tolist() == [5.0, 5.0]


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float64, st.integers(1, 40), elements=st.floats(0, 100)))
def test_estimate_lies_within_the_samples(series: np.ndarray) -> None:
    value = approximate_load(series[None, :])[0]
    assert series.min() - 1e-9 <= value <= series.max() + 1e-9


def test_eliminate_outliers_keeps_inside_the_fences() -> None:
    kept = eliminate_outliers([1.0, 2.0, 2.0, 3.0, 2.0, 50.0])
    assert sorted(kept) == [1.0, 2.0, 2.0, 2.0, 3.0]


def test_fences_that_exclude_everything_eliminate_nothing() -> None:
    # Two samples with p = 0: Q1 = 0.25 and Q3 = 0.75 enclose neither sample.
    assert sorted(eliminate_outliers([0.0, 1.0], fence=0.0)) == [0.0, 1.0]
    # Segments (0, 1) -> 0.5 and (0,) -> 0: D' decreasing, so 0.
    assert approximate_load(np.array([[0.0, 1.0, 0.0]]), segments=2, fence=0.0)[0] == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"segments": 0}, "segments"),
        ({"fence": -1.0}, "fence"),
    ],
)
def test_bad_parameters_are_named(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        approximate_load(np.ones((1, 3)), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [(1, 2), (1, 12), (3, 60), (2, 7)])
def test_input_is_not_modified(shape: tuple[int, int]) -> None:
    windows = np.random.default_rng(0).random(shape)
    before = windows.copy()
    approximate_load(windows)
    np.testing.assert_array_equal(windows, before)


@pytest.mark.parametrize("width", range(1, 17))
def test_sorting_networks_sort_every_zero_one_input(width: int) -> None:
    # 0-1 principle: a comparator network sorts everything iff it sorts all 0-1 inputs.
    from policies.oversubscription.load_approximation import _sort_rows

    inputs = (np.arange(2**width)[None, :] >> np.arange(width)[:, None]) & 1
    ordered = np.stack(_sort_rows(list(inputs.astype(np.float64))))
    assert (np.diff(ordered, axis=0) >= 0).all()
    np.testing.assert_array_equal(ordered.sum(axis=0), inputs.sum(axis=0))


@pytest.mark.parametrize("width", range(1, 18))
def test_a_missing_sample_reaches_the_ends_of_the_sorted_set(width: int) -> None:
    # Alg. 1 takes a set as complete when its smallest and largest samples are finite.
    from policies.oversubscription.load_approximation import _sort_rows

    inputs = np.random.default_rng(width).random((width, width))
    np.fill_diagonal(inputs, np.nan)  # set i misses sample i
    ordered = _sort_rows(list(inputs))
    assert (np.isnan(ordered[0]) | np.isnan(ordered[-1])).all()
