//! Issue 31 item 2: examples/flash_sale.rs's three methods measured (10 phones, 1,000
//! buyers at once, run by 64 threads, each with its own plain connection, sharing the
//! bench's client), so that the README can say which to pick and what it costs:
//!
//! - `flash_sale_script`: no lock, the stock in 4 segments (3, 3, 2, 2), each decremented by
//!   a 3-line Lua script (the example's `atomic_segments`); the baseline of the other two;
//! - `flash_sale_global_lock`: one lock around a `GET`, check, `SET` of the stock;
//! - `flash_sale_striped`: the 4 segments, each with its own lock, a plain `GET` of a
//!   segment first (0 proves it empty for good: losers never touch a lock).
//!
//! One op is one buyer served (a phone, or the answer that none is left): `ops_per_s` is
//! buyers per second over whole sales (from the first buyer's start to the last one's
//! answer; the example's `buyers_per_s`; the order queue is left out). Sales of the method
//! alternate with sales of the script (each on fresh stock) until `BENCH_SECS` of the
//! method's sales have run; `ratio` is the method's buyers per second over the script's in
//! those same rounds (`baseline=script`). Every sale must sell exactly 10 phones.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;

const STOCK: i64 = 10;
const SEGMENTS: [i64; 4] = [3, 3, 2, 2];
const BUYERS: usize = 1_000;
const THREADS: usize = 64;
const LOCK_WAIT: Duration = Duration::from_secs(60);
const TAKE_ONE: &str = "if (tonumber(redis.call('GET', KEYS[1])) or 0) > 0 then redis.call('DECR', KEYS[1]) return 1 else return 0 end";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Script,
    GlobalLock,
    Striped,
}

/// The persistent buyer threads' connections.
struct Shop {
    cons: Vec<Mutex<redis::Connection>>,
}

fn take_one_rmw(con: &mut redis::Connection, key: &str) -> bool {
    let left: i64 = redis::cmd("GET")
        .arg(key)
        .query::<Option<i64>>(con)
        .expect("bench: GET of the stock failed")
        .expect("bench: the stock key is missing");
    if left <= 0 {
        return false;
    }
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(left - 1)
        .query(con)
        .expect("bench: SET of the stock failed");
    true
}

/// One buyer; whether it got a phone.
fn buy(ctx: &Ctx, method: Method, con: &mut redis::Connection, sale: u64, buyer: usize) -> bool {
    let stock = |i: usize| format!("bench-sale:{sale}:stock:{i}");
    // The locks outlive a sale (released at its end): one set for every sale.
    let lock = |i: usize| format!("bench-sale:lock:{i}");
    let n = SEGMENTS.len();
    let start = buyer % n;
    let order = (0..n).map(|k| (start + k) % n);
    match method {
        Method::GlobalLock => {
            let guard = ctx
                .client
                .lock(&lock(0))
                .wait(LOCK_WAIT)
                .acquire()
                .expect("bench: flash-sale acquire failed");
            let won = take_one_rmw(con, &stock(0));
            guard.release().expect("bench: flash-sale release failed");
            won
        }
        Method::Script => order.into_iter().any(|seg| {
            let took: i64 = redis::cmd("EVAL")
                .arg(TAKE_ONE)
                .arg(1)
                .arg(stock(seg))
                .query(con)
                .expect("bench: flash-sale EVAL failed");
            took == 1
        }),
        Method::Striped => {
            let mut empty = [false; 4];
            loop {
                for seg in order.clone() {
                    if empty[seg] {
                        continue;
                    }
                    let left: Option<i64> = redis::cmd("GET")
                        .arg(stock(seg))
                        .query(con)
                        .expect("bench: GET of a segment failed");
                    if left.unwrap_or(0) <= 0 {
                        empty[seg] = true;
                        continue;
                    }
                    let Some(guard) = ctx
                        .client
                        .lock(&lock(seg))
                        .try_acquire()
                        .expect("bench: flash-sale try_acquire failed")
                    else {
                        continue;
                    };
                    let won = take_one_rmw(con, &stock(seg));
                    guard.release().expect("bench: flash-sale release failed");
                    if won {
                        return true;
                    }
                    empty[seg] = true;
                }
                let Some(seg) = order.clone().find(|&s| !empty[s]) else {
                    return false;
                };
                let guard = ctx
                    .client
                    .lock(&lock(seg))
                    .wait(LOCK_WAIT)
                    .acquire()
                    .expect("bench: flash-sale acquire failed");
                let won = take_one_rmw(con, &stock(seg));
                guard.release().expect("bench: flash-sale release failed");
                if won {
                    return true;
                }
                empty[seg] = true;
            }
        }
    }
}

