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

Every mean (of ``T`` in lines 4-5, 20-21 and 27-28) is the sum of the kept samples added one by
one in ascending order, starting from 0.0, divided by their count. Floating-point addition is
not associative, and lines 24-25 and the fences compare means exactly, so a last-bit difference
can switch branches (D' monotonous or not, a segment mean inside a fence or not); fixing the
order makes the result independent of the samples' order within a set and of how the series
are batched. The kept samples are summed directly: subtracting the eliminated ones from the
set's total cancels catastrophically (1 + 6.6e-122 - 1 == 0 would drop a kept 6.6e-122).
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
    # Series with a non-finite sample come out as garbage on the way and are redone at the
    # end; checking first would cost an extra pass over every sample.
    with np.errstate(invalid="ignore"):
        complete = _approximate_blocks(rows, segments, fence, result)
    if not complete.all():
        _approximate_incomplete(rows, np.flatnonzero(~complete), segments, fence, result)
    return result.reshape(lead)


def _approximate_blocks(
    rows: FloatArray, segments: int, fence: float, out: FloatArray
) -> BoolArray:
    """Alg. 1 on every row, written to ``out``; returns which rows are complete (all samples
    finite) — only their results are meaningful.

    Rows are processed in cache-sized blocks: every step of Alg. 1-2 is then a numpy pass over
    cache-resident vectors instead of a trip through memory. When the segments all have the
    same width (the usual case, e.g. 60 samples in 5 segments of 12), the blocks only produce
    the segment means and Alg. 1 lines 24-28 run once over the whole cluster.
    """
    count, n = rows.shape
    width = math.ceil(n / segments)
    complete = np.empty(count, dtype=np.bool_)
    if n < segments or n % width:
        for start in range(0, count, _CHUNK_ROWS):
            stop = min(start + _CHUNK_ROWS, count)
            out[start:stop], complete[start:stop] = _approximate_rows(
                rows[start:stop], segments, fence
            )
        return complete
    whole = n // width
    means = np.empty((whole, count))
    monotonous = np.empty(count, dtype=np.bool_)
    last = rows[:, -1]
    for start in range(0, count, _CHUNK_ROWS):
        stop = min(start + _CHUNK_ROWS, count)
        means[:, start:stop], complete[start:stop], monotonous[start:stop] = _segment_means(
            rows[start:stop], whole, width, fence
        )
    out[:] = np.where(monotonous, last, _estimate_from_segment_means(means, fence))
    return complete


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
    for count in np.unique(counts):
        if count == 0:
            continue
        group = counts == count
        # Boolean indexing walks row-major, so each row's finite samples stay in order.
        compact = partial[group][valid[group]].reshape(-1, count)
        out[members[group]] = _approximate_columns(np.ascontiguousarray(compact.T), segments, fence)


def _approximate_rows(
    rows: FloatArray, segments: int, fence: float
) -> tuple[FloatArray, BoolArray]:
    """Alg. 1 on a block of series (series x samples) whose segments differ in width: the
    estimates and which series are complete (all samples finite)."""
    count = rows.shape[0]
    columns = np.ascontiguousarray(rows.T)
    complete = np.isfinite(columns.sum(axis=0))
    estimate = np.full(count, np.nan)
    if complete.any():
        chosen = columns if complete.all() else np.ascontiguousarray(columns[:, complete])
        estimate[complete] = _approximate_columns(chosen, segments, fence)
    return estimate, complete


def _segment_means(
    rows: FloatArray, whole: int, width: int, fence: float
) -> tuple[FloatArray, BoolArray, BoolArray]:
    """Alg. 1 lines 1-2 and 8-22 for series cut into ``whole`` segments of ``width``: the
    de-noised segment means D' (segment x series), completeness and monotonicity."""
    count = rows.shape[0]
    # positions[j, s] holds sample j of segment s of every series: one transposing copy, after
    # which every step is elementwise over contiguous vectors.
    positions = rows.reshape(count, whole, width).transpose(2, 1, 0).copy()
    monotonous = _positions_monotonous(positions)
    ordered = _sort_rows(list(positions), scratch=True)
    # A set is complete iff its smallest and largest samples are finite: -inf sorts first, +inf
    # last, and a NaN ends last with np.sort or first with a network (np.minimum propagates
    # NaN, and a network that sorts carries every input to its first output through minima).
    finite = np.isfinite(ordered[0])
    finite &= np.isfinite(ordered[-1])
    complete: BoolArray = np.logical_and.reduce(finite, axis=0)
    means = _tukey_means(ordered, fence)
    return means, complete, monotonous


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
        estimate = _tukey_means(_sort_rows(list(columns)), fence)
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
    # Position j of every whole segment as one contiguous (whole x series) array: a cheap copy
    # of whole contiguous rows that makes every compare-exchange of the sort stream memory.
    positions = blocks.transpose(1, 0, 2).copy()
    means = _tukey_means(_sort_rows(list(positions), scratch=True), fence)
    if remainder:
        tail = columns[whole * width :]
        tail_means = _tukey_means(_sort_rows(list(tail)), fence)
        means = np.concatenate([means, tail_means[None, :]], axis=0)
    return _estimate_from_segment_means(means, fence)


def _estimate_from_segment_means(means: FloatArray, fence: float) -> FloatArray:
    """Alg. 1 lines 24-28 on D' laid out as (segment, series); ``means`` is scratch."""
    monotonous = is_monotonous(means)
    last = means[-1].copy()
    estimate = _tukey_means(_sort_rows(list(means), scratch=True), fence)
    result: FloatArray = np.where(monotonous, last, estimate)
    return result


def _tukey_means(sorted_rows: list[FloatArray], fence: float) -> FloatArray:
    """Alg. 2 then the mean, elementwise over ``len(sorted_rows)`` ascending order statistics.

    ``sorted_rows[i]`` holds the i-th smallest sample of every set. The kept samples are added
    in ascending order (an eliminated one as 0.0, which changes no sum) — never the set sum
    minus the eliminated ones, where an outlier would absorb small kept samples and leave
    garbage. A sample below the lower fence lies below Q1 <= x[ceil(pos1)], so only the order
    statistics before ``ceil(pos1)`` can fall out; symmetrically only those after
    ``floor(pos3)`` can exceed the upper one, and the middle ones are added untested. With
    three or more samples the middle is not empty; with two, fences excluding both eliminate
    nothing. A NaN fence (from an IQR that overflows) eliminates nothing either, as for
    ``eliminate_outliers``. One pass over every set: with noisy loads around 40 % of the sets
    hold an outlier, too many for a second pass over just those.
    """
    width = len(sorted_rows)
    # In-place arithmetic: these run on every segment of the cluster, and fresh temporaries
    # would cost as much as the arithmetic.
    lower = _sorted_quantile(sorted_rows, 0.25)
    upper = _sorted_quantile(sorted_rows, 0.75)
    spread = upper - lower
    spread *= fence
    lower -= spread
    upper += spread
    low_stop = math.ceil(0.25 * (width - 1))
    high_start = math.floor(0.75 * (width - 1)) + 1
    shape = sorted_rows[0].shape
    total = np.zeros(shape)
    dropped = np.zeros(shape, dtype=np.min_scalar_type(width))
    mask = np.empty(shape, dtype=np.bool_)
    kept_values = np.empty(shape)
    for row, values in enumerate(sorted_rows):
        if low_stop <= row < high_start:
            total += values
            continue
        if row < low_stop:
            np.less(values, lower, out=mask)
        else:
            np.greater(values, upper, out=mask)
        dropped += mask
        np.logical_not(mask, out=mask)
        np.multiply(values, mask, out=kept_values)
        total += kept_values
    kept = width - dropped.astype(np.float64)
    if width == 2:
        empty = kept == 0
        total[empty] = (sorted_rows[0] + sorted_rows[1])[empty]
        kept[empty] = 2.0
    total /= kept
    return total


def _sorted_quantile(sorted_rows: list[FloatArray], q: float) -> FloatArray:
    """Quantile ``q`` from ascending order statistics, numpy's 'linear' method and lerp."""
    width = len(sorted_rows)
    position = q * (width - 1)
    below = math.floor(position)
    above = min(below + 1, width - 1)
    t = position - below
    a = sorted_rows[below]
    b = sorted_rows[above]
    result: FloatArray = b - a
    # numpy's _lerp: interpolate from the nearer end so the result stays within [a, b].
    if t >= 0.5:
        result *= 1.0 - t
        np.subtract(b, result, out=result)
    else:
        result *= t
        result += a
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


# Shapiro and Green's 39-comparator network for 12 inputs (Knuth, TAOCP vol. 3, 5.3.4), the
# width of the default window (60 samples in 5 segments); Batcher's needs 42.
_TWELVE = (
    (0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11),
    (1, 3), (5, 7), (9, 11), (0, 2), (4, 6), (8, 10),
    (1, 2), (5, 6), (9, 10), (0, 4), (7, 11),
    (1, 5), (6, 10), (3, 7), (4, 8),
    (5, 9), (2, 6), (0, 4), (7, 11), (3, 8),
    (1, 5), (6, 10), (2, 3), (8, 9),
    (1, 4), (7, 10), (3, 5), (6, 8),
    (2, 4), (7, 9), (5, 6),
    (3, 4), (7, 8),
)  # fmt: skip


@functools.cache
def _network(width: int) -> tuple[tuple[int, int], ...]:
    """A sorting network for ``width`` inputs: the 12-input one above, else Batcher's odd-even
    merge sort (padded to a power of two with +inf, so comparators touching the padding are
    no-ops and are dropped)."""
    if width == 12:
        return _TWELVE
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
