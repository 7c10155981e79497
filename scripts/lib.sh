# Shared steps of scripts/test.sh and scripts/demo.sh (sourced, not run).

# Debian packages: Docker Engine and a static busybox for the task image (the runtimes),
# Mosquitto and InfluxDB 1.x (the data plane's real servers, which the tests run), and Docker
# Compose (bookworm's is v1.29; tests/unit/deploy/test_compose.py has it check deploy/), stunnel4
# (the TLS front of the brokers that have no TLS of their own, in the tests and in deploy/) and
# mmdebstrap (deploy/images.sh --from-debian makes the images' base from the Debian mirror).
# Installed only when running as root on a machine that lacks them.
SYSTEM_PACKAGES=(docker.io busybox-static mosquitto influxdb docker-compose stunnel4 mmdebstrap)

# install_system_packages [PACKAGE...]: the given Debian packages (default: SYSTEM_PACKAGES, what
# the tests need) that are missing, with apt-get when run as root, saying which first; without
# root or apt-get, it only says which are missing.
install_system_packages() {
  local wanted=("$@")
  if [ ${#wanted[@]} -eq 0 ]; then
    wanted=("${SYSTEM_PACKAGES[@]}")
  fi
  if ! command -v dpkg-query >/dev/null; then
    return 0
  fi
  local missing=()
  for package in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$package")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "== missing Debian packages: ${missing[*]} (not root: install them yourself)" >&2
    return 0
  fi
  echo "== installing Debian packages as root (apt-get): ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Start dockerd if it is installed but not answering (no systemd on these machines).
start_docker() {
  if ! command -v dockerd >/dev/null || docker info >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "docker is installed but not running, and only root can start it here" >&2
    return 0
  fi
  echo "== starting dockerd"
  (setsid dockerd >/tmp/sluice-dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "dockerd did not start; see /tmp/sluice-dockerd.log" >&2
  return 1
}

# Create .venv (once) and install the project into it, editable, with the given extras spec.
ensure_venv() {
  local target="$1"
  if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv"
    python3 -m venv .venv
  fi
  echo "== installing Python packages"
  .venv/bin/python -m pip install -q --disable-pip-version-check -e "$target"
}
