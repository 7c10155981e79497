"""AggregatorState: decoding what arrives on Kafka (real serialized protobufs), counting what is
bad instead of raising, ratings from outcome events, forgetting silent machines."""

from __future__ import annotations

import pytest

from aggregator.kafka_reader import Record
from aggregator.state import AggregatorState, Settings
from policies.oversubscription.candidates import compute_candidates
from policies.oversubscription.config import OversubscriptionConfig
from policies.oversubscription.machine_filter import FilterPhase
from sluice_pb import metrics_pb2 as mpb

METRICS, OUTCOMES = "test.metrics", "test.outcomes"
T0 = 1_700_000_000.0
START = T0 - 10


def state(*, forget_after: float = 60.0, stale_after: float = 30.0) -> AggregatorState:
    settings = Settings(
        metrics_topic=METRICS,
        outcomes_topic=OUTCOMES,
        window=5,
        stale_after=stale_after,
        forget_after=forget_after,
        config=OversubscriptionConfig(candidate_limit=10),
        ranking=compute_candidates,
        ranking_name="rose",
    )
    return AggregatorState(settings, start_time=START)


def node_metrics(node: str = "n1", t: float = T0, **fields: object) -> mpb.NodeMetrics:
    values: dict[str, object] = {
        "schema_version": 1,
        "node_id": node,
        "timestamp": t,
        "interval_s": 1.0,
        "cpu_capacity": 4.0,
        "cpu_utilization": 0.25,
    }
    values.update(fields)
    return mpb.NodeMetrics(**values)  # type: ignore[arg-type]


def metrics_record(node: str = "n1", t: float = T0, **fields: object) -> Record:
    message = node_metrics(node, t, **fields)
    return Record(METRICS, message.node_id.encode(), message.SerializeToString())


def task_record(
    job: str, node: str, kind: int = mpb.TASK_OUTCOME_FAILED, *, version: int = 1
) -> Record:
    event = mpb.OutcomeEvent(
        schema_version=version,
        job_id=job,
        timestamp=T0,
        task=mpb.TaskOutcome(task_id="t", attempt=1, node_id=node, kind=kind),  # type: ignore[arg-type]
    )
    return Record(OUTCOMES, job.encode(), event.SerializeToString())


def ended_record(job: str) -> Record:
    event = mpb.OutcomeEvent(
        schema_version=1, job_id=job, timestamp=T0, job_ended=mpb.JobEnded(final_state="done")
    )
    return Record(OUTCOMES, job.encode(), event.SerializeToString())


def test_new_metric_samples_are_returned_and_kept() -> None:
    s = state()
    accepted = s.ingest([metrics_record("n1", T0), metrics_record("n2", T0)], now=T0)
    assert [(a.node_id, a.timestamp) for a in accepted] == [("n1", T0), ("n2", T0)]
    assert accepted[0].load[0] == 0.25
    assert (s.counters.samples, s.counters.duplicates, s.counters.malformed) == (2, 0, 0)
    assert s.window_length("n1") == 1
    newest = s.newest_sample("n1")
    assert newest is not None and newest.cpu_utilization == 0.25


@pytest.mark.parametrize(
    ("second_at", "accepted"), [(T0, False), (T0 - 1, False), (T0 + 0.0004, False), (T0 + 1, True)]
)
def test_a_sample_not_newer_than_the_last_is_a_duplicate(second_at: float, accepted: bool) -> None:
    s = state()
    s.ingest([metrics_record("n1", T0, cpu_utilization=0.1)], now=T0)
    new = s.ingest([metrics_record("n1", second_at, cpu_utilization=0.9)], now=T0)
    assert len(new) == int(accepted)
    assert (s.counters.samples, s.counters.duplicates) == (1 + accepted, 1 - accepted)
    newest = s.newest_sample("n1")
    assert newest is not None
    # A duplicate must not replace the newest sample the CLI shows.
    assert newest.cpu_utilization == (0.9 if accepted else 0.1)


def test_the_newest_sample_is_kept_without_its_tasks() -> None:
    s = state()
    message = node_metrics("n1", T0, dropped_samples=7, cpi=1.5)
    message.tasks.add(task_key="j/t/1", job_id="j", task_id="t", cpu_cores=0.5)
    s.ingest([Record(METRICS, b"n1", message.SerializeToString())], now=T0)
    newest = s.newest_sample("n1")
    assert newest is not None
    assert len(newest.tasks) == 0
    del message.tasks[:]
    assert newest == message


@pytest.mark.parametrize(
    "value",
    [
        b"\xff",  # not a protobuf
        b"\x12\x05ab",  # node_id announces 5 bytes, holds 2
        node_metrics(schema_version=2).SerializeToString(),
        node_metrics(schema_version=0).SerializeToString(),
        node_metrics(node="").SerializeToString(),
        node_metrics(cpu_utilization=-0.5).SerializeToString(),
        node_metrics(cpu_utilization=float("nan")).SerializeToString(),
    ],
    ids=["garbage", "truncated", "schema 2", "schema 0", "empty node id", "negative", "nan"],
)
def test_a_malformed_metric_message_is_counted_not_raised(value: bytes) -> None:
    s = state()
    accepted = s.ingest([Record(METRICS, b"k", value), metrics_record("ok", T0)], now=T0)
    # The bad message is skipped; the good one after it still gets in.
    assert [a.node_id for a in accepted] == ["ok"]
    assert (s.counters.malformed, s.counters.samples) == (1, 1)
    assert s.newest_sample("") is None


