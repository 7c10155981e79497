"""The aggregator's ranking knobs, shared by ``sluice aggregator`` and ``sluice local up``.

``sluice local up`` passes every knob given to it on to the aggregator it starts (unset ones
keep the aggregator's defaults), and checks them first, so a bad value is a one-line error
before anything starts.  Light on purpose: the CLI imports it, and nothing here imports numpy.
"""

from __future__ import annotations

import argparse
import math

from policies.oversubscription.config import LOAD_METRICS, OversubscriptionConfig

RANKING_NAMES = ("least-loaded", "rose")  # aggregator.daemon.RANKINGS' keys

# flag -> (type, the aggregator's default, metavar, help); --load-threshold is apart (repeatable).
_KNOBS: dict[str, tuple[type, object, str, str]] = {
    "--window": (int, 60, "N", "samples kept per machine"),
    "--stale-after": (
        float,
        5.0,
        "S",
        "seconds without a sample before a machine counts as disconnected",
    ),
    "--forget-after": (
        float,
        600.0,
        "S",
        "seconds without a sample before a machine leaves the machine list",
    ),
    "--candidate-limit": (int, 100, "L", "L_max of ROSE Alg. 4"),
    "--replay": (
        float,
        60.0,
        "S",
        "without InfluxDB, seconds of Kafka history replayed at start-up",
    ),
}


def add_arguments(parser: argparse.ArgumentParser, *, for_local: bool = False) -> None:
    """The knobs; ``for_local``: unset ones stay None (the aggregator's defaults apply)."""
    for flag, (kind, default, metavar, text) in _KNOBS.items():
        parser.add_argument(
            flag,
            type=kind,
            default=None if for_local else default,
            metavar=metavar,
            help=f"{'the aggregator: ' if for_local else ''}{text} (default: {default})",
        )
    parser.add_argument(
        "--ranking",
        choices=RANKING_NAMES,
        default=None if for_local else "rose",
        help=f"{'the aggregator: ' if for_local else ''}how machines are ranked (default: rose)",
    )
    parser.add_argument(
        "--load-threshold",
        action="append",
        default=[],
        metavar="METRIC=FRACTION",
        help=f"{'the aggregator: ' if for_local else ''}the load filter's bound for one metric, "
        "a fraction of the machine's capacity, or 'off' (ROSE Alg. 4 B3; repeatable; metrics: "
        f"{', '.join(LOAD_METRICS)}; defaults: disk_usage 0.6, the others 0.9)",
    )


def load_thresholds_of(
    overrides: list[str], defaults: tuple[float, ...] = OversubscriptionConfig().load_thresholds
) -> tuple[float, ...]:
    """The load filter's thresholds, in LOAD_METRICS order, with ``METRIC=FRACTION`` overrides.

    ``off`` (or ``inf``) disables a metric's bound; a bad entry is a ValueError naming the flag.
    """
    thresholds = dict(zip(LOAD_METRICS, defaults, strict=True))
    for entry in overrides:
        name, sep, text = entry.partition("=")
        if not sep or name not in thresholds:
            raise ValueError(
                f"--load-threshold: expected METRIC=FRACTION with METRIC one of "
                f"{', '.join(LOAD_METRICS)}, got {entry!r}"
            )
        if text.strip().lower() in ("off", "inf"):
            thresholds[name] = math.inf
            continue
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ValueError(
                f"--load-threshold: {name} must be a positive fraction or 'off', got {text!r}"
            )
        thresholds[name] = value
    return tuple(thresholds[name] for name in LOAD_METRICS)


def check(args: argparse.Namespace) -> None:
    """ValueError naming the flag for a bad knob (unset ones, None, are the defaults)."""
    load_thresholds_of(args.load_threshold)
    window = _value(args, "--window")
    if window < 2:
        raise ValueError("--window: must be at least 2 samples")
    stale, forget = _value(args, "--stale-after"), _value(args, "--forget-after")
    if not stale > 0:
        raise ValueError("--stale-after: must be positive")
    if forget <= stale:
        raise ValueError("--forget-after: must be longer than --stale-after")
    if _value(args, "--candidate-limit") < 1:
        raise ValueError("--candidate-limit: must be at least 1")
    if _value(args, "--replay") < 0:
        raise ValueError("--replay: must be 0 or more seconds")


def forwarded(args: argparse.Namespace) -> tuple[str, ...]:
    """The aggregator's command-line flags for the knobs given (``sluice local up``)."""
    argv: list[str] = []
    for flag in _KNOBS:
        value = getattr(args, _dest(flag))
        if value is not None:
            argv += [flag, str(value)]
    if args.ranking is not None:
        argv += ["--ranking", args.ranking]
    for entry in args.load_threshold:
        argv += ["--load-threshold", entry]
    return tuple(argv)


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _value(args: argparse.Namespace, flag: str) -> float:
    value = getattr(args, _dest(flag))
    return float(_KNOBS[flag][1] if value is None else value)  # type: ignore[arg-type]
