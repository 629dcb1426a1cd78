#!/usr/bin/env bash
# Make sure PostgreSQL server binaries (initdb, pg_ctl, postgres) are available, installing
# Debian's `postgresql` package if they are not. Used by tests and benchmarks that start a
# throwaway server (kiban.devtools.postgres). Idempotent and quick when already present.
set -euo pipefail

find_initdb() {
    local candidate
    if candidate="$(command -v initdb 2>/dev/null)" && [[ -x "$candidate" ]]; then
        printf '%s\n' "$candidate"
        return 0
    fi
    # Debian keeps the server binaries out of PATH, one directory per major version.
    # Prefer the newest version (sort -V so that 9.6 < 10 < 15).
    candidate="$(
        for f in /usr/lib/postgresql/*/bin/initdb; do
            [[ -x "$f" ]] && printf '%s\n' "$f"
        done | sort -V | tail -n 1
    )"
    if [[ -n "$candidate" ]]; then
        printf '%s\n' "$candidate"
        return 0
    fi
    return 1
}

if initdb_path="$(find_initdb)"; then
    version="$("$initdb_path" --version 2>/dev/null || echo 'unknown version')"
    echo "ensure-postgres: found ${initdb_path} (${version})"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-postgres: no initdb found and apt-get is unavailable;" \
        "install the PostgreSQL server binaries by hand" >&2
    exit 1
fi

sudo_cmd=()
if [[ "$(id -u)" -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo_cmd=(sudo)
    else
        echo "ensure-postgres: no initdb found; need root or sudo to install postgresql" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq >/dev/null
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends postgresql >/dev/null

if initdb_path="$(find_initdb)"; then
    version="$("$initdb_path" --version 2>/dev/null || echo 'unknown version')"
    echo "ensure-postgres: installed postgresql: ${initdb_path} (${version})"
else
    echo "ensure-postgres: installed postgresql but still cannot find initdb" >&2
    exit 1
fi
