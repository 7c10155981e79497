"""Who may call a node agent's RPCs (see :mod:`plumbing.authz`).

Suspending, resuming and resizing a task are the RM's decisions, carried to the agent in its
heartbeat answers: nobody may ask an agent for them directly (they would be undone by the RM's
reconciliation anyway).  Draining a node is an administrator's act.  Job masters start and stop
tasks of their own job only (the handlers check the job their certificate names), and so they
queue, upgrade and list speculative tasks; a client-mode job master holds its user's
certificate.

A role is not enough where the work belongs to a job: the handlers also ask for the RM's proof
(:mod:`node_agent.grant_gate`), whoever calls, administrators included.  StartTask and
UpgradeSpeculative need the container's grant token; EnqueueSpeculative and ListSpeculative the
job's speculative pass for this node (which the RM gives only to whoever may drive a job with a
``speculative`` block); GetTaskLogs the job's log pass (its owner's and admins', from GetJob).
StopTask needs no proof from the job's own job master or an admin; a person needs the grant
token of the task's container, or for a speculative task (queued or running) the pass.
ListTasks shows what GetJob already shows every person (ids, states, limits), no commands.
"""

from __future__ import annotations

from plumbing.authz import table
from plumbing.tls import Role
from sluice_pb import node_agent_pb2 as agent_pb

NOBODY: frozenset[Role] = frozenset()
JOB_MASTERS = frozenset({Role.JOB_MASTER, Role.CLIENT, Role.ADMIN})
PEOPLE = frozenset({Role.CLIENT, Role.ADMIN})

ACCESS = table(
    agent_pb.DESCRIPTOR.services_by_name["AgentService"].full_name,
    {
        "StartTask": JOB_MASTERS,
        "StopTask": JOB_MASTERS,
        "SuspendTask": NOBODY,
        "ResumeTask": NOBODY,
        "ResizeTask": NOBODY,
        "ListTasks": PEOPLE | {Role.AGENT},
        "GetTaskLogs": PEOPLE,
        "Drain": frozenset({Role.ADMIN}),
        # Speculative tasks (ROSE): a job master, for its own job, with the RM's pass for it
        # (the handlers check).
        "EnqueueSpeculative": JOB_MASTERS,
        "UpgradeSpeculative": JOB_MASTERS,
        "ListSpeculative": JOB_MASTERS,
    },
)
