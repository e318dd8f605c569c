#!/usr/bin/env bash
# The local real-services stack: one Apache Kafka 4.x node (KRaft, broker+controller in one JVM, jars from
# Maven Central) and one Redis, both on free loopback ports, all state under one folder per checkout.
#
#   deploy/local/stack.sh start    start both (a no-op that prints the env when they already run)
#   deploy/local/stack.sh stop     stop both (TERM, wait, KILL) and delete their data
#   deploy/local/stack.sh status   say what runs (exit 0 when both run, 3 otherwise)
#   deploy/local/stack.sh env      print the running stack's env: GK_KAFKA_BOOTSTRAP / GK_REDIS_URL, and the same
#                                  addresses as the gatekeeper reads them, GK_KAFKA__BOOTSTRAP_SERVERS / GK_REDIS__URL
#
# Environment:
#   GK_STATE_DIR   state folder (default <repo>/.local/stack): stack.env, run/ (pids, configs), logs/, data/
#   GK_CACHE_DIR   jar cache shared by checkouts (default ~/.cache/rogerwilco-gatekeeper): kafka-<version>/libs
#   GK_KAFKA_HEAP_OPTS      JVM heap flags (default -Xms128m -Xmx512m)
#   GK_KAFKA_JVM_OPTS       other JVM flags (default -XX:+UseSerialGC -XX:TieredStopAtLevel=1)
#   GK_STACK_START_TIMEOUT  seconds to wait for each service to answer (default 120)
#   GK_STACK_STOP_TIMEOUT   seconds to wait after SIGTERM before SIGKILL (default 30)
#
# Installs what is missing: redis-server with apt (as root; the package's system service is neither started nor
# enabled), the Kafka jars with Maven. Java 17+ and Maven must be on the PATH.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
POM="$HERE/kafka/pom.xml"

STATE_DIR="${GK_STATE_DIR:-$REPO/.local/stack}"
CACHE_DIR="${GK_CACHE_DIR:-${HOME:-/root}/.cache/rogerwilco-gatekeeper}"
START_TIMEOUT="${GK_STACK_START_TIMEOUT:-120}"
STOP_TIMEOUT="${GK_STACK_STOP_TIMEOUT:-30}"
read -r -a KAFKA_HEAP <<<"${GK_KAFKA_HEAP_OPTS:--Xms128m -Xmx512m}"
# Serial GC and the C1 compiler only: a test broker on a small machine starts in about half the time
# (measured on 2 cores under load: 12-14 s instead of 18-24 s); its throughput is ample for tests and `make run`.
read -r -a KAFKA_JVM <<<"${GK_KAFKA_JVM_OPTS:--XX:+UseSerialGC -XX:TieredStopAtLevel=1}"

KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM")"
[[ -n "$KAFKA_VERSION" ]] || { echo "stack: error: no <kafka.version> in $POM" >&2; exit 1; }
KAFKA_HOME="$CACHE_DIR/kafka-$KAFKA_VERSION"
LIBS="$KAFKA_HOME/libs"

log() { echo "stack: $*" >&2; }
die() {
    echo "stack: error: $*" >&2
    exit 1
}

python_bin() {
    if [[ -n "${GK_PYTHON:-}" ]]; then
        echo "$GK_PYTHON"
    elif [[ -x "$REPO/.venv/bin/python" ]]; then
        echo "$REPO/.venv/bin/python"
    elif command -v python3 >/dev/null; then
        echo python3
    else
        die "python3 is needed (to pick free ports and probe Kafka)"
    fi
}

paths() {
    mkdir -p "$STATE_DIR"
    STATE_DIR="$(cd "$STATE_DIR" && pwd)"
    ENV_FILE="$STATE_DIR/stack.env"
    RUN_DIR="$STATE_DIR/run"
    LOG_DIR="$STATE_DIR/logs"
    DATA_DIR="$STATE_DIR/data"
    KAFKA_PID="$RUN_DIR/kafka.pid"
    REDIS_PID="$RUN_DIR/redis.pid"
}

# One stack.sh at a time per state dir. FD 8 must not leak into the services (see `8>&-` below), or they
# would hold the lock for their whole life.
lock_state() {
    paths
    exec 8>"$STATE_DIR/.lock"
    flock -w 600 8 || die "another stack.sh holds $STATE_DIR/.lock"
}

