#!/usr/bin/env bash
# Plants realistic bugs in the LIBRARY (its Lua scripts and core machines), one at a time,
# in a copy of this tree, and runs the test command's two suites against each: the Redis
# integration tests that cover the planted code, and the deterministic simulation. Prints
# which suite caught each mutant, and which mutants survive both.
#
# Not part of scripts/test.sh: about half an hour (each mutant rebuilds the core and runs
# both suites). The tree itself is never touched: the copy lives under target/mutants/
# (builds go to the tree's target/, beside its own; MUTANTS_TARGET changes that).
#
#   bash scripts/mutants.sh                  # every mutant
#   bash scripts/mutants.sh '^(take|ack-no)'  # the mutants whose name matches this (regex)
#   SIM_SEEDS=2000 REDIS_TESTS="--test queue" bash scripts/mutants.sh ack
#
# The redis column reads `flaky` when the only tests that failed also failed in the
# control run (timing-sensitive tests on a busy machine): that is not a catch.
#
# A mutant is a literal replacement in one file (its text must be found: a mutant whose
# text is gone is reported `n/a`, so a change of the code cannot silently disarm it). A
# suite "caught" it when it fails; the simulation runs SIM_SEEDS seeds per primitive
# (default 3,000) with the same seeds as the test command's first ones.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
work=${MUTANTS_DIR:-$root/target/mutants}
copy=$work/tree
log=$work/logs
# The tree's own target directory: the copy's crates build beside the tree's (their paths
# differ), and the registry dependencies (mlua and its C sources among them) are reused.
export CARGO_TARGET_DIR=${MUTANTS_TARGET:-$root/target}
filter=${1:-}
sim_seeds=${SIM_SEEDS:-3000}
redis_tests=${REDIS_TESTS:---test scripts --test queue --test queue_failures --test lock --test semaphore --test watchdog}

# name | file | text to find | text to put instead (\n for a newline)
mutants=(
    "take-no-token-check|core/src/queue/lua/dequeue.lua|mine and redis.call('HGET', KEYS[7], mine) == token|mine"
    "take-no-refresh|core/src/queue/lua/dequeue.lua|if expiry < now + tonumber(ARGV[2]) then|if false then"
    "ack-no-owner-check|core/src/queue/lua/ack.lua|if holder ~= token then\n  local settled|if not holder then\n  local settled"
    "ack-no-undone-record|core/src/queue/lua/ack.lua|if KEYS[9] then|if false then"
    "nack-no-owner-check|core/src/queue/lua/nack.lua|if holder ~= ARGV[2] then|if not holder then"
    "push-due-floored|core/src/queue/lua/push.lua|up + delay|now + delay"
    "release-no-undone-record|core/src/lease/lua/release.lua|if KEYS[2] then|if false then"
    "release-no-owner-check|core/src/lease/lua/release.lua|if holder == ARGV[1] then\n  redis.call('DEL', KEYS[1])|if holder then\n  redis.call('DEL', KEYS[1])"
    "extend-success-when-gone|core/src/lease/lua/extend.lua|if holder == false then\n  return 0\nend\nreturn -1|return 1"
    "fence-restarts|core/src/lease/lua/acquire.lua|if counter < us then|if false then"
    "validity-without-drift|core/src/lease/mod.rs|saturating_add(sent_at, ttl.saturating_sub(drift(ttl)))|saturating_add(sent_at, ttl)"
)

mkdir -p "$copy" "$log"
# A fresh copy of the tree as it is (tracked and new files, not target/).
rm -rf "$copy" && mkdir -p "$copy" &&
    tar -C "$root" --exclude=./target --exclude=./.git -cf - . | tar -C "$copy" -xf - ||
    { echo "mutants: copying the tree failed" >&2; exit 2; }

# Restores `file` in the copy from the tree.
restore() {
    cp "$root/$1" "$copy/$1"
}

# Replaces the first occurrence of $2 by $3 in file $1 of the copy; fails if not found.
plant() {
    python3 - "$copy/$1" "$2" "$3" <<'EOF'
import sys
path, old, new = sys.argv[1], sys.argv[2].replace('\\n', '\n'), sys.argv[3].replace('\\n', '\n')
text = open(path).read()
if old not in text:
    sys.exit(1)
open(path, 'w').write(text.replace(old, new, 1))
EOF
}

