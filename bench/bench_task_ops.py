"""Benchmark of task operations through the node agent's runtimes (node_agent/runtime/).

Run: .venv/bin/python bench/bench_task_ops.py [--runtime process|docker|both] [--repeats N]
     [--launch-repeats N] [--poll-ms MS] [--workload busy|sleep] [--json]

Needs root (the process runtime creates cgroups; it exits 2 if it cannot) and, for ``docker``,
a running Docker Engine (if there is none, a one-line note says so and the process runtime is
still measured).  Prints, per runtime, with the machine's core count and the runtime's
``describe()``, the median (p50), the 99th percentile (nearest rank: with fewer than 100
samples it is the maximum) and the number of samples of:

* suspend -- from the call until it returns, i.e. until the task is frozen (the contract of
  ``TaskRuntime.suspend``), on a running task (by default a busy loop limited to 0.5 core);
  target <= 5 ms for the process runtime, <= 50 ms for docker;
* resume -- likewise until the task runs again; same targets;
* resize -- changing the live task's CPU quota and memory limit (alternating two sizes);
* launch -- from the decision (the call to ``start``) until ``start`` returns, until
  ``observe()`` reports the task RUNNING (polled every ``--poll-ms`` after ``start`` returned,
  since the runtime serialises its calls), and until the task's first output line shows in
  ``logs()`` (its own code runs);
* stop (SIGTERM, the task exits at once) and cleanup (releasing its cgroup or container);
* launch via agent -- the path a job master takes (``job_master/master.py`` ``_launch``): a
  ``StartTask`` gRPC call to the node agent's ``AgentService``, served by the real
  ``AgentServicer`` over a ``NodeAgent`` on the same runtime, in this process, on a gRPC server
  bound to 127.0.0.1 (port chosen by the system).  From the moment before the request is sent
  (the job master's decision) until the call returns (the agent has started the task), and
  until the agent's monitor pass observes the task RUNNING and queues the RUNNING event it
  reports to the resource manager: that is how the RM learns it.  The StartTask answer, like
  ``ListTasks``, says RUNNING already, because the agent records a task it started as running
  until its next pass; so the pass itself is run here every ``--poll-ms`` after the call
  returned.  The agent's monitor thread runs one every 0.2 s (``MONITOR_INTERVAL_S``), so the
  RM hears of the task at the next pass, up to 0.2 s later, plus one ``ReportTaskEvents`` call;
  that delay is not counted.  After the RUNNING event, ``ListTasks`` over gRPC (what a job
  master or the CLI sees) is asked (untimed) whether it shows the task RUNNING; the number of
  disagreements is printed.  The task is launch's, with the job master's request (its env, the
  same limits; the agent also pins it to a CPU set it chooses, as in a cluster).  Each has its
  own task and allocation ids and, like those of launch, is stopped, cleaned up and forgotten
  through the runtime, untimed; one warm-up call (it also connects the client) is not sampled.
  With ``--json``: ``launch_agent_start`` and ``launch_agent_running``.

After every suspend and resume, ``observe()`` is asked (untimed) whether it agrees; the number
of disagreements is printed.  A suspend, resume or resize the runtime reports as failed (e.g.
Docker's "OCI runtime pause failed: unable to freeze") is counted and shown, not sampled.  One
warm-up launch and one warm-up round of suspend/resume and of resize per runtime are not
sampled (the docker runtime builds or checks its task image on its first start).

Everything runs under a scope of its own, cluster ``bench<pid>`` and node ``node``, so it never
sees or touches another cluster's tasks, cgroups or containers; every task, cgroup, container
and the temporary state directory are removed at the end, also on Ctrl-C, SIGTERM or error (the
agent's gRPC server is stopped first, after its calls in flight have returned).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc

from node_agent.agent import AgentConfig, NodeAgent, task_key
from node_agent.runtime import make_runtime
from node_agent.runtime.base import (
    ResourceLimits,
    RunObservation,
    RunState,
    RuntimeError_,
    RuntimeUnavailableError,
    TaskLaunch,
    TaskRuntime,
    scope_name,
)
from node_agent.runtime.task_state import encode_name
from node_agent.service import AgentServicer
from plumbing.intervals import MONITOR_INTERVAL_S
from plumbing.rpc import channel, start_server
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources
from sluice_pb import common_pb2 as pb
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import node_agent_pb2_grpc as agent_grpc

NODE_ID = "node"
CGROUP_ROOT = Path("/sys/fs/cgroup")
TARGETS_MS = {"process": 5.0, "docker": 50.0}
"""Suspend and resume targets per runtime."""
WORKLOADS = {
    "busy": "while :; do :; done",
    "sleep": "exec sleep 3600",
}
MARKER = "sluice-bench-ready"
LAUNCH_SCRIPT = f"echo {MARKER}; exec sleep 3600"
SMALL = ResourceLimits(cpu=0.25, memory_mb=96)
LARGE = ResourceLimits(cpu=0.5, memory_mb=64)
GAP_S = 0.01
"""Pause between operations, so a resumed task runs before it is frozen again."""
STOP_GRACE_S = 5.0
WAIT_S = 60.0
"""Only turns a hang into an error; a condition that comes true is never late."""
RPC_TIMEOUT_S = 30.0
"""Of one gRPC call to the agent (a docker start may take a while on a loaded machine)."""
AGENT_JOB = "bench"
LABEL_WIDTH = 37
EXIT_CANNOT_RUN = 2
EXIT_INTERRUPTED = 130


class CannotRunError(Exception):
    """The benchmark cannot run here (the process runtime cannot create cgroups)."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM, turned into an exception so that every ``finally`` cleans up."""


