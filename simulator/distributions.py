"""Task-duration distributions of a simulated workload, and the error every workload refusal is.

Each distribution is a frozen dataclass with ``sample(rng) -> float`` (seconds, drawn from the
``random.Random`` passed in: never the global random state) and ``mean`` (the distribution's mean,
``math.inf`` for a Pareto with ``alpha <= 1``):

- :class:`Fixed` ``(value)``: always ``value``.
- :class:`Exponential` ``(mean)``.
- :class:`Pareto` ``(alpha, t_min)``: Pareto type I, ``P(X > x) = (t_min / x) ** alpha`` for
  ``x >= t_min``, drawn by inverting the CDF: ``t_min * (1 - u) ** (-1 / alpha)``.
- :class:`LogNormal` ``(median, sigma)``: ``exp(N(ln median, sigma**2))``.
- :class:`Empirical` ``(values)``: one of ``values``, each equally likely.

Every parameter is finite and positive, and a duration-valued one (``value``, ``mean``,
``t_min``, ``median``, ``values``) at most :data:`MAX_DURATION` seconds.  A draw is capped at
:data:`MAX_DURATION` so that a heavy tail never gives an infinite or overflowing duration (for any
sensible parameters the cap is never reached: a Pareto with alpha 1.6 and t_min 10 exceeds it
with probability 1e-13); ``mean`` is the mean without that cap.  A draw is ``>= 0``; it is 0 only
when it underflows (a log-normal with a huge ``sigma``, an exponential's draw of exactly 0).

:func:`parse_distribution` reads one from a workload document (docs/simulator-workloads.md).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from policies.scheduling.jobspec import join_field, quoted

__all__ = [
    "DISTRIBUTIONS",
    "MAX_DURATION",
    "Distribution",
    "Empirical",
    "Exponential",
    "Fixed",
    "LogNormal",
    "Pareto",
    "WorkloadError",
    "check_keys",
    "describe",
    "parse_distribution",
    "positive_number",
    "shown",
]

MAX_DURATION = 1e9
"""Seconds (about 32 years): the largest duration parameter, and the cap on every draw."""

MAX_EMPIRICAL_VALUES = 1_000_000

_LOG_MAX_DURATION = math.log(MAX_DURATION)


class WorkloadError(ValueError):
    """An invalid workload or trace; ``field`` says where (``classes[1].phases[0].duration.alpha``,
    ``line 7, column cpu``), ``problem`` what.  The message is ``"{field}: {problem}"`` on one
    line."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class Distribution(Protocol):
    """A distribution of task durations in seconds."""

    @property
    def mean(self) -> float: ...

    def sample(self, rng: random.Random) -> float: ...


# ------------------------------------------------------------------------------ checks


