"""Job specifications: parse a YAML-shaped document into a validated, immutable JobSpec.

The schema (every field, its type and constraint) is :data:`JOB_FIELDS` and :data:`PHASE_FIELDS`;
docs/jobspec.md describes it for users.  Every refusal is a :class:`SpecError` whose message names
the field and the problem on one line, e.g. ``phases[1].after: unknown phase 'reduce'``.

Every value is held to what the rest of the system can carry before anything is stored: numbers
to the range of their wire type (``proto/sluice_pb/common.proto``) or a saner bound, strings to
what ``execve`` and the protobuf wire accept, and the whole spec to the limits below.  The same
rules hold for every path into the system: YAML text (through ``plumbing.spec_text``, which adds
the limits on the text itself) and structured protobuf specs (``plumbing.wire``) both end here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.scheduling.resources import Resources
from policies.scheduling.service_spec import ServiceSpec, parse_service, service_to_document
from policies.scheduling.spec_fields import MAX_NAME_LENGTH, SpecError, join_field, quoted
from policies.scheduling.spec_fields import check_keys as _check_keys
from policies.scheduling.spec_fields import describe as _describe
from policies.scheduling.spec_fields import fraction_field as _fraction
from policies.scheduling.spec_fields import integer_field as _integer
from policies.scheduling.spec_fields import name_field as _name
from policies.scheduling.spec_fields import number_field as _number
from policies.scheduling.spec_fields import string_list as _string_list
from policies.scheduling.spec_fields import utf8_size as _utf8_size
from policies.scheduling.speculative_spec import (
    SpeculativeSpec,
    parse_speculative,
    speculative_to_document,
)

__all__ = [
    "DEFAULT_ISOLATION",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_PRERESERVE_AT",
    "INT32_MAX",
    "INT32_MIN",
    "JOB_FIELDS",
    "KINDS",
    "MAX_ARG_BYTES",
    "MAX_COMMAND_ARGS",
    "MAX_COMMAND_BYTES",
    "MAX_CPU",
    "MAX_IMAGE_LENGTH",
    "MAX_MEMORY_MB",
    "MAX_NAME_LENGTH",
    "MAX_PHASES",
    "MAX_RETRIES_LIMIT",
    "MAX_SPEC_BYTES",
    "MAX_SPEC_DEPTH",
    "MAX_SPEC_NODES",
    "MAX_STRAGGLER_COPIES",
    "MAX_TASKS_PER_JOB",
    "MAX_TASKS_PER_PHASE",
    "MIN_CPU",
    "PHASE_FIELDS",
    "PRIOR_FIELDS",
    "RESERVATION_FIELDS",
    "RESOURCE_FIELDS",
    "ApproximationSpec",
    "JobSpec",
    "PhaseSpec",
    "ReservationSpec",
    "SpecError",
    "TaskTimePrior",
    "check_fits_cluster",
    "job_spec_to_document",
    "join_field",
    "parse_job_spec",
    "parse_reservation",
    "quoted",
    "reservation_to_document",
]

DEFAULT_MAX_RETRIES = 2

# ------------------------------------------------------------------------------ limits
# Each is documented in docs/jobspec.md ("Limits"); change both together.

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
"""``priority``, ``max_retries`` and ``tasks`` are int32 on the wire: a larger value would be
stored and then break every answer that carries it (ListJobs for everybody)."""

MAX_RETRIES_LIMIT = 100
"""``max_retries`` beyond this is a mistake, not a policy: attempts are int32 on the wire and every
attempt is a row in the resource manager's store."""

MAX_TASKS_PER_PHASE = 100_000
MAX_TASKS_PER_JOB = 1_000_000
"""The job master holds every task of its job in memory, and the resource manager every attempt."""

MAX_PHASES = 1_000
"""Each phase is a progress row in every JobSummary the resource manager sends."""

MIN_CPU = 0.001
MAX_CPU = 4096.0
"""Per task, in cores (a double on the wire).  Placement compares CPU to a thousandth of a core,
and no machine has more than a few thousand cores."""

MAX_MEMORY_MB = 64 * 1024 * 1024
"""Per task, 64 TiB in MiB (int64 on the wire; the runtimes turn it into bytes)."""

