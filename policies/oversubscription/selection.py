"""Deterministic O(n) top-K selection, the primitive behind Alg. 3 line 9 and Alg. 4 lines 8-11
and 24-25 (ROSE Sec. 5.3 uses randomised selection for the same purpose)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def largest_k(values: NDArray[np.generic], k: int) -> NDArray[np.intp]:
    """Indices of the ``k`` largest values in O(n), ties to the lower index, ascending index."""
    return smallest_k(-np.asarray(values, dtype=np.float64), k)


def smallest_k(values: NDArray[np.generic], k: int) -> NDArray[np.intp]:
    """Indices of the ``k`` smallest values in O(n), ties to the lower index, ascending index.

    ``values`` must hold no NaN. ``k`` larger than the array selects everything.
    """
    data = np.asarray(values, dtype=np.float64)
    if k >= data.size:
        return np.arange(data.size)
    if k <= 0:
        return np.empty(0, dtype=np.intp)
    kth = np.partition(data, k - 1)[k - 1]
    below = np.flatnonzero(data < kth)
    ties = np.flatnonzero(data == kth)[: k - below.size]
    chosen: NDArray[np.intp] = np.union1d(below, ties)
    return chosen
