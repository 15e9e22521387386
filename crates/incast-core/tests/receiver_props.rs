//! Property tests of the client-wide receiver: random sets of concurrent reads (random
//! stripes with replicas, random policies) under a random port (budget bounds, sender cap,
//! aging, closed loop on or off), driven by random interleavings of: polls, bytes in any
//! split, completions, failures, late bytes of cancelled grants, reported losses, time
//! advancing and timeouts, reads starting late and reads dropped half-way. After every step
//! the harness checks, against its own model of what the transport has seen:
//!
//! - a grant of new bytes went out only when it fitted the port budget, or nothing was
//!   outstanding; re-requests (hedges, retries) may exceed it, and hedged bytes stay within
//!   the hedge bucket plus its 5% share of the bytes granted;
//! - a grant of new bytes went to a new server only while the port had fewer than K
//!   senders, or none;
//! - no read that wanted a grant was ahead of the read served in the port's order (SRPT and
//!   aging are the order), the clock of aging (time times the port's rate) never goes back,
//!   every read older than the aging bound on that clock is aged, and no read is behind one
//!   of its priority that started more than the bound times `log2` of its bytes after it;
//! - bytes land exactly where their grant says, cancelled grants' bytes are discarded, and
//!   per read the confirmed ranges never overlap (exactly once, hedges and retries included);
//! - the port's outstanding bytes are the transport's, and a dropped read's share is freed
//!   at once;
//! - the port stops counting outstanding bytes against its budget (they are "stuck") only
//!   after [`PORT_SILENCE`] without a byte or a grant of new bytes, and only the bytes of
//!   reads that have delivered nothing since (silences of 100-400 ms are generated);
//! - the receiver's own invariants hold.
//!
//! Then a fair transport answers everything: every read must end, complete (its confirmed
//! ranges cover its block) or failed with an error naming a server.
//!
//! Cases: 10,000 in release builds, 200 in debug builds; `PROPTEST_CASES` overrides.
//! Run: `cargo test --release -p incast-core --test receiver_props`

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use incast_core::receiver::{
    HostTime, ReadKey, ReadOptions, Receiver, ReceiverConfig, HELD_SENDER_SHARE, MIN_CHUNK, PORT_SILENCE,
    SPARE_CREDIT_HOLD,
};
use incast_core::{
    Action, Delivery, Fragment, GrantId, GrantKind, GrantSize, Hedging, Policy, RtoBounds, ServerId, Stripe,
};
use proptest::prelude::*;

mod common;
use common::cases;

#[derive(Clone, Debug)]
struct ReadSpec {
    fragments: u32,
    len: u64,
    replicas: bool,
    chunk: u64,
    depth: u32,
    hedging: bool,
    priority: u8,
    start_at_step: u16,
}

fn read_spec() -> impl Strategy<Value = ReadSpec> {
    (
        1u32..=24,
        0u64..=200_000,
        any::<bool>(),
        prop_oneof![Just(0u64), 1_000u64..=64_000],
        1u32..=4,
        any::<bool>(),
        prop_oneof![Just(0u8), 0u8..=3],
        prop_oneof![Just(0u16), 0u16..=200],
    )
        .prop_map(
            |(fragments, len, replicas, chunk, depth, hedging, priority, start_at_step)| ReadSpec {
                fragments,
                len,
                replicas,
                chunk,
                depth,
                hedging,
                priority,
                start_at_step,
            },
        )
}

#[derive(Clone, Debug)]
struct PortSpec {
    min: u64,
    initial: u64,
    max: u64,
    senders: u32,
    aging_bytes: u64,
    adaptive: bool,
    burst: u64,
}

fn port_spec() -> impl Strategy<Value = PortSpec> {
    (
        1u64..=64_000,
        0u64..=200_000,
        0u64..=1_000_000,
        1u32..=24,
        0u64..=200_000,
        any::<bool>(),
        0u64..=300_000,
    )
        .prop_map(|(min, a, b, senders, aging_bytes, adaptive, burst)| PortSpec {
            min,
            initial: min + a,
            max: min + a + b,
            senders,
            aging_bytes,
            adaptive,
            burst,
        })
}

