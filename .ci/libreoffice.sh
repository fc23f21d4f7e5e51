#!/usr/bin/env bash
# Print the path of LibreOffice (soffice) for the workbook rendering tests, installing Debian's
# libreoffice-calc, poppler-utils (pdftotext, pdftoppm) and Carlito (metric-compatible with Calibri, the
# workbooks' font, so that pages print as in Excel) when they are missing. Prints nothing and exits 1
# when they cannot be installed (the rendering tests then skip and say so).
set -uo pipefail
find_soffice() { command -v soffice || command -v libreoffice; }
have_carlito() { fc-list 2>/dev/null | grep -q Carlito; }
if ! path=$(find_soffice) || ! command -v pdftotext >/dev/null || ! command -v pdftoppm >/dev/null \
    || ! have_carlito; then
    as_root=""
    [ "$(id -u)" -ne 0 ] && as_root="sudo -n"
    packages=(libreoffice-calc poppler-utils fonts-crosextra-carlito)
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${packages[@]}" >&2 \
        || { $as_root apt-get update -q >&2 && $as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q --no-install-recommends "${packages[@]}" >&2; } || exit 1
    path=$(find_soffice) || exit 1
fi
echo "$path"
