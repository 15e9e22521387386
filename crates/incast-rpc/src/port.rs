//! The client's port: every concurrent read of one [`crate::Client`] draws its grants from
//! one [`Receiver`] (see [`incast_core::receiver`] for what it decides and why).
//!
//! Each read still runs in its own task with its own connections (its driver reads straight
//! into its own block). The receiver sits behind a mutex; a read's driver takes it for each
//! event. Grants are routed, not polled per read: whichever driver runs after an event that
//! frees room (a completion, a failure, a read ending) drains every action the receiver now
//! has into the outbox of the read it belongs to and wakes that read's driver. So the port's
//! order (shortest remaining read first) holds across tasks, and a read never waits for its
//! own next event to learn that the port has room for it.
//!
//! # One timer for the port
//!
//! The reads' deadlines (a stalled grant's hedge, a held read's silence check) wake their
//! drivers through one high-resolution timer per port, kept by a small task (the "keeper"),
//! not through one timerfd per read. Arming a timer that expires before the kernel's next
//! tick reprograms the CPU's timer; on a virtual machine that is an exit to the hypervisor,
//! on arming and again on cancelling. A read's stall deadline is a millisecond or two away
//! and the read usually ends first, so a timer per read paid that twice per read for a timer
//! that almost never fired. Measured on the 2-core VM (Linux 6.18, lapic-deadline clock
//! events, HZ=250), loopback, 16 concurrent reads of 256 KiB from one server: with a timer
//! per read, 2 `timerfd_settime` per read and 0.42-0.47 s of CPU per GiB; with the port's
//! timer, 0.15 per read and 0.34-0.44 s/GiB (docs/measurements.md, *Where it lost, session
//! by session*, loopback).
//!
//! The keeper arms the earliest deadline of all reads, and re-arms only when a read asks for
//! an earlier one or the armed one has passed: a deadline that moves later (its read ended, or
//! its grant completed) leaves the timer armed, and it fires once for nothing. When it fires,
//! the keeper wakes every read whose deadline has passed (the same notify that routes grants);
//! the read's driver reads its sockets first and then fires its timers, as it did with its
//! own timer. A driver that finds its deadline passed handles it without waiting for the
//! keeper, so the keeper skips deadlines it already woke a read for (no busy loop on a read
//! that is busy elsewhere). The keeper holds the port weakly and ends with it; it runs on
//! the runtime of the read that found it missing, and a read that finds it gone (its runtime
//! shut down) starts another.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use incast_core::receiver::{FinishedRead, HostTime, ReadKey, ReadOptions, Receiver, ReceiverConfig, ReceiverStats};
use incast_core::Stripe;
use incast_core::{Action, Delivery, EventError, GrantId, Policy, ReadError, RttEstimator, Scheduler, SchedulerStats};
use tokio::sync::Notify;

use crate::rx_counter::RxCounter;
use crate::timer::HrTimer;

/// How a client's concurrent reads share its port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Sharing {
    /// One client-wide receiver: one budget (adaptive), sender cap and hedge bucket for all
    /// reads, shortest remaining read first with aging. The policy's budget, sender cap and
    /// adaptation are the port's; its grant size, depth, stagger, hedging, window cap and RTO
    /// bounds still apply per read.
    #[default]
    Port,
    /// Every read schedules itself alone under its policy's budget and sender cap (the
    /// behaviour before the client-wide receiver; kept for comparison, and for policies such
    /// as [`Policy::naive`] that must not be limited).
    PerRead,
}

#[derive(Debug, Default)]
struct Outbox {
    actions: VecDeque<Action>,
    notify: Arc<Notify>,
}

#[derive(Debug)]
struct Inner {
    rx: Receiver,
    outboxes: HashMap<ReadKey, Outbox>,
    /// The budget last seen, for the `tracing` event of a change.
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    budget: u64,
    /// The timeout multiplier, denied hedges and decreases (delay, loss, stalls) last seen,
    /// for their `tracing` events.
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    seen: (u32, u64, [u64; 3]),
    clock: Clock,
    /// The client interface's receive counter (see [`crate::rx_counter`]).
    counter: Counter,
}

/// Where the port stands with its interface's receive counter.
#[derive(Debug)]
enum Counter {
    /// Not looked for yet: the first connection's local address names the interface.
    Unknown,
    /// Read as bytes arrive, at most once per [`crate::rx_counter::READ_EVERY`].
    Reading(RxCounter),
    /// Turned off, or none to be found: the receiver measures from its own bytes.
    Off,
}

