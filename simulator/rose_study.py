"""The ROSE-shaped experiment (docs/oversubscription.md): speculative oversubscription at
scale, on the product's own job masters, node-queue decisions and aggregator ranking
(:mod:`simulator.oversubscription` says what is modelled around them).

* **Placement** (:func:`run_placement`; ROSE Sec. 7.3, Fig. 15): batch jobs that ask for more
  than the cluster has, whose tasks use part of what they hold, under each way of choosing the
  machines for speculative tasks: ``none`` (no oversubscription), ``random`` (RB),
  ``least-loaded`` (SLB), ``shortest-queue`` (QLB) and ``rose`` (Alg. 4).  Reported: the
  workload's makespan (first submission to last end), the cluster's mean CPU utilisation over
  it, and the speculative tasks placed, refused by full queues, launched, evicted and upgraded.
* **Co-location** (:func:`run_colocation`; Sec. 7.4): the same jobs beside latency-sensitive
  services on a share of the nodes, with ROSE's placement, in UP and in RP, and without
  oversubscription (the services' latency "alone").  Reported: the services' p95 latency (in
  units of their own service time), the makespan and the speculative counts.

:func:`format_rows` is the table; :func:`plot_placement` and :func:`plot_colocation` the PNGs.
:func:`accumulate` keeps each configuration's row in a results file, so configurations run as
separate processes (in parallel, or one after another) make one table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from policies.oversubscription.config import OversubscriptionMode
from simulator.engine import SimSettings, Simulation
from simulator.oversubscription import (
    PLACEMENTS,
    OversubscribedSimulation,
    OversubscriptionSettings,
    mean_utilisation,
)
from simulator.plots import save_png
from simulator.workload import SimJob

Say = Callable[[str], None]
COLOCATION_CONFIGS = ("alone", "rose-UP", "rose-RP")
Watch = Callable[[str, Simulation], None]  # now and then during a run, and at its end


@dataclass(frozen=True)
class StudyRow:
    """One configuration's figures."""

    name: str
    placement: str
    mode: str
    makespan: float
    utilisation: float
    placed: int
    refused: int
    launched: int
    evicted: int
    upgraded: int
    latency_p95: float  # the services' (NaN without services)
    wall_s: float


def _run(
    name: str,
    jobs: Sequence[SimJob],
    settings: SimSettings,
    seed: int,
    oversubscription: OversubscriptionSettings,
    watch: Watch | None = None,
) -> StudyRow:
    import time

    started = time.perf_counter()
    simulation = OversubscribedSimulation(jobs, settings, seed, oversubscription)
    if watch is not None:
        simulation.on_progress = lambda s: watch(name, s)
    result = simulation.run(progress_every=2_000)
    if watch is not None:
        watch(name, simulation)  # at its end too, however short the run
    ends = [o.finish_time for o in result.outcomes if math.isfinite(o.finish_time)]
    first = min((o.submit_time for o in result.outcomes), default=0.0)
    last = max(ends, default=math.nan)
    counts = simulation.counts
    latencies = simulation.latencies
    return StudyRow(
        name=name,
        placement=oversubscription.placement,
        mode=oversubscription.mode.value,
        makespan=last - first,
        utilisation=mean_utilisation(simulation, last),
        placed=counts.placed,
        refused=counts.refused,
        launched=counts.launched,
        evicted=counts.evicted,
        upgraded=counts.upgraded,
        latency_p95=float(np.percentile(latencies, 95)) if latencies else math.nan,
        wall_s=time.perf_counter() - started,
    )


def run_placement(
    jobs: Sequence[SimJob],
    settings: SimSettings,
    seed: int,
    base: OversubscriptionSettings,
    placements: Sequence[str] = PLACEMENTS,
    say: Say = lambda _: None,
    watch: Watch | None = None,
) -> list[StudyRow]:
    """Batch only, UP: every placement policy on the same jobs."""
    rows = []
    for placement in placements:
        say(f"placement {placement}: {len(jobs)} jobs on {settings.nodes} nodes")
        config = replace(base, placement=placement, mode=OversubscriptionMode.UTILIZATION)
        rows.append(_run(placement, jobs, settings, seed, config, watch))
        say(_line(rows[-1]))
    return rows