# --- figures --------------------------------------------------------------------------------


def p99(samples: list[float]) -> float:
    """Nearest-rank 99th percentile (the maximum below 100 samples)."""
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(0.99 * len(ordered))) - 1]


@dataclass
class Figure:
    """Samples of one operation, in milliseconds, and the attempts that failed (not sampled)."""

    what: str
    samples: list[float] = field(default_factory=list)
    target_ms: float | None = None
    failures: int = 0
    first_error: str | None = None

    def add(self, seconds: float) -> None:
        self.samples.append(seconds * 1e3)

    def fail(self, error: Exception) -> None:
        self.failures += 1
        self.first_error = self.first_error or str(error)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"what": self.what, "samples": len(self.samples)}
        p50 = statistics.median(self.samples) if self.samples else None
        high = p99(self.samples) if self.samples else None
        out |= {
            "p50_ms": None if p50 is None else round(p50, 3),
            "p99_ms": None if high is None else round(high, 3),
            "failures": self.failures,
        }
        if self.first_error is not None:
            out["first_error"] = self.first_error
        if self.target_ms is not None:
            out |= {
                "target_ms": self.target_ms,
                "target_met": p50 is not None and p50 <= self.target_ms,
                "p99_within_target": high is not None and high <= self.target_ms,
            }
        return out

    def line(self, label: str) -> str:
        s = self.summary()
        text = f"  {label:<{LABEL_WIDTH}} "
        if self.samples:
            text += f"p50 {s['p50_ms']:8.2f} ms, p99 {s['p99_ms']:8.2f} ms, n={s['samples']}"
        else:
            text += "no sample"
        if self.target_ms is not None:
            verdict = "MET" if s["target_met"] else "NOT MET"
            tail = "p99 too" if s["p99_within_target"] else "p99 above it"
            text += f"  (target <= {self.target_ms:g} ms: {verdict} at p50; {tail})"
        if self.failures:
            text += (
                f"\n  {'':<{LABEL_WIDTH}} FAILED {self.failures} time(s), first: {self.first_error}"
            )
        return text


@dataclass
class Report:
    """What one runtime measured; printed line by line unless ``--json``."""

    quiet: bool
    figures: dict[str, Figure] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, flush=True)

    def figure(self, key: str, label: str, figure: Figure) -> None:
        self.figures[key] = figure
        self.say(figure.line(label))


# --- helpers --------------------------------------------------------------------------------


def task(key: str, script: str, limits: ResourceLimits) -> TaskLaunch:
    return TaskLaunch(
        task_key=key,
        job_id="bench",
        task_id=key,
        attempt=1,
        allocation_id="bench",
        argv=("sh", "-c", script),
        limits=limits,
    )


def observed(runtime: TaskRuntime, key: str) -> RunObservation:
    return next(o for o in runtime.observe() if o.task_key == key)


