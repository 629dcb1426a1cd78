#!/usr/bin/env bash
# Make sure MPICH's Hydra launcher and compiler wrapper (mpirun.mpich, mpicc.mpich and its
# headers) are available, installing Debian's `mpich` and `libmpich-dev` if they are not. The
# MPICH tier of the MPI tests (`mpi: {implementation: MPICH}`) runs them. Debian's `mpirun`,
# `mpiexec`, `mpicc` and the development library `libmpi.so` are alternatives shared with Open
# MPI, and they must stay Open MPI's: mpi4py loads `libmpi.so` first when it exists, and with
# MPICH's it fails (it looks for `libmpi.so.12`, which Debian's MPICH does not ship). So
# `libopenmpi-dev` is installed too (its alternative outranks MPICH's), and each alternative is
# set back to Open MPI's if MPICH took it. Idempotent.
set -euo pipefail
# shellcheck source=lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

MULTIARCH="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
MPICH_HEADER="/usr/include/$MULTIARCH/mpich/mpi.h"
OPEN_MPI_HEADERS="/usr/lib/$MULTIARCH/openmpi/include"

found() {
    command -v mpirun.mpich >/dev/null 2>&1 && command -v mpicc.mpich >/dev/null 2>&1 &&
        command -v hydra_pmi_proxy >/dev/null 2>&1 &&
        [[ -e "$MPICH_HEADER" && -e "$OPEN_MPI_HEADERS/mpi.h" ]]
}

# keep_open_mpi NAME TARGET: point the alternative NAME back at Open MPI's TARGET when it
# exists and points elsewhere (installing mpich may have made MPICH's the default).
keep_open_mpi() {
    local name="$1" target="$2" current
    [[ -e "$target" ]] || return 0
    current="$(readlink -f "/etc/alternatives/$name" 2>/dev/null || true)"
    if [[ -n "$current" && "$current" != "$(readlink -f "$target")" ]]; then
        need_root ensure-mpich "update-alternatives"
        "${as_root[@]}" update-alternatives --quiet --set "$name" "$target"
        echo "ensure-mpich: set $name back to $target (was $current)"
    fi
}

if found; then
    echo "ensure-mpich: found $(command -v mpirun.mpich) ($(mpirun.mpich --version 2>/dev/null | grep -m1 -i version || true))"
else
    for package in mpich libmpich-dev libopenmpi-dev; do
        apt_install ensure-mpich "$package"
    done
    if ! found; then
        echo "ensure-mpich: installed mpich but still cannot find mpirun.mpich, mpicc.mpich, hydra_pmi_proxy and the headers" >&2
        exit 1
    fi
    echo "ensure-mpich: installed mpich: $(command -v mpirun.mpich)"
fi
keep_open_mpi mpirun /usr/bin/mpirun.openmpi
keep_open_mpi mpi /usr/bin/mpicc.openmpi
keep_open_mpi "mpi-$MULTIARCH" "$OPEN_MPI_HEADERS"
