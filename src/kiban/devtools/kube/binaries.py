"""Where the local control plane's binaries live: built once by scripts/ensure-kube.sh, cached.

The versions here must match the wrapper modules in ``deploy/kube-build/*/go.mod`` (a test
checks). The binaries sit outside the repository, keyed by the Kubernetes version:
``${KIBAN_CACHE_DIR:-~/.cache/kiban}/kube/<version>/bin``; ``$KIBAN_KUBE_BIN`` points elsewhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"

BIN_ENV_VAR = "KIBAN_KUBE_BIN"
"""Environment variable naming a directory with etcd, kube-apiserver, kube-scheduler and kwok."""
CACHE_ENV_VAR = "KIBAN_CACHE_DIR"
ENSURE_HINT = "run scripts/ensure-kube.sh to build them (Go 1.26 and the Go module proxy)"

_NAMES = ("etcd", "kube-apiserver", "kube-scheduler", "kwok")


class KubeBinariesMissing(RuntimeError):
    """The control plane's binaries have not been built (or not where we look)."""


@dataclass(frozen=True)
class KubeBinaries:
    """Paths of the four binaries of the local control plane."""

    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path
    kwok: Path


def cache_dir() -> Path:
    """kiban's cache directory, shared by every checkout of the repository."""
    override = os.environ.get(CACHE_ENV_VAR)
    return Path(override) if override else Path.home() / ".cache" / "kiban"


def bin_dir() -> Path:
    """The directory the binaries are expected in (they may not be there yet)."""
    override = os.environ.get(BIN_ENV_VAR)
    if override:
        return Path(override)
    return cache_dir() / "kube" / KUBERNETES_VERSION / "bin"


def find_binaries() -> KubeBinaries | None:
    """The binaries, or None when any of them is missing or not executable."""
    directory = bin_dir()
    paths = [directory / name for name in _NAMES]
    if not all(os.access(path, os.X_OK) for path in paths):
        return None
    return KubeBinaries(*paths)


def require_binaries() -> KubeBinaries:
    """The binaries, or :class:`KubeBinariesMissing` naming the directory and the fix."""
    found = find_binaries()
    if found is None:
        missing = [name for name in _NAMES if not os.access(bin_dir() / name, os.X_OK)]
        raise KubeBinariesMissing(f"{', '.join(missing)} not found in {bin_dir()}; {ENSURE_HINT}")
    return found