# The tests a suite's log reports failed, one per line.
failed_tests() {
    grep -o '^test [^ ]* \.\.\. FAILED' "$1" 2>/dev/null | awk '{print $2}' | sort -u
}

# Runs one suite in the copy: prints caught, passed or broken (did not build). With a
# control log ($CONTROL_LOG), a failure counts as caught only if a test failed that passed
# in the control (timing tests may fail on a busy machine, planted bug or not).
suite() {
    local name=$1 out=$2
    shift 2
    (cd "$copy" && timeout 1800 "$@") >"$out" 2>&1
    local status=$?
    if [[ $status -eq 0 ]]; then
        echo passed
    elif grep -q "could not compile" "$out"; then
        echo broken
    elif [[ -n "${CONTROL_LOG:-}" && -f "$CONTROL_LOG" ]] &&
        [[ -z "$(comm -23 <(failed_tests "$out") <(failed_tests "$CONTROL_LOG"))" ]] &&
        [[ -n "$(failed_tests "$out")" ]]; then
        echo "flaky"
    else
        echo caught
    fi
}

printf '%-26s %-12s %-12s %s\n' mutant redis sim verdict
# The control: without a planted bug both suites must pass, or no verdict below means much.
if [[ ${MUTANTS_BASELINE:-1} != 0 ]]; then
    # shellcheck disable=SC2086
    redis=$(suite redis "$log/baseline.redis.log" cargo test -p redlease-suite $redis_tests)
    sim=$(SIM_SEEDS=$sim_seeds suite sim "$log/baseline.sim.log" \
        cargo test -p redlease-sim --test sim simulation -- --nocapture)
    printf '%-26s %-12s %-12s %s\n' "(no mutant)" "$redis" "$sim" \
        "$([[ $redis == passed && $sim == passed ]] && echo control || echo "CONTROL FAILS: see $log/baseline.*.log")"
fi
rows=()
for m in "${mutants[@]}"; do
    IFS='|' read -r name file old new <<<"$m"
    if [[ -n "$filter" && ! "$name" =~ $filter ]]; then
        continue
    fi
    if ! plant "$file" "$old" "$new"; then
        row=$(printf '%-26s %-12s %-12s %s' "$name" n/a n/a "text not found in $file")
        echo "$row"
        rows+=("$row")
        continue
    fi
    # shellcheck disable=SC2086
    redis=$(CONTROL_LOG=$log/baseline.redis.log suite redis "$log/$name.redis.log" \
        cargo test -p redlease-suite $redis_tests)
    sim=$(SIM_SEEDS=$sim_seeds suite sim "$log/$name.sim.log" \
        cargo test -p redlease-sim --test sim simulation -- --nocapture)
    restore "$file"
    verdict=caught
    if [[ ($redis == passed || $redis == flaky) && $sim == passed ]]; then
        verdict=SURVIVES
    elif [[ $redis == broken || $sim == broken ]]; then
        verdict="does not build (see $log/$name.*.log)"
    fi
    caught_by=$(grep -ho '^\s*\[[a-z-]*\]' "$log/$name.sim.log" 2>/dev/null | tr -d ' []' | sort -u | tr '\n' ' ')
    new_failures=$(comm -23 <(failed_tests "$log/$name.redis.log") <(failed_tests "$log/baseline.redis.log") | tr '\n' ' ')
    row=$(printf '%-26s %-12s %-12s %s %s %s' "$name" "$redis" "$sim" "$verdict" \
        "${caught_by:+(sim: $caught_by)}" "${new_failures:+(redis: $new_failures)}")
    echo "$row"
    rows+=("$row")
done

echo
echo "mutants: ${#rows[@]} run; surviving:"
survived=0
for r in "${rows[@]}"; do
    if [[ $r == *SURVIVES* ]]; then
        echo "  $r"
        survived=$((survived + 1))
    fi
done
[[ $survived -eq 0 ]] && echo "  none"
exit 0