def describe(value: object) -> str:
    """What ``value`` is, for a message: ``a string``, ``null``, ``a list``."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), f"a {type(value).__name__}"
    )


def shown(value: object) -> str:
    """``value`` as a message shows it: numbers as written, strings quoted, others described."""
    if isinstance(value, bool) or value is None:
        return describe(value)
    if isinstance(value, int):
        return "a huge number" if abs(value) >= 10**30 else str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return quoted(value)
    return describe(value)


def positive_number(value: object, field: str, *, maximum: float = math.inf) -> float:
    """A finite number ``> 0`` and ``<= maximum``, as a float; booleans are not numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WorkloadError(field, f"must be a positive number, not {describe(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise WorkloadError(field, f"must be a finite positive number, got {shown(value)}")
    if value <= 0:
        raise WorkloadError(field, f"must be a positive number, got {shown(value)}")
    if value > maximum:  # compared before float(): an int beyond any float would overflow
        raise WorkloadError(field, f"must be at most {maximum:g}, got {shown(value)}")
    return float(value)


def check_keys(
    value: object, field: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> Mapping[str, object]:
    """``value`` as a mapping with string keys, none unknown and none of ``required`` missing;
    ``field`` is ``""`` for the document itself (named ``workload`` in messages)."""
    where = field or "workload"
    if not isinstance(value, Mapping):
        raise WorkloadError(where, f"must be a mapping, not {describe(value)}")
    allowed = (*required, *optional)
    for key in value:
        if not isinstance(key, str):
            raise WorkloadError(where, f"keys must be strings, not {describe(key)}")
        if key not in allowed:
            raise WorkloadError(
                join_field(field, key), f"unknown field (allowed: {', '.join(allowed)})"
            )
    for key in required:
        if key not in value:
            raise WorkloadError(join_field(field, key), "is required")
    return value


def _check(value: float, field: str, *, duration: bool) -> None:
    """The constructor's guard (parse_distribution checks first, naming the document's field)."""
    positive_number(value, field, maximum=MAX_DURATION if duration else math.inf)


def _capped_exp(exponent: float) -> float:
    """``exp(exponent)``, at most :data:`MAX_DURATION` (and never an OverflowError)."""
    return MAX_DURATION if exponent >= _LOG_MAX_DURATION else math.exp(exponent)


# ------------------------------------------------------------------------------ distributions


@dataclass(frozen=True)
class Fixed:
    value: float

    def __post_init__(self) -> None:
        _check(self.value, "value", duration=True)

    @property
    def mean(self) -> float:
        return self.value

    def sample(self, rng: random.Random) -> float:
        return self.value


@dataclass(frozen=True)
class Exponential:
    mean: float

    def __post_init__(self) -> None:
        _check(self.mean, "mean", duration=True)

    def sample(self, rng: random.Random) -> float:
        return min(rng.expovariate(1.0 / self.mean), MAX_DURATION)


@dataclass(frozen=True)
class Pareto:
    """Pareto type I: ``P(X > x) = (t_min / x) ** alpha`` for ``x >= t_min``."""

    alpha: float
    t_min: float

    def __post_init__(self) -> None:
        _check(self.alpha, "alpha", duration=False)
        _check(self.t_min, "t_min", duration=True)

    @property
    def mean(self) -> float:
        if self.alpha <= 1:
            return math.inf
        return self.alpha * self.t_min / (self.alpha - 1)

    def sample(self, rng: random.Random) -> float:
        u = rng.random()  # in [0, 1): 1 - u is in (0, 1], its logarithm finite
        # t_min * (1 - u) ** (-1 / alpha), in logarithms so that nothing overflows.
        exponent = math.log(self.t_min) - math.log1p(-u) / self.alpha
        return max(self.t_min, _capped_exp(exponent))


@dataclass(frozen=True)
class LogNormal:
    """``exp(N(mu, sigma**2))`` with ``mu = ln median``."""

    median: float
    sigma: float

    def __post_init__(self) -> None:
        _check(self.median, "median", duration=True)
        _check(self.sigma, "sigma", duration=False)

    @property
    def mean(self) -> float:
        exponent = math.log(self.median) + self.sigma**2 / 2
        return math.inf if exponent > 709 else math.exp(exponent)

    def sample(self, rng: random.Random) -> float:
        # normalvariate, not gauss: gauss keeps a second draw in the generator between calls.
        return _capped_exp(rng.normalvariate(math.log(self.median), self.sigma))


@dataclass(frozen=True)
class Empirical:
    """One of ``values``, each equally likely (repeat a value to weigh it more)."""

    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise WorkloadError("values", "must not be empty")
        for index, value in enumerate(self.values):
            _check(value, f"values[{index}]", duration=True)

    @property
    def mean(self) -> float:
        return math.fsum(self.values) / len(self.values)

    def sample(self, rng: random.Random) -> float:
        return self.values[rng.randrange(len(self.values))]


# ------------------------------------------------------------------------------ parsing

DISTRIBUTIONS: Mapping[str, tuple[str, ...]] = {
    "fixed": ("value",),
    "exponential": ("mean",),
    "pareto": ("alpha", "t_min"),
    "lognormal": ("median", "sigma"),
    "empirical": ("values",),
}
"""Each distribution's name and its parameters (all required)."""

_SHAPE_PARAMETERS = frozenset({"alpha", "sigma"})


def parse_distribution(document: object, field: str) -> Distribution:
    """The distribution a workload document describes at ``field``: a mapping such as
    ``{distribution: pareto, alpha: 1.6, t_min: 10}``, or a bare positive number for
    :class:`Fixed`.  Raises :class:`WorkloadError` naming the field, e.g.
    ``classes[1].phases[0].duration.alpha: must be a positive number, got -1``."""
    if isinstance(document, int | float) and not isinstance(document, bool):
        return Fixed(positive_number(document, field, maximum=MAX_DURATION))
    if not isinstance(document, Mapping):
        raise WorkloadError(
            field,
            f"must be a positive number or a mapping with 'distribution', not {describe(document)}",
        )
    kind = document.get("distribution")
    if "distribution" not in document:
        raise WorkloadError(join_field(field, "distribution"), "is required")
    if not isinstance(kind, str) or kind not in DISTRIBUTIONS:
        raise WorkloadError(
            join_field(field, "distribution"),
            f"must be one of {', '.join(DISTRIBUTIONS)}, got {shown(kind)}",
        )
    doc = check_keys(document, field, ("distribution", *DISTRIBUTIONS[kind]))
    if kind == "empirical":
        return Empirical(_values(doc["values"], join_field(field, "values")))
    numbers = {
        name: positive_number(
            doc[name],
            join_field(field, name),
            maximum=math.inf if name in _SHAPE_PARAMETERS else MAX_DURATION,
        )
        for name in DISTRIBUTIONS[kind]
    }
    if kind == "fixed":
        return Fixed(numbers["value"])
    if kind == "exponential":
        return Exponential(numbers["mean"])
    if kind == "pareto":
        return Pareto(numbers["alpha"], numbers["t_min"])
    return LogNormal(numbers["median"], numbers["sigma"])


def _values(value: object, field: str) -> tuple[float, ...]:
    if not isinstance(value, list):
        raise WorkloadError(field, f"must be a list of positive numbers, not {describe(value)}")
    if not value:
        raise WorkloadError(field, "must not be empty")
    if len(value) > MAX_EMPIRICAL_VALUES:
        raise WorkloadError(field, f"has {len(value)} values; at most {MAX_EMPIRICAL_VALUES}")
    return tuple(
        positive_number(item, f"{field}[{index}]", maximum=MAX_DURATION)
        for index, item in enumerate(value)
    )
