# Shared by the deploy/ scripts (sourced, not run): the settings, from .env.
#
# .env is made from .env.example on first use.  Its KEY=VALUE lines are exported unless the
# variable is already set in the environment, which wins, as it does for Compose.  Compose
# reads the same file, since compose.sh runs it with this directory as the project directory.

deploy_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
deploy_script=$(basename "$0" .sh)

# One line on stderr naming the script: an error (then exit 1), or progress.
die() {
    echo "$deploy_script: $*" >&2
    exit 1
}
say() { echo "== $deploy_script: $*" >&2; }

[ -f "$deploy_dir/.env" ] || cp "$deploy_dir/.env.example" "$deploy_dir/.env"
while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in '' | '#'*) continue ;; esac
    key=${line%%=*}
    [[ "$key" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
    [ -n "${!key+set}" ] || export "$key=${line#*=}"
done <"$deploy_dir/.env"
unset line key
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-sluice}

# The person up.sh issues a certificate for, and deploy/sluice acts as: whoever runs it (the
# user behind sudo, if any), as a certificate name.
deploy_person() {
    local person=${SUDO_USER:-${USER:-$(id -un)}}
    echo "$person" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n-' '-'
}

# The addresses the deployment hands out, derived from SLUICE_HOST (docker-compose.yml and the
# worker files interpolate them; each default there is the single-host value):
#
#   single-host mode (SLUICE_HOST 127.0.0.1 or localhost, the default): every worker is a
#     container on this host's network, so the RM hands out the services' names: rm:7070,
#     kafka:9093, mqtts://mosquitto:8883, aggregator:7071; a worker is NAME:7072.
#   lab mode (SLUICE_HOST a routable address of this host): workers may be other machines,
#     where those names do not resolve, so every address handed out is SLUICE_HOST and a port
#     published on SLUICE_BIND, for every client alike (the containers here included); a
#     worker here publishes its agent on a host port of its own (add-worker.sh).
case "${SLUICE_HOST:=127.0.0.1}" in
127.0.0.1 | localhost | ::1 | "") SLUICE_LAB="" ;;
*) SLUICE_LAB=1 ;;
esac
if [ -n "$SLUICE_LAB" ]; then
    SLUICE_RM_ADDRESS=$SLUICE_HOST:${SLUICE_RM_PORT:-7070}
    SLUICE_AGGREGATOR_ADDRESS=$SLUICE_HOST:${SLUICE_AGGREGATOR_PORT:-7071}
    SLUICE_KAFKA_ADDRESS=$SLUICE_HOST:${SLUICE_KAFKA_PORT:-9093}
    SLUICE_MQTT_URL=mqtts://$SLUICE_HOST:${SLUICE_MQTT_PORT:-8883}
else
    SLUICE_RM_ADDRESS=rm:7070
    SLUICE_AGGREGATOR_ADDRESS=aggregator:7071
    SLUICE_KAFKA_ADDRESS=kafka:9093
    SLUICE_MQTT_URL=mqtts://mosquitto:8883
fi
export SLUICE_HOST SLUICE_LAB SLUICE_RM_ADDRESS SLUICE_AGGREGATOR_ADDRESS SLUICE_KAFKA_ADDRESS SLUICE_MQTT_URL

# ---- waiting for what the scripts start (up.sh, add-worker.sh and the drills in DRILLS.md)

compose="$deploy_dir/compose.sh"

elapsed() { echo "$((SECONDS - $1))s"; }

# container SERVICE: the id of SERVICE's container (running or not), empty if it has none.
container() {
    "$compose" ps -q "$1" 2>/dev/null || true
}

# health SERVICE: its container's health (healthy, starting, unhealthy), or "absent".
health() {
    local id
    id=$(container "$1")
    [ -n "$id" ] || { echo absent; return; }
    docker inspect --format '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id" 2>/dev/null || echo absent
}

# wait_healthy SERVICE [SECONDS]: until its container is healthy (default 3 minutes), or die.
wait_healthy() {
    local service=$1 limit=${2:-180} started=$SECONDS status
    while :; do
        status=$(health "$service")
        [ "$status" != healthy ] || return 0
        [ $((SECONDS - started)) -lt "$limit" ] \
            || die "$service is not healthy after ${limit}s ($status): deploy/compose.sh logs $service"
        sleep 1
    done
}

# node_state NAME: the RM's state of node NAME (ready, lost, ...), "absent" when the RM does not
# list it, "unknown" when the RM does not answer.  Asked as the administrator (the `cli` service).
node_state() {
    local listing
    listing=$("$compose" run --rm -T cli sluice nodes --json 2>/dev/null) || { echo unknown; return; }
    python3 -c '
import json, sys
name = sys.argv[1]
nodes = json.loads(sys.stdin.read() or "[]")
nodes = nodes.get("nodes", nodes) if isinstance(nodes, dict) else nodes
states = [str(n.get("state", "")).lower() for n in nodes if n.get("node_id") == name]
print(states[0] if states else "absent")
' "$1" <<<"$listing"
}

# wait_node NAME ready|gone [SECONDS [WHERE]]: until the RM lists NAME as ready, or no longer
# as ready (lost, or not at all); default 2 minutes, or die saying WHERE to look.  Leaves the
# state last seen in node_state_seen.
node_state_seen=""
wait_node() {
    local name=$1 want=$2 limit=${3:-120} look=${4:-"deploy/compose.sh logs rm agent-$1"}
    local started=$SECONDS state
    while :; do
        state=$(node_state "$name")
        node_state_seen=$state
        case "$want:$state" in
        ready:ready) return 0 ;;
        gone:ready | gone:unknown) ;;
        gone:*) return 0 ;;
        esac
        [ $((SECONDS - started)) -lt "$limit" ] \
            || die "$name is $state in the RM after ${limit}s, not $want: $look"
        sleep 1
    done
}

# workers: the names of the workers added so far (workers/NAME.yml), one a line.
workers() {
    local file
    shopt -s nullglob
    for file in "$deploy_dir"/workers/*.yml; do basename "$file" .yml; done
}

# recreate SERVICE: a new container for SERVICE from its current definition and image
# (--no-deps: nothing it depends on is touched).
recreate() {
    "$compose" up -d --no-deps --force-recreate "$1" 2>&1 \
        | grep -v -e 'is up-to-date' -e '^Recreating' -e '^Creating' >&2 || true
}

# recreate_worker NAME: its agent's container recreated (SIGTERM stops the agent, not its tasks:
# the docker runtime's task containers keep running and the new agent adopts them), then wait
# until its health check passes and the RM lists it ready again.
recreate_worker() {
    local name=$1 started=$SECONDS old
    old=$(container "agent-$name")
    recreate "agent-$name"
    [ "$(container "agent-$name")" != "$old" ] || die "agent-$name: its container was not recreated"
    wait_healthy "agent-$name" 120
    wait_node "$name" ready
    say "worker $name recreated and ready in $(elapsed "$started")"
}

# The control plane's long-running services, in the order they start (each on those before).
CONTROL_PLANE=(kafka mosquitto influxdb aggregator rm)
