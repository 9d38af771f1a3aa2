//! The watchdog: many watched leases renewed by one thread.

use std::time::{Duration, Instant};

use crate::common::*;

/// How many leases `watchdog_10k` keeps alive.
const WATCHED: usize = 10_000;
/// Their ttl: renewed every second, so 10,000 renewals/s are needed.
const WATCHED_TTL: Duration = Duration::from_secs(3);

/// Calls of EVALSHA the server has served so far.
fn evalsha_calls(conn: &mut redis::Connection) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("bench: INFO commandstats failed");
    stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Resident memory of this process, in bytes.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// One client holds 10,000 watched leases (3 s ttl, renewed every second by its one
/// watchdog thread). `ops_per_s` is renewals per second, counted by the server during the
/// scenario's slices (only the watchdog sends EVALSHA then); `ratio` is that over the
/// baseline's cycles per second (renewals are pipelined 512 to a batch). p50/p99 do not
/// apply (0). `lost=` must be 0; `bytes_per_lease=` is the process's resident memory growth
/// per held lease (guard, its cell with the lease inside, the schedule's entry).
pub fn watchdog_10k(ctx: &Ctx) -> Measurement {
    let client = redlease::Client::builder(&ctx.url)
        .pool_size(THREADS as u32)
        .build()
        .expect("bench: cannot build the watchdog client");
    let rss_before = rss_bytes();
    let guards: Vec<redlease::lock::LockGuard> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let client = &client;
                s.spawn(move || {
                    (t..WATCHED)
                        .step_by(THREADS)
                        .map(|i| {
                            let name = format!("bench-w{i}");
                            client
                                .lock(&name)
                                .ttl(WATCHED_TTL)
                                .try_acquire()
                                .expect("bench: watched try_acquire failed")
                                .expect(
                                    "bench: watched lock was busy (leftover from an aborted run?)",
                                )
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("bench: acquiring thread panicked"))
            .collect()
    });
    let bytes_per_lease = rss_bytes().saturating_sub(rss_before) / WATCHED as u64;
    let mut conn = ctx.raw_connection();
    let pairs = interleave(ctx, |length, _| {
        let before = evalsha_calls(&mut conn);
        let start = Instant::now();
        std::thread::sleep(length);
        let elapsed = start.elapsed();
        Slice {
            ops: evalsha_calls(&mut conn).saturating_sub(before),
            elapsed,
        }
    });
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let min_remaining = guards
        .iter()
        .map(|g| g.remaining())
        .min()
        .unwrap_or_default();
    let mut m = Measurement::interleaved(&pairs);
    m.extra.push(("leases", WATCHED.to_string()));
    m.extra
        .push(("ttl_ms", WATCHED_TTL.as_millis().to_string()));
    m.extra.push(("lost", lost.to_string()));
    m.extra
        .push(("min_remaining_ms", min_remaining.as_millis().to_string()));
    m.extra
        .push(("bytes_per_lease", bytes_per_lease.to_string()));
    m.extra.push(("watchdog_threads", "1".to_string()));
    drop(guards);
    m
}

/// Scale: one client holds 100,000 watched leases (15 s ttl, renewed every 5 s by its one
/// watchdog thread: 20,000 renewals a second), held for 17 s (more than a ttl, so every
/// lease is renewed at least once). No interleaved baseline (`ratio` 1): `ops_per_s` is
/// renewals per second counted by the server while they were held. Extras: `lost=` (must be
/// 0), `renewed=` (EVALSHA calls while held: at least `leases`), `min_remaining_ms` at the
/// end, and `bytes_per_lease`: the process's resident memory growth per held lease over
/// 100,000 leases, at the end of the hold (guards, the watchdog's schedule, which a lease
/// enters when its first renewal is due, renewal batches, pooled buffers);
/// `bytes_per_lease_acquired`: the same right after acquiring (before any renewal).
pub fn watchdog_100k(ctx: &Ctx) -> Measurement {
    const LEASES: usize = 100_000;
    const TTL: Duration = Duration::from_secs(15);
    const HOLD: Duration = Duration::from_secs(17);
    let client = redlease::Client::builder(&ctx.url)
        .pool_size(THREADS as u32)
        .build()
        .expect("bench: cannot build the watchdog client");
    let rss_before = rss_bytes();
    let guards: Vec<redlease::lock::LockGuard> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let client = &client;
                s.spawn(move || {
                    (t..LEASES)
                        .step_by(THREADS)
                        .map(|i| {
                            client
                                .lock(&format!("bench-wk{i}"))
                                .ttl(TTL)
                                .try_acquire()
                                .expect("bench: watched try_acquire failed")
                                .expect("bench: watched lock was busy (leftover?)")
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("bench: acquiring thread panicked"))
            .collect()
    });
    let bytes_acquired = rss_bytes().saturating_sub(rss_before) / LEASES as u64;
    let mut conn = ctx.raw_connection();
    let before = evalsha_calls(&mut conn);
    let start = Instant::now();
    std::thread::sleep(HOLD);
    let elapsed = start.elapsed();
    let renewed = evalsha_calls(&mut conn).saturating_sub(before);
    let bytes_per_lease = rss_bytes().saturating_sub(rss_before) / LEASES as u64;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let min_remaining = guards
        .iter()
        .map(|g| g.remaining())
        .min()
        .unwrap_or_default();
    let mut m = Measurement {
        total: Slice {
            ops: renewed,
            elapsed,
        },
        against: Against::Nothing,
        ..Measurement::default()
    };
    m.per_thread = vec![renewed];
    m.extra.push(("leases", LEASES.to_string()));
    m.extra.push(("ttl_ms", TTL.as_millis().to_string()));
    m.extra.push(("renewed", renewed.to_string()));
    m.extra
        .push(("bytes_per_lease_acquired", bytes_acquired.to_string()));
    m.extra.push(("lost", lost.to_string()));
    m.extra
        .push(("min_remaining_ms", min_remaining.as_millis().to_string()));
    m.extra
        .push(("bytes_per_lease", bytes_per_lease.to_string()));
    m.extra.push(("watchdog_threads", "1".to_string()));
    drop(guards);
    m
}
