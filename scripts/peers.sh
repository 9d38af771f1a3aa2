#!/usr/bin/env bash
# The peer comparison: redlease's queue against BullMQ's Rust port (bullmq-official 1.4.4,
# tokio) on one redis-server. The peer crate lives in peers/bullmq-bench with its own
# [workspace]: its dependencies never enter redlease's dependency tree or Cargo.lock.
#
#   scripts/peers.sh                     # 20,000 jobs, 3 interleaved rounds
#   JOBS=50000 ROUNDS=5 scripts/peers.sh
#   REDIS_URL=redis://127.0.0.1:6379/ scripts/peers.sh
#
# Prints one line per run and `peer workers_<n> redlease_jobs_per_s=.. bullmq_jobs_per_s=..
# ratio=..` (medians). Not part of scripts/test.sh: it needs the network once to fetch the
# peer's crates, and a quiet machine to mean anything.
set -euo pipefail
cd "$(dirname "$0")/../peers/bullmq-bench"
exec cargo run --release --quiet --bin bullmq-bench
