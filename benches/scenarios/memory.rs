//! Scenarios on the in-process server (feature `memory`).

use std::hint::black_box;

use crate::common::*;

/// `lock_uncontended` on the in-process server: the same client, machines and Lua scripts
/// with no socket (the server runs on the caller's thread, on its own clock). Its ratio is
/// over the raw Redis baseline like the others: above 1 means a cycle in-process is faster
/// than one raw Redis cycle (two round trips).
pub fn memory_lock_uncontended(ctx: &Ctx) -> Measurement {
    let server = redlease::memory::MemoryServer::new();
    let client = server.client();
    let lock = client.lock("bench-m");
    let (m, _) = measure_single(ctx, || {
        let guard = lock
            .try_acquire()
            .expect("bench: in-process try_acquire failed")
            .expect("bench: in-process lock was busy");
        black_box(guard.fence());
        guard.release().expect("bench: in-process release failed");
    });
    m
}
