from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_SUBMITTED: _ClassVar[JobState]
    JOB_STARTING: _ClassVar[JobState]
    JOB_RUNNING: _ClassVar[JobState]
    JOB_SUCCEEDED: _ClassVar[JobState]
    JOB_FAILED: _ClassVar[JobState]
    JOB_KILLED: _ClassVar[JobState]

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_PENDING: _ClassVar[TaskState]
    TASK_LAUNCHING: _ClassVar[TaskState]
    TASK_RUNNING: _ClassVar[TaskState]
    TASK_SUSPENDED: _ClassVar[TaskState]
    TASK_SUCCEEDED: _ClassVar[TaskState]
    TASK_FAILED: _ClassVar[TaskState]
    TASK_KILLED: _ClassVar[TaskState]
    TASK_LOST: _ClassVar[TaskState]
JOB_STATE_UNSPECIFIED: JobState
JOB_SUBMITTED: JobState
JOB_STARTING: JobState
JOB_RUNNING: JobState
JOB_SUCCEEDED: JobState
JOB_FAILED: JobState
JOB_KILLED: JobState
TASK_STATE_UNSPECIFIED: TaskState
TASK_PENDING: TaskState
TASK_LAUNCHING: TaskState
TASK_RUNNING: TaskState
TASK_SUSPENDED: TaskState
TASK_SUCCEEDED: TaskState
TASK_FAILED: TaskState
TASK_KILLED: TaskState
TASK_LOST: TaskState

class Resources(_message.Message):
    __slots__ = ("cpu", "memory_mb")
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    cpu: float
    memory_mb: int
    def __init__(self, cpu: _Optional[float] = ..., memory_mb: _Optional[int] = ...) -> None: ...

