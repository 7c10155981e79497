"""Load level approximation (ROSE Alg. 1) with Tukey outlier elimination (Alg. 2).

Both algorithms run over the last axis of an array of any leading shape, so one call approximates
every (machine, metric) series of the cluster at once. The contract, per series ``D`` of finite
samples (non-finite samples — NaN for "missing" — are dropped first, order kept):

* Alg. 1 lines 1-2: if ``D`` is monotonous (non-decreasing or non-increasing), its last element;
* lines 3-5: else if ``|D| < k``, the mean of ``D`` after Alg. 2;
* lines 8-16: else ``D`` is cut into consecutive segments of ``ceil(|D| / k)`` samples (the last
  one may be shorter; when ``k`` does not divide ``|D|`` there can be fewer than ``k`` non-empty
  segments and empty ones are ignored), each segment is de-noised with Alg. 2 and averaged into
  ``D'``;
* lines 24-28: if ``D'`` is monotonous, its last element; else the mean of ``D'`` after Alg. 2.
* A series with no finite sample approximates to NaN.

Alg. 2 keeps the samples inside ``[Q1 - p*IQR, Q3 + p*IQR]`` where Q1 and Q3 are the lower and
upper quartiles with linear interpolation (numpy's default percentile method). With three or
more samples ``[Q1, Q3]`` always holds one; with two and ``p < 0.5`` the fences can exclude both,
and then nothing is eliminated (a mean needs a sample).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

DEFAULT_SEGMENTS = 5
DEFAULT_FENCE = 1.5
# Series per cache-resident block (2048 series of 60 float64 samples is about 1 MB).
_CHUNK_ROWS = 2048
# Widest set sorted by a compare-exchange network (63 comparators at 16).
_NETWORK_MAX_WIDTH = 16


def approximate_load(
    samples: ArrayLike, *, segments: int = DEFAULT_SEGMENTS, fence: float = DEFAULT_FENCE
) -> FloatArray:
    """Alg. 1 over the last axis of ``samples``; returns an array of the leading shape."""
    if segments < 1:
        raise ValueError("segments: must be a positive integer")
    if not (math.isfinite(fence) and fence >= 0):
        raise ValueError("fence: must be a non-negative number")
    data = np.asarray(samples, dtype=np.float64)
    if data.ndim == 0:
        raise ValueError("samples: must have a samples axis")
    lead, n = data.shape[:-1], data.shape[-1]
    rows = data.reshape(-1, n)
    result = np.full(rows.shape[0], np.nan)
    if n == 0 or rows.shape[0] == 0:
        return result.reshape(lead)
    incomplete: list[NDArray[np.intp]] = []
    # Work on cache-sized blocks of series: every step of Alg. 1-2 is then a numpy pass over
    # cache-resident vectors instead of a trip through memory.
    for start in range(0, rows.shape[0], _CHUNK_ROWS):
        block = rows[start : start + _CHUNK_ROWS]
        finite = np.isfinite(block.sum(axis=1))
        if finite.all():
            result[start : start + block.shape[0]] = _approximate_rows(block, segments, fence)
            continue
        complete = np.flatnonzero(finite)
        if complete.size:
            result[start + complete] = _approximate_rows(block[complete], segments, fence)
        incomplete.append(start + np.flatnonzero(~finite))
    if incomplete:
        _approximate_incomplete(rows, np.concatenate(incomplete), segments, fence, result)
    return result.reshape(lead)


def eliminate_outliers(values: ArrayLike, *, fence: float = DEFAULT_FENCE) -> FloatArray:
    """Alg. 2 on one 1-D series of finite values: the samples inside the Tukey fences."""
    series = np.asarray(values, dtype=np.float64)
    if series.ndim != 1 or series.size == 0:
        raise ValueError("values: must be a non-empty 1-D series")
    q1, q3 = np.percentile(series, [25.0, 75.0])
    iqr = q3 - q1
    keep = (series >= q1 - fence * iqr) & (series <= q3 + fence * iqr)
    kept: FloatArray = series[keep] if keep.any() else series
    return kept


def is_monotonous(columns: FloatArray) -> BoolArray:
    """Per column of a samples-major 2-D array: non-decreasing or non-increasing."""
    if columns.shape[0] <= 2:
        return np.ones(columns.shape[1], dtype=np.bool_)
    steps = columns[1:] - columns[:-1]
    falls: BoolArray = np.any(steps < 0, axis=0)
    rises: BoolArray = np.any(steps > 0, axis=0)
    return ~(falls & rises)


def _approximate_incomplete(
    rows: FloatArray, members: NDArray[np.intp], segments: int, fence: float, out: FloatArray
) -> None:
    """Alg. 1 on the rows with missing samples: drop them, then group rows by sample count."""
    partial = rows[members]
    valid = np.isfinite(partial)
    counts = valid.sum(axis=1)
    # Move the finite samples to the front of each row, keeping their order.
    order = np.argsort(~valid, axis=1, kind="stable")
    compact = np.take_along_axis(partial, order, axis=1)
    for count in np.unique(counts):
        if count == 0:
            continue
        group = counts == count
        columns = np.ascontiguousarray(compact[group, :count].T)
        out[members[group]] = _approximate_columns(columns, segments, fence)


def _approximate_rows(rows: FloatArray, segments: int, fence: float) -> FloatArray:
    """Alg. 1 on a block of series (series x samples) of finite samples, n >= 1."""
    count, n = rows.shape
    width = math.ceil(n / segments)
    if n < segments or n % width:
        return _approximate_columns(np.ascontiguousarray(rows.T), segments, fence)
    whole = n // width
    # positions[j, s] holds sample j of segment s of every series: one transposing copy, after
    # which every step is elementwise over contiguous vectors.
    positions = rows.reshape(count, whole, width).transpose(2, 1, 0).copy()
    monotonous = _positions_monotonous(positions)
    last = positions[-1, -1].copy()
    sums = positions.sum(axis=0)
    means = _tukey_means(_sort_rows(list(positions), scratch=True), sums, fence)
    estimate = _estimate_from_segment_means(means, fence)
    result: FloatArray = np.where(monotonous, last, estimate)
    return result


def _positions_monotonous(positions: FloatArray) -> BoolArray:
    """``is_monotonous`` for series laid out as (position in segment, segment, series)."""
    width, whole, count = positions.shape
    # Most load series wiggle within their first few samples: check a short prefix for all
    # series and the whole series only for the few that survive.
    probe = min(width - 1, 4)
    first = positions[: probe + 1, 0]
    head = first[1:] - first[:-1]
    survivors = np.flatnonzero(~((head < 0).any(axis=0) & (head > 0).any(axis=0)))
    result = np.zeros(count, dtype=np.bool_)
    if survivors.size:
        chosen = positions[:, :, survivors].transpose(1, 0, 2)
        result[survivors] = is_monotonous(chosen.reshape(width * whole, survivors.size))
    return result


def _approximate_columns(columns: FloatArray, segments: int, fence: float) -> FloatArray:
    """Alg. 1 on a samples-major block (samples x series) of finite samples, n >= 1."""
    n = columns.shape[0]
    monotonous = is_monotonous(columns)
    last = columns[-1]
    if n < segments:
        sorted_samples = _sort_rows(list(columns))
        estimate = _tukey_means(sorted_samples, columns.sum(axis=0), fence)
    else:
        estimate = _segmented_estimate(columns, segments, fence)
    result: FloatArray = np.where(monotonous, last, estimate)
    return result


def _segmented_estimate(columns: FloatArray, segments: int, fence: float) -> FloatArray:
    """Alg. 1 lines 8-28 for series with at least ``segments`` samples."""
    n, count = columns.shape
    width = math.ceil(n / segments)
    whole = n // width
    remainder = n - whole * width
    blocks = columns[: whole * width].reshape(whole, width, count)
    sums = blocks.sum(axis=1)
    # Position j of every whole segment as one contiguous (whole x series) array: a cheap copy
    # of whole contiguous rows that makes every compare-exchange of the sort stream memory.
    positions = blocks.transpose(1, 0, 2).copy()
    means = _tukey_means(_sort_rows(list(positions), scratch=True), sums, fence)
    if remainder:
        tail = columns[whole * width :]
        tail_means = _tukey_means(_sort_rows(list(tail)), tail.sum(axis=0), fence)
        means = np.concatenate([means, tail_means[None, :]], axis=0)
    return _estimate_from_segment_means(means, fence)


def _estimate_from_segment_means(means: FloatArray, fence: float) -> FloatArray:
    """Alg. 1 lines 24-28 on D' laid out as (segment, series)."""
    estimate = _tukey_means(_sort_rows(list(means)), means.sum(axis=0), fence)
    result: FloatArray = np.where(is_monotonous(means), means[-1], estimate)
    return result


