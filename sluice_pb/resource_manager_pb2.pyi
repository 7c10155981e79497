from sluice_pb import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskChange(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_CHANGE_UNSPECIFIED: _ClassVar[TaskChange]
    TASK_SUSPEND: _ClassVar[TaskChange]
    TASK_RESUME: _ClassVar[TaskChange]
    TASK_RESIZE: _ClassVar[TaskChange]
    TASK_PREEMPT: _ClassVar[TaskChange]

class NodeState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_STATE_UNSPECIFIED: _ClassVar[NodeState]
    NODE_READY: _ClassVar[NodeState]
    NODE_LOST: _ClassVar[NodeState]
TASK_CHANGE_UNSPECIFIED: TaskChange
TASK_SUSPEND: TaskChange
TASK_RESUME: TaskChange
TASK_RESIZE: TaskChange
TASK_PREEMPT: TaskChange
NODE_STATE_UNSPECIFIED: NodeState
NODE_READY: NodeState
NODE_LOST: NodeState

class GetSprintRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SprintStatus(_message.Message):
    __slots__ = ("enabled", "budget_s", "capacity_s", "replenish_s_per_hour", "factor", "sprints")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    BUDGET_S_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_S_FIELD_NUMBER: _ClassVar[int]
    REPLENISH_S_PER_HOUR_FIELD_NUMBER: _ClassVar[int]
    FACTOR_FIELD_NUMBER: _ClassVar[int]
    SPRINTS_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    budget_s: float
    capacity_s: float
    replenish_s_per_hour: float
    factor: float
    sprints: _containers.RepeatedCompositeFieldContainer[SprintRun]
    def __init__(self, enabled: _Optional[bool] = ..., budget_s: _Optional[float] = ..., capacity_s: _Optional[float] = ..., replenish_s_per_hour: _Optional[float] = ..., factor: _Optional[float] = ..., sprints: _Optional[_Iterable[_Union[SprintRun, _Mapping]]] = ...) -> None: ...

class SprintRun(_message.Message):
    __slots__ = ("job_id", "started_at", "ended_at", "sprinted_s", "why")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    SPRINTED_S_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    started_at: float
    ended_at: float
    sprinted_s: float
    why: str
    def __init__(self, job_id: _Optional[str] = ..., started_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., sprinted_s: _Optional[float] = ..., why: _Optional[str] = ...) -> None: ...

class GetClusterInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterInfo(_message.Message):
    __slots__ = ("data_plane", "cluster_id", "oversubscription")
    DATA_PLANE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    OVERSUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    data_plane: _common_pb2.DataPlane
    cluster_id: str
    oversubscription: str
    def __init__(self, data_plane: _Optional[_Union[_common_pb2.DataPlane, _Mapping]] = ..., cluster_id: _Optional[str] = ..., oversubscription: _Optional[str] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec", "spec_yaml", "client_mode", "idempotency_key")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SPEC_YAML_FIELD_NUMBER: _ClassVar[int]
    CLIENT_MODE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    spec: _common_pb2.JobSpec
    spec_yaml: str
    client_mode: bool
    idempotency_key: str
    def __init__(self, spec: _Optional[_Union[_common_pb2.JobSpec, _Mapping]] = ..., spec_yaml: _Optional[str] = ..., client_mode: _Optional[bool] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: JobSummary
    def __init__(self, job: _Optional[_Union[JobSummary, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobSummary]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobSummary, _Mapping]]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class PhaseProgress(_message.Message):
    __slots__ = ("name", "tasks", "pending", "running", "succeeded", "failed", "dropped")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    name: str
    tasks: int
    pending: int
    running: int
    succeeded: int
    failed: int
    dropped: int
    def __init__(self, name: _Optional[str] = ..., tasks: _Optional[int] = ..., pending: _Optional[int] = ..., running: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., dropped: _Optional[int] = ...) -> None: ...

class JobSummary(_message.Message):
    __slots__ = ("job_id", "name", "priority", "state", "kill_requested", "submit_time", "start_time", "finish_time", "message", "phases", "master_node", "client_mode", "master_attempt", "owner", "dias")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    KILL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    MASTER_NODE_FIELD_NUMBER: _ClassVar[int]
    CLIENT_MODE_FIELD_NUMBER: _ClassVar[int]
    MASTER_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    DIAS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    priority: int
    state: _common_pb2.JobState
    kill_requested: bool
    submit_time: float
    start_time: float
    finish_time: float
    message: str
    phases: _containers.RepeatedCompositeFieldContainer[PhaseProgress]
    master_node: str
    client_mode: bool
    master_attempt: int
    owner: str
    dias: DiasInfo
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., priority: _Optional[int] = ..., state: _Optional[_Union[_common_pb2.JobState, str]] = ..., kill_requested: _Optional[bool] = ..., submit_time: _Optional[float] = ..., start_time: _Optional[float] = ..., finish_time: _Optional[float] = ..., message: _Optional[str] = ..., phases: _Optional[_Iterable[_Union[PhaseProgress, _Mapping]]] = ..., master_node: _Optional[str] = ..., client_mode: _Optional[bool] = ..., master_attempt: _Optional[int] = ..., owner: _Optional[str] = ..., dias: _Optional[_Union[DiasInfo, _Mapping]] = ...) -> None: ...

class DiasInfo(_message.Message):
    __slots__ = ("buffered", "drop_ratio", "dropped_tasks", "expected_error", "execution", "evictions", "wasted_s", "sprinting", "sprinted_s")
    BUFFERED_FIELD_NUMBER: _ClassVar[int]
    DROP_RATIO_FIELD_NUMBER: _ClassVar[int]
    DROPPED_TASKS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_ERROR_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    WASTED_S_FIELD_NUMBER: _ClassVar[int]
    SPRINTING_FIELD_NUMBER: _ClassVar[int]
    SPRINTED_S_FIELD_NUMBER: _ClassVar[int]
    buffered: bool
    drop_ratio: float
    dropped_tasks: int
    expected_error: float
    execution: int
    evictions: int
    wasted_s: float
    sprinting: bool
    sprinted_s: float
    def __init__(self, buffered: _Optional[bool] = ..., drop_ratio: _Optional[float] = ..., dropped_tasks: _Optional[int] = ..., expected_error: _Optional[float] = ..., execution: _Optional[int] = ..., evictions: _Optional[int] = ..., wasted_s: _Optional[float] = ..., sprinting: _Optional[bool] = ..., sprinted_s: _Optional[float] = ...) -> None: ...

class TaskInfo(_message.Message):
    __slots__ = ("task_id", "phase", "attempt", "state", "node_id", "allocation_id", "exit_code", "start_time", "finish_time", "message", "node_address", "preemptions", "log_pass", "held_by")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NODE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    LOG_PASS_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    phase: str
    attempt: int
    state: _common_pb2.TaskState
    node_id: str
    allocation_id: str
    exit_code: int
    start_time: float
    finish_time: float
    message: str
    node_address: str
    preemptions: _containers.RepeatedCompositeFieldContainer[PreemptionEvent]
    log_pass: bytes
    held_by: str
    def __init__(self, task_id: _Optional[str] = ..., phase: _Optional[str] = ..., attempt: _Optional[int] = ..., state: _Optional[_Union[_common_pb2.TaskState, str]] = ..., node_id: _Optional[str] = ..., allocation_id: _Optional[str] = ..., exit_code: _Optional[int] = ..., start_time: _Optional[float] = ..., finish_time: _Optional[float] = ..., message: _Optional[str] = ..., node_address: _Optional[str] = ..., preemptions: _Optional[_Iterable[_Union[PreemptionEvent, _Mapping]]] = ..., log_pass: _Optional[bytes] = ..., held_by: _Optional[str] = ...) -> None: ...

class PreemptionEvent(_message.Message):
    __slots__ = ("time", "action", "limits", "reason", "work_lost_s")
    TIME_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    WORK_LOST_S_FIELD_NUMBER: _ClassVar[int]
    time: float
    action: str
    limits: _common_pb2.Resources
    reason: str
    work_lost_s: float
    def __init__(self, time: _Optional[float] = ..., action: _Optional[str] = ..., limits: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., reason: _Optional[str] = ..., work_lost_s: _Optional[float] = ...) -> None: ...

class JobDetail(_message.Message):
    __slots__ = ("summary", "spec", "tasks", "kept", "speculative", "kept_ended", "pending")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    KEPT_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_FIELD_NUMBER: _ClassVar[int]
    KEPT_ENDED_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    summary: JobSummary
    spec: _common_pb2.JobSpec
    tasks: _containers.RepeatedCompositeFieldContainer[TaskInfo]
    kept: _containers.RepeatedCompositeFieldContainer[ReservedSlot]
    speculative: _containers.RepeatedCompositeFieldContainer[SpeculativeAttempt]
    kept_ended: _containers.RepeatedCompositeFieldContainer[ReservedSlot]
    pending: _containers.RepeatedCompositeFieldContainer[PendingReason]
    def __init__(self, summary: _Optional[_Union[JobSummary, _Mapping]] = ..., spec: _Optional[_Union[_common_pb2.JobSpec, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[TaskInfo, _Mapping]]] = ..., kept: _Optional[_Iterable[_Union[ReservedSlot, _Mapping]]] = ..., speculative: _Optional[_Iterable[_Union[SpeculativeAttempt, _Mapping]]] = ..., kept_ended: _Optional[_Iterable[_Union[ReservedSlot, _Mapping]]] = ..., pending: _Optional[_Iterable[_Union[PendingReason, _Mapping]]] = ...) -> None: ...

class PendingReason(_message.Message):
    __slots__ = ("phase", "job_master", "count", "resources", "held_back", "nodes", "available", "reasons", "text")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    JOB_MASTER_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    HELD_BACK_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    phase: str
    job_master: bool
    count: int
    resources: _common_pb2.Resources
    held_back: str
    nodes: int
    available: int
    reasons: _containers.RepeatedCompositeFieldContainer[NodeReason]
    text: str
    def __init__(self, phase: _Optional[str] = ..., job_master: _Optional[bool] = ..., count: _Optional[int] = ..., resources: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., held_back: _Optional[str] = ..., nodes: _Optional[int] = ..., available: _Optional[int] = ..., reasons: _Optional[_Iterable[_Union[NodeReason, _Mapping]]] = ..., text: _Optional[str] = ...) -> None: ...

class NodeReason(_message.Message):
    __slots__ = ("reason", "nodes")
    REASON_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    reason: str
    nodes: int
    def __init__(self, reason: _Optional[str] = ..., nodes: _Optional[int] = ...) -> None: ...

class SpeculativeAttempt(_message.Message):
    __slots__ = ("task_id", "attempt", "node_id", "outcome", "message")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt: int
    node_id: str
    outcome: str
    message: str
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., node_id: _Optional[str] = ..., outcome: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ChangeTaskRequest(_message.Message):
    __slots__ = ("job_id", "task_id", "change", "limits", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    change: TaskChange
    limits: _common_pb2.Resources
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., change: _Optional[_Union[TaskChange, str]] = ..., limits: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class ChangeTaskResponse(_message.Message):
    __slots__ = ("allocation_id", "node_id", "goal", "limits")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    node_id: str
    goal: str
    limits: _common_pb2.Resources
    def __init__(self, allocation_id: _Optional[str] = ..., node_id: _Optional[str] = ..., goal: _Optional[str] = ..., limits: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueueInfo(_message.Message):
    __slots__ = ("name", "share", "max_share", "mode", "usage", "pending", "preempted", "suspended", "shrunk", "running_jobs", "graceful_step", "minimal_footprint", "resume_after_offers", "max_suspended_s", "is_default")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    MAX_SHARE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_FIELD_NUMBER: _ClassVar[int]
    SHRUNK_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    GRACEFUL_STEP_FIELD_NUMBER: _ClassVar[int]
    MINIMAL_FOOTPRINT_FIELD_NUMBER: _ClassVar[int]
    RESUME_AFTER_OFFERS_FIELD_NUMBER: _ClassVar[int]
    MAX_SUSPENDED_S_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    name: str
    share: float
    max_share: float
    mode: str
    usage: _common_pb2.Resources
    pending: _common_pb2.Resources
    preempted: _common_pb2.Resources
    suspended: int
    shrunk: int
    running_jobs: int
    graceful_step: _common_pb2.Resources
    minimal_footprint: _common_pb2.Resources
    resume_after_offers: int
    max_suspended_s: float
    is_default: bool
    def __init__(self, name: _Optional[str] = ..., share: _Optional[float] = ..., max_share: _Optional[float] = ..., mode: _Optional[str] = ..., usage: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., pending: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., preempted: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., suspended: _Optional[int] = ..., shrunk: _Optional[int] = ..., running_jobs: _Optional[int] = ..., graceful_step: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., minimal_footprint: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., resume_after_offers: _Optional[int] = ..., max_suspended_s: _Optional[float] = ..., is_default: _Optional[bool] = ...) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues", "capacity", "source", "loaded_at")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    LOADED_AT_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueInfo]
    capacity: _common_pb2.Resources
    source: str
    loaded_at: float
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueInfo, _Mapping]]] = ..., capacity: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., source: _Optional[str] = ..., loaded_at: _Optional[float] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeInfo(_message.Message):
    __slots__ = ("node_id", "address", "runtime", "capacity", "allocated", "used", "state", "last_heartbeat", "running_tasks", "has_swap", "opportunistic", "speculative_tasks", "speculative")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    RUNNING_TASKS_FIELD_NUMBER: _ClassVar[int]
    HAS_SWAP_FIELD_NUMBER: _ClassVar[int]
    OPPORTUNISTIC_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_TASKS_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    runtime: str
    capacity: _common_pb2.Resources
    allocated: _common_pb2.Resources
    used: _common_pb2.Resources
    state: NodeState
    last_heartbeat: float
    running_tasks: int
    has_swap: bool
    opportunistic: _common_pb2.Resources
    speculative_tasks: int
    speculative: _common_pb2.SpeculativeQueueState
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., runtime: _Optional[str] = ..., capacity: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., allocated: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., used: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., state: _Optional[_Union[NodeState, str]] = ..., last_heartbeat: _Optional[float] = ..., running_tasks: _Optional[int] = ..., has_swap: _Optional[bool] = ..., opportunistic: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., speculative_tasks: _Optional[int] = ..., speculative: _Optional[_Union[_common_pb2.SpeculativeQueueState, _Mapping]] = ...) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ...) -> None: ...

