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
//! [`simulate_port`] runs several concurrent reads through one client-wide
//! [`crate::Receiver`], beside a bulk flow that takes a share of the link. Four equal reads of
//! 16 x 64 KiB with a bulk flow taking half of 1 Gbit/s end at 16.8, 33.6, 50.4 and 67.2 ms
//! (shortest-first serves them one after another; the ideal for all four is 67.1 ms), and the
//! budget, started at the 16 KiB floor, grows to 60 KiB and stays there (the test below
//! checks the shape).
//!
//! The budget follows the path's rate. With 50 us of latency and no rate hint, after one
//! 64 MiB read has warmed the port, reads at 1, 10, 25, 40 and 100 Gbit/s take their bytes
//! at line rate plus one round trip (16 x 256 KiB at 100 Gbit/s: 385.6 us for 335.5 us of
//! bytes), and the budget settles at about 92 KiB, 350 KB, 0.84 MB, 0.98 MB and 1.7-1.8 MB:
//! 3-15 times the bandwidth-delay product, since a response's bytes count as queued until it
//! ends. The warm-up read itself, from the default budget, reaches 0.93 of 100 Gbit/s. A
//! constant 64 KiB budget would read 16 x 256 KiB at 10 Gbit/s in 4.08 ms, not 3.41 (the
//! tests below). The model has no switch queue and no loss: it shows the control law's
//! reach, and the testbed what TCP does with it (10 Gbit/s is this 2-core machine's limit).
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
    /// Every server's store time: a response's bytes take the link no sooner than this
    /// after its request arrived, and in [`simulate_port`] its server reports it as its
    /// hold, as incast-rpc's servers do (a disk, an object store under load).
    pub store: Duration,
    /// Requests to hold back.
    pub stalls: Vec<Stall>,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            link_bps: DEFAULT_SIM_LINK_BPS,
            latency: DEFAULT_SIM_LATENCY,
            store: Duration::ZERO,
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
                link_free = link_free.max(now + cfg.latency + cfg.store) + transfer;
                let stall = stall_of(cfg, g.server, g.lane, *nth);
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

/// The delay of the `nth` request to `server` on `lane`: the sum of the matching stalls.
fn stall_of(cfg: &SimConfig, server: ServerId, lane: Lane, nth: u32) -> Duration {
    cfg.stalls
        .iter()
        .filter(|s| (s.server, s.lane, s.nth) == (server, lane, nth))
        .map(|s| s.delay)
        .sum()
}

/// One read of [`simulate_port`]: its stripe and policy, and when it starts after the
/// origin.
#[derive(Clone, Debug)]
pub struct SimRead {
    /// The block's layout.
    pub stripe: Stripe,
    /// Its policy (the port's budget and sender cap replace the policy's).
    pub policy: Policy,
    /// Start, after the origin.
    pub start: Duration,
}

/// What [`simulate_port`] saw.
#[derive(Clone, Debug, PartialEq)]
pub struct PortSimReport {
    /// Per read, in the order given: its completion time after the origin (`None`: it did
    /// not complete).
    pub done: Vec<Option<Duration>>,
    /// Virtual time until the last read ended.
    pub elapsed: Duration,
    /// Smallest and largest budget over the second half of the run.
    pub late_budget: (u64, u64),
    /// Largest budget over the whole run.
    pub peak_budget: u64,
    /// The port's counters at the end.
    pub stats: crate::receiver::ReceiverStats,
}

/// A response on the simulated wire, earliest first: when it arrives, its read's slot, its
/// grant, its bytes, and the hold its server reports.
type OnWire = Reverse<(Instant, u64, GrantId, u64, Duration)>;