def outcome_event(**fields: object) -> bytes:
    values: dict[str, object] = {"schema_version": 1, "job_id": "j", "timestamp": T0}
    values.update(fields)
    return mpb.OutcomeEvent(**values).SerializeToString()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [
        b"\xff",
        outcome_event(schema_version=2, job_ended=mpb.JobEnded()),
        outcome_event(job_id="", job_ended=mpb.JobEnded()),
        outcome_event(),  # neither a task nor job_ended
        outcome_event(task=mpb.TaskOutcome(node_id="n1")),  # TASK_OUTCOME_UNSPECIFIED
        outcome_event(task=mpb.TaskOutcome(node_id="", kind=mpb.TASK_OUTCOME_FAILED)),
    ],
    ids=["garbage", "schema 2", "empty job id", "no event", "unspecified kind", "no node id"],
)
def test_a_malformed_outcome_event_is_counted_not_raised(value: bytes) -> None:
    s = state()
    s.ingest([Record(OUTCOMES, b"j", value), task_record("j2", "n1")], now=T0)
    assert (s.counters.malformed, s.counters.outcomes) == (1, 1)


def test_records_of_other_topics_are_ignored() -> None:
    s = state()
    good = metrics_record()
    assert s.ingest([Record("elsewhere", b"", good.value)], now=T0) == []
    assert (s.counters.samples, s.counters.malformed, s.counters.outcomes) == (0, 0, 0)


@pytest.mark.parametrize(
    ("kind", "penalty"),
    [
        (mpb.TASK_OUTCOME_FINISHED, 0.0),
        (mpb.TASK_OUTCOME_FAILED, -2.0),
        (mpb.TASK_OUTCOME_KILLED, -2.0),
        (mpb.TASK_OUTCOME_EVICTED, -2.0),
        (mpb.TASK_OUTCOME_STRAGGLER, -2.0),
    ],
)
def test_outcomes_rate_the_machine_once_the_job_ended(kind: int, penalty: float) -> None:
    s = state()
    s.ingest([metrics_record("n1", T0), metrics_record("n2", T0)], now=T0)
    s.ingest([task_record("j", "n1", kind), task_record("j", "n1", kind)], now=T0)
    s.run_round(T0 + 1)
    assert s.score("n1") == 0.0  # the job has not ended yet
    s.ingest([ended_record("j")], now=T0 + 1)
    assert s.counters.outcomes == 3
    s.ingest([metrics_record("n1", T0 + 2), metrics_record("n2", T0 + 2)], now=T0 + 2)
    latest = s.run_round(T0 + 2)
    assert (s.score("n1"), s.score("n2")) == (penalty, 0.0)
    # ROSE's B1 blacklists a penalised machine.
    phase = FilterPhase(int(latest.result.phase[latest.machines.names.index("n1")]))
    assert phase is (FilterPhase.LOW_RATING if penalty else FilterPhase.CANDIDATE)
    assert latest.ranked == (("n2",) if penalty else ("n1", "n2"))


def test_a_silent_machine_is_forgotten_and_the_machine_list_moves_on() -> None:
    s = state(forget_after=60.0)
    s.ingest([metrics_record("quiet", T0), metrics_record("busy", T0)], now=T0)
    first = s.run_round(T0)
    assert set(first.machines.names) == {"quiet", "busy"}
    s.ingest([metrics_record("busy", T0 + 60)], now=T0 + 60)
    kept = s.run_round(T0 + 60)  # silent for exactly forget_after: still known
    assert kept.machines is first.machines
    s.ingest([metrics_record("busy", T0 + 61)], now=T0 + 61)
    later = s.run_round(T0 + 61)
    assert later.machines.names == ("busy",)
    assert later.machines.version == first.machines.version + 1
    assert later.candidate_version == first.candidate_version + 2
    assert s.newest_sample("quiet") is None
    assert s.window_length("quiet") == 0
    assert s.latest is later


def test_rounds_build_on_the_start_time_versions() -> None:
    s = state()
    assert s.latest is None
    s.ingest([metrics_record("n1", T0)], now=T0)
    first = s.run_round(T0)
    assert first.machines.version == int(START * 1000) + 1
    assert first.candidate_version == int(START * 1000) + 1


def test_refill_counts_only_new_samples() -> None:
    s = state()
    accepted = s.ingest([metrics_record("n1", T0)], now=T0)
    again = s.ingest([metrics_record("n1", T0 + 1)], now=T0 + 1)
    assert s.refill([*accepted, *again]) == 0  # both already in the window
    other = state()
    assert other.refill([*accepted, *again]) == 2
    assert other.window_length("n1") == 2
