"""How the CLI shows jobs, tasks and nodes to people (tables) and to programs (JSON)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb

if TYPE_CHECKING:
    from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper
    from google.protobuf.message import Message


def job_state_name(state: pb.JobState) -> str:
    """'running' for JOB_RUNNING, and so on, as :func:`plumbing.wire.job_state_name` says;
    from the enum's own names, since plumbing.wire imports the job spec's parser too."""
    return _state_name(pb.JobState, state, "JOB_")


def task_state_name(state: pb.TaskState) -> str:
    """'running' for TASK_RUNNING, and so on, as :func:`plumbing.wire.task_state_name` says."""
    return _state_name(pb.TaskState, state, "TASK_")


def _state_name(enum: EnumTypeWrapper, state: int, prefix: str) -> str:
    try:
        name = enum.Name(state)
    except ValueError:
        return "unknown"
    return "unknown" if name.endswith("_UNSPECIFIED") else name.removeprefix(prefix).lower()


def as_json(message: Message) -> dict[str, object]:
    """A message as JSON-ready data, with enum states as lower-case words."""
    # Only --json needs json_format, whose import costs more than a `sluice jobs` call.
    from google.protobuf.json_format import MessageToDict

    data = MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _lower_states(data)
    return data


def _lower_states(value: object) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "state" and isinstance(item, str):
                value[key] = item.split("_", 1)[-1].lower()
            else:
                _lower_states(item)
    elif isinstance(value, list):
        for item in value:
            _lower_states(item)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)


def fit_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int | None,
    drop_order: Sequence[str],
    wide_flag: str,
) -> str:
    """``table`` within ``width`` columns (None: as wide as it is): the columns of
    ``drop_order`` are left out, first ones first, until it fits (the others always stay), and
    a last line names those left out and ``wide_flag``, which shows them."""
    keep = list(range(len(headers)))
    hidden: list[str] = []
    droppable = [headers.index(h) for h in drop_order if h in headers]

    def render() -> str:
        return table([headers[i] for i in keep], [[row[i] for i in keep] for row in rows])

    text = render()
    while width is not None and droppable and max(map(len, text.splitlines())) > width:
        column = droppable.pop(0)
        keep.remove(column)
        hidden.append(headers[column])
        text = render()
    if hidden:
        hint = f"({wide_flag} shows {len(hidden)} more columns: {', '.join(hidden)})"
        if width is not None and len(hint) > width:
            hint = hint[: max(width - 2, 0)].rstrip(" ,") + "…)"
        text += "\n" + hint
    return text


def terminal_width() -> int | None:
    """The width a table fits by default: the terminal's ($COLUMNS, else the terminal's own),
    None when the output is not a terminal (a pipe or a file gets every column, whatever
    $COLUMNS an environment exports)."""
    import shutil
    import sys

    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def fraction_done(job: rm_pb.JobSummary) -> tuple[int, int]:
    done = sum(p.succeeded for p in job.phases)
    total = sum(p.tasks for p in job.phases)
    return done, total


def duration(job: rm_pb.JobSummary, now: float | None = None) -> str:
    end = job.finish_time or (now if now is not None else time.time())
    return f"{end - job.submit_time:.1f}s"


def jobs_table(jobs: Sequence[rm_pb.JobSummary]) -> str:
    """One row a job; with DiAS (priority buffers, or jobs that drop tasks) also where each
    waits (its priority's buffer and place: ``p0 #2``) and its drop ratio."""
    dias = any(j.dias.buffered or j.dias.drop_ratio > 0 or j.dias.sprinted_s for j in jobs)
    places = buffer_places(jobs)
    rows = []
    for job in jobs:
        done, total = fraction_done(job)
        row = [
            job.job_id,
            job.name,
            str(job.priority),
            job_state_name(job.state),
            f"{done}/{total}",
            time.strftime("%H:%M:%S", time.localtime(job.submit_time)),
            duration(job),
        ]
        if dias:
            place = places.get(job.job_id)
            row += [
                f"p{job.priority} #{place}" if place is not None else "-",
                drop_cell(job.dias),
                sprint_cell(job.dias),
            ]
        rows.append(row)
    headers = ["JOB", "NAME", "PRIO", "STATE", "TASKS", "SUBMITTED", "ELAPSED"]
    return table([*headers, "BUFFER", "DROP", "SPRINT"] if dias else headers, rows)


def sprint_cell(dias: rm_pb.DiasInfo) -> str:
    if dias.sprinting:
        return f"sprinting {dias.sprinted_s:.0f}s"
    return f"sprinted {dias.sprinted_s:.0f}s" if dias.sprinted_s else "-"


def buffer_places(jobs: Sequence[rm_pb.JobSummary]) -> dict[str, int]:
    """Each waiting job's place in its priority's buffer (1: the head), on a cluster that
    dispatches from buffers; jobs are served in submission order (ids sort so)."""
    waiting = sorted(
        (j for j in jobs if j.dias.buffered and j.state == pb.JOB_SUBMITTED),
        key=lambda j: (j.priority, j.job_id),
    )
    places: dict[str, int] = {}
    counts: dict[int, int] = {}
    for job in waiting:
        counts[job.priority] = counts.get(job.priority, 0) + 1
        places[job.job_id] = counts[job.priority]
    return places


def drop_cell(dias: rm_pb.DiasInfo) -> str:
    if dias.drop_ratio <= 0:
        return "-"
    return f"{dias.drop_ratio:g} ({dias.dropped_tasks} out)"


def dias_lines(job: rm_pb.JobSummary) -> list[str]:
    """What DiAS did to the job, for `sluice job`."""
    dias, lines = job.dias, []
    if dias.buffered and job.state == pb.JOB_SUBMITTED:
        lines.append(f"dispatch   waiting in the buffer of priority {job.priority}")
    if dias.drop_ratio > 0:
        result = "approximate" if dias.dropped_tasks else "exact (nothing to drop)"
        lines.append(
            f"approx.    drop ratio {dias.drop_ratio:g}: {dias.dropped_tasks} tasks dropped, "
            f"expected error {dias.expected_error:.1%}; the result is {result}"
        )
    if dias.sprinting or dias.sprinted_s:
        lines.append(
            f"sprint     {'sprinting, ' if dias.sprinting else ''}"
            f"sprinted {dias.sprinted_s:.1f} s (docs/approximation.md)"
        )
    if dias.evictions:
        lines.append(
            f"evicted    {dias.evictions} time{'s' if dias.evictions > 1 else ''}: "
            f"{dias.wasted_s:.1f} s of work lost; now execution {dias.execution}"
        )
    return lines


def progress_line(job: rm_pb.JobSummary) -> str:
    phases = " ".join(
        f"{p.name}:{p.succeeded}/{p.tasks}" + (f"({p.running} running)" if p.running else "")
        for p in job.phases
    )
    return f"{job.job_id} {job.name:<12} {job_state_name(job.state):<9} {phases}"


def job_detail(detail: rm_pb.JobDetail, service_watch: Sequence[str] = ()) -> str:
    """`sluice job`; ``service_watch``: a service's watch, from its nodes (service_health.py)."""
    job = detail.summary
    lines = [
        f"job        {job.job_id} ({job.name})",
        f"priority   {job.priority}",
        *(
            [f"kind       service{service_traits(detail.spec.service)}"]
            if detail.spec.kind == "service"
            else []
        ),
        f"state      {job_state_name(job.state)}" + (f": {job.message}" if job.message else ""),
        f"elapsed    {duration(job)}",
        *dias_lines(job),
    ]
    if job.master_node:
        lines.append(f"master on  {job.master_node}")
    lines.append("")
    lines.append(
        table(
            ["PHASE", "TASKS", "PENDING", "RUNNING", "SUCCEEDED", "FAILED ATTEMPTS"],
            [
                [
                    p.name,
                    str(p.tasks),
                    str(p.pending),
                    str(p.running),
                    str(p.succeeded),
                    str(p.failed),
                ]
                for p in job.phases
            ],
        )
    )
    if detail.tasks:
        lines.append("")
        lines.append(
            table(
                ["TASK", "ATTEMPT", "STATE", "NODE", "EXIT", "MESSAGE"],
                [
                    [
                        t.task_id,
                        str(t.attempt),
                        task_state_name(t.state),
                        t.node_id,
                        str(t.exit_code) if t.finish_time else "",
                        t.message,
                    ]
                    for t in detail.tasks
                ],
            )
        )
    lines.extend(service_watch)
    lines.extend(pending_lines(detail.pending))
    preempted = [t for t in detail.tasks if t.preemptions or t.held_by]
    if preempted:
        lines.append("")
        lines.append("preemptions (docs/preemption.md)")
        for t in preempted:
            lines.append(
                f"  {t.task_id} attempt {t.attempt} on {t.node_id}{held_line(t, job.job_id)}"
            )
            lines.extend(f"    {preemption_line(p)}" for p in t.preemptions)
    if detail.kept:
        ran_in = {t.allocation_id: t.task_id for t in detail.tasks}
        lines.append("")
        lines.append("kept containers (slot reservation, docs/reservation.md)")
        lines.append(
            table(
                ["CONTAINER", "NODE", "KEPT FOR", "FROM", "UNTIL"],
                [
                    [
                        k.allocation_id,
                        k.node_id,
                        k.phase,
                        f"task {ran_in[k.allocation_id]}"
                        if k.allocation_id in ran_in
                        else "pre-reserved",
                        time.strftime("%H:%M:%S", time.localtime(k.until))
                        if k.until
                        else "its barrier (no deadline yet)",
                    ]
                    for k in detail.kept
                ],
            )
        )
    lines.extend(kept_ended_lines(detail.kept_ended))
    copies = side_by_side(detail.tasks)
    if copies:
        lines.append("")
        lines.append("straggler copies (attempts that ran side by side; the first to succeed won)")
        for task_id, attempts in copies.items():
            won = [a.attempt for a in attempts if a.state == pb.TASK_SUCCEEDED]
            numbers = ", ".join(str(a.attempt) for a in attempts)
            verdict = f"attempt {won[0]} won" if won else "none has won yet"
            lines.append(f"  {task_id}: attempts {numbers}; {verdict}")
    if detail.speculative:
        lines.append("")
        lines.append(speculative_section(detail.speculative))
    return "\n".join(lines)


def pending_lines(pending: Sequence[rm_pb.PendingReason]) -> list[str]:
    """`sluice job`: why each pending ask is pending, as the next scheduling pass judges it."""
    if not pending:
        return []
    lines = ["", "pending (why, as the next scheduling pass judges it)"]
    for why in pending:
        what = "job master" if why.job_master else f"phase {why.phase}"
        count = "1 container" if why.count == 1 else f"{why.count} containers"
        size = f"{why.resources.cpu:g} cpu, {why.resources.memory_mb} MB"
        lines.append(f"  {what}: {count} of {size}: {why.text}")
    return lines


def speculative_section(attempts: Sequence[rm_pb.SpeculativeAttempt]) -> str:
    """`sluice job`'s speculative attempts (ROSE): how many ended which way, then each."""
    outcomes: dict[str, int] = {}
    for attempt in attempts:
        outcomes[attempt.outcome] = outcomes.get(attempt.outcome, 0) + 1
    summary = ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items()))
    return "\n".join(
        [
            f"speculative attempts (docs/oversubscription.md): {summary}",
            table(
                ["TASK", "ATTEMPT", "NODE", "OUTCOME", "MESSAGE"],
                [[a.task_id, str(a.attempt), a.node_id, a.outcome, a.message] for a in attempts],
            ),
        ]
    )