/// Runs several concurrent reads through one [`crate::Receiver`] over the simulated network
/// `cfg`, with a bulk flow taking `bulk_share` (0 to 1) of the link the whole time (the
/// responses cross the link at `(1 - bulk_share)` of its rate). A response's bytes arrive at
/// once, when its transfer ends, so a first-byte time includes the link queue ahead of it:
/// the receiver's queueing-delay signal.
///
/// [`SimConfig::stalls`] apply as in [`simulate`], counted per server and lane over every
/// read; a stalled response takes no turn on the link: it arrives its `delay` after it would
/// have started, beside the others (a server that holds its answer back, not a queue), and
/// reports that delay as its server's hold ([`crate::receiver::HostTime::server`]), as
/// incast-rpc's servers report their store's time.
pub fn simulate_port(
    reads: &[SimRead],
    rcfg: crate::ReceiverConfig,
    cfg: &SimConfig,
    bulk_share: f64,
    start: Instant,
) -> PortSimReport {
    use crate::receiver::{ReadOptions, Receiver};
    let mut rx = Receiver::new(rcfg);
    let mut now = start;
    let mut link_free = start;
    let mut wire: BinaryHeap<OnWire> = BinaryHeap::new();
    let share = if bulk_share.is_finite() {
        bulk_share.clamp(0.0, 0.99)
    } else {
        0.0
    };
    let bps = (cfg.link_bps.max(1) as f64 * (1.0 - share)).max(1.0);
    let mut pending: Vec<usize> = (0..reads.len()).collect();
    pending.sort_by_key(|&i| reads[i].start);
    let mut keys: Vec<Option<crate::ReadKey>> = vec![None; reads.len()];
    let mut done: Vec<Option<Duration>> = vec![None; reads.len()];
    let mut trace: Vec<(Duration, u64)> = Vec::new();
    let mut sent: HashMap<(ServerId, Lane), u32> = HashMap::new();
    for _ in 0..MAX_SIM_EVENTS {
        while let Some(&i) = pending.first() {
            if start + reads[i].start > now {
                break;
            }
            pending.remove(0);
            let r = &reads[i];
            keys[i] = Some(rx.start_read(now, &r.stripe, &r.policy, i as u64, ReadOptions::default()));
        }
        for i in 0..reads.len() {
            if let Some(k) = keys[i] {
                if rx.is_finished(k) == Some(true) {
                    let f = rx.finish_read(k).expect("live");
                    if f.complete {
                        done[i] = Some(now - start);
                    }
                    keys[i] = None;
                }
            }
        }
        if pending.is_empty() && keys.iter().all(Option::is_none) {
            break;
        }
        while let Some((k, action)) = rx.poll_action(now) {
            if let Action::Request(g) = action {
                let transfer = Duration::from_secs_f64(g.len as f64 * 8.0 / bps);
                let nth = sent.entry((g.server, g.lane)).or_default();
                let stall = stall_of(cfg, g.server, g.lane, *nth);
                *nth += 1;
                let at = if stall.is_zero() {
                    link_free = link_free.max(now + cfg.latency + cfg.store) + transfer;
                    link_free
                } else {
                    now + cfg.latency + cfg.store + stall + transfer
                };
                let slot = keys.iter().position(|x| *x == Some(k)).expect("live read") as u64;
                wire.push(Reverse((at, slot, g.id, g.len, stall)));
            }
        }
        trace.push((now - start, rx.budget()));
        let timer = rx.poll_timeout();
        let next_start = pending.first().map(|&i| start + reads[i].start);
        let next = [wire.peek().map(|Reverse((at, ..))| *at), timer, next_start]
            .into_iter()
            .flatten()
            .min();
        let Some(next) = next else { break };
        now = now.max(next);
        if let Some(Reverse((at, ..))) = wire.peek() {
            if *at <= now {
                let Reverse((_, slot, id, len, stall)) = wire.pop().expect("peeked");
                if let Some(k) = keys[slot as usize] {
                    let host = crate::receiver::HostTime {
                        server: stall + cfg.store,
                        client: Duration::ZERO,
                        server_capped: false,
                        store: Some(cfg.store),
                    };
                    if let Ok(Delivery::Write { .. }) = rx.on_bytes_timed(now, k, id, len, host) {
                        let _ = rx.on_done(now, k, id);
                    }
                }
                continue;
            }
        }
        if timer.is_some_and(|t| t <= now) {
            rx.handle_timeout(now);
        }
    }
    let elapsed = now - start;
    let half = elapsed / 2;
    let late = trace.iter().filter(|(t, _)| *t >= half).map(|(_, b)| *b);
    let late_budget = late.fold((u64::MAX, 0), |(lo, hi), b| (lo.min(b), hi.max(b)));
    PortSimReport {
        done,
        elapsed,
        late_budget,
        peak_budget: trace.iter().map(|(_, b)| *b).max().unwrap_or(0),
        stats: rx.stats(),
    }
}

