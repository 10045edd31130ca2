#!/usr/bin/env bash
# A PostgreSQL coordinator and two shards on loopback, for development, tests and CI.
#
#   scripts/pg_cluster.sh start [DIR] [PORT]   initdb (once) and start three servers on
#                                              127.0.0.1:PORT (coordinator), PORT+1, PORT+2
#                                              (shards); prints the coordinator's DSN last
#   scripts/pg_cluster.sh stop  [DIR]          stop the three servers (data kept)
#   scripts/pg_cluster.sh dsns  [DIR] [PORT]   the three servers' DSNs, comma-separated
#
# DIR defaults to $RAGDX_PG_DIR or /var/tmp/ragdx-pg, PORT to $RAGDX_PG_PORT or 55432. The
# servers run as the postgres user when started by root (as the current user otherwise), listen
# on 127.0.0.1 only and trust local connections: a development set-up, not a production one.
# Each server gets the database "ragdx"; pgvector must be installed (scripts/pg_install.sh).
set -euo pipefail
cmd=${1:-start}
dir=${2:-${RAGDX_PG_DIR:-/var/tmp/ragdx-pg}}
port=${3:-${RAGDX_PG_PORT:-55432}}
PG_MAJOR=${PG_MAJOR:-15}
bin=/usr/lib/postgresql/$PG_MAJOR/bin
names=(coordinator shard1 shard2)

if [ "$(id -u)" = 0 ]; then
    user=postgres
    as_user() { runuser -u postgres -- "$@"; }
else
    user=$(id -un)
    as_user() { "$@"; }
fi

dsn() { echo "postgresql://$user@127.0.0.1:$1/ragdx"; }

start_one() {
    local data=$1 p=$2
    if [ ! -f "$data/PG_VERSION" ]; then
        as_user "$bin/initdb" -D "$data" -U "$user" -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
        cat >> "$data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $p
unix_socket_directories = '$data'
max_connections = 60
shared_buffers = 256MB
synchronous_commit = off
max_worker_processes = 8
max_parallel_workers_per_gather = 0
maintenance_work_mem = 256MB
CONF
    fi
    sed -i "s/^port = .*/port = $p/" "$data/postgresql.conf"
    if ! as_user "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        as_user "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 start >/dev/null \
            || { tail -n 20 "$data/server.log" >&2; exit 1; }
    fi
    as_user "$bin/psql" -h 127.0.0.1 -p "$p" -U "$user" -d postgres -Atqc \
        "SELECT 1 FROM pg_database WHERE datname = 'ragdx'" | grep -q 1 \
        || as_user "$bin/createdb" -h 127.0.0.1 -p "$p" -U "$user" ragdx
}

case $cmd in
    start)
        [ -x "$bin/initdb" ] || { echo "PostgreSQL $PG_MAJOR is not installed: run scripts/pg_install.sh" >&2; exit 1; }
        mkdir -p "$dir"
        if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
        for i in 0 1 2; do start_one "$dir/${names[$i]}" $((port + i)); done
        echo "shards: $(dsn $((port + 1))) $(dsn $((port + 2)))" >&2
        dsn "$port"
        ;;
    stop)
        for name in "${names[@]}"; do
            if [ -f "$dir/$name/postmaster.pid" ]; then
                as_user "$bin/pg_ctl" -D "$dir/$name" -m fast -w stop >/dev/null || true
            fi
        done
        ;;
    dsns)
        echo "$(dsn "$port"),$(dsn $((port + 1))),$(dsn $((port + 2)))"
        ;;
    *)
        echo "usage: $0 start|stop|dsns [DIR] [PORT]" >&2; exit 2 ;;
esac