#[derive(Clone, Debug)]
enum Op {
    Poll,
    Bytes { pick: u16, frac: u8 },
    Done { pick: u16 },
    Fail { pick: u16 },
    Lost { pick: u16 },
    LateBytes { pick: u16 },
    Advance { us: u32 },
    Silence { ms: u32 },
    Loss,
    Drop { pick: u16 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Poll),
        6 => (any::<u16>(), 1u8..=255).prop_map(|(pick, frac)| Op::Bytes { pick, frac }),
        5 => any::<u16>().prop_map(|pick| Op::Done { pick }),
        1 => any::<u16>().prop_map(|pick| Op::Fail { pick }),
        1 => any::<u16>().prop_map(|pick| Op::Lost { pick }),
        1 => any::<u16>().prop_map(|pick| Op::LateBytes { pick }),
        3 => (0u32..=3_000).prop_map(|us| Op::Advance { us }),
        1 => (100u32..=400).prop_map(|ms| Op::Silence { ms }),
        1 => Just(Op::Loss),
        1 => any::<u16>().prop_map(|pick| Op::Drop { pick }),
    ]
}

struct Live {
    read: ReadKey,
    id: GrantId,
    server: ServerId,
    block_offset: u64,
    len: u64,
    received: u64,
    cancelled: bool,
    fragment: usize,
    /// The port may count it stuck: it was live at a silence discount, or its fragment had
    /// such a grant when it was issued (a hedge or retry of a stuck range, new bytes asked
    /// of a server that has not answered), and no byte of it arrived since.
    may_be_stuck: bool,
}

struct ReadModel {
    stripe: Stripe,
    /// The policy's chunk (0: whole fragments).
    chunk: u64,
    /// Confirmed ranges, start -> end.
    confirmed: BTreeMap<u64, u64>,
    /// The receiver's clock of aging when the read started.
    started_at: f64,
    /// Reads started before it.
    seq: usize,
    priority: u8,
}

struct Harness {
    rx: Receiver,
    reads: HashMap<ReadKey, ReadModel>,
    live: Vec<Live>,
    dead: Vec<Live>,
    now: Instant,
    /// Aging bound, in the port's bytes (time times its rate).
    aging: u64,
    /// The clock of aging as last seen: it never goes back.
    clock: f64,
    senders_cap: u32,
    hedge_burst: u64,
    hedged: u64,
    granted: u64,
    /// Largest delivery rate the receiver reported, and the start: the bucket's time refill
    /// is at most 5% of it over the run.
    max_rate: f64,
    t0: Instant,
    /// The last sign of life the port saw: a byte, or a grant of new bytes.
    last_life: Instant,
    /// Silence discounts seen so far, and the fragments (read, index) that had a grant live
    /// at one of them.
    discounts: u64,
    stuck_frags: HashSet<(ReadKey, usize)>,
}

impl Harness {
    fn outstanding(&self) -> u64 {
        self.live
            .iter()
            .filter(|l| !l.cancelled)
            .map(|l| l.len - l.received)
            .sum()
    }
    /// After every poll: a new silence discount came only after a silence, and covers the
    /// reads then outstanding.
    fn saw_discount(&mut self) -> Result<(), TestCaseError> {
        let n = self.rx.stats().stuck_discounts;
        if n > self.discounts {
            prop_assert!(
                self.now - self.last_life >= PORT_SILENCE,
                "discount after {:?} of silence",
                self.now - self.last_life
            );
            self.discounts = n;
            self.last_life = self.now;
            for l in self.live.iter_mut().filter(|l| !l.cancelled) {
                l.may_be_stuck = true;
                self.stuck_frags.insert((l.read, l.fragment));
            }
            // Every byte then outstanding stopped counting (a grant polled with the discount
            // may add its own, and a hedged grant whose cancel is not yet polled is gone).
            if !self.rx.has_pending_cancels() {
                let all: u64 = self
                    .live
                    .iter()
                    .filter(|l| !l.cancelled)
                    .map(|l| l.len - l.received)
                    .sum();
                prop_assert!(self.rx.stats().stuck >= all, "{} stuck of {all}", self.rx.stats().stuck);
            }
        }
        Ok(())
    }
    fn senders(&self) -> usize {
        let mut s: Vec<(ReadKey, ServerId)> = self
            .live
            .iter()
            .filter(|l| !l.cancelled)
            .map(|l| (l.read, l.server))
            .collect();
        s.sort_unstable();
        s.dedup();
        s.len()
    }