#[cfg(test)]
mod port_tests {
    use super::*;

    /// Four equal reads of 16 x 64 KiB at once over 1 Gbit/s beside a bulk flow taking half
    /// the link: every read completes, shortest-first serves them one after another (the
    /// first ends well before the last), the link stays busy, and the budget settles.
    #[test]
    fn several_reads_and_a_bulk_flow_share_the_port_stably() {
        let servers: Vec<ServerId> = (0..64).map(ServerId).collect();
        let reads: Vec<SimRead> = (0..4)
            .map(|i| SimRead {
                stripe: Stripe::fixed_sru(&format!("r{i}"), &servers[i * 16..][..16], 64 * 1024).unwrap(),
                policy: Policy::default(),
                start: Duration::ZERO,
            })
            .collect();
        let r = simulate_port(
            &reads,
            crate::ReceiverConfig::default(),
            &SimConfig::default(),
            0.5,
            Instant::now(),
        );
        let done: Vec<Duration> = r.done.iter().map(|d| d.expect("every read completes")).collect();
        let bytes = 4.0 * 16.0 * 65536.0 * 8.0;
        let ideal = Duration::from_secs_f64(bytes / 0.5e9);
        assert!(
            r.elapsed < ideal.mul_f64(1.1),
            "{:?} against ideal {ideal:?}: {r:?}",
            r.elapsed
        );
        let (first, last) = (*done.iter().min().unwrap(), *done.iter().max().unwrap());
        assert!(first < last.mul_f64(0.4), "shortest first: {done:?}");
        let (lo, hi) = r.late_budget;
        assert!(hi <= 2 * lo, "budget settles: {lo}..{hi} in the second half ({r:?})");
        assert!(hi < 1 << 20, "budget bounded near the path's BDP: {hi}");
    }

    /// Server 3 holds back every answer for `pause` (a stopped process, no replica). Returns
    /// the report of read A (8 x 256 KiB on servers 0-7) and read B (16 x 64 KiB on servers
    /// 8-23, started 20 ms later) through one port of `gbps`.
    fn withheld(gbps: u64, pause: Duration, held: u32) -> PortSimReport {
        let servers: Vec<ServerId> = (0..24).map(ServerId).collect();
        let stalls = (0..held)
            .flat_map(|nth| [Lane::Primary, Lane::Spare].map(|lane| (nth, lane)))
            .map(|(nth, lane)| Stall {
                server: ServerId(3),
                lane,
                nth,
                delay: pause,
            })
            .collect();
        let cfg = SimConfig {
            link_bps: gbps * 1_000_000_000,
            stalls,
            ..SimConfig::default()
        };
        let reads = [
            SimRead {
                stripe: Stripe::fixed_sru("a", &servers[..8], 256 * 1024).unwrap(),
                policy: Policy::default(),
                start: Duration::ZERO,
            },
            SimRead {
                stripe: Stripe::fixed_sru("b", &servers[8..], 64 * 1024).unwrap(),
                policy: Policy::default(),
                start: Duration::from_millis(20),
            },
        ];
        simulate_port(&reads, crate::ReceiverConfig::default(), &cfg, 0.0, Instant::now())
    }

