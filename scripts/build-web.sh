#!/usr/bin/env bash
# Build kiban's web dashboard: web/ (Preact + TypeScript) -> src/kiban/web/assets/.
# npm ci only when web/node_modules does not match package-lock.json (a stamp holds the
# lock's sha256); then a strict type check and one esbuild bundle. Node is needed here only:
# the built assets ship inside the Python package and `kiban up` serves them as they are.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
web="$root/web"
out="$root/src/kiban/web/assets"

for tool in node npm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "build-web: '$tool' not found; install Node.js 18 or newer (with npm) to build the dashboard" >&2
        exit 1
    fi
done

stamp="$web/node_modules/.kiban-lock-sha256"
want="$(sha256sum "$web/package-lock.json" | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    (cd "$web" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" >"$stamp"
fi

# the sources, config, lock and this script as one hash: when the assets were built from
# exactly these, there is nothing to do
sources="$({
    (cd "$web" && find src index.html tsconfig.json package-lock.json -type f -print0 \
        | sort -z | xargs -0 sha256sum)
    sha256sum <"$root/scripts/build-web.sh"
} | sha256sum | cut -d' ' -f1)"
built="$out/.sources-sha256"
if [[ -f "$built" && "$(cat "$built")" == "$sources" ]] \
    && [[ -f "$out/index.html" && -f "$out/app.js" && -f "$out/app.css" && -f "$out/uPlot.min.css" ]]; then
    echo "build-web: dashboard up to date in ${out#"$root"/}"
    exit 0
fi

(cd "$web" && ./node_modules/.bin/tsc --noEmit -p tsconfig.json)

mkdir -p "$out"
(cd "$web" && ./node_modules/.bin/esbuild src/main.tsx \
    --bundle --minify --target=es2020 --format=iife \
    --jsx=automatic --jsx-import-source=preact \
    --outfile="$out/app.js" --log-level=warning)
cp "$web/src/app.css" "$out/app.css"
cp "$web/node_modules/uplot/dist/uPlot.min.css" "$out/uPlot.min.css"
# the bundle's name in index.html carries its content hash, so a browser never runs a stale one
js_hash="$(sha256sum "$out/app.js" | cut -c1-12)"
css_hash="$(cat "$out/app.css" "$out/uPlot.min.css" | sha256sum | cut -c1-12)"
sed -e "s|/assets/app.js\"|/assets/app.js?v=$js_hash\"|" \
    -e "s|/assets/app.css\"|/assets/app.css?v=$css_hash\"|" \
    -e "s|/assets/uPlot.min.css\"|/assets/uPlot.min.css?v=$css_hash\"|" \
    "$web/index.html" >"$out/index.html.tmp"
mv "$out/index.html.tmp" "$out/index.html"
echo "$sources" >"$built"
echo "build-web: dashboard built in ${out#"$root"/}"
