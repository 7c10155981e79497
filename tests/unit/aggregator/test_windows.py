"""WindowStore: ring order and wrap-around, NaN padding, staleness, growth, duplicates, forget."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aggregator.samples import MachineSample
from aggregator.windows import WindowStore
from policies.oversubscription.config import LOAD_METRICS, QUEUE_METRICS

LOADS, QUEUES = len(LOAD_METRICS), len(QUEUE_METRICS)


def sample(
    node: str,
    t: float,
    value: float | None = None,
    *,
    cpi: float | None = None,
    mpki: float | None = None,
    cores: float = 4.0,
) -> MachineSample:
    """A sample whose every reading is derived from ``value`` (default: the timestamp), so a
    window's contents show which samples it holds and in what order."""
    v = t if value is None else value
    return MachineSample(
        node_id=node,
        timestamp=t,
        load=tuple(v + j / 100 for j in range(LOADS)),
        load_capacity=tuple(cores if m == "load_avg_1" else 1.0 for m in LOAD_METRICS),
        queue=tuple(v + 10 + j for j in range(QUEUES)),
        cpi=cpi,
        mpki=mpki,
        interval_s=1.0,
    )


def expected_window(values: list[float], window: int) -> list[float]:
    """The reference: the newest ``window`` values, oldest first, NaN-padded on the old side."""
    kept = values[-window:]
    return [math.nan] * (window - len(kept)) + kept


@pytest.mark.parametrize("added", [0, 1, 3, 4, 5, 8, 11])
def test_window_is_the_newest_samples_oldest_first_nan_padded(added: int) -> None:
    store = WindowStore(window=4, initial_machines=2)
    store.add(sample("other", 100.0))  # another machine must not disturb the ring
    times = [float(t) for t in range(1, added + 1)]
    for t in times:
        assert store.add(sample("a", t, cpi=t / 10, mpki=t / 5))
    ids, windows = store.snapshot(now=float(added), stale_after=1e9)
    row = ids.index("a") if added else None
    if row is None:
        assert ids == ("other",)
        return
    expected = np.array(expected_window(times, 4))
    for j in range(LOADS):
        np.testing.assert_array_equal(windows.load[row, j], expected + j / 100)
    for j in range(QUEUES):
        np.testing.assert_array_equal(windows.queue[row, j], expected + 10 + j)
    assert windows.cpi is not None and windows.mpki is not None
    np.testing.assert_allclose(windows.cpi[row], expected / 10)
    np.testing.assert_allclose(windows.mpki[row], expected / 5)
    assert store.window_length("a") == min(added, 4)
    assert store.window_times("a") == tuple(times[-4:])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_interleaved_machines_match_a_reference_model(seed: int) -> None:
    rng = np.random.default_rng(seed)
    store = WindowStore(window=5, initial_machines=1)
    accepted: dict[str, list[float]] = {}
    clock = dict.fromkeys(("a", "b", "c", "d"), 0.0)
    for _ in range(60):
        node = str(rng.choice(list(clock)))
        # Mostly newer samples, sometimes a repeat or an older one (refused).
        t = clock[node] + float(rng.choice([-1.0, 0.0, 1.0, 1.0, 2.0]))
        was_new = node not in accepted or t > clock[node]  # a first sample is always new
        assert store.add(sample(node, t)) is was_new
        if was_new:
            clock[node] = t
            accepted.setdefault(node, []).append(t)
    ids, windows = store.snapshot(now=max(clock.values()), stale_after=1e9)
    assert set(ids) == set(accepted)
    for row, node in enumerate(ids):
        np.testing.assert_array_equal(windows.load[row, 0], expected_window(accepted[node], 5))


def test_duplicates_and_older_samples_change_nothing() -> None:
    store = WindowStore(window=3)
    assert store.add(sample("a", 10.0, value=1.0))
    assert store.add(sample("a", 11.0, value=2.0))
    assert not store.add(sample("a", 11.0, value=99.0))  # same time: a rewind's duplicate
    assert not store.add(sample("a", 5.0, value=99.0))  # older
    _, windows = store.snapshot(now=11.0, stale_after=5.0)
    np.testing.assert_array_equal(windows.load[0, 0], [math.nan, 1.0, 2.0])
    assert store.last_seen("a") == 11.0 and store.window_length("a") == 2