class RegisterNodeRequest(_message.Message):
    __slots__ = ("node_id", "address", "capacity", "runtime", "live_tasks", "instance_id", "cluster_id", "has_swap", "session")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    LIVE_TASKS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    HAS_SWAP_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    capacity: _common_pb2.Resources
    runtime: str
    live_tasks: _containers.RepeatedCompositeFieldContainer[_common_pb2.TaskEvent]
    instance_id: str
    cluster_id: str
    has_swap: bool
    session: str
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., capacity: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., runtime: _Optional[str] = ..., live_tasks: _Optional[_Iterable[_Union[_common_pb2.TaskEvent, _Mapping]]] = ..., instance_id: _Optional[str] = ..., cluster_id: _Optional[str] = ..., has_swap: _Optional[bool] = ..., session: _Optional[str] = ...) -> None: ...

class RegisterNodeResponse(_message.Message):
    __slots__ = ("heartbeat_interval_s", "data_plane", "cluster_id", "grant_key", "oversubscription", "node_timeout_s")
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    DATA_PLANE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    GRANT_KEY_FIELD_NUMBER: _ClassVar[int]
    OVERSUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    NODE_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    heartbeat_interval_s: float
    data_plane: _common_pb2.DataPlane
    cluster_id: str
    grant_key: bytes
    oversubscription: str
    node_timeout_s: float
    def __init__(self, heartbeat_interval_s: _Optional[float] = ..., data_plane: _Optional[_Union[_common_pb2.DataPlane, _Mapping]] = ..., cluster_id: _Optional[str] = ..., grant_key: _Optional[bytes] = ..., oversubscription: _Optional[str] = ..., node_timeout_s: _Optional[float] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("node_id", "used", "live_tasks", "instance_id", "has_swap", "speculative")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    LIVE_TASKS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    HAS_SWAP_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    used: _common_pb2.Resources
    live_tasks: _containers.RepeatedCompositeFieldContainer[_common_pb2.TaskEvent]
    instance_id: str
    has_swap: bool
    speculative: _common_pb2.SpeculativeQueueState
    def __init__(self, node_id: _Optional[str] = ..., used: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., live_tasks: _Optional[_Iterable[_Union[_common_pb2.TaskEvent, _Mapping]]] = ..., instance_id: _Optional[str] = ..., has_swap: _Optional[bool] = ..., speculative: _Optional[_Union[_common_pb2.SpeculativeQueueState, _Mapping]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("reregister", "commands")
    REREGISTER_FIELD_NUMBER: _ClassVar[int]
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    reregister: bool
    commands: _containers.RepeatedCompositeFieldContainer[NodeCommand]
    def __init__(self, reregister: _Optional[bool] = ..., commands: _Optional[_Iterable[_Union[NodeCommand, _Mapping]]] = ...) -> None: ...

class NodeCommand(_message.Message):
    __slots__ = ("launch_master", "stop_allocation", "suspend_allocation", "resume_allocation", "resize_allocation", "sprint_allocation")
    LAUNCH_MASTER_FIELD_NUMBER: _ClassVar[int]
    STOP_ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    RESUME_ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    RESIZE_ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    SPRINT_ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    launch_master: LaunchMaster
    stop_allocation: StopAllocation
    suspend_allocation: SuspendAllocation
    resume_allocation: ResumeAllocation
    resize_allocation: ResizeAllocation
    sprint_allocation: SprintAllocation
    def __init__(self, launch_master: _Optional[_Union[LaunchMaster, _Mapping]] = ..., stop_allocation: _Optional[_Union[StopAllocation, _Mapping]] = ..., suspend_allocation: _Optional[_Union[SuspendAllocation, _Mapping]] = ..., resume_allocation: _Optional[_Union[ResumeAllocation, _Mapping]] = ..., resize_allocation: _Optional[_Union[ResizeAllocation, _Mapping]] = ..., sprint_allocation: _Optional[_Union[SprintAllocation, _Mapping]] = ...) -> None: ...

class SprintAllocation(_message.Message):
    __slots__ = ("job_id", "allocation_id", "factor")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    FACTOR_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    allocation_id: str
    factor: float
    def __init__(self, job_id: _Optional[str] = ..., allocation_id: _Optional[str] = ..., factor: _Optional[float] = ...) -> None: ...

class SuspendAllocation(_message.Message):
    __slots__ = ("job_id", "allocation_id", "reason", "limits")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    allocation_id: str
    reason: str
    limits: _common_pb2.Resources
    def __init__(self, job_id: _Optional[str] = ..., allocation_id: _Optional[str] = ..., reason: _Optional[str] = ..., limits: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ...) -> None: ...

class ResumeAllocation(_message.Message):
    __slots__ = ("job_id", "allocation_id", "limits")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    allocation_id: str
    limits: _common_pb2.Resources
    def __init__(self, job_id: _Optional[str] = ..., allocation_id: _Optional[str] = ..., limits: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ...) -> None: ...

class ResizeAllocation(_message.Message):
    __slots__ = ("job_id", "allocation_id", "limits", "step", "freeze_on_swap")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    FREEZE_ON_SWAP_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    allocation_id: str
    limits: _common_pb2.Resources
    step: _common_pb2.Resources
    freeze_on_swap: bool
    def __init__(self, job_id: _Optional[str] = ..., allocation_id: _Optional[str] = ..., limits: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., step: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., freeze_on_swap: _Optional[bool] = ...) -> None: ...

class LaunchMaster(_message.Message):
    __slots__ = ("job_id", "allocation_id", "resources", "rm_address", "attempt", "tls_cert_chain_pem", "tls_key_pem")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    RM_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TLS_CERT_CHAIN_PEM_FIELD_NUMBER: _ClassVar[int]
    TLS_KEY_PEM_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    allocation_id: str
    resources: _common_pb2.Resources
    rm_address: str
    attempt: int
    tls_cert_chain_pem: bytes
    tls_key_pem: bytes
    def __init__(self, job_id: _Optional[str] = ..., allocation_id: _Optional[str] = ..., resources: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., rm_address: _Optional[str] = ..., attempt: _Optional[int] = ..., tls_cert_chain_pem: _Optional[bytes] = ..., tls_key_pem: _Optional[bytes] = ...) -> None: ...

class StopAllocation(_message.Message):
    __slots__ = ("job_id", "allocation_id", "reason", "preempted")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    allocation_id: str
    reason: str
    preempted: bool
    def __init__(self, job_id: _Optional[str] = ..., allocation_id: _Optional[str] = ..., reason: _Optional[str] = ..., preempted: _Optional[bool] = ...) -> None: ...

class ReportTaskEventsRequest(_message.Message):
    __slots__ = ("node_id", "events", "session")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    events: _containers.RepeatedCompositeFieldContainer[_common_pb2.TaskEvent]
    session: str
    def __init__(self, node_id: _Optional[str] = ..., events: _Optional[_Iterable[_Union[_common_pb2.TaskEvent, _Mapping]]] = ..., session: _Optional[str] = ...) -> None: ...

class ReportTaskEventsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RegisterMasterRequest(_message.Message):
    __slots__ = ("job_id", "attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class RegisterMasterResponse(_message.Message):
    __slots__ = ("spec", "kill_requested", "allocations", "data_plane", "history", "execution", "drop_ratio")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    KILL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    DATA_PLANE_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    DROP_RATIO_FIELD_NUMBER: _ClassVar[int]
    spec: _common_pb2.JobSpec
    kill_requested: bool
    allocations: _containers.RepeatedCompositeFieldContainer[Allocation]
    data_plane: _common_pb2.DataPlane
    history: _containers.RepeatedCompositeFieldContainer[SequencedTaskEvent]
    execution: int
    drop_ratio: float
    def __init__(self, spec: _Optional[_Union[_common_pb2.JobSpec, _Mapping]] = ..., kill_requested: _Optional[bool] = ..., allocations: _Optional[_Iterable[_Union[Allocation, _Mapping]]] = ..., data_plane: _Optional[_Union[_common_pb2.DataPlane, _Mapping]] = ..., history: _Optional[_Iterable[_Union[SequencedTaskEvent, _Mapping]]] = ..., execution: _Optional[int] = ..., drop_ratio: _Optional[float] = ...) -> None: ...

class Ask(_message.Message):
    __slots__ = ("phase", "count", "resources", "preferred_nodes", "local_only")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_NODES_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ONLY_FIELD_NUMBER: _ClassVar[int]
    phase: str
    count: int
    resources: _common_pb2.Resources
    preferred_nodes: _containers.RepeatedScalarFieldContainer[str]
    local_only: bool
    def __init__(self, phase: _Optional[str] = ..., count: _Optional[int] = ..., resources: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., preferred_nodes: _Optional[_Iterable[str]] = ..., local_only: _Optional[bool] = ...) -> None: ...

class Allocation(_message.Message):
    __slots__ = ("allocation_id", "job_id", "phase", "node_id", "node_address", "resources", "grant_token")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    GRANT_TOKEN_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    job_id: str
    phase: str
    node_id: str
    node_address: str
    resources: _common_pb2.Resources
    grant_token: bytes
    def __init__(self, allocation_id: _Optional[str] = ..., job_id: _Optional[str] = ..., phase: _Optional[str] = ..., node_id: _Optional[str] = ..., node_address: _Optional[str] = ..., resources: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., grant_token: _Optional[bytes] = ...) -> None: ...

class AllocateRequest(_message.Message):
    __slots__ = ("job_id", "asks", "releases", "progress", "events_after", "master_attempt", "kept", "resolve_nodes", "speculative")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ASKS_FIELD_NUMBER: _ClassVar[int]
    RELEASES_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_AFTER_FIELD_NUMBER: _ClassVar[int]
    MASTER_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    KEPT_FIELD_NUMBER: _ClassVar[int]
    RESOLVE_NODES_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    asks: _containers.RepeatedCompositeFieldContainer[Ask]
    releases: _containers.RepeatedScalarFieldContainer[str]
    progress: _containers.RepeatedCompositeFieldContainer[PhaseProgress]
    events_after: int
    master_attempt: int
    kept: _containers.RepeatedCompositeFieldContainer[ReservedSlot]
    resolve_nodes: _containers.RepeatedScalarFieldContainer[str]
    speculative: _containers.RepeatedCompositeFieldContainer[SpeculativeAttempt]
    def __init__(self, job_id: _Optional[str] = ..., asks: _Optional[_Iterable[_Union[Ask, _Mapping]]] = ..., releases: _Optional[_Iterable[str]] = ..., progress: _Optional[_Iterable[_Union[PhaseProgress, _Mapping]]] = ..., events_after: _Optional[int] = ..., master_attempt: _Optional[int] = ..., kept: _Optional[_Iterable[_Union[ReservedSlot, _Mapping]]] = ..., resolve_nodes: _Optional[_Iterable[str]] = ..., speculative: _Optional[_Iterable[_Union[SpeculativeAttempt, _Mapping]]] = ...) -> None: ...

class ReservedSlot(_message.Message):
    __slots__ = ("allocation_id", "phase", "until", "node_id", "ended", "ended_at")
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    allocation_id: str
    phase: str
    until: float
    node_id: str
    ended: str
    ended_at: float
    def __init__(self, allocation_id: _Optional[str] = ..., phase: _Optional[str] = ..., until: _Optional[float] = ..., node_id: _Optional[str] = ..., ended: _Optional[str] = ..., ended_at: _Optional[float] = ...) -> None: ...

class SequencedTaskEvent(_message.Message):
    __slots__ = ("seq", "event", "execution")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    seq: int
    event: _common_pb2.TaskEvent
    execution: int
    def __init__(self, seq: _Optional[int] = ..., event: _Optional[_Union[_common_pb2.TaskEvent, _Mapping]] = ..., execution: _Optional[int] = ...) -> None: ...

class AllocateResponse(_message.Message):
    __slots__ = ("granted", "events", "lost_allocations", "kill_requested", "node_addresses", "speculative_passes")
    class NodeAddressesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class SpeculativePassesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    LOST_ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    KILL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    NODE_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_PASSES_FIELD_NUMBER: _ClassVar[int]
    granted: _containers.RepeatedCompositeFieldContainer[Allocation]
    events: _containers.RepeatedCompositeFieldContainer[SequencedTaskEvent]
    lost_allocations: _containers.RepeatedScalarFieldContainer[str]
    kill_requested: bool
    node_addresses: _containers.ScalarMap[str, str]
    speculative_passes: _containers.ScalarMap[str, bytes]
    def __init__(self, granted: _Optional[_Iterable[_Union[Allocation, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[SequencedTaskEvent, _Mapping]]] = ..., lost_allocations: _Optional[_Iterable[str]] = ..., kill_requested: _Optional[bool] = ..., node_addresses: _Optional[_Mapping[str, str]] = ..., speculative_passes: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class FinishJobRequest(_message.Message):
    __slots__ = ("job_id", "state", "message", "progress", "master_attempt", "speculative")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    MASTER_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    state: _common_pb2.JobState
    message: str
    progress: _containers.RepeatedCompositeFieldContainer[PhaseProgress]
    master_attempt: int
    speculative: _containers.RepeatedCompositeFieldContainer[SpeculativeAttempt]
    def __init__(self, job_id: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.JobState, str]] = ..., message: _Optional[str] = ..., progress: _Optional[_Iterable[_Union[PhaseProgress, _Mapping]]] = ..., master_attempt: _Optional[int] = ..., speculative: _Optional[_Iterable[_Union[SpeculativeAttempt, _Mapping]]] = ...) -> None: ...

class FinishJobResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
