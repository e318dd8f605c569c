#!/usr/bin/env bash
# A local Redis Cluster for the tests: three masters (no replicas) on free loopback ports, no persistence, all state
# under one folder per checkout. The single Redis of deploy/local/stack.sh is left alone.
#
#   deploy/local/redis_cluster.sh start    start the three nodes and create the cluster (a no-op that prints the
#                                          env when it already runs)
#   deploy/local/redis_cluster.sh stop     stop the nodes (TERM, wait, KILL) and delete their data
#   deploy/local/redis_cluster.sh status   say what runs (exit 0 when the cluster answers cluster_state:ok, 3 if not)
#   deploy/local/redis_cluster.sh env      print GK_TEST_REDIS_CLUSTER_URL=redis://127.0.0.1:<port>/0 (one seed
#                                          node; the client discovers the others)
#
# Run the Redis-facing integration tests against it:
#   eval "$(deploy/local/redis_cluster.sh start)" && export GK_TEST_REDIS_CLUSTER_URL
#   .venv/bin/pytest -q tests/integration/test_redis_store.py
#
# Environment:
#   GK_REDIS_CLUSTER_DIR           state folder (default <repo>/.local/redis-cluster): cluster.env, node-<port>/
#                                  (nodes.conf, pid, log)
#   GK_REDIS_CLUSTER_START_TIMEOUT seconds to wait for the nodes and for cluster_state:ok (default 60)
#   GK_STACK_STOP_TIMEOUT          seconds to wait after SIGTERM before SIGKILL (default 30)
#
# Needs redis-server and redis-cli (Debian: apt-get install -y redis-server, which brings redis-tools).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
STATE_DIR="${GK_REDIS_CLUSTER_DIR:-$REPO/.local/redis-cluster}"
START_TIMEOUT="${GK_REDIS_CLUSTER_START_TIMEOUT:-60}"
STOP_TIMEOUT="${GK_STACK_STOP_TIMEOUT:-30}"
ENV_FILE="$STATE_DIR/cluster.env"
NODES=3

log() { printf 'redis_cluster: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

python_bin() {
    if [[ -x "$REPO/.venv/bin/python" ]]; then echo "$REPO/.venv/bin/python"; else command -v python3; fi
}

# Free loopback ports whose cluster bus port (port + 10000) is free too.
free_ports() {
    "$(python_bin)" - "$1" <<'PY'
import socket, sys
want, found, held = int(sys.argv[1]), [], []
while len(found) < want:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    held.append(s)
    if port + 10000 > 65535:
        continue
    bus = socket.socket()
    try:
        bus.bind(("127.0.0.1", port + 10000))
    except OSError:
        continue
    finally:
        bus.close()
    found.append(port)
print(" ".join(map(str, found)))
PY
}

ports() { [[ -s "$ENV_FILE" ]] && sed -n 's/^GK_REDIS_CLUSTER_PORTS=//p' "$ENV_FILE"; }

node_pid() {
    local file="$STATE_DIR/node-$1/redis.pid" pid
    [[ -f "$file" ]] || return 1
    pid="$(tr -dc '0-9' <"$file")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- 'redis-server' || return 1
    echo "$pid"
}

cluster_ok() { redis-cli -h 127.0.0.1 -p "$1" cluster info 2>/dev/null | tr -d '\r' | grep -qx 'cluster_state:ok'; }

running() {
    local p all
    all="$(ports)" || return 1
    [[ -n "$all" ]] || return 1
    for p in $all; do node_pid "$p" >/dev/null || return 1; done
    cluster_ok "${all%% *}"
}

print_env() {
    local all
    all="$(ports)"
    echo "GK_TEST_REDIS_CLUSTER_URL=redis://127.0.0.1:${all%% *}/0"
}

start_node() {
    local port="$1" dir="$STATE_DIR/node-$1"
    mkdir -p "$dir"
    rm -f "$dir/redis.pid" "$dir/nodes.conf"
    # as the stack's single Redis (deploy/local/stack.sh): listpack hashes, no eviction, no persistence
    redis-server --bind 127.0.0.1 --port "$port" --cluster-enabled yes --cluster-config-file "$dir/nodes.conf" \
        --cluster-node-timeout 5000 --save '' --appendonly no \
        --hash-max-listpack-value 1024 --maxmemory-policy noeviction \
        --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir" \
        </dev/null >>"$dir/redis.log" 2>&1 || die "redis-server failed to start on $port; see $dir/redis.log"
}

start() {
    command -v redis-server >/dev/null || die "redis-server is missing (Debian: apt-get install -y redis-server)"
    command -v redis-cli >/dev/null || die "redis-cli is missing (Debian: apt-get install -y redis-tools)"
    if running; then
        log "already running"
        print_env
        return 0
    fi
    stop_all
    mkdir -p "$STATE_DIR"
    local all p deadline seeds=()
    all="$(free_ports "$NODES")"
    for p in $all; do
        start_node "$p"
        seeds+=("127.0.0.1:$p")
    done
    deadline=$((SECONDS + START_TIMEOUT))
    for p in $all; do
        until node_pid "$p" >/dev/null && redis-cli -h 127.0.0.1 -p "$p" ping 2>/dev/null | grep -q PONG; do
            ((SECONDS < deadline)) || die "node 127.0.0.1:$p did not answer PING; see $STATE_DIR/node-$p/redis.log"
            sleep 0.1
        done
    done
    redis-cli --cluster create "${seeds[@]}" --cluster-replicas 0 --cluster-yes >"$STATE_DIR/create.log" 2>&1 ||
        die "redis-cli --cluster create failed; see $STATE_DIR/create.log"
    for p in $all; do
        until cluster_ok "$p"; do
            ((SECONDS < deadline)) || die "node 127.0.0.1:$p is not at cluster_state:ok after ${START_TIMEOUT}s"
            sleep 0.1
        done
    done
    printf 'GK_REDIS_CLUSTER_PORTS=%s\n' "$all" >"$ENV_FILE"
    log "redis cluster of $NODES masters on 127.0.0.1 ports $all"
    print_env
}

stop_pid() {
    local name="$1" pid="$2" deadline
    kill -TERM "$pid" 2>/dev/null || return 0
    deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            log "$name (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
    log "stopped $name (pid $pid)"
}

stop_all() {
    local dir port pid
    [[ -d "$STATE_DIR" ]] || return 0
    for dir in "$STATE_DIR"/node-*; do
        [[ -d "$dir" ]] || continue
        port="${dir##*/node-}"
        if pid="$(node_pid "$port")"; then stop_pid "redis node $port" "$pid"; fi
    done
    rm -rf "$STATE_DIR"
}

case "${1:-}" in
start) start ;;
stop) stop_all ;;
status)
    if running; then
        log "running on ports $(ports)"
    else
        log "not running"
        exit 3
    fi
    ;;
env)
    running || die "the cluster is not running (deploy/local/redis_cluster.sh start)"
    print_env
    ;;
*)
    echo "usage: $0 start|stop|status|env" >&2
    exit 2
    ;;
esac
