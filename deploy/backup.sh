#!/usr/bin/env bash
# backup.sh [FILE]
#
# An online, consistent copy of the RM's state (every job, task attempt and container it knows:
# the SQLite database /var/lib/sluice/rm/rm.sqlite3 in the rm-state volume) into FILE, default
# deploy/backups/rm-YYYYmmdd-HHMMSS.db.  The RM keeps running: SQLite's backup API, run by the
# image's Python inside the rm container, copies one snapshot of the database (what the RM had
# committed when the copy began; a transaction committed meanwhile is in the next backup), which
# is then checked (PRAGMA integrity_check) and copied out with `docker cp`.  FILE is written
# 0600: job specs may hold secrets.  restore.sh FILE puts it back.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
compose="$here/compose.sh"
case "${1:-}" in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac
# shellcheck source=deploy/lib.sh
source "$here/lib.sh"

[ $# -le 1 ] || die "usage: backup.sh [FILE]"
file=${1:-$here/backups/rm-$(date -u +%Y%m%d-%H%M%S).db}
[ ! -e "$file" ] || die "$file: exists already (choose another name, or move it aside)"
mkdir -p "$(dirname "$file")"
started=$SECONDS

id=$(container rm)
[ -n "$id" ] && [ "$(docker inspect --format '{{.State.Running}}' "$id" 2>/dev/null)" = true ] \
    || die "the rm container is not running (deploy/compose.sh up -d rm; or, with the RM stopped, copy its volume's rm.sqlite3)"

# In the container: the copy, checked; prints what it holds.
copy="/tmp/sluice-backup-$$.db"
summary=$("$compose" exec -T rm python -c '
import os, sqlite3, sys
source, target = sys.argv[1:]
if not os.path.exists(source):
    sys.exit(f"{source}: the RM has no state yet")
live = sqlite3.connect(source)
copy = sqlite3.connect(target)
live.backup(copy)  # all pages in one step: one consistent snapshot
live.close()
copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
check = copy.execute("PRAGMA integrity_check").fetchone()[0]
if check != "ok":
    sys.exit(f"the copy fails its integrity check: {check}")
version = copy.execute("PRAGMA user_version").fetchone()[0]
jobs, last = copy.execute("SELECT count(*), max(job_id) FROM jobs").fetchone()
print(f"schema version {version}, {jobs} jobs, the last", last or "none")
' /var/lib/sluice/rm/rm.sqlite3 "$copy") || die "the copy inside the rm container failed (above)"
(umask 077 && docker cp "$id:$copy" "$file") || die "docker cp of $copy out of the rm container failed"
chmod 600 "$file"
"$compose" exec -T rm rm -f "$copy" || true
say "$file: $summary, $(du -h "$file" | cut -f1), in $(elapsed "$started")"
echo "$file"
