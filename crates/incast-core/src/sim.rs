//! A deterministic simulated transport, for trying policies without sockets.
//!
//! The client's link is one FIFO of `link_bps`: a server starts answering `latency` after a
//! request, and responses cross the link one after another. Chosen requests can be stalled,
//! as a TCP flow whose tail was dropped stalls for the kernel's 200 ms RTO_min. Nothing else
//! is modelled: no switch queue, no loss, no congestion control. It is a tool to show what a
//! policy's *decisions* cost (stagger, hedging, budgets), not a network simulator; the
//! emulated switch of `incast-bench testbed` is where real TCP is measured.
//!
//! Time is virtual: the caller gives the origin `Instant`, the simulation only adds to it.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use incast_core::sim::{simulate, SimConfig, Stall};
//! use incast_core::{Lane, Policy, ServerId, Stripe};
//!
//! let servers: Vec<ServerId> = (0..16).map(ServerId).collect();
//! let stripe = Stripe::fixed_block("b", &servers, 1 << 20)?;
//! let cfg = SimConfig {
//!     stalls: vec![Stall { server: ServerId(5), lane: Lane::Primary, nth: 0, delay: Duration::from_millis(200) }],
//!     ..SimConfig::default()
//! };
//! let r = simulate(&stripe, &Policy::default(), 1, &cfg, Instant::now());
//! assert!(r.complete && r.elapsed < Duration::from_millis(20), "{r:?}");
//! # Ok::<(), incast_core::StripeError>(())
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use crate::policy::Policy;
use crate::scheduler::{Action, Delivery, GrantId, Lane, ReadError, Scheduler, SchedulerStats};
use crate::stripe::{ServerId, Stripe};

/// Default link rate of [`SimConfig`] (1 Gbit/s).
pub const DEFAULT_SIM_LINK_BPS: u64 = 1_000_000_000;
/// Default request-to-first-byte latency of [`SimConfig`] (50 us).
pub const DEFAULT_SIM_LATENCY: Duration = Duration::from_micros(50);
/// Events after which a simulation gives up (10 million), so a bad policy cannot hang it.
pub const MAX_SIM_EVENTS: u64 = 10_000_000;

/// One request held back: the `nth` request (0-based) sent to `server` on `lane` completes
/// `delay` later than it otherwise would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// The server.
    pub server: ServerId,
    /// The connection.
    pub lane: Lane,
    /// Which request on that connection, 0 for the first.
    pub nth: u32,
    /// Extra delay, e.g. 200 ms for a kernel RTO.
    pub delay: Duration,
}

/// The simulated network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Client link rate, bits per second (> 0; 0 is treated as 1).
    pub link_bps: u64,
    /// Request-to-first-byte latency of every server.
    pub latency: Duration,
    /// Requests to hold back.
    pub stalls: Vec<Stall>,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            link_bps: DEFAULT_SIM_LINK_BPS,
            latency: DEFAULT_SIM_LATENCY,
            stalls: Vec::new(),
        }
    }
}

/// What a simulated read did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimReport {
    /// Virtual time from the first request to the end of the read.
    pub elapsed: Duration,
    /// True when every byte arrived.
    pub complete: bool,
    /// The read's error, if it failed (or gave up after [`MAX_SIM_EVENTS`]: then `complete`
    /// is false and `error` is `None`).
    pub error: Option<ReadError>,
    /// The scheduler's counters.
    pub stats: SchedulerStats,
}

/// Runs one read of `stripe` under `policy` over the simulated network `cfg`.
pub fn simulate(stripe: &Stripe, policy: &Policy, seed: u64, cfg: &SimConfig, start: Instant) -> SimReport {
    let mut sched = Scheduler::new(stripe, policy, seed);
    let mut now = start;
    let mut link_free = start;
    let mut sent: HashMap<(ServerId, Lane), u32> = HashMap::new();
    let mut wire: BinaryHeap<Reverse<(Instant, GrantId, u64)>> = BinaryHeap::new();
    let bps = cfg.link_bps.max(1) as u128;
    for _ in 0..MAX_SIM_EVENTS {
        if sched.is_finished() {
            break;
        }
        while let Some(action) = sched.poll_action(now) {
            if let Action::Request(g) = action {
                let nth = sent.entry((g.server, g.lane)).or_default();
                let transfer = Duration::from_nanos((u128::from(g.len) * 8 * 1_000_000_000 / bps) as u64);
                link_free = link_free.max(now + cfg.latency) + transfer;
                let stall = cfg
                    .stalls
                    .iter()
                    .filter(|s| (s.server, s.lane, s.nth) == (g.server, g.lane, *nth))
                    .map(|s| s.delay)
                    .sum::<Duration>();
                *nth += 1;
                wire.push(Reverse((link_free + stall, g.id, g.len)));
            }
        }
        let timer = sched.poll_timeout();
        match wire.peek() {
            Some(Reverse((at, ..))) if timer.is_none_or(|t| *at <= t) => {
                let Reverse((at, id, len)) = wire.pop().expect("peeked");
                now = now.max(at);
                // Bytes of cancelled requests are discarded by the scheduler itself.
                if let Ok(Delivery::Write { .. }) = sched.on_bytes(now, id, len) {
                    let _ = sched.on_done(now, id);
                }
            }
            _ => match timer {
                Some(t) => {
                    now = now.max(t);
                    sched.handle_timeout(now);
                }
                None => break,
            },
        }
    }
    SimReport {
        elapsed: now - start,
        complete: sched.is_complete(),
        error: sched.error().cloned(),
        stats: sched.stats(),
    }
}
