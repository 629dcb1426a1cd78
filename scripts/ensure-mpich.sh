#!/usr/bin/env bash
# Make sure MPICH's Hydra launcher and compiler wrapper (mpirun.mpich, mpicc.mpich) are
# available, installing Debian's `mpich` if they are not. The MPICH tier of the MPI tests
# (`mpi: {implementation: MPICH}`) runs them. Debian's `mpirun`, `mpiexec` and `mpicc` are
# alternatives shared with Open MPI: mpi4py and every other MPI test need them to stay Open
# MPI's, so this script sets them back if installing mpich took them. Idempotent.
set -euo pipefail
# shellcheck source=lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

found() {
    command -v mpirun.mpich >/dev/null 2>&1 && command -v mpicc.mpich >/dev/null 2>&1 &&
        command -v hydra_pmi_proxy >/dev/null 2>&1
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
    apt_install ensure-mpich mpich
    if ! found; then
        echo "ensure-mpich: installed mpich but still cannot find mpirun.mpich, mpicc.mpich and hydra_pmi_proxy" >&2
        exit 1
    fi
    echo "ensure-mpich: installed mpich: $(command -v mpirun.mpich)"
fi
keep_open_mpi mpirun /usr/bin/mpirun.openmpi
keep_open_mpi mpi /usr/bin/mpicc.openmpi
