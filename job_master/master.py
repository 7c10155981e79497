"""The job master process: drives one job's :class:`JobPlan` against the RM and the agents.

Started by a node agent (``python -m job_master --rm ADDR --job ID``) or in-process by
``sluice run`` (client mode).  Each round is :mod:`job_master.round`'s (the simulator's too): the
plan decides at the round's ``now``; this shell carries the decisions out (launches, stops,
speculative work), sends the round's ``AllocateCall`` as the RM's Allocate and hands the answer
back to be absorbed.  A lost RM or agent is retried with backoff; the plan's state lives here,
so an RM restart costs nothing but a pause.

On the data plane the RM names at registration, the job master publishes how each task attempt
ended on which machine (``OutcomeReporter``) and keeps a replica of the aggregator's candidate
list (``CandidateFeed``; ``JobMaster.candidates``), for placing speculative work.
"""

from __future__ import annotations

import argparse
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import grpc
import numpy as np

from job_master.candidate_feed import AggregatorResync, CandidateFeed
from job_master.outcomes import OutcomeReporter
from job_master.plan import (
    Attempt,
    AttemptKind,
    AttemptRecord,
    JobPlan,
    Launch,
    SpeculativeLaunch,
    Upgrade,
)
from job_master.round import (
    AllocateAnswer,
    AllocateCall,
    absorb,
    allocate_call,
    begin_round,
    speculative_report,
)
from job_master.round_pb import (
    answer_from_pb,
    call_to_pb,
    grant_from_pb,
    speculative_attempt_to_pb,
)
from job_master.speculation import Candidate
from plumbing.broker_tls import BrokerTls
from plumbing.data_plane import DataPlane
from plumbing.intervals import JOB_MASTER_ROUND_S
from plumbing.rpc import channel
from plumbing.tls import ClientTls, TlsError
from plumbing.wire import (
    JOB_STATE_TO_PB,
    TASK_STATE_FROM_PB,
    progress_to_pb,
    resources_to_pb,
    service_to_pb,
    spec_document_from_pb,
)
from policies.scheduling.jobspec import parse_job_spec
from policies.scheduling.lifecycle import JobState, TaskState
from policies.scheduling.progress import PhaseProgress
from sluice_pb import common_pb2 as pb
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import node_agent_pb2_grpc as agent_grpc
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc

log = logging.getLogger("sluice.jm")

RPC_TIMEOUT = 10.0
ROUND_INTERVAL = JOB_MASTER_ROUND_S
RM_PATIENCE = 300.0  # seconds without the RM before the job master gives up
# Closing the candidate feed at the end: seconds to wait for a connection under way before it is
# cancelled (and as long again for it to end), so that an MQTT broker that is down or stuck
# delays the final report by about two seconds at most.
FEED_CLOSE_S = 1.0
SPECULATIVE_POLL_S = 0.5  # how often the agents running our speculative tasks are asked
MISSING_POLLS = 3  # answers in a row without an attempt of ours before it counts as lost
MAX_RESOLVE = 1000  # node addresses asked of the RM per round (its limit)

ProgressCallback = Callable[[Sequence[PhaseProgress]], None]
R = TypeVar("R")


def _progress_to_pb(progress: Sequence[PhaseProgress]) -> list[rm_pb.PhaseProgress]:
    return [progress_to_pb(p) for p in progress]


class RMUnreachableError(Exception):
    pass


class SupersededError(Exception):
    """The RM started a newer attempt of this job's job master; this one must leave the job's
    tasks to it and exit."""


