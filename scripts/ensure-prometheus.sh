#!/usr/bin/env bash
# Make sure Prometheus (`prometheus` and `promtool`) is available, installing Debian's
# `prometheus` package if it is not. Used by the Prometheus test tier (tests/prometheus), which
# checks and unit-tests the alert rules with promtool and starts a throwaway server of its own
# on a free port. The package's own service is kept from starting (it would hold port 9090 and
# scrape nothing of ours): a policy-rc.d refuses service starts during the install, and a
# service that started anyway is stopped and disabled. Idempotent and quick when present.
set -euo pipefail
# shellcheck source=lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

have_both() {
    command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1
}

report() {
    local version
    version="$(prometheus --version 2>&1 | head -n 1 || echo 'unknown version')"
    echo "ensure-prometheus: $1 $(command -v prometheus), $(command -v promtool) (${version})"
}

if have_both; then
    report "found"
    exit 0
fi

need_root ensure-prometheus prometheus

# Debian's invoke-rc.d asks /usr/sbin/policy-rc.d whether a package may start its service;
# exit 101 means "no". Put one in place for the install only, unless one is there already.
policy=/usr/sbin/policy-rc.d
placed_policy=0
if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\n# ensure-prometheus: no service starts during the install\nexit 101\n' |
        "${as_root[@]}" tee "$policy" >/dev/null
    "${as_root[@]}" chmod 755 "$policy"
    placed_policy=1
fi
remove_policy() {
    if [[ "$placed_policy" -eq 1 ]]; then
        "${as_root[@]}" rm -f "$policy"
    fi
}
trap remove_policy EXIT

apt_install ensure-prometheus prometheus

# Where systemd runs, a start may have slipped past policy-rc.d (or the unit is enabled for the
# next boot): stop and disable it, so that nothing holds port 9090.
if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
    "${as_root[@]}" systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi

if have_both; then
    report "installed prometheus:"
else
    echo "ensure-prometheus: installed prometheus but still cannot find prometheus and promtool" >&2
    exit 1
fi