# pid_of PIDFILE PATTERN: the pid if that process is alive and its command line matches (guards against reuse).
pid_of() {
    local pid
    [[ -f "$1" ]] || return 1
    pid="$(tr -dc '0-9' <"$1")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2" || return 1
    echo "$pid"
}
kafka_pid() { pid_of "$KAFKA_PID" 'kafka\.Kafka'; }
redis_pid() { pid_of "$REDIS_PID" 'redis-server'; }

free_ports() {
    "$(python_bin)" - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

ensure_redis() {
    command -v redis-server >/dev/null && return 0
    [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null ||
        die "redis-server is missing; install it (Debian: apt-get install -y redis-server)"
    install_redis
}

# The Debian package would also start a system-wide Redis on 6379 and enable it at boot; the stack runs its own
# redis-server, so neither happens: a policy-rc.d forbids service starts during the install (unless one is there
# already, as in most containers), and the unit is disabled (and stopped, under a running systemd) afterwards.
install_redis() {
    local policy=/usr/sbin/policy-rc.d ours=0 rc=0
    log "installing redis-server with apt-get (its system service is neither started nor enabled)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 || die "apt-get update failed"
    if [[ ! -e "$policy" ]]; then
        printf '#!/bin/sh\n# written by deploy/local/stack.sh for the redis-server install: start no service\nexit 101\n' \
            >"$policy"
        chmod 755 "$policy"
        ours=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    apt-get install -y -qq redis-server >&2 || rc=$?
    if ((ours)); then
        rm -f "$policy"
        trap - EXIT
    fi
    ((rc == 0)) || die "apt-get install redis-server failed"
    disable_redis_service
}

disable_redis_service() {
    if command -v systemctl >/dev/null; then
        # works without a running systemd too (it removes the unit's links, and the SysV ones)
        systemctl disable redis-server.service >/dev/null 2>&1 || true
        if [[ -d /run/systemd/system ]]; then
            systemctl stop redis-server.service >/dev/null 2>&1 || true
        fi
    elif command -v update-rc.d >/dev/null; then
        update-rc.d redis-server disable >/dev/null 2>&1 || true
    fi
    log "the system's redis-server service is disabled (the stack starts its own on a free port)"
}

# The Kafka jars, fetched once per pom content into the shared cache (locked: checkouts may start together).
ensure_kafka_libs() {
    command -v java >/dev/null || die "java (17+) is missing"
    mkdir -p "$KAFKA_HOME"
    local want have tmp
    want="$(sha256sum "$POM" | cut -d' ' -f1)"
    exec 9>"$KAFKA_HOME/.lock"
    flock -w 900 9 || die "timed out waiting for $KAFKA_HOME/.lock"
    have="$(cat "$KAFKA_HOME/pom.sha256" 2>/dev/null || true)"
    if [[ "$have" != "$want" || ! -d "$LIBS" ]]; then
        command -v mvn >/dev/null || die "mvn (Maven) is missing"
        log "fetching Kafka $KAFKA_VERSION jars with Maven into $LIBS"
        tmp="$KAFKA_HOME/libs.tmp.$$"
        rm -rf "$tmp"
        cp "$POM" "$KAFKA_HOME/pom.xml"
        if ! (cd "$KAFKA_HOME" && mvn -B -Dstyle.color=never dependency:copy-dependencies -DincludeScope=runtime \
            -DoutputDirectory="$tmp" </dev/null >"$KAFKA_HOME/mvn.log" 2>&1 8>&- 9>&-); then
            grep -E 'ERROR|FAIL' "$KAFKA_HOME/mvn.log" | tail -n 20 >&2 || true
            die "Maven could not fetch the Kafka jars; see $KAFKA_HOME/mvn.log"
        fi
        rm -rf "$LIBS"
        mv "$tmp" "$LIBS"
        echo "$want" >"$KAFKA_HOME/pom.sha256"
    fi
    compgen -G "$LIBS/kafka_2.13-$KAFKA_VERSION.jar" >/dev/null || die "$LIBS lacks kafka_2.13-$KAFKA_VERSION.jar"
    exec 9>&-
}

redis_ping() {
    (
        exec 7<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf 'PING\r\n' >&7
        IFS= read -r -t 2 line <&7 || exit 1
        [[ "$line" == +PONG* ]]
    ) 2>/dev/null
}

start_redis() {
    local port="$1" deadline pid
    mkdir -p "$DATA_DIR/redis"
    rm -f "$REDIS_PID"
    # hash-max-listpack-value 1024: a conversation's entries (a line's first decision keeps the line's text, up to a
    # few hundred bytes) stay in the compact listpack encoding; Redis's default of 64 bytes would turn nearly every
    # conversation's hash into a hashtable, ~40% more memory per open handoff (the README's Redis settings)
    redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
        --hash-max-listpack-value 1024 --maxmemory-policy noeviction \
        --daemonize yes --pidfile "$REDIS_PID" --logfile "$LOG_DIR/redis.log" --dir "$DATA_DIR/redis" \
        </dev/null >>"$LOG_DIR/redis.log" 2>&1 8>&- || die "redis-server failed to start; see $LOG_DIR/redis.log"
    deadline=$((SECONDS + START_TIMEOUT))
    until pid="$(redis_pid)" && redis_ping "$port"; do
        ((SECONDS < deadline)) || die "Redis did not answer PING on 127.0.0.1:$port; see $LOG_DIR/redis.log"
        sleep 0.1
    done
    log "redis $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$port (pid $pid)"
}

write_kafka_config() {
    local broker="$1" controller="$2"
    mkdir -p "$RUN_DIR/kafka" "$DATA_DIR/kafka"
    cat >"$RUN_DIR/kafka/server.properties" <<EOF
# Written by deploy/local/stack.sh: one node, broker and controller, loopback only.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$controller
listeners=PLAINTEXT://127.0.0.1:$broker,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$broker,CONTROLLER://127.0.0.1:$controller
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$DATA_DIR/kafka
num.partitions=1
default.replication.factor=1
# Topics are created on purpose (the gatekeeper's deployment does it; tests use the topic_factory fixture),
# as on a production cluster: a mistyped topic name fails instead of silently creating a topic.
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=8
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
EOF
    cat >"$RUN_DIR/kafka/log4j2.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="$LOG_DIR/kafka.log" append="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="org.apache.kafka.clients" level="WARN"/>
    <Root level="INFO"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
EOF
}

start_kafka() {
    local broker="$1" controller="$2" cluster_id pid rc
    write_kafka_config "$broker" "$controller"
    local java_opts=(-Djava.awt.headless=true "-Dlog4j2.configurationFile=$RUN_DIR/kafka/log4j2.xml"
        "-Dkafka.logs.dir=$LOG_DIR")
    # A cluster id is base64url: it may start with "-", so it is passed as --cluster-id=<id>, never as a separate
    # argument the option parser would take for an option (one start in 64 failed "expected one argument").
    cluster_id="$("$(python_bin)" -c \
        'import base64, uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')"
    java "${KAFKA_JVM[@]}" "${java_opts[@]}" -cp "$LIBS/*" kafka.tools.StorageTool format --standalone \
        "--cluster-id=$cluster_id" \
        -c "$RUN_DIR/kafka/server.properties" </dev/null >>"$LOG_DIR/kafka.out" 2>&1 8>&- ||
        die "formatting the Kafka storage failed; see $LOG_DIR/kafka.out"
    # setsid: the broker leaves the caller's process group, so ^C in `make` does not kill it mid-write;
    # `stack.sh stop` ends it.
    setsid java "${KAFKA_HEAP[@]}" "${KAFKA_JVM[@]}" "${java_opts[@]}" \
        -cp "$LIBS/*" kafka.Kafka "$RUN_DIR/kafka/server.properties" \
        </dev/null >>"$LOG_DIR/kafka.out" 2>&1 8>&- &
    pid=$!
    echo "$pid" >"$KAFKA_PID"
    rc=0
    "$(python_bin)" "$HERE/kafka_ready.py" "127.0.0.1:$broker" "$START_TIMEOUT" "$pid" || rc=$?
    if ((rc != 0)); then
        tail -n 20 "$LOG_DIR/kafka.log" "$LOG_DIR/kafka.out" >&2 2>/dev/null || true
        die "Kafka did not answer a metadata request on 127.0.0.1:$broker (exit $rc); see $LOG_DIR/kafka.log and $LOG_DIR/kafka.out"
    fi
    log "kafka $KAFKA_VERSION on 127.0.0.1:$broker, controller 127.0.0.1:$controller (pid $pid)"
}

# stop_pid NAME PID: SIGTERM, wait up to STOP_TIMEOUT, then SIGKILL.
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
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    log "stopped $name (pid $pid)"
}

stop_all() {
    local pid
    if pid="$(kafka_pid)"; then stop_pid kafka "$pid"; fi
    if pid="$(redis_pid)"; then stop_pid redis "$pid"; fi
    rm -rf "$DATA_DIR" "$ENV_FILE" "$KAFKA_PID" "$REDIS_PID"
}

# The stack's addresses twice: GK_KAFKA_BOOTSTRAP / GK_REDIS_URL (the tests, the demo, the bench), and the names the
# gatekeeper's configuration reads (GK_KAFKA__BOOTSTRAP_SERVERS / GK_REDIS__URL), so that after
# `set -a; . .local/stack/stack.env; set +a` every gatekeeper command talks to this stack, whatever its -c file says.
write_env() {
    printf 'GK_KAFKA_BOOTSTRAP=%s\nGK_REDIS_URL=%s\nGK_KAFKA__BOOTSTRAP_SERVERS=%s\nGK_REDIS__URL=%s\n' "$1" "$2" "$1" "$2"
}

print_env() { cat "$ENV_FILE"; }

# A stack started by an earlier stack.sh wrote only the first two names: write the file again, same addresses.
refresh_env() {
    local bootstrap redis_url
    bootstrap="$(sed -n 's/^GK_KAFKA_BOOTSTRAP=//p' "$ENV_FILE")"
    redis_url="$(sed -n 's/^GK_REDIS_URL=//p' "$ENV_FILE")"
    [[ -n "$bootstrap" && -n "$redis_url" ]] || return 0
    write_env "$bootstrap" "$redis_url" >"$ENV_FILE.tmp"
    if cmp -s "$ENV_FILE.tmp" "$ENV_FILE"; then rm -f "$ENV_FILE.tmp"; else mv "$ENV_FILE.tmp" "$ENV_FILE"; fi
}

running() { kafka_pid >/dev/null && redis_pid >/dev/null && [[ -s "$ENV_FILE" ]]; }

cmd_start() {
    lock_state
    if running; then
        log "already running (state $STATE_DIR)"
        refresh_env
        print_env
        return 0
    fi
    stop_all # whatever half of a previous stack is left
    ensure_redis
    ensure_kafka_libs
    rm -rf "$LOG_DIR" "$RUN_DIR"
    mkdir -p "$LOG_DIR" "$RUN_DIR" "$DATA_DIR"
    local ports
    read -r -a ports <<<"$(free_ports 3)"
    # A failed start leaves nothing running.
    trap 'rc=$?; if ((rc != 0)); then stop_all; fi' EXIT
    start_redis "${ports[2]}"
    start_kafka "${ports[0]}" "${ports[1]}"
    write_env "127.0.0.1:${ports[0]}" "redis://127.0.0.1:${ports[2]}/0" >"$ENV_FILE.tmp"
    mv "$ENV_FILE.tmp" "$ENV_FILE"
    trap - EXIT
    log "started; logs in $LOG_DIR, env in $ENV_FILE"
    print_env
}

cmd_stop() {
    lock_state
    stop_all
    log "stopped (logs kept in $LOG_DIR)"
}

cmd_status() {
    paths
    local pid rc=0 bootstrap="" redis_url=""
    if [[ -f "$ENV_FILE" ]]; then
        bootstrap="$(sed -n 's/^GK_KAFKA_BOOTSTRAP=//p' "$ENV_FILE")"
        redis_url="$(sed -n 's/^GK_REDIS_URL=//p' "$ENV_FILE")"
    fi
    if pid="$(kafka_pid)"; then
        echo "kafka: running (pid $pid) ${bootstrap:+bootstrap $bootstrap} version $KAFKA_VERSION"
    else
        echo "kafka: not running"
        rc=3
    fi
    if pid="$(redis_pid)"; then
        echo "redis: running (pid $pid) ${redis_url:+url $redis_url}"
    else
        echo "redis: not running"
        rc=3
    fi
    echo "state: $STATE_DIR"
    return "$rc"
}

cmd_env() {
    paths
    running || die "the stack is not running (state $STATE_DIR); run: $0 start"
    print_env
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) cmd_env ;;
    *)
        echo "usage: $0 {start|stop|status|env}" >&2
        exit 2
        ;;
esac
