#!/usr/bin/env bash
# Stop the Ironic started by ci/ironic/start.sh STATE_DIR: SIGTERM to the
# process group of the PID in STATE_DIR/ironic.pid and to every other process
# of that Ironic (see `ours` below), wait up to 10 s, then SIGKILL. Never
# kills anything by name. Exit 0 if nothing is running.
#
# usage: ci/ironic/stop.sh STATE_DIR
set -euo pipefail
# A stop runs to its end: a SIGINT meant for whoever called it (a Ctrl-C,
# `timeout` passing one on to its group) must not leave Ironic half-stopped.
trap '' INT

log() { echo "ironic/stop.sh: $*" >&2; }
die() { echo "ironic/stop.sh: ERROR: $*" >&2; exit 1; }

[ $# -eq 1 ] && [ -n "$1" ] || die "usage: $0 STATE_DIR"
[ -d "$1" ] || { log "no $1: not running"; exit 0; }
pid=
STATE=$(cd "$1" && pwd)
PIDFILE="$STATE/ironic.pid"
CONSOLE_LOG="$STATE/ironic.log"

# PIDs of this Ironic outside its process group: start.sh runs it with
# STATE_DIR/ironic.log as its stdout, and every process it forks inherits
# it. (Its environment cannot mark it: setproctitle overwrites what
# /proc/PID/environ shows; its working directory could be a user's shell.)
# Only this user's processes are looked at.
ours() {
    local d p
    for d in /proc/[0-9]*; do
        p=${d#/proc/}
        [ "$p" != "$$" ] && [ -O "$d" ] || continue
        [ "$(readlink "$d/fd/1" 2>/dev/null)" = "$CONSOLE_LOG" ] || continue
        # A zombie is already dead (it only waits for its parent to reap it).
        grep -q '^State:[[:space:]]*Z' "$d/status" 2>/dev/null && continue
        echo "$p"
    done
}

# Processes of this Ironic with no (or a stale) pid file: a start.sh
# interrupted between starting Ironic and writing the file, or a process
# that left Ironic's group.
stray() {
    local left end
    left=$(ours | tr '\n' ' ')
    [ -n "$left" ] || return 0
    log "warning: processes of this ironic outside process group ${pid:-?} (their stdout is $CONSOLE_LOG): $left; sending TERM"
    # shellcheck disable=SC2086
    kill -TERM $left 2>/dev/null || true
    end=$((SECONDS + 10))
    while [ -n "$(ours)" ]; do
        if [ "$SECONDS" -ge "$end" ]; then
            left=$(ours | tr '\n' ' ')
            log "warning: still alive after 10 s: $left; sending KILL"
            # shellcheck disable=SC2086
            kill -KILL $left 2>/dev/null || true
            sleep 1
            [ -z "$(ours)" ] || die "processes $(ours | tr '\n' ' ')survived SIGKILL"
            return 0
        fi
        sleep 0.2
    done
}

if [ ! -f "$PIDFILE" ]; then
    stray
    log "no $PIDFILE: not running"
    exit 0
fi
pid=$(cat "$PIDFILE")
case "$pid" in ''|*[!0-9]*) die "bad pid '$pid' in $PIDFILE";; esac

if ! kill -0 "$pid" 2>/dev/null; then
    stray
    log "pid $pid is not running; removing $PIDFILE"
    rm -f "$PIDFILE"
    exit 0
fi

# Guard against a recycled PID (e.g. a pid file left over from before a
# reboot): only signal it if it is still the ironic that start.sh launched.
# (No pipe into `grep -q` here: under pipefail, a writer's SIGPIPE once grep
# has matched would read as "not ironic" and leave Ironic running.)
if ! grep -qa ironic "/proc/$pid/cmdline" 2>/dev/null; then
    stray
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
stray
rm -f "$PIDFILE"
log "stopped"
