#!/usr/bin/env bash
# The demo command (README): prepares a virtual environment, then runs `sluice demo`.
#
# The demo needs no external service: Sluice's wheel brings its Kafka-protocol broker (Tansu)
# and MQTT broker (amqtt), and the process runtime runs tasks in cgroups.  So it installs no
# system package, except with `--runtime docker`: Docker Engine (docker.io) and the static
# busybox the task image is built from (busybox-static), when missing and run as root; it says
# so first.  (scripts/test.sh installs what the tests need: Mosquitto, InfluxDB, Compose too.)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

for arg in "$@"; do
  if [ "$arg" = docker ] || [ "$arg" = --runtime=docker ]; then
    echo "== --runtime docker: the demo needs Docker Engine and busybox-static"
    install_system_packages docker.io busybox-static
    start_docker
  fi
done
ensure_venv .
.venv/bin/sluice demo "$@"