MAX_IMAGE_LENGTH = 512
"""A Docker reference: a repository of at most 255 characters, a tag and a digest."""

MAX_ARG_BYTES = 131_071
"""One command argument, in UTF-8 bytes: Linux refuses to ``execve`` an argv string of 128 KiB
(``MAX_ARG_STRLEN``, which counts the terminating NUL) or more."""

MAX_COMMAND_ARGS = 4_096
MAX_COMMAND_BYTES = 256 * 1024
"""A phase's whole command: its arguments' UTF-8 bytes plus one NUL each, well inside the kernel's
``ARG_MAX`` (a quarter of the stack limit, 2 MiB by default) with the environment beside it."""

MAX_SPEC_BYTES = 1024 * 1024
"""The YAML text of a spec, and the strings of a validated spec (names, command arguments,
``after`` entries, images, each counted with one byte more): aliases and structured specs can
never make a spec larger than one that could be written out."""

MAX_SPEC_DEPTH = 32
"""Collections (mappings and lists) nested in a YAML spec; a valid spec needs 4."""

MAX_SPEC_NODES = 100_000
"""Nodes (scalars, lists, mappings) in a YAML spec once every alias is replaced by what it names:
bounds the work of reading a spec and alias bombs ("billion laughs")."""


@dataclass(frozen=True)
class PhaseSpec:
    name: str
    tasks: int
    command: tuple[str, ...]
    resources: Resources
    after: tuple[str, ...] = ()
    image: str | None = None
    droppable: bool = False  # DiAS: its tasks may be dropped (an approximate result)


@dataclass(frozen=True)
class ApproximationSpec:
    """The job's own drop ratio θ (DiAS Sec. 3.1): its droppable phases run ⌈n(1 − θ)⌉ of
    their n tasks.  The RM refuses a ratio above its bound for the job's priority."""

    drop_ratio: float


DEFAULT_ISOLATION = 0.9
DEFAULT_PRERESERVE_AT = 0.8  # R, as Hadoop's reduce slow-start (slot-reservation paper, III-B)
MAX_STRAGGLER_COPIES = 100_000


@dataclass(frozen=True)
class TaskTimePrior:
    """A Pareto task-time distribution (Eq. 1 of the slot-reservation paper): shape ``alpha``
    > 1 (Eq. 3-4 need a finite mean) and scale ``t_min`` seconds > 0."""

    alpha: float
    t_min: float


@dataclass(frozen=True)
class ReservationSpec:
    """Speculative slot reservation for a job (slot-reservation paper, Sec. III-IV).

    ``isolation`` is the knob P of Eq. 2 in [0, 1): the probability that a phase's tasks all
    finish before its reserved slots' deadline D (Eq. 4 gives D).  ``prereserve_at`` is R in
    [0, 1]: the finished fraction of a phase past which the extra slots of a wider downstream
    phase are pre-reserved (Alg. 1, Case-2.3; 1 never pre-reserves).  ``max_copies`` bounds the
    straggler copies running at once for the job (Sec. IV-C: each task at most one copy); 0
    turns copies off, ``None`` leaves them unbounded as in the paper.  ``prior`` stands for the
    job's task times until enough of its tasks have finished for a maximum-likelihood fit."""

    isolation: float = DEFAULT_ISOLATION
    prereserve_at: float = DEFAULT_PRERESERVE_AT
    max_copies: int | None = 0
    prior: TaskTimePrior | None = None

    @property
    def straggler_copies(self) -> bool:
        return self.max_copies != 0