    fn check(&mut self) -> Result<(), TestCaseError> {
        self.max_rate = self.max_rate.max(self.rx.stats().rate_bytes_per_sec.unwrap_or(0.0));
        self.rx
            .check_invariants()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let clock = self.rx.aging_clock();
        prop_assert!(
            clock.is_finite() && clock >= self.clock,
            "the clock of aging went from {} to {clock}",
            self.clock
        );
        self.clock = clock;
        let may_be_stuck: u64 = self
            .live
            .iter()
            .filter(|l| !l.cancelled && l.may_be_stuck)
            .map(|l| l.len - l.received)
            .sum();
        prop_assert!(
            self.rx.stats().stuck <= may_be_stuck,
            "{} stuck, but the silent grants hold {}",
            self.rx.stats().stuck,
            may_be_stuck
        );
        if self.rx.has_pending_cancels() {
            prop_assert!(self.rx.stats().outstanding <= self.outstanding());
        } else {
            prop_assert_eq!(
                self.rx.stats().outstanding,
                self.outstanding(),
                "port outstanding vs transport"
            );
        }
        Ok(())
    }

    fn poll(&mut self) -> Result<bool, TestCaseError> {
        let budget = self.rx.budget();
        let before = self.outstanding();
        let senders = self.senders();
        let st0 = self.rx.stats();
        let polled = self.rx.poll_action(self.now);
        self.saw_discount()?;
        let Some((read, action)) = polled else {
            return Ok(false);
        };
        match action {
            Action::Request(g) => {
                // Re-requests replace admitted bytes (and hedges draw on the bucket); stuck
                // bytes no longer count, nor late and held ones up to a budget's worth.
                let rerequest = matches!(g.kind, GrantKind::Hedge | GrantKind::Retry);
                let st = self.rx.stats();
                // A grant of a fragment with a stuck grant may be stuck from its issue: then
                // the port's stuck bytes (taken after the poll) hold it too, and `before`
                // does not. Before it, the port's stuck bytes were those before the poll, or
                // all its outstanding bytes if the poll found the port silent.
                let base = if st.stuck_discounts > st0.stuck_discounts {
                    st0.outstanding
                } else {
                    st0.stuck
                };
                prop_assert!(st.stuck >= base, "stuck {} after the poll, {base} before", st.stuck);
                let own = st.stuck - base;
                prop_assert!(
                    own == 0 || (own == g.len && self.stuck_frags.contains(&(read, g.fragment))),
                    "a grant of {} issued with {own} stuck bytes",
                    g.len
                );
                let stuck = st.stuck - own;
                prop_assert!(
                    st.late <= before - stuck,
                    "late {} of {} counted",
                    st.late,
                    before - stuck
                );
                // Held bytes (a slow store's) leave the budget with the late ones, up to a
                // budget's worth; a discount in this poll marked them stuck, and the new
                // grant, if held, was not before it.
                let held = if st.stuck_discounts > st0.stuck_discounts {
                    0
                } else {
                    st0.held
                };
                prop_assert!(
                    st.held <= held + g.len,
                    "held {} after the poll, {held} before",
                    st.held
                );
                // With the port's rate known, held bytes leave it as far as their credit
                // goes (it fills at that rate), to at most the held bytes and a budget more.
                prop_assert!(
                    st.held_credit <= st.held + budget,
                    "held credit {} over {} held and a budget {budget}",
                    st.held_credit,
                    st.held
                );
                let late = st.late.min(budget);
                let held = match st.link_rate_bytes_per_sec {
                    Some(r) if r > 0.0 => held.min(st.held_credit),
                    _ => held.min(budget - late),
                };
                let counted = before - stuck - late - held;
                // Where the port's servers hold their answers, a grant may also take the
                // credit that held bytes do not use, beside the budget's room.
                let store_rate = match (st.link_rate_bytes_per_sec, st.port_hold) {
                    (Some(r), Some(h)) if r > 0.0 && h >= SPARE_CREDIT_HOLD => Some((r, h)),
                    _ => None,
                };
                let spare = store_rate.map_or(0, |_| st.held_credit.saturating_sub(held));
                prop_assert!(
                    rerequest || counted == 0 || g.len <= budget.saturating_sub(counted) + spare,
                    "grant of {} with {} counted ({} outstanding), budget {}, spare credit {}",
                    g.len,
                    counted,
                    before,
                    budget,
                    spare
                );
                if !rerequest {
                    self.last_life = self.now;
                }
                let existing = self
                    .live
                    .iter()
                    .any(|l| !l.cancelled && l.read == read && l.server == g.server);
                // Servers waiting on their stores leave the cap, however many, and where the
                // port's servers hold, a new sender passes it while the bytes sending now fit
                // the budget and drain within a share of the hold.
                let cap = self.senders_cap as usize;
                let waiting = st0.held_senders as usize;
                let drains = store_rate.is_some_and(|(r, h)| {
                    counted <= budget && (counted as f64) < r * h.as_secs_f64() * HELD_SENDER_SHARE
                });
                prop_assert!(
                    rerequest || existing || senders == 0 || senders - waiting.min(senders) < cap || drains,
                    "new sender with {} of {} live ({} waiting on stores, {} counted)",
                    senders,
                    self.senders_cap,
                    st0.held_senders,
                    counted
                );
                let m = &self.reads[&read];
                // A new chunk is the policy's chunk, shrunk to half a small budget (never
                // under MIN_CHUNK) or enlarged for the rate, runt included, to under half the
                // budget; a read of one fragment alone on the port may take the whole budget.
                if !rerequest && m.chunk > 0 {
                    let half = m.chunk.min((budget / 2).max(MIN_CHUNK)).max(budget / 2);
                    let lone = self.reads.len() == 1 && m.stripe.fragments().len() == 1;
                    let bound = if lone { half.max(budget) } else { half };
                    prop_assert!(
                        g.len <= bound,
                        "grant of {} with a {}-byte policy chunk and a budget of {}",
                        g.len,
                        m.chunk,
                        budget
                    );
                }
                let f = m.stripe.fragment(g.fragment);
                prop_assert!(f.server() == g.server || f.replicas().contains(&g.server));
                let range = m.stripe.block_range(g.fragment);
                prop_assert!(g.block_offset >= range.start && g.block_offset + g.len <= range.end);
                // SRPT and aging: nobody that wanted a grant was ahead of `read`
                // (re-requests go first whatever the order).
                for (rk, aged, live, finished) in self.rx.reads_in_order() {
                    if rk == read || rerequest {
                        break;
                    }
                    prop_assert!(
                        live > 0 || finished,
                        "{} served while {} (aged {}) waited with nothing outstanding",
                        read,
                        rk,
                        aged
                    );
                }
                let order = self.rx.reads_in_order();
                for (rk, aged, _, _) in &order {
                    if self.rx.aging_clock() - self.reads[rk].started_at >= self.aging as f64 {
                        prop_assert!(aged, "{} older than the aging bound but not aged", rk);
                    }
                }
                // The aging bound: a read goes before every read of its priority that started
                // more than the bound times log2(its bytes) later on the clock of aging (a few
                // thousandths of a bound for the order's fixed point); with no bound, in
                // arrival order.
                for (i, (ahead, ..)) in order.iter().enumerate() {
                    for (behind, ..) in &order[i + 1..] {
                        let (a, b) = (&self.reads[ahead], &self.reads[behind]);
                        let lead = a.started_at - b.started_at;
                        if self.aging == 0 {
                            prop_assert!(a.seq < b.seq, "{behind} arrived first but is behind {ahead}");
                        } else if a.priority == b.priority {
                            let halvings = (b.stripe.block_len().max(1) as f64).log2();
                            let bound = self.aging as f64 * (halvings + 0.004);
                            prop_assert!(
                                lead <= bound,
                                "{behind} ({} bytes) started {lead} port bytes before {ahead} but is behind it",
                                b.stripe.block_len()
                            );
                        }
                    }
                }
                if g.kind == GrantKind::Hedge {
                    self.hedged += g.len;
                } else {
                    self.granted += g.len;
                }
                // The bucket also refills with time, at 5% of the measured rate.
                let by_time = 0.05 * self.max_rate * (self.now - self.t0).as_secs_f64();
                prop_assert!(
                    self.hedged as f64 <= self.hedge_burst as f64 + 0.05 * self.granted as f64 + by_time + 1.0,
                    "hedged {} of {} granted, bucket {}, {} by time",
                    self.hedged,
                    self.granted,
                    self.hedge_burst,
                    by_time
                );
                self.live.push(Live {
                    read,
                    id: g.id,
                    server: g.server,
                    block_offset: g.block_offset,
                    len: g.len,
                    received: 0,
                    cancelled: false,
                    fragment: g.fragment,
                    may_be_stuck: self.stuck_frags.contains(&(read, g.fragment)),
                });
            }
            Action::Cancel { id, .. } => {
                let l = self.live.iter_mut().find(|l| l.read == read && l.id == id);
                let l = l.ok_or_else(|| TestCaseError::fail("cancel of a grant not live"))?;
                prop_assert!(!l.cancelled);
                l.cancelled = true;
            }
        }
        Ok(true)
    }

