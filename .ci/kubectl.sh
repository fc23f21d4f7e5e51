#!/usr/bin/env bash
# Print the path of kubectl for the Kubernetes export's kubectl tests (client-side dry runs of the round
# files, and the round scripts run against a fake API server on loopback), installing Debian's
# kubernetes-client package when it is missing. Prints nothing and exits 1 when it cannot be installed
# (those tests then skip and say so).
set -uo pipefail
if ! path=$(command -v kubectl); then
    as_root=""
    [ "$(id -u)" -ne 0 ] && as_root="sudo -n"
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q kubernetes-client >&2 \
        || { $as_root apt-get update -q >&2 && $as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q kubernetes-client >&2; } || exit 1
    path=$(command -v kubectl) || exit 1
fi
echo "$path"
