//! Where a held, watched lease's client memory goes: heap bytes counted by a counting
//! allocator (this binary's global allocator, which needs `unsafe`: the redlease workspace
//! forbids it, hence this tool lives in the peers crate), per lease, over 10,000 leases held
//! by one client, and the part that is the lease value (kept twice: by the guard and by the
//! watchdog). Prints `lease_memory ...`.
//!
//! ```text
//! cargo run --release --bin lease_memory     # starts redis-server on a free port
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use std::process::{Command, Stdio};
use std::time::Instant;

/// Live heap bytes and allocations of this process (requested sizes, without the
/// allocator's own per-block overhead).
struct Counting;

static BYTES: AtomicIsize = AtomicIsize::new(0);
static BLOCKS: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        BLOCKS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        BLOCKS.fetch_sub(1, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        BYTES.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> (isize, isize) {
    (
        BYTES.load(Ordering::Relaxed),
        BLOCKS.load(Ordering::Relaxed),
    )
}

fn main() {
    const LEASES: usize = 10_000;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut server = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
        .stdout(Stdio::null())
        .spawn()
        .expect("cannot start redis-server");
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(10), "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let c = redlease::Client::open(format!("redis://127.0.0.1:{port}/").as_str()).expect("client");
    // Warm up: the pool's connections, the watchdog thread, the scripts.
    let warm: Vec<_> = (0..50)
        .map(|i| c.lock(&format!("warm-{i}")).try_acquire().unwrap().unwrap())
        .collect();
    drop(warm);
    let (b0, n0) = live();
    let guards: Vec<_> = (0..LEASES)
        .map(|i| {
            c.lock(&format!("mem-{i:05}"))
                .ttl(Duration::from_secs(60))
                .try_acquire()
                .unwrap()
                .unwrap()
        })
        .collect();
    let (b1, n1) = live();
    let per_lease = (b1 - b0) as f64 / LEASES as f64;
    let blocks = (n1 - n0) as f64 / LEASES as f64;
    // One more copy of each lease value, as the watchdog keeps one.
    let (c0, m0) = live();
    let copies: Vec<_> = guards.iter().map(|g| g.lease().clone()).collect();
    let (c1, m1) = live();
    let lease_value = (c1 - c0) as f64 / LEASES as f64;
    let lease_blocks = (m1 - m0) as f64 / LEASES as f64;
    drop(copies);
    // With malloc's 16 bytes of bookkeeping per block (glibc, 64-bit), rounded to 16.
    let with_overhead = per_lease + 16.0 * blocks;
    println!(
        "lease_memory leases={LEASES} heap_bytes_per_lease={per_lease:.0} blocks_per_lease={blocks:.1} \
         with_malloc_overhead~{with_overhead:.0} lease_value_bytes={lease_value:.0} \
         lease_value_blocks={lease_blocks:.1} size_of_guard={} size_of_lease={}",
        std::mem::size_of::<redlease::LockGuard>(),
        std::mem::size_of::<redlease::core::lease::Lease>(),
    );
    assert_eq!(guards.iter().filter(|g| g.is_lost()).count(), 0);
    drop(guards);
    let _ = server.kill();
    let _ = server.wait();
}
