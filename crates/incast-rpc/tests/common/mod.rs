//! Helpers shared by the loopback test files (`mod common;` in each).
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use incast_core::{Fragment, ServerId, Stripe};

/// The byte at `j` of server `i`'s object: distinct per server and position.
pub fn pattern(i: u32, j: usize) -> u8 {
    (i.wrapping_mul(131) as usize ^ j.wrapping_mul(7) ^ (j >> 9)) as u8
}

/// Server `i`'s object "blk" of `len` bytes.
pub fn object(i: u32, len: usize) -> Vec<u8> {
    (0..len).map(|j| pattern(i, j)).collect()
}

/// One fragment of object "blk" per server, server `i` giving `lens[i]` bytes.
pub fn stripe_of(lens: &[usize]) -> Stripe {
    Stripe::new(
        lens.iter()
            .enumerate()
            .map(|(i, &l)| Fragment::new(ServerId(i as u32), "blk", 0, l as u64))
            .collect(),
    )
    .unwrap()
}

/// The block `stripe_of(lens)` must read.
pub fn expected(lens: &[usize]) -> Vec<u8> {
    lens.iter()
        .enumerate()
        .flat_map(|(i, &l)| object(i as u32, l))
        .collect()
}

/// Waits up to 5 s for `counter` to reach `at_least` (a server counts some events as its
/// connection task ends, after the client saw the outcome); returns its value then.
pub async fn wait_for_count(counter: &AtomicU64, at_least: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    while counter.load(Ordering::Relaxed) < at_least && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    counter.load(Ordering::Relaxed)
}