class JobMaster:
    def __init__(
        self,
        rm_address: str,
        job_id: str,
        *,
        attempt: int = 1,
        on_progress: ProgressCallback | None = None,
        stop: threading.Event | None = None,
        tls: ClientTls | None = None,
        broker_tls: BrokerTls | None = None,
    ) -> None:
        """``tls``: the cluster CA (and a certificate, for a person's client-mode job master)
        for every link it opens: to the RM, the agents and the aggregator.  ``broker_tls``: the
        same certificate's files, for the brokers' links when the data plane asks for TLS
        (without it, a TLS link is left out, and the log says so)."""
        self.job_id = job_id
        self.attempt = attempt
        self._rm_address = rm_address
        self._tls = tls
        self._broker_tls = broker_tls
        self._channel = channel(rm_address, tls)
        self._rm = rm_grpc.MasterServiceStub(self._channel)
        self._agents: dict[str, agent_grpc.AgentServiceStub] = {}
        self._agent_channels: list[grpc.Channel] = []
        self._launcher = ThreadPoolExecutor(max_workers=8, thread_name_prefix="launch")
        self._lock = threading.Lock()  # guards the plan against launch callbacks
        self._on_progress = on_progress
        self._stop = stop or threading.Event()
        self._events_after = 0
        self._last_progress: Sequence[PhaseProgress] = ()
        self._outcomes: OutcomeReporter | None = None
        self._feed: CandidateFeed | None = None
        self._resync: AggregatorResync | None = None
        # Speculative placement (ROSE): the candidates' agent addresses, as the RM resolves them.
        self._addresses: dict[str, str] = {}
        # With TLS, the RM's speculative pass for this job on each of those nodes (its agent
        # queues, lists and cancels our speculative tasks only with it).
        self._passes: dict[str, bytes] = {}
        self._passes_at: dict[str, bytes] = {}  # the same, by the agent's address (for stops)
        self._unresolved: dict[str, None] = {}
        self._rng = np.random.default_rng()
        self._polled_at = 0.0
        self._polling = threading.Event()  # set while a poll of the agents is under way
        self._missing: dict[tuple[str, int], int] = {}
        self._decided_at: dict[tuple[str, int], float] = {}

    @property
    def candidates(self) -> tuple[str, ...]:
        """The aggregator's current candidate machines for speculative work, best first as
        of the latest list received (empty without a data plane or before the first list)."""
        return self._feed.candidates() if self._feed is not None else ()

    def _join_data_plane(self, plane: DataPlane) -> None:
        self._outcomes = OutcomeReporter(self.job_id, plane, self._broker_tls)
        if plane.mqtt_url and plane.mqtt_tls and self._broker_tls is None:
            # Never in plaintext to a broker that wants TLS: without candidates the job runs
            # as before, placing no speculative work.
            log.warning(
                "MQTT broker %s is TLS but this job master has no certificate: no candidate list",
                plane.mqtt_url,
            )
        elif plane.mqtt_url:
            if plane.aggregator_address:
                self._resync = AggregatorResync(plane.aggregator_address, tls=self._tls)
            try:
                self._feed = CandidateFeed(
                    plane.mqtt_url, plane.mqtt_topic_prefix, self._resync, tls=self._broker_tls
                )
            except ValueError as error:  # TlsError: its certificate's files cannot be used
                log.warning("no candidate list: %s", error)
            else:
                self._feed.start()

    def _leave_data_plane(self, final_state: JobState | None = None) -> None:
        """Close the data-plane clients, each within a few seconds whatever the brokers do; with
        ``final_state``, publish the job's end first.  Idempotent."""
        outcomes, self._outcomes = self._outcomes, None
        if outcomes is not None:
            if final_state is not None:
                outcomes.job_ended(final_state.value)  # flushes briefly, then closes
            else:
                outcomes.close()
        feed, self._feed = self._feed, None
        if feed is not None:
            feed.close(timeout=FEED_CLOSE_S)
        resync, self._resync = self._resync, None
        if resync is not None:
            resync.close()

    # ------------------------------------------------------------------ RM calls with patience

    def _call_rm(self, what: str, call: Callable[[], R]) -> R:
        deadline = time.monotonic() + RM_PATIENCE
        backoff = 0.2
        warned = False
        while True:
            try:
                result = call()
                if warned:
                    log.info("resource manager reachable again")
                return result
            except grpc.RpcError as error:
                code = error.code() if isinstance(error, grpc.Call) else None
                if code is grpc.StatusCode.FAILED_PRECONDITION:
                    details = error.details() if isinstance(error, grpc.Call) else str(error)
                    raise SupersededError(f"{what}: {details}") from None
                if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
                if time.monotonic() > deadline:
                    raise RMUnreachableError(
                        f"{what}: resource manager unreachable for {RM_PATIENCE:.0f} s"
                    ) from error
                if not warned:
                    log.warning("%s: resource manager unreachable, retrying", what)
                    warned = True
                if self._stop.wait(backoff):
                    raise RMUnreachableError(
                        "stopped while waiting for the resource manager"
                    ) from error
                backoff = min(backoff * 2, 5.0)

    # ------------------------------------------------------------------ main loop

    def run(self) -> JobState:
        """Drive the job to its end; return the final state."""
        registration = self._call_rm(
            "register",
            lambda: self._rm.RegisterMaster(
                rm_pb.RegisterMasterRequest(job_id=self.job_id, attempt=self.attempt),
                timeout=RPC_TIMEOUT,
            ),
        )
        spec = parse_job_spec(spec_document_from_pb(registration.spec))
        plan = JobPlan(
            spec,
            spec.reservation,
            now=time.monotonic(),
            drop_ratio=registration.drop_ratio,
            drop_seed=self.job_id,
        )
        for allocation in registration.allocations:
            plan.on_granted(grant_from_pb(allocation).container())
        if registration.history:
            plan.adopt(
                (
                    _attempt(sequenced.event, sequenced.execution)
                    for sequenced in registration.history
                ),
                execution=registration.execution or 1,
            )
            self._events_after = max(sequenced.seq for sequenced in registration.history)
            log.info(
                "job %s: attempt %d adopts %d task attempts of earlier job masters",
                self.job_id,
                self.attempt,
                len(registration.history),
            )
        if registration.kill_requested:
            plan.kill("killed before the job master started")
        self._join_data_plane(DataPlane.from_pb(registration.data_plane))
        log.info(
            "job %s (%s): %d phases, %d tasks",
            self.job_id,
            spec.name,
            len(spec.phases),
            spec.total_tasks(),
        )
        try:
            while True:
                # The round's clock, read once: the plan decides at ``now``; kept containers'
                # deadlines go to the RM in its wall time.
                now = time.monotonic()
                wall_offset = time.time() - now
                with self._lock:
                    decisions = begin_round(
                        plan, now, self._speculation_candidates(plan), self._rng
                    )
                    progress = plan.progress()
                    outcome = plan.outcome
                for launch in decisions.launches:
                    self._launcher.submit(self._launch, plan, launch)
                for placement in decisions.speculative:
                    self._decided_at[(placement.task_id, placement.attempt)] = now
                    self._launcher.submit(self._enqueue, plan, placement)
                for upgrade in decisions.upgrades:
                    self._launcher.submit(self._upgrade, plan, upgrade)
                self._poll_speculative(plan, now)
                for stop in decisions.stops:  # attempts that lost to another, or were dropped
                    if stop.node_address:
                        self._launcher.submit(
                            self._stop_task,
                            stop.node_address,
                            stop.task_id,
                            stop.attempt,
                            stop.grant_token,
                        )
                if outcome is not None:
                    return self._finish(plan, outcome, progress)
                with self._lock:  # (after the end is known: _finish reports the last ones)
                    call = allocate_call(
                        plan,
                        decisions,
                        job_id=self.job_id,
                        attempt=self.attempt,
                        events_after=self._events_after,
                        resolve_nodes=self._take_unresolved(),
                        wall_offset=wall_offset,
                    )
                response = self._call_rm(
                    "allocate",
                    functools.partial(self._rm.Allocate, call_to_pb(call), timeout=RPC_TIMEOUT),
                )
                self._absorb(plan, call, answer_from_pb(response))
                self._report_progress(progress)
                if self._stop.wait(ROUND_INTERVAL):
                    with self._lock:
                        plan.kill("job master stopped")
        finally:
            # Done already when the job ended (_finish); after an error, done here.
            self._leave_data_plane()
            self._launcher.shutdown(wait=True, cancel_futures=True)
            for agent_channel in self._agent_channels:
                agent_channel.close()
            self._channel.close()

    def _absorb(self, plan: JobPlan, call: AllocateCall, answer: AllocateAnswer) -> None:
        """The RM's answer into the plan (:func:`job_master.round.absorb`), timed when it came
        (the call may have waited for the RM); the agents' addresses and passes it brought into
        the shell's address book; the task ends it brought to the aggregator."""
        self._addresses.update(answer.node_addresses)
        self._passes.update(answer.speculative_passes)
        for node_id, speculative_pass in answer.speculative_passes.items():
            address = answer.node_addresses.get(node_id)
            if address:
                self._passes_at[address] = speculative_pass
        with self._lock:
            heard = absorb(plan, call, answer, time.monotonic())
        self._events_after = heard.events_after
        if self._outcomes is not None:
            for end in heard.ended:
                self._outcomes.task_ended(
                    end.task_id, end.attempt, end.node_id, end.state, preempted=end.preempted
                )

    def _report_progress(self, progress: Sequence[PhaseProgress]) -> None:
        if self._on_progress is not None and progress != self._last_progress:
            self._on_progress(progress)
        self._last_progress = progress

    def _finish(
        self,
        plan: JobPlan,
        outcome: tuple[JobState, str],
        progress: Sequence[PhaseProgress],
    ) -> JobState:
        state, message = outcome
        with self._lock:
            live = list(plan.live_attempts())
        for attempt, container in live:  # a failed or killed job leaves nothing behind
            if container is not None:
                self._stop_task(
                    container.node_address, attempt.task_id, attempt.number, container.grant_token
                )
            elif attempt.node_address:  # a speculative one: out of its queue, or stopped
                self._stop_task(attempt.node_address, attempt.task_id, attempt.number)
        # Our own teardown comes before the report: once the RM has the final state, this
        # process is expected to end (the RM's grace, `sluice local down`'s drain), so it must
        # not be found still flushing Kafka or closing MQTT then.  Each step is bounded.
        self._leave_data_plane(state)
        # Launches not started yet are dropped; one under way ends within RPC_TIMEOUT.
        self._launcher.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            plan.speculation_ended(f"the job {state.value}")
            report = [speculative_attempt_to_pb(r) for r in speculative_report(plan)]
        self._call_rm(
            "finish",
            lambda: self._rm.FinishJob(
                rm_pb.FinishJobRequest(
                    job_id=self.job_id,
                    state=JOB_STATE_TO_PB[state],
                    message=message,
                    progress=_progress_to_pb(progress),
                    master_attempt=self.attempt,
                    speculative=report,
                ),
                timeout=RPC_TIMEOUT,
            ),
        )
        self._report_progress(progress)
        log.info("job %s %s%s", self.job_id, state.value, f": {message}" if message else "")
        return state  # run() closes its gRPC channels and returns: the process exits

    # ------------------------------------------------------------------ agents

    def _agent(self, address: str) -> agent_grpc.AgentServiceStub:
        stub = self._agents.get(address)
        if stub is None:
            agent_channel = channel(address, self._tls)
            self._agent_channels.append(agent_channel)
            stub = self._agents[address] = agent_grpc.AgentServiceStub(agent_channel)
        return stub

    def _launch(self, plan: JobPlan, launch: Launch) -> None:
        """Start one decided attempt.  A straggler copy whose task ended after the plan decided
        it (the end came with an RM answer absorbed while this launch waited) is not started."""
        if launch.kind is AttemptKind.COPY:
            with self._lock:
                if plan.withdrawn(launch):
                    log.info("copy of %s not started: the task ended meanwhile", launch.task_id)
                    return
        container = launch.container
        request = agent_pb.StartTaskRequest(
            job_id=self.job_id,
            task_id=launch.task_id,
            attempt=launch.attempt,
            allocation_id=container.allocation_id,
            command=list(launch.phase.command),
            resources=resources_to_pb(container.resources),
            grant_token=container.grant_token,
            image=launch.phase.image or "",
            env={
                "SLUICE_JOB_ID": self.job_id,
                "SLUICE_TASK_ID": launch.task_id,
                "SLUICE_ATTEMPT": str(launch.attempt),
            },
            run_on_node_lost=plan.spec.on_node_lost == "run_on",  # the agent's fencing spares it
        )
        if plan.spec.service is not None:  # the agent watches a service's tasks
            request.service.CopyFrom(service_to_pb(plan.spec.service))
        try:
            self._agent(container.node_address).StartTask(request, timeout=RPC_TIMEOUT)
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.Call) else None
            if code is grpc.StatusCode.ALREADY_EXISTS:
                return  # a retried launch that had reached the agent: it runs
            problem = error.details() if isinstance(error, grpc.Call) else str(error)
            log.warning("launching %s on %s failed: %s", launch.task_id, container.node_id, problem)
            with self._lock:
                plan.on_launch_failed(launch.task_id, launch.attempt, str(problem))

    # ------------------------------------------------------------------ speculative tasks

    def _speculation_candidates(self, plan: JobPlan) -> list[Candidate]:
        """The candidate list with agent addresses; the unknown ones are resolved by the next
        Allocate (a node seen once is known from then on)."""
        if plan.speculation is None:
            return []
        found = []
        for node_id in self.candidates:
            address = self._addresses.get(node_id)
            if address is None:
                self._unresolved[node_id] = None
            else:
                found.append(Candidate(node_id, address))
        return found

    def _take_unresolved(self) -> list[str]:
        wanted = [n for n in self._unresolved if n not in self._addresses][:MAX_RESOLVE]
        self._unresolved.clear()
        return wanted

    def _enqueue(self, plan: JobPlan, launch: SpeculativeLaunch) -> None:
        """Alg. 5 line 2: straight into the node agent's queue."""
        request = agent_pb.EnqueueSpeculativeRequest(
            task=agent_pb.StartTaskRequest(
                job_id=self.job_id,
                task_id=launch.task_id,
                attempt=launch.attempt,
                command=list(launch.phase.command),
                resources=resources_to_pb(launch.phase.resources),
                image=launch.phase.image or "",
                env={
                    "SLUICE_JOB_ID": self.job_id,
                    "SLUICE_TASK_ID": launch.task_id,
                    "SLUICE_ATTEMPT": str(launch.attempt),
                    "SLUICE_SPECULATIVE": "1",
                },
            ),
            speculative_pass=self._passes.get(launch.node_id, b""),
        )
        try:
            answer = self._agent(launch.node_address).EnqueueSpeculative(
                request, timeout=RPC_TIMEOUT
            )
        except grpc.RpcError as error:
            problem = error.details() if isinstance(error, grpc.Call) else str(error)
            log.warning("speculative %s to %s failed: %s", launch.task_id, launch.node_id, problem)
            with self._lock:
                plan.on_speculative_answer(launch.task_id, launch.attempt, accepted=False)
            return
        decided = self._decided_at.pop((launch.task_id, launch.attempt), None)
        if not answer.accepted:
            log.info(
                "speculative %s refused by %s: %s", launch.task_id, launch.node_id, answer.reason
            )
        elif answer.task.state == pb.TASK_RUNNING and decided is not None:
            log.info(
                "speculative %s attempt %d running on %s %.0f ms after the decision",
                launch.task_id,
                launch.attempt,
                launch.node_id,
                (time.monotonic() - decided) * 1000,
            )
        else:
            log.info(
                "speculative %s attempt %d queued on %s (%d in its queue)",
                launch.task_id,
                launch.attempt,
                launch.node_id,
                answer.queue_length,
            )
        with self._lock:
            plan.on_speculative_answer(launch.task_id, launch.attempt, answer.accepted)
            if answer.accepted and answer.HasField("task"):
                self._apply_status(plan, launch.node_id, answer.task)

    def _upgrade(self, plan: JobPlan, upgrade: Upgrade) -> None:
        """Alg. 5 line 11: the agent makes the running speculative task the container's."""
        container = upgrade.container
        try:
            self._agent(container.node_address).UpgradeSpeculative(
                agent_pb.UpgradeSpeculativeRequest(
                    task=agent_pb.TaskRef(
                        job_id=self.job_id, task_id=upgrade.task_id, attempt=upgrade.attempt
                    ),
                    allocation_id=container.allocation_id,
                    resources=resources_to_pb(container.resources),
                    grant_token=container.grant_token,
                ),
                timeout=RPC_TIMEOUT,
            )
        except grpc.RpcError as error:
            problem = error.details() if isinstance(error, grpc.Call) else str(error)
            log.warning("upgrading speculative %s failed: %s", upgrade.task_id, problem)
            with self._lock:
                plan.on_upgrade_failed(upgrade.task_id, upgrade.attempt, str(problem))
            return
        log.info(
            "speculative %s attempt %d upgraded in place on %s (allocation %s)",
            upgrade.task_id,
            upgrade.attempt,
            container.node_id,
            container.allocation_id,
        )

    def _poll_speculative(self, plan: JobPlan, now: float) -> None:
        """Ask the agents holding our speculative tasks how they are, at most every
        :data:`SPECULATIVE_POLL_S` (``now``: the round's clock), one poll at a time, off the
        round's thread."""
        if now - self._polled_at < SPECULATIVE_POLL_S or self._polling.is_set():
            return
        with self._lock:
            attempts = plan.speculative_attempts()
        if not attempts:
            return
        self._polled_at = now
        self._polling.set()
        self._launcher.submit(self._poll, plan, attempts)

    def _poll(self, plan: JobPlan, attempts: Sequence[Attempt]) -> None:
        try:
            by_node: dict[tuple[str, str], list[Attempt]] = {}
            for attempt in attempts:
                by_node.setdefault((attempt.node_id, attempt.node_address), []).append(attempt)
            for (node_id, address), mine in by_node.items():
                try:
                    answer = self._agent(address).ListSpeculative(
                        agent_pb.ListSpeculativeRequest(
                            job_id=self.job_id, speculative_pass=self._passes.get(node_id, b"")
                        ),
                        timeout=RPC_TIMEOUT,
                    )
                except grpc.RpcError as error:
                    log.info("asking %s for our speculative tasks: %s", node_id, error.code())
                    continue
                listed = {(t.task.task_id, t.task.attempt): t for t in answer.tasks}
                with self._lock:
                    for status in answer.tasks:
                        self._apply_status(plan, node_id, status)
                    for attempt in mine:
                        key = (attempt.task_id, attempt.number)
                        if key in listed or (attempt.queued_at is None and not attempt.running):
                            self._missing.pop(key, None)
                            continue
                        count = self._missing.get(key, 0) + 1
                        if count < MISSING_POLLS:
                            self._missing[key] = count
                            continue
                        self._missing.pop(key, None)
                        plan.on_speculative_status(
                            attempt.task_id,
                            attempt.number,
                            TaskState.LOST,
                            message=f"{node_id} no longer knows it",
                        )
        finally:
            self._polling.clear()

    def _apply_status(self, plan: JobPlan, node_id: str, status: agent_pb.SpeculativeTask) -> None:
        """One speculative task as its agent sees it, into the plan (under the lock); its end
        goes to the aggregator's machine rating (an eviction as such)."""
        state = TASK_STATE_FROM_PB.get(status.state)
        if state is None:
            return
        task_id, number = status.task.task_id, status.task.attempt
        live = state.is_final and plan.is_speculative(task_id, number)
        plan.on_speculative_status(
            task_id, number, state, evicted=status.evicted, message=status.message
        )
        if live and self._outcomes is not None and not status.upgraded:
            self._outcomes.task_ended(task_id, number, node_id, state, preempted=status.evicted)
            if status.evicted:
                log.info(
                    "speculative %s attempt %d evicted on %s: %s",
                    task_id,
                    number,
                    node_id,
                    status.message,
                )

    def _stop_task(
        self, node_address: str, task_id: str, attempt: int, grant_token: bytes = b""
    ) -> None:
        """Stop an attempt, with its container's grant token (none: a speculative one) and the
        node's speculative pass: a client-mode job master needs one or the other (with TLS)."""
        speculative_pass = b"" if grant_token else self._passes_at.get(node_address, b"")
        try:
            self._agent(node_address).StopTask(
                agent_pb.TaskRef(
                    job_id=self.job_id,
                    task_id=task_id,
                    attempt=attempt,
                    grant_token=grant_token,
                    speculative_pass=speculative_pass,
                ),
                timeout=RPC_TIMEOUT,
            )
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:  # never started (a withdrawn copy)
                log.debug("%s attempt %d is not on its node: nothing to stop", task_id, attempt)
                return
            log.warning("stopping %s failed (the RM will stop it): %s", task_id, error)


