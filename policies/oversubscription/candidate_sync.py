"""Incremental candidate synchronisation between aggregator and job masters (ROSE Sec. 5.2).

The aggregator (CA) versions its full machine list (``ver_m``, bumped when machines join or
leave) and every Alg. 4 result (``ver_c``). Instead of the candidate list it sends
``(ver_m, ver_c, bit vector over the machine list)``; a job master (JM) applies it only if its
local list has the same ``ver_m`` and otherwise asks for the full list. The JM piggybacks its
``ver_m`` on heartbeats and the CA answers an older one with the full list
(``needs_full_list``).

As an extension, the CA may send a *delta* instead of the bit vector: the machine positions
whose membership flipped since candidate version ``base``. A JM whose candidate version is not
``base`` cannot apply it and asks for the bit vector. ``encode_candidates`` picks whichever is
smaller, so in steady state (few changes) a message is a few bytes.

Wire format (big-endian): a kind byte, then

* ``L`` (full list): ``ver_m:u64, count:u32``, then the names, UTF-8, separated by ``\\n``;
* ``C`` (bit vector): ``ver_m:u64, ver_c:u64, count:u32``, then ``ceil(count/8)`` bytes, machine
  ``i`` at bit ``7 - i % 8`` of byte ``i // 8`` (numpy ``packbits`` order);
* ``D`` (delta): ``ver_m:u64, ver_c:u64, base:u64, count:u32, flips:u32``, then the flipped
  positions as u16 when ``count <= 65536``, else u32, ascending.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

BoolArray = NDArray[np.bool_]

_LIST = b"L"
_BITS = b"C"
_DELTA = b"D"
_LIST_HEADER = struct.Struct(">cQI")
_BITS_HEADER = struct.Struct(">cQQI")
_DELTA_HEADER = struct.Struct(">cQQQII")
_SEPARATOR = b"\n"


@dataclass(frozen=True)
class MachineList:
    """The aggregator's full machine list and its version ``ver_m``."""

    version: int
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.version < 0:
            raise ValueError("machine_list.version: must be non-negative")
        for position, name in enumerate(self.names):
            if not name or "\n" in name:
                raise ValueError(f"machine_list.names[{position}]: must be a non-empty line")


class SyncAction(Enum):
    """What a job master did with a message, and what it must ask for next."""

    APPLIED = "applied"
    IGNORED_STALE = "ignored_stale"  # older than what the replica already holds
    NEED_FULL_LIST = "need_full_list"  # machine list version mismatch: full resync
    NEED_CANDIDATES = "need_candidates"  # delta against a version the replica does not hold


@dataclass(frozen=True, eq=False)
class LocalReplica:
    """A job master's replica: the machine list and the latest candidate bit vector.

    Compared by identity: an unchanged replica is returned as the same object."""

    machines: MachineList = MachineList(version=0, names=())
    candidate_version: int = 0
    membership: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))

    def __post_init__(self) -> None:
        membership = np.array(self.membership, dtype=np.bool_)
        if membership.shape != (len(self.machines.names),):
            raise ValueError("replica.membership: expected one flag per machine")
        membership.flags.writeable = False
        object.__setattr__(self, "membership", membership)

    @property
    def candidates(self) -> tuple[str, ...]:
        """Names of the current candidates, in machine-list order."""
        names = self.machines.names
        return tuple(names[i] for i in np.flatnonzero(self.membership))


@dataclass(frozen=True)
class SyncResult:
    """The replica after a message, and the action taken."""

    replica: LocalReplica
    action: SyncAction


def needs_full_list(local_machine_version: int, aggregator_machine_version: int) -> bool:
    """CA side, on a heartbeat: must this JM get the full machine list (Sec. 5.2)?"""
    return local_machine_version < aggregator_machine_version


def encode_machine_list(machines: MachineList) -> bytes:
    """The ``L`` message: the full machine list."""
    body = _SEPARATOR.join(name.encode() for name in machines.names)
    return _LIST_HEADER.pack(_LIST, machines.version, len(machines.names)) + body