class PhaseSpec(_message.Message):
    __slots__ = ("name", "tasks", "command", "resources", "after", "image", "droppable")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    DROPPABLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    tasks: int
    command: _containers.RepeatedScalarFieldContainer[str]
    resources: Resources
    after: _containers.RepeatedScalarFieldContainer[str]
    image: str
    droppable: bool
    def __init__(self, name: _Optional[str] = ..., tasks: _Optional[int] = ..., command: _Optional[_Iterable[str]] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., after: _Optional[_Iterable[str]] = ..., image: _Optional[str] = ..., droppable: _Optional[bool] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("name", "priority", "phases", "max_retries", "queue", "reservation", "kind", "service", "speculative", "approximation", "on_node_lost")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_FIELD_NUMBER: _ClassVar[int]
    APPROXIMATION_FIELD_NUMBER: _ClassVar[int]
    ON_NODE_LOST_FIELD_NUMBER: _ClassVar[int]
    name: str
    priority: int
    phases: _containers.RepeatedCompositeFieldContainer[PhaseSpec]
    max_retries: int
    queue: str
    reservation: ReservationSpec
    kind: str
    service: ServiceSpec
    speculative: SpeculativeSpec
    approximation: ApproximationSpec
    on_node_lost: str
    def __init__(self, name: _Optional[str] = ..., priority: _Optional[int] = ..., phases: _Optional[_Iterable[_Union[PhaseSpec, _Mapping]]] = ..., max_retries: _Optional[int] = ..., queue: _Optional[str] = ..., reservation: _Optional[_Union[ReservationSpec, _Mapping]] = ..., kind: _Optional[str] = ..., service: _Optional[_Union[ServiceSpec, _Mapping]] = ..., speculative: _Optional[_Union[SpeculativeSpec, _Mapping]] = ..., approximation: _Optional[_Union[ApproximationSpec, _Mapping]] = ..., on_node_lost: _Optional[str] = ...) -> None: ...

class ApproximationSpec(_message.Message):
    __slots__ = ("drop_ratio",)
    DROP_RATIO_FIELD_NUMBER: _ClassVar[int]
    drop_ratio: float
    def __init__(self, drop_ratio: _Optional[float] = ...) -> None: ...

class SpeculativeSpec(_message.Message):
    __slots__ = ("after_s", "queue_timeout_s", "upgrade_progress", "max_tasks")
    AFTER_S_FIELD_NUMBER: _ClassVar[int]
    QUEUE_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    UPGRADE_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    MAX_TASKS_FIELD_NUMBER: _ClassVar[int]
    after_s: float
    queue_timeout_s: float
    upgrade_progress: float
    max_tasks: int
    def __init__(self, after_s: _Optional[float] = ..., queue_timeout_s: _Optional[float] = ..., upgrade_progress: _Optional[float] = ..., max_tasks: _Optional[int] = ...) -> None: ...

class ServiceSpec(_message.Message):
    __slots__ = ("latency_sensitive", "probe")
    LATENCY_SENSITIVE_FIELD_NUMBER: _ClassVar[int]
    PROBE_FIELD_NUMBER: _ClassVar[int]
    latency_sensitive: bool
    probe: ProbeSpec
    def __init__(self, latency_sensitive: _Optional[bool] = ..., probe: _Optional[_Union[ProbeSpec, _Mapping]] = ...) -> None: ...

class ProbeSpec(_message.Message):
    __slots__ = ("http", "port", "period_s", "timeout_s")
    HTTP_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    PERIOD_S_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    http: str
    port: int
    period_s: float
    timeout_s: float
    def __init__(self, http: _Optional[str] = ..., port: _Optional[int] = ..., period_s: _Optional[float] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class ReservationSpec(_message.Message):
    __slots__ = ("isolation", "prereserve_at", "straggler_copies", "max_copies", "prior")
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    PRERESERVE_AT_FIELD_NUMBER: _ClassVar[int]
    STRAGGLER_COPIES_FIELD_NUMBER: _ClassVar[int]
    MAX_COPIES_FIELD_NUMBER: _ClassVar[int]
    PRIOR_FIELD_NUMBER: _ClassVar[int]
    isolation: float
    prereserve_at: float
    straggler_copies: bool
    max_copies: int
    prior: TaskTimePrior
    def __init__(self, isolation: _Optional[float] = ..., prereserve_at: _Optional[float] = ..., straggler_copies: _Optional[bool] = ..., max_copies: _Optional[int] = ..., prior: _Optional[_Union[TaskTimePrior, _Mapping]] = ...) -> None: ...

class TaskTimePrior(_message.Message):
    __slots__ = ("alpha", "t_min")
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    T_MIN_FIELD_NUMBER: _ClassVar[int]
    alpha: float
    t_min: float
    def __init__(self, alpha: _Optional[float] = ..., t_min: _Optional[float] = ...) -> None: ...

class TaskEvent(_message.Message):
    __slots__ = ("job_id", "task_id", "attempt", "allocation_id", "state", "exit_code", "message", "timestamp", "node_id", "start_time", "job_master", "limits", "preempted", "swapping", "swap_bytes", "speculative", "sprint_factor")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_FIELD_NUMBER: _ClassVar[int]
    SWAPPING_FIELD_NUMBER: _ClassVar[int]
    SWAP_BYTES_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_FIELD_NUMBER: _ClassVar[int]
    SPRINT_FACTOR_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    attempt: int
    allocation_id: str
    state: TaskState
    exit_code: int
    message: str
    timestamp: float
    node_id: str
    start_time: float
    job_master: bool
    limits: Resources
    preempted: bool
    swapping: bool
    swap_bytes: int
    speculative: bool
    sprint_factor: float
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., allocation_id: _Optional[str] = ..., state: _Optional[_Union[TaskState, str]] = ..., exit_code: _Optional[int] = ..., message: _Optional[str] = ..., timestamp: _Optional[float] = ..., node_id: _Optional[str] = ..., start_time: _Optional[float] = ..., job_master: _Optional[bool] = ..., limits: _Optional[_Union[Resources, _Mapping]] = ..., preempted: _Optional[bool] = ..., swapping: _Optional[bool] = ..., swap_bytes: _Optional[int] = ..., speculative: _Optional[bool] = ..., sprint_factor: _Optional[float] = ...) -> None: ...

class DataPlane(_message.Message):
    __slots__ = ("kafka_bootstrap", "metrics_topic", "outcomes_topic", "mqtt_url", "mqtt_topic_prefix", "aggregator_address", "kafka_tls")
    KAFKA_BOOTSTRAP_FIELD_NUMBER: _ClassVar[int]
    METRICS_TOPIC_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_TOPIC_FIELD_NUMBER: _ClassVar[int]
    MQTT_URL_FIELD_NUMBER: _ClassVar[int]
    MQTT_TOPIC_PREFIX_FIELD_NUMBER: _ClassVar[int]
    AGGREGATOR_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    KAFKA_TLS_FIELD_NUMBER: _ClassVar[int]
    kafka_bootstrap: str
    metrics_topic: str
    outcomes_topic: str
    mqtt_url: str
    mqtt_topic_prefix: str
    aggregator_address: str
    kafka_tls: bool
    def __init__(self, kafka_bootstrap: _Optional[str] = ..., metrics_topic: _Optional[str] = ..., outcomes_topic: _Optional[str] = ..., mqtt_url: _Optional[str] = ..., mqtt_topic_prefix: _Optional[str] = ..., aggregator_address: _Optional[str] = ..., kafka_tls: _Optional[bool] = ...) -> None: ...

class SpeculativeQueueState(_message.Message):
    __slots__ = ("queued", "running", "admitted", "refused", "evicted", "throttled", "blocked")
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    THROTTLED_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    queued: int
    running: int
    admitted: int
    refused: int
    evicted: int
    throttled: bool
    blocked: str
    def __init__(self, queued: _Optional[int] = ..., running: _Optional[int] = ..., admitted: _Optional[int] = ..., refused: _Optional[int] = ..., evicted: _Optional[int] = ..., throttled: _Optional[bool] = ..., blocked: _Optional[str] = ...) -> None: ...
