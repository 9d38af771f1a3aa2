//! A flash sale: 10 phones in stock, 1,000 buyers at once, and not one phone sold twice.
//!
//! The same sale runs three ways, one after the other, each on fresh keys:
//!
//! - `global_lock`: one lock (`sale:stock`, waiting) around a read-modify-write of the stock
//!   that is not atomic by itself (`GET`, check > 0, `SET stock-1`). Every buyer, including
//!   the 990 who arrive after the phones are gone, queues for the same lock.
//! - `striped_locks`: the stock split into 4 segments of 3, 3, 2 and 2 phones, each guarded
//!   by its own lock (lock striping). A buyer starts at a random segment and `try_acquire`s
//!   its lock; when it is busy or the segment is empty, it tries the next ones. When every
//!   segment it has not yet seen empty is busy, it waits for the first of them. A buyer
//!   gives up only when it has seen all four segments empty (stock never grows during the
//!   sale, so an empty segment stays empty).
//! - `atomic_segments`: no lock at all. The same 4 segments, each decremented by a 3-line Lua
//!   script (`EVAL`: if the count is > 0, `DECR` it and return 1, else return 0), which Redis
//!   runs atomically; a buyer tries the segments as in `striped_locks`.
//!
//! Each winning buyer pushes an order to the reliable queue `sale:orders`, and a pool of 2
//! workers (`queue.work(2, ..)`) processes the orders (here: `INCR orders_processed`). After the
//! buyers are done, the example waits (at most 10 s) until every order is processed, then stops
//! the workers.
//!
//! The 1,000 buyers are 1,000 tasks run by a pool of 64 threads (`FLASH_SALE_THREADS` to
//! change it), each thread with its own plain connection for the stock, all sharing one
//! `redlease` client: on a 2-core machine, 64 threads keep every lock and Redis busy without
//! 1,000 threads and 1,000 connections fighting over two cores. (`FLASH_SALE_THREADS=1000`, one
//! thread per buyer, works too, at about half the throughput.)
//!
//! It prints one line per method:
//!
//! ```text
//! flash-sale <method> sold=10 stock_left=0 orders_processed=10 buyers_per_s=<n> found_no_stock=990 errors=0 ...
//! ```
//!
//! `found_no_stock` counts the buyers who found every phone gone (990 of 1,000: expected,
//! not an error; `errors` counts buyers whose attempt failed). `buyers_per_s` is 1,000 over
//! the time from the first buyer's start to the last buyer's answer (the order processing is
//! not included; `orders_ms` is the extra time until the last order was processed). `tries_per_buyer` counts lock acquisitions (or script calls) per
//! buyer. The example exits with a non-zero status, after printing every line, if any method
//! sold other than 10 phones, left stock, processed a different number of orders than it sold,
//! drove a segment negative, or had a buyer fail with an error. `sold` is counted by the buyers,
//! not read from the stock: without the lock, racing `GET`/`SET`s sell far more than 10 phones
//! and still leave the stock at 0.
//!
//! What to expect (2-core development VM, 64 threads; the figures move with the VM's load):
//! `atomic_segments` fastest, `striped_locks` close behind it, `global_lock` well behind both.
//! 990 of the 1,000 buyers go home empty-handed, and what a sale costs is how fast a loser
//! learns that. With the global lock every buyer takes the lock (3 round trips). With the
//! striped locks a buyer first reads a segment's stock without a lock: since the stock never
//! grows, 0 proves the segment empty for good, so losers never touch the locks, and winners
//! contend on four locks instead of one. The atomic script needs neither.
//!
//! Runs against `REDIS_URL` when it is set (its keys start with `flash-sale:` and are deleted
//! before each method); otherwise it starts a throwaway redis-server on a free port and stops
//! it at the end.
//!
//! ```text
//! cargo run --release --example flash_sale
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --release --example flash_sale
//! ```

use std::hash::BuildHasher;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

mod common;

use common::BoxError;
use redlease::{Client, lock::LockGuard};

/// Phones in stock.
const STOCK: i64 = 10;
/// The stock of each segment of the striped and atomic methods (sums to [`STOCK`]).
const SEGMENTS: [i64; 4] = [3, 3, 2, 2];
/// Buyers, all arriving at once.
const BUYERS: usize = 1_000;
/// Threads running the buyers unless `FLASH_SALE_THREADS` says otherwise.
const DEFAULT_THREADS: usize = 64;
/// Order-processing workers.
const WORKERS: usize = 2;
/// The longest a buyer waits for a lock: far above the whole sale; reaching it is an error.
const LOCK_WAIT: Duration = Duration::from_secs(60);
/// The longest the example waits for the orders to be processed.
const ORDERS_WAIT: Duration = Duration::from_secs(30);

