"""Who may call the resource manager's RPCs (see :mod:`plumbing.authz`).

A job master holds a certificate the RM issued for its job (``sluice://jobmaster/JOB``); the
``MasterService`` handlers also check that it acts for that job only.  A client-mode job master
(``sluice run``) holds its user's certificate.  A client may kill, or drive in client mode, only
the jobs they submitted (``check_owner`` in the service); an admin any.
"""

from __future__ import annotations

from plumbing.authz import table
from plumbing.tls import Role
from sluice_pb import resource_manager_pb2 as rm_pb

PEOPLE = frozenset({Role.CLIENT, Role.ADMIN})
JOB_MASTERS = frozenset({Role.JOB_MASTER, Role.CLIENT, Role.ADMIN})  # client mode: people
AGENTS = frozenset({Role.AGENT})
ADMINS = frozenset({Role.ADMIN})

_services = rm_pb.DESCRIPTOR.services_by_name

ACCESS = {
    **table(
        _services["JobService"].full_name,
        {
            "SubmitJob": PEOPLE,
            "ListJobs": PEOPLE,
            "GetJob": PEOPLE,
            "WatchJob": PEOPLE,
            "KillJob": PEOPLE,
            "ChangeTask": ADMINS,  # suspend, resume, resize or preempt anyone's task
            "ListNodes": PEOPLE,
            "ListQueues": PEOPLE,
            "GetClusterInfo": PEOPLE,
            "GetSprint": PEOPLE,
        },
    ),
    **table(
        _services["NodeService"].full_name,
        {
            # The handlers also check that an agent speaks only for its own node.
            "RegisterNode": AGENTS,
            "Heartbeat": AGENTS,
            "HeartbeatStream": AGENTS,
            "ReportTaskEvents": AGENTS,
        },
    ),
    **table(
        _services["MasterService"].full_name,
        {"RegisterMaster": JOB_MASTERS, "Allocate": JOB_MASTERS, "FinishJob": JOB_MASTERS},
    ),
}
