#!/usr/bin/env bash
# Start the all-in-one Ironic 39.0.0 (API + conductor, rpc_transport=none) on
# 127.0.0.1 (or IRONIC_HOST, optionally inside the network namespace
# IRONIC_NETNS) in the background, with all machine-specific state in STATE_DIR.
#
# usage: ci/ironic/start.sh STATE_DIR
#
# Environment:
#   IRONIC_PORT          API port (default 6385)
#   IRONIC_HOST          address the API listens on and advertises (default
#                        127.0.0.1; also [DEFAULT] my_ip and the endpoint_override):
#                        an IPv4 address, or an IPv6 literal without brackets
#                        (fd99::1; then also [DEFAULT] my_ipv6, and URLs are
#                        bracketed: https://[fd99::1]:6385)
#   IRONIC_NETNS         name of a network namespace (ip netns) to run ironic and
#                        the readiness probes in; empty (default): this one. The
#                        venv is installed first, outside it.
#   IRONIC_EXTRA_CONF    optional extra config file, passed last (overrides all)
#   IRONIC_VENV          venv made by install.sh (default $REPO/target/ironic-venv);
#                        install.sh is run first (a no-op when up to date)
#   IRONIC_HTTP_URL      [deploy] http_url (default http://127.0.0.1:8088; Ironic
#                        serves nothing itself, only used for local image caching)
#   IRONIC_START_TIMEOUT seconds to wait for the API + conductor (default 90)
#   IRONIC_TLS_CERT,     PEM certificate and key: the API is served over HTTPS
#   IRONIC_TLS_KEY       ([api] enable_ssl_api, cert_file, key_file; the URL and
#                        endpoint_override become https://), and the readiness
#                        probes trust IRONIC_TLS_CERT as their CA
#
# Writes STATE_DIR/paths.conf, STATE_DIR/ironic.sqlite (first run: create_schema),
# STATE_DIR/ironic.log (stdout/stderr), STATE_DIR/log/ironic.log (oslo log),
# STATE_DIR/ironic.pid (PID = process group of ironic and its worker).
# On success prints the API URL on stdout. Stop with ci/ironic/stop.sh STATE_DIR.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

log() { echo "ironic/start.sh: $*" >&2; }
die() { echo "ironic/start.sh: ERROR: $*" >&2; exit 1; }

[ $# -eq 1 ] && [ -n "$1" ] || die "usage: $0 STATE_DIR"
PORT=${IRONIC_PORT:-6385}
case "$PORT" in ''|*[!0-9]*) die "IRONIC_PORT must be a number, got '$PORT'";; esac
VENV=${IRONIC_VENV:-$REPO/target/ironic-venv}
HTTP_URL=${IRONIC_HTTP_URL:-http://127.0.0.1:8088}
TIMEOUT=${IRONIC_START_TIMEOUT:-90}
EXTRA_CONF=${IRONIC_EXTRA_CONF:-}
HOST=${IRONIC_HOST:-127.0.0.1}
case "$HOST" in
    ''|*[!0-9a-fA-F.:]*) die "IRONIC_HOST must be an IPv4 address or an IPv6 literal (no brackets), got '$HOST'";;
    *:*) URL_HOST="[$HOST]";;   # IPv6: bracketed in URLs (RFC 3986)
    *[!0-9.]*) die "IRONIC_HOST must be an IPv4 address or an IPv6 literal (no brackets), got '$HOST'";;
    *) URL_HOST=$HOST;;
esac
NETNS=${IRONIC_NETNS:-}
TLS_CERT=${IRONIC_TLS_CERT:-}
TLS_KEY=${IRONIC_TLS_KEY:-}
SCHEME=http
CURL_TLS=()
if [ -n "$TLS_CERT" ] || [ -n "$TLS_KEY" ]; then
    [ -f "$TLS_CERT" ] && [ -f "$TLS_KEY" ] || die "IRONIC_TLS_CERT and IRONIC_TLS_KEY must both name files"
    TLS_CERT=$(cd "$(dirname "$TLS_CERT")" && pwd)/$(basename "$TLS_CERT")
    TLS_KEY=$(cd "$(dirname "$TLS_KEY")" && pwd)/$(basename "$TLS_KEY")
    SCHEME=https
    CURL_TLS=(--cacert "$TLS_CERT")