/// Key prefix of the client, and of the plain keys (stock, processed-order counter).
const PREFIX: &str = "flash-sale";
/// The queue of orders.
const QUEUE: &str = "sale:orders";
/// The one lock of `global_lock`.
const GLOBAL_LOCK: &str = "sale:stock";

/// The atomic take of one phone from a segment: 1 if one was left (and is now taken), else 0.
const TAKE_ONE: &str = "if (tonumber(redis.call('GET', KEYS[1])) or 0) > 0 then redis.call('DECR', KEYS[1]) return 1 else return 0 end";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    GlobalLock,
    StripedLocks,
    AtomicSegments,
}

impl Method {
    const ALL: [Method; 3] = [
        Method::GlobalLock,
        Method::StripedLocks,
        Method::AtomicSegments,
    ];

    fn name(self) -> &'static str {
        match self {
            Method::GlobalLock => "global_lock",
            Method::StripedLocks => "striped_locks",
            Method::AtomicSegments => "atomic_segments",
        }
    }

    /// The stock keys and their initial counts.
    fn stock(self) -> Vec<(String, i64)> {
        match self {
            Method::GlobalLock => vec![(format!("{PREFIX}:stock"), STOCK)],
            Method::StripedLocks | Method::AtomicSegments => SEGMENTS
                .iter()
                .enumerate()
                .map(|(i, &n)| (format!("{PREFIX}:stock:{i}"), n))
                .collect(),
        }
    }
}

fn processed_key() -> String {
    format!("{PREFIX}:orders_processed")
}

/// What one buyer got.
enum Outcome {
    /// A phone, from this stock key (index into [`Method::stock`]).
    Won(usize),
    /// Nothing: every segment was empty.
    SoldOut,
}

/// What one method's sale did.
struct Sale {
    sold: u64,
    /// Buyers who found every segment empty (went home without a phone): not an error.
    found_no_stock: u64,
    errors: u64,
    first_error: Option<String>,
    tries: u64,
    elapsed: Duration,
    orders_wait: Duration,
    orders_processed: i64,
    orders_acked: u64,
    stock_left: i64,
    min_segment: i64,
}

/// Everything a buyer thread needs.
struct Shop<'a> {
    method: Method,
    client: &'a Client,
    queue: &'a redlease::queue::Queue,
    /// `(stock key, lock name)` per segment.
    segments: Vec<(String, String)>,
}

impl Shop<'_> {
    /// One buyer: returns what it got and how many locks (or scripts) it tried.
    fn buy(&self, conn: &mut redis::Connection, buyer: usize) -> Result<(Outcome, u64), BoxError> {
        let n = self.segments.len();
        // Where this buyer starts looking (a random segment, so buyers spread out).
        let start = std::collections::hash_map::RandomState::new().hash_one(buyer) as usize % n;
        let order = (0..n).map(|k| (start + k) % n);
        let mut tries = 0;
        match self.method {
            Method::GlobalLock => {
                let (key, lock) = &self.segments[0];
                let won = self
                    .client
                    .lock(lock)
                    .wait(LOCK_WAIT)
                    .with_lock(|_guard| take_one_rmw(conn, key))??;
                Ok((
                    if won {
                        Outcome::Won(0)
                    } else {
                        Outcome::SoldOut
                    },
                    1,
                ))
            }
            Method::StripedLocks => {
                let mut empty = vec![false; n];
                loop {
                    for seg in order.clone() {
                        if empty[seg] {
                            continue;
                        }
                        // Stock never grows, so a plain read of 0 proves the segment empty
                        // for good: losers learn it without touching the locks.
                        let left: Option<i64> =
                            redis::cmd("GET").arg(&self.segments[seg].0).query(conn)?;
                        if left.unwrap_or(0) <= 0 {
                            empty[seg] = true;
                            continue;
                        }
                        tries += 1;
                        let Some(guard) = self.client.lock(&self.segments[seg].1).try_acquire()?
                        else {
                            continue; // busy: try the next segment
                        };
                        if take_one_under(guard, conn, &self.segments[seg].0)? {
                            return Ok((Outcome::Won(seg), tries));
                        }
                        empty[seg] = true;
                    }
                    // Every segment not seen empty was busy: wait for the first of them.
                    let Some(seg) = order.clone().find(|&s| !empty[s]) else {
                        return Ok((Outcome::SoldOut, tries));
                    };
                    tries += 1;
                    let guard = self
                        .client
                        .lock(&self.segments[seg].1)
                        .wait(LOCK_WAIT)
                        .acquire()?;
                    if take_one_under(guard, conn, &self.segments[seg].0)? {
                        return Ok((Outcome::Won(seg), tries));
                    }
                    empty[seg] = true;
                }
            }
            Method::AtomicSegments => {
                for seg in order {
                    tries += 1;
                    let took: i64 = redis::cmd("EVAL")
                        .arg(TAKE_ONE)
                        .arg(1)
                        .arg(&self.segments[seg].0)
                        .query(conn)?;
                    if took == 1 {
                        return Ok((Outcome::Won(seg), tries));
                    }
                }
                Ok((Outcome::SoldOut, tries))
            }
        }
    }
}

