"""Task-level (Eq. 1) and wave-level (Sec. 4.2) job-time models, checked against Monte Carlo."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.approximation.dropping import kept_tasks, kept_tasks_array
from policies.approximation.job_time import (
    TaskLevelJob,
    WaveLevelJob,
    check_task_pmf,
    interpolated_setup_mean,
    kept_task_distribution,
    task_level_model,
    wave_level_model,
    wave_probabilities,
)
from policies.approximation.phase_type import PhaseType, erlang_with_mean, exponential, mean

SAMPLES = 20_000


def point_pmf(tasks: int) -> np.ndarray:
    pmf = np.zeros(tasks)
    pmf[-1] = 1.0
    return pmf


def uniform_pmf(low: int, high: int) -> np.ndarray:
    pmf = np.zeros(high)
    pmf[low - 1 : high] = 1.0 / (high - low + 1)
    return pmf


def task_job(slots: int, map_pmf: np.ndarray, reduce_pmf: np.ndarray) -> TaskLevelJob:
    return TaskLevelJob(
        slots=slots,
        map_tasks_pmf=map_pmf,
        reduce_tasks_pmf=reduce_pmf,
        setup_rate=1 / 5.0,
        map_rate=1 / 4.0,
        shuffle_rate=1 / 2.0,
        reduce_rate=1 / 3.0,
    )


# ---- direct Monte Carlo of the job process (slots pick the next task as they free up) ----


def draw_counts(pmf: np.ndarray, theta: float, rng: np.random.Generator) -> np.ndarray:
    tasks = rng.choice(np.arange(1, len(pmf) + 1), size=SAMPLES, p=pmf)
    return kept_tasks_array(tasks, theta)


def simulate_stage(counts: np.ndarray, slots: int, mean_task: float, rng) -> np.ndarray:
    """List scheduling of each job's tasks on ``slots`` slots; the stage ends with its last task."""
    free_at = np.zeros((len(counts), slots))
    rows = np.arange(len(counts))
    for index in range(int(counts.max())):
        slot = np.argmin(free_at, axis=1)
        duration = rng.exponential(mean_task, size=len(counts))
        free_at[rows, slot] += np.where(counts > index, duration, 0.0)
    return np.asarray(free_at.max(axis=1))


def simulate_task_level(job: TaskLevelJob, map_drop: float, reduce_drop: float, rng) -> float:
    setup = rng.exponential(1 / job.setup_rate, SAMPLES)
    maps = simulate_stage(
        draw_counts(job.map_tasks_pmf, map_drop, rng), job.slots, 1 / job.map_rate, rng
    )
    shuffle = rng.exponential(1 / job.shuffle_rate, SAMPLES)
    reduces = simulate_stage(
        draw_counts(job.reduce_tasks_pmf, reduce_drop, rng), job.slots, 1 / job.reduce_rate, rng
    )
    return float(np.mean(setup + maps + shuffle + reduces))


TASK_CASES = [
    # (slots, map pmf, reduce pmf, θ_m, θ_r)
    (20, point_pmf(50), point_pmf(10), 0.0, 0.0),
    (20, point_pmf(50), point_pmf(10), 0.2, 0.0),
    (8, uniform_pmf(1, 30), uniform_pmf(1, 6), 0.4, 0.5),
    (1, uniform_pmf(2, 6), point_pmf(2), 0.1, 0.0),
]


@pytest.mark.parametrize(("slots", "map_pmf", "reduce_pmf", "map_drop", "reduce_drop"), TASK_CASES)
def test_task_level_mean_matches_monte_carlo(
    slots: int, map_pmf: np.ndarray, reduce_pmf: np.ndarray, map_drop: float, reduce_drop: float
) -> None:
    job = task_job(slots, map_pmf, reduce_pmf)
    simulated = simulate_task_level(job, map_drop, reduce_drop, np.random.default_rng(42))
    assert mean(task_level_model(job, map_drop, reduce_drop)) == pytest.approx(simulated, rel=0.02)


def test_task_level_mean_in_closed_form() -> None:
    # 50 maps, θ = 0.2 → 40 run: 20 at a time until 20 are left, then one fewer each time.
    job = task_job(20, point_pmf(50), np.array([0.5, 0.5]))
    expected = 5 + sum(4 / min(t, 20) for t in range(1, 41)) + 2 + 0.5 * 3 + 0.5 * (1.5 + 3)
    ph = task_level_model(job, 0.2)
    assert mean(ph) == pytest.approx(expected, rel=1e-12)
    assert ph.order == kept_tasks(50, 0.2) + 2 + 2  # N̄_m + N̄_r + 2 phases