def poll_until(condition: Callable[[], bool], poll_s: float, what: str) -> tuple[float, int]:
    """Check ``condition`` every ``poll_s`` until it holds; (``perf_counter`` when it was seen
    to hold, number of checks)."""
    deadline = time.monotonic() + WAIT_S
    checks = 0
    while True:
        checks += 1
        if condition():
            return time.perf_counter(), checks
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {WAIT_S:g} s")
        time.sleep(poll_s)


def running(runtime: TaskRuntime, key: str) -> bool:
    state = observed(runtime, key).state
    if state is RunState.EXITED:
        output = runtime.logs(key).decode(errors="replace").strip()
        raise RuntimeError(f"task {key!r} exited unexpectedly: {output[-300:] or 'no output'}")
    return state is RunState.RUNNING


def has_output(runtime: TaskRuntime, key: str) -> bool:
    return MARKER.encode() in runtime.logs(key)


SIGNALS = (signal.SIGINT, signal.SIGTERM)


def timed(action: Callable[[], object]) -> tuple[float, float]:
    """``perf_counter`` before and after ``action`` (one runtime call).

    Ctrl-C and SIGTERM are held back until the call has returned (or failed on its own): a
    signal in the middle of, say, a cgroup freeze would leave the task half frozen, and then
    neither stop nor purge could end it.  Every runtime call has its own time limit.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        t0 = time.perf_counter()
        action()
        return t0, time.perf_counter()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """Let cleanup finish: a second Ctrl-C must not leave half-removed cgroups behind."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Interrupted


# --- measurements ---------------------------------------------------------------------------


def bench_task_controls(
    runtime: TaskRuntime, kind: str, repeats: int, workload: str, report: Report
) -> None:
    """Suspend, resume and resize one running task."""
    key = "ops"
    timed(partial(runtime.start, task(key, WORKLOADS[workload], LARGE)))
    poll_until(partial(running, runtime, key), 0.001, "the task to run")
    bench_suspend_resume(runtime, key, TARGETS_MS[kind], repeats, workload, report)
    bench_resize(runtime, key, repeats, report)
    timed(partial(runtime.stop, key, grace_seconds=0.5))
    timed(partial(runtime.forget, key))


def bench_suspend_resume(
    runtime: TaskRuntime, key: str, target: float, repeats: int, workload: str, report: Report
) -> None:
    what = f"{workload} task, {LARGE.cpu:g} core"
    suspend = Figure(f"suspend() call until it returns (task frozen); {what}", target_ms=target)
    resume = Figure(f"resume() call until it returns (task running); {what}", target_ms=target)
    disagreements = {"suspend": 0, "resume": 0}
    for i in range(repeats + 1):  # the first round warms up
        time.sleep(GAP_S)
        try:
            t0, t1 = timed(partial(runtime.suspend, key))
        except RuntimeError_ as e:  # counted, not sampled; the task is left running
            suspend.fail(e)
            timed(partial(runtime.resume, key))  # in case it stayed paused after all
            continue
        if observed(runtime, key).state is not RunState.SUSPENDED:
            disagreements["suspend"] += 1
        time.sleep(GAP_S)
        try:
            t2, t3 = timed(partial(runtime.resume, key))
        except RuntimeError_ as e:
            resume.fail(e)
            timed(partial(runtime.resume, key))  # a task left frozen would spoil what follows
            continue
        if observed(runtime, key).state is not RunState.RUNNING:
            disagreements["resume"] += 1
        if i:
            suspend.add(t1 - t0)
            resume.add(t3 - t2)
    report.figure("suspend", f"suspend ({workload}):", suspend)
    report.figure("resume", f"resume ({workload}):", resume)

    burns_again: bool | None = None
    if workload == "busy":  # untimed: the resumed task really runs (burns CPU) again
        before = runtime.usage(key).cpu_seconds
        try:
            poll_until(lambda: runtime.usage(key).cpu_seconds - before > 0.02, 0.01, "CPU")
            burns_again = True
        except RuntimeError:
            burns_again = False
    report.notes["observe_disagreed"] = disagreements
    report.notes["burns_cpu_after_resume"] = burns_again
    text = "  contract: observe() " + (
        "agreed" if not any(disagreements.values()) else f"DISAGREED {disagreements}"
    )
    text += " after every suspend (SUSPENDED) and resume (RUNNING)"
    if burns_again is not None:
        text += f"; the task {'burnt' if burns_again else 'did NOT burn'} CPU after the last resume"
    report.say(text)