    fn bytes(&mut self, i: usize, n: u64) -> Result<(), TestCaseError> {
        let l = &self.live[i];
        let (read, id, cancelled) = (l.read, l.id, l.cancelled);
        let at = l.block_offset + l.received;
        // Every third server's store holds its answers 1-7 ms (its first bytes say so): the
        // port learns the holds, grants to those servers are held until their expected
        // first byte, and past SPARE_CREDIT_HOLD the credit held bytes do not use adds to
        // the budget's room (see "A slow store is not a stall" in the receiver's docs).
        let hold = if l.received == 0 && l.server.0 % 3 == 0 {
            Duration::from_millis(1 + 2 * u64::from(l.server.0 % 4))
        } else {
            Duration::ZERO
        };
        // Half the servers' transports tell the store's part apart (all of the hold here).
        let host = HostTime {
            server: hold,
            store: (l.server.0 % 2 == 0).then_some(hold),
            ..HostTime::default()
        };
        let d = self.rx.on_bytes_timed(self.now, read, id, n, host);
        let d = d.map_err(|e| TestCaseError::fail(format!("bytes: {e}")))?;
        if n > 0 {
            self.last_life = self.now;
            self.live[i].may_be_stuck = false;
        }
        if cancelled {
            prop_assert_eq!(d, Delivery::Discard);
        } else {
            prop_assert_eq!(d, Delivery::Write { block_offset: at });
        }
        self.live[i].received += n;
        Ok(())
    }