@dataclass(frozen=True)
class JobSpec:
    """A validated job: phases form a DAG (``after`` names upstream phases), in the order the
    user wrote them."""

    name: str
    priority: int
    phases: tuple[PhaseSpec, ...]
    max_retries: int = DEFAULT_MAX_RETRIES
    queue: str = ""  # the queue it is charged to; empty: the RM's default queue
    reservation: ReservationSpec | None = None  # None: the RM's default (docs/reservation.md)
    service: ServiceSpec | None = None  # kind: service (service_spec.py); None: a batch job
    # Speculative tasks placed straight on node agents (speculative_spec.py); None: never.
    speculative: SpeculativeSpec | None = None
    approximation: ApproximationSpec | None = None  # None: the cluster's ratio for its priority
    # When its node loses the RM for longer than the node timeout, the node's agent stops its
    # tasks ("stop": the RM retries them elsewhere) or leaves them running ("run_on").
    on_node_lost: str = "stop"

    @property
    def kind(self) -> str:
        return "batch" if self.service is None else "service"

    def phase(self, name: str) -> PhaseSpec:
        for phase in self.phases:
            if phase.name == name:
                return phase
        raise KeyError(name)

    def total_tasks(self) -> int:
        return sum(phase.tasks for phase in self.phases)


def _command(value: object, field: str) -> tuple[tuple[str, ...], int]:
    """The argv of a phase and its size as ``execve`` counts it (each argument plus its NUL)."""
    args = _string_list(value, field, non_empty=True, max_items=MAX_COMMAND_ARGS)
    total = 0
    for index, arg in enumerate(args):
        size = _utf8_size(arg, f"{field}[{index}]")
        if "\0" in arg:
            raise SpecError(f"{field}[{index}]", "contains a NUL character, which no argument can")
        if size > MAX_ARG_BYTES:
            raise SpecError(f"{field}[{index}]", f"is {size} bytes; at most {MAX_ARG_BYTES}")
        total += size + 1
    if total > MAX_COMMAND_BYTES:
        raise SpecError(
            field, f"is {total} bytes (with a NUL after each argument); at most {MAX_COMMAND_BYTES}"
        )
    return args, total


# ------------------------------------------------------------------------------ the schema

# Field name -> required?  The checks of each value are in the parse functions below.
JOB_FIELDS: Mapping[str, bool] = {
    "name": True,
    "priority": False,
    "phases": True,
    "max_retries": False,
    "queue": False,
    "reservation": False,
    "kind": False,
    "service": False,
    "speculative": False,
    "approximation": False,
    "on_node_lost": False,
}
ON_NODE_LOST = ("stop", "run_on")
"""What a job's tasks do while their node has lost the RM (docs/jobspec.md, on_node_lost)."""
APPROXIMATION_FIELDS: Mapping[str, bool] = {"drop_ratio": True}
KINDS = ("batch", "service")
"""A batch job ends when its tasks have; a service runs until killed (service_spec.py)."""
RESERVATION_FIELDS: Mapping[str, bool] = {
    "isolation": False,
    "prereserve_at": False,
    "straggler_copies": False,
    "prior": False,
}
PRIOR_FIELDS: Mapping[str, bool] = {"alpha": True, "t_min": True}
PHASE_FIELDS: Mapping[str, bool] = {
    "name": True,
    "tasks": True,
    "command": True,
    "resources": True,
    "after": False,
    "image": False,
    "droppable": False,
}
RESOURCE_FIELDS: Mapping[str, bool] = {"cpu": True, "memory_mb": True}


