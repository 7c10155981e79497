"""The resource manager's refusals; the gRPC layer maps each to one status code."""

from __future__ import annotations


class NotFoundError(KeyError):
    """An unknown job or node id (NOT_FOUND)."""

    def __str__(self) -> str:
        return str(self.args[0])


class InvalidRequestError(ValueError):
    """A request that is wrong whatever the cluster's state (INVALID_ARGUMENT); ``field``
    names what is wrong, e.g. ``asks[0].count``."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


class ConflictError(ValueError):
    """A request that contradicts the cluster's state (FAILED_PRECONDITION), e.g. a job master
    attempt that was superseded, or an agent of another cluster."""


class AlreadyExistsError(ValueError):
    """A name another live party holds (ALREADY_EXISTS): a node id another agent heartbeats
    for."""


class PermissionDeniedError(ValueError):
    """A caller acting on what is not theirs (PERMISSION_DENIED): another user's job."""


class LimitExceededError(ValueError):
    """A caller over one of their limits (RESOURCE_EXHAUSTED); the message names the limit."""


class StateUnavailableError(Exception):
    """The RM could not make a change durable: its state directory is full, read-only or
    failing.  Nothing was changed (the unit of work rolled back, in memory too), and the next
    unit tries again, so the RM recovers by itself once the directory is writable.  ``full``:
    RESOURCE_EXHAUSTED (out of space), else UNAVAILABLE."""

    def __init__(self, message: str, *, full: bool) -> None:
        super().__init__(message)
        self.full = full
