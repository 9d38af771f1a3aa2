#!/usr/bin/env bash
# Runs the timing-heavy integration tests while two busy loops (one per core of a 2-core
# machine, at the tests' own priority) compete for the CPU: the test command must pass on
# a machine that is doing something else (issue 26, item 7). The hogs are stopped however
# the script ends.
#
#   bash scripts/hog.sh                      # the default timing-heavy files
#   bash scripts/hog.sh --test lock          # other cargo test arguments instead
#   HOGS=4 bash scripts/hog.sh               # more busy loops
#
# The tests are built before the hogs start (a build under the hog only takes longer).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

HOGS="${HOGS:-2}"
if [[ $# -eq 0 ]]; then
    # The files whose assertions involve time: leases at the floor, renewals, timeouts on
    # frozen servers, waits and wake-ups, queue visibility and delays.
    set -- --test settings --test lock --test watchdog --test bounds --test faults \
        --test queue --test semaphore --test family --test live --test threads
fi

cargo test --no-run "$@"

pids=()
stop_hogs() {
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
}
trap stop_hogs EXIT INT TERM

for _ in $(seq "$HOGS"); do
    # A busy loop in a child shell, at the same priority as the tests.
    bash -c 'while :; do :; done' &
    pids+=("$!")
done
echo "==> $HOGS busy loops running (pids ${pids[*]}); load: $(cut -d' ' -f1-3 /proc/loadavg)"

status=0
start=$(date +%s)
cargo test --no-fail-fast "$@" -- --nocapture || status=$?
echo "==> under the hog: cargo test $* exited $status after $(($(date +%s) - start)) s; load: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$status"