/// The non-atomic take: `GET`, and `SET count-1` when a phone is left. Safe only while the
/// segment's lock is held.
fn take_one_rmw(conn: &mut redis::Connection, key: &str) -> Result<bool, BoxError> {
    let left: i64 = redis::cmd("GET")
        .arg(key)
        .query::<Option<i64>>(conn)?
        .ok_or_else(|| format!("stock key {key} is missing"))?;
    if left <= 0 {
        return Ok(false);
    }
    redis::cmd("SET").arg(key).arg(left - 1).query::<()>(conn)?;
    Ok(true)
}

/// [`take_one_rmw`] under `guard`, then releases it. A release that finds the lease lost
/// is an error: the section may not have been exclusive.
fn take_one_under(
    guard: LockGuard,
    conn: &mut redis::Connection,
    key: &str,
) -> Result<bool, BoxError> {
    let took = take_one_rmw(conn, key);
    guard.release()?;
    took
}

fn connect(url: &str) -> Result<redis::Connection, redis::RedisError> {
    redis::Client::open(url)?.get_connection()
}

/// Deletes every key of the example (stock, counters, locks, fences, the queue).
fn reset(conn: &mut redis::Connection) -> Result<(), redis::RedisError> {
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{PREFIX}:*"))
            .arg("COUNT")
            .arg(1000)
            .query(conn)?;
        if !keys.is_empty() {
            redis::cmd("DEL").arg(&keys).query::<()>(conn)?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

fn run_sale(method: Method, client: &Client, url: &str, threads: usize) -> Result<Sale, BoxError> {
    let mut conn = connect(url)?;
    reset(&mut conn)?;
    let stock = method.stock();
    for (key, n) in &stock {
        redis::cmd("SET").arg(key).arg(n).query::<()>(&mut conn)?;
    }
    let segments: Vec<(String, String)> = match method {
        Method::GlobalLock => vec![(stock[0].0.clone(), GLOBAL_LOCK.to_owned())],
        _ => (0..stock.len())
            .map(|i| (stock[i].0.clone(), format!("{GLOBAL_LOCK}:{i}")))
            .collect(),
    };

    // The order pipeline: workers take orders as soon as they are pushed.
    let queue = client.queue(QUEUE)?;
    let worker_conn = Mutex::new(connect(url)?);
    let workers = queue.work(WORKERS, move |_order| -> Result<(), redis::RedisError> {
        let mut c = worker_conn.lock().unwrap_or_else(PoisonError::into_inner);
        redis::cmd("INCR")
            .arg(processed_key())
            .query::<i64>(&mut *c)
            .map(drop)
    })?;

    let shop = Shop {
        method,
        client,
        queue: &queue,
        segments,
    };
    let next_buyer = AtomicUsize::new(0);
    let (sold, found_no_stock, errors, tries) = (
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    );
    let first_error = Mutex::new(None::<String>);
    let note_error = |e: &dyn std::fmt::Display| {
        errors.fetch_add(1, Ordering::Relaxed);
        first_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(|| e.to_string());
    };
    // Threads connect first, then start buying together.
    let barrier = Barrier::new(threads + 1);
    let start = thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let conn = connect(url);
                barrier.wait();
                let mut conn = match conn {
                    Ok(conn) => conn,
                    Err(e) => return note_error(&e),
                };
                loop {
                    let buyer = next_buyer.fetch_add(1, Ordering::Relaxed);
                    if buyer >= BUYERS {
                        return;
                    }
                    match shop.buy(&mut conn, buyer) {
                        Ok((outcome, n)) => {
                            tries.fetch_add(n, Ordering::Relaxed);
                            match outcome {
                                Outcome::Won(seg) => {
                                    sold.fetch_add(1, Ordering::Relaxed);
                                    let order = format!("buyer={buyer} segment={seg}");
                                    if let Err(e) = shop.queue.push(order) {
                                        note_error(&e);
                                    }
                                }
                                Outcome::SoldOut => {
                                    found_no_stock.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                        Err(e) => note_error(&e),
                    }
                }
            });
        }
        barrier.wait();
        Instant::now()
    });
    // The scope joined every buyer thread: the sale is over.
    let elapsed = start.elapsed();
    let sold = sold.into_inner();

    // Wait (bounded) for the workers to process every order, then stop them.
    let wait_start = Instant::now();
    let processed = |conn: &mut redis::Connection| -> Result<i64, redis::RedisError> {
        Ok(redis::cmd("GET")
            .arg(processed_key())
            .query::<Option<i64>>(conn)?
            .unwrap_or(0))
    };
    while processed(&mut conn)? != sold as i64 && wait_start.elapsed() < ORDERS_WAIT {
        thread::sleep(Duration::from_millis(5));
    }
    let orders_wait = wait_start.elapsed();
    let report = workers.stop();
    let orders_processed = processed(&mut conn)?;

    let mut left = Vec::new();
    for (key, _) in &stock {
        left.push(redis::cmd("GET").arg(key).query::<i64>(&mut conn)?);
    }
    Ok(Sale {
        sold,
        found_no_stock: found_no_stock.into_inner(),
        errors: errors.into_inner(),
        first_error: first_error
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner),
        tries: tries.into_inner(),
        elapsed,
        orders_wait,
        orders_processed,
        orders_acked: report.acked,
        stock_left: left.iter().sum(),
        min_segment: left.iter().copied().min().unwrap_or(0),
    })
}

