#!/usr/bin/env bash
# Make sure Chromium is available for the browser test tier (tests/browser) and `kiban bench
# web`, installing Debian's `chromium` package if it is not. Playwright for Python drives it
# through `executable_path`; Playwright's own browser download is never used. Idempotent and
# quick when present.
set -euo pipefail
# shellcheck source=lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

report() {
    local version
    # Debian's /usr/bin/chromium is a launcher script; --version passes through to the browser.
    version="$(chromium --version 2>/dev/null | tail -n 1 || echo 'unknown version')"
    echo "ensure-chromium: $1 $(command -v chromium) (${version})"
}

if command -v chromium >/dev/null 2>&1; then
    report "found"
    exit 0
fi

apt_install ensure-chromium chromium

if command -v chromium >/dev/null 2>&1; then
    report "installed chromium:"
else
    echo "ensure-chromium: installed chromium but still cannot find it on PATH" >&2
    exit 1
fi
