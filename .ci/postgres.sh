#!/usr/bin/env bash
# `postgres.sh start DIR`: start a throwaway PostgreSQL server on loopback, its files in DIR, for the
# store tests and print its SQLAlchemy URL. Installs Debian's postgresql package when the server binaries
# are missing. Prints nothing and exits 1 when PostgreSQL cannot be installed or started (the tests then
# run on SQLite only and say so). `postgres.sh stop DIR`: stop that server (if it runs) and remove DIR.
set -uo pipefail
mode=${1:?usage: postgres.sh start|stop DIR}
datadir=${2:?usage: postgres.sh start|stop DIR}
run=()
[ "$(id -u)" -eq 0 ] && run=(runuser -u postgres --)
if [ "$mode" = stop ]; then
    bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    if [ -n "$bindir" ] && [ -f "$datadir/data/postmaster.pid" ]; then
        "${run[@]}" "$bindir/pg_ctl" -D "$datadir/data" -m fast -w stop >/dev/null 2>&1
    fi
    rm -rf "$datadir"
    exit 0
fi
port=${GPUPLAN_PG_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$bindir" ]; then
    as_root=""
    [ "$(id -u)" -ne 0 ] && as_root="sudo -n"
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2 \
        || { $as_root apt-get update -q >&2 && $as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q postgresql >&2; } || exit 1
    bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    [ -n "$bindir" ] || exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system postgres || exit 1
    chown postgres "$datadir"
fi
"${run[@]}" "$bindir/initdb" -D "$datadir/data" -U postgres --auth=trust >/dev/null || exit 1
"${run[@]}" "$bindir/pg_ctl" -D "$datadir/data" -l "$datadir/log" -w \
    -o "-p $port -k $datadir -c listen_addresses=127.0.0.1" start >/dev/null || exit 1
"${run[@]}" "$bindir/createdb" -h 127.0.0.1 -p "$port" -U postgres gpuplan_test || exit 1
echo "postgresql+psycopg://postgres@127.0.0.1:$port/gpuplan_test"
