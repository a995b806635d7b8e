#!/usr/bin/env bash
# Stop the Ironic started by ci/ironic/start.sh STATE_DIR: SIGTERM to the
# process group of the PID in STATE_DIR/ironic.pid, wait up to 10 s, then
# SIGKILL. Never kills anything by name. Exit 0 if nothing is running.
#
# usage: ci/ironic/stop.sh STATE_DIR
set -euo pipefail

log() { echo "ironic/stop.sh: $*" >&2; }
die() { echo "ironic/stop.sh: ERROR: $*" >&2; exit 1; }

[ $# -eq 1 ] && [ -n "$1" ] || die "usage: $0 STATE_DIR"
PIDFILE="$1/ironic.pid"

if [ ! -f "$PIDFILE" ]; then
    log "no $PIDFILE: not running"
    exit 0
fi
pid=$(cat "$PIDFILE")
case "$pid" in ''|*[!0-9]*) die "bad pid '$pid' in $PIDFILE";; esac

if ! kill -0 "$pid" 2>/dev/null; then
    log "pid $pid is not running; removing $PIDFILE"
    rm -f "$PIDFILE"
    exit 0
fi

# Guard against a recycled PID (e.g. a pid file left over from before a
# reboot): only signal it if it is still the ironic that start.sh launched.
if ! tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q ironic; then
    log "pid $pid is not an ironic process any more; removing stale $PIDFILE"
    rm -f "$PIDFILE"
    exit 0
fi

# start.sh runs ironic under setsid, so it leads its own process group (which
# also holds its forked API worker). If that is somehow not the case, signal
# only the PID rather than someone else's group.
pgid=$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ' || true)
if [ "$pgid" = "$pid" ]; then
    target=(-- "-$pid"); what="process group $pid"
else
    log "warning: pid $pid does not lead its process group (pgid ${pgid:-?}); signalling the pid only"
    target=("$pid"); what="pid $pid"
fi

# Any non-zombie process left in the group (a zombie is already dead; it only
# waits for its parent to reap it, e.g. when start.sh stops a failed start).
alive() {
    if [ "$pgid" = "$pid" ]; then
        ps -e -o pgid=,stat= | awk -v g="$pid" '$1 == g && $2 !~ /^Z/ {found=1} END {exit !found}'
    else
        ps -o stat= -p "$pid" 2>/dev/null | grep -qv '^Z'
    fi
}

log "sending TERM to $what"
kill -TERM "${target[@]}" 2>/dev/null || true
for _ in $(seq 1 100); do
    alive || break
    sleep 0.1
done
if alive; then
    log "$what still alive after 10 s; sending KILL"
    kill -KILL "${target[@]}" 2>/dev/null || true
    for _ in $(seq 1 50); do
        alive || break
        sleep 0.1
    done
    alive && die "$what survived SIGKILL"
fi
rm -f "$PIDFILE"
log "stopped"