def test_task_level_generator_follows_eq1() -> None:
    job = task_job(2, np.array([0.25, 0.0, 0.75]), np.array([1.0]))
    A = task_level_model(job, 0.0).A
    # Phases: O, M3, M2, M1, S, R1
    mu_o, mu_m, mu_s, mu_r = 1 / 5, 1 / 4, 1 / 2, 1 / 3
    expected = np.array(
        [
            [-mu_o, 0.75 * mu_o, 0.0, 0.25 * mu_o, 0.0, 0.0],
            [0.0, -2 * mu_m, 2 * mu_m, 0.0, 0.0, 0.0],
            [0.0, 0.0, -2 * mu_m, 2 * mu_m, 0.0, 0.0],
            [0.0, 0.0, 0.0, -mu_m, mu_m, 0.0],
            [0.0, 0.0, 0.0, 0.0, -mu_s, mu_s],
            [0.0, 0.0, 0.0, 0.0, 0.0, -mu_r],
        ]
    )
    assert pytest.approx(expected) == A


@settings(max_examples=25, deadline=None)
@given(
    slots=st.integers(1, 12),
    tasks=st.integers(1, 40),
    low=st.floats(0.0, 1.0),
    high=st.floats(0.0, 1.0),
)
def test_dropping_more_never_lengthens_the_job(
    slots: int, tasks: int, low: float, high: float
) -> None:
    low, high = sorted((low, high))
    job = task_job(slots, uniform_pmf(1, tasks), point_pmf(3))
    assert mean(task_level_model(job, high)) <= mean(task_level_model(job, low)) + 1e-9


# ---- wave level ----

MAP_WAVES = (erlang_with_mean(6.0, 5), erlang_with_mean(4.0, 5))
REDUCE_WAVES = (erlang_with_mean(3.0, 2),)


def wave_job(slots: int, map_pmf: np.ndarray, reduce_pmf: np.ndarray) -> WaveLevelJob:
    return WaveLevelJob(
        slots=slots,
        map_tasks_pmf=map_pmf,
        reduce_tasks_pmf=reduce_pmf,
        setup=exponential(1 / 5.0),
        shuffle=erlang_with_mean(2.0, 3),
        map_waves=MAP_WAVES,
        reduce_waves=REDUCE_WAVES,
    )


def erlang_draws(ph_mean: float, phases: int, size: int, rng) -> np.ndarray:
    return np.asarray(rng.gamma(phases, ph_mean / phases, size))


