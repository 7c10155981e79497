"""The agent's check of grant tokens (:mod:`plumbing.grants`): with TLS, a task starts here only
in a container the RM granted to that task's job, at the granted size.

* ``StartTask`` needs the container's grant token, whoever calls: a job master (which may act
  only for its own job anyway), or a person's client-mode job master.
* ``StopTask`` by a person needs the token the task was started with: holding it proves the
  container is theirs; for a speculative task (no container) the job's speculative pass.  A job
  master needs none (its certificate names its job, and a task is named by its job), and
  neither does an administrator.
* ``EnqueueSpeculative`` and ``ListSpeculative`` need the job's speculative pass on this node
  (:func:`plumbing.grants.sign_pass`), whoever calls, administrators included: the RM issues
  one only to whoever may drive a job with a ``speculative`` block.  ``GetTaskLogs`` needs the
  job's log pass, which the RM's ``GetJob`` gives the job's owner and administrators.

The node's key arrives with the RM's answer to ``RegisterNode``; until then every start is
refused.  Without TLS the gate is open.  Thread-safe: gRPC calls and registrations come from
different threads.
"""

from __future__ import annotations

import hmac
import threading
from collections import OrderedDict

from plumbing import grants
from plumbing.tls import Identity, Role
from policies.scheduling.resources import Resources

MAX_REMEMBERED = 65_536
"""Tokens of started tasks kept for a person's StopTask, oldest out (a forgotten one only means
the RM stops that task, when its job ends)."""


_WHERE = {
    grants.Purpose.SPECULATIVE: (
        "a speculative task is queued, listed or cancelled only with the pass the resource "
        "manager gives whoever drives its job (AllocateResponse.speculative_passes)"
    ),
    grants.Purpose.LOGS: (
        "a task's logs are read only with the pass the resource manager gives its job's owner "
        "and admins (GetJob's TaskInfo.log_pass; `sluice logs` passes it on)"
    ),
}


class GrantGate:
    def __init__(self, enforced: bool) -> None:
        """``enforced``: the agent runs with TLS."""
        self._enforced = enforced
        self._key: bytes | None = None
        self._lock = threading.Lock()
        self._started: OrderedDict[tuple[str, str], bytes] = OrderedDict()

    def set_key(self, key: bytes) -> None:
        """The node's grant key, as the RM's registration answer gave it."""
        with self._lock:
            self._key = key or None

    def _key_or_problem(self, field: str, what: str) -> tuple[bytes | None, str]:
        """The node's key, or None and why ``what`` cannot be checked yet (one line)."""
        with self._lock:
            key = self._key
        return key, (
            f"{field}: this agent has not registered with the resource manager yet, so it "
            f"cannot check {what}; try again shortly"
        )

    def start_problem(
        self, job_id: str, allocation_id: str, resources: Resources, token: bytes
    ) -> str | None:
        """Why a task may not start in ``allocation_id`` (one line), or None; a task that may
        is remembered with its token."""
        if not self._enforced:
            return None
        key, unregistered = self._key_or_problem("grant_token", "grants")
        if key is None:
            return unregistered
        if not token:
            return (
                "grant_token: missing; a task starts only in a container the resource manager "
                "granted (pass the Allocation's grant_token)"
            )
        if not grants.verify(key, token, job_id, allocation_id, resources):
            return (
                f"grant_token: not the resource manager's grant of container {allocation_id} "
                f"({resources.cpu:g} cpu, {resources.memory_mb} MiB) on this node to job {job_id}"
            )
        with self._lock:
            self._started[(job_id, allocation_id)] = token
            self._started.move_to_end((job_id, allocation_id))
            if len(self._started) > MAX_REMEMBERED:
                self._started.popitem(last=False)
        return None

    def pass_problem(
        self, purpose: grants.Purpose, job_id: str, token: bytes, field: str
    ) -> str | None:
        """Why ``token`` (the request's ``field``) is not the RM's pass of ``purpose`` for
        ``job_id`` on this node (one line), or None."""
        if not self._enforced:
            return None
        key, unregistered = self._key_or_problem(field, "passes")
        if key is None:
            return unregistered
        if not token:
            return f"{field}: missing; {_WHERE[purpose]}"
        if not grants.verify_pass(key, token, purpose, job_id):
            return (
                f"{field}: not the resource manager's {purpose.value} pass for job {job_id} on "
                f"this node; {_WHERE[purpose]}"
            )
        return None

    def stop_problem(
        self,
        identity: Identity | None,
        job_id: str,
        allocation_id: str,
        token: bytes,
        speculative_pass: bytes | None = None,
    ) -> str | None:
        """Why ``identity`` may not stop a task of ``job_id`` in ``allocation_id``, or None.
        ``speculative_pass`` (not None for a speculative task, queued or running): the request's
        pass, which a person needs instead of a grant token."""
        if not self._enforced or identity is None:
            return None
        if identity.role in (Role.JOB_MASTER, Role.ADMIN):
            return None  # (a job master's own job is checked by the access rules)
        if speculative_pass is not None:
            return self.pass_problem(
                grants.Purpose.SPECULATIVE, job_id, speculative_pass, "speculative_pass"
            )
        with self._lock:
            started = self._started.get((job_id, allocation_id))
        if started is None or not hmac.compare_digest(started, token):
            return (
                f"grant_token: a person stops a task of job {job_id} only with the grant token "
                f"of its container {allocation_id}"
            )
        return None
