"""A job's result accuracy as a function of its drop ratio (DiAS, Sec. 5.1, Fig. 6).

Apart from :mod:`drop_search`, which uses it, so that what reads a DiAS configuration (the
resource manager, the queue file's loader) does not import the phase-type models and their
linear algebra (scipy): only the drop-ratio search computes with those.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from policies.approximation.dropping import check_drop_ratio


@dataclass(frozen=True)
class AccuracyCurve:
    """Relative error of the result as a piecewise-linear function of the drop ratio.

    The points ``(drop_ratios[i], errors[i])`` have strictly increasing ratios in [0, 1] and
    non-decreasing, non-negative errors; ``(0, 0)`` is implied when the first ratio is above 0.
    Between points the error is interpolated linearly; past the last profiled ratio it is
    unknown and treated as infinite, so the search never goes beyond the profile.
    """

    drop_ratios: tuple[float, ...]
    errors: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.drop_ratios) != len(self.errors) or not self.drop_ratios:
            raise ValueError("an accuracy curve needs one error per drop ratio, at least one")
        for theta in self.drop_ratios:
            check_drop_ratio(theta)
        if any(b <= a for a, b in zip(self.drop_ratios, self.drop_ratios[1:], strict=False)):
            raise ValueError("accuracy curve drop ratios must be strictly increasing")
        if any(not (math.isfinite(e) and e >= 0) for e in self.errors):
            raise ValueError("accuracy curve errors must be finite and non-negative")
        if any(b < a for a, b in zip(self.errors, self.errors[1:], strict=False)):
            raise ValueError("accuracy curve errors must not decrease as more is dropped")
        if self.drop_ratios[0] > 0:
            object.__setattr__(self, "drop_ratios", (0.0, *self.drop_ratios))
            object.__setattr__(self, "errors", (0.0, *self.errors))

    def error_at(self, theta: float) -> float:
        """The interpolated relative error at drop ratio ``θ``; ``inf`` past the last point."""
        check_drop_ratio(theta)
        if theta > self.drop_ratios[-1]:
            return math.inf
        return float(np.interp(theta, self.drop_ratios, self.errors))

    def max_drop_ratio(self, error_bound: float) -> float:
        """The largest ratio whose interpolated error is at most ``error_bound`` (≥ 0).

        Raises ``ValueError`` if even the smallest profiled ratio exceeds the bound.
        """
        if not error_bound >= 0:
            raise ValueError("an error bound must be non-negative")
        ratios, errors = self.drop_ratios, self.errors
        if errors[0] > error_bound:
            raise ValueError(f"no drop ratio keeps the error within {error_bound:g}")
        best = ratios[0]
        for (r0, e0), (r1, e1) in zip(
            zip(ratios, errors, strict=True), zip(ratios[1:], errors[1:], strict=True), strict=False
        ):
            if e1 <= error_bound:
                best = r1
                continue
            if e1 > e0:
                best = r0 + (r1 - r0) * (error_bound - e0) / (e1 - e0)
            break
        return best


# The paper's text-analysis profile (Sec. 5.1, Fig. 6).
PAPER_ACCURACY_CURVE = AccuracyCurve(drop_ratios=(0.1, 0.2, 0.4), errors=(0.085, 0.15, 0.32))
