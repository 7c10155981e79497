"""How the RM's servicers answer: a call's refusals mapped to status codes, one line each, and
the owner check shared by the client and job master services.

Errors the caller made (bad spec, bad ask, unknown id) become INVALID_ARGUMENT / NOT_FOUND /
FAILED_PRECONDITION / ALREADY_EXISTS with a one-line message; nothing is created on refusal.  An
unexpected error answers INTERNAL with a short message and logs one line (the traceback at
debug level), and the RM keeps serving.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

import grpc

from plumbing.authz import caller, log_refusal
from plumbing.tls import Identity, Role
from policies.scheduling.jobspec import SpecError
from resource_manager.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidRequestError,
    LimitExceededError,
    NotFoundError,
    PermissionDeniedError,
    StateUnavailableError,
)
from resource_manager.records import JobRecord

log = logging.getLogger(__name__)


T = TypeVar("T")


async def abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, text: str) -> NoReturn:
    await context.abort(code, text)
    raise AssertionError("unreachable")  # context.abort raises


async def answer(context: grpc.aio.ServicerContext, what: str, call: Callable[[], T]) -> T:
    """Run ``call`` and map the core's refusals to status codes; anything unexpected becomes
    INTERNAL with one log line."""

    async def run() -> T:
        return call()

    return await answer_async(context, what, run)


async def answer_async(
    context: grpc.aio.ServicerContext, what: str, call: Callable[[], Awaitable[T]]
) -> T:
    """:func:`answer` for a call that is awaited."""
    try:
        return await call()
    except StateUnavailableError as error:  # (logged by RMState.run, once while it lasts)
        code = grpc.StatusCode.RESOURCE_EXHAUSTED if error.full else grpc.StatusCode.UNAVAILABLE
        await abort(context, code, f"{error}; nothing was changed")
    except (SpecError, InvalidRequestError) as error:
        await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(error))
    except NotFoundError as error:
        await abort(context, grpc.StatusCode.NOT_FOUND, str(error))
    except ConflictError as error:
        await abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(error))
    except AlreadyExistsError as error:
        await abort(context, grpc.StatusCode.ALREADY_EXISTS, str(error))
    except LimitExceededError as error:
        log_refusal(log, what, caller(context), context.peer(), str(error))
        await abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
    except PermissionDeniedError as error:
        log_refusal(log, what, caller(context), context.peer(), str(error))
        await abort(context, grpc.StatusCode.PERMISSION_DENIED, str(error))
    except Exception as error:
        log.warning("%s failed: %s: %s (nothing was changed)", what, type(error).__name__, error)
        log.debug("%s failed", what, exc_info=True)
        await abort(
            context,
            grpc.StatusCode.INTERNAL,
            f"internal error in {what} ({type(error).__name__}); nothing was changed; "
            "the resource manager's log has details",
        )


def check_owner(job: JobRecord, identity: Identity | None) -> None:
    """Only a job's owner, or an admin, may kill it or drive it in client mode (with TLS; a
    job submitted without TLS has no owner, so only admins may)."""
    if identity is None or identity.role is not Role.CLIENT or identity.name == job.owner:
        return
    whose = f"belongs to {job.owner}" if job.owner else "has no owner (submitted without TLS)"
    raise PermissionDeniedError(
        f"job_id: {job.job_id} {whose}; a client may act only on their own jobs"
    )
