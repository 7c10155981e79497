"""Benchmark of the per-call costs of authentication and authorisation, in this process.

Run: .venv/bin/python bench/bench_auth.py [--repeats N]

Prints, with the machine's core count, the median and 99th percentile over ``--repeats`` timed
batches (each the mean of a batch of calls) of:

* grant sign / verify -- the RM's HMAC of one grant (``plumbing/grants.py``), once per container
  granted, and the agent's check of it, once per ``StartTask``;
* token check, first / cached -- the RM's check of a bearer token (``plumbing/bearer.py``): an
  ECDSA P-256 verification the first time a token is seen, a dictionary lookup (plus the expiry
  and revocation checks) afterwards;
* identity of a peer certificate -- what the authorizer reads from every call's certificate
  (``plumbing/tls.py`` ``peer_identity``, cached per certificate);
* access check -- the table lookup of ``plumbing/authz.py`` ``refusal`` per call.

The TLS handshake and record costs on the heartbeat and grant paths are measured end to end by
``bench/bench_rm_tls.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from plumbing import bearer, grants, tls
from plumbing.authz import refusal
from policies.scheduling.resources import Resources
from resource_manager.access import ACCESS


def _timed(call: Callable[[], object], batch: int, repeats: int) -> tuple[float, float]:
    """(median, p99) of ``repeats`` batches' mean call time, in microseconds."""
    call()  # warm
    means = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(batch):
            call()
        means.append((time.perf_counter() - started) / batch * 1e6)
    means.sort()
    return statistics.median(means), means[min(len(means) - 1, int(len(means) * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-auth-"))
    authority = tls.init_ca(root / "ca", "bench")
    ca_pem = authority.certificate.public_bytes(serialization.Encoding.PEM)
    tls.issue(authority, tls.Identity(tls.Role.AGENT, "node-1"), root / "agent")
    agent_cert = tls.load_tls_dir(root / "agent").cert_pem
    key = grants.node_key(grants.grant_secret(tls.load_tls_dir(root / "agent").key_pem), "node-1")
    size = Resources(1.5, 2048)
    token = grants.sign(key, "job-000001", "job-000001-a17", size)
    person, _ = bearer.issue_token(authority, tls.Identity(tls.Role.CLIENT, "alice"))
    verifier = bearer.TokenVerifier(ca_pem)
    heartbeat = "/sluice.v1.NodeService/HeartbeatStream"
    agent = tls.Identity(tls.Role.AGENT, "node-1")

    def first_token_check() -> object:
        return bearer.TokenVerifier(ca_pem).check(person)

    rows = [
        ("grant sign", lambda: grants.sign(key, "job-000001", "job-000001-a17", size), 2000),
        (
            "grant verify",
            lambda: grants.verify(key, token, "job-000001", "job-000001-a17", size),
            2000,
        ),
        ("token check, first", first_token_check, 20),
        ("token check, cached", lambda: verifier.check(person), 2000),
        ("identity of a peer certificate", lambda: tls.identity_of_pem(agent_cert), 2000),
        (
            "access check",
            lambda: refusal(ACCESS, heartbeat, agent),
            2000,
        ),
    ]
    print(f"bench_auth: {os.cpu_count()} cores, {args.repeats} batches each; microseconds")
    print(f"{'operation':<34}{'p50':>10}{'p99':>10}")
    for name, call, batch in rows:
        p50, p99 = _timed(call, batch, args.repeats)
        print(f"{name:<34}{p50:>10.2f}{p99:>10.2f}")


if __name__ == "__main__":
    main()
