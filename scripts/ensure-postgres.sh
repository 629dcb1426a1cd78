#!/usr/bin/env bash
# Make sure PostgreSQL server binaries (initdb, pg_ctl, postgres) are available, installing
# Debian's `postgresql` package if they are not. Used by tests and benchmarks that start a
# throwaway server (kiban.devtools.postgres). Idempotent and quick when already present.
set -euo pipefail
# shellcheck source=lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

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

apt_install ensure-postgres postgresql

if initdb_path="$(find_initdb)"; then
    version="$("$initdb_path" --version 2>/dev/null || echo 'unknown version')"
    echo "ensure-postgres: installed postgresql: ${initdb_path} (${version})"
else
    echo "ensure-postgres: installed postgresql but still cannot find initdb" >&2
    exit 1
fi
