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
"""

from __future__ import annotations

import hashlib
import hmac

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