fi
API_URL="$SCHEME://$URL_HOST:$PORT"
# Prefix for every command that must see ironic's network: `ip netns exec`
# enters the namespace and execs the command (no fork), so a backgrounded
# `${IN_NS[@]} setsid ironic` still has ironic's PID in $!.
IN_NS=()
if [ -n "$NETNS" ]; then
    [ -e "/run/netns/$NETNS" ] || die "IRONIC_NETNS=$NETNS: no such network namespace"
    IN_NS=(ip netns exec "$NETNS")
fi

command -v curl >/dev/null 2>&1 || die "curl not found (run ci/ironic/install.sh)"
command -v setsid >/dev/null 2>&1 || die "setsid not found (util-linux)"
if [ -n "$EXTRA_CONF" ]; then
    [ -f "$EXTRA_CONF" ] || die "IRONIC_EXTRA_CONF=$EXTRA_CONF does not exist"
    EXTRA_CONF=$(cd "$(dirname "$EXTRA_CONF")" && pwd)/$(basename "$EXTRA_CONF")
fi

mkdir -p "$1" || die "cannot create STATE_DIR $1"
STATE=$(cd "$1" && pwd)
PIDFILE="$STATE/ironic.pid"
CONSOLE_LOG="$STATE/ironic.log"
OSLO_LOG="$STATE/log/ironic.log"
DB="$STATE/ironic.sqlite"

# -g: no URL globbing, so an IPv6 literal's brackets reach the URL as they are.
http_code() { "${IN_NS[@]}" curl "${CURL_TLS[@]}" -g -s -o /dev/null -m 5 -w '%{http_code}' "$@" 2>/dev/null || true; }

# Conductor registered and has loaded fake-hardware => ready for node calls.
conductor_ready() {
    "${IN_NS[@]}" curl "${CURL_TLS[@]}" -g -sf -m 5 -H 'X-OpenStack-Ironic-API-Version: 1.95' "$API_URL/v1/drivers" 2>/dev/null \
        | grep -q '"name": *"fake-hardware"'
}

# --- already running from this STATE_DIR? -----------------------------------
if [ -f "$PIDFILE" ]; then
    oldpid=$(cat "$PIDFILE" 2>/dev/null || true)
    if [ -n "$oldpid" ] && kill -0 "$oldpid" 2>/dev/null; then
        oldport=$(cat "$STATE/ironic.port" 2>/dev/null || echo "?")
        if [ "$oldport" = "$PORT" ] && [ "$(http_code "$API_URL/")" = 200 ] && conductor_ready; then
            log "already running from $STATE (pid $oldpid)"
            echo "$API_URL"
            exit 0
        fi
        die "ironic from $STATE is already running (pid $oldpid, port $oldport) but is not healthy on port $PORT; run ci/ironic/stop.sh $STATE first"
    fi
    log "removing stale pid file (pid ${oldpid:-?} is gone)"
    rm -f "$PIDFILE"
fi

# Something else on the port would make our readiness check lie.
if [ "$(http_code "$API_URL/")" != 000 ]; then
    die "something already answers on $API_URL; choose another IRONIC_PORT"
fi

# --- venv -------------------------------------------------------------------
"$HERE/install.sh" "$VENV" >&2 || die "ci/ironic/install.sh $VENV failed"

# --- state directory + paths.conf ---------------------------------------------
mkdir -p "$STATE/log" "$STATE/tmp" "$STATE/certificates" "$STATE/deploy-logs" \
         "$STATE/httpboot" "$STATE/locks" "$STATE/tftpboot" "$STATE/images" \
         "$STATE/master_images"

cat > "$STATE/paths.conf" <<EOF
# Generated by ci/ironic/start.sh; machine-specific paths for this run.
# Loaded after ci/ironic/ironic.conf, so these values win.
[DEFAULT]
my_ip = $HOST
$(case "$HOST" in *:*) echo "my_ipv6 = $HOST";; esac)
state_path = $STATE
log_dir = $STATE/log
tempdir = $STATE/tmp

[database]
connection = sqlite:///$DB

[api]
host_ip = $HOST
port = $PORT
$(if [ "$SCHEME" = https ]; then printf 'enable_ssl_api = true\ncert_file = %s\nkey_file = %s\n' "$TLS_CERT" "$TLS_KEY"; fi)

[service_catalog]
endpoint_override = $API_URL

[agent]
certificates_path = $STATE/certificates
deploy_logs_local_path = $STATE/deploy-logs

[deploy]
http_root = $STATE/httpboot
http_url = $HTTP_URL

[pxe]
# Not used with boot=fake; kept out of /tftpboot and /var/lib/ironic anyway.
tftp_root = $STATE/tftpboot
tftp_master_path = $STATE/tftpboot/master_images
images_path = $STATE/images
instance_master_path = $STATE/master_images