    fn done(&mut self, i: usize) -> Result<(), TestCaseError> {
        let l = self.live.remove(i);
        self.rx
            .on_done(self.now, l.read, l.id)
            .map_err(|e| TestCaseError::fail(format!("done: {e}")))?;
        if !l.cancelled {
            let m = self.reads.get_mut(&l.read).expect("live read");
            let (s, e) = (l.block_offset, l.block_offset + l.len);
            if let Some((_, &pe)) = m.confirmed.range(..e).next_back() {
                prop_assert!(pe <= s, "range {}..{} confirmed twice", s, e);
            }
            if l.len > 0 {
                m.confirmed.insert(s, e);
            }
        }
        self.dead.push(l);
        Ok(())
    }

    fn fail(&mut self, i: usize) -> Result<(), TestCaseError> {
        let l = self.live.remove(i);
        self.rx
            .on_failed(self.now, l.read, l.id)
            .map_err(|e| TestCaseError::fail(format!("failed: {e}")))?;
        self.dead.push(l);
        Ok(())
    }

    /// The grant's connection is lost: every live grant of its read on the same server goes
    /// with it, at the same instant (one lost connection). Once a loss has failed the read,
    /// the rest are left to the cancels it issued (a transport's later reports of them are
    /// ignored, as for late ids).
    fn lose(&mut self, i: usize) -> Result<(), TestCaseError> {
        let (read, server) = (self.live[i].read, self.live[i].server);
        let mut k = 0;
        while k < self.live.len() && self.rx.is_finished(read) != Some(true) {
            if self.live[k].read == read && self.live[k].server == server {
                let l = self.live.remove(k);
                self.rx
                    .on_lost(self.now, l.read, l.id)
                    .map_err(|e| TestCaseError::fail(format!("lost: {e}")))?;
                self.dead.push(l);
            } else {
                k += 1;
            }
        }
        Ok(())
    }

