from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskOutcomeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_OUTCOME_UNSPECIFIED: _ClassVar[TaskOutcomeKind]
    TASK_OUTCOME_FINISHED: _ClassVar[TaskOutcomeKind]
    TASK_OUTCOME_FAILED: _ClassVar[TaskOutcomeKind]
    TASK_OUTCOME_KILLED: _ClassVar[TaskOutcomeKind]
    TASK_OUTCOME_EVICTED: _ClassVar[TaskOutcomeKind]
    TASK_OUTCOME_STRAGGLER: _ClassVar[TaskOutcomeKind]
    TASK_OUTCOME_LOST: _ClassVar[TaskOutcomeKind]
TASK_OUTCOME_UNSPECIFIED: TaskOutcomeKind
TASK_OUTCOME_FINISHED: TaskOutcomeKind
TASK_OUTCOME_FAILED: TaskOutcomeKind
TASK_OUTCOME_KILLED: TaskOutcomeKind
TASK_OUTCOME_EVICTED: TaskOutcomeKind
TASK_OUTCOME_STRAGGLER: TaskOutcomeKind
TASK_OUTCOME_LOST: TaskOutcomeKind

class PressureStall(_message.Message):
    __slots__ = ("some_avg10", "some_avg60", "some_avg300", "some_total_us", "full_avg10", "full_avg60", "full_avg300", "full_total_us")
    SOME_AVG10_FIELD_NUMBER: _ClassVar[int]
    SOME_AVG60_FIELD_NUMBER: _ClassVar[int]
    SOME_AVG300_FIELD_NUMBER: _ClassVar[int]
    SOME_TOTAL_US_FIELD_NUMBER: _ClassVar[int]
    FULL_AVG10_FIELD_NUMBER: _ClassVar[int]
    FULL_AVG60_FIELD_NUMBER: _ClassVar[int]
    FULL_AVG300_FIELD_NUMBER: _ClassVar[int]
    FULL_TOTAL_US_FIELD_NUMBER: _ClassVar[int]
    some_avg10: float
    some_avg60: float
    some_avg300: float
    some_total_us: int
    full_avg10: float
    full_avg60: float
    full_avg300: float
    full_total_us: int
    def __init__(self, some_avg10: _Optional[float] = ..., some_avg60: _Optional[float] = ..., some_avg300: _Optional[float] = ..., some_total_us: _Optional[int] = ..., full_avg10: _Optional[float] = ..., full_avg60: _Optional[float] = ..., full_avg300: _Optional[float] = ..., full_total_us: _Optional[int] = ...) -> None: ...

class Pressure(_message.Message):
    __slots__ = ("cpu", "memory", "io")
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    IO_FIELD_NUMBER: _ClassVar[int]
    cpu: PressureStall
    memory: PressureStall
    io: PressureStall
    def __init__(self, cpu: _Optional[_Union[PressureStall, _Mapping]] = ..., memory: _Optional[_Union[PressureStall, _Mapping]] = ..., io: _Optional[_Union[PressureStall, _Mapping]] = ...) -> None: ...

class TaskMetrics(_message.Message):
    __slots__ = ("task_key", "job_id", "task_id", "speculative", "suspended", "cpu_cores", "memory_bytes", "cpu_limit_cores", "memory_limit_bytes", "pressure", "cpi", "mpki")
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_FIELD_NUMBER: _ClassVar[int]
    CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_LIMIT_CORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    PRESSURE_FIELD_NUMBER: _ClassVar[int]
    CPI_FIELD_NUMBER: _ClassVar[int]
    MPKI_FIELD_NUMBER: _ClassVar[int]
    task_key: str
    job_id: str
    task_id: str
    speculative: bool
    suspended: bool
    cpu_cores: float
    memory_bytes: int
    cpu_limit_cores: float
    memory_limit_bytes: int
    pressure: Pressure
    cpi: float
    mpki: float
    def __init__(self, task_key: _Optional[str] = ..., job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., speculative: _Optional[bool] = ..., suspended: _Optional[bool] = ..., cpu_cores: _Optional[float] = ..., memory_bytes: _Optional[int] = ..., cpu_limit_cores: _Optional[float] = ..., memory_limit_bytes: _Optional[int] = ..., pressure: _Optional[_Union[Pressure, _Mapping]] = ..., cpi: _Optional[float] = ..., mpki: _Optional[float] = ...) -> None: ...

