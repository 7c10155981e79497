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