def _attempt(event: pb.TaskEvent, execution: int) -> AttemptRecord:
    return AttemptRecord(
        task_id=event.task_id,
        attempt=event.attempt,
        # An unknown state (a newer RM) reads as still running: the attempt is not counted as
        # failed, and its later events settle it.
        state=TASK_STATE_FROM_PB.get(event.state, TaskState.RUNNING),
        allocation_id=event.allocation_id,
        message=event.message,
        execution=execution or 1,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="job_master", description="Sluice job master")
    parser.add_argument("--rm", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--attempt", type=int, default=1, help="the job master attempt (1, 2...)")
    # The agent that launches it says which: a TLS directory of its own, or none at all.
    transport = parser.add_mutually_exclusive_group(required=True)
    transport.add_argument(
        "--tls-dir", type=Path, help="TLS directory for every link (to the RM, agents, aggregator)"
    )
    transport.add_argument("--insecure", action="store_true", help="no TLS (an insecure cluster)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # kafka-python logs each failed connection attempt at ERROR; the outbox tells each outage.
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    try:
        tls = ClientTls.load(args.tls_dir) if args.tls_dir is not None else None
        broker_tls = BrokerTls.of_dir(args.tls_dir) if args.tls_dir is not None else None
    except TlsError as error:
        log.error("%s", error)
        return 2
    try:
        master = JobMaster(args.rm, args.job, attempt=args.attempt, tls=tls, broker_tls=broker_tls)
        state = master.run()
    except RMUnreachableError as error:
        log.error("%s", error)
        return 3
    except SupersededError as error:
        log.warning("%s: leaving the job's tasks to the newer attempt", error)
        return 4
    return 0 if state is JobState.SUCCEEDED else 1