@pytest.mark.parametrize(
    ("newest", "now", "stale_after", "connected"),
    [
        (100.0, 100.0, 5.0, True),
        (95.0, 100.0, 5.0, True),  # exactly at the bound still counts
        (94.9, 100.0, 5.0, False),
        (120.0, 100.0, 5.0, True),  # an agent clock ahead of ours is not stale
    ],
)
def test_machines_whose_newest_sample_is_too_old_are_disconnected(
    newest: float, now: float, stale_after: float, connected: bool
) -> None:
    store = WindowStore(window=3)
    store.add(sample("fresh", now))
    store.add(sample("a", newest - 50.0))
    store.add(sample("a", newest))
    ids, windows = store.snapshot(now=now, stale_after=stale_after)
    assert dict(zip(ids, windows.connected.tolist(), strict=True)) == {
        "fresh": True,
        "a": connected,
    }


def test_growth_past_initial_machines_keeps_every_window_and_the_order() -> None:
    store = WindowStore(window=3, initial_machines=2)
    names = [f"n{i}" for i in range(9)]
    for t in (1.0, 2.0):
        for i, name in enumerate(names):
            store.add(sample(name, t, value=100 * i + t, cores=float(i + 1)))
    ids, windows = store.snapshot(now=2.0, stale_after=1.0)
    assert ids == tuple(names) == store.node_ids
    assert windows.machine_count == 9
    for i in range(9):
        np.testing.assert_array_equal(windows.load[i, 0], [math.nan, 100 * i + 1.0, 100 * i + 2.0])
    assert windows.load_capacity is not None
    np.testing.assert_array_equal(
        windows.load_capacity[:, LOAD_METRICS.index("load_avg_1")], np.arange(1.0, 10.0)
    )


def test_capacity_is_the_latest_samples() -> None:
    store = WindowStore(window=3)
    store.add(sample("a", 1.0, cores=8.0))
    store.add(sample("a", 2.0, cores=16.0))
    _, windows = store.snapshot(now=2.0, stale_after=1.0)
    assert windows.load_capacity is not None
    assert windows.load_capacity[0, LOAD_METRICS.index("load_avg_1")] == 16.0


def test_forget_drops_the_machine_and_a_newcomer_starts_clean() -> None:
    store = WindowStore(window=3, initial_machines=2)
    for t in (1.0, 2.0, 3.0):
        store.add(sample("a", t, cpi=1.0))
        store.add(sample("b", t))
    store.forget("a")
    store.forget("unknown")  # ignored
    assert store.node_ids == ("b",) and len(store) == 1
    assert store.last_seen("a") is None and store.window_length("a") == 0
    ids, windows = store.snapshot(now=3.0, stale_after=1.0)
    assert ids == ("b",) and windows.machine_count == 1
    assert windows.cpi is None  # the only machine with counters is gone

    # The freed row goes to the next newcomer, without the old machine's samples.
    store.add(sample("c", 4.0))
    store.add(sample("a", 4.0))  # a forgotten machine comes back with a fresh window
    ids, windows = store.snapshot(now=4.0, stale_after=1.0)
    assert ids == ("c", "b", "a")
    np.testing.assert_array_equal(windows.load[0, 0], [math.nan, math.nan, 4.0])
    np.testing.assert_array_equal(windows.load[2, 0], [math.nan, math.nan, 4.0])
    assert store.window_length("a") == 1


def test_counters_none_only_when_no_known_machine_reported_them() -> None:
    store = WindowStore(window=2)
    store.add(sample("a", 1.0))
    store.add(sample("b", 1.0, cpi=1.5))
    _, windows = store.snapshot(now=1.0, stale_after=1.0)
    assert windows.mpki is None and windows.cpi is not None
    np.testing.assert_array_equal(windows.cpi, [[math.nan, math.nan], [math.nan, 1.5]])


def test_snapshot_is_immutable_and_unaffected_by_later_samples() -> None:
    store = WindowStore(window=2)
    store.add(sample("a", 1.0))
    _, before = store.snapshot(now=1.0, stale_after=1.0)
    store.add(sample("a", 2.0))
    store.add(sample("a", 3.0))
    np.testing.assert_array_equal(before.load[0, 0], [math.nan, 1.0])
    with pytest.raises(ValueError, match="read-only"):
        before.load[0, 0, 0] = 5.0


def test_empty_store_snapshot_has_the_right_shapes() -> None:
    ids, windows = WindowStore(window=7).snapshot(now=0.0, stale_after=1.0)
    assert ids == ()
    assert windows.load.shape == (0, LOADS, 7) and windows.queue.shape == (0, QUEUES, 7)
    assert windows.cpi is None and windows.connected.shape == (0,)


@pytest.mark.parametrize(("window", "initial"), [(0, 1), (1, 0), (2.5, 1), (True, 1)], ids=str)
def test_bad_sizes_are_refused(window: object, initial: object) -> None:
    with pytest.raises(ValueError, match=r"^(window|initial_machines): "):
        WindowStore(window=window, initial_machines=initial)  # type: ignore[arg-type]