def bench_resize(runtime: TaskRuntime, key: str, repeats: int, report: Report) -> None:
    resize = Figure(
        f"resize() call until it returns, alternating {SMALL.cpu:g} core/{SMALL.memory_mb} MiB "
        f"and {LARGE.cpu:g} core/{LARGE.memory_mb} MiB"
    )
    for i in range(repeats + 1):
        time.sleep(GAP_S)
        try:
            t0, t1 = timed(partial(runtime.resize, key, SMALL if i % 2 == 0 else LARGE))
        except RuntimeError_ as e:
            resize.fail(e)
            continue
        if i:
            resize.add(t1 - t0)
    report.figure("resize", "resize:", resize)


def bench_launch(runtime: TaskRuntime, repeats: int, poll_s: float, report: Report) -> None:
    poll = f"polled every {poll_s * 1e3:g} ms"
    start = Figure("start() call until it returns")
    running_fig = Figure(f"start() call until observe() reports RUNNING ({poll})")
    output = Figure(f"start() call until the task's first output line is in logs() ({poll})")
    stop = Figure(f"stop(grace {STOP_GRACE_S:g} s) of a task that exits on SIGTERM")
    cleanup = Figure("cleanup() of the exited task (its cgroup or container released)")
    at_first_poll = 0
    for i in range(repeats + 1):  # the first launch warms up (docker: builds or checks the image)
        key = f"launch-{i}"
        t0, t1 = timed(partial(runtime.start, task(key, LAUNCH_SCRIPT, LARGE)))
        t2, checks = poll_until(partial(running, runtime, key), poll_s, "observe() RUNNING")
        t3, _ = poll_until(partial(has_output, runtime, key), poll_s, "the task's output")
        t4, t5 = timed(partial(runtime.stop, key, grace_seconds=STOP_GRACE_S))
        _, t6 = timed(partial(runtime.cleanup, key))
        timed(partial(runtime.forget, key))
        if i:
            start.add(t1 - t0)
            running_fig.add(t2 - t0)
            output.add(t3 - t0)
            stop.add(t5 - t4)
            cleanup.add(t6 - t5)
            at_first_poll += checks == 1
    report.figure("launch_start", "launch: start() returns", start)
    report.figure("launch_running", "launch: observe() RUNNING", running_fig)
    report.figure("launch_output", "launch: first output", output)
    report.say(
        f"  (observe() {poll} after start() returned; it said RUNNING at the first poll in "
        f"{at_first_poll} of {repeats} launches)"
    )
    report.notes["running_at_first_poll"] = at_first_poll
    report.figure("stop", "stop (SIGTERM):", stop)
    report.figure("cleanup", "cleanup:", cleanup)


def total_memory_mb() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)


@contextlib.contextmanager
def agent_service(runtime: TaskRuntime) -> Iterator[tuple[NodeAgent, Any]]:
    """A ``NodeAgent`` over ``runtime`` served by the real ``AgentServicer`` on a gRPC server
    bound to 127.0.0.1 (as ``node_agent/daemon.py`` serves it, without its RM loops), and a
    client stub.  On the way out the server is stopped after its calls in flight have returned
    (never interrupted), so that no task is being started while the runtime is purged."""
    cpu_ids = tuple(sorted(os.sched_getaffinity(0)))
    agent = NodeAgent(
        AgentConfig(
            node_id=NODE_ID,
            cpu_ids=cpu_ids,
            capacity=Resources(cpu=float(len(cpu_ids)), memory_mb=total_memory_mb()),
        ),
        runtime,
    )
    service = agent_pb.DESCRIPTOR.services_by_name["AgentService"].full_name
    registration = (
        agent_grpc.add_AgentServiceServicer_to_server,
        AgentServicer(agent, on_drained=lambda: None),
        service,
    )
    server, port, _ = start_server([registration], "127.0.0.1:0", max_workers=4)
    client = channel(f"127.0.0.1:{port}")
    try:
        yield agent, agent_grpc.AgentServiceStub(client)
    finally:
        with signals_ignored():
            client.close()
            server.stop(grace=WAIT_S).wait()