/// The port's side of its one timer (see "One timer for the port").
#[derive(Debug, Default)]
struct Clock {
    /// The deadline the keeper's timer is armed for; `None` while disarmed or just fired.
    armed: Option<Instant>,
    /// The keeper task, while one was started.
    keeper: Option<tokio::task::AbortHandle>,
    /// Wakes the keeper: a read wants an earlier deadline, or the port is gone.
    wake: Arc<Notify>,
    /// Why the keeper stopped, if its timer failed: every read then fails with it.
    failed: Option<(io::ErrorKind, String)>,
}

impl Inner {
    /// Emits a `tracing` event if the port's budget moved since the last look (one
    /// comparison otherwise), in the span of the read whose event moved it.
    fn note_budget(&mut self) {
        #[cfg(feature = "tracing")]
        {
            let now = self.rx.budget();
            if now != self.budget && !tracing::enabled!(tracing::Level::DEBUG) {
                self.budget = now;
            }
            if tracing::enabled!(tracing::Level::DEBUG) {
                let st = self.rx.stats();
                let (scale, denied, decreases) = self.seen;
                let counts = [st.delay_decreases, st.loss_decreases, st.stall_decreases];
                if now != self.budget {
                    // Why it moved: the decrease counters that moved with it, else growth
                    // (or a ceiling or floor that came or went). A decrease on stalls moves
                    // the loss counter too (stalls decrease as a loss window does), so the
                    // stall counter is looked at before it.
                    let cause = match [0, 2, 1].into_iter().find(|&i| counts[i] != decreases[i]) {
                        Some(0) => "delay",
                        Some(2) => "stalls",
                        Some(_) => "loss",
                        None if now > self.budget => "growth",
                        None => "ceiling",
                    };
                    tracing::debug!(
                        budget = now,
                        was = self.budget,
                        cause,
                        slow_start = st.slow_start,
                        target_us = st.learnt_target.map(|t| t.as_micros() as u64),
                        ceiling = st.loss_ceiling,
                        "port budget changed"
                    );
                    self.budget = now;
                }
                if st.timeout_scale != scale {
                    tracing::debug!(scale = st.timeout_scale, was = scale, "port timeout scale changed");
                }
                if st.hedges_denied > denied {
                    tracing::debug!(denied = st.hedges_denied - denied, "port hedge bucket denied");
                }
                self.seen = (st.timeout_scale, st.hedges_denied, counts);
            }
        }
    }

    /// Gives the receiver a reading of the interface's receive counter, if one is due.
    fn read_counter(&mut self, now: Instant) {
        if let Counter::Reading(c) = &mut self.counter {
            if let Some((at, bytes)) = c.poll(now) {
                self.rx.on_port_bytes(at, bytes);
            }
        }
    }

    /// Moves every action the receiver has into its read's outbox, waking the other reads.
    fn pump(&mut self, now: Instant, me: Option<ReadKey>) {
        while let Some((rk, a)) = self.rx.poll_action(now) {
            if let Some(o) = self.outboxes.get_mut(&rk) {
                o.actions.push_back(a);
                if Some(rk) != me {
                    o.notify.notify_one();
                }
            }
        }
        // The read the port held back for credit may not be the one pumping, and its task
        // would not arm the keeper for it: the keeper looks again if it is armed later.
        if let Some(t) = self.rx.credit_wake() {
            if self.clock.armed.is_none_or(|a| t < a) {
                self.clock.wake.notify_one();
            }
        }
    }

    /// The earliest deadline of the live reads, skipping those at or before `woken` (their
    /// reads were woken for them and handle them when they run).
    fn next_deadline(&mut self, woken: Option<Instant>) -> Option<Instant> {
        let Inner { rx, outboxes, .. } = self;
        outboxes
            .keys()
            .filter_map(|k| rx.poll_timeout_of(*k))
            .filter(|t| woken.is_none_or(|w| *t > w))
            .min()
    }

    /// Wakes every read whose deadline is at or before `now`.
    fn wake_due(&mut self, now: Instant) {
        let Inner { rx, outboxes, .. } = self;
        for (k, o) in outboxes.iter() {
            if rx.poll_timeout_of(*k).is_some_and(|t| t <= now) {
                o.notify.notify_one();
            }
        }
    }

