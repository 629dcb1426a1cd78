#!/usr/bin/env bash
# Make sure the local Kubernetes control plane's binaries (etcd, kube-apiserver, kube-scheduler,
# kwok) are built and cached, building them from Go modules through the Go module proxy if not.
# Used by `kiban dev kube up`, the kube test tier and `kiban bench kube`
# (kiban.devtools.kube.binaries finds them). Idempotent and quick when already cached.
#
# The versions are pinned by the wrapper modules in deploy/kube-build/*/go.mod (with go.sum).
# Everything lands outside the repository, keyed by the Kubernetes version:
#   ${KIBAN_CACHE_DIR:-$HOME/.cache/kiban}/kube/<k8s version>/bin/   the four binaries
#   ${KIBAN_CACHE_DIR:-$HOME/.cache/kiban}/go/{mod,build}            Go's module and build caches
# Each binary has a <name>.version stamp beside it; a binary whose stamp does not name the pinned
# version is rebuilt. Needs Go 1.26 or newer.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
modules="${repo}/deploy/kube-build"
cache="${KIBAN_CACHE_DIR:-${HOME}/.cache/kiban}"

say() { echo "ensure-kube: $*" >&2; }

# The version a wrapper module requires of MODULE (a `require` line of its go.mod).
pinned() {
    local dir="$1" module="$2" version
    version="$(awk -v m="$module" '($1 == m || ($1 == "require" && $2 == m)) {
        for (i = 1; i <= NF; i++) if ($i ~ /^v[0-9]/) { print $i; exit } }' "${dir}/go.mod")"
    if [[ -z "$version" ]]; then
        say "no version of ${module} in ${dir}/go.mod"
        exit 1
    fi
    printf '%s\n' "$version"
}

k8s_version="$(pinned "${modules}/kubernetes" k8s.io/kubernetes)"
etcd_version="$(pinned "${modules}/etcd" go.etcd.io/etcd/server/v3)"
kwok_version="$(pinned "${modules}/kwok" sigs.k8s.io/kwok)"
bin="${cache}/kube/${k8s_version}/bin"

# Is binary NAME present and stamped with VERSION?
cached() {
    [[ -x "${bin}/$1" && -f "${bin}/$1.version" && "$(cat "${bin}/$1.version")" == "$2" ]]
}

all_cached() {
    cached etcd "$etcd_version" && cached kube-apiserver "$k8s_version" \
        && cached kube-scheduler "$k8s_version" && cached kwok "$kwok_version"
}

if all_cached; then
    say "cached in ${bin} (kubernetes ${k8s_version}, etcd ${etcd_version}, kwok ${kwok_version})"
    exit 0
fi

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    PATH="/usr/local/go/bin:${PATH}"  # Go's own installer puts it here, often not on PATH
fi
if ! command -v go >/dev/null 2>&1; then
    say "Go is not installed; install Go 1.26 or newer (https://go.dev/dl) and run this again"
    exit 1
fi
go_version="$(go env GOVERSION)"
if [[ "$(printf '%s\n' go1.26 "$go_version" | sort -V | head -n 1)" != "go1.26" ]]; then
    say "${go_version} is too old: Kubernetes ${k8s_version} needs Go 1.26 or newer"
    exit 1
fi

export GOMODCACHE="${cache}/go/mod"
export GOCACHE="${cache}/go/build"
export GOFLAGS="-trimpath -buildvcs=false -mod=readonly"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
mkdir -p "$bin"

# One build at a time per cache (tests and `kiban dev kube up` may race here).
exec 9>"${cache}/kube/.build.lock"
flock 9
if all_cached; then
    say "cached in ${bin} (built meanwhile by another process)"
    exit 0
fi

# build NAME VERSION MODULE_DIR PACKAGE [LDFLAGS]: build into a temporary file, stamp, rename.
build() {
    local name="$1" version="$2" dir="$3" package="$4" ldflags="${5:-}"
    if cached "$name" "$version"; then
        return 0
    fi
    say "building ${name} ${version} (first time only; several minutes)"
    local started=$SECONDS
    (cd "$dir" && go build -ldflags "-s -w ${ldflags}" -o "${bin}/.${name}.tmp" "$package")
    mv -f "${bin}/.${name}.tmp" "${bin}/${name}"
    printf '%s\n' "$version" >"${bin}/${name}.version"
    say "built ${name} ${version} in $((SECONDS - started))s"
}

# Kubernetes' own build stamps its version this way (hack/lib/version.sh); the API server reports
# it at /version and derives its compatibility version from it.
minor="${k8s_version#v1.}"
minor="${minor%%.*}"
k8s_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X ${pkg}.gitVersion=${k8s_version} -X ${pkg}.gitMajor=1"
    k8s_ldflags+=" -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
done

started=$SECONDS
build etcd "$etcd_version" "${modules}/etcd" go.etcd.io/etcd/server/v3
build kube-apiserver "$k8s_version" "${modules}/kubernetes" \
    k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
build kube-scheduler "$k8s_version" "${modules}/kubernetes" \
    k8s.io/kubernetes/cmd/kube-scheduler "$k8s_ldflags"
build kwok "$kwok_version" "${modules}/kwok" sigs.k8s.io/kwok/cmd/kwok
say "ready in ${bin} after $((SECONDS - started))s"