def _tukey_means(sorted_rows: list[FloatArray], sums: FloatArray, fence: float) -> FloatArray:
    """Alg. 2 then the mean, elementwise over ``len(sorted_rows)`` ascending order statistics.

    ``sorted_rows[i]`` holds the i-th smallest sample of every set, ``sums`` the set sums.
    Most sets hold no outlier: their minimum and maximum lie inside the fences and the mean is
    the plain mean. Only the sets with an outlier pay for a masked mean.
    """
    width = len(sorted_rows)
    q1 = _sorted_quantile(sorted_rows, 0.25)
    q3 = _sorted_quantile(sorted_rows, 0.75)
    spread = fence * (q3 - q1)
    lower, upper = q1 - spread, q3 + spread
    means: FloatArray = sums / width
    flagged = np.flatnonzero((sorted_rows[0] < lower) | (sorted_rows[-1] > upper))
    if flagged.size:
        samples = np.stack([row.take(flagged) for row in sorted_rows])
        low, high = lower.take(flagged), upper.take(flagged)
        keep = (samples >= low) & (samples <= high)
        keep[:, ~keep.any(axis=0)] = True
        means.flat[flagged] = np.where(keep, samples, 0.0).sum(axis=0) / keep.sum(axis=0)
    return means


def _sorted_quantile(sorted_rows: list[FloatArray], q: float) -> FloatArray:
    """Quantile ``q`` from ascending order statistics, numpy's 'linear' method and lerp."""
    width = len(sorted_rows)
    position = q * (width - 1)
    below = math.floor(position)
    above = min(below + 1, width - 1)
    t = position - below
    a = sorted_rows[below]
    b = sorted_rows[above]
    difference = b - a
    # numpy's _lerp: interpolate from the nearer end so the result stays within [a, b].
    if t >= 0.5:
        result: FloatArray = b - difference * (1.0 - t)
    else:
        result = a + difference * t
    return result