    /// Every store takes 5 ms: on a warm port, 4 reads of 64 x 64 KiB at once take their
    /// bytes at line rate plus a store's time at 1 Gbit/s (139.3 ms, the ideal), and within
    /// 1.25 times that at 10 Gbit/s (22.2 ms against 18.5: the link idles while the first
    /// grants wait in the stores). With the bytes the stores released counted against the
    /// budget and nothing beside it, they took 144.8 and 34.3 ms (see "Released bytes do
    /// not stop the next grants" in the receiver's docs). Counting the bytes in a store against the
    /// budget, the port took a store's time per budget (Little's law). Without the warm-up
    /// the reads took 220 and 84 ms in the forty-third session: slow start doubles the
    /// budget once per 5 ms round trip (the build before the credit took 185 and 103 ms; warm, 139 and 24 ms, by taking its
    /// own queue for another's and letting its budget grow to 4-13 MB, which a real port's
    /// buffer would not hold). The model has no switch buffer: a response's bytes wait for
    /// the link in the order they were granted.
    #[test]
    fn slow_stores_everywhere_keep_the_link_busy() {
        let servers: Vec<ServerId> = (0..64).map(ServerId).collect();
        for gbps in [1, 10] {
            let cfg = SimConfig {
                link_bps: gbps * 1_000_000_000,
                store: Duration::from_millis(5),
                ..SimConfig::default()
            };
            // A 64 MiB read warms the port up (its budget, its rate, the stores' hold).
            let warm =
                Duration::from_secs_f64(64.0 * 1048576.0 * 8.0 / cfg.link_bps as f64 * 3.0) + Duration::from_millis(50);
            let mut reads = vec![SimRead {
                stripe: Stripe::fixed_sru("warm", &servers, 1 << 20).unwrap(),
                policy: Policy::default(),
                start: Duration::ZERO,
            }];
            reads.extend((0..4).map(|i| SimRead {
                stripe: Stripe::fixed_sru(&format!("r{i}"), &servers, 64 * 1024).unwrap(),
                policy: Policy::default(),
                start: warm,
            }));
            let r = simulate_port(&reads, crate::ReceiverConfig::default(), &cfg, 0.0, Instant::now());
            assert!(r.done[0].is_some_and(|d| d < warm), "the warm-up ends first: {r:?}");
            let last = r.done[1..]
                .iter()
                .map(|d| d.expect("every read completes"))
                .max()
                .unwrap()
                - warm;
            let bytes = 4.0 * 64.0 * 65536.0 * 8.0;
            let ideal = Duration::from_secs_f64(bytes / cfg.link_bps as f64) + cfg.store + cfg.latency;
            let bound = if gbps == 1 { 1.05 } else { 1.25 };
            assert!(
                last <= ideal.mul_f64(bound),
                "{gbps} Gbit/s: {last:?} against {ideal:?}: {r:?}"
            );
        }
    }

    /// Every store takes 20 ms: on a warm port at 1 Gbit/s, told its rate, a single read takes
    /// one hold and its transfer (the ideal; within 1.1 times):
    /// - 64 x 32 KiB (36.8 ms): its grants go into the stores as the credit of held bytes
    ///   fills, between the stores' answers. Polled only at events (an answer, a stall
    ///   timer), the grants the credit let out waited for the first answers and the read
    ///   took 45.2 ms (see "The credit fills between events" in the receiver's docs);
    /// - 8 x 256 KiB (36.8 ms): a fragment whose grants all wait in its store takes a
    ///   deeper pipeline ([`crate::scheduler::STORE_DEPTH_FACTOR`]). At the policy's depth
    ///   of 4 chunks of 16 KiB, each chunk waited a hold and the read took 84.8 ms.
    #[test]
    fn a_single_read_of_slow_stores_takes_one_hold() {
        for (n, sru) in [(64u32, 32u64 << 10), (8, 256 << 10)] {
            let cfg = SimConfig {
                store: Duration::from_millis(20),
                ..SimConfig::default()
            };
            let took = reads_on_a_warm_port(n, sru, 1, &cfg)[0];
            let ideal = one_hold(u64::from(n) * sru, &cfg);
            assert!(took <= ideal.mul_f64(1.1), "{n} x {sru}: {took:?} against {ideal:?}");
        }
    }

