# Sourced by the ensure-* scripts: install a Debian package as root, directly or through sudo.

# need_root WHO WHAT: set `as_root` to the command prefix that runs as root (empty when we are
# root), or stop naming WHO (the script) and WHAT (what it needs root for).
need_root() {
    as_root=()
    if [[ "$(id -u)" -ne 0 ]]; then
        if command -v sudo >/dev/null 2>&1; then
            as_root=(sudo)
        else
            echo "$1: need root or sudo to install $2" >&2
            exit 1
        fi
    fi
}

# apt_install WHO PACKAGE: `apt-get update` then install PACKAGE without recommends, quietly.
apt_install() {
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$1: $2 is not installed and apt-get is unavailable; install it by hand" >&2
        exit 1
    fi
    need_root "$1" "$2"
    "${as_root[@]}" apt-get update -qq >/dev/null
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "$2" >/dev/null
}
