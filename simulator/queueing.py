"""M/M/c queueing formulas used to check the simulator against theory (docs/simulator-results.md).

An M/M/c queue has Poisson arrivals at rate λ, exponential service times with rate μ and ``c``
identical servers.  With the offered load ``a = λ/μ`` (in Erlangs) and ``ρ = a/c < 1``:

* Erlang B (blocking, no queue) by the stable recursion ``B(0) = 1``,
  ``B(k) = a·B(k−1) / (k + a·B(k−1))``;
* Erlang C, the probability that an arrival has to wait, ``C = c·B / (c − a·(1 − B))``;
* mean wait in the queue ``Wq = C / (cμ − λ)``, mean response time ``W = Wq + 1/μ``;
* the wait is 0 with probability ``1 − C`` and otherwise exponential with rate ``cμ − λ``, so
  ``P(Wq > t) = C·exp(−(cμ − λ)·t)``.

The recursion needs only ``c`` multiplications and divisions of numbers in ``[0, 1]``, so it stays
finite and accurate for thousands of servers, where ``a**c / c!`` would overflow.
"""

from __future__ import annotations

import math

__all__ = [
    "erlang_b",
    "erlang_c",
    "mmc_mean_queue_length",
    "mmc_mean_response",
    "mmc_mean_wait",
    "mmc_wait_quantile",
]


def _check_servers(servers: int) -> None:
    if isinstance(servers, bool) or not isinstance(servers, int):
        raise ValueError(f"servers must be an int, got {servers!r}")
    if servers < 1:
        raise ValueError(f"servers must be at least 1, got {servers}")


def _check_load(offered_load: float) -> None:
    if not math.isfinite(offered_load) or offered_load < 0:
        raise ValueError(f"offered load must be a finite number >= 0, got {offered_load!r}")


def _check_rate(name: str, rate: float) -> None:
    if not math.isfinite(rate) or rate <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {rate!r}")


def erlang_b(servers: int, offered_load: float) -> float:
    """Erlang B: the probability that an arrival finds all ``servers`` busy when there is no queue.

    Defined for any offered load ``a = λ/μ >= 0`` (a loss system is always stable).
    """
    _check_servers(servers)
    _check_load(offered_load)
    b = 1.0
    for k in range(1, servers + 1):
        b = offered_load * b / (k + offered_load * b)
    return b


def erlang_c(servers: int, offered_load: float) -> float:
    """Erlang C: the probability that an arrival to an M/M/c queue has to wait.

    ``offered_load`` is ``a = λ/μ`` in Erlangs and must satisfy ``0 <= a < servers`` (otherwise
    the queue grows without bound and ``ValueError`` is raised).
    """
    _check_servers(servers)
    _check_load(offered_load)
    if offered_load >= servers:
        raise ValueError(
            f"unstable M/M/c queue: offered load {offered_load!r} >= {servers} servers"
        )
    if offered_load == 0:
        return 0.0
    b = erlang_b(servers, offered_load)
    return servers * b / (servers - offered_load * (1.0 - b))


def _check_mmc(servers: int, arrival_rate: float, service_rate: float) -> None:
    _check_servers(servers)
    _check_rate("arrival rate", arrival_rate)
    _check_rate("service rate", service_rate)
    if arrival_rate >= servers * service_rate:
        raise ValueError(
            f"unstable M/M/c queue: arrival rate {arrival_rate!r} >= "
            f"{servers} servers x service rate {service_rate!r}"
        )


def mmc_mean_wait(servers: int, arrival_rate: float, service_rate: float) -> float:
    """Mean time an arrival spends waiting in the queue, ``Wq = C / (cμ − λ)`` (in the time unit
    of the rates' inverse, e.g. seconds for rates per second).  Requires ``λ < cμ``."""
    _check_mmc(servers, arrival_rate, service_rate)
    c = erlang_c(servers, arrival_rate / service_rate)
    return c / (servers * service_rate - arrival_rate)


def mmc_mean_response(servers: int, arrival_rate: float, service_rate: float) -> float:
    """Mean time in the system (wait plus service), ``W = Wq + 1/μ``.  Requires ``λ < cμ``."""
    return mmc_mean_wait(servers, arrival_rate, service_rate) + 1.0 / service_rate


def mmc_mean_queue_length(servers: int, arrival_rate: float, service_rate: float) -> float:
    """Mean number of arrivals waiting (not in service), ``Lq = λ·Wq`` (Little's law)."""
    return arrival_rate * mmc_mean_wait(servers, arrival_rate, service_rate)


def mmc_wait_quantile(
    servers: int, arrival_rate: float, service_rate: float, quantile: float
) -> float:
    """The ``quantile`` (in ``[0, 1)``) of the waiting time in the queue.

    ``P(Wq > t) = C·exp(−(cμ − λ)·t)``, so the quantile is 0 when ``quantile <= 1 − C`` and
    otherwise ``ln(C / (1 − quantile)) / (cμ − λ)``.
    """
    _check_mmc(servers, arrival_rate, service_rate)
    if not 0.0 <= quantile < 1.0:
        raise ValueError(f"quantile must be in [0, 1), got {quantile!r}")
    c = erlang_c(servers, arrival_rate / service_rate)
    if quantile <= 1.0 - c:
        return 0.0
    return math.log(c / (1.0 - quantile)) / (servers * service_rate - arrival_rate)
