#!/usr/bin/env bash
# The deployment's end-to-end test (issue 30): builds the image as a host without a registry
# must (deploy/images.sh --from-debian), brings deploy/ up with three workers (and, in lab mode,
# with a worker started from its remote bundle: test_lab.py), uses it from this
# host, breaks it on purpose, and tears it down to nothing (tests/deployment/).  Called by
# scripts/test.sh; bounded to 12 minutes.  Needs root (mmdebstrap, cgroups) and Docker.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

install_system_packages
start_docker
ensure_venv '.[dev]'

echo "== deployment end to end"
started=$SECONDS
timeout --kill-after 30 720 .venv/bin/python -m pytest -q -p no:cacheprovider -m deployment \
    -o addopts="-ra --strict-markers" -o timeout=600 -s tests/deployment "$@"
echo "== deployment end to end: $((SECONDS - started)) s"
