"""The PNG charts of a simulation run and of a comparison of runs (docs/simulator-results.md).

Drawn with ``matplotlib.figure.Figure`` on an explicit Agg canvas: no pyplot, no global figure
state, no GUI backend.  Each chart is drawn under matplotlib's default style (whatever the user's
``matplotlibrc`` says) and saved with ``metadata={"Software": None}`` so that the same data gives
byte-identical PNG files (no version, no date).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.style
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["PERCENTILE_LABELS", "plot_cdfs", "plot_comparison", "plot_utilisation", "save_png"]

#: The order of the three values per configuration that `plot_comparison` draws as bars.
PERCENTILE_LABELS: tuple[str, str, str] = ("p50", "p95", "p99")

_DPI = 100
#: When the finite positive values span more than this factor, the time axis is logarithmic.
_LOG_SPAN = 100.0


def save_png(figure: Figure, path: Path) -> None:
    """Save ``figure`` to ``path`` as a PNG that carries no software version or date."""
    FigureCanvasAgg(figure)  # attaches itself to the figure: no pyplot, no global backend
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=_DPI, metadata={"Software": None})


def _finite(values: Sequence[float]) -> list[float]:
    return sorted(v for v in values if math.isfinite(v))


def _use_log_scale(all_values: Sequence[float]) -> bool:
    positive = [v for v in all_values if math.isfinite(v) and v > 0]
    if len(positive) < 2 or any(math.isfinite(v) and v <= 0 for v in all_values):
        return False
    return max(positive) / min(positive) > _LOG_SPAN


def _draw_cdfs(axes: Axes, series: Mapping[str, Sequence[float]], xlabel: str, title: str) -> None:
    everything = [v for values in series.values() for v in values]
    log = _use_log_scale(everything)
    right = max((v for v in everything if math.isfinite(v)), default=0.0)
    drawn = False
    for label, values in series.items():
        finite = _finite(values)
        total = len(values)
        legend = f"{label} ({len(finite)}/{total} finished)"
        if not finite:
            # Keep the group in the legend so that its absence from the chart is visible.
            axes.plot([], [], label=legend)
            continue
        xs = [finite[0], *finite]
        ys = [0.0, *((i + 1) / total for i in range(len(finite)))]
        if right > finite[-1]:
            # Carry the final level to the right edge so that a group's plateau stays visible.
            xs.append(right)
            ys.append(ys[-1])
        axes.step(xs, ys, where="post", label=legend)
        drawn = True
    if not drawn:
        axes.text(0.5, 0.5, "no finished jobs", ha="center", va="center", transform=axes.transAxes)
    if log:
        axes.set_xscale("log")
        xlabel += " (log scale)"
    axes.set_xlabel(xlabel)
    axes.set_ylabel("fraction of jobs finished")
    axes.set_ylim(0.0, 1.02)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    if series:
        axes.legend(loc="lower right", fontsize="small")


def plot_cdfs(
    series: Mapping[str, Sequence[float]],
    path: Path,
    *,
    title: str = "Job completion time",
    xlabel: str = "completion time (s)",
) -> None:
    """Draw one empirical CDF line per group (in the mapping's order) and save it to ``path``.

    Each group's values are its jobs' completion times with ``nan`` for jobs that did not finish;
    the y value at ``x`` is the fraction of *all* the group's jobs that finished within ``x``, so
    a group with unfinished jobs tops out below 1.  The x axis is logarithmic when the times span
    more than a factor of 100.
    """
    with matplotlib.style.context("default"):
        figure = Figure(figsize=(8.0, 5.0), dpi=_DPI)
        axes = figure.add_subplot()
        _draw_cdfs(axes, series, xlabel, title)
        figure.tight_layout()
        save_png(figure, path)


def plot_utilisation(
    times: Sequence[float],
    series: Mapping[str, Sequence[float]],
    path: Path,
    *,
    title: str = "Cluster utilisation",
) -> None:
    """Draw utilisation fractions over virtual time as steps and save the chart to ``path``.

    ``times`` are the sample times in seconds, each series (e.g. ``"cpu"``, ``"memory"``) holds one
    fraction per sample; a sample's value holds until the next sample's time (drawn with
    ``where="post"``).  The y axis shows percent of capacity.
    """
    for label, values in series.items():
        if len(values) != len(times):
            raise ValueError(f"series {label!r} has {len(values)} values for {len(times)} times")
    with matplotlib.style.context("default"):
        figure = Figure(figsize=(8.0, 4.0), dpi=_DPI)
        axes = figure.add_subplot()
        top = 100.0
        for label, values in series.items():
            percent = [100.0 * v for v in values]
            axes.step(list(times), percent, where="post", label=label)
            top = max([top, *(p for p in percent if math.isfinite(p))])
        if not times:
            axes.text(0.5, 0.5, "no samples", ha="center", va="center", transform=axes.transAxes)
        axes.set_xlabel("virtual time (s)")
        axes.set_ylabel("utilisation (% of capacity)")
        axes.set_ylim(0.0, top * 1.05)
        axes.set_title(title)
        axes.grid(True, alpha=0.3)
        if series and times:
            axes.legend(loc="upper right", fontsize="small")
        figure.tight_layout()
        save_png(figure, path)


def _draw_bars(
    axes: Axes, configurations: Mapping[str, Sequence[float]], title: str, ylabel: str
) -> None:
    names = list(configurations)
    width = 0.8 / len(PERCENTILE_LABELS)
    for j, label in enumerate(PERCENTILE_LABELS):
        heights = []
        for name in names:
            values = configurations[name]
            value = values[j] if j < len(values) else math.nan
            heights.append(value if math.isfinite(value) else 0.0)
        positions = [i + (j - (len(PERCENTILE_LABELS) - 1) / 2) * width for i in range(len(names))]
        axes.bar(positions, heights, width=width, label=label)
    axes.set_xticks(list(range(len(names))), names, rotation=20 if len(names) > 3 else 0)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(loc="upper left", fontsize="small")


def plot_comparison(
    percentiles: Mapping[str, Mapping[str, Sequence[float]]],
    path: Path,
    *,
    cdfs: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
    title: str = "Completion time by configuration",
) -> None:
    """Draw a comparison of configurations and save it to ``path``.

    ``percentiles`` maps each group (e.g. ``"all"``, ``"priority 10"``) to the configurations, in
    order, and their completion-time p50, p95 and p99 in seconds (`PERCENTILE_LABELS`; ``nan``
    draws no bar).  Each group gets one panel of grouped bars.  When ``cdfs`` is given (group →
    configuration → completion times, ``nan`` for unfinished jobs), each group also gets a panel
    with one CDF per configuration, next to its bars.
    """
    groups = list(percentiles)
    rows = max(1, len(groups))
    columns = 2 if cdfs else 1
    with matplotlib.style.context("default"):
        figure = Figure(figsize=(6.0 * columns, 3.6 * rows), dpi=_DPI)
        if not groups:
            axes = figure.add_subplot()
            axes.text(0.5, 0.5, "no data", ha="center", va="center", transform=axes.transAxes)
            axes.set_title(title)
        for i, group in enumerate(groups):
            bars = figure.add_subplot(rows, columns, i * columns + 1)
            _draw_bars(bars, percentiles[group], f"{group}: completion time", "seconds")
            if cdfs:
                lines = figure.add_subplot(rows, columns, i * columns + 2)
                _draw_cdfs(lines, cdfs.get(group, {}), "completion time (s)", f"{group}: CDF")
        figure.suptitle(title)
        figure.tight_layout()
        save_png(figure, path)