/// One sale on fresh keys: 1,000 buyers served by the shop's threads; its duration.
fn sale(ctx: &Ctx, shop: &Shop, method: Method, sale: u64) -> Duration {
    {
        let mut con = shop.cons[0].lock().unwrap_or_else(|e| e.into_inner());
        let segments: &[i64] = if method == Method::GlobalLock {
            &[STOCK]
        } else {
            &SEGMENTS
        };
        for (i, n) in segments.iter().enumerate() {
            let _: () = redis::cmd("SET")
                .arg(format!("bench-sale:{sale}:stock:{i}"))
                .arg(n)
                .query(&mut *con)
                .expect("bench: SET of the stock failed");
        }
    }
    let next = AtomicUsize::new(0);
    let sold = AtomicU64::new(0);
    let barrier = Barrier::new(THREADS + 1);
    let start = std::thread::scope(|s| {
        for con in &shop.cons {
            let (next, sold, barrier) = (&next, &sold, &barrier);
            s.spawn(move || {
                let mut con = con.lock().unwrap_or_else(|e| e.into_inner());
                barrier.wait();
                loop {
                    let buyer = next.fetch_add(1, Ordering::Relaxed);
                    if buyer >= BUYERS {
                        return;
                    }
                    if buy(ctx, method, &mut con, sale, buyer) {
                        sold.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        barrier.wait();
        Instant::now()
    });
    let elapsed = start.elapsed();
    assert_eq!(
        sold.into_inner(),
        STOCK as u64,
        "bench: a flash sale ({method:?}) did not sell exactly {STOCK} phones"
    );
    // The sale's keys go (a bench may run many sales on one server).
    let mut con = shop.cons[0].lock().unwrap_or_else(|e| e.into_inner());
    let keys: Vec<String> = (0..SEGMENTS.len())
        .map(|i| format!("bench-sale:{sale}:stock:{i}"))
        .collect();
    let _: i64 = redis::cmd("DEL")
        .arg(&keys)
        .query(&mut *con)
        .expect("bench: DEL of a sale's keys failed");
    elapsed
}

static SALES: AtomicU64 = AtomicU64::new(0);

fn measure(ctx: &Ctx, method: Method) -> Measurement {
    let shop = Shop {
        cons: (0..THREADS)
            .map(|_| Mutex::new(ctx.raw_connection()))
            .collect(),
    };
    let base = std::process::id() as u64 * 1_000_000;
    let next_sale = || base + SALES.fetch_add(1, Ordering::Relaxed);
    // A warm-up sale of each.
    sale(ctx, &shop, Method::Script, next_sale());
    sale(ctx, &shop, method, next_sale());
    let mut pairs = Vec::new();
    let mut spent = Duration::ZERO;
    let mut latencies = Vec::new();
    while spent < ctx.time.run || pairs.len() < 3 {
        let b = sale(ctx, &shop, Method::Script, next_sale());
        let s = if method == Method::Script {
            sale(ctx, &shop, Method::Script, next_sale())
        } else {
            sale(ctx, &shop, method, next_sale())
        };
        spent += s;
        latencies.push(micros(s));
        let slice = |elapsed| Slice {
            ops: BUYERS as u64,
            elapsed,
        };
        pairs.push((slice(b), slice(s)));
    }
    let mut m = Measurement::interleaved(&pairs);
    m.against = Against::Nothing;
    m.per_thread = vec![m.total.ops];
    m.latencies = latencies;
    m.extra.push(("baseline", "script".to_owned()));
    m.extra.push(("buyers", BUYERS.to_string()));
    m.extra.push(("threads", THREADS.to_string()));
    m.extra.push(("sales", pairs.len().to_string()));
    m.extra.push(("latency", "whole_sale".to_owned()));
    m
}

/// The script method (its ratio: over its own interleaved sales, about 1).
pub fn flash_sale_script(ctx: &Ctx) -> Measurement {
    measure(ctx, Method::Script)
}

/// One lock around the whole stock.
pub fn flash_sale_global_lock(ctx: &Ctx) -> Measurement {
    measure(ctx, Method::GlobalLock)
}

/// Four striped locks over four segments.
pub fn flash_sale_striped(ctx: &Ctx) -> Measurement {
    measure(ctx, Method::Striped)
}
