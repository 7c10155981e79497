#!/usr/bin/env bash
# compose.sh ARGS...: Docker Compose on this deployment: the control plane
# (docker-compose.yml) and every worker added so far (workers/*.yml), under the project name
# of .env's COMPOSE_PROJECT_NAME (default sluice), and in lab mode docker-compose.lab.yml.  Compose v2 (`docker compose`) where it is
# installed, else v1 (`docker-compose`, Debian's 1.29): the files work with both.
#
#     deploy/compose.sh ps
#     deploy/compose.sh logs -f rm
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

# shellcheck source=deploy/lib.sh
source "$here/lib.sh"

files=(-f docker-compose.yml)
# Lab mode (lib.sh): Kafka's front published as well, for workers on other machines.
[ -z "$SLUICE_LAB" ] || files+=(-f docker-compose.lab.yml)
shopt -s nullglob
for worker in workers/*.yml; do files+=(-f "$worker"); done

if docker compose version >/dev/null 2>&1; then
    exec docker compose --project-directory "$here" "${files[@]}" "$@"
elif command -v docker-compose >/dev/null; then
    exec docker-compose --project-directory "$here" "${files[@]}" "$@"
else
    echo "compose.sh: neither \`docker compose\` (v2) nor docker-compose (v1) is installed" >&2
    exit 1
fi
