# Shared by the deploy/ scripts (sourced, not run): the settings, from .env.
#
# .env is made from .env.example on first use.  Its KEY=VALUE lines are exported unless the
# variable is already set in the environment, which wins, as it does for Compose.  Compose
# reads the same file, since compose.sh runs it with this directory as the project directory.

deploy_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -f "$deploy_dir/.env" ] || cp "$deploy_dir/.env.example" "$deploy_dir/.env"
while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in '' | '#'*) continue ;; esac
    key=${line%%=*}
    [[ "$key" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
    [ -n "${!key+set}" ] || export "$key=${line#*=}"
done <"$deploy_dir/.env"
unset line key
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-sluice}