    /// How long each of `count` reads at once of `sru` bytes from each of `n` servers took, on
    /// a port that a 16 MiB read of the same servers warmed up first (its budget, the stores'
    /// hold) and that is told its rate: this model's arrivals (a response's bytes at once) are
    /// not what the busy-time samples of the rate are made for.
    fn reads_on_a_warm_port(n: u32, sru: u64, count: usize, cfg: &SimConfig) -> Vec<Duration> {
        let servers: Vec<ServerId> = (0..n).map(ServerId).collect();
        let warm = Duration::from_secs(1);
        let mut reads = vec![SimRead {
            stripe: Stripe::fixed_sru("warm", &servers, (16 << 20) / u64::from(n)).unwrap(),
            policy: Policy::default(),
            start: Duration::ZERO,
        }];
        reads.extend((0..count).map(|i| SimRead {
            stripe: Stripe::fixed_sru(&format!("r{i}"), &servers, sru).unwrap(),
            policy: Policy::default(),
            start: warm,
        }));
        let rcfg = crate::ReceiverConfig::builder()
            .port_rate_bps(Some(cfg.link_bps))
            .build()
            .unwrap();
        let r = simulate_port(&reads, rcfg, cfg, 0.0, Instant::now());
        assert!(r.done[0].is_some_and(|d| d < warm), "the warm-up ends first: {r:?}");
        r.done[1..]
            .iter()
            .map(|d| d.unwrap_or_else(|| panic!("every read completes: {r:?}")) - warm)
            .collect()
    }

    /// The ideal time of `bytes` behind slow stores: one hold, then the transfer at the
    /// port's rate.
    fn one_hold(bytes: u64, cfg: &SimConfig) -> Duration {
        let bits = bytes as f64 * 8.0;
        Duration::from_secs_f64(bits / cfg.link_bps as f64) + cfg.store + cfg.latency
    }

    /// Every store takes 100 ms: on a warm 10 Gbit/s port, told its rate, 4 reads at once of
    /// the same 64 servers x 256 KiB (256 senders by the reads' count, over the cap of 64)
    /// all take one hold and the transfer of the 64 MiB (153.7 ms, the ideal; within 1.2
    /// times). While the servers whose grants were all held left the sender cap only up to
    /// the cap's worth, two reads' servers waited in the stores at a time and the last two
    /// reads took a second hold (241 ms; see "Servers waiting on their stores" in the
    /// receiver's docs).
    #[test]
    fn many_reads_of_slow_stores_take_one_hold_together() {
        let cfg = SimConfig {
            link_bps: 10_000_000_000,
            store: Duration::from_millis(100),
            ..SimConfig::default()
        };
        let took = reads_on_a_warm_port(64, 256 << 10, 4, &cfg);
        let last = took.iter().max().copied().unwrap();
        let ideal = one_hold(4 * 64 * (256 << 10), &cfg);
        assert!(last <= ideal.mul_f64(1.2), "{last:?} against {ideal:?}: {took:?}");
    }

    /// A server that answers every request a second late, with no replica, is answered: each
    /// move of a range without progress waits twice as long as the one before. Before, every
    /// request was cancelled before its answer and the read waited for its deadline (here:
    /// until the 2,000 stalls per connection ran out, minutes in). It still takes 6.6-9.9 s,
    /// not 1: a first answer on an idle connection teaches the port the server's hold (its
    /// grants are then expected that late, not hedged nor moved), and at 10 Gbit/s the slow
    /// server's connections are never idle again, so the port never learns it (9.9 s).
    #[test]
    fn a_server_that_answers_every_request_late_is_answered() {
        for gbps in [1, 2, 10] {
            let r = withheld(gbps, Duration::from_secs(1), 2_000);
            let a = r.done[0].expect("read a completes");
            assert!(a < Duration::from_secs(12), "{gbps} Gbit/s: read a took {a:?}: {r:?}");
            assert!(r.stats.grants < 400, "{gbps} Gbit/s: {r:?}");
        }
    }

    /// A server that answers every request a second late, with no replica, holds its own
    /// read back, not the port: another read, started once the first one's grants fill the
    /// budget, ends within the port's silence bound (at 1 Gbit/s it took 3.8 s when a byte
    /// of the slow read's other fragments made all its grants count again), and the port
    /// finds itself silent once.
    #[test]
    fn a_slow_server_holds_back_its_read_not_the_port() {
        for gbps in [1, 2, 10] {
            let r = withheld(gbps, Duration::from_secs(1), 256);
            let b = r.done[1].expect("read b completes");
            assert!(
                b <= Duration::from_millis(20) + crate::receiver::PORT_SILENCE + Duration::from_millis(30),
                "{gbps} Gbit/s: read b took {b:?}: {r:?}"
            );
            assert!(r.done[0].is_some_and(|a| a >= Duration::from_secs(1)), "{r:?}");
            assert_eq!(r.stats.stuck_discounts, 1, "{gbps} Gbit/s: {r:?}");
        }
    }
}

