#!/usr/bin/env bash
# Work per operation (issue 18): client instructions per cycle under callgrind, and server
# time per cycle from INFO commandstats, each against a raw `redis`-crate baseline.
#
#   scripts/cpu.sh            # both
#   scripts/cpu.sh instr      # client instructions only
#   scripts/cpu.sh server     # server time and instructions only
#   scripts/cpu.sh sys        # system calls and context switches only (not part of `all`)
#
# Client: each scenario of benches/cpu.rs (a small release binary) runs twice under
# `valgrind --tool=callgrind` (whole process: the caller, the watchdog and listener threads),
# with CPU_CYCLES=$N1 and $N2 after the same warm-up; (instructions₂ - instructions₁) /
# (N2 - N1) is the cost of one cycle with set-up and warm-up cancelled. Prints
#   cpu <scenario> instr_per_op=<n> raw_instr_per_op=<n> ratio=<r>
# Server: each scenario runs natively with SERVER_CYCLES cycles; prints
#   server <scenario> usec_per_op=<n> raw_usec_per_op=<n> ratio=<r> cpu_usec_per_op=<n> raw_cpu_usec_per_op=<n>
# (usec: commandstats time of the commands the client sent, scripts' inner calls counted once
# inside their script; cpu: the server main thread's CPU time, networking included), and
#   server_instr <scenario> instr_per_op=<n> raw_instr_per_op=<n> ratio=<r>
# from a second redis-server run under callgrind (hz 1), dumped after runs of SERVER_N1 and
# SERVER_N2 cycles: the server's instructions per cycle, which the machine's load does not
# blur as it blurs microseconds.
#
# The lock, unfenced lock (`fenced(false)`: a bare SET NX PX acquisition) and semaphore
# cycles are compared with SET NX PX + EVAL compare-and-delete, and the (fenced) lock also
# with the raw fenced cycle (`lock_vs_fenced`: EVALSHA of a hand-written SET NX PX + INCR
# script, then the compare-and-delete EVALSHA; issue 28), the
# queue's push + take + ack, and a busy worker's push + ack_and_take (`queue_worker`, client
# instructions only), with LPUSH + RPOP (the baselines issue 18 names); `rate` (a rate
# limiter's try_acquire that is always allowed) with `rate_raw` (a hand-written GCRA script
# sent as EVALSHA on a plain connection, issue 28); `redlock` (client
# instructions only: one acquire + release over 5 redis-servers the bench binary starts) with
# the single-node SET NX PX + EVAL cycle, as the `redlock5` bench, and (`redlock_vs_raw5`)
# with the raw cycle over the same five nodes (`redlock_raw`); `redlock_busy` (a failed
# `try_acquire` of a RedLock another holder has on every node: the contended attempt) with its
# raw floor `redlock_raw_busy` (SET NX PX to every node, all nil), client instructions and the
# commands the five nodes ran per attempt (`node_calls_per_op`, from their commandstats).
# System calls (`sys`): each client scenario (RedLock's aside: it starts servers of its own;
# `contended` only when CPU_ONLY names it, per cycle of 8 critical sections)
# runs natively under `strace -f -c` (every thread of the process) with SYS_N1 and SYS_N2
# cycles, and once more without strace for the context switches of all its threads
# (getrusage of the child); per cycle, as for instructions, the difference of the two runs
# over the difference in cycles. Prints
#   sys <scenario> syscalls_per_op=<n> raw_syscalls_per_op=<n> vol_cs_per_op=<n> raw_vol_cs_per_op=<n> invol_cs_per_op=<n>
# and, on stderr, the calls per cycle by name. Voluntary switches are the blocking reads and
# waits (the raw cycle's: one per reply); involuntary ones follow the machine's load.
# Environment: REDIS_SERVER (default: redis-server on PATH), N1/N2 (default 300/1300),
# SERVER_CYCLES (default 20000), SERVER_N1/SERVER_N2 (default 200/1200), SYS_N1/SYS_N2
# (default 1000/6000), CPU_ONLY (default:
# every scenario; e.g. CPU_ONLY="lock unfenced" runs those and the baselines they need).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
mode=${1:-all}
n1=${N1:-300}
n2=${N2:-1300}
server_cycles=${SERVER_CYCLES:-20000}
server_bin=${REDIS_SERVER:-redis-server}
server_n1=${SERVER_N1:-200}
server_n2=${SERVER_N2:-1200}