def start_request(task_id: str, allocation_id: str) -> agent_pb.StartTaskRequest:
    """What a job master sends (``job_master/master.py`` ``_launch``), with the launch task."""
    return agent_pb.StartTaskRequest(
        job_id=AGENT_JOB,
        task_id=task_id,
        attempt=1,
        allocation_id=allocation_id,
        command=["sh", "-c", LAUNCH_SCRIPT],
        resources=pb.Resources(cpu=LARGE.cpu, memory_mb=LARGE.memory_mb),
        image="",
        env={"SLUICE_JOB_ID": AGENT_JOB, "SLUICE_TASK_ID": task_id, "SLUICE_ATTEMPT": "1"},
    )


def send_start(stub: Any, request: agent_pb.StartTaskRequest) -> None:
    try:
        stub.StartTask(request, timeout=RPC_TIMEOUT_S)
    except grpc.RpcError as error:
        details = error.details() if isinstance(error, grpc.Call) else str(error)
        code = error.code() if isinstance(error, grpc.Call) else None
        raise RuntimeError(f"StartTask {request.task_id}: {code}: {details}") from None


def agent_reports_running(agent: NodeAgent, key: str) -> bool:
    """One monitor pass of the agent (what its monitor thread runs every 0.2 s); whether it
    queued the task's RUNNING event for the RM."""
    agent.monitor_once(time.time())
    events = [e for e in agent.take_outbox() if task_key(e.job_id, e.task_id, e.attempt) == key]
    for event in events:
        if event.state.is_final:
            output = agent.logs(key).decode(errors="replace").strip()
            raise RuntimeError(
                f"task {key!r} ended unexpectedly ({event.state.value}, {event.message}): "
                f"{output[-300:] or 'no output'}"
            )
    return any(event.state is TaskState.RUNNING for event in events)


def listed_running(stub: Any, key: str) -> bool:
    """Whether ``ListTasks`` over gRPC shows the task RUNNING."""
    response = stub.ListTasks(agent_pb.ListTasksRequest(), timeout=RPC_TIMEOUT_S)
    return any(
        task_key(s.task.job_id, s.task.task_id, s.task.attempt) == key
        and s.state == pb.TASK_RUNNING
        for s in response.tasks
    )


def bench_launch_via_agent(
    runtime: TaskRuntime, repeats: int, poll_s: float, report: Report
) -> None:
    """Launch through the node agent's gRPC service, as a job master does."""
    poll = f"polled every {poll_s * 1e3:g} ms"
    returned = Figure("StartTask gRPC call to the agent until it returns")
    running_fig = Figure(
        f"StartTask call until the agent's monitor pass queues the task's RUNNING event for the "
        f"RM (a pass {poll} after the call returned; the RM hears of it at the agent's next "
        f"pass, every {MONITOR_INTERVAL_S:g} s, not counted)"
    )
    at_first_poll = 0
    list_disagreed = 0
    with agent_service(runtime) as (agent, stub):
        for i in range(repeats + 1):  # the first call warms up (and connects the client)
            task_id = f"agent-{i}"
            key = task_key(AGENT_JOB, task_id, 1)
            request = start_request(task_id, f"bench-agent-{i}")
            t0, t1 = timed(partial(send_start, stub, request))
            t2, checks = poll_until(
                partial(agent_reports_running, agent, key), poll_s, "the agent's RUNNING event"
            )
            listed = listed_running(stub, key)  # untimed: what a job master or the CLI sees
            timed(partial(runtime.stop, key, grace_seconds=STOP_GRACE_S))
            timed(partial(runtime.cleanup, key))
            timed(partial(runtime.forget, key))
            agent.monitor_once(time.time())  # the agent forgets it too (untimed)
            agent.take_outbox()
            if i:
                returned.add(t1 - t0)
                running_fig.add(t2 - t0)
                at_first_poll += checks == 1
                list_disagreed += not listed
    report.figure("launch_agent_start", "launch via agent (StartTask returned)", returned)
    report.figure("launch_agent_running", "launch via agent (running)", running_fig)
    agreed = (
        "agreed every time"
        if not list_disagreed
        else f"DISAGREED (not RUNNING) {list_disagreed} time(s)"
    )
    report.say(
        f"  (running: the agent's monitor pass, run every {poll_s * 1e3:g} ms after StartTask "
        f"returned, queued the task's RUNNING event for the RM -- at the first pass in "
        f"{at_first_poll} of {repeats} launches;\n   the RM hears of it at the agent's next "
        f"pass, every {MONITOR_INTERVAL_S:g} s: not counted; ListTasks over gRPC {agreed})"
    )
    report.notes["agent_running_at_first_poll"] = at_first_poll
    report.notes["agent_list_tasks_disagreed"] = list_disagreed