def kept_ended_lines(ended: Sequence[rm_pb.ReservedSlot]) -> list[str]:
    """The job view's account of its kept containers' ends (slot reservation): how many ended
    each way, and each that ended before its phase could use it (deadline, taken, lost)."""
    if not ended:
        return []
    counts: dict[str, int] = {}
    for e in ended:
        kind = "lost" if e.ended.startswith("node ") else e.ended.split(":", 1)[0]
        counts[kind] = counts.get(kind, 0) + 1
    summary = ", ".join(f"{kind} {count}" for kind, count in sorted(counts.items()))
    lines = ["", f"kept containers that ended ({summary}; docs/reservation.md)"]
    unused = [e for e in ended if e.ended not in ("used", "released")]
    if unused:
        lines.append(
            table(
                ["CONTAINER", "NODE", "KEPT FOR", "ENDED", "WHY"],
                [
                    [
                        e.allocation_id,
                        e.node_id,
                        e.phase,
                        time.strftime("%H:%M:%S", time.localtime(e.ended_at)),
                        e.ended,
                    ]
                    for e in unused
                ],
            )
        )
    return lines


def side_by_side(tasks: Sequence[rm_pb.TaskInfo]) -> dict[str, list[rm_pb.TaskInfo]]:
    """Per task, its attempts if two of them ran at the same time (a straggler's copy beside
    its original; a retry starts only after the attempt before it ended)."""
    by_task: dict[str, list[rm_pb.TaskInfo]] = {}
    for task in tasks:
        by_task.setdefault(task.task_id, []).append(task)
    copies = {}
    for task_id, attempts in by_task.items():
        if len(attempts) < 2:
            continue
        ordered = sorted((a for a in attempts if a.start_time), key=lambda a: a.start_time)
        overlap = any(
            later.start_time < (earlier.finish_time or math.inf)
            for index, earlier in enumerate(ordered)
            for later in ordered[index + 1 :]
        )
        if overlap:
            copies[task_id] = sorted(attempts, key=lambda a: a.attempt)
    return copies


