#!/usr/bin/env bash
# Print the path of a headless-capable Chromium for the cluster-map browser test, installing Debian's
# chromium package when it is missing. Prints nothing and exits 1 when it cannot be installed (the map's
# browser tests then skip and say so).
set -uo pipefail
find_chromium() { command -v chromium || command -v chromium-browser; }
if ! path=$(find_chromium); then
    as_root=""
    [ "$(id -u)" -ne 0 ] && as_root="sudo -n"
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >&2 \
        || { $as_root apt-get update -q >&2 && $as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q chromium >&2; } || exit 1
    path=$(find_chromium) || exit 1
fi
echo "$path"
