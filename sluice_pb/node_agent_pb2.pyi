from sluice_pb import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StartTaskRequest(_message.Message):
    __slots__ = ("job_id", "task_id", "attempt", "allocation_id", "command", "resources", "image", "env", "grant_token", "service", "run_on_node_lost")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    GRANT_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    RUN_ON_NODE_LOST_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    attempt: int
    allocation_id: str
    command: _containers.RepeatedScalarFieldContainer[str]
    resources: _common_pb2.Resources
    image: str
    env: _containers.ScalarMap[str, str]
    grant_token: bytes
    service: _common_pb2.ServiceSpec
    run_on_node_lost: bool
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., allocation_id: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., resources: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., image: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., grant_token: _Optional[bytes] = ..., service: _Optional[_Union[_common_pb2.ServiceSpec, _Mapping]] = ..., run_on_node_lost: _Optional[bool] = ...) -> None: ...

class StartTaskResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: TaskStatus
    def __init__(self, status: _Optional[_Union[TaskStatus, _Mapping]] = ...) -> None: ...

class TaskRef(_message.Message):
    __slots__ = ("job_id", "task_id", "attempt", "grant_token", "speculative_pass", "log_pass")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    GRANT_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_PASS_FIELD_NUMBER: _ClassVar[int]
    LOG_PASS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    attempt: int
    grant_token: bytes
    speculative_pass: bytes
    log_pass: bytes
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., grant_token: _Optional[bytes] = ..., speculative_pass: _Optional[bytes] = ..., log_pass: _Optional[bytes] = ...) -> None: ...

class ResizeTaskRequest(_message.Message):
    __slots__ = ("task", "resources", "cpuset")
    TASK_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    CPUSET_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    resources: _common_pb2.Resources
    cpuset: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ..., resources: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., cpuset: _Optional[_Iterable[int]] = ...) -> None: ...

class TaskStatus(_message.Message):
    __slots__ = ("task", "allocation_id", "state", "exit_code", "limits", "cpuset", "cpu_seconds", "memory_bytes", "service")
    TASK_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    CPUSET_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    allocation_id: str
    state: _common_pb2.TaskState
    exit_code: int
    limits: _common_pb2.Resources
    cpuset: _containers.RepeatedScalarFieldContainer[int]
    cpu_seconds: float
    memory_bytes: int
    service: ServiceHealth
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ..., allocation_id: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.TaskState, str]] = ..., exit_code: _Optional[int] = ..., limits: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., cpuset: _Optional[_Iterable[int]] = ..., cpu_seconds: _Optional[float] = ..., memory_bytes: _Optional[int] = ..., service: _Optional[_Union[ServiceHealth, _Mapping]] = ...) -> None: ...

class ServiceHealth(_message.Message):
    __slots__ = ("latency_p50_s", "latency_p95_s", "probes", "probes_failed", "last_problem", "anomalous", "indicator", "value", "bound", "judging")
    LATENCY_P50_S_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P95_S_FIELD_NUMBER: _ClassVar[int]
    PROBES_FIELD_NUMBER: _ClassVar[int]
    PROBES_FAILED_FIELD_NUMBER: _ClassVar[int]
    LAST_PROBLEM_FIELD_NUMBER: _ClassVar[int]
    ANOMALOUS_FIELD_NUMBER: _ClassVar[int]
    INDICATOR_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    BOUND_FIELD_NUMBER: _ClassVar[int]
    JUDGING_FIELD_NUMBER: _ClassVar[int]
    latency_p50_s: float
    latency_p95_s: float
    probes: int
    probes_failed: int
    last_problem: str
    anomalous: bool
    indicator: str
    value: float
    bound: float
    judging: bool
    def __init__(self, latency_p50_s: _Optional[float] = ..., latency_p95_s: _Optional[float] = ..., probes: _Optional[int] = ..., probes_failed: _Optional[int] = ..., last_problem: _Optional[str] = ..., anomalous: _Optional[bool] = ..., indicator: _Optional[str] = ..., value: _Optional[float] = ..., bound: _Optional[float] = ..., judging: _Optional[bool] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskStatus]
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskStatus, _Mapping]]] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ("exit_after",)
    EXIT_AFTER_FIELD_NUMBER: _ClassVar[int]
    exit_after: bool
    def __init__(self, exit_after: _Optional[bool] = ...) -> None: ...

class DrainResponse(_message.Message):
    __slots__ = ("stopped_tasks",)
    STOPPED_TASKS_FIELD_NUMBER: _ClassVar[int]
    stopped_tasks: int
    def __init__(self, stopped_tasks: _Optional[int] = ...) -> None: ...

class EnqueueSpeculativeRequest(_message.Message):
    __slots__ = ("task", "speculative_pass")
    TASK_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_PASS_FIELD_NUMBER: _ClassVar[int]
    task: StartTaskRequest
    speculative_pass: bytes
    def __init__(self, task: _Optional[_Union[StartTaskRequest, _Mapping]] = ..., speculative_pass: _Optional[bytes] = ...) -> None: ...

class EnqueueSpeculativeResponse(_message.Message):
    __slots__ = ("accepted", "reason", "queue_length", "task")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    QUEUE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    reason: str
    queue_length: int
    task: SpeculativeTask
    def __init__(self, accepted: _Optional[bool] = ..., reason: _Optional[str] = ..., queue_length: _Optional[int] = ..., task: _Optional[_Union[SpeculativeTask, _Mapping]] = ...) -> None: ...

class UpgradeSpeculativeRequest(_message.Message):
    __slots__ = ("task", "allocation_id", "resources", "grant_token")
    TASK_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    GRANT_TOKEN_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    allocation_id: str
    resources: _common_pb2.Resources
    grant_token: bytes
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ..., allocation_id: _Optional[str] = ..., resources: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., grant_token: _Optional[bytes] = ...) -> None: ...

class ListSpeculativeRequest(_message.Message):
    __slots__ = ("job_id", "speculative_pass")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_PASS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    speculative_pass: bytes
    def __init__(self, job_id: _Optional[str] = ..., speculative_pass: _Optional[bytes] = ...) -> None: ...

class ListSpeculativeResponse(_message.Message):
    __slots__ = ("tasks", "queue")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[SpeculativeTask]
    queue: _common_pb2.SpeculativeQueueState
    def __init__(self, tasks: _Optional[_Iterable[_Union[SpeculativeTask, _Mapping]]] = ..., queue: _Optional[_Union[_common_pb2.SpeculativeQueueState, _Mapping]] = ...) -> None: ...

class SpeculativeTask(_message.Message):
    __slots__ = ("task", "state", "evicted", "message", "queue_position", "enqueued_at", "started_at", "exit_code", "allocation_id", "upgraded")
    TASK_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    UPGRADED_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    state: _common_pb2.TaskState
    evicted: bool
    message: str
    queue_position: int
    enqueued_at: float
    started_at: float
    exit_code: int
    allocation_id: str
    upgraded: bool
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ..., state: _Optional[_Union[_common_pb2.TaskState, str]] = ..., evicted: _Optional[bool] = ..., message: _Optional[str] = ..., queue_position: _Optional[int] = ..., enqueued_at: _Optional[float] = ..., started_at: _Optional[float] = ..., exit_code: _Optional[int] = ..., allocation_id: _Optional[str] = ..., upgraded: _Optional[bool] = ...) -> None: ...
