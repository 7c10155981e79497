"""The job master's report of how its tasks ended on which machine, for the aggregator's machine
rating (ROSE Alg. 3): one ``OutcomeEvent`` per finished task attempt on the outcomes topic, and a
final ``job_ended`` event, all keyed by job id so they stay in order on one partition.

Publishing never holds up a running job: messages go through a bounded ``KafkaOutbox``, which
keeps each until the broker acknowledged it and sends it again after an outage or a broker
restart.  At the end the job master waits, ``FLUSH_AT_END_S`` at most, for what is buffered to
be delivered, also while Kafka is unreachable (the outbox then retries every fraction of a
second, so a broker that comes back within the wait gets everything); whatever is still buffered
then is counted in one warning line.  Only then does it report the job's final state to the RM,
so a Kafka outage delays that report by the wait, and nothing else does.

A Kafka over TLS (``--kafka-tls``) is published to with the job master's own certificate; a job
master without one says so and publishes nothing, rather than in plaintext.
"""

from __future__ import annotations

import logging
import time

from plumbing.broker_tls import BrokerTls
from plumbing.data_plane import DataPlane
from plumbing.kafka_outbox import KafkaOutbox, kafka_producer
from policies.scheduling.lifecycle import TaskState
from sluice_pb import metrics_pb2 as mpb

log = logging.getLogger("sluice.jm.outcomes")

SCHEMA_VERSION = 1
OUTCOME_OF_STATE = {
    TaskState.SUCCEEDED: mpb.TASK_OUTCOME_FINISHED,
    TaskState.FAILED: mpb.TASK_OUTCOME_FAILED,
    TaskState.KILLED: mpb.TASK_OUTCOME_KILLED,
    TaskState.LOST: mpb.TASK_OUTCOME_LOST,
}
FLUSH_AT_END_S = 10.0  # a restarting broker is back within seconds; one that is not delays the end
CLOSE_S = 1.0  # for the sender thread, then as long for the producer


def task_outcome_event(
    job_id: str,
    task_id: str,
    attempt: int,
    node_id: str,
    state: TaskState,
    now: float,
    *,
    preempted: bool = False,
) -> mpb.OutcomeEvent | None:
    """The event for a task attempt that reached ``state`` (None unless the state is final).
    A kill the scheduler chose (``preempted``) is ``evicted``: the machine did nothing wrong,
    and ROSE's rating counts evictions apart from kills."""
    kind = OUTCOME_OF_STATE.get(state)
    if preempted and state is TaskState.KILLED:
        kind = mpb.TASK_OUTCOME_EVICTED
    if kind is None or not node_id:
        return None
    return mpb.OutcomeEvent(
        schema_version=SCHEMA_VERSION,
        job_id=job_id,
        timestamp=now,
        task=mpb.TaskOutcome(task_id=task_id, attempt=attempt, node_id=node_id, kind=kind),
    )


def job_ended_event(job_id: str, final_state: str, now: float) -> mpb.OutcomeEvent:
    return mpb.OutcomeEvent(
        schema_version=SCHEMA_VERSION,
        job_id=job_id,
        timestamp=now,
        job_ended=mpb.JobEnded(final_state=final_state),
    )


class OutcomeReporter:
    """Publishes a job's task outcomes; a no-op without Kafka in the data plane, and without a
    certificate (``tls``) when its Kafka is TLS."""

    def __init__(self, job_id: str, plane: DataPlane, tls: BrokerTls | None = None) -> None:
        self.job_id = job_id
        self._outbox: KafkaOutbox | None = None
        if plane.has_kafka and plane.kafka_tls and tls is None:
            log.warning(
                "Kafka at %s is TLS (--kafka-tls) but this job master has no certificate: its "
                "task outcomes are not published",
                plane.kafka_bootstrap,
            )
        elif plane.has_kafka:
            broker_tls = tls if plane.kafka_tls else None
            self._outbox = KafkaOutbox(
                plane.kafka_bootstrap,
                plane.outcomes_topic,
                capacity=10_000,
                producer_factory=lambda bootstrap: kafka_producer(
                    bootstrap, "sluice-jm", broker_tls
                ),
                log=log,
                what="task outcomes",
                tls=broker_tls,
            )
            self._outbox.start()

    def task_ended(
        self, task_id: str, attempt: int, node_id: str, state: TaskState, *, preempted: bool = False
    ) -> None:
        event = task_outcome_event(
            self.job_id, task_id, attempt, node_id, state, time.time(), preempted=preempted
        )
        if event is not None and self._outbox is not None:
            self._outbox.offer(self.job_id, event.SerializeToString())

    def job_ended(self, final_state: str) -> None:
        """Send the end marker and wait up to ``FLUSH_AT_END_S`` for everything buffered to be
        delivered (hurrying a sender that waits out an outage's backoff), then stop; say in one
        line how many were not."""
        if self._outbox is None:
            return
        self._outbox.offer(
            self.job_id, job_ended_event(self.job_id, final_state, time.time()).SerializeToString()
        )
        if not self._outbox.flush(FLUSH_AT_END_S):
            log.warning(
                "%d task outcomes (with the job's end) not delivered to Kafka at %s within %g s; "
                "the machine rating misses them",
                self._outbox.pending,
                self._outbox.bootstrap,
                FLUSH_AT_END_S,
            )
        self.close()

    def close(self) -> None:
        """Stop the outbox: about two seconds at most, whatever Kafka does."""
        if self._outbox is not None:
            self._outbox.close(timeout=CLOSE_S)
            self._outbox = None