[oslo_concurrency]
lock_path = $STATE/locks
EOF
echo "$PORT" > "$STATE/ironic.port"

CONF_ARGS=(--config-file "$HERE/ironic.conf" --config-file "$STATE/paths.conf")
[ -n "$EXTRA_CONF" ] && CONF_ARGS+=(--config-file "$EXTRA_CONF")

# --- database (first run only) ----------------------------------------------
# The schema is the same for every state directory of one venv: the first
# start creates it with ironic-dbsync (some 5 CPU-seconds of Python), leaves
# a copy in the venv (replaced as a whole, so concurrent starts never see
# half of it) and later starts copy that. install.sh rebuilding the venv
# for another Ironic takes the copy with it.
SCHEMA="$VENV/ironic-schema.sqlite"
if [ ! -s "$DB" ] && [ -s "$SCHEMA" ]; then
    log "copying the database schema from $SCHEMA"
    cp "$SCHEMA" "$DB"
elif [ ! -s "$DB" ]; then
    log "creating database schema in $DB"
    if ! "$VENV/bin/ironic-dbsync" "${CONF_ARGS[@]}" create_schema \
            > "$STATE/dbsync.log" 2>&1; then
        tail -n 40 "$STATE/dbsync.log" >&2 || true
        rm -f "$DB"
        die "ironic-dbsync create_schema failed (see $STATE/dbsync.log)"
    fi
    cp "$DB" "$SCHEMA.$$" && mv -f "$SCHEMA.$$" "$SCHEMA"
fi

# --- start ------------------------------------------------------------------
# In a non-interactive shell the background child is not a process-group
# leader, so setsid(1) does not fork: $! is ironic itself, and it leads a new
# session + process group that also holds its forked worker.
log "starting ironic on $API_URL (state $STATE)"
: > "$CONSOLE_LOG"
[ -f "$OSLO_LOG" ] && log_offset=$(stat -c %s "$OSLO_LOG") || log_offset=0
t0=$SECONDS
# Its stdout is CONSOLE_LOG, inherited by every process it forks: stop.sh
# finds any of them that left Ironic's process group by that.
"${IN_NS[@]}" setsid "$VENV/bin/ironic" "${CONF_ARGS[@]}" >> "$CONSOLE_LOG" 2>&1 < /dev/null &
pid=$!
echo "$pid" > "$PIDFILE"

# Lines of this run of the oslo log (it is appended to across runs).
new_log() { [ -f "$OSLO_LOG" ] && tail -c +"$((log_offset + 1))" "$OSLO_LOG" || true; }

fail() {
    log "$*"
    echo "----- tail of $CONSOLE_LOG -----" >&2
    tail -n 30 "$CONSOLE_LOG" >&2 || true
    echo "----- tail of $OSLO_LOG (this run) -----" >&2
    new_log | grep -v ' DEBUG ' | tail -n 40 >&2 || true
    if kill -0 "$pid" 2>/dev/null; then
        log "stopping the failed ironic (process group $pid)"
        "$HERE/stop.sh" "$STATE" >&2 || true
    fi
    rm -f "$PIDFILE"
    exit 1
}

# Log lines meaning the conductor will never come up although the launcher
# process may keep running.
FATAL_RE='Cannot start ironic|Failed to register hardware types|Failed to start keepalive|Error starting thread|no default value found for|NoDriversLoaded|DriverLoadError|Unhandled exception|CRITICAL ironic'

deadline=$((SECONDS + TIMEOUT))
while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid" 2>/dev/null && rc=0 || rc=$?
        fail "ironic exited during startup (exit code $rc)"
    fi
    # DEBUG lines are skipped: the config dump at startup prints option values
    # such as "rate_limit_except_level = CRITICAL".
    if matched=$({ cat "$CONSOLE_LOG"; new_log; } | grep -v ' DEBUG ' | grep -Eo "$FATAL_RE" | head -n 1) \
            && [ -n "$matched" ]; then
        fail "ironic conductor failed to start (log says: $matched)"
    fi
    if [ "$(http_code "$API_URL/")" = 200 ] && conductor_ready; then
        break
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
        fail "ironic API/conductor not ready on $API_URL after ${TIMEOUT}s"
    fi
    sleep 1
done

log "ironic is up (pid $pid, pgid $(ps -o pgid= -p "$pid" | tr -d ' '), $((SECONDS - t0))s), logs: $OSLO_LOG"
echo "$API_URL"
