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

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use incast_core::receiver::{FinishedRead, ReadKey, ReadOptions, Receiver, ReceiverConfig, ReceiverStats};
use incast_core::Stripe;
use incast_core::{Action, Delivery, EventError, GrantId, Policy, ReadError, RttEstimator, Scheduler, SchedulerStats};
use tokio::sync::Notify;

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
}

impl Inner {
    /// Emits a `tracing` event if the port's budget moved since the last look (one
    /// comparison otherwise), in the span of the read whose event moved it.
    fn note_budget(&mut self) {
        #[cfg(feature = "tracing")]
        {
            let now = self.rx.budget();
            if now != self.budget {
                tracing::debug!(budget = now, was = self.budget, "port budget changed");
                self.budget = now;
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
    }
}

/// The shared receiver of one client.
#[derive(Debug)]
pub(crate) struct Port {
    inner: Mutex<Inner>,
}

impl Port {
    pub(crate) fn new(config: ReceiverConfig) -> Self {
        Self {
            inner: Mutex::new({
                let rx = Receiver::new(config);
                Inner {
                    budget: rx.budget(),
                    rx,
                    outboxes: HashMap::new(),
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

    pub(crate) fn poll_timeout(&mut self) -> Option<Instant> {
        match self {
            ReadSched::Own(s) => s.poll_timeout(),
            ReadSched::Shared(s) => s.port.lock().rx.poll_timeout_of(s.key),
        }
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

    pub(crate) fn on_bytes(&mut self, now: Instant, id: GrantId, n: u64) -> Result<Delivery, EventError> {
        match self {
            ReadSched::Own(s) => s.on_bytes(now, id, n),
            ReadSched::Shared(s) => {
                let mut g = s.port.lock();
                let r = g.rx.on_bytes(now, s.key, id, n);
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
