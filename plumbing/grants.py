"""Grant tokens: proof, checked by a node agent, that the RM granted a container to a job.

With TLS a job master may start tasks of its own job only (its certificate names the job), but
that alone would let it start them anywhere, at any size.  So every container the RM grants
comes with a token: an HMAC-SHA256, under a key the RM gives that node's agent alone, of the
job, the container and its size.  The job master passes the token on in ``StartTask``; the
agent recomputes it and refuses a task whose token does not match (``PERMISSION_DENIED``).  A
job master cannot forge one (it never sees a node key), a token is no use on another node (each
node has its own key), and it cannot be stretched to another job, container or size.

Keys.  The RM derives one secret from its own TLS private key, and each node's key from that
secret and the node id (:func:`node_key`), so the keys stay the same across RM restarts (the
job masters' tokens stay valid) and change when the RM's key is rotated.  An agent receives its
node's key in the RM's answer to ``RegisterNode``, over mutual TLS to the agent certificate of
that very node.  Without TLS there are no keys and nothing is checked.

Cost: one HMAC over ~100 bytes per grant and per launch (about a microsecond), instead of a
public-key signature (tens of microseconds) — the reason a shared key was chosen.  A token has
no expiry: a container the RM has taken back is stopped by the node's reconciliation on its next
heartbeat, whatever was started in it.

Job passes (:func:`sign_pass`).  Where no container names the work, the RM signs the job alone,
for one purpose (:class:`Purpose`), under a key derived from the node's key and the purpose: a
*speculative pass* lets its bearer queue, list and cancel the job's speculative tasks on that
node (the RM answers one per node it resolves for a job master, and only for a job with a
``speculative`` block); a *log pass* lets its bearer read the logs of the job's tasks there
(``GetJob`` answers one per task to the job's owner and admins).  Neither is a grant token nor
the other (the keys differ).  A pass has no expiry either: what it lets one queue is bounded by
the node's speculative queue and quota, whoever queues it.
"""

from __future__ import annotations

import hashlib
import hmac
from enum import Enum

from policies.scheduling.resources import Resources

_SECRET_LABEL = b"sluice grant secret v1"
_NODE_LABEL = b"sluice grant node key v1\0"


def grant_secret(rm_key_pem: bytes) -> bytes:
    """The RM's grant secret, derived from its TLS private key (PEM)."""
    return hmac.new(rm_key_pem, _SECRET_LABEL, hashlib.sha256).digest()


def node_key(secret: bytes, node_id: str) -> bytes:
    """The key of one node's grants: only the RM and that node's agent hold it."""
    return hmac.new(secret, _NODE_LABEL + node_id.encode(), hashlib.sha256).digest()


def _message(job_id: str, allocation_id: str, resources: Resources) -> bytes:
    # NUL cannot occur in the ids (the agent and the RM refuse non-printable ids), so the
    # fields cannot be shifted into one another; the sizes are printed exactly.
    return f"{job_id}\0{allocation_id}\0{resources.cpu!r}\0{int(resources.memory_mb)}".encode()


def sign(key: bytes, job_id: str, allocation_id: str, resources: Resources) -> bytes:
    """The token of the container ``allocation_id`` of ``resources`` granted to ``job_id``."""
    return hmac.new(key, _message(job_id, allocation_id, resources), hashlib.sha256).digest()


def verify(key: bytes, token: bytes, job_id: str, allocation_id: str, resources: Resources) -> bool:
    """Whether ``token`` is the RM's grant of that container, of that size, to that job."""
    return hmac.compare_digest(token, sign(key, job_id, allocation_id, resources))


# Job passes: the RM's proof that the bearer may act for a job's work on one node where no
# container names it.  A speculative task has no container (it is queued straight on a node,
# ROSE Alg. 5), and a task's logs are read by a person, not by its job master; so for those the
# RM signs the job alone, under a key of its own for each purpose, derived from the node's key.
# A pass of one purpose is never one of another, nor a grant token: the keys differ.


class Purpose(Enum):
    """What a job pass lets its bearer do on the node it was signed for."""

    SPECULATIVE = "speculative"
    """Queue, list and cancel the job's speculative tasks (issued with the node's address to
    whoever may drive a job that has a ``speculative`` block)."""

    LOGS = "logs"
    """Read the logs of the job's tasks (issued by ``GetJob`` to the job's owner and admins)."""


_PASS_LABEL = b"sluice job pass key v1\0"


def _pass_key(key: bytes, purpose: Purpose) -> bytes:
    return hmac.new(key, _PASS_LABEL + purpose.value.encode(), hashlib.sha256).digest()


def sign_pass(key: bytes, purpose: Purpose, job_id: str) -> bytes:
    """The pass of ``purpose`` for ``job_id`` on the node whose grant key is ``key``."""
    return hmac.new(_pass_key(key, purpose), job_id.encode(), hashlib.sha256).digest()


def verify_pass(key: bytes, token: bytes, purpose: Purpose, job_id: str) -> bool:
    """Whether ``token`` is the RM's pass of ``purpose`` for ``job_id`` on this node."""
    return hmac.compare_digest(token, sign_pass(key, purpose, job_id))
