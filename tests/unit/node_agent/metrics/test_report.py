"""build_node_metrics and pressure_to_pb: every figure lands in its field, absent counters and
PSI lines stay unset (absent is not zero), task counts and per-task figures."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from node_agent.metrics.host import HostSample
from node_agent.metrics.pressure import PressureStall
from node_agent.metrics.report import (
    SCHEMA_VERSION,
    Counters,
    TaskFigures,
    build_node_metrics,
    pressure_to_pb,
)
from sluice_pb import metrics_pb2 as mpb

MIB = 1024 * 1024

# HostSample field -> NodeMetrics field, each with a distinct value.
MACHINE_FIGURES = {
    "cpu_utilization": ("cpu_utilization", 0.11),
    "memory_utilization": ("memory_utilization", 0.22),
    "load_average_1m": ("load_average_1m", 3.5),
    "disk_throughput_utilization": ("disk_throughput_utilization", 0.33),
    "disk_busy_utilization": ("disk_busy_utilization", 0.44),
    "disk_usage": ("disk_usage", 0.55),
    "net_receive_utilization": ("net_receive_utilization", 0.66),
    "net_transmit_utilization": ("net_transmit_utilization", 0.77),
}

WITH_FULL = PressureStall(1.0, 2.0, 3.0, 400, 0.5, 0.25, 0.125, 99)
SOME_ONLY = PressureStall(4.0, 5.0, 6.0, 700)


def host(pressure: Mapping[str, PressureStall] | None = None) -> HostSample:
    return HostSample(
        memory_total_bytes=8 * 1024 * MIB,
        pressure={} if pressure is None else pressure,
        **{name: value for name, (_, value) in MACHINE_FIGURES.items()},
    )


def task(
    key: str = "j/t/1", *, speculative: bool = False, suspended: bool = False, **fields: object
) -> TaskFigures:
    values: dict[str, object] = {
        "task_key": key,
        "job_id": "j",
        "task_id": "t",
        "speculative": speculative,
        "suspended": suspended,
        "cpu_cores": 0.75,
        "memory_bytes": 123 * MIB,
        "cpu_limit_cores": 1.5,
        "memory_limit_bytes": 256 * MIB,
    }
    values.update(fields)
    return TaskFigures(**values)  # type: ignore[arg-type]


def build(
    *,
    machine: HostSample | None = None,
    counters: Counters | None = None,
    tasks: list[TaskFigures] | None = None,
    dropped: int = 0,
) -> mpb.NodeMetrics:
    message = build_node_metrics(
        node_id="node-7",
        timestamp=1_700_000_000.5,
        sequence=42,
        interval_s=2.0,
        cpu_capacity=6.0,
        memory_capacity_bytes=4096 * MIB,
        machine=machine or host(),
        counters=counters or Counters(reason="no PMU"),
        tasks=tasks or [],
        dropped_samples=dropped,
    )
    # What the aggregator decodes: serialise, as the reporter does, and read back.
    return mpb.NodeMetrics.FromString(message.SerializeToString())


def test_identity_capacities_and_machine_figures() -> None:
    message = build(dropped=17)
    assert message.schema_version == SCHEMA_VERSION == 1
    assert (message.node_id, message.timestamp, message.sequence, message.interval_s) == (
        "node-7",
        1_700_000_000.5,
        42,
        2.0,
    )
    assert (message.cpu_capacity, message.memory_capacity_bytes) == (6.0, 4096 * MIB)
    for field, value in MACHINE_FIGURES.values():
        assert getattr(message, field) == value, field
    assert message.dropped_samples == 17


@pytest.mark.parametrize(
    ("counters", "cpi", "mpki"),
    [
        (Counters(reason="perf: no PMU"), None, None),
        (Counters(cpi=1.25, mpki=3.5), 1.25, 3.5),
        (Counters(cpi=0.0, mpki=0.0), 0.0, 0.0),  # measured zero is set, not absent
        (Counters(cpi=2.0, reason="mpki: no cache-misses event"), 2.0, None),
    ],
)
def test_counters_absent_stay_unset_with_the_reason(
    counters: Counters, cpi: float | None, mpki: float | None
) -> None:
    message = build(counters=counters)
    assert message.HasField("cpi") is (cpi is not None)
    assert message.HasField("mpki") is (mpki is not None)
    if cpi is not None:
        assert message.cpi == cpi
    if mpki is not None:
        assert message.mpki == mpki
    assert message.counters_unavailable == counters.reason


def stall_fields(stall: mpb.PressureStall) -> dict[str, float | None]:
    names = ["some_avg10", "some_avg60", "some_avg300", "some_total_us"]
    optional = ["full_avg10", "full_avg60", "full_avg300", "full_total_us"]
    figures: dict[str, float | None] = {name: getattr(stall, name) for name in names}
    figures.update({n: getattr(stall, n) if stall.HasField(n) else None for n in optional})
    return figures


@pytest.mark.parametrize(
    ("pressure", "present"),
    [
        ({}, set()),
        ({"cpu": SOME_ONLY}, {"cpu"}),
        ({"cpu": SOME_ONLY, "memory": WITH_FULL, "io": WITH_FULL}, {"cpu", "memory", "io"}),
        ({"io": WITH_FULL, "irq": WITH_FULL}, {"io"}),  # resources the message lacks are left out
    ],
)
def test_pressure_maps_each_resource_and_leaves_missing_lines_unset(
    pressure: dict[str, PressureStall], present: set[str]
) -> None:
    message = pressure_to_pb(pressure)
    for resource in ("cpu", "memory", "io"):
        assert message.HasField(resource) is (resource in present), resource
        if resource in present:
            expected = pressure[resource]
            assert stall_fields(getattr(message, resource)) == {
                "some_avg10": expected.some_avg10,
                "some_avg60": expected.some_avg60,
                "some_avg300": expected.some_avg300,
                "some_total_us": expected.some_total_us,
                "full_avg10": expected.full_avg10,
                "full_avg60": expected.full_avg60,
                "full_avg300": expected.full_avg300,
                "full_total_us": expected.full_total_us,
            }


def test_a_full_line_of_zeros_is_set_not_absent() -> None:
    stall = pressure_to_pb({"memory": PressureStall(0.0, 0.0, 0.0, 0, 0.0, 0.0, 0.0, 0)}).memory
    assert all(stall.HasField(n) for n in ("full_avg10", "full_avg60", "full_avg300"))
    assert stall.HasField("full_total_us")


def test_the_machine_pressure_is_in_the_message() -> None:
    message = build(machine=host({"cpu": SOME_ONLY}))
    assert message.pressure.HasField("cpu") and not message.pressure.HasField("memory")
    assert message.pressure.cpu.some_avg10 == 4.0
    assert not message.pressure.cpu.HasField("full_avg10")


@pytest.mark.parametrize(
    ("kinds", "regular", "speculative"),
    [
        ([], 0, 0),
        ([(False, False), (False, False)], 2, 0),
        ([(False, True)], 0, 0),  # suspended: not running
        ([(True, False), (True, True), (False, False), (False, True)], 1, 1),
        ([(True, False), (True, False), (True, False)], 0, 3),
    ],
)
def test_task_counts_leave_out_suspended_tasks(
    kinds: list[tuple[bool, bool]], regular: int, speculative: int
) -> None:
    tasks = [task(f"j/t{i}/1", speculative=s, suspended=p) for i, (s, p) in enumerate(kinds)]
    message = build(tasks=tasks)
    assert (message.regular_running, message.speculative_running) == (regular, speculative)
    assert (message.regular_waiting, message.speculative_waiting) == (0, 0)
    assert [t.task_key for t in message.tasks] == [t.task_key for t in tasks]


def test_per_task_figures_are_copied() -> None:
    figures = task(
        "job-3/task-2/4",
        job_id="job-3",
        task_id="task-2",
        speculative=True,
        suspended=True,
        cpu_cores=0.25,
        memory_bytes=77 * MIB,
        cpu_limit_cores=2.0,
        memory_limit_bytes=512 * MIB,
        pressure={"memory": WITH_FULL},
    )
    (entry,) = build(tasks=[figures, task("other")]).tasks[:1]
    assert (entry.task_key, entry.job_id, entry.task_id) == ("job-3/task-2/4", "job-3", "task-2")
    assert (entry.speculative, entry.suspended) == (True, True)
    assert (entry.cpu_cores, entry.memory_bytes) == (0.25, 77 * MIB)
    assert (entry.cpu_limit_cores, entry.memory_limit_bytes) == (2.0, 512 * MIB)
    assert entry.pressure.HasField("memory") and not entry.pressure.HasField("cpu")
    assert entry.pressure.memory.full_total_us == 99
    assert not entry.HasField("cpi") and not entry.HasField("mpki")


@pytest.mark.parametrize(("cpi", "mpki"), [(None, None), (1.75, 4.5), (0.0, 0.0), (2.0, None)])
def test_per_task_counters_are_set_only_when_measured(
    cpi: float | None, mpki: float | None
) -> None:
    (entry,) = build(tasks=[task(cpi=cpi, mpki=mpki)]).tasks
    assert (entry.cpi if entry.HasField("cpi") else None) == cpi
    assert (entry.mpki if entry.HasField("mpki") else None) == mpki


@pytest.mark.parametrize("pressure", [None, {}], ids=["cgroup v1", "nothing read"])
def test_a_task_without_pressure_has_none_in_the_message(
    pressure: dict[str, PressureStall] | None,
) -> None:
    (entry,) = build(tasks=[task(pressure=pressure)]).tasks
    assert not entry.HasField("pressure")