def service_traits(service: pb.ServiceSpec) -> str:
    """What `sluice job` says of a service after its kind: latency-sensitive, probed how."""
    traits = ["latency-sensitive"] if service.latency_sensitive else []
    if service.HasField("probe"):
        probe = service.probe
        target = f"GET :{probe.port}{probe.http}" if probe.http else f"TCP :{probe.port}"
        traits.append(f"probed by {target} every {probe.period_s:g} s")
    return f" ({', '.join(traits)})" if traits else ""


def held_line(task: rm_pb.TaskInfo, job_id: str) -> str:
    """Who holds a task preempted now, and what lifts it ("" while it runs whole)."""
    if task.held_by == "operator":
        return f": held by an operator until `sluice task resume {job_id} {task.task_id}`"
    if task.held_by:
        return f": held by the {task.held_by}'s preemption until its node has room"
    return ""


def preemption_line(step: rm_pb.PreemptionEvent) -> str:
    """One step of a task's preemption: when, what, the limits after it, why."""
    when = time.strftime("%H:%M:%S", time.localtime(step.time))
    parts = [when, f"{step.action:<11}"]
    if step.HasField("limits"):
        parts.append(f"{step.limits.cpu:g} cpu, {step.limits.memory_mb} MiB")
    if step.work_lost_s:
        parts.append(f"work lost {step.work_lost_s:.1f} s")
    if step.reason:
        parts.append(f"({step.reason})")
    return "  ".join(parts)


