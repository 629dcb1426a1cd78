#!/usr/bin/env bash
# Make sure Open MPI's launcher and daemon (mpirun, orted) and its library are available,
# installing Debian's `openmpi-bin` if they are not. MPI jobs (`launcher: mpirun`) on the local
# executor run them; mpi4py (a kiban dependency) loads the library at run time. Idempotent and
# quick when already present.
set -euo pipefail
# shellcheck source=lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

found() {
    command -v mpirun >/dev/null 2>&1 && command -v orted >/dev/null 2>&1
}

if found; then
    echo "ensure-openmpi: found $(command -v mpirun) ($(mpirun --version 2>/dev/null | head -n 1))"
    exit 0
fi

apt_install ensure-openmpi openmpi-bin

if found; then
    echo "ensure-openmpi: installed openmpi-bin: $(command -v mpirun) ($(mpirun --version 2>/dev/null | head -n 1))"
else
    echo "ensure-openmpi: installed openmpi-bin but still cannot find mpirun and orted" >&2
    exit 1
fi