# --- one runtime ----------------------------------------------------------------------------


def open_runtime(kind: str, cluster_id: str, state_dir: Path) -> TaskRuntime:
    runtime = make_runtime(kind, NODE_ID, state_dir, cluster_id=cluster_id)
    if kind == "process" and not getattr(runtime, "uses_cgroups", False):
        release(runtime, scope_name(cluster_id, NODE_ID))
        raise CannotRunError(
            "bench_task_ops: cannot create a cgroup for the process runtime -- run as root on a "
            f"machine with cgroups at {CGROUP_ROOT} ({runtime.describe()})"
        )
    return runtime


def release(runtime: TaskRuntime, scope: str) -> None:
    """Purge every task, cgroup, container and state of the runtime, whatever happens."""
    with signals_ignored():
        try:
            runtime.purge(grace_seconds=0.2)
        except Exception as e:  # report, unfreeze what may be left frozen, try once more
            print(f"cleanup: purge failed ({e}); thawing and retrying", file=sys.stderr)
            thaw_cgroups(scope)
            try:
                runtime.purge(grace_seconds=0.2)
            except Exception as again:
                print(f"cleanup: purge failed again ({again})", file=sys.stderr)
        finally:
            runtime.close()


def bench_runtime(kind: str, args: argparse.Namespace, cluster_id: str, workdir: Path) -> Report:
    report = Report(quiet=args.json)
    try:
        runtime = open_runtime(kind, cluster_id, workdir / kind)
    except RuntimeUnavailableError as e:
        if kind == "process":
            raise CannotRunError(f"bench_task_ops: process runtime unavailable: {e}") from e
        return unavailable(report, kind, str(e))
    try:
        report.notes["description"] = runtime.describe()
        report.say(f"{kind}: {runtime.describe()}")
        try:  # docker: the first start builds or checks the task image (busybox-static)
            timed(partial(runtime.start, task("warmup", LAUNCH_SCRIPT, LARGE)))
        except RuntimeUnavailableError as e:
            return unavailable(report, kind, str(e))
        timed(partial(runtime.stop, "warmup", grace_seconds=0.5))
        timed(partial(runtime.forget, "warmup"))
        bench_task_controls(runtime, kind, args.repeats, args.workload, report)
        bench_launch(runtime, args.launch_repeats, args.poll_ms / 1e3, report)
        bench_launch_via_agent(runtime, args.launch_repeats, args.poll_ms / 1e3, report)
    finally:
        release(runtime, scope_name(cluster_id, NODE_ID))
    return report


def unavailable(report: Report, kind: str, reason: str) -> Report:
    report.notes["unavailable"] = reason
    print(
        f"{kind}: unavailable, skipped ({reason})", file=sys.stderr if report.quiet else sys.stdout
    )
    return report


# --- leftovers ------------------------------------------------------------------------------


def leftover_cgroups(scope: str) -> list[Path]:
    """This run's node cgroup directories still present (v1 hierarchies and v2)."""
    node = encode_name(scope)
    found = list(CGROUP_ROOT.glob(f"*/sluice/{node}")) + list(CGROUP_ROOT.glob(f"sluice/{node}"))
    return sorted(p for p in found if p.is_dir())


def thaw_cgroups(scope: str) -> None:
    """Thaw this run's task cgroups (only its own scope), so their processes can be killed."""
    node = encode_name(scope)
    files = [(p, "THAWED") for p in CGROUP_ROOT.glob(f"freezer/sluice/{node}/*/freezer.state")]
    for pattern in (f"sluice/{node}/*/cgroup.freeze", f"unified/sluice/{node}/*/cgroup.freeze"):
        files += [(p, "0") for p in CGROUP_ROOT.glob(pattern)]
    for path, value in files:
        with contextlib.suppress(OSError):
            path.write_text(value)


