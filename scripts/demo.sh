#!/usr/bin/env bash
# The demo command (README): prepares a virtual environment, then runs `sluice demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

install_system_packages
ensure_venv .
.venv/bin/sluice demo "$@"