class NodeMetrics(_message.Message):
    __slots__ = ("schema_version", "node_id", "timestamp", "sequence", "interval_s", "cpu_capacity", "memory_capacity_bytes", "cpu_utilization", "memory_utilization", "load_average_1m", "disk_throughput_utilization", "disk_busy_utilization", "disk_usage", "net_receive_utilization", "net_transmit_utilization", "regular_running", "regular_waiting", "speculative_running", "speculative_waiting", "pressure", "cpi", "mpki", "counters_unavailable", "tasks", "dropped_samples", "energy_j", "power_w", "energy_source")
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    CPU_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    LOAD_AVERAGE_1M_FIELD_NUMBER: _ClassVar[int]
    DISK_THROUGHPUT_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    DISK_BUSY_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    DISK_USAGE_FIELD_NUMBER: _ClassVar[int]
    NET_RECEIVE_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    NET_TRANSMIT_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    REGULAR_RUNNING_FIELD_NUMBER: _ClassVar[int]
    REGULAR_WAITING_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_RUNNING_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_WAITING_FIELD_NUMBER: _ClassVar[int]
    PRESSURE_FIELD_NUMBER: _ClassVar[int]
    CPI_FIELD_NUMBER: _ClassVar[int]
    MPKI_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    ENERGY_J_FIELD_NUMBER: _ClassVar[int]
    POWER_W_FIELD_NUMBER: _ClassVar[int]
    ENERGY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    schema_version: int
    node_id: str
    timestamp: float
    sequence: int
    interval_s: float
    cpu_capacity: float
    memory_capacity_bytes: int
    cpu_utilization: float
    memory_utilization: float
    load_average_1m: float
    disk_throughput_utilization: float
    disk_busy_utilization: float
    disk_usage: float
    net_receive_utilization: float
    net_transmit_utilization: float
    regular_running: int
    regular_waiting: int
    speculative_running: int
    speculative_waiting: int
    pressure: Pressure
    cpi: float
    mpki: float
    counters_unavailable: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskMetrics]
    dropped_samples: int
    energy_j: float
    power_w: float
    energy_source: str
    def __init__(self, schema_version: _Optional[int] = ..., node_id: _Optional[str] = ..., timestamp: _Optional[float] = ..., sequence: _Optional[int] = ..., interval_s: _Optional[float] = ..., cpu_capacity: _Optional[float] = ..., memory_capacity_bytes: _Optional[int] = ..., cpu_utilization: _Optional[float] = ..., memory_utilization: _Optional[float] = ..., load_average_1m: _Optional[float] = ..., disk_throughput_utilization: _Optional[float] = ..., disk_busy_utilization: _Optional[float] = ..., disk_usage: _Optional[float] = ..., net_receive_utilization: _Optional[float] = ..., net_transmit_utilization: _Optional[float] = ..., regular_running: _Optional[int] = ..., regular_waiting: _Optional[int] = ..., speculative_running: _Optional[int] = ..., speculative_waiting: _Optional[int] = ..., pressure: _Optional[_Union[Pressure, _Mapping]] = ..., cpi: _Optional[float] = ..., mpki: _Optional[float] = ..., counters_unavailable: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskMetrics, _Mapping]]] = ..., dropped_samples: _Optional[int] = ..., energy_j: _Optional[float] = ..., power_w: _Optional[float] = ..., energy_source: _Optional[str] = ...) -> None: ...

class TaskOutcome(_message.Message):
    __slots__ = ("task_id", "attempt", "node_id", "kind")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt: int
    node_id: str
    kind: TaskOutcomeKind
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., node_id: _Optional[str] = ..., kind: _Optional[_Union[TaskOutcomeKind, str]] = ...) -> None: ...

class JobEnded(_message.Message):
    __slots__ = ("final_state",)
    FINAL_STATE_FIELD_NUMBER: _ClassVar[int]
    final_state: str
    def __init__(self, final_state: _Optional[str] = ...) -> None: ...

class OutcomeEvent(_message.Message):
    __slots__ = ("schema_version", "job_id", "timestamp", "task", "job_ended")
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    JOB_ENDED_FIELD_NUMBER: _ClassVar[int]
    schema_version: int
    job_id: str
    timestamp: float
    task: TaskOutcome
    job_ended: JobEnded
    def __init__(self, schema_version: _Optional[int] = ..., job_id: _Optional[str] = ..., timestamp: _Optional[float] = ..., task: _Optional[_Union[TaskOutcome, _Mapping]] = ..., job_ended: _Optional[_Union[JobEnded, _Mapping]] = ...) -> None: ...