def remove_leftover_containers(cluster_id: str) -> list[str]:
    """Force-remove containers labelled with this run's own cluster id (never anybody else's)."""
    try:
        import docker

        client = docker.from_env()
    except Exception:  # no engine: nothing of ours to remove
        return []
    try:
        containers = client.containers.list(
            all=True, filters={"label": f"sluice.cluster={cluster_id}"}
        )
        for container in containers:
            with contextlib.suppress(Exception):
                container.remove(force=True)
        return [str(c.name) for c in containers]
    except Exception:  # the engine went away: nothing to report
        return []
    finally:
        client.close()


def final_cleanup(cluster_id: str, scope: str, workdir: Path, kinds: list[str]) -> list[str]:
    """Remove the state directory and whatever purge left; what could not be removed."""
    shutil.rmtree(workdir, ignore_errors=True)
    problems = []
    if workdir.exists():
        problems.append(f"state directory {workdir}")
    if "docker" in kinds and (names := remove_leftover_containers(cluster_id)):
        print(f"cleanup: force-removed leftover containers {names}", file=sys.stderr)
    for path in leftover_cgroups(scope):
        for directory in sorted(path.glob("**/"), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                directory.rmdir()  # only empty cgroups can go; populated ones are reported
        if path.exists():
            problems.append(f"cgroup {path}")
    return problems


# --- main -----------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=("process", "docker", "both"), default="both")
    parser.add_argument(
        "--repeats",
        type=int,
        help="samples per operation (default: 50 for suspend/resume/resize, 20 for launch)",
    )
    parser.add_argument("--launch-repeats", type=int, help="launches (default: --repeats or 20)")
    parser.add_argument("--poll-ms", type=float, default=1.0, help="observe()/logs() poll period")
    parser.add_argument("--workload", choices=tuple(WORKLOADS), default="busy")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = parser.parse_args()
    if args.launch_repeats is None:
        args.launch_repeats = args.repeats if args.repeats is not None else 20
    if args.repeats is None:
        args.repeats = 50
    if args.repeats < 1 or args.launch_repeats < 1 or args.poll_ms <= 0:
        parser.error("--repeats and --launch-repeats must be >= 1, --poll-ms > 0")

    kinds = ["process", "docker"] if args.runtime == "both" else [args.runtime]
    cores = os.cpu_count()
    cluster_id = f"bench{os.getpid()}"
    scope = scope_name(cluster_id, NODE_ID)
    workdir = Path(tempfile.mkdtemp(prefix=f"sluice-{cluster_id}-"))
    signal.signal(signal.SIGTERM, _on_sigterm)
    if not args.json:
        print(
            f"os.cpu_count() = {cores}; scope {scope} (cluster {cluster_id}, node {NODE_ID}); "
            f"state in {workdir}; p50 = median, p99 = nearest rank (max below 100 samples)",
            flush=True,
        )
    reports: dict[str, Report] = {}
    status = 0
    try:
        for kind in kinds:
            reports[kind] = bench_runtime(kind, args, cluster_id, workdir)
        if args.runtime == "docker" and "unavailable" in reports["docker"].notes:
            status = EXIT_CANNOT_RUN
    except CannotRunError as e:
        print(e, file=sys.stderr)
        status = EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        print("bench_task_ops: interrupted; cleaning up", file=sys.stderr)
        status = EXIT_INTERRUPTED
    finally:
        with signals_ignored():
            problems = final_cleanup(cluster_id, scope, workdir, kinds)
    if problems:
        print(f"cleanup: could NOT remove {', '.join(problems)}", file=sys.stderr)
    elif not args.json:
        print(f"cleanup: no task, cgroup, container or state of {scope} is left")
    if args.json and status == 0:
        document = {
            "cpu_count": cores,
            "scope": scope,
            "state_dir": str(workdir),
            "poll_ms": args.poll_ms,
            "workload": args.workload,
            "leftovers": problems,
            "runtimes": {
                kind: {
                    **report.notes,
                    "operations": {k: f.summary() for k, f in report.figures.items()},
                }
                for kind, report in reports.items()
            },
        }
        print(json.dumps(document, indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())