    fn drop_read(&mut self, read: ReadKey) -> Result<(), TestCaseError> {
        prop_assert!(self.rx.finish_read(read).is_some());
        prop_assert!(self.rx.finish_read(read).is_none(), "a read ends once");
        self.live.retain(|l| l.read != read);
        self.reads.remove(&read);
        // The port's outstanding bytes are now the other reads' alone (`check`).
        self.check()
    }

    /// Ends finished reads, checking complete ones cover their block.
    fn reap(&mut self) -> Result<(), TestCaseError> {
        let keys: Vec<ReadKey> = self.reads.keys().copied().collect();
        for k in keys {
            if self.rx.is_finished(k) != Some(true) || self.live.iter().any(|l| l.read == k && !l.cancelled) {
                continue;
            }
            let done = self.rx.finish_read(k).expect("live");
            let m = self.reads.remove(&k).expect("model");
            self.live.retain(|l| l.read != k);
            if done.complete {
                let mut at = 0;
                for (&s, &e) in &m.confirmed {
                    prop_assert_eq!(s, at, "hole in a complete block");
                    at = e;
                }
                prop_assert_eq!(at, m.stripe.block_len());
            } else {
                prop_assert!(done.error.is_some(), "ended neither complete nor failed");
            }
        }
        Ok(())
    }
}

fn stripe_of(spec: &ReadSpec, servers: u32, salt: u64) -> Stripe {
    let frags = (0..spec.fragments)
        .map(|i| {
            let s = ((u64::from(i) + salt) % u64::from(servers)) as u32;
            let len = (spec.len + u64::from(i) * 977) % (spec.len + 1);
            let f = Fragment::new(ServerId(s), "k", 0, len);
            if spec.replicas && servers > 1 {
                f.with_replicas(vec![ServerId((s + 1) % servers)])
            } else {
                f
            }
        })
        .collect();
    Stripe::new(frags).expect("valid stripe")
}

