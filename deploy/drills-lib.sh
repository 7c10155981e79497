# Shared by the operator drills (remove-worker.sh, backup.sh, restore.sh, rotate-certs.sh,
# upgrade.sh): sourced after lib.sh, not run.  The caller sets `drill` (its name, for messages)
# and `compose` (the path of compose.sh).  deploy/DRILLS.md describes the drills.

die() {
    echo "$drill: $*" >&2
    exit 1
}
say() { echo "== $drill: $*" >&2; }
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

# wait_node NAME ready|gone [SECONDS]: until the RM lists NAME as ready, or no longer as ready
# (lost, or not at all); default 2 minutes, or die.  Leaves the state last seen in
# node_state_seen.
node_state_seen=""
wait_node() {
    local name=$1 want=$2 limit=${3:-120} started=$SECONDS state
    while :; do
        state=$(node_state "$name")
        node_state_seen=$state
        case "$want:$state" in
        ready:ready) return 0 ;;
        gone:ready | gone:unknown) ;;
        gone:*) return 0 ;;
        esac
        [ $((SECONDS - started)) -lt "$limit" ] \
            || die "$name is $state in the RM after ${limit}s, not $want: deploy/compose.sh logs rm agent-$name"
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
