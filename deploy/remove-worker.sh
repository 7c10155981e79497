#!/usr/bin/env bash
# remove-worker.sh NAME
#
# Takes worker NAME out of the cluster for good, as `kubectl drain` then `kubectl delete node`
# do: first its agent is drained (sluice-drain, as the administrator, through the `cli`
# service): it stops every task and job master it runs and removes their containers and
# cgroups, and the RM runs those tasks again on the other workers (new attempts: what a task
# had done is lost unless it checkpoints).  Then its container and its volume (agent-NAME, the
# agent's state) are removed, with any task container of the node still left, and so are
# workers/NAME.yml and its certificate (tls/agents/NAME); last, it waits until the RM no
# longer lists NAME as ready (it is declared lost after SLUICE_NODE_TIMEOUT seconds without a
# heartbeat).  add-worker.sh NAME brings a worker of that name back, with a new certificate.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
compose="$here/compose.sh"
case "${1:-}" in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac
# shellcheck source=deploy/lib.sh
source "$here/lib.sh"

case "${1:-}" in
"") die "usage: remove-worker.sh NAME (one of: $(workers | tr '\n' ' '))" ;;
esac
[ $# -eq 1 ] || die "usage: remove-worker.sh NAME (one name)"
name=$1
file="$here/workers/$name.yml"
[ -f "$file" ] || die "$name: no such worker (workers/$name.yml is missing; the workers: $(workers | tr '\n' ' '))"
project=$COMPOSE_PROJECT_NAME
started=$SECONDS

# 1. Drain: its tasks stop, and the RM runs them again elsewhere.
id=$(container "agent-$name")
if [ -n "$id" ] && [ "$(docker inspect --format '{{.State.Running}}' "$id" 2>/dev/null)" = true ]; then
    say "draining $name (its tasks stop; the RM runs them again on the other workers)"
    "$compose" run --rm -T --entrypoint sluice-drain cli "$name:7072" >&2 \
        || die "draining $name failed (above); nothing removed: retry, or stop it with deploy/compose.sh stop agent-$name and run this again"
else
    say "$name is not running: nothing to drain (the RM runs its tasks elsewhere once it declares it lost)"
fi

# 2. Its container and volume; task containers it started meanwhile (a task the RM placed there
# again between the drain and the stop) go with it.
say "removing its container and volume"
"$compose" rm -f -s -v "agent-$name" 2>&1 | grep -v -e '^Going to remove' -e '^Stopping' -e '^Removing' >&2 || true
leftover=$(docker ps -aq --filter "label=sluice.cluster=$project" --filter "label=sluice.node=$name")
[ -z "$leftover" ] || docker rm -f $leftover >/dev/null
for volume in $(docker volume ls -q --filter "label=com.docker.compose.project=$project" \
    --filter "label=com.docker.compose.volume=agent-$name"); do
    docker volume rm "$volume" >/dev/null || die "$volume: cannot remove the volume (docker volume rm $volume)"
done

# 3. Its files: the compose file and its certificate.
rm -f "$file"
rm -rf "$here/tls/agents/$name"

# 4. The RM declares it lost at its next look (SLUICE_NODE_TIMEOUT seconds without a heartbeat).
say "waiting until the RM no longer lists $name as ready"
wait_node "$name" gone $((${SLUICE_NODE_TIMEOUT:-10} + 120))
say "$name removed in $(elapsed "$started"): drained; its container, volume, workers/$name.yml and tls/agents/$name gone; the RM lists it $node_state_seen"