/// The path's round trip ([`SimConfig::latency`]) times its rate: the bytes a port must have
/// outstanding to keep the link busy.
#[cfg(test)]
fn bdp(cfg: &SimConfig) -> f64 {
    cfg.link_bps as f64 / 8.0 * cfg.latency.as_secs_f64()
}

#[cfg(test)]
mod rate_tests {
    use super::*;

    /// On one port, a 64 MiB read warms the budget up; then `conc` reads of `n` x `sru` start
    /// together. Returns how long they took against their bytes at line rate, and the
    /// budget's range while they ran.
    fn warm_then(gbps: u64, n: usize, sru: u64, conc: usize) -> (Duration, Duration, PortSimReport) {
        let servers: Vec<ServerId> = (0..64).map(ServerId).collect();
        let cfg = SimConfig {
            link_bps: gbps * 1_000_000_000,
            ..SimConfig::default()
        };
        let rate = cfg.link_bps as f64;
        let warm = Duration::from_secs_f64(64.0 * 1048576.0 * 8.0 / rate * 1.5) + Duration::from_millis(1);
        let mut reads = vec![SimRead {
            stripe: Stripe::fixed_sru("warm", &servers, 1 << 20).unwrap(),
            policy: Policy::default(),
            start: Duration::ZERO,
        }];
        reads.extend((0..conc).map(|i| SimRead {
            stripe: Stripe::fixed_sru(&format!("r{i}"), &servers[..n], sru).unwrap(),
            policy: Policy::default(),
            start: warm,
        }));
        let r = simulate_port(&reads, crate::ReceiverConfig::default(), &cfg, 0.0, Instant::now());
        assert!(
            r.done[0].is_some_and(|d| d < warm),
            "the warm-up read ends before the rest start: {r:?}"
        );
        let last = r.done[1..]
            .iter()
            .map(|d| d.expect("every read completes"))
            .max()
            .expect("reads");
        let ideal = Duration::from_secs_f64((conc * n) as f64 * sru as f64 * 8.0 / rate);
        (last - warm, ideal, r)
    }

    /// The budget follows the path: from 1 to 100 Gbit/s, with no rate hint, a warm port's
    /// reads take their bytes at line rate plus about one round trip, and the budget grows
    /// with the rate, to megabytes at 100 Gbit/s (a constant 64 KiB would hold a 100 Gbit/s,
    /// 50 us path to a tenth of its rate).
    #[test]
    fn a_warm_port_keeps_1_to_100_gbit_links_busy() {
        let mut budgets = Vec::new();
        for gbps in [1, 10, 25, 40, 100] {
            let cfg = SimConfig {
                link_bps: gbps * 1_000_000_000,
                ..SimConfig::default()
            };
            let mut high = 0;
            for (n, sru, conc) in [(16, 256 * 1024, 1), (64, 256 * 1024, 4), (16, 64 * 1024, 8)] {
                let (took, ideal, r) = warm_then(gbps, n, sru, conc);
                // One round trip for the first request, 5% for the rest.
                let bound = (ideal + cfg.latency).mul_f64(1.05);
                assert!(
                    took <= bound,
                    "{gbps} Gbit/s, {n} x {sru} x {conc}: {took:?} against {ideal:?} at line rate: {r:?}"
                );
                let (lo, hi) = r.late_budget;
                assert!(
                    lo as f64 >= bdp(&cfg),
                    "{gbps} Gbit/s: budget {lo} under the path's {} bytes",
                    bdp(&cfg)
                );
                high = high.max(hi);
            }
            budgets.push(high);
        }
        assert!(budgets.windows(2).all(|w| w[0] < w[1]), "budgets by rate: {budgets:?}");
        assert!(budgets[4] > 1 << 20, "budgets by rate: {budgets:?}");
    }
}