# What `sluice nodes` leaves out first to fit the terminal; NODE, STATE, CPU ALLOC, TASKS, the
# load and the candidacy always stay.
NODE_DROP_ORDER = (
    "ADDRESS",
    "RUNTIME",
    "DROPPED",
    "POWER ENERGY",
    "SWAP",
    "QUEUED/ADMITTED/REFUSED/EVICTED",
    "THROTTLE",
    "PSI CPI/MPKI",
    "CPU USED",
    "SPECULATIVE",
    "MEM ALLOC (MiB)",
)


def nodes_table(
    nodes: Sequence[rm_pb.NodeInfo],
    extra: tuple[Sequence[str], Mapping[str, Sequence[str]]] | None = None,
    width: int | None = None,
) -> str:
    """One row per node; ``extra`` = (headers, cells by node id) appends columns.  Within
    ``width`` columns (None: every column), leaving out columns in ``NODE_DROP_ORDER``."""
    headers = [
        "NODE",
        "STATE",
        "RUNTIME",
        "ADDRESS",
        "CPU ALLOC",
        "MEM ALLOC (MiB)",
        "CPU USED",
        "TASKS",
        "SWAP",
        "SPECULATIVE",
        "QUEUED/ADMITTED/REFUSED/EVICTED",
        "THROTTLE",
    ]
    rows = [
        [
            n.node_id,
            "ready" if n.state == rm_pb.NODE_READY else "lost",
            n.runtime,
            n.address,
            f"{n.allocated.cpu:g}/{n.capacity.cpu:g}",
            f"{n.allocated.memory_mb}/{n.capacity.memory_mb}",
            f"{n.used.cpu:.2f}",
            str(n.running_tasks),
            "yes" if n.has_swap else "no",
            # opportunistic: what its speculative tasks hold beside the allocations (ROSE)
            f"{n.speculative_tasks} ({n.opportunistic.cpu:g} cpu)" if n.speculative_tasks else "-",
            *_speculative_queue_cells(n),
        ]
        for n in nodes
    ]
    if extra is not None:
        extra_headers, cells = extra
        headers += extra_headers
        blank = ["-"] * len(extra_headers)
        rows = [[*row, *cells.get(n.node_id, blank)] for row, n in zip(rows, nodes, strict=True)]
    return fit_table(headers, rows, width, NODE_DROP_ORDER, "--wide")