def encode_candidates(
    machine_version: int,
    candidate_version: int,
    membership: ArrayLike,
    *,
    previous: tuple[int, ArrayLike] | None = None,
) -> bytes:
    """A ``C`` bit-vector message, or a ``D`` delta against ``previous = (ver_c, membership)``
    when that is shorter."""
    current = np.asarray(membership, dtype=np.bool_)
    if current.ndim != 1:
        raise ValueError("membership: expected one flag per machine")
    count = current.size
    bits = _BITS_HEADER.pack(_BITS, machine_version, candidate_version, count)
    bits += np.packbits(current).tobytes()
    if previous is None:
        return bits
    base_version, base_membership = previous
    base = np.asarray(base_membership, dtype=np.bool_)
    if base.shape != current.shape:
        return bits
    flips = np.flatnonzero(base != current)
    dtype = ">u2" if count <= 1 << 16 else ">u4"
    delta = _DELTA_HEADER.pack(
        _DELTA, machine_version, candidate_version, base_version, count, flips.size
    )
    delta += flips.astype(dtype).tobytes()
    return delta if len(delta) < len(bits) else bits


def apply_message(replica: LocalReplica, message: bytes) -> SyncResult:
    """JM side: apply one message from the CA (Sec. 5.2). Malformed bytes raise ValueError."""
    if not message:
        raise ValueError("message: empty")
    kind = message[:1]
    if kind == _LIST:
        return _apply_list(replica, message)
    if kind == _BITS:
        return _apply_bits(replica, message)
    if kind == _DELTA:
        return _apply_delta(replica, message)
    raise ValueError(f"message: unknown kind {kind!r}")


def decode_machine_list(message: bytes) -> MachineList:
    """Parse an ``L`` message."""
    _require(message, _LIST_HEADER.size, "machine list")
    _, version, count = _LIST_HEADER.unpack_from(message)
    body = message[_LIST_HEADER.size :]
    names = tuple(body.decode().split("\n")) if count or body else ()
    if len(names) != count:
        raise ValueError(f"message: machine list announces {count} names, holds {len(names)}")
    return MachineList(version=version, names=names)


def _apply_list(replica: LocalReplica, message: bytes) -> SyncResult:
    machines = decode_machine_list(message)
    if machines.version <= replica.machines.version and replica.machines.names:
        return SyncResult(replica, SyncAction.IGNORED_STALE)
    fresh = LocalReplica(
        machines=machines,
        candidate_version=0,
        membership=np.zeros(len(machines.names), dtype=np.bool_),
    )
    return SyncResult(fresh, SyncAction.APPLIED)


def _apply_bits(replica: LocalReplica, message: bytes) -> SyncResult:
    _require(message, _BITS_HEADER.size, "bit vector")
    _, machine_version, candidate_version, count = _BITS_HEADER.unpack_from(message)
    verdict = _check_versions(replica, machine_version, candidate_version, count)
    if verdict is not None:
        return SyncResult(replica, verdict)
    packed = np.frombuffer(message, dtype=np.uint8, offset=_BITS_HEADER.size)
    if packed.size != (count + 7) // 8:
        raise ValueError("message: bit vector length does not match its machine count")
    membership = np.unpackbits(packed, count=count).astype(np.bool_)
    return SyncResult(_with_candidates(replica, candidate_version, membership), SyncAction.APPLIED)


def _apply_delta(replica: LocalReplica, message: bytes) -> SyncResult:
    _require(message, _DELTA_HEADER.size, "delta")
    _, machine_version, candidate_version, base, count, flips = _DELTA_HEADER.unpack_from(message)
    verdict = _check_versions(replica, machine_version, candidate_version, count)
    if verdict is not None:
        return SyncResult(replica, verdict)
    if base != replica.candidate_version:
        return SyncResult(replica, SyncAction.NEED_CANDIDATES)
    dtype = ">u2" if count <= 1 << 16 else ">u4"
    positions = np.frombuffer(message, dtype=dtype, offset=_DELTA_HEADER.size)
    if positions.size != flips or (flips and int(positions.max()) >= count):
        raise ValueError("message: delta positions do not match its machine count")
    membership = np.array(replica.membership)
    membership[positions] = ~membership[positions]
    return SyncResult(_with_candidates(replica, candidate_version, membership), SyncAction.APPLIED)


def _check_versions(
    replica: LocalReplica, machine_version: int, candidate_version: int, count: int
) -> SyncAction | None:
    local = replica.machines.version
    if machine_version < local:
        return SyncAction.IGNORED_STALE
    if machine_version > local or count != len(replica.machines.names):
        return SyncAction.NEED_FULL_LIST
    if candidate_version <= replica.candidate_version:
        return SyncAction.IGNORED_STALE
    return None


def _with_candidates(
    replica: LocalReplica, candidate_version: int, membership: BoolArray
) -> LocalReplica:
    return LocalReplica(
        machines=replica.machines, candidate_version=candidate_version, membership=membership
    )


def _require(message: bytes, size: int, what: str) -> None:
    if len(message) < size:
        raise ValueError(f"message: truncated {what} header")