def _image(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(field, "must be a non-empty image reference")
    if len(value) > MAX_IMAGE_LENGTH:
        raise SpecError(field, f"is {len(value)} characters; at most {MAX_IMAGE_LENGTH}")
    if not (value.isascii() and value.isprintable()) or " " in value:
        raise SpecError(field, "must be printable ASCII without spaces, e.g. busybox:1.36")
    return value


def _resources(value: object, field: str) -> Resources:
    doc = _check_keys(value, field, RESOURCE_FIELDS)
    return Resources(
        cpu=_number(doc["cpu"], f"{field}.cpu", minimum=MIN_CPU, maximum=MAX_CPU),
        memory_mb=_integer(
            doc["memory_mb"], f"{field}.memory_mb", minimum=1, maximum=MAX_MEMORY_MB
        ),
    )


def _phase(value: object, field: str) -> tuple[PhaseSpec, int]:
    """A phase and the size of its strings (each counted with one byte more, as for the spec)."""
    doc = _check_keys(value, field, PHASE_FIELDS)
    name = _name(doc["name"], f"{field}.name")
    tasks = _integer(doc["tasks"], f"{field}.tasks", minimum=1, maximum=MAX_TASKS_PER_PHASE)
    command, size = _command(doc["command"], f"{field}.command")
    resources = _resources(doc["resources"], f"{field}.resources")
    after = _string_list(
        doc.get("after", []), f"{field}.after", non_empty=False, max_items=MAX_PHASES
    )
    listed: set[str] = set()
    for index, upstream in enumerate(after):
        if upstream in listed:
            raise SpecError(f"{field}.after[{index}]", f"{quoted(upstream)} is listed twice")
        listed.add(upstream)
        size += _utf8_size(upstream, f"{field}.after[{index}]") + 1
    image = _image(doc["image"], f"{field}.image") if "image" in doc else None
    droppable = doc.get("droppable", False)
    if not isinstance(droppable, bool):
        raise SpecError(f"{field}.droppable", f"must be true or false, not {_describe(droppable)}")
    # Names and images are ASCII (checked above): their length is their size.
    size += len(name) + 1 + (len(image) + 1 if image is not None else 0)
    return PhaseSpec(name, tasks, command, resources, after, image, droppable), size


# ------------------------------------------------------------------------------ entry points


def parse_job_spec(document: object) -> JobSpec:
    """Validate a decoded YAML/JSON document and return the JobSpec; raise SpecError.

    Holds for any document (from YAML, JSON or a protobuf JobSpec): every number is within its
    wire type's range or the bound above, every string can be sent and executed, and the spec's
    strings total at most :data:`MAX_SPEC_BYTES`.  Never raises anything but SpecError for a
    document of dicts, lists, strings, numbers, booleans and None."""
    doc = _check_keys(document, "", JOB_FIELDS)
    raw_phases = doc["phases"]
    if not isinstance(raw_phases, list) or not raw_phases:
        raise SpecError("phases", "must be a non-empty list of phases")
    if len(raw_phases) > MAX_PHASES:  # before looking at each: a structured spec may hold millions
        raise SpecError("phases", f"has {len(raw_phases)} phases; at most {MAX_PHASES}")
    phases: list[PhaseSpec] = []
    size = 0
    for index, raw in enumerate(raw_phases):
        phase, phase_size = _phase(raw, f"phases[{index}]")
        phases.append(phase)
        size += phase_size
    first_index: dict[str, int] = {}
    for index, phase in enumerate(phases):
        if phase.name in first_index:
            raise SpecError(
                f"phases[{index}].name",
                f"duplicate phase name '{phase.name}' (also phases[{first_index[phase.name]}])",
            )
        first_index[phase.name] = index
    for index, phase in enumerate(phases):
        for upstream in phase.after:
            if upstream not in first_index:
                raise SpecError(f"phases[{index}].after", f"unknown phase {quoted(upstream)}")
    _check_acyclic(phases)
    total_tasks = sum(phase.tasks for phase in phases)
    if total_tasks > MAX_TASKS_PER_JOB:
        raise SpecError("phases", f"have {total_tasks} tasks in all; at most {MAX_TASKS_PER_JOB}")
    service = _service(doc, phases)
    speculative = (
        parse_speculative(doc["speculative"], "speculative") if "speculative" in doc else None
    )
    if speculative is not None and service is not None:
        raise SpecError(
            "speculative", "a service runs in containers of its own, never speculatively"
        )
    approximation = _approximation(doc, phases, service)
    name = _name(doc["name"], "name")
    size += len(name) + 1
    if size > MAX_SPEC_BYTES:
        raise SpecError(
            "job",
            f"its names, commands, after lists and images take {size} bytes; "
            f"at most {MAX_SPEC_BYTES}",
        )
    return JobSpec(
        name=name,
        priority=_integer(doc.get("priority", 0), "priority", minimum=INT32_MIN, maximum=INT32_MAX),
        phases=tuple(phases),
        max_retries=_integer(
            doc.get("max_retries", DEFAULT_MAX_RETRIES),
            "max_retries",
            minimum=0,
            maximum=MAX_RETRIES_LIMIT,
        ),
        queue=_queue(doc.get("queue", ""), "queue"),
        reservation=parse_reservation(doc["reservation"], "reservation")
        if "reservation" in doc
        else None,
        service=service,
        speculative=speculative,
        approximation=approximation,
        on_node_lost=_on_node_lost(doc.get("on_node_lost", "stop")),
    )


def _on_node_lost(value: object) -> str:
    if value == "":  # (a structured spec's unset field)
        return "stop"
    if not isinstance(value, str) or value not in ON_NODE_LOST:
        shown = quoted(value) if isinstance(value, str) else _describe(value)
        raise SpecError("on_node_lost", f"must be stop or run_on, got {shown}")
    return value


def _approximation(
    doc: Mapping[str, object], phases: Sequence[PhaseSpec], service: ServiceSpec | None
) -> ApproximationSpec | None:
    """The ``approximation`` block; droppable phases only in a batch job."""
    droppable = [index for index, phase in enumerate(phases) if phase.droppable]
    if service is not None and droppable:
        raise SpecError(
            f"phases[{droppable[0]}].droppable", "a service's tasks run until killed: none drops"
        )
    if "approximation" not in doc:
        return None
    block = _check_keys(doc["approximation"], "approximation", APPROXIMATION_FIELDS)
    if not droppable:
        raise SpecError(
            "approximation", "no phase is droppable (mark those that may be with droppable: true)"
        )
    return ApproximationSpec(_fraction(block["drop_ratio"], "approximation.drop_ratio"))


def _service(doc: Mapping[str, object], phases: Sequence[PhaseSpec]) -> ServiceSpec | None:
    """The job's ``kind`` and ``service`` block: None for a batch job."""
    kind = doc.get("kind", "batch")
    if kind not in KINDS:
        shown = quoted(kind) if isinstance(kind, str) else _describe(kind)
        raise SpecError("kind", f"must be batch or service, got {shown}")
    if kind == "batch":
        if "service" in doc:
            raise SpecError("service", "only a job of kind: service has a service block")
        return None
    for index, phase in enumerate(phases):
        if phase.after:
            raise SpecError(
                f"phases[{index}].after",
                "a service's phases run side by side: none waits for another",
            )
    if "reservation" in doc:
        raise SpecError("reservation", "a service has no barriers to keep slots across")
    return parse_service(doc["service"], "service") if "service" in doc else ServiceSpec()


def parse_reservation(value: object, field: str) -> ReservationSpec:
    """A ``reservation`` block (of a job spec, or the RM's cluster default); raise SpecError."""
    doc = _check_keys(value, field, RESERVATION_FIELDS)
    isolation = _fraction(doc.get("isolation", DEFAULT_ISOLATION), join_field(field, "isolation"))
    if isolation >= 1:
        # P = 1 would keep the slots until every task has finished: an infinite D (Eq. 4).
        raise SpecError(join_field(field, "isolation"), f"must be below 1, got {isolation:g}")
    prereserve_at = _fraction(
        doc.get("prereserve_at", DEFAULT_PRERESERVE_AT), join_field(field, "prereserve_at")
    )
    prior = None
    if "prior" in doc:
        prior_field = join_field(field, "prior")
        prior_doc = _check_keys(doc["prior"], prior_field, PRIOR_FIELDS)
        alpha = _number(
            prior_doc["alpha"], join_field(prior_field, "alpha"), minimum=0, maximum=1e6
        )
        if alpha <= 1:
            raise SpecError(join_field(prior_field, "alpha"), f"must be above 1, got {alpha:g}")
        t_min = _number(
            prior_doc["t_min"], join_field(prior_field, "t_min"), minimum=0, maximum=1e9
        )
        prior = TaskTimePrior(alpha, t_min)
    return ReservationSpec(
        isolation=isolation,
        prereserve_at=prereserve_at,
        max_copies=_copies(
            doc.get("straggler_copies", False), join_field(field, "straggler_copies")
        ),
        prior=prior,
    )


def _copies(value: object, field: str) -> int | None:
    """``straggler_copies``: false (off), true (on, unbounded, as the paper), or at most N at
    once (0 is off)."""
    if value is True:
        return None
    if value is False:
        return 0
    if isinstance(value, int):
        return _integer(value, field, minimum=0, maximum=MAX_STRAGGLER_COPIES)
    raise SpecError(field, f"must be true, false or a number of copies, not {_describe(value)}")


def _queue(value: object, field: str) -> str:
    """A queue name, as the queue file spells them; empty (or absent) for the default queue.
    Whether the queue exists is the RM's to say (its queues may be reloaded)."""
    if value == "":
        return ""
    return _name(value, field)


def _check_acyclic(phases: Sequence[PhaseSpec]) -> None:
    """Raise a SpecError naming the first dependency cycle found, if any.

    A depth-first search with an explicit stack: recursion would overflow (a RecursionError
    traceback instead of an answer) on a long chain of phases listed downstream first."""
    by_name = {phase.name: phase for phase in phases}
    done: set[str] = set()
    for phase in phases:
        if phase.name in done:
            continue
        path = [phase.name]  # each phase on the path waits for the next one
        on_path = {phase.name}
        upstreams = [iter(phase.after)]  # what is left to visit of each phase on the path
        while path:
            upstream = next(upstreams[-1], None)
            if upstream is None:
                finished = path.pop()
                on_path.remove(finished)
                done.add(finished)
                upstreams.pop()
            elif upstream in on_path:
                cycle = [*path[path.index(upstream) :], upstream]
                raise SpecError("phases", f"dependency cycle {' -> '.join(cycle)}")
            elif upstream not in done:
                path.append(upstream)
                on_path.add(upstream)
                upstreams.append(iter(by_name[upstream].after))


def check_fits_cluster(spec: JobSpec, capacities: Sequence[Resources]) -> None:
    """Refuse phases whose per-task resources fit on no node.  An empty cluster accepts all:
    nodes may register later, and refusing then would be a guess."""
    if not capacities:
        return
    for index, phase in enumerate(spec.phases):
        if not any(phase.resources.fits_in(capacity) for capacity in capacities):
            largest_cpu = max(c.cpu for c in capacities)
            largest_mem = max(c.memory_mb for c in capacities)
            raise SpecError(
                f"phases[{index}].resources",
                f"{phase.resources.cpu:g} cpu / {phase.resources.memory_mb} MiB per task fits on "
                f"no node (largest: {largest_cpu:g} cpu, {largest_mem} MiB)",
            )


def job_spec_to_document(spec: JobSpec) -> dict[str, object]:
    """The inverse of :func:`parse_job_spec`: a plain document that parses back to ``spec``."""
    phases: list[dict[str, object]] = []
    for phase in spec.phases:
        doc: dict[str, object] = {
            "name": phase.name,
            "tasks": phase.tasks,
            "command": list(phase.command),
            "resources": {"cpu": phase.resources.cpu, "memory_mb": phase.resources.memory_mb},
        }
        if phase.after:
            doc["after"] = list(phase.after)
        if phase.image is not None:
            doc["image"] = phase.image
        if phase.droppable:
            doc["droppable"] = True
        phases.append(doc)
    document: dict[str, object] = {
        "name": spec.name,
        "priority": spec.priority,
        "phases": phases,
        "max_retries": spec.max_retries,
    }
    if spec.queue:
        document["queue"] = spec.queue
    if spec.reservation is not None:
        document["reservation"] = reservation_to_document(spec.reservation)
    if spec.service is not None:
        document["kind"] = "service"
        document["service"] = service_to_document(spec.service)
    if spec.speculative is not None:
        document["speculative"] = speculative_to_document(spec.speculative)
    if spec.approximation is not None:
        document["approximation"] = {"drop_ratio": spec.approximation.drop_ratio}
    if spec.on_node_lost != "stop":
        document["on_node_lost"] = spec.on_node_lost
    return document


def reservation_to_document(reservation: ReservationSpec) -> dict[str, object]:
    """The inverse of :func:`parse_reservation`."""
    copies = reservation.max_copies
    document: dict[str, object] = {
        "isolation": reservation.isolation,
        "prereserve_at": reservation.prereserve_at,
        "straggler_copies": True if copies is None else (False if copies == 0 else copies),
    }
    if reservation.prior is not None:
        document["prior"] = {"alpha": reservation.prior.alpha, "t_min": reservation.prior.t_min}
    return document