def run_colocation(
    jobs: Sequence[SimJob],
    settings: SimSettings,
    seed: int,
    base: OversubscriptionSettings,
    say: Say = lambda _: None,
    watch: Watch | None = None,
    names: Sequence[str] = COLOCATION_CONFIGS,
) -> list[StudyRow]:
    """Services beside the batch jobs: alone (no oversubscription), ROSE in UP, ROSE in RP
    (``names``: those of them to run)."""
    configs = [
        ("alone", replace(base, placement="none", mode=OversubscriptionMode.UTILIZATION)),
        ("rose-UP", replace(base, placement="rose", mode=OversubscriptionMode.UTILIZATION)),
        ("rose-RP", replace(base, placement="rose", mode=OversubscriptionMode.RESPONSIVENESS)),
    ]
    rows = []
    for name, config in configs:
        if name not in names:
            continue
        say(f"co-location {name}: services on {base.service_fraction:.0%} of the nodes")
        rows.append(_run(name, jobs, settings, seed, config, watch))
        say(_line(rows[-1]))
    return rows


def _line(row: StudyRow) -> str:
    return (
        f"  {row.name}: makespan {row.makespan:.0f} s, utilisation {row.utilisation:.1%}, "
        f"{row.launched} speculative launched, {row.evicted} evicted ({row.wall_s:.0f} s)"
    )


def accumulate(
    path: Path, rows: Sequence[StudyRow], settings: Mapping[str, object], order: Sequence[str]
) -> list[StudyRow]:
    """Append ``rows`` to the results file ``path`` (JSON lines, each with the ``settings`` it
    ran under) and return every row kept there under the same settings, one per configuration
    (the newest), in ``order``.  Appends of one short line each: processes finishing together
    do not mix their lines."""
    with path.open("a") as results:
        for row in rows:
            results.write(json.dumps({"settings": settings, "row": _row_json(row)}) + "\n")
    kept: dict[str, StudyRow] = {}
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
            if entry["settings"] == settings:
                fields: dict[str, Any] = {
                    k: math.nan if v is None else v for k, v in entry["row"].items()
                }
                row = StudyRow(**fields)
                kept[row.name] = row
        except (ValueError, KeyError, TypeError):
            continue  # a line of another version, or cut short: not ours
    return sorted(kept.values(), key=lambda r: order.index(r.name) if r.name in order else 99)


def _row_json(row: StudyRow) -> dict[str, object]:
    # NaN is not JSON: the latency of a run without services is null, read back as NaN
    return {
        k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(row).items()
    }


def format_rows(rows: Sequence[StudyRow], title: str, reference: str) -> str:
    """A table; makespans also as their change against ``reference``'s."""
    base = next((r.makespan for r in rows if r.name == reference), math.nan)
    header = (
        f"{'CONFIG':<16}{'MAKESPAN':>10}{'VS ' + reference.upper():>14}{'CPU UTIL':>10}"
        f"{'PLACED':>10}{'REFUSED':>10}{'LAUNCHED':>10}{'EVICTED':>9}{'UPGRADED':>10}"
        f"{'P95 LAT':>9}"
    )
    lines = [title, header]
    for row in rows:
        change = (row.makespan / base - 1) if base and math.isfinite(base) else math.nan
        latency = "-" if math.isnan(row.latency_p95) else f"{row.latency_p95:.2f}"
        lines.append(
            f"{row.name:<16}{row.makespan:>9.0f}s{change:>+14.1%}{row.utilisation:>10.1%}"
            f"{row.placed:>10}{row.refused:>10}{row.launched:>10}{row.evicted:>9}"
            f"{row.upgraded:>10}{latency:>9}"
        )
    return "\n".join(lines)


def plot_placement(rows: Sequence[StudyRow], nodes: int, path: Path) -> None:
    """Makespan and CPU utilisation per placement policy."""
    figure = Figure(figsize=(10, 4.4), layout="constrained")
    left, right = figure.subplots(1, 2)
    names = [r.name for r in rows]
    left.bar(names, [r.makespan for r in rows], color="#4477aa")
    left.set_ylabel("workload makespan (s)")
    left.set_title(f"makespan, {nodes:,} nodes")
    right.bar(names, [100 * r.utilisation for r in rows], color="#66aa55")
    right.set_ylabel("mean CPU utilisation (%)")
    right.set_title("cluster CPU utilisation")
    for axis in (left, right):
        axis.tick_params(axis="x", rotation=25)
    save_png(figure, path)


def plot_colocation(rows: Sequence[StudyRow], nodes: int, path: Path) -> None:
    """The services' p95 latency and the batch makespan: alone, UP, RP."""
    figure = Figure(figsize=(10, 4.4), layout="constrained")
    left, right = figure.subplots(1, 2)
    names = [r.name for r in rows]
    left.bar(names, [r.latency_p95 for r in rows], color="#cc6677")
    left.set_ylabel("service p95 latency (service times)")
    left.set_title(f"latency-sensitive services, {nodes:,} nodes")
    right.bar(names, [r.makespan for r in rows], color="#4477aa")
    right.set_ylabel("batch makespan (s)")
    right.set_title("batch jobs beside them")
    save_png(figure, path)