fn policy_of(spec: &ReadSpec) -> Policy {
    Policy::builder()
        .grant_size(if spec.chunk == 0 {
            GrantSize::Whole
        } else {
            GrantSize::Chunk { bytes: spec.chunk }
        })
        .pipeline_depth(spec.depth)
        .hedging(if spec.hedging {
            Hedging::AfterRto {
                budget_fraction: 0.5,
                min_budget_bytes: 64_000,
            }
        } else {
            Hedging::Off
        })
        .rto(
            RtoBounds::new(
                Duration::from_micros(500),
                Duration::from_micros(200),
                Duration::from_millis(20),
            )
            .unwrap(),
        )
        .build()
        .expect("valid policy")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 1_000, ..ProptestConfig::default() })]

    #[test]
    fn client_wide_receiver_holds_its_invariants(
        port in port_spec(),
        reads in prop::collection::vec(read_spec(), 1..=12),
        servers in 1u32..=16,
        ops in prop::collection::vec(op(), 0..400),
    ) {
        let config = ReceiverConfig::builder()
            .min_budget(port.min)
            .initial_budget(port.initial)
            .max_budget(port.max)
            .max_senders(port.senders)
            .aging_bytes(port.aging_bytes)
            .adaptive(port.adaptive)
            .hedge_burst(port.burst)
            .build()
            .expect("valid port");
        let t0 = Instant::now();
        let mut h = Harness {
            rx: Receiver::new(config),
            reads: HashMap::new(),
            live: Vec::new(),
            dead: Vec::new(),
            now: t0,
            aging: port.aging_bytes,
            clock: 0.0,
            senders_cap: port.senders,
            hedge_burst: port.burst,
            hedged: 0,
            granted: 0,
            max_rate: 0.0,
            t0,
            last_life: t0,
            discounts: 0,
            stuck_frags: HashSet::new(),
        };
        let mut pending: Vec<(usize, &ReadSpec)> = reads.iter().enumerate().collect();
        pending.sort_by_key(|(_, s)| s.start_at_step);
        let mut started = 0;
        let mut start_due = |h: &mut Harness, step: usize| {
            while let Some(&(i, spec)) = pending.first() {
                if usize::from(spec.start_at_step) > step {
                    break;
                }
                pending.remove(0);
                let stripe = stripe_of(spec, servers, i as u64);
                let key = h.rx.start_read(h.now, &stripe, &policy_of(spec), i as u64, ReadOptions { priority: spec.priority });
                h.reads.insert(
                    key,
                    ReadModel {
                        stripe,
                        chunk: spec.chunk,
                        confirmed: BTreeMap::new(),
                        started_at: h.rx.aging_clock(),
                        seq: started,
                        priority: spec.priority,
                    },
                );
                started += 1;
            }
        };
        for (step, op) in ops.iter().enumerate() {
            start_due(&mut h, step);
            // The transport hears of a cancel before its next event.
            while h.rx.has_pending_cancels() {
                prop_assert!(h.poll()?);
            }
            let pick = |h: &Harness, p: u16, ok: &dyn Fn(&Live) -> bool| {
                let c: Vec<usize> = (0..h.live.len()).filter(|&i| ok(&h.live[i])).collect();
                (!c.is_empty()).then(|| c[p as usize % c.len()])
            };
            match *op {
                Op::Poll => { h.poll()?; }
                Op::Bytes { pick: p, frac } => {
                    if let Some(i) = pick(&h, p, &|l| l.received < l.len) {
                        let left = h.live[i].len - h.live[i].received;
                        let n = (left * u64::from(frac) / 255).max(1);
                        h.bytes(i, n)?;
                    }
                }
                Op::Done { pick: p } => {
                    if let Some(i) = pick(&h, p, &|l| l.received == l.len) { h.done(i)?; }
                }
                Op::Fail { pick: p } => {
                    if let Some(i) = pick(&h, p, &|_| true) { h.fail(i)?; }
                }
                Op::Lost { pick: p } => {
                    if let Some(i) = pick(&h, p, &|_| true) { h.lose(i)?; }
                }
                Op::LateBytes { pick: p } => {
                    if !h.dead.is_empty() {
                        let l = &h.dead[p as usize % h.dead.len()];
                        if h.reads.contains_key(&l.read) {
                            let (read, id) = (l.read, l.id);
                            let d = h.rx.on_bytes(h.now, read, id, 1);
                            prop_assert_eq!(d, Ok(Delivery::Discard));
                            h.last_life = h.now;
                        }
                    }
                }
                Op::Advance { us } => {
                    h.now += Duration::from_micros(u64::from(us));
                    h.rx.handle_timeout(h.now);
                }
                Op::Silence { ms } => {
                    h.now += Duration::from_millis(u64::from(ms));
                    h.rx.handle_timeout(h.now);
                }
                Op::Loss => h.rx.on_loss(h.now, 3, 0),
                Op::Drop { pick: p } => {
                    let mut keys: Vec<ReadKey> = h.reads.keys().copied().collect();
                    keys.sort_unstable();
                    if !keys.is_empty() && p % 4 == 0 {
                        h.drop_read(keys[p as usize % keys.len()])?;
                    }
                }
            }
            h.check()?;
            h.reap()?;
        }
        start_due(&mut h, usize::MAX);
        // A fair transport: poll everything, answer everything, advance time when stuck.
        let mut rounds = 0;
        while !h.reads.is_empty() {
            rounds += 1;
            prop_assert!(rounds < 200_000, "reads never ended: {} left", h.reads.len());
            while h.poll()? {}
            h.check()?;
            if let Some(i) = h.live.iter().position(|l| l.received < l.len) {
                let n = h.live[i].len - h.live[i].received;
                h.bytes(i, n)?;
            } else if let Some(i) = h.live.iter().position(|l| l.received == l.len) {
                h.done(i)?;
            } else {
                h.now += Duration::from_millis(1);
                h.rx.handle_timeout(h.now);
            }
            h.check()?;
            h.reap()?;
        }
    }
}