/// The invariants that failed (empty: all hold).
fn broken(sale: &Sale) -> Vec<String> {
    let mut out = Vec::new();
    if sale.sold != STOCK as u64 {
        out.push(format!("sold {} phones, not {STOCK}", sale.sold));
    }
    if sale.stock_left != 0 {
        out.push(format!("{} phone(s) left in stock", sale.stock_left));
    }
    if sale.orders_processed != sale.sold as i64 {
        out.push(format!(
            "{} order(s) processed for {} sold",
            sale.orders_processed, sale.sold
        ));
    }
    if sale.min_segment < 0 || sale.stock_left < 0 {
        out.push(format!(
            "stock went negative (lowest segment {}, total {})",
            sale.min_segment, sale.stock_left
        ));
    }
    if sale.errors != 0 {
        out.push(format!(
            "{} buyer(s) failed with an error, first: {}",
            sale.errors,
            sale.first_error.as_deref().unwrap_or("?")
        ));
    }
    out
}

fn run() -> Result<bool, BoxError> {
    let threads = match std::env::var("FLASH_SALE_THREADS") {
        Ok(s) => s
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("FLASH_SALE_THREADS={s:?} is not a positive number"))?,
        Err(_) => DEFAULT_THREADS,
    };
    // Keep the server (if we started one) alive until the end of run().
    let redis = common::redis("flash-sale")?;
    let url = redis.url.clone();
    // One pooled connection per buyer thread, plus the workers'.
    let client = Client::builder(&url)
        .key_prefix(PREFIX)
        .pool_size(u32::try_from(threads + WORKERS + 2)?)
        .build()?;
    println!(
        "{STOCK} phones, {BUYERS} buyers on {threads} threads, orders processed by {WORKERS} workers"
    );

    let mut ok = true;
    for method in Method::ALL {
        let sale = run_sale(method, &client, &url, threads)?;
        let failures = broken(&sale);
        println!(
            "flash-sale {} sold={} stock_left={} orders_processed={} buyers_per_s={:.0} found_no_stock={} errors={} elapsed_ms={} orders_ms={} tries_per_buyer={:.2} orders_acked={} invariants={}",
            method.name(),
            sale.sold,
            sale.stock_left,
            sale.orders_processed,
            BUYERS as f64 / sale.elapsed.as_secs_f64().max(1e-9),
            sale.found_no_stock,
            sale.errors,
            sale.elapsed.as_millis(),
            sale.orders_wait.as_millis(),
            sale.tries as f64 / BUYERS as f64,
            sale.orders_acked,
            if failures.is_empty() { "ok" } else { "BROKEN" },
        );
        for f in &failures {
            eprintln!("flash-sale {}: invariant broken: {f}", method.name());
        }
        ok &= failures.is_empty();
    }
    let mut conn = connect(&url)?;
    reset(&mut conn)?;
    Ok(ok)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("flash-sale: an invariant failed (see above)");
            ExitCode::FAILURE
        }
        Err(e) => common::finish("flash-sale", Err(e)),
    }
}
