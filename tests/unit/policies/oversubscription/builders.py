"""Small builders for ROSE test inputs."""

from __future__ import annotations

import numpy as np

from policies.oversubscription.config import OversubscriptionConfig, OversubscriptionMode
from policies.oversubscription.snapshot import MachineLoads, MachineWindows

LOAD_DIMS = 8
QUEUE_DIMS = 3


def loads(
    machines: int,
    *,
    load: float = 0.3,
    queue: float = 1.0,
    cpi: float = 1.0,
    mpki: float = 1.0,
    overrides: dict[int, dict[str, object]] | None = None,
) -> MachineLoads:
    """Identical machines, then per-machine overrides: ``{i: {"load": [...], "cpi": 3.0}}``."""
    load_values = np.full((machines, LOAD_DIMS), load)
    queue_values = np.full((machines, QUEUE_DIMS), queue)
    cpi_values = np.full(machines, cpi)
    mpki_values = np.full(machines, mpki)
    connected = np.ones(machines, dtype=bool)
    for machine, fields in (overrides or {}).items():
        if "load" in fields:
            load_values[machine] = fields["load"]
        if "queue" in fields:
            queue_values[machine] = fields["queue"]
        if "cpi" in fields:
            cpi_values[machine] = fields["cpi"]
        if "mpki" in fields:
            mpki_values[machine] = fields["mpki"]
        if "connected" in fields:
            connected[machine] = fields["connected"]
    return MachineLoads(
        load=load_values,
        load_capacity=np.ones((machines, LOAD_DIMS)),
        queue=queue_values,
        cpi=cpi_values,
        mpki=mpki_values,
        connected=connected,
    )


def config(**overrides: object) -> OversubscriptionConfig:
    """Default knobs with small blacklists, in UP mode unless told otherwise."""
    fields: dict[str, object] = {
        "mode": OversubscriptionMode.UTILIZATION,
        "counter_blacklist_size": 1,
        "rating_blacklist_size": 1,
        "candidate_limit": 2,
        "prefilter_factor": 2.0,
    }
    fields.update(overrides)
    return OversubscriptionConfig(**fields)  # type: ignore[arg-type]


def random_windows(
    machines: int, samples: int = 12, *, seed: int = 0, missing: float = 0.0
) -> MachineWindows:
    """Random but plausible windows; ``missing`` is the fraction of NaN samples."""
    rng = np.random.default_rng(seed)
    load = rng.uniform(0.0, 0.8, (machines, LOAD_DIMS, samples))
    queue = rng.integers(0, 8, (machines, QUEUE_DIMS, samples)).astype(float)
    cpi = rng.gamma(5.0, 0.3, (machines, samples))
    mpki = rng.chisquare(4.0, (machines, samples))
    if missing:
        load[rng.random(load.shape) < missing] = np.nan
        cpi[rng.random(cpi.shape) < missing] = np.nan
    return MachineWindows(
        load=load,
        queue=queue,
        connected=rng.random(machines) > 0.05,
        load_capacity=rng.choice([16.0, 32.0, 64.0], (machines, LOAD_DIMS)),
        cpi=cpi,
        mpki=mpki,
    )
