#!/usr/bin/env bash
# The test command (README, .ci/run): installs what the tests need, starts the services they
# use, then runs the linters and the whole test suite.  Safe to run again on a prepared machine.
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