    /// Read `deadline` is due then: wakes the keeper if its timer is armed later (or not at
    /// all), and starts a keeper if none runs.
    fn want(&mut self, port: &Arc<Port>, deadline: Instant) {
        if self
            .clock
            .keeper
            .as_ref()
            .is_none_or(tokio::task::AbortHandle::is_finished)
            && self.clock.failed.is_none()
        {
            self.clock.armed = None;
            self.clock.keeper = tokio::runtime::Handle::try_current().ok().map(|h| {
                h.spawn(keep_time(Arc::downgrade(port), self.clock.wake.clone()))
                    .abort_handle()
            });
        }
        if self.clock.armed.is_none_or(|a| deadline < a) {
            self.clock.wake.notify_one();
        }
    }
}

/// The keeper: arms the port's one timer for the reads' earliest deadline and wakes the reads
/// whose deadlines passed. Ends when the port is dropped, or when its timer fails (recorded
/// for the reads to report).
async fn keep_time(port: Weak<Port>, wake: Arc<Notify>) {
    let fail = |e: io::Error| {
        if let Some(p) = port.upgrade() {
            let mut g = p.lock();
            g.clock.failed = Some((e.kind(), e.to_string()));
            for o in g.outboxes.values() {
                o.notify.notify_one();
            }
        }
    };
    let mut timer = match HrTimer::new() {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let mut woken: Option<Instant> = None;
    loop {
        {
            let Some(p) = port.upgrade() else { return };
            let mut g = p.lock();
            let next = g.next_deadline(woken);
            // Later deadlines leave the timer armed: one spurious firing costs less than a
            // re-arm on every read that ends before its deadline.
            if let Err(e) = timer.set_earlier(next) {
                drop(g);
                return fail(e);
            }
            g.clock.armed = timer.deadline();
        }
        tokio::select! {
            fired = timer.fired() => {
                if let Err(e) = fired {
                    return fail(e);
                }
                let now = Instant::now();
                woken = Some(now);
                let Some(p) = port.upgrade() else { return };
                let mut g = p.lock();
                g.clock.armed = None;
                g.wake_due(now);
            }
            _ = wake.notified() => {}
        }
    }
}

/// The shared receiver of one client.
#[derive(Debug)]
pub(crate) struct Port {
    inner: Mutex<Inner>,
}

impl Port {
    /// A port whose receiver runs with `config`; with `counter`, it also reads the receive
    /// counter of the interface of its first connection (see [`crate::rx_counter`]).
    pub(crate) fn new(config: ReceiverConfig, counter: bool) -> Self {
        Self {
            inner: Mutex::new({
                let rx = Receiver::new(config);
                Inner {
                    budget: rx.budget(),
                    seen: (rx.stats().timeout_scale, 0, [0; 3]),
                    rx,
                    outboxes: HashMap::new(),
                    clock: Clock::default(),
                    counter: if counter { Counter::Unknown } else { Counter::Off },
                }
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn stats(&self) -> ReceiverStats {
        self.lock().rx.stats()
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        let g = self.lock();
        if let Some(k) = &g.clock.keeper {
            k.abort();
        }
        g.clock.wake.notify_one();
    }
}

/// The scheduling side of one read: its own [`Scheduler`], or its share of the port.
#[derive(Debug)]
pub(crate) enum ReadSched {
    Own(Box<Scheduler>),
    Shared(SharedRead),
}

/// One read's handle on the port. Dropping it ends the read there and frees its share.
#[derive(Debug)]
pub(crate) struct SharedRead {
    port: Arc<Port>,
    key: ReadKey,
    notify: Arc<Notify>,
    finished: Option<Box<FinishedRead>>,
}

impl SharedRead {
    pub(crate) fn start(
        port: Arc<Port>,
        now: Instant,
        stripe: &Stripe,
        policy: &Policy,
        seed: u64,
        opts: ReadOptions,
    ) -> Self {
        let notify = Arc::new(Notify::new());
        let key = {
            let mut g = port.lock();
            let key = g.rx.start_read(now, stripe, policy, seed, opts);
            g.outboxes.insert(
                key,
                Outbox {
                    actions: VecDeque::new(),
                    notify: notify.clone(),
                },
            );
            key
        };
        Self {
            port,
            key,
            notify,
            finished: None,
        }
    }

    /// Ends the read at the port (once) and hands what it freed to the other reads.
    fn finish(&mut self) -> &FinishedRead {
        if self.finished.is_none() {
            let mut g = self.port.lock();
            let f =
                g.rx.finish_read(self.key)
                    .expect("a shared read is live until finished");
            g.outboxes.remove(&self.key);
            g.pump(Instant::now(), None);
            self.finished = Some(Box::new(f));
        }
        self.finished.as_ref().expect("set above")
    }
}

impl Drop for SharedRead {
    fn drop(&mut self) {
        self.finish();
    }
}

impl ReadSched {
    pub(crate) fn own(stripe: &Stripe, policy: &Policy, seed: u64, rtt: Option<RttEstimator>) -> Self {
        ReadSched::Own(Box::new(match rtt {
            Some(rtt) => Scheduler::with_rtt(stripe, policy, seed, rtt),
            None => Scheduler::new(stripe, policy, seed),
        }))
    }

    /// What woke-up drivers wait on: the port's routing of grants to this read.
    pub(crate) fn notify(&self) -> Option<Arc<Notify>> {
        match self {
            ReadSched::Own(_) => None,
            ReadSched::Shared(s) => Some(s.notify.clone()),
        }
    }

    pub(crate) fn poll_action(&mut self, now: Instant) -> Option<Action> {
        match self {
            ReadSched::Own(s) => s.poll_action(now),
            ReadSched::Shared(s) => {
                let mut g = s.port.lock();
                g.pump(now, Some(s.key));
                g.outboxes.get_mut(&s.key)?.actions.pop_front()
            }
        }
    }

    /// The read's next deadline. A shared read is woken for it by the port's keeper (through
    /// [`ReadSched::notify`]); a read alone arms its own timer. `Err`: the port's timer
    /// failed, so a shared read cannot be woken for its deadlines.
    pub(crate) fn poll_timeout(&mut self) -> io::Result<Option<Instant>> {
        match self {
            ReadSched::Own(s) => Ok(s.poll_timeout()),
            ReadSched::Shared(s) => {
                let mut g = s.port.lock();
                if let Some((kind, why)) = &g.clock.failed {
                    return Err(io::Error::new(*kind, why.clone()));
                }
                let t = g.rx.poll_timeout_of(s.key);
                if let Some(t) = t {
                    g.want(&s.port, t);
                }
                Ok(t)
            }
        }
    }

    /// Whether the port's keeper wakes this read for its deadlines (else the caller keeps
    /// its own timer).
    pub(crate) fn port_keeps_time(&self) -> bool {
        self.is_shared()
    }

    /// Whether the read draws its grants from the client's port ([`Sharing::Port`]).
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self, ReadSched::Shared(_))
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        match self {
            ReadSched::Own(s) => s.handle_timeout(now),
            ReadSched::Shared(s) => {
                let mut g = s.port.lock();
                let _ = g.rx.handle_timeout_of(now, s.key);
                g.note_budget();
            }
        }
    }

    /// `n` more bytes of grant `id`; `host`: see [`Receiver::on_bytes_timed`] (a read
    /// scheduled alone has no delay rule, and ignores it).
    pub(crate) fn on_bytes(
        &mut self,
        now: Instant,
        id: GrantId,
        n: u64,
        host: HostTime,
    ) -> Result<Delivery, EventError> {
        match self {
            ReadSched::Own(s) => s.on_bytes(now, id, n),
            ReadSched::Shared(s) => {
                let mut g = s.port.lock();
                let r = g.rx.on_bytes_timed(now, s.key, id, n, host);
                g.read_counter(now);
                g.note_budget();
                r
            }
        }
    }

    /// Grant `id` of fragment `fragment` ended whole; returns the fragment's confirmed bytes
    /// after it (one lock of the port for both).
    pub(crate) fn on_done(&mut self, now: Instant, id: GrantId, fragment: usize) -> Result<u64, EventError> {
        match self {
            ReadSched::Own(s) => {
                s.on_done(now, id)?;
                Ok(s.fragment_confirmed(fragment).unwrap_or(0))
            }
            ReadSched::Shared(s) => {
                let mut g = s.port.lock();
                let r = g.rx.on_done(now, s.key, id);
                g.note_budget();
                r?;
                Ok(g.rx.fragment_confirmed(s.key, fragment).unwrap_or(0))
            }
        }
    }

    /// The server of grant `id` announced its fragment's length (see
    /// [`Scheduler::on_length`]).
    pub(crate) fn on_length(&mut self, now: Instant, id: GrantId, len: u64) -> Result<(), EventError> {
        match self {
            ReadSched::Own(s) => s.on_length(now, id, len),
            ReadSched::Shared(s) => {
                let mut g = s.port.lock();
                let r = g.rx.on_length(now, s.key, id, len);
                g.note_budget();
                r
            }
        }
    }

    /// The length of fragment `fragment`, once known.
    pub(crate) fn fragment_len(&self, fragment: usize) -> Option<u64> {
        match self {
            ReadSched::Own(s) => s.fragment_len(fragment),
            ReadSched::Shared(s) => s.port.lock().rx.fragment_len(s.key, fragment),
        }
    }

    pub(crate) fn on_failed(&mut self, now: Instant, id: GrantId) -> Result<(), EventError> {
        match self {
            ReadSched::Own(s) => s.on_failed(now, id),
            ReadSched::Shared(s) => {
                let mut g = s.port.lock();
                let r = g.rx.on_failed(now, s.key, id);
                g.note_budget();
                r
            }
        }
    }

    /// See [`Scheduler::on_lost`].
    pub(crate) fn on_lost(&mut self, now: Instant, id: GrantId) -> Result<(), EventError> {
        match self {
            ReadSched::Own(s) => s.on_lost(now, id),
            ReadSched::Shared(s) => {
                let mut g = s.port.lock();
                let r = g.rx.on_lost(now, s.key, id);
                g.note_budget();
                r
            }
        }
    }

    /// Whether the port's servers reported loss lately (`Receiver::is_lossy`). A read alone
    /// does not track reported loss: always false.
    pub(crate) fn port_is_lossy(&self, now: Instant) -> bool {
        match self {
            ReadSched::Own(_) => false,
            ReadSched::Shared(s) => s.port.lock().rx.is_lossy(now),
        }
    }

    /// A connection of this read is open from local address `local`: the first one names
    /// the interface whose receive counter the port reads (see [`crate::rx_counter`]).
    pub(crate) fn note_local_address(&self, local: IpAddr) {
        let ReadSched::Shared(s) = self else { return };
        let mut g = s.port.lock();
        if !matches!(g.counter, Counter::Unknown) {
            return;
        }
        g.counter = match RxCounter::for_address(local) {
            Ok(c) => {
                crate::trace::event!(
                    debug,
                    interface = c.interface(),
                    "port reads its interface's receive counter"
                );
                Counter::Reading(c)
            }
            Err(_e) => {
                crate::trace::event!(debug, error = %_e, "port has no receive counter; it measures its own bytes");
                Counter::Off
            }
        };
    }

    /// Loss the servers reported: the port's budget reacts (a read alone ignores it: its
    /// policy's adaptation works on stalls and delay).
    pub(crate) fn on_loss(&mut self, now: Instant, retransmits: u64, rtos: u64) {
        if let ReadSched::Shared(s) = self {
            let mut g = s.port.lock();
            g.rx.on_loss(now, retransmits, rtos);
            g.note_budget();
        }
    }

    pub(crate) fn is_finished(&self) -> bool {
        match self {
            ReadSched::Own(s) => s.is_finished(),
            ReadSched::Shared(s) => s.port.lock().rx.is_finished(s.key).unwrap_or(true),
        }
    }

    /// Bytes confirmed so far and the block's length (as far as it is known).
    pub(crate) fn progress(&self) -> (u64, u64) {
        match self {
            ReadSched::Own(s) => (s.completed_bytes(), s.block_len()),
            ReadSched::Shared(s) => {
                let g = s.port.lock();
                (
                    g.rx.completed_bytes(s.key).unwrap_or(0),
                    g.rx.block_len(s.key).unwrap_or(0),
                )
            }
        }
    }

    pub(crate) fn error(&self) -> Option<ReadError> {
        match self {
            ReadSched::Own(s) => s.error().cloned(),
            ReadSched::Shared(s) => s.port.lock().rx.error(s.key).cloned(),
        }
    }

    /// The read's counters and, when shared, what the port did; ends a shared read at the
    /// port.
    pub(crate) fn finish(&mut self) -> (SchedulerStats, Option<incast_core::receiver::PortReport>) {
        match self {
            ReadSched::Own(s) => (s.stats(), None),
            ReadSched::Shared(s) => {
                let f = s.finish();
                (f.stats, Some(f.port))
            }
        }
    }

    /// The RTT estimate to carry to the next read (a read alone; the port carries its own).
    pub(crate) fn rtt_to_carry(&self) -> Option<RttEstimator> {
        match self {
            ReadSched::Own(s) => (s.rtt().samples() > 0).then(|| s.rtt().clone()),
            ReadSched::Shared(_) => None,
        }
    }
}
