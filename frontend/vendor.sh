#!/usr/bin/env bash
# Refresh the committed third-party assets in static/vendor/ from the pinned npm packages.
# Usage: cd frontend && npm ci && ./vendor.sh   (no CDN at run time: the copies are committed)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
[ -d node_modules/uplot ] || npm ci --no-audit --no-fund
dest=static/vendor/uplot
rm -rf "$dest"
mkdir -p "$dest"
cp node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css node_modules/uplot/LICENSE "$dest/"
version="$(node -p "require('./node_modules/uplot/package.json').version")"
echo "$version" > "$dest/VERSION"
echo "vendored uPlot $version into $dest"