def simulate_waves(counts: np.ndarray, slots: int, blocks: list[tuple[float, int]], rng):
    """Sum over the job's waves; a d-wave job runs the last d of the ``blocks`` (Sec. 4.2)."""
    waves = -(-counts // slots)
    total = np.zeros(len(counts))
    for index, (block_mean, phases) in enumerate(blocks):
        runs = waves >= len(blocks) - index
        total += np.where(runs, erlang_draws(block_mean, phases, len(counts), rng), 0.0)
    return total


@pytest.mark.parametrize(
    ("slots", "map_pmf", "reduce_pmf", "map_drop"),
    [
        (20, uniform_pmf(1, 50), uniform_pmf(1, 30), 0.0),
        (20, uniform_pmf(1, 50), uniform_pmf(1, 30), 0.2),
        (10, point_pmf(35), point_pmf(5), 0.4),
    ],
)
def test_wave_level_mean_matches_monte_carlo(
    slots: int, map_pmf: np.ndarray, reduce_pmf: np.ndarray, map_drop: float
) -> None:
    rng = np.random.default_rng(7)
    map_counts = draw_counts(map_pmf, map_drop, rng)
    reduce_counts = draw_counts(reduce_pmf, 0.0, rng)
    map_blocks_needed = int(-(-map_counts.max() // slots))
    map_blocks = [(6.0, 5)] + [(4.0, 5)] * (map_blocks_needed - 1)
    reduce_blocks = [(3.0, 2)] * int(-(-reduce_counts.max() // slots))
    simulated = (
        rng.exponential(5.0, SAMPLES)
        + simulate_waves(map_counts, slots, map_blocks, rng)
        + erlang_draws(2.0, 3, SAMPLES, rng)
        + simulate_waves(reduce_counts, slots, reduce_blocks, rng)
    ).mean()
    job = wave_job(slots, map_pmf, reduce_pmf)
    assert mean(wave_level_model(job, map_drop)) == pytest.approx(simulated, rel=0.02)


def test_wave_level_matrix_matches_the_papers_two_wave_layout() -> None:
    # w_m = w_r = 2 with exponential blocks: setup leaves to m(1) with q_m(2), to m(2) with q_m(1).
    rates = {"o": 1.0, "m1": 2.0, "m2": 3.0, "s": 4.0, "r1": 5.0, "r2": 6.0}
    job = WaveLevelJob(
        slots=10,
        map_tasks_pmf=uniform_pmf(1, 20),
        reduce_tasks_pmf=np.array([0.0] * 9 + [0.3] + [0.0] * 9 + [0.7]),
        setup=exponential(rates["o"]),
        shuffle=exponential(rates["s"]),
        map_waves=(exponential(rates["m1"]), exponential(rates["m2"])),
        reduce_waves=(exponential(rates["r1"]), exponential(rates["r2"])),
    )
    q_m, q_r = (0.5, 0.5), (0.3, 0.7)  # q(1), q(2)
    expected = np.diag([-1.0, -2.0, -3.0, -4.0, -5.0, -6.0])
    expected[0, 1], expected[0, 2] = 1.0 * q_m[1], 1.0 * q_m[0]
    expected[1, 2], expected[2, 3] = 2.0, 3.0
    expected[3, 4], expected[3, 5] = 4.0 * q_r[1], 4.0 * q_r[0]
    expected[4, 5] = 5.0
    ph = wave_level_model(job, 0.0)
    assert pytest.approx(expected) == ph.A
    assert ph.alpha.tolist() == [1.0, 0, 0, 0, 0, 0]


# (pmf, θ, C, q(1..W))
WAVE_PROBABILITIES = [
    (point_pmf(50), 0.0, 20, [0.0, 0.0, 1.0]),
    (point_pmf(50), 0.2, 20, [0.0, 1.0]),  # 40 tasks: the drop saves a whole wave (Sec. 5.2.2)
    (point_pmf(50), 0.1, 20, [0.0, 0.0, 1.0]),  # 45 tasks: still three waves
    (uniform_pmf(1, 50), 0.0, 20, [0.4, 0.4, 0.2]),
    (uniform_pmf(1, 4), 0.5, 1, [0.5, 0.5]),
]


@pytest.mark.parametrize(("pmf", "theta", "slots", "expected"), WAVE_PROBABILITIES)
def test_wave_probabilities(pmf: np.ndarray, theta: float, slots: int, expected: list[float]):
    assert wave_probabilities(pmf, theta, slots) == pytest.approx(expected)


def test_kept_task_distribution_merges_counts() -> None:
    # t = 1..4 uniform, θ = 0.5: ⌈t/2⌉ = 1, 1, 2, 2.
    assert kept_task_distribution(uniform_pmf(1, 4), 0.5) == pytest.approx([0.5, 0.5])


@pytest.mark.parametrize(
    ("pmf", "message"),
    [([], "non-empty"), ([0.5, 0.6], "sum to 1"), ([-0.5, 1.5], "non-negative")],
)
def test_bad_pmf_is_refused(pmf: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_task_pmf(pmf)


def test_bad_job_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="slots"):
        task_job(0, point_pmf(2), point_pmf(2))
    with pytest.raises(ValueError, match="map_rate"):
        TaskLevelJob(2, point_pmf(2), point_pmf(2), 1.0, -1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="probability one"):
        WaveLevelJob(
            2,
            point_pmf(2),
            point_pmf(2),
            PhaseType(np.array([0.5]), np.array([[-1.0]])),
            exponential(1.0),
            (exponential(1.0),),
            (exponential(1.0),),
        )


@pytest.mark.parametrize(
    ("theta", "expected"), [(0.0, 30.0), (0.45, 20.0), (0.9, 10.0), (1.0, 10.0 - 20 / 9)]
)
def test_interpolated_setup_mean(theta: float, expected: float) -> None:
    assert interpolated_setup_mean(theta, 30.0, 10.0) == pytest.approx(expected)
    assert math.isfinite(interpolated_setup_mean(theta, 0.0, 0.0))