if [[ $mode == sys ]]; then
    command -v strace >/dev/null 2>&1 || {
        echo "cpu.sh: strace is needed (apt-get install strace)" >&2
        exit 1
    }
else
    command -v valgrind >/dev/null 2>&1 || {
        echo "cpu.sh: valgrind is needed (apt-get install valgrind)" >&2
        exit 1
    }
fi

cargo build --quiet --release --bench cpu
bin=$(cargo build --release --bench cpu --message-format=json 2>/dev/null |
    python3 -c 'import sys, json
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "cpu" and m.get("executable"):
        print(m["executable"])')
[[ -x $bin ]] || { echo "cpu.sh: cannot find the cpu bench binary" >&2; exit 1; }

work=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$server_bin" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    --logfile "$work/server.log" &
server_pid=$!
grind_pid=
cleanup() {
    for pid in $server_pid $grind_pid; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
await_port() {
    for _ in $(seq 600); do
        if python3 -c "import socket; socket.create_connection(('127.0.0.1', $1), 0.1)" 2>/dev/null; then
            return
        fi
        sleep 0.05
    done
    echo "cpu.sh: no server on port $1" >&2
    exit 1
}
export REDIS_URL="redis://127.0.0.1:$port/"
await_port "$port"

# Total instructions of one run of `scenario` with `cycles` measured cycles.
instructions() {
    local scenario=$1 cycles=$2 out="$work/callgrind.$1.$2"
    CPU_SCENARIO=$scenario CPU_CYCLES=$cycles valgrind --tool=callgrind --quiet \
        --callgrind-out-file="$out" "$bin" >/dev/null
    # `summary:` (or `totals:`) is the sum over every thread of the process.
    awk '/^(summary|totals):/ { print $2; exit }' "$out"
}

per_op() {
    local scenario=$1 a b
    a=$(instructions "$scenario" "$n1")
    b=$(instructions "$scenario" "$n2")
    echo $(((b - a) / (n2 - n1)))
}

ratio() {
    python3 -c "print(f'{$1 / $2:.2f}')"
}

# Whether any of the given scenarios is to run (CPU_ONLY, if set, lists those that are).
wanted() {
    local s
    [[ -z ${CPU_ONLY:-} ]] && return 0
    for s in "$@"; do
        [[ " $CPU_ONLY " == *" $s "* ]] && return 0
    done
    return 1
}

if [[ $mode == all || $mode == instr ]]; then
    raw_lock=0 raw_queue=0 raw_rate=0
    wanted lock unfenced semaphore redlock && raw_lock=$(per_op lock_raw)
    wanted queue queue_worker && raw_queue=$(per_op queue_raw)
    wanted rate && raw_rate=$(per_op rate_raw)
    for pair in lock:$raw_lock unfenced:$raw_lock semaphore:$raw_lock queue:$raw_queue queue_worker:$raw_queue redlock:$raw_lock rate:$raw_rate; do
        scenario=${pair%%:*}
        raw=${pair#*:}
        wanted "$scenario" || continue
        n=$(per_op "$scenario")
        echo "cpu $scenario instr_per_op=$n raw_instr_per_op=$raw ratio=$(ratio "$n" "$raw")"
        [[ $scenario == redlock ]] && redlock=$n
    done
    # Issue 31's contended lock: 8 threads, one lock, GET + SET inside; a cycle is 8
    # critical sections (instr_per_cs: per critical section, every thread of the process).
    # Only when CPU_ONLY names it (CPU_ONLY=contended).
    if [[ " ${CPU_ONLY:-} " == *" contended "* ]]; then
        c=$(per_op contended)
        raw_c=$(per_op contended_raw)
        echo "cpu contended instr_per_cs=$((c / 8)) raw_instr_per_cs=$((raw_c / 8)) ratio=$(ratio "$c" "$raw_c")"
    fi
    # The lock against the raw fenced cycle (issue 28: a hand-written script doing SET NX
    # PX and the counter's INCR, then the compare-and-delete): what the fence rule costs at
    # the least.
    if wanted lock; then
        lock_n=$(per_op lock)
        raw_fenced=$(per_op lock_raw_fenced)
        echo "cpu lock_vs_fenced instr_per_op=$lock_n raw_instr_per_op=$raw_fenced ratio=$(ratio "$lock_n" "$raw_fenced")"
    fi
    # RedLock against the raw cycle over the same five nodes (`redlock_raw`: SET NX PX to
    # every node before any reply is read, then the compare-and-delete EVAL the same way).
    if wanted redlock; then
        raw5=$(per_op redlock_raw)
        echo "cpu redlock_vs_raw5 instr_per_op=$redlock raw_instr_per_op=$raw5 ratio=$(ratio "$redlock" "$raw5")"
    fi
    if wanted redlock_busy; then
        busy=$(per_op redlock_busy)
        raw_busy=$(per_op redlock_raw_busy)
        line=$(CPU_SCENARIO=redlock_busy CPU_CYCLES=$n2 "$bin")
        calls=$(python3 -c "print(f'{$(sed -n 's/.* node_calls=\([0-9]*\).*/\1/p' <<<"$line") / $n2:.2f}')")
        commands=$(sed -n 's/.* node_commands=\([^ ]*\).*/\1/p' <<<"$line")
        echo "cpu redlock_busy instr_per_op=$busy raw_instr_per_op=$raw_busy ratio=$(ratio "$busy" "$raw_busy") node_calls_per_op=$calls node_commands=$commands (n=$n2)"
    fi
fi

# `field` of the `cycles` line of one native run of `scenario`, per cycle.
server_run() {
    CPU_SCENARIO=$1 CPU_CYCLES=$server_cycles "$bin"
}
field() {
    sed -n "s/.* $2=\([0-9]*\).*/\1/p" <<<"$1"
}

if [[ $mode == all || $mode == server ]]; then
    raw_lock_line= raw_queue_line= raw_rate_line=
    wanted lock unfenced semaphore && raw_lock_line=$(server_run lock_raw)
    wanted queue queue_counted queue_worker queue_worker_counted && raw_queue_line=$(server_run queue_raw)
    wanted rate && raw_rate_line=$(server_run rate_raw)
    for pair in lock:lock_raw unfenced:lock_raw semaphore:lock_raw queue:queue_raw queue_counted:queue_raw queue_worker:queue_raw queue_worker_counted:queue_raw rate:rate_raw; do
        scenario=${pair%%:*}
        wanted "$scenario" || continue
        case ${pair#*:} in
            lock_raw) raw_line=$raw_lock_line ;;
            rate_raw) raw_line=$raw_rate_line ;;
            *) raw_line=$raw_queue_line ;;
        esac
        line=$(server_run "$scenario")
        usec=$(python3 -c "print(f'{$(field "$line" server_usec) / $server_cycles:.2f}')")
        raw_usec=$(python3 -c "print(f'{$(field "$raw_line" server_usec) / $server_cycles:.2f}')")
        cpu=$(python3 -c "print(f'{$(field "$line" server_cpu_usec) / $server_cycles:.2f}')")
        raw_cpu=$(python3 -c "print(f'{$(field "$raw_line" server_cpu_usec) / $server_cycles:.2f}')")
        echo "server $scenario usec_per_op=$usec raw_usec_per_op=$raw_usec ratio=$(ratio "$usec" "$raw_usec") cpu_usec_per_op=$cpu raw_cpu_usec_per_op=$raw_cpu"
        echo "  detail: ${line#cycles }" >&2
        [[ $scenario == lock ]] && lock_line=$line
    done
    if wanted lock; then
        fenced_line=$(server_run lock_raw_fenced)
        usec=$(python3 -c "print(f'{$(field "$lock_line" server_usec) / $server_cycles:.2f}')")
        raw_usec=$(python3 -c "print(f'{$(field "$fenced_line" server_usec) / $server_cycles:.2f}')")
        echo "server lock_vs_fenced usec_per_op=$usec raw_usec_per_op=$raw_usec ratio=$(ratio "$usec" "$raw_usec")"
    fi
fi

# Server instructions: a redis-server under callgrind; each client run is followed by a dump
# (which also zeroes the counters), so each dump holds one run.
if [[ $mode == all || $mode == server ]]; then
    grind_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    valgrind --tool=callgrind --quiet --callgrind-out-file="$work/server.grind" \
        "$server_bin" --port "$grind_port" --bind 127.0.0.1 --save '' --appendonly no \
        --hz 1 --dir "$work" --logfile "$work/grind.log" &
    grind_pid=$!
    await_port "$grind_port"
    # The start-up's instructions go to a first dump of their own.
    callgrind_control --dump "$grind_pid" >/dev/null
    # Server instructions of one client run of `scenario` with `cycles` cycles.
    server_instructions() {
        REDIS_URL="redis://127.0.0.1:$grind_port/" CPU_SCENARIO=$1 CPU_CYCLES=$2 "$bin" >/dev/null
        callgrind_control --dump "$grind_pid" >/dev/null
        # The newest dump (this runs in a subshell: no counter survives it).
        awk '/^(summary|totals):/ { print $2; exit }' "$(ls -v "$work"/server.grind.* | tail -n 1)"
    }
    server_per_op() {
        local a b
        a=$(server_instructions "$1" "$server_n1")
        b=$(server_instructions "$1" "$server_n2")
        echo $(((b - a) / (server_n2 - server_n1)))
    }
    raw_lock=0 raw_queue=0 raw_rate=0
    wanted lock unfenced semaphore && raw_lock=$(server_per_op lock_raw)
    wanted queue queue_counted queue_worker queue_worker_counted && raw_queue=$(server_per_op queue_raw)
    wanted rate && raw_rate=$(server_per_op rate_raw)
    for pair in lock:$raw_lock unfenced:$raw_lock semaphore:$raw_lock queue:$raw_queue queue_counted:$raw_queue queue_worker:$raw_queue queue_worker_counted:$raw_queue rate:$raw_rate; do
        scenario=${pair%%:*}
        raw=${pair#*:}
        wanted "$scenario" || continue
        n=$(server_per_op "$scenario")
        echo "server_instr $scenario instr_per_op=$n raw_instr_per_op=$raw ratio=$(ratio "$n" "$raw")"
        [[ $scenario == lock ]] && server_lock=$n
    done
    if wanted lock; then
        raw_fenced=$(server_per_op lock_raw_fenced)
        echo "server_instr lock_vs_fenced instr_per_op=$server_lock raw_instr_per_op=$raw_fenced ratio=$(ratio "$server_lock" "$raw_fenced")"
    fi
fi

# System calls and context switches per cycle (see the top of this file).
if [[ $mode == sys ]]; then
    CPU_ONLY=${CPU_ONLY:-} SYS_N1=${SYS_N1:-1000} SYS_N2=${SYS_N2:-6000} python3 - "$bin" "$work" <<'PY'
import os, resource, subprocess, sys

bin, work = sys.argv[1], sys.argv[2]
n1, n2 = int(os.environ["SYS_N1"]), int(os.environ["SYS_N2"])
only = os.environ["CPU_ONLY"].split()


def run(scenario, cycles):
    """(calls by name, voluntary, involuntary switches) of one run of `scenario`."""
    env = dict(os.environ, CPU_SCENARIO=scenario, CPU_CYCLES=str(cycles))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([bin], env=env, stdout=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = f"{work}/strace.{scenario}.{cycles}"
    subprocess.run(["strace", "-f", "-c", "-o", out, bin], env=env,
                   stdout=subprocess.DEVNULL, check=True)
    calls = {}
    for line in open(out):
        f = line.split()
        # % time, seconds, usecs/call, calls, [errors,] syscall
        if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
            calls[f[-1]] = int(f[3])
    return (calls, after.ru_nvcsw - before.ru_nvcsw, after.ru_nivcsw - before.ru_nivcsw)


def per_op(scenario):
    (c1, v1, i1), (c2, v2, i2) = run(scenario, n1), run(scenario, n2)
    d = n2 - n1
    calls = {k: (c2.get(k, 0) - c1.get(k, 0)) / d for k in set(c1) | set(c2)}
    calls = {k: v for k, v in calls.items() if abs(v) >= 0.005}
    return sum(calls.values()), calls, (v2 - v1) / d, (i2 - i1) / d


def shown(calls):
    return " ".join(f"{k}={v:.2f}" for k, v in sorted(calls.items()))


raws = {}
for scenario, raw in [("lock", "lock_raw"), ("unfenced", "lock_raw"), ("semaphore", "lock_raw"),
                      ("queue", "queue_raw"), ("queue_worker", "queue_raw"),
                      ("contended", "contended_raw")]:
    if (only and scenario not in only) or (not only and scenario == "contended"):
        continue
    if raw not in raws:
        raws[raw] = per_op(raw)
    total, calls, vol, invol = per_op(scenario)
    raw_total, raw_calls, raw_vol, _ = raws[raw]
    print(f"sys {scenario} syscalls_per_op={total:.2f} raw_syscalls_per_op={raw_total:.2f} "
          f"vol_cs_per_op={vol:.2f} raw_vol_cs_per_op={raw_vol:.2f} invol_cs_per_op={invol:.2f}",
          flush=True)
    print(f"  detail: {scenario}: {shown(calls)}; {raw}: {shown(raw_calls)}", file=sys.stderr,
          flush=True)
PY
fi