def _sort_rows(rows: list[FloatArray], *, scratch: bool = False) -> list[FloatArray]:
    """Sort elementwise across the rows: returns order statistics, smallest first.

    Short sets go through a Batcher odd-even merge network (vectorised compare-exchange over all
    sets at once); longer ones through ``np.sort`` along the stacked axis. Both are exact. With
    ``scratch`` the input arrays may be overwritten.
    """
    width = len(rows)
    if width > _NETWORK_MAX_WIDTH:
        return list(np.sort(np.stack(rows), axis=0))
    ordered = list(rows) if scratch else [row.copy() for row in rows]
    spare = np.empty(ordered[0].shape)
    for low, high in _network(width):
        np.minimum(ordered[low], ordered[high], out=spare)
        np.maximum(ordered[low], ordered[high], out=ordered[high])
        ordered[low], spare = spare, ordered[low]
    return ordered


@functools.cache
def _network(width: int) -> tuple[tuple[int, int], ...]:
    """Batcher's odd-even merge sort for ``width`` inputs (padded to a power of two with +inf,
    so comparators touching the padding are no-ops and are dropped)."""
    size = 1
    while size < width:
        size *= 2
    pairs: list[tuple[int, int]] = []

    def merge(low: int, length: int, stride: int) -> None:
        step = stride * 2
        if step < length:
            merge(low, length, step)
            merge(low + stride, length, step)
            pairs.extend((i, i + stride) for i in range(low + stride, low + length - stride, step))
        else:
            pairs.append((low, low + stride))

    def sort(low: int, length: int) -> None:
        if length > 1:
            half = length // 2
            sort(low, half)
            sort(low + half, half)
            merge(low, length, 1)

    sort(0, size)
    return tuple((a, b) for a, b in pairs if b < width)
