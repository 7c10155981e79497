from sluice_pb import metrics_pb2 as _metrics_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetMachineListRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MachineListReply(_message.Message):
    __slots__ = ("machine_version", "machines", "message")
    MACHINE_VERSION_FIELD_NUMBER: _ClassVar[int]
    MACHINES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    machine_version: int
    machines: _containers.RepeatedScalarFieldContainer[str]
    message: bytes
    def __init__(self, machine_version: _Optional[int] = ..., machines: _Optional[_Iterable[str]] = ..., message: _Optional[bytes] = ...) -> None: ...

class GetCandidatesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CandidatesReply(_message.Message):
    __slots__ = ("machine_version", "candidate_version", "candidates", "message", "computed_at", "ranking", "excluded_summary")
    MACHINE_VERSION_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_VERSION_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_AT_FIELD_NUMBER: _ClassVar[int]
    RANKING_FIELD_NUMBER: _ClassVar[int]
    EXCLUDED_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    machine_version: int
    candidate_version: int
    candidates: _containers.RepeatedScalarFieldContainer[str]
    message: bytes
    computed_at: float
    ranking: str
    excluded_summary: str
    def __init__(self, machine_version: _Optional[int] = ..., candidate_version: _Optional[int] = ..., candidates: _Optional[_Iterable[str]] = ..., message: _Optional[bytes] = ..., computed_at: _Optional[float] = ..., ranking: _Optional[str] = ..., excluded_summary: _Optional[str] = ...) -> None: ...

class ListMachinesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MachineStatus(_message.Message):
    __slots__ = ("node_id", "connected", "last_seen", "window_samples", "approximated_load", "candidate", "rank", "excluded_by", "rating", "latest")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    APPROXIMATED_LOAD_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    EXCLUDED_BY_FIELD_NUMBER: _ClassVar[int]
    RATING_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    connected: bool
    last_seen: float
    window_samples: int
    approximated_load: _containers.RepeatedScalarFieldContainer[float]
    candidate: bool
    rank: int
    excluded_by: str
    rating: float
    latest: _metrics_pb2.NodeMetrics
    def __init__(self, node_id: _Optional[str] = ..., connected: _Optional[bool] = ..., last_seen: _Optional[float] = ..., window_samples: _Optional[int] = ..., approximated_load: _Optional[_Iterable[float]] = ..., candidate: _Optional[bool] = ..., rank: _Optional[int] = ..., excluded_by: _Optional[str] = ..., rating: _Optional[float] = ..., latest: _Optional[_Union[_metrics_pb2.NodeMetrics, _Mapping]] = ...) -> None: ...

class ListMachinesReply(_message.Message):
    __slots__ = ("load_metrics", "machines", "machine_version", "candidate_version", "period_s", "influxdb")
    LOAD_METRICS_FIELD_NUMBER: _ClassVar[int]
    MACHINES_FIELD_NUMBER: _ClassVar[int]
    MACHINE_VERSION_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_VERSION_FIELD_NUMBER: _ClassVar[int]
    PERIOD_S_FIELD_NUMBER: _ClassVar[int]
    INFLUXDB_FIELD_NUMBER: _ClassVar[int]
    load_metrics: _containers.RepeatedScalarFieldContainer[str]
    machines: _containers.RepeatedCompositeFieldContainer[MachineStatus]
    machine_version: int
    candidate_version: int
    period_s: float
    influxdb: bool
    def __init__(self, load_metrics: _Optional[_Iterable[str]] = ..., machines: _Optional[_Iterable[_Union[MachineStatus, _Mapping]]] = ..., machine_version: _Optional[int] = ..., candidate_version: _Optional[int] = ..., period_s: _Optional[float] = ..., influxdb: _Optional[bool] = ...) -> None: ...