def _speculative_queue_cells(node: rm_pb.NodeInfo) -> list[str]:
    """A node's speculative queue (ROSE): its counts, and whether and why its head waits."""
    if not node.HasField("speculative"):
        return ["-", "-"]
    q = node.speculative
    counts = f"{q.queued}/{q.admitted}/{q.refused}/{q.evicted}"
    if q.throttled:
        return [counts, q.blocked or "throttled"]
    return [counts, f"waits: {q.blocked}" if q.blocked else "-"]


def queues_table(listing: rm_pb.ListQueuesResponse) -> str:
    """``sluice queues``: one row per queue (the default marked ``*``), and where they came
    from."""

    def amount(r: pb.Resources) -> str:
        return f"{r.cpu:g} cpu, {r.memory_mb} MiB"

    rows = [
        [
            q.name + (" *" if q.is_default else ""),
            f"{q.share:g}",
            f"{q.max_share:g}",
            q.mode,
            amount(q.usage),
            amount(q.pending),
            f"{q.suspended}/{q.shrunk}",
            amount(q.preempted),
            str(q.running_jobs),
        ]
        for q in listing.queues
    ]
    source = listing.source or "built in (no --queues)"
    capacity = amount(listing.capacity)
    return "\n".join(
        [
            table(
                [
                    "QUEUE",
                    "SHARE",
                    "MAX",
                    "MODE",
                    "USAGE",
                    "PENDING",
                    "SUSP/SHRUNK",
                    "TAKEN",
                    "JOBS",
                ],
                rows,
            ),
            "",
            f"cluster {capacity}; queues from {source}; * = default queue",
        ]
    )


def sprint_status(status: rm_pb.SprintStatus) -> str:
    """`sluice sprint`: the budget, and the sprints (those going on first)."""
    if not status.enabled:
        return (
            "sprinting is off: no priority has a sprint timeout "
            "(sluice rm --dias-config; docs/approximation.md)"
        )
    lines = [
        f"budget     {status.budget_s:.1f} of {status.capacity_s:g} sprint-seconds "
        f"(+{status.replenish_s_per_hour:g} per hour)",
        f"factor     {status.factor:g} (a CPU-quota sprint: the task's CPU times this, on idle "
        "cores only)",
    ]
    runs = sorted(status.sprints, key=lambda r: (r.ended_at != 0, -r.started_at))
    if not runs:
        return "\n".join([*lines, "", "no sprint yet"])
    rows = [
        [
            r.job_id,
            time.strftime("%H:%M:%S", time.localtime(r.started_at)),
            time.strftime("%H:%M:%S", time.localtime(r.ended_at)) if r.ended_at else "sprinting",
            f"{r.sprinted_s:.1f}s",
            r.why,
        ]
        for r in runs
    ]
    return "\n".join([*lines, "", table(["JOB", "STARTED", "ENDED", "SPRINTED", "WHY"], rows)])
