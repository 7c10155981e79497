#!/usr/bin/env bash
# The test command (README, .ci/run): installs what the tests need, starts the services they
# use, then runs the linters, the whole test suite and the deployment's end-to-end test
# (scripts/test_deployment.sh).  Safe to run again on a prepared machine.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

install_system_packages
start_docker
ensure_venv '.[dev]'

echo "== lint"
make lint PY=.venv/bin/python

echo "== tests"
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"

# (Only the whole run: arguments pick pytest tests, which the deployment test is not.)
[ $# -gt 0 ] || bash scripts/test_deployment.sh
