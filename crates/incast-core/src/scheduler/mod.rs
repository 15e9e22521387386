//! The sans-IO fan-in read scheduler.
//!
//! One [`Scheduler`] drives one read of one [`Stripe`] under one [`Policy`]. It owns no socket
//! and reads no clock: the transport feeds it what happened, with the current time, and asks
//! it what to do next. The shape is quinn-proto's:
//!
//! ```text
//!   loop {
//!       while let Some(action) = sched.poll_action(now) {   // requests to send, requests to cancel
//!           transport.perform(action);
//!       }
//!       if sched.is_finished() { break; }
//!       wait until a transport event or sched.poll_timeout();
//!       now = clock();
//!       match event {
//!           Bytes(id, data)  => match sched.on_bytes(now, id, data.len())? {
//!               Delivery::Write { block_offset } => block[block_offset..][..data.len()].copy_from_slice(data),
//!               Delivery::Discard => {}                          // late bytes of a cancelled request
//!           },
//!           End(id)          => sched.on_done(now, id)?,         // the server finished (checksum ok)
//!           Failed(id)       => sched.on_failed(now, id)?,       // connection lost, error frame, bad data
//!           Timer            => sched.handle_timeout(now),
//!       }
//!   }
//! ```
//!
//! # What it decides
//!
//! - **Admission**: a grant is issued only while at most K servers have grants outstanding
//!   and the bytes requested and not yet received stay within the (effective) budget B.
//! - **Pipelining**: a fragment may have up to D grants outstanding (the policy's pipeline
//!   depth), for consecutive ranges, so one sender's connection never idles a round trip
//!   between chunks. Under a client-wide receiver, a fragment whose server's live grants
//!   all wait in its store (held: see "A slow store is not a stall" in
//!   [`crate::receiver`]) may have up to [`STORE_DEPTH_FACTOR`] times D: each further
//!   grant waits in that store beside the others instead of a hold after them.
//! - **Order**: three FIFO queues, served strictly in this order: fragments with ranges to
//!   re-request (after a hedge or a failure); started fragments that can take another grant
//!   (after each grant a fragment goes to the back, so started fragments share the budget
//!   round-robin); then untouched fragments in stripe order, spaced by the stagger. A queue
//!   head that K or B does not admit blocks everything behind it: no fragment is overtaken
//!   forever, and the grants already out, which hold at most B bytes, unblock it. On a lossy
//!   port that other traffic keeps full, with a small budget (a receiver's `Gate` sets a
//!   spreading chunk), untouched fragments go before the started ones, so the budget rides
//!   on more connections (see "Spreading a small budget on a lossy port" in
//!   [`crate::receiver`]).
//! - **Exactly once, structurally.** Every byte of a fragment is, at any time, in exactly one
//!   of: confirmed, in a live grant, in a *hole* (a range whose grant was cancelled or failed,
//!   re-requested before anything new), or not yet granted (`next..len`). No two live grants
//!   ever cover the same byte.
//! - **Hedging replaces, it does not race.** When a grant makes no progress for one
//!   randomized, backed-off RTO ([`crate::rtt`]), the scheduler cancels it
//!   ([`Action::Cancel`]: the transport drains and drops its late bytes, and
//!   [`Scheduler::on_bytes`] answers [`Delivery::Discard`] for them) and re-requests the same
//!   range, first in line, on the spare connection of the same server or on a replica. The
//!   replacement takes over the budget the stalled grant held, so hedges draw from B like
//!   everything else, and their bytes are charged to the hedge budget; when that is spent the
//!   grant waits, with exponential backoff, and after [`ESCALATE_AFTER_STALLS`] stalls (or,
//!   on a lossy port, [`escalate_within`] without progress, whichever comes first) it is
//!   moved (cancelled and re-requested, no hedge budget spent) to a replica, or without one
//!   to the server's other connection, so it never waits on the server kernel's own
//!   backed-off RTO. Moves of a range that makes no progress back off (each waits twice
//!   as long as the last), so a server that answers every request late is still answered. Racing the stalled request instead would
//!   need extra budget exactly when the budget is full (and in TCP incast the stalled flow is
//!   waiting for a 200 ms timer, so it would not win the race anyway).
//! - **Stalls are per connection.** A transport serves the grants of one connection (a
//!   server and a [`Lane`]) in order, so a pipelined grant waits while the one ahead of it
//!   transfers. Bytes on a connection therefore count as progress for every grant queued on
//!   it, and only a grant issued on an idle connection gives an RTT sample (its first byte is
//!   not delayed by another grant's transfer). Timing each grant from its own issue instead
//!   fired a spurious hedge for most blocks on the testbed (queued grants wait for up to
//!   D - 1 grants ahead of them, several RTOs). For the same reason, when a grant is
//!   hedged or moved off its connection, the grants of its fragment queued behind it there
//!   that have no byte yet go along, as retries: they wait for the same lost bytes. Hedged
//!   one by one as their own timers fired, they spent the hedge budget on one connection's
//!   stall (a single read of 16 servers of a 5 ms store had up to 12 such grants on a
//!   connection), and the stalls after them waited to be moved; moved one by one, each
//!   waited its own bound (docs/measurements.md, *Forty-seventh session*).
//! - **A re-request waits in the store again.** Hedged or moved, a grant is cancelled and
//!   asked again, and a server whose store is slow (a hold of
//!   [`crate::receiver::STORE_HOLD`] or more learnt at its issue) holds the new request
//!   as long as the first. Where the first's bytes were only held up by a lost segment,
//!   its server's kernel repairs it with a tail loss probe, two smoothed round trips plus
//!   two jiffies (8 ms at HZ 250) after its last segment, much sooner than a 100 ms hold.
//!   So such a grant counts as stalled only after the lesser of its store's hold and
//!   [`STORE_STALL_WAIT`] without progress (never sooner than its timeout): where the
//!   store is quicker than that wait, asking again costs less than waiting. On the
//!   1 Gbit/s testbed behind 100 ms stores (64 and 1,024 servers of 32 KiB fragments, 1
//!   and 4 reads at once; seven runs against five, alternated) the wait read 1.01-1.23x of
//!   the goodput of hedging at the path's timeout by row (1.09x by geometric mean; 4 reads
//!   of 64 servers 1.23x, their median read 311 -> 182 ms), with 0.65-0.79 times the
//!   switch drops and 0.49-0.88 times the hedges. Behind 20 ms stores 1.01-1.04x
//!   by row (1.07-1.14 times the drops), behind 5 ms stores 1.02x by geometric mean
//!   (0.94-1.12x, 0.81 times the hedges), on loopback no change (docs/measurements.md,
//!   *Sixty-eighth session*).
//! - **Progress is a segment, not a byte.** A grant progresses when [`MIN_PROGRESS_BYTES`]
//!   more of its bytes have arrived since its last progress, or its last byte has. Counting
//!   every byte let a server that trickles one byte per 200 ms (a fault `incast-bench chaos`
//!   injects) hold its grants forever: each byte reset the timer and the backoff, so its
//!   grants were never hedged nor escalated, and the reads waited for their deadline. A sender
//!   that moves data delivers at least a segment per RTO; one that does not is stalled. (A
//!   peer sending a segment per timeout still passes: this is a floor, not a rate check.)
//! - **Failures**: a failed grant's range is retried on the next replica not yet failed; a
//!   fragment with no such replica ends the read with [`ReadError::ServerFailed`] naming the
//!   server, and every outstanding grant is cancelled. Bytes of a grant count only once the
//!   grant is confirmed by [`Scheduler::on_done`], so a grant that fails half-way (or fails
//!   its checksum) is re-requested whole and the block never keeps a short or corrupt range.
//!
//! # Lengths learnt on the way
//!
//! A fragment of unknown length ([`crate::Fragment::up_to`], [`crate::Fragment::query`]) is
//! scheduled as if it were as long as its maximum, with one rule more: until its length is
//! known it gets its first grant only (one chunk, as any fragment's first grant: Homa's
//! *unscheduled bytes*, a share of the budget, not the whole maximum). The server announces
//! the true length in the first frame of every response to it; the transport reports that
//! with [`Scheduler::on_length`] before any of its bytes. Then the fragment shrinks to its
//! true length: the first grant is cut to what the server will send (the budget it held
//! beyond that is released at once; a grant cut to nothing ends there), and the rest is granted like any fragment's, first
//! in line after re-requests. The budget is thus charged by what was granted, never by what
//! a server might send. A length over the maximum, a length that differs from the one already
//! learnt (a replica that disagrees) and bytes before a length are refused with a typed
//! [`EventError`]: the transport fails that grant, and the read tries a replica or fails.
//!
//! # Invariants
//!
//! Checked by [`Scheduler::check_invariants`], and after every event in debug builds
//! (fully for stripes of at most 256 fragments, the O(1) ones only above that):
//!
//! 1. `outstanding` (bytes requested, not received, over live grants) `<= B`;
//! 2. servers with live grants `<= K`; live grants per fragment `<= D`; the live-grant
//!    counters per server and per connection match the live grants;
//! 3. per fragment, confirmed + live + holes + not yet granted = its length, and the sum
//!    of confirmed bytes is `completed`;
//! 4. the read is complete if and only if `completed == block_len` (the sum of the fragments'
//!    lengths, with the maximum for those whose length is not known yet); a fragment whose
//!    length is not known has nothing confirmed;
//! 5. hedged bytes `<=` the hedge budget, and timer entries `<= 2 * live grants + 65`;
//! 6. every started fragment that could take a grant is queued, and while the read is not
//!    finished something is pending; with nothing outstanding, the next grant fits;
//! 7. the stuck, late and held bytes are the remaining bytes of the live grants in each
//!    state, and a held grant has no byte yet and is not stuck; the held grants per server,
//!    and the servers whose live grants are all held, recount from the live grants.
//!
//! # Cost
//!
//! Every event is O(1) apart from timer-heap pushes and pops, O(log live grants) (entries of
//! ended grants are dropped lazily and the heap is compacted when they outnumber the live
//! ones); nothing scans the stripe. Memory is O(fragments + live grants). See
//! `benches/scheduler.rs` for the measured cost per event.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use crate::policy::{Adaptation, Hedging, Policy, Stagger};
use crate::rng::SplitMix64;
use crate::rtt::RttEstimator;
use crate::stripe::{ServerId, Stripe};

/// Above this many fragments, debug builds check only the O(1) invariants after each event.
#[cfg(debug_assertions)]
const DEBUG_FULL_CHECK_MAX_FRAGMENTS: usize = 256;

/// Names one grant (one request to one server). Unique within a scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GrantId(u64);

impl GrantId {
    fn new(slot: u32, generation: u32) -> Self {
        Self(u64::from(generation) << 32 | u64::from(slot))
    }
    fn slot(self) -> usize {
        (self.0 & 0xFFFF_FFFF) as usize
    }
    fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
    /// The raw value, for a wire request id.
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

impl fmt::Display for GrantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "grant {}.{}", self.slot(), self.generation())
    }
}

/// Which of the two connections to a server carries a grant. The transport keeps a primary
/// and a spare connection per server; hedges to the same server switch lanes, because the
/// stalled connection is the one waiting for a kernel timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    /// The connection used first.
    Primary,
    /// The second connection, used by hedges.
    Spare,
}

impl Lane {
    fn other(self) -> Self {
        match self {
            Lane::Primary => Lane::Spare,
            Lane::Spare => Lane::Primary,
        }
    }
}

/// Why a grant was issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantKind {
    /// The first grant of a fragment (subject to stagger).
    First,
    /// The next chunk of a fragment whose previous grant completed.
    Next,
    /// A replacement for a grant that stalled for an RTO.
    Hedge,
    /// A replacement for a grant that failed, on a replica; or on the same server, for a
    /// grant whose connection was lost ([`Scheduler::on_lost`]).
    Retry,
}

/// One request to send: `len` bytes of the fragment's object at `object_offset` on `server`,
/// over `lane`, landing in the block at `block_offset`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The id to report events with.
    pub id: GrantId,
    /// Index of the fragment in the stripe (for the key).
    pub fragment: usize,
    /// The server to ask (the primary or a replica).
    pub server: ServerId,
    /// The connection to use.
    pub lane: Lane,
    /// Offset inside the object on the server.
    pub object_offset: u64,
    /// Where the first byte lands in the block.
    pub block_offset: u64,
    /// Bytes requested (at least 1).
    pub len: u64,
    /// Why it was issued.
    pub kind: GrantKind,
    /// The rate, bytes per second, the server should send it at no faster than, if any.
    /// A [`crate::receiver::Receiver`] with pacing on sets it (see its module docs); a
    /// transport that cannot pace ignores it.
    pub pace: Option<u64>,
}

/// What the transport should do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send this request.
    Request(Grant),
    /// Cancel this request: tell the server if the wire allows, drain and drop its late
    /// bytes. Further events for it are answered harmlessly ([`Delivery::Discard`], `Ok`).
    Cancel {
        /// The grant to cancel.
        id: GrantId,
        /// Its server.
        server: ServerId,
        /// Its connection.
        lane: Lane,
    },
}

/// Where received bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Copy them into the block starting at `block_offset`.
    Write {
        /// Offset in the block of the first of these bytes.
        block_offset: u64,
    },
    /// Drop them: they belong to a request that was cancelled, or that already ended.
    Discard,
}

/// Why the read failed. Once failed, a scheduler stays failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A fragment's last server failed and it has no replica left to try.
    #[error(
        "fragment {fragment} failed on {server}; no replica left (tried {})",
        tried_list(tried)
    )]
    ServerFailed {
        /// Index of the fragment.
        fragment: usize,
        /// The server whose failure ended the read.
        server: ServerId,
        /// Every server tried for this fragment, in order.
        tried: Vec<ServerId>,
    },
}

fn tried_list(tried: &[ServerId]) -> String {
    tried.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// A transport event the scheduler refused. The scheduler's state is unchanged; the
/// transport should treat the request as broken and report [`Scheduler::on_failed`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The read is not live in this receiver (never started, or already finished).
    #[error("{read} is not live in this receiver")]
    UnknownRead {
        /// The key given.
        read: crate::receiver::ReadKey,
    },
    /// The id was never issued by this scheduler.
    #[error("{id} was never issued by this scheduler")]
    UnknownGrant {
        /// The id given.
        id: GrantId,
    },
    /// More bytes arrived than the grant asked for.
    #[error("{id} on {server}: {extra} bytes beyond the {len} requested ({received} already received)")]
    TooManyBytes {
        /// The grant.
        id: GrantId,
        /// Its server.
        server: ServerId,
        /// Bytes requested.
        len: u64,
        /// Bytes received before this event.
        received: u64,
        /// Bytes of this event beyond `len`.
        extra: u64,
    },
    /// A server announced a fragment length over the fragment's maximum.
    #[error("{id} on {server}: the server announced {len} bytes, the fragment allows at most {max}")]
    LengthOverMax {
        /// The grant.
        id: GrantId,
        /// Its server.
        server: ServerId,
        /// The length announced.
        len: u64,
        /// The fragment's maximum.
        max: u64,
    },
    /// A server announced a fragment length that differs from the one already learnt.
    #[error("{id} on {server}: the server announced {len} bytes, the fragment has {known}")]
    LengthChanged {
        /// The grant.
        id: GrantId,
        /// Its server.
        server: ServerId,
        /// The length announced.
        len: u64,
        /// The length learnt before.
        known: u64,
    },
    /// Bytes of a fragment whose length was not announced yet.
    #[error("{id} on {server}: bytes before the fragment's length was announced")]
    LengthUnknown {
        /// The grant.
        id: GrantId,
        /// Its server.
        server: ServerId,
    },
    /// The server said it was done before all bytes arrived.
    #[error("{id} on {server}: ended after {received} of {len} bytes")]
    Short {
        /// The grant.
        id: GrantId,
        /// Its server.
        server: ServerId,
        /// Bytes requested.
        len: u64,
        /// Bytes received.
        received: u64,
    },
}

/// An invariant of the [module docs](self) that does not hold: a bug in the scheduler.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("scheduler invariant violated: {0}")]
pub struct InvariantViolation(pub String);

/// Counters of one read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// Grants issued, all kinds.
    pub grants: u64,
    /// Hedges issued.
    pub hedges: u64,
    /// Retries issued: after failures, after moves ([`SchedulerStats::escalations`]), and
    /// for grants moved along with a hedge of the grant ahead of them on their connection
    /// (see *Stalls are per connection* in the module docs).
    pub retries: u64,
    /// Bytes charged to the hedge budget.
    pub hedged_bytes: u64,
    /// Stalls detected (grants that made no progress for an RTO).
    pub stalls: u64,
    /// Stalls not hedged because the hedge budget was spent.
    pub hedges_denied: u64,
    /// Failures reported.
    pub failures: u64,
    /// Bytes answered with [`Delivery::Discard`].
    pub discarded_bytes: u64,
    /// Most servers with grants outstanding at once.
    pub peak_senders: u32,
    /// Most bytes outstanding at once.
    pub peak_outstanding: u64,
    /// Hedges whose replacement was confirmed before the stalled original was (the hedge
    /// saved time).
    pub hedges_won: u64,
    /// Hedges whose stalled original completed anyway before its replacement (the transport
    /// drained all its bytes and reported [`Scheduler::on_done`] for it): the stall was not
    /// one. Hedges neither won nor spurious are still open, or their original was cut short
    /// by the cancel.
    pub hedges_spurious: u64,
    /// Stalled grants moved (to a replica, or to the other connection of the same server)
    /// because the hedge budget was spent and they stayed stalled for
    /// [`ESCALATE_AFTER_STALLS`] timeouts or, on a lossy port, [`escalate_within`].
    pub escalations: u64,
    /// Grants that went without progress for a client-wide receiver's late bound past their
    /// expected arrival, so the port stopped counting their bytes until they progressed (see
    /// "Late grants leave the budget" in [`crate::receiver`]).
    pub late_grants: u64,
    /// Grants a client-wide receiver held until their expected first byte, their server's
    /// learnt hold being [`crate::receiver::STORE_HOLD`] or more (see "A slow store is not a
    /// stall" in [`crate::receiver`]).
    pub held_grants: u64,
    /// Grants whose connection broke on their fragment's last server and that were asked of
    /// it again instead of failing the read ([`Scheduler::on_lost`]).
    pub lost_retries: u64,
}

/// How many lost connections of one fragment's last server [`Scheduler::on_lost`] answers
/// by asking that server again before the read fails (1): one reset is a connection lost,
/// a second one on the same fragment a server failing.
pub const LOST_CONNECTION_RETRIES: u8 = 1;

/// Bytes of a grant that must arrive (or its last byte) before they count as progress and
/// push back its stall timer (see the module docs: a trickle is not progress). One Ethernet
/// TCP segment's payload.
pub const MIN_PROGRESS_BYTES: u64 = 1448;

/// How many times the policy's pipeline depth a fragment may have outstanding while its
/// server's live grants all wait in its store (4; see *Pipelining* in the module docs).
/// A read's chunks each wait a hold: at depth 4 of 16 KiB chunks, one read of 8 x 256 KiB
/// of a 20 ms store took four holds, where one hold and the transfer would do, whatever
/// the port's credit allowed.
pub const STORE_DEPTH_FACTOR: u32 = 4;

/// Least time without progress before a grant to a slow store counts as stalled, where its
/// store's hold is longer (15 ms; see *A re-request waits in the store again* in the module
/// docs): past Linux's tail loss probe, two smoothed round trips plus two jiffies (8 ms at
/// HZ 250) after the last segment, for round trips up to 3.5 ms.
pub const STORE_STALL_WAIT: Duration = Duration::from_millis(15);

/// Consecutive stalls without progress, with the hedge budget spent, after which a grant is
/// moved to a replica that has not failed, or to the other connection of its server,
/// instead of waiting on (for example) a kernel RTO that keeps backing off.
pub const ESCALATE_AFTER_STALLS: u32 = 6;

/// How many times in a row (3) the time bound ([`ESCALATE_WITHIN`]) may move a range of a
/// fragment that makes no progress; further moves of it wait for [`ESCALATE_AFTER_STALLS`]
/// stalls.
///
/// Counted per range (a grant passes its count to the grant that takes its range over), not
/// per fragment: a fragment in flight as several chunks can lose several tails at once, and
/// counted per fragment their moves used up one count between them. Traced at 100 Mbit/s
/// beside 2 bulk flows (16 x 256 KiB, one read at a time; docs/measurements.md,
/// *Thirty-second session*): one fragment's three other ranges moved within 100 ms, and the
/// fourth, stalled on a lost tail, then waited for the stall count; its server's RTO
/// repaired it 230 ms after its request and the read took 886 ms where its other fragments
/// ended by 728.
///
/// More than one: a grant moved by the bound lands on a new connection through the same
/// lossy port and can lose its own tail, and waiting for the stall count then let the
/// server's RTO fire on it. Beside 2 bulk flows on the testbed, moving once per fragment,
/// the reads' servers took 9-27 RTOs per 8 rows at 500 Mbit/s and 26-34 at 100 Mbit/s;
/// moving up to 3 times, with `incast-rpc` resetting the moved grants' silent connections,
/// 0-6 and 3 (alternated runs; docs/measurements.md, *Twentieth session*). Not unbounded:
/// a server slower than the bound on a lossy port would see its fragment moved forever and
/// never answer in time. (Once per fragment had been measured on a testbed whose bulk senders starved
/// the servers' thread for hundreds of milliseconds: one row moved 224 grants and read 5%
/// of the line rate; *Sixteenth session*.)
pub const MAX_TIMED_MOVES: u8 = 3;

/// Longest patience of a range moved again and again without progress (60 s): the wait
/// before its next move by the stall count doubles with each move (see
/// `Scheduler::escalate`) up to this; the read's deadline comes first in practice.
pub const MAX_MOVE_PATIENCE: Duration = Duration::from_secs(60);

/// On a port whose servers report loss, the longest a grant waits without progress, with
/// the hedge budget spent, before it is moved as after [`ESCALATE_AFTER_STALLS`] stalls
/// (100 ms): half of Linux's minimum RTO (200 ms), so that the move, and the reset of the
/// stalled connection when the moved grant wins, come before the server's kernel
/// retransmission timer fires. Counted in stalls alone, the backed-off timeouts of a path
/// with a few milliseconds of queue added up to 300-500 ms: beside 2 bulk flows on the
/// testbed (1 Gbit/s, 64 senders x 32 KiB) the traced server RTO of the reads was on a grant
/// whose read had spent its hedge budget and that was still waiting for its sixth stall (the
/// read took 625 ms, its stalled grant moved after 491 ms).
///
/// Only where loss is reported: there a grant without progress is most likely behind a lost
/// tail that only the server's RTO will repair. Elsewhere it may be a slow server, and a
/// grant moved every 100 ms never completes on a server that takes longer than that to
/// answer (a client-wide receiver sets it, see `Gate::escalate_within`; a read scheduled
/// alone counts stalls only).
///
/// It is the bound's upper end: a client-wide receiver that has measured the path moves such
/// a grant after [`ESCALATE_WITHIN_RTTS`] smoothed first-byte times, at least
/// [`MIN_ESCALATE_WITHIN`] (see [`escalate_within`]).
pub const ESCALATE_WITHIN: Duration = Duration::from_millis(100);

/// Smoothed first-byte times (8) a grant waits without progress on a lossy port, with the
/// hedge budget spent, before it is moved, within [`MIN_ESCALATE_WITHIN`] and
/// [`ESCALATE_WITHIN`] (see [`escalate_within`]).
///
/// Why not always [`ESCALATE_WITHIN`]: 100 ms is long next to the reads it holds up. Beside
/// 2 bulk flows at 500 Mbit/s on the testbed (one read of 16 x 32 KiB at a time, median
/// read 24 ms) four of the five slowest reads (111-170 ms) each had one fragment whose last
/// byte came 59-110 ms after its first, in reads that had hedged 8-12 times, as many as a
/// read's hedge budget holds there (traced with `INCAST_LOG=trace`). The server's TCP repairs a lost tail with a tail-loss probe after
/// about two smoothed RTTs (plus two jiffies, 8 ms at HZ 250); a grant still without
/// progress several round trips later waits for the RTO. Measured with the bound at
/// 8 round trips (docs/measurements.md, *Twenty-first session*; 8 rows per run, alternated
/// runs): 500 Mbit/s 42.6% and 44.7% of the line rate against 36.1% and 36.7%, most of it
/// in the rows where the bound fired most; within the runs' spread at 100 Mbit/s,
/// 1 Gbit/s, beside `bbr` bulk flows and behind 128 and 16 KiB ports.
pub const ESCALATE_WITHIN_RTTS: u32 = 8;

/// The shortest time bound on a lossy port (20 ms): longer than the servers' tail-loss
/// probe beside a few milliseconds of queue (two RTTs plus 8 ms at HZ 250), so a probe
/// that repairs the tail comes first; and the move counts against [`MAX_TIMED_MOVES`].
pub const MIN_ESCALATE_WITHIN: Duration = Duration::from_millis(20);

/// The time bound on a lossy port for a path whose smoothed first-byte time is `srtt`:
/// [`ESCALATE_WITHIN_RTTS`] times it, within [`MIN_ESCALATE_WITHIN`] and
/// [`ESCALATE_WITHIN`]; [`MIN_ESCALATE_WITHIN`] before any is measured.
///
/// ```
/// # use std::time::Duration;
/// use incast_core::scheduler::{escalate_within, ESCALATE_WITHIN, MIN_ESCALATE_WITHIN};
/// assert_eq!(escalate_within(None), MIN_ESCALATE_WITHIN);
/// assert_eq!(escalate_within(Some(Duration::from_millis(5))), Duration::from_millis(40));
/// assert_eq!(escalate_within(Some(Duration::from_secs(1))), ESCALATE_WITHIN);
/// ```
pub fn escalate_within(srtt: Option<Duration>) -> Duration {
    srtt.map_or(MIN_ESCALATE_WITHIN, |s| {
        s.saturating_mul(ESCALATE_WITHIN_RTTS)
            .clamp(MIN_ESCALATE_WITHIN, ESCALATE_WITHIN)
    })
}

/// What a client-wide receiver lets one read issue now (see [`crate::receiver`]). The
/// scheduler's own limits apply as well; [`Gate::OPEN`] adds none.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gate {
    /// Bytes the port can still take under its budget (an enlarged grant of at most two
    /// policy chunks shrinks to it in a budget of few such grants, see `next_len`).
    pub room: u64,
    /// Whether a grant may go to a server that has none of this read's grants (the port's
    /// sender cap).
    pub new_sender: bool,
    /// Bytes the port can still hedge.
    pub hedge_room: u64,
    /// Time the bytes already outstanding on the port take to arrive at the port's measured
    /// rate: a new grant is not late before that.
    pub ahead: Duration,
    /// Smallest size of a new chunk: a large budget is spent in large grants, not in many
    /// requests of the policy's chunk size.
    pub grant: u64,
    /// Largest size of a new chunk: a small budget is spent in small grants, so that more
    /// than one is in flight (the policy's chunk when the port sets no bound).
    pub max_chunk: u64,
    /// Largest rest of a fragment that an enlarged chunk takes along in the same grant: half
    /// the port's budget, without `max_chunk`'s floor, so that two grants still share the
    /// budget however small it is (see `next_len`; 0 turns the rule off).
    pub whole_rest: u64,
    /// Multiplier of the grant timeouts (1 and up): the port raises it after spurious
    /// hedges.
    pub timeout_scale: u32,
    /// With the hedge budget spent, how long a grant may go without progress before it is
    /// moved ([`escalate_within`] on a port whose servers report loss); `None`: only
    /// [`ESCALATE_AFTER_STALLS`] counts.
    pub escalate_within: Option<Duration>,
    /// How long a grant may go without progress past its expected arrival before it counts
    /// as *late* ([`Scheduler::late_bytes`]): the port stops counting its bytes, as TCP's
    /// pipe stops counting segments deemed lost. `None`: no grant is late.
    pub late_after: Option<Duration>,
    /// On a lossy port that other traffic keeps full, the chunk that spreads the budget over
    /// [`crate::receiver::SPREAD_GRANTS_PER_BUDGET`] connections (`None`: the port reports no
    /// loss, or its queue is the reads' own). A read whose policy chunk is larger spends its
    /// budget in chunks of this size and starts its untouched fragments before it pipelines
    /// on started ones (see "Spreading a small budget" in [`crate::receiver`]).
    pub spread_chunk: Option<u64>,
    /// Whether this read is the only one on a port that reports no loss: its lone fragment
    /// may then take the room, at most the budget, in one grant (`false`: other reads share
    /// the port, its servers reported loss lately, or no port sets a bound). See `next_len`.
    pub lone: bool,
    /// The port's budget, bytes: an enlarged grant shrinks to the room only while the
    /// budget holds fewer than [`crate::receiver::GRANTS_PER_BUDGET`] grants of its size
    /// (see `next_len`; 0: no port sets a bound).
    pub budget: u64,
}

impl Gate {
    pub(crate) const OPEN: Gate = Gate {
        room: u64::MAX,
        new_sender: true,
        hedge_room: u64::MAX,
        ahead: Duration::ZERO,
        grant: 0,
        max_chunk: u64::MAX,
        whole_rest: 0,
        timeout_scale: 1,
        escalate_within: None,
        late_after: None,
        spread_chunk: None,
        lone: false,
        budget: 0,
    };
    /// Admits no grant: polls cancels only.
    pub(crate) const CLOSED: Gate = Gate {
        room: 0,
        new_sender: false,
        hedge_room: 0,
        ahead: Duration::ZERO,
        grant: 0,
        max_chunk: u64::MAX,
        whole_rest: 0,
        timeout_scale: 1,
        escalate_within: None,
        late_after: None,
        spread_chunk: None,
        lone: false,
        budget: 0,
    };
}

/// Result of [`Scheduler::poll_gated`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Polled {
    /// Something to do.
    Action(Action),
    /// The read wants a grant that the gate refused.
    Blocked,
    /// Nothing to do until an event or a timeout.
    Idle,
}

/// Why [`Scheduler::next_grant`] issued nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Idle,
    Gate,
}

/// A range to request again because its grant was cancelled (hedge) or failed (retry).
#[derive(Clone, Copy, Debug)]
struct Hole {
    start: u64,
    len: u64,
    kind: GrantKind,
    /// The stalled grant this hole replaces, for the hedge's won/spurious count.
    orig: Option<GrantId>,
    /// Moves by the time bound behind this range since it last made progress (see
    /// [`MAX_TIMED_MOVES`]); the grant that takes the hole takes the count.
    moves: u8,
    /// How long the grant that takes the hole waits, from its issue, before the stall
    /// count may move it (see [`Scheduler::escalate`]); the grant takes it over.
    patience: Duration,
    /// The range was stuck (see [`Scheduler::mark_stuck`]) when it was released: the grant
    /// that takes the hole is stuck from its issue.
    stuck: bool,
}

impl Hole {
    /// The whole range of released grant `live`, to be granted again as a retry.
    fn retry_of(live: &Live) -> Self {
        Hole {
            start: live.start,
            len: live.len,
            kind: GrantKind::Retry,
            orig: None,
            moves: live.moves,
            patience: live.patience,
            stuck: live.stuck,
        }
    }
}

#[derive(Clone, Debug)]
struct Frag {
    len: u64,
    object_offset: u64,
    block_start: u64,
    /// First byte never granted.
    next: u64,
    /// Bytes confirmed, anywhere in the fragment.
    confirmed: u64,
    /// Ranges to grant again, before `next`.
    holes: Vec<Hole>,
    /// Live grants of this fragment.
    live: u32,
    /// Of `live`, the stuck ones: while there are, its new grants are stuck too (see
    /// [`Scheduler::mark_stuck`]).
    stuck: u32,
    /// Index into `routes[routes_start..routes_start + routes_len]` of the current server.
    route: u8,
    routes_len: u8,
    routes_start: u32,
    /// Bit `i` set: route `i` failed.
    failed_routes: u16,
    lane: Lane,
    /// Consecutive stalls without progress (the RTO backoff exponent).
    backoff: u32,
    /// Bit `2 * route + lane`: that connection stalled on this fragment.
    stalled: u32,
    in_ready: bool,
    in_urgent: bool,
    /// The length is known (always, but for a fragment of unknown length before
    /// [`Scheduler::on_length`]; `len` is then its maximum).
    known: bool,
    /// Lost connections whose ranges of this fragment were asked again of the same server
    /// ([`Scheduler::on_lost`]), and when the last one was reported.
    lost_retries: u8,
    lost_at: Option<Instant>,
}

impl Frag {
    fn has_work(&self) -> bool {
        // Before its length is known a fragment takes its first grant only.
        !self.holes.is_empty() || (self.next < self.len && (self.known || self.next == 0))
    }
    fn holes_len(&self) -> u64 {
        self.holes.iter().map(|h| h.len).sum()
    }
}

/// What the hedges decided since a receiver last looked ([`Scheduler::take_hedge_verdicts`]):
/// the timeout multipliers they were issued under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HedgeVerdicts {
    /// The largest multiplier under which a hedge was spurious (its original ended first).
    pub(crate) spurious: Option<u32>,
    /// The smallest multiplier under which a hedge won.
    pub(crate) won: Option<u32>,
}

#[derive(Clone, Debug)]
struct Live {
    frag: u32,
    /// Offset of the grant inside its fragment.
    start: u64,
    route: u8,
    server: u32,
    lane: Lane,
    len: u64,
    received: u64,
    /// Bytes received since its last progress (below [`MIN_PROGRESS_BYTES`]).
    unmarked: u64,
    issued_at: Instant,
    last_progress: Instant,
    timeout: Duration,
    /// The port's timeout multiplier ([`Gate::timeout_scale`]) its stall timer was armed
    /// with: a hedge's verdict (won or spurious) is about that multiplier.
    scale: u32,
    /// Issued on an idle connection: its first byte is an RTT sample.
    clean: bool,
    /// When its first byte can be expected at the earliest: the bytes already outstanding on
    /// the port ahead of it, at the port's rate ([`Gate::ahead`]). Stalls count from here.
    expected: Instant,
    /// The stalled grant this one replaces (a hedge).
    replaces: Option<GrantId>,
    /// Since when it has been stalled with its hedges denied: the point its first such
    /// stall counted from. Cleared by progress.
    stalled_since: Option<Instant>,
    /// Moves by the time bound (`Gate::escalate_within`) behind this grant's range since it
    /// last made progress: at [`MAX_TIMED_MOVES`] its next move waits for the stall count.
    moves: u8,
    /// How long after its issue the stall count may move it at the earliest: twice the
    /// wait of the grant whose range it took over by a move without progress since (zero
    /// after progress). See [`Scheduler::escalate`].
    patience: Duration,
    /// Since when it has been late, without progress for [`Gate::late_after`] past its
    /// expected arrival: its remaining bytes are in [`Scheduler::late_bytes`], and a first
    /// byte after that point is a repaired loss whose RTT sample is clamped to it (see "Late
    /// grants leave the budget"). Cleared by progress.
    late_at: Option<Instant>,
    /// Stuck: outstanding when the port went silent ([`Scheduler::mark_stuck`]), or taking
    /// over the range of a grant that was, and no byte of it arrived since. Its remaining
    /// bytes are in [`Scheduler::stuck_bytes`] and not in [`Scheduler::late_bytes`].
    stuck: bool,
    /// Held by its server's store: issued to a server whose answers came late lately, no
    /// byte of it yet, and before its `expected` first byte. Its remaining bytes are in
    /// [`Scheduler::held_bytes`].
    held: bool,
    /// The hold its server's store was expected to take at its issue, where that was
    /// [`crate::receiver::STORE_HOLD`] or more (zero elsewhere): what a re-request of its
    /// range would wait again.
    hold: Duration,
}

impl Live {
    /// Issued to a server whose store holds its answers [`crate::receiver::STORE_HOLD`] or
    /// more (held at its issue, whether or not still): its stalls are the store's jitter
    /// sooner than the port's loss, so they are not in [`Scheduler::port_stalls`].
    fn store(&self) -> bool {
        self.hold > Duration::ZERO
    }
}

/// How long live grant `live` may go without progress before it counts as stalled: its
/// timeout, and for a grant to a slow store at least the lesser of that store's hold and
/// [`STORE_STALL_WAIT`] (see *A re-request waits in the store again* in the module docs).
/// Other grants' hold is zero, so the one formula gives them their timeout.
fn stall_timeout(live: &Live) -> Duration {
    live.timeout.max(live.hold.min(STORE_STALL_WAIT))
}

fn conn_index(server: u32, lane: Lane) -> usize {
    server as usize * 2 + usize::from(lane == Lane::Spare)
}

#[derive(Clone, Debug, Default)]
struct Slot {
    generation: u32,
    live: Option<Live>,
}

/// Outcome of a finished read.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Complete,
    Failed(ReadError),
}

/// Which queue a fragment waits in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queue {
    /// Fragments with holes to re-request.
    Urgent,
    /// Started fragments that can take another grant.
    Ready,
}

/// The fan-in read state machine. See the [module docs](self).
///
/// ```
/// use std::time::Instant;
/// use incast_core::{Action, Delivery, Policy, Scheduler, ServerId, Stripe};
///
/// let servers: Vec<ServerId> = (0..4).map(ServerId).collect();
/// let stripe = Stripe::fixed_block("blk", &servers, 100_000)?;
/// let mut sched = Scheduler::new(&stripe, &Policy::default(), 42);
/// let mut block = vec![0u8; 100_000];
/// let now = Instant::now();
/// while !sched.is_finished() {
///     // A perfect transport: every request is answered at once with the right bytes.
///     while let Some(action) = sched.poll_action(now) {
///         if let Action::Request(g) = action {
///             let data = vec![g.server.0 as u8; g.len as usize];
///             if let Delivery::Write { block_offset } = sched.on_bytes(now, g.id, data.len() as u64)? {
///                 block[block_offset as usize..][..data.len()].copy_from_slice(&data);
///             }
///             sched.on_done(now, g.id)?;
///         }
///     }
/// }
/// assert!(sched.is_complete());
/// assert_eq!(block[0], 0);
/// assert_eq!(block[99_999], 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Scheduler {
    // Fixed at construction.
    frags: Vec<Frag>,
    routes: Vec<u32>,
    servers: Vec<ServerId>,
    block_len: u64,
    max_senders: u32,
    depth: u32,
    budget: u64,
    max_grant: u64,
    stagger: Stagger,
    adaptation: Adaptation,
    hedging: bool,
    /// Chunked grants (not whole fragments): a gate may enlarge them.
    chunked: bool,
    timers_on: bool,
    hedge_budget: u64,

    // Dynamic.
    budget_eff: u64,
    outstanding: u64,
    completed: u64,
    server_live: Vec<u32>,
    /// Held live grants per server (see [`Scheduler::expect_by`]).
    server_held: Vec<u32>,
    /// Servers whose live grants are all held: waiting on their stores, not sending.
    held_servers: u32,
    /// Live grants per connection, `server * 2 + lane`.
    conn_live: Vec<u32>,
    /// Last byte received on each connection, `server * 2 + lane`.
    conn_progress: Vec<Option<Instant>>,
    live_servers: u32,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    live_grants: u32,
    urgent: VecDeque<u32>,
    ready: VecDeque<u32>,
    cursor: u32,
    next_start: Option<Instant>,
    timers: BinaryHeap<Reverse<(Instant, GrantId)>>,
    cancels: VecDeque<Action>,
    outcome: Option<Outcome>,
    rtt: RttEstimator,
    rng: SplitMix64,
    last_decrease: Option<Instant>,
    stats: SchedulerStats,
    /// Hedged originals whose race is undecided (see [`SchedulerStats::hedges_won`]), with
    /// the timeout multiplier their stall timer had.
    open_hedges: HashMap<GrantId, u32>,
    /// Of the hedges decided since [`Scheduler::take_hedge_verdicts`] last looked: the
    /// largest multiplier under which one was spurious, the smallest under which one won.
    verdicts: HedgeVerdicts,
    /// The last clean first-byte time, for a client-wide receiver's queueing-delay signal,
    /// and whether it was clamped to the moment its grant went late.
    last_sample: Option<(Duration, bool)>,
    /// The last [`Gate::late_after`] a receiver gave.
    late_after: Option<Duration>,
    /// Remaining bytes of the late grants that are not stuck.
    late_bytes: u64,
    /// Remaining bytes of the stuck grants.
    stuck_bytes: u64,
    /// Remaining bytes of the held grants (see [`Scheduler::expect_by`]).
    held_bytes: u64,
    /// Bytes whose hold ended at their first byte or expected time: released by their
    /// stores into the port, over the scheduler's life ([`Scheduler::released_bytes`]).
    released_bytes: u64,
    /// Stalls of grants that were not stuck nor waiting on a slow store: the ones a
    /// receiver reads as its port's.
    port_stalls: u64,
    /// Stalls of grants to slow stores (see [`Scheduler::store_stalls`]).
    store_stalls: u64,
}

impl Scheduler {
    /// A scheduler for one read of `stripe` under `policy`. `seed` drives the timeout jitter
    /// and the random stagger; give each read its own (for example a counter mixed with the
    /// process id) so that concurrent reads do not hedge in lockstep.
    pub fn new(stripe: &Stripe, policy: &Policy, seed: u64) -> Self {
        Self::with_rtt(stripe, policy, seed, RttEstimator::new(policy.rto()))
    }

    /// Like [`Scheduler::new`], starting from an RTT estimate carried over from earlier reads
    /// of the same servers (see [`Scheduler::rtt`]); the policy's RTO bounds apply. A read
    /// that starts from scratch times its first grants with the initial RTO and then with an
    /// estimate built from a few empty-queue samples, which is too short once the budget's
    /// worth of bytes queues at the bottleneck: on the testbed that hedged most small blocks.
    pub fn with_rtt(stripe: &Stripe, policy: &Policy, seed: u64, rtt: RttEstimator) -> Self {
        let mut server_index: HashMap<ServerId, u32> = HashMap::new();
        let mut servers = Vec::new();
        let mut index_of = |s: ServerId| {
            *server_index.entry(s).or_insert_with(|| {
                servers.push(s);
                (servers.len() - 1) as u32
            })
        };
        let mut routes = Vec::with_capacity(stripe.len());
        let mut frags = Vec::with_capacity(stripe.len());
        for (i, f) in stripe.fragments().iter().enumerate() {
            let routes_start = routes.len() as u32;
            routes.push(index_of(f.server()));
            routes.extend(f.replicas().iter().map(|r| index_of(*r)));
            frags.push(Frag {
                len: f.len(),
                object_offset: f.offset(),
                block_start: stripe.block_range(i).start,
                next: 0,
                confirmed: 0,
                holes: Vec::new(),
                live: 0,
                stuck: 0,
                route: 0,
                routes_len: (1 + f.replicas().len()) as u8,
                routes_start,
                failed_routes: 0,
                lane: Lane::Primary,
                backoff: 0,
                stalled: 0,
                in_ready: false,
                in_urgent: false,
                known: f.known_len().is_some() || f.is_empty(),
                lost_retries: 0,
                lost_at: None,
            });
        }
        let block_len = stripe.block_len();
        let hedging = !matches!(policy.hedging(), Hedging::Off);
        let mut s = Self {
            routes,
            block_len,
            max_senders: policy.max_senders(),
            depth: policy.pipeline_depth(),
            budget: policy.inflight_budget(),
            max_grant: policy.max_grant_bytes(),
            stagger: policy.stagger(),
            adaptation: policy.adaptation(),
            hedging,
            chunked: matches!(policy.grant_size(), crate::policy::GrantSize::Chunk { .. }),
            timers_on: hedging || policy.adaptation() != Adaptation::Static,
            hedge_budget: policy.hedge_budget(block_len),
            budget_eff: policy.inflight_budget(),
            outstanding: 0,
            completed: 0,
            server_live: vec![0; servers.len()],
            server_held: vec![0; servers.len()],
            held_servers: 0,
            conn_live: vec![0; servers.len() * 2],
            conn_progress: vec![None; servers.len() * 2],
            servers,
            live_servers: 0,
            slots: Vec::new(),
            free_slots: Vec::new(),
            live_grants: 0,
            urgent: VecDeque::new(),
            ready: VecDeque::new(),
            cursor: 0,
            next_start: None,
            timers: BinaryHeap::new(),
            cancels: VecDeque::new(),
            outcome: None,
            rtt: rtt.with_bounds(policy.rto()),
            rng: SplitMix64::new(seed),
            last_decrease: None,
            stats: SchedulerStats::default(),
            open_hedges: HashMap::new(),
            verdicts: HedgeVerdicts::default(),
            last_sample: None,
            late_after: None,
            late_bytes: 0,
            stuck_bytes: 0,
            held_bytes: 0,
            released_bytes: 0,
            port_stalls: 0,
            store_stalls: 0,
            frags,
        };
        s.skip_empty();
        if s.block_len == 0 {
            s.outcome = Some(Outcome::Complete);
        }
        s.debug_check();
        s
    }

    // ----- outputs -----

    /// The next thing the transport should do, or `None` until an event or a timeout.
    /// Cancels come first; after the read has finished only cancels are returned.
    pub fn poll_action(&mut self, now: Instant) -> Option<Action> {
        if let Some(c) = self.cancels.pop_front() {
            return Some(c);
        }
        match self.poll_gated(now, &Gate::OPEN) {
            Polled::Action(a) => Some(a),
            Polled::Blocked | Polled::Idle => None,
        }
    }

    /// [`Scheduler::poll_action`] under a client-wide receiver's limits.
    pub(crate) fn poll_gated(&mut self, now: Instant, gate: &Gate) -> Polled {
        self.late_after = gate.late_after;
        if let Some(c) = self.cancels.pop_front() {
            return Polled::Action(c);
        }
        if self.outcome.is_some() {
            return Polled::Idle;
        }
        match self.next_grant(now, gate) {
            Ok(g) => {
                self.debug_check();
                Polled::Action(Action::Request(g))
            }
            Err(Stop::Idle) => Polled::Idle,
            Err(Stop::Gate) => Polled::Blocked,
        }
    }

    /// The next cancel, if any (nothing else).
    pub(crate) fn poll_cancel(&mut self) -> Option<Action> {
        self.cancels.pop_front()
    }

    /// Whether a cancel is waiting to be polled.
    pub(crate) fn has_cancels(&self) -> bool {
        !self.cancels.is_empty()
    }

    /// Whether a range waits to be re-requested (a hedge or a retry).
    pub(crate) fn has_urgent(&self) -> bool {
        self.outcome.is_none() && self.queue_head(Queue::Urgent).is_some()
    }

    /// The earliest instant at which [`Scheduler::handle_timeout`] or
    /// [`Scheduler::poll_action`] has something to do without any other event, if any.
    ///
    /// A grant's timer is its stall deadline as of the last event: bytes that arrived since
    /// it was set move it (a grant is stalled only after its timeout with no progress). So a
    /// caller that sleeps until this instant wakes when a grant can actually have stalled,
    /// not once per timeout while its bytes flow. Measured (2-core VM, loopback, 16
    /// concurrent reads of 256 KiB from one server): with the timers left at their first due
    /// time, a run of about 16,000 reads took 5,500 more timer interrupts than `naive`'s and
    /// `default` read 0.83-0.96x of `naive`'s goodput (median 0.92, 12 runs); moved,
    /// 0.92-1.01x (8 runs) (docs/measurements.md, eleventh session).
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        if self.outcome.is_some() {
            return None;
        }
        // Ended grants' timers are dropped, and a timer its grant's progress has moved is
        // moved too: `handle_timeout` would only push it back at its due time, and a caller
        // that sleeps until a stale due time wakes for nothing (on the port, a timer interrupt
        // and a wake-up of the read per round trip while bytes flow).
        while let Some(&Reverse((due, id))) = self.timers.peek() {
            let Some(live) = self.live(id) else {
                self.timers.pop();
                continue;
            };
            let deadline = self.next_due(live);
            if deadline <= due {
                break;
            }
            self.timers.pop();
            self.timers.push(Reverse((deadline, id)));
        }
        let timer = self.timers.peek().map(|Reverse((t, _))| *t);
        // The stagger deadline matters only when it is the one thing holding the next start.
        let stagger = match self.next_start {
            Some(t) if self.queue_head(Queue::Urgent).is_none() && self.queue_head(Queue::Ready).is_none() => {
                match self.frags.get(self.cursor as usize) {
                    Some(f) => {
                        let server = self.routes[(f.routes_start + u32::from(f.route)) as usize];
                        self.admits(server, f.len.min(self.max_grant)).then_some(t)
                    }
                    None => None,
                }
            }
            _ => None,
        };
        match (timer, stagger) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    // ----- inputs -----

    /// Fires the grant timers due at `now`: a grant with no progress for its timeout is
    /// hedged (budget permitting) or backed off.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.handle_timeout_gated(now, &Gate::OPEN);
    }

    /// [`Scheduler::handle_timeout`] under a client-wide receiver's hedge budget.
    pub(crate) fn handle_timeout_gated(&mut self, now: Instant, gate: &Gate) {
        // Hedges of this call draw on one allowance.
        let mut gate = *gate;
        self.late_after = gate.late_after;
        while let Some(&Reverse((due, id))) = self.timers.peek() {
            if due > now || self.outcome.is_some() {
                break;
            }
            self.timers.pop();
            let Some(live) = self.live(id) else { continue };
            if live.held && live.expected <= now {
                self.unhold(id);
            }
            let live = self.live(id).expect("live");
            let deadline = self.stall_deadline(live);
            if deadline > now {
                if self.late_deadline(live).is_some_and(|t| t <= now) {
                    let live = self.slots[id.slot()].live.as_mut().expect("live");
                    live.late_at = Some(now);
                    if !live.stuck {
                        self.late_bytes += live.len - live.received;
                    }
                    self.stats.late_grants += 1;
                }
                let live = self.live(id).expect("live");
                self.timers.push(Reverse((self.next_due(live), id)));
                continue;
            }
            self.on_stall(now, id, &mut gate);
        }
        self.debug_check();
    }

    /// `n` more bytes of grant `id` arrived (in order). Returns where they go.
    pub fn on_bytes(&mut self, now: Instant, id: GrantId, n: u64) -> Result<Delivery, EventError> {
        let Some(live) = self.slot_of(id)? else {
            self.stats.discarded_bytes += n;
            return Ok(Delivery::Discard);
        };
        if n > live.len - live.received {
            return Err(EventError::TooManyBytes {
                id,
                server: self.servers[live.server as usize],
                len: live.len,
                received: live.received,
                extra: n - (live.len - live.received),
            });
        }
        if !self.frags[live.frag as usize].known {
            return Err(EventError::LengthUnknown {
                id,
                server: self.servers[live.server as usize],
            });
        }
        let at = self.frags[live.frag as usize].block_start + live.start + live.received;
        if n > 0 {
            // Only a grant that had its connection to itself gives a clean RTT sample; one
            // queued behind others measures their transfer too.
            let c = conn_index(live.server, live.lane);
            let first = live.received == 0 && live.clean;
            let sample = now.saturating_duration_since(live.issued_at);
            // Karn: a first byte that came after the grant went late measured the loss's
            // repair (a tail loss probe, an RTO), not the path; clamped, a path that got
            // slower for good still raises the estimate, by up to the late bound a sample.
            let late_bound = live.late_at.map(|t| t.saturating_duration_since(live.issued_at));
            let clamped = late_bound.is_some_and(|b| b < sample);
            let sample = late_bound.map_or(sample, |b| sample.min(b));
            self.unhold(id);
            let live = self.slots[id.slot()].live.as_mut().expect("checked live");
            if std::mem::take(&mut live.stuck) {
                // Alive again: its bytes count against the port (as late ones if it is).
                self.frags[live.frag as usize].stuck -= 1;
                self.stuck_bytes -= live.len - live.received;
                if live.late_at.is_some() {
                    self.late_bytes += live.len - live.received;
                }
            }
            live.received += n;
            live.unmarked += n;
            let f = live.frag as usize;
            self.outstanding -= n;
            if live.late_at.is_some() {
                self.late_bytes -= n;
            }
            if live.unmarked >= MIN_PROGRESS_BYTES || live.received == live.len {
                live.unmarked = 0;
                live.last_progress = now;
                live.stalled_since = None;
                live.moves = 0;
                live.patience = Duration::ZERO;
                if live.late_at.take().is_some() {
                    self.late_bytes -= live.len - live.received;
                }
                self.conn_progress[c] = Some(now);
                self.frags[f].backoff = 0;
            }
            if first {
                self.rtt.on_sample(sample);
                self.last_sample = Some((sample, clamped));
                self.adapt_on_rtt(now, sample);
            }
        }
        self.debug_check();
        Ok(Delivery::Write { block_offset: at })
    }

    /// The server of grant `id` announced that the grant's fragment is `len` bytes long (the
    /// first frame of a response to a fragment of unknown length; see "Lengths learnt on the
    /// way" in the [module docs](self)). The first time, the fragment takes that length: its
    /// grants are cut to it and the rest becomes grantable. Late or cancelled ids are ignored.
    ///
    /// Refused, with the state unchanged: a length over the fragment's maximum
    /// ([`EventError::LengthOverMax`]), one that differs from the length learnt before
    /// ([`EventError::LengthChanged`], also for a fragment whose length the stripe gave).
    pub fn on_length(&mut self, _now: Instant, id: GrantId, len: u64) -> Result<(), EventError> {
        let Some(live) = self.slot_of(id)? else {
            return Ok(());
        };
        let (f, server) = (live.frag as usize, self.servers[live.server as usize]);
        let frag = &self.frags[f];
        if frag.known {
            if len != frag.len {
                return Err(EventError::LengthChanged {
                    id,
                    server,
                    len,
                    known: frag.len,
                });
            }
            return Ok(());
        }
        if len > frag.len {
            return Err(EventError::LengthOverMax {
                id,
                server,
                len,
                max: frag.len,
            });
        }
        let cut = frag.len - len;
        let frag = &mut self.frags[f];
        frag.known = true;
        frag.len = len;
        frag.next = frag.next.min(len);
        for h in &mut frag.holes {
            h.len = h.len.min(len.saturating_sub(h.start));
        }
        frag.holes.retain(|h| h.len > 0);
        self.block_len -= cut;
        // Before this, the fragment had its first range only: at most one live grant, with
        // nothing received (bytes are refused until the length is known). O(slots), once
        // per fragment. A grant cut to nothing has nothing left to wait for: it ends here,
        // and its response's events are then late ones.
        if frag.live > 0 {
            let mut ended = Vec::new();
            for (i, slot) in self.slots.iter_mut().enumerate() {
                let Some(l) = slot.live.as_mut().filter(|l| l.frag as usize == f) else {
                    continue;
                };
                let keep = l.len.min(len.saturating_sub(l.start)).max(l.received);
                let gone = l.len - keep;
                self.outstanding -= gone;
                // The bytes cut leave whichever state's count they were in.
                if l.held {
                    self.held_bytes -= gone;
                }
                if l.stuck {
                    self.stuck_bytes -= gone;
                } else if l.late_at.is_some() {
                    self.late_bytes -= gone;
                }
                l.len = keep;
                if keep == 0 {
                    ended.push(GrantId::new(i as u32, slot.generation));
                }
            }
            for g in ended {
                self.release(g);
            }
        }
        self.requeue(f as u32);
        if self.completed == self.block_len && self.outcome.is_none() {
            self.outcome = Some(Outcome::Complete);
        }
        self.debug_check();
        Ok(())
    }

    /// The server finished grant `id` and its bytes are good (checksums, if any, passed). Its
    /// bytes now count as delivered. Late or cancelled ids are ignored.
    pub fn on_done(&mut self, _now: Instant, id: GrantId) -> Result<(), EventError> {
        let Some(live) = self.slot_of(id)? else {
            // The late, complete end of a hedged original: the hedge was spurious unless its
            // replacement already won.
            if let Some(scale) = self.open_hedges.remove(&id) {
                self.stats.hedges_spurious += 1;
                self.verdicts.spurious = self.verdicts.spurious.max(Some(scale));
            }
            return Ok(());
        };
        if live.received != live.len {
            return Err(EventError::Short {
                id,
                server: self.servers[live.server as usize],
                len: live.len,
                received: live.received,
            });
        }
        let live = self.release(id);
        if let Some(orig) = live.replaces {
            if let Some(scale) = self.open_hedges.remove(&orig) {
                self.stats.hedges_won += 1;
                self.verdicts.won = Some(self.verdicts.won.map_or(scale, |w| w.min(scale)));
            }
        }
        self.frags[live.frag as usize].confirmed += live.len;
        self.completed += live.len;
        self.requeue(live.frag);
        self.adapt_on_done(live.len);
        if self.completed == self.block_len {
            self.outcome = Some(Outcome::Complete);
        }
        self.debug_check();
        Ok(())
    }

    /// Grant `id` failed (connection lost, error frame, bad checksum, refused event). Its
    /// range is retried on a replica, or the read fails naming the server. Late or
    /// cancelled ids are ignored.
    pub fn on_failed(&mut self, _now: Instant, id: GrantId) -> Result<(), EventError> {
        if self.slot_of(id)?.is_none() {
            return Ok(());
        }
        self.stats.failures += 1;
        let live = self.release(id);
        let f = live.frag as usize;
        let frag = &mut self.frags[f];
        frag.failed_routes |= 1 << live.route;
        frag.holes.push(Hole::retry_of(&live));
        if frag.failed_routes & (1 << frag.route) != 0 {
            match next_route(frag, |_| true) {
                Some(route) => {
                    frag.route = route;
                    frag.lane = Lane::Primary;
                }
                None => {
                    let tried = (0..frag.routes_len)
                        .map(|r| self.servers[self.routes[(frag.routes_start + u32::from(r)) as usize] as usize])
                        .collect();
                    let server = self.servers[live.server as usize];
                    self.fail(ReadError::ServerFailed {
                        fragment: f,
                        server,
                        tried,
                    });
                    self.debug_check();
                    return Ok(());
                }
            }
        }
        self.requeue(live.frag);
        self.debug_check();
        Ok(())
    }

    /// Grant `id`'s connection broke before its response ended: the peer reset or closed
    /// it, or a read or write on it failed. Where its fragment has a route not yet failed
    /// (a replica), this is [`Scheduler::on_failed`]. On the fragment's last server the
    /// range is asked of that server again (the transport opens a new connection for it),
    /// at most [`LOST_CONNECTION_RETRIES`] times per fragment, before the read fails naming
    /// the server: one lost connection is not a failed server. Grants reported lost at the
    /// same `now` lost one connection together and share one retry. A server that answers
    /// wrongly (a bad frame, a bad checksum, an `Error` frame) is [`Scheduler::on_failed`].
    /// Late or cancelled ids are ignored.
    ///
    /// Why: on the testbed, with no replica, one connection reset at a 500 Mbit/s port
    /// behind an 8 KiB buffer (`Connection reset by peer` reading a 128 KiB fragment) had
    /// failed a whole 16 MiB read (docs/measurements.md, *Thirty-eighth session*).
    pub fn on_lost(&mut self, now: Instant, id: GrantId) -> Result<(), EventError> {
        let Some(live) = self.slot_of(id)? else {
            return Ok(());
        };
        let (f, route) = (live.frag as usize, live.route);
        let frag = &self.frags[f];
        let same_loss = frag.lost_at == Some(now);
        let elsewhere = next_route(frag, |r| r != route).is_some();
        let failed = frag.failed_routes & (1 << route) != 0;
        if failed || (!same_loss && (elsewhere || frag.lost_retries >= LOST_CONNECTION_RETRIES)) {
            return self.on_failed(now, id);
        }
        let frag = &mut self.frags[f];
        if !same_loss {
            frag.lost_retries += 1;
            frag.lost_at = Some(now);
        }
        self.stats.failures += 1;
        self.stats.lost_retries += 1;
        let live = self.release(id);
        self.frags[f].holes.push(Hole::retry_of(&live));
        self.requeue(live.frag);
        self.debug_check();
        Ok(())
    }

    // ----- state -----

    /// True once the read completed or failed.
    pub fn is_finished(&self) -> bool {
        self.outcome.is_some()
    }
    /// True when every byte of the block has been delivered and confirmed.
    pub fn is_complete(&self) -> bool {
        self.outcome == Some(Outcome::Complete)
    }
    /// Why the read failed, if it did.
    pub fn error(&self) -> Option<&ReadError> {
        match &self.outcome {
            Some(Outcome::Failed(e)) => Some(e),
            _ => None,
        }
    }
    /// Bytes requested and not yet received.
    pub fn outstanding(&self) -> u64 {
        self.outstanding
    }
    /// Servers with grants outstanding.
    pub fn live_senders(&self) -> u32 {
        self.live_servers
    }

    /// Of [`Scheduler::live_senders`], the servers whose live grants are all held by their
    /// stores (see [`Scheduler::expect_by`]): they send nothing until their hold ends.
    pub(crate) fn held_senders(&self) -> u32 {
        self.held_servers
    }

    /// Whether server `s` has live grants, all of them held.
    fn all_held(&self, s: usize) -> bool {
        self.server_live[s] > 0 && self.server_held[s] == self.server_live[s]
    }

    /// Counts server `s` in or out of [`Scheduler::held_senders`] after a change to its
    /// live or held grants; `was`: [`Self::all_held`] before the change.
    fn settle_held(&mut self, s: usize, was: bool) {
        match (was, self.all_held(s)) {
            (false, true) => self.held_servers += 1,
            (true, false) => self.held_servers -= 1,
            _ => {}
        }
    }

    /// Bytes confirmed so far.
    pub fn completed_bytes(&self) -> u64 {
        self.completed
    }
    /// The block length.
    pub fn block_len(&self) -> u64 {
        self.block_len
    }
    /// Bytes of fragment `fragment` confirmed so far (`None`: no such fragment). A fragment
    /// is whole, and its bytes final, once this equals its length: a transport that hands
    /// fragments to the caller as they complete uses it (late and duplicate completions of
    /// hedged grants are not counted twice).
    pub fn fragment_confirmed(&self, fragment: usize) -> Option<u64> {
        self.frags.get(fragment).map(|f| f.confirmed)
    }
    /// The length of fragment `fragment`, once known: the stripe's, or the one its server
    /// announced ([`Scheduler::on_length`]). `None` while unknown, or for no such fragment.
    pub fn fragment_len(&self, fragment: usize) -> Option<u64> {
        self.frags.get(fragment).filter(|f| f.known).map(|f| f.len)
    }
    /// The effective in-flight budget (B, or less under adaptation).
    pub fn effective_budget(&self) -> u64 {
        self.budget_eff
    }
    /// The hedge budget of this read in bytes.
    pub fn hedge_budget(&self) -> u64 {
        self.hedge_budget
    }
    /// The RTT estimator (first-byte latencies of clean grants, carried over from earlier
    /// reads when built with [`Scheduler::with_rtt`]).
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }
    /// Counters.
    pub fn stats(&self) -> SchedulerStats {
        self.stats
    }

    /// Takes the clean first-byte time recorded by the last [`Scheduler::on_bytes`], if it
    /// gave one, and whether it was clamped to the moment its grant went late.
    pub(crate) fn take_sample(&mut self) -> Option<(Duration, bool)> {
        self.last_sample.take()
    }

    /// Grants outstanding.
    /// Remaining bytes of the grants that are late: without progress for the receiver's
    /// [`Gate::late_after`] past their expected arrival (0 for a read scheduled alone).
    pub(crate) fn late_bytes(&self) -> u64 {
        self.late_bytes
    }

    /// Remaining bytes of the stuck grants (see [`Scheduler::mark_stuck`]).
    pub(crate) fn stuck_bytes(&self) -> u64 {
        self.stuck_bytes
    }

    /// Stalls of grants that were not stuck when they stalled, nor issued to a slow store.
    pub(crate) fn port_stalls(&self) -> u64 {
        self.port_stalls
    }

    /// Stalls of grants issued to a slow store (held at their issue, see
    /// [`Scheduler::expect_by`]) that were not stuck: the store's jitter, not the port's.
    pub(crate) fn store_stalls(&self) -> u64 {
        self.store_stalls
    }

    /// Live grant `id`'s first byte cannot come before `at`: its server's store holds it
    /// that long (a client-wide receiver learns it from the servers' holds, see "A slow
    /// store is not a stall" in [`crate::receiver`]). Its stalls and lateness count from
    /// then, as from the bytes ahead of it on the port. No effect on an ended grant or an
    /// earlier `at`; its timer, already armed, is pushed back when it fires.
    ///
    /// With `held`, a grant with no byte yet, and not stuck, is *held* until then: its
    /// remaining bytes are in [`Scheduler::held_bytes`] until its first byte or `at`,
    /// whichever comes first, or until it is marked stuck (the receiver does not count a
    /// port busy with held bytes alone, see "A slow store is not a stall"). With `held`, its
    /// stalls are also counted apart ([`Scheduler::store_stalls`]), held or not by then.
    pub(crate) fn expect_by(&mut self, now: Instant, id: GrantId, at: Instant, held: bool) {
        if self.live(id).is_none() {
            return;
        }
        let live = self.slots[id.slot()].live.as_mut().expect("checked live");
        live.expected = live.expected.max(at);
        if held {
            live.hold = live.hold.max(at.saturating_duration_since(now));
        }
        if held && self.timers_on && at > now && !live.held && !live.stuck && live.received == 0 {
            // A timer of its own ends the hold on time (its stall timer may come later);
            // with it a grant has at most two timer entries (see `compact_timers`).
            live.held = true;
            self.held_bytes += live.len;
            let (s, frag) = (live.server as usize, live.frag);
            self.stats.held_grants += 1;
            self.push_timer(at, id);
            let was = self.all_held(s);
            self.server_held[s] += 1;
            self.settle_held(s, was);
            // Held by its store, the fragment may take a deeper pipeline.
            if self.outcome.is_none() {
                self.requeue(frag);
            }
        }
    }

    /// Remaining bytes of the held grants (see [`Scheduler::expect_by`]).
    pub(crate) fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    /// Bytes of held grants whose hold ended at their first byte or expected time, over the
    /// scheduler's life: what the stores released into the port. Holds that ended otherwise
    /// (the grant cancelled, cut or marked stuck) are not in it.
    pub(crate) fn released_bytes(&self) -> u64 {
        self.released_bytes
    }

    /// Ends grant `id`'s hold, if it is held: its store released it (its first byte came,
    /// or its expected time passed).
    fn unhold(&mut self, id: GrantId) {
        let live = self.slots[id.slot()].live.as_mut().expect("unhold of a live grant");
        if std::mem::take(&mut live.held) {
            self.held_bytes -= live.len - live.received;
            self.released_bytes += live.len - live.received;
            let s = live.server as usize;
            let was = self.all_held(s);
            self.server_held[s] -= 1;
            self.settle_held(s, was);
        }
    }

    /// The server and issue time of live grant `id`, if none of its bytes arrived yet.
    pub(crate) fn first_bytes_of(&self, id: GrantId) -> Option<(ServerId, Instant)> {
        self.live(id)
            .filter(|l| l.received == 0)
            .map(|l| (self.servers[l.server as usize], l.issued_at))
    }

    /// Marks every live grant stuck: a client-wide receiver's port went silent with them
    /// outstanding (see "A silent server" in [`crate::receiver`]). A stuck grant's bytes
    /// leave [`Scheduler::late_bytes`] for [`Scheduler::stuck_bytes`] until a byte of that
    /// grant arrives; a hedge or retry of its range is stuck from its issue; its stalls are
    /// not counted in [`Scheduler::port_stalls`].
    pub(crate) fn mark_stuck(&mut self) {
        for live in self.slots.iter_mut().filter_map(|s| s.live.as_mut()) {
            if !live.stuck {
                live.stuck = true;
                self.frags[live.frag as usize].stuck += 1;
                let rest = live.len - live.received;
                self.stuck_bytes += rest;
                if live.late_at.is_some() {
                    self.late_bytes -= rest;
                }
                if std::mem::take(&mut live.held) {
                    self.held_bytes -= rest;
                }
            }
        }
        // Every grant is held no more.
        self.server_held.fill(0);
        self.held_servers = 0;
        self.debug_check();
    }

    pub(crate) fn live_grants(&self) -> u32 {
        self.live_grants
    }

    /// Checks every invariant of the [module docs](self). O(fragments + live grants).
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.check_counters()?;
        let mut outstanding = 0;
        let mut per_server = vec![0u32; self.servers.len()];
        let mut held_per_server = vec![0u32; self.servers.len()];
        let mut per_conn = vec![0u32; self.servers.len() * 2];
        let mut per_frag = vec![(0u32, 0u64, 0u32); self.frags.len()];
        let mut live = 0;
        let mut late = 0;
        let mut stuck = 0;
        let mut held = 0;
        for slot in &self.slots {
            let Some(l) = &slot.live else { continue };
            live += 1;
            outstanding += l.len - l.received;
            if l.held {
                if l.received > 0 || l.stuck {
                    return violation(format!("fragment {}: a held grant has bytes or is stuck", l.frag));
                }
                held += l.len;
                held_per_server[l.server as usize] += 1;
            }
            if l.stuck {
                stuck += l.len - l.received;
            } else if l.late_at.is_some() {
                late += l.len - l.received;
            }
            per_server[l.server as usize] += 1;
            per_conn[conn_index(l.server, l.lane)] += 1;
            per_frag[l.frag as usize].0 += 1;
            per_frag[l.frag as usize].1 += l.len;
            per_frag[l.frag as usize].2 += u32::from(l.stuck);
            let f = &self.frags[l.frag as usize];
            if l.len == 0 || l.start + l.len > f.next {
                return violation(format!(
                    "fragment {}: live grant {}+{} beyond next {}",
                    l.frag, l.start, l.len, f.next
                ));
            }
            let server = self.routes[(f.routes_start + u32::from(l.route)) as usize];
            if l.route >= f.routes_len || server != l.server {
                return violation(format!("fragment {}: live grant on a route it does not have", l.frag));
            }
        }
        if outstanding != self.outstanding || live != self.live_grants {
            return violation(format!(
                "outstanding {} / live {} recount as {outstanding} / {live}",
                self.outstanding, self.live_grants
            ));
        }
        if late != self.late_bytes {
            return violation(format!("late bytes {} recount as {late}", self.late_bytes));
        }
        if stuck != self.stuck_bytes {
            return violation(format!("stuck bytes {} recount as {stuck}", self.stuck_bytes));
        }
        if held != self.held_bytes {
            return violation(format!("held bytes {} recount as {held}", self.held_bytes));
        }
        if per_server != self.server_live {
            return violation("per-server live counts disagree with the slots".into());
        }
        let all_held = (0..per_server.len())
            .filter(|&s| per_server[s] > 0 && held_per_server[s] == per_server[s])
            .count();
        if held_per_server != self.server_held || all_held != self.held_servers as usize {
            return violation(format!(
                "held servers {} recount as {all_held} (or per-server held counts disagree)",
                self.held_servers
            ));
        }
        if per_conn != self.conn_live {
            return violation("per-connection live counts disagree with the slots".into());
        }
        let count = |q: &VecDeque<u32>, f: u32| q.iter().filter(|&&x| x == f).count();
        let mut completed = 0;
        for (i, f) in self.frags.iter().enumerate() {
            completed += f.confirmed;
            let (live, live_bytes, stuck) = per_frag[i];
            if live != f.live || live > self.depth.saturating_mul(STORE_DEPTH_FACTOR) || stuck != f.stuck {
                return violation(format!(
                    "fragment {i}: {live} live grants ({stuck} stuck), counters {} ({}), depth {}",
                    f.live, f.stuck, self.depth
                ));
            }
            if !f.known && f.confirmed > 0 {
                return violation(format!("fragment {i}: confirmed bytes before its length is known"));
            }
            if f.next > f.len || f.confirmed + live_bytes + f.holes_len() + (f.len - f.next) != f.len {
                return violation(format!(
                    "fragment {i}: confirmed {} + live {live_bytes} + holes {} + ungranted {} != length {}",
                    f.confirmed,
                    f.holes_len(),
                    f.len.saturating_sub(f.next),
                    f.len
                ));
            }
            let idx = i as u32;
            if usize::from(f.in_urgent) != count(&self.urgent, idx)
                || usize::from(f.in_ready) != count(&self.ready, idx)
            {
                return violation(format!("fragment {i}: queue flags disagree with the queues"));
            }
            if idx >= self.cursor && (f.next > 0 || f.live > 0 || f.in_ready || f.in_urgent) {
                return violation(format!("fragment {i} is unstarted but has progress"));
            }
            // The policy's depth: the deeper pipeline of a fragment held by its store is
            // taken when it is polled, not owed (a hold that ends leaves it at D).
            let wants = f.has_work() && f.live < self.depth;
            if self.outcome.is_none() && idx < self.cursor && wants && !(f.in_ready || f.in_urgent) {
                return violation(format!(
                    "fragment {i} could take a grant but is in no queue: it would starve"
                ));
            }
        }
        if completed != self.completed {
            return violation(format!(
                "confirmed bytes sum to {completed}, counter says {}",
                self.completed
            ));
        }
        if self.outcome.is_none() && self.live_grants == 0 {
            let next = self.queue_head(Queue::Urgent).or(self.queue_head(Queue::Ready));
            let next = next.or(((self.cursor as usize) < self.frags.len()).then_some(self.cursor));
            let Some(f) = next else {
                return violation("read not finished but nothing is pending: it would stall".into());
            };
            if self.next_len(&self.frags[f as usize], &Gate::OPEN) > self.budget_eff {
                return violation(format!(
                    "nothing outstanding but fragment {f}'s next grant exceeds the budget"
                ));
            }
        }
        Ok(())
    }

    // ----- internals -----

    fn check_counters(&self) -> Result<(), InvariantViolation> {
        if self.outstanding > self.budget {
            return violation(format!(
                "outstanding {} exceeds budget {}",
                self.outstanding, self.budget
            ));
        }
        if self.live_servers > self.max_senders {
            return violation(format!(
                "{} live senders exceed K = {}",
                self.live_servers, self.max_senders
            ));
        }
        if self.held_bytes > self.outstanding {
            return violation(format!(
                "held {} bytes of {} outstanding",
                self.held_bytes, self.outstanding
            ));
        }
        if self.stats.hedged_bytes > self.hedge_budget {
            return violation(format!(
                "hedged {} bytes, budget {}",
                self.stats.hedged_bytes, self.hedge_budget
            ));
        }
        if self.budget_eff > self.budget || self.budget_eff < self.floor() {
            return violation(format!(
                "effective budget {} outside [{}, {}]",
                self.budget_eff,
                self.floor(),
                self.budget
            ));
        }
        if self.timers.len() > 2 * self.live_grants as usize + 65 {
            return violation(format!(
                "{} timer entries for {} live grants",
                self.timers.len(),
                self.live_grants
            ));
        }
        let complete = self.completed == self.block_len;
        if complete != (self.outcome == Some(Outcome::Complete)) && !matches!(self.outcome, Some(Outcome::Failed(_))) {
            return violation(format!(
                "completed {} of {} but outcome {:?}",
                self.completed, self.block_len, self.outcome
            ));
        }
        Ok(())
    }

    #[inline]
    fn debug_check(&self) {
        #[cfg(debug_assertions)]
        {
            let r = if self.frags.len() <= DEBUG_FULL_CHECK_MAX_FRAGMENTS {
                self.check_invariants()
            } else {
                self.check_counters()
            };
            if let Err(e) = r {
                panic!("{e}");
            }
        }
    }

    fn skip_empty(&mut self) {
        while let Some(f) = self.frags.get(self.cursor as usize) {
            if f.len != 0 {
                break;
            }
            self.cursor += 1;
        }
    }

    fn stagger_gap(&mut self) -> Option<Duration> {
        match self.stagger {
            Stagger::None => None,
            Stagger::Fixed { gap } => Some(gap),
            Stagger::Random { max_gap } => Some(max_gap.mul_f64(self.rng.unit())),
        }
    }

    /// Length of the fragment's next grant: its oldest hole, or the next chunk, which a
    /// gate may enlarge to `gate.grant` or shrink to `gate.max_chunk` (chunked grants only;
    /// the two never both apply: the port enlarges only budgets above four policy chunks and
    /// shrinks only budgets under two). An enlarged chunk that would leave less than a whole
    /// chunk behind takes the rest too: on a fast path the second grant costs a request and
    /// a response for less than the port's grant time (a 256 KiB loopback read was two
    /// grants where `naive` sends one request, and read 0.86-0.90x of its goodput). So an
    /// enlarged grant carries up to two grant times. The policy's own chunk stays a hard
    /// upper bound.
    ///
    /// An enlarged chunk also takes the whole rest of its fragment when that fits
    /// `gate.whole_rest` (half the port's budget: two grants still share it, one transferring
    /// while the next one's request travels). Where the port is fast enough to enlarge,
    /// every request costs CPU that may be the limit: at 10 Gbit/s on the 2-core testbed,
    /// chunks of about 100 KB split 256 KiB fragments into two or three grants, at up to a
    /// quarter more CPU per GiB than `naive`'s one request per fragment, and rows of one
    /// read of 16 servers read 0.83-0.96x of `naive`'s goodput; with a budget of twice the
    /// fragment or more (0.5-0.8 MB in those runs) the fragment is one grant, at about
    /// `naive`'s CPU per GiB (docs/measurements.md, *Thirty-ninth session*). A budget under
    /// twice the fragment still splits it, so a smaller budget keeps its pipelining. (Up to
    /// three chunks instead of half the budget cost 5 Gbit/s rows of 64 KiB fragments 4-9
    /// points: one 64 KiB grant in a budget of 110-160 KB left the port idle between grants.)
    ///
    /// An enlarged grant of at most two policy chunks that does not fit the port's room
    /// shrinks to the room when that holds a policy chunk, instead of waiting for the rest.
    /// Where such grants are enlarged (2 Gbit/s: a 32 KiB fragment is one grant) the budget
    /// is only a few grants, and a grant waiting for room it half fits leaves a large share
    /// of the budget idle: beside 2 bulk flows at 2 Gbit/s the port's bytes outstanding
    /// averaged 55-65% of its budget, and shrinking lifted the reads by about 3 points of
    /// the line rate (docs/measurements.md, *Thirteenth session*). Only there: a budget of
    /// [`crate::receiver::GRANTS_PER_BUDGET`] such grants or more has room for the whole
    /// grant again soon, and the grant waits for it. With many reads at once that budget is
    /// always nearly full, so every grant found room for one policy chunk and went in two:
    /// at 2.5 Gbit/s behind a 128 KiB port, 8-64 servers of 32 KiB fragments and 4-16 reads
    /// (budgets of 80-290 KB), 1.3-1.95 grants per fragment on a machine whose CPU was the
    /// limit (docs/measurements.md, *Sixty-second session*). The policy's chunk
    /// itself never shrinks to the room: at 1 Gbit/s, 16 KiB chunks split into pieces of
    /// 8-16 KiB meant 24% more grants, 1.5 times the switch drops and 1.6 points of the line
    /// rate lost on average over 18 rows (up to 6). Larger grants (a fast path's whole
    /// 256 KiB fragment) wait: there the budget is many grants, and shrinking split loopback
    /// fragments into 1.3-2.0 grants each, where one request is the cheapest.
    ///
    /// A read of one fragment, alone on the port (`gate.lone`), shares the budget with
    /// no one: where the port enlarges its chunks, the fragment takes its whole rest in one
    /// grant when that fits the room, and otherwise half the budget (`max_chunk`), so two
    /// grants are in flight, one transferring while the next one's request travels. The
    /// quarter-budget chunks are there to share the budget among fragments; alone, they only
    /// cost requests. On the 2-core testbed at 10 Gbit/s, one read at a time from one server
    /// took 3-9 grants per 256 KiB fragment and 14-20 per 1 MiB one (the budget, bounded by
    /// the measured rate's bandwidth-delay product, stayed at 100-500 KB), and read
    /// 0.56-0.77x of `naive`'s goodput (docs/measurements.md, *Sixty-first session*).
    /// Bytes in flight stay within the budget either way; only the number of requests
    /// changes, and the size of each server's bursts: so the port does not set `lone`
    /// while its servers report loss (at 2.5 Gbit/s behind a 16 KiB port, with the hosts'
    /// NICs at 10 Gbit/s, half-budget chunks dropped 3.3 times the packets of quarter-budget
    /// ones for the same goodput).
    fn next_len(&self, f: &Frag, gate: &Gate) -> u64 {
        let rest = f.len - f.next;
        let min_chunk = gate.grant;
        let spread = self.spread_chunk(gate);
        let max_chunk = spread.map_or(gate.max_chunk, |c| c.min(gate.max_chunk));
        match f.holes.first() {
            Some(h) => h.len,
            None if self.chunked => {
                let chunk = self.max_grant.max(min_chunk).min(max_chunk.max(1));
                let enlarged = min_chunk > self.max_grant;
                if enlarged && gate.lone && self.frags.len() == 1 && spread.is_none() {
                    let lone = gate.room.min(gate.budget);
                    return if rest <= lone { rest } else { rest.min(max_chunk.max(1)) };
                }
                let len = if enlarged && (rest < chunk.saturating_mul(2) || rest <= max_chunk.min(gate.whole_rest)) {
                    rest
                } else {
                    rest.min(chunk)
                };
                // A budget of many such grants has room again soon: the grant waits for it.
                let few = gate.budget < len.saturating_mul(crate::receiver::GRANTS_PER_BUDGET);
                if few && len > gate.room && len <= self.max_grant.saturating_mul(2) && gate.room >= self.max_grant {
                    gate.room
                } else {
                    len
                }
            }
            None => rest.min(self.max_grant),
        }
    }

    /// The gate's spreading chunk, when it applies to this read: chunked grants whose policy
    /// chunk is larger (the port's budget holds fewer than
    /// [`crate::receiver::SPREAD_GRANTS_PER_BUDGET`] policy chunks).
    fn spread_chunk(&self, gate: &Gate) -> Option<u64> {
        gate.spread_chunk.filter(|&c| self.chunked && c < self.max_grant)
    }

    fn admits(&self, server: u32, len: u64) -> bool {
        (self.server_live[server as usize] > 0 || self.live_servers < self.max_senders)
            && self.outstanding + len <= self.budget_eff
    }

    fn wants_grant(&self, f: u32) -> bool {
        let f = &self.frags[f as usize];
        f.has_work() && f.live < self.depth_of(f)
    }

    /// Fragment `f`'s pipeline depth now: the policy's, or [`STORE_DEPTH_FACTOR`] times it
    /// while its current server's live grants are all held by its store.
    fn depth_of(&self, f: &Frag) -> u32 {
        let server = self.routes[(f.routes_start + u32::from(f.route)) as usize] as usize;
        if self.all_held(server) {
            self.depth.saturating_mul(STORE_DEPTH_FACTOR)
        } else {
            self.depth
        }
    }

    fn queue(&mut self, q: Queue) -> &mut VecDeque<u32> {
        match q {
            Queue::Urgent => &mut self.urgent,
            Queue::Ready => &mut self.ready,
        }
    }

    /// The first queued fragment that wants a grant (entries that no longer do are stale:
    /// they are dropped when popped).
    fn queue_head(&self, q: Queue) -> Option<u32> {
        let queue = match q {
            Queue::Urgent => &self.urgent,
            Queue::Ready => &self.ready,
        };
        queue.iter().copied().find(|&f| self.wants_grant(f))
    }

    fn pop_queue(&mut self, q: Queue) -> Option<u32> {
        let f = self.queue(q).pop_front()?;
        let frag = &mut self.frags[f as usize];
        match q {
            Queue::Urgent => frag.in_urgent = false,
            Queue::Ready => frag.in_ready = false,
        }
        Some(f)
    }

    /// Queues a started fragment that can take another grant: urgent if it has holes.
    fn requeue(&mut self, f: u32) {
        if !self.wants_grant(f) {
            return;
        }
        let frag = &mut self.frags[f as usize];
        if !frag.holes.is_empty() {
            if !frag.in_urgent {
                frag.in_urgent = true;
                self.urgent.push_back(f);
            }
        } else if !frag.in_ready {
            frag.in_ready = true;
            self.ready.push_back(f);
        }
    }

    fn next_grant(&mut self, now: Instant, gate: &Gate) -> Result<Grant, Stop> {
        if let Some(g) = self.next_queued(Queue::Urgent, now, gate)? {
            return Ok(g);
        }
        // Spreading (a lossy port, a small budget): untouched fragments first, each on a
        // connection of its own, while the port takes new senders.
        if gate.new_sender && self.spread_chunk(gate).is_some() {
            match self.start_next(now, gate) {
                Err(Stop::Idle) => {}
                r => return r,
            }
        }
        if let Some(g) = self.next_queued(Queue::Ready, now, gate)? {
            return Ok(g);
        }
        self.start_next(now, gate)
    }

    /// The next grant of queue `q`'s head, if it has one.
    fn next_queued(&mut self, q: Queue, now: Instant, gate: &Gate) -> Result<Option<Grant>, Stop> {
        while let Some(&f) = self.queue(q).front() {
            if !self.wants_grant(f) {
                self.pop_queue(q);
                continue;
            }
            // A head that K or B does not admit blocks everything behind it.
            let g = self.try_issue(f, GrantKind::Next, now, gate)?;
            self.pop_queue(q);
            self.requeue(f);
            return Ok(Some(g));
        }
        Ok(None)
    }

    /// The first grant of the next untouched fragment (stripe order, spaced by the stagger).
    fn start_next(&mut self, now: Instant, gate: &Gate) -> Result<Grant, Stop> {
        let f = self.cursor;
        if f as usize >= self.frags.len() || self.next_start.is_some_and(|t| now < t) {
            return Err(Stop::Idle);
        }
        let g = self.try_issue(f, GrantKind::First, now, gate)?;
        self.cursor += 1;
        self.skip_empty();
        self.next_start = self.stagger_gap().map(|gap| now + gap);
        self.requeue(f);
        Ok(g)
    }

    /// A grant's timeout: the backed-off, jittered RTO times the port's multiplier `scale`,
    /// but never longer than the RTO's upper bound (100 ms by default), unless the unscaled
    /// timeout already is. Spurious hedges raise the multiplier (up to 64); unbounded, it
    /// pushed timeouts past the kernel's 200 ms minimum RTO, where a hedge comes after the
    /// kernel's own retransmission and saves nothing: on the testbed's 16 KiB port one read
    /// in two runs of 12 rows waited out a kernel RTO with its hedge not yet due.
    fn grant_timeout(&mut self, backoff: u32, scale: u32) -> Duration {
        let t = self.rtt.timeout(backoff, self.rng.unit());
        (t * scale.max(1)).min(t.max(self.rtt.bounds().max()))
    }

    fn try_issue(&mut self, f: u32, kind: GrantKind, now: Instant, gate: &Gate) -> Result<Grant, Stop> {
        let frag = &self.frags[f as usize];
        let server = self.routes[(frag.routes_start + u32::from(frag.route)) as usize];
        let len = self.next_len(frag, gate);
        if !self.admits(server, len) {
            return Err(Stop::Idle);
        }
        // A re-request (hedge or retry) replaces bytes the port already admitted: it goes
        // first whatever the port's room now (a stall may just have shrunk the budget).
        let rerequest = !frag.holes.is_empty();
        if !rerequest && (len > gate.room || !(gate.new_sender || self.server_live[server as usize] > 0)) {
            return Err(Stop::Gate);
        }
        let timeout = self.grant_timeout(frag.backoff, gate.timeout_scale);
        let frag = &mut self.frags[f as usize];
        let (start, kind, replaces, moves, patience, stuck) = if frag.holes.is_empty() {
            frag.next += len;
            (frag.next - len, kind, None, 0, Duration::ZERO, false)
        } else {
            let h = frag.holes.remove(0);
            (h.start, h.kind, h.orig, h.moves, h.patience, h.stuck)
        };
        // A server that has sent nothing since the port went silent will not send new bytes
        // sooner: they do not count against the port either.
        let stuck = stuck || frag.stuck > 0;
        frag.live += 1;
        frag.stuck += u32::from(stuck);
        let (route, lane) = (frag.route, frag.lane);
        let object_offset = frag.object_offset + start;
        let block_offset = frag.block_start + start;
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        let entry = &mut self.slots[slot as usize];
        entry.live = Some(Live {
            frag: f,
            start,
            route,
            server,
            lane,
            len,
            received: 0,
            unmarked: 0,
            issued_at: now,
            last_progress: now,
            timeout,
            scale: gate.timeout_scale,
            clean: self.conn_live[conn_index(server, lane)] == 0,
            expected: now + gate.ahead,
            replaces,
            stalled_since: None,
            moves,
            patience,
            late_at: None,
            stuck,
            held: false,
            hold: Duration::ZERO,
        });
        self.conn_live[conn_index(server, lane)] += 1;
        let id = GrantId::new(slot, entry.generation);
        self.outstanding += len;
        if stuck {
            self.stuck_bytes += len;
        }
        self.live_grants += 1;
        if self.server_live[server as usize] == 0 {
            self.live_servers += 1;
        }
        let was = self.all_held(server as usize);
        self.server_live[server as usize] += 1;
        self.settle_held(server as usize, was);
        if self.timers_on {
            // The stall timer counts from the issue; the late bound from the expected arrival.
            let live = self.live(id).expect("just issued");
            let due = self.late_deadline(live).map_or(now + timeout, |t| t.min(now + timeout));
            self.push_timer(due, id);
        }
        let st = &mut self.stats;
        st.grants += 1;
        st.hedges += u64::from(kind == GrantKind::Hedge);
        st.retries += u64::from(kind == GrantKind::Retry);
        st.peak_senders = st.peak_senders.max(self.live_servers);
        st.peak_outstanding = st.peak_outstanding.max(self.outstanding);
        Ok(Grant {
            id,
            fragment: f as usize,
            server: self.servers[server as usize],
            lane,
            object_offset,
            block_offset,
            len,
            kind,
            pace: None,
        })
    }

    /// `Err` for ids never issued, `Ok(None)` for ids of grants that ended.
    fn slot_of(&self, id: GrantId) -> Result<Option<&Live>, EventError> {
        match self.slots.get(id.slot()) {
            Some(s) if s.generation == id.generation() => Ok(s.live.as_ref()),
            Some(s) if s.generation > id.generation() => Ok(None),
            _ => Err(EventError::UnknownGrant { id }),
        }
    }

    /// When live grant `live` counts as stalled: its timeout after its last sign of progress.
    /// A grant queued behind another on the same connection makes progress while the one
    /// ahead of it does (responses on a connection come in order), and none is late before
    /// the bytes granted ahead of it on the port can have arrived (`expected`).
    fn stall_deadline(&self, live: &Live) -> Instant {
        self.progress_base(live) + stall_timeout(live)
    }

    /// The latest of the grant's own progress, its connection's, and its expected arrival.
    fn progress_base(&self, live: &Live) -> Instant {
        match self.conn_progress[conn_index(live.server, live.lane)] {
            Some(p) => p.max(live.last_progress),
            None => live.last_progress,
        }
        .max(live.expected)
    }

    /// When a grant that is not late yet becomes late (`None`: it is, or no grant is late
    /// under the receiver's last gate).
    fn late_deadline(&self, live: &Live) -> Option<Instant> {
        match self.late_after {
            Some(after) if live.late_at.is_none() => Some(self.progress_base(live) + after),
            _ => None,
        }
    }

    /// The grant's next timer: late, then stalled.
    fn next_due(&self, live: &Live) -> Instant {
        let stall = self.stall_deadline(live);
        let due = self.late_deadline(live).map_or(stall, |t| t.min(stall));
        if live.held {
            due.min(live.expected)
        } else {
            due
        }
    }

    fn live(&self, id: GrantId) -> Option<&Live> {
        self.slot_of(id).ok().flatten()
    }

    /// Ends live grant `id` (see `release`) and tells the transport to cancel it.
    fn cancel(&mut self, id: GrantId) -> Live {
        let live = self.release(id);
        self.cancels.push_back(Action::Cancel {
            id,
            server: self.servers[live.server as usize],
            lane: live.lane,
        });
        live
    }

    /// Ends a live grant: frees its slot and releases what it held.
    fn release(&mut self, id: GrantId) -> Live {
        let slot = &mut self.slots[id.slot()];
        let live = slot.live.take().expect("release of a live grant");
        slot.generation += 1;
        self.free_slots.push(id.slot() as u32);
        self.frags[live.frag as usize].live -= 1;
        self.outstanding -= live.len - live.received;
        let was = self.all_held(live.server as usize);
        if live.held {
            self.held_bytes -= live.len - live.received;
            self.server_held[live.server as usize] -= 1;
        }
        if live.stuck {
            self.frags[live.frag as usize].stuck -= 1;
            self.stuck_bytes -= live.len - live.received;
        } else if live.late_at.is_some() {
            self.late_bytes -= live.len - live.received;
        }
        self.live_grants -= 1;
        self.conn_live[conn_index(live.server, live.lane)] -= 1;
        let s = &mut self.server_live[live.server as usize];
        *s -= 1;
        if *s == 0 {
            self.live_servers -= 1;
        }
        self.settle_held(live.server as usize, was);
        self.compact_timers();
        live
    }

    fn on_stall(&mut self, now: Instant, id: GrantId, gate: &mut Gate) {
        self.stats.stalls += 1;
        self.adapt_on_stall(now);
        let live = self.live(id).expect("stalled grant is live");
        let (port, store) = (!live.stuck && !live.store(), !live.stuck && live.store());
        self.port_stalls += u64::from(port);
        self.store_stalls += u64::from(store);
        let live = self.live(id).expect("stalled grant is live");
        let (f, len, moves) = (live.frag as usize, live.len, live.moves);
        // The earliest the stall count may move it (see `escalate`).
        let patient_at = live.issued_at + live.patience;
        // Where the first stall with hedges denied counted from (see `escalate_within`).
        let since = live.stalled_since.unwrap_or_else(|| {
            let deadline = self.stall_deadline(live);
            deadline.checked_sub(stall_timeout(live)).unwrap_or(deadline)
        });
        self.frags[f].backoff += 1;
        if !(self.hedging && self.stats.hedged_bytes + len <= self.hedge_budget && len <= gate.hedge_room) {
            let mut timeout = self.grant_timeout(self.frags[f].backoff, gate.timeout_scale);
            if self.hedging {
                self.stats.hedges_denied += 1;
                let waited = now.saturating_duration_since(since);
                // The time bound moves a range at most MAX_TIMED_MOVES times until it
                // makes progress again; after that, a server slower than the bound still
                // gets to answer (the stall count's moves back off, see `escalate`).
                let within = match gate.escalate_within {
                    Some(w) if moves < MAX_TIMED_MOVES => w,
                    _ => Duration::MAX,
                };
                let counted = self.frags[f].backoff >= ESCALATE_AFTER_STALLS;
                if (counted && now >= patient_at) || waited >= within {
                    self.escalate(id, now, waited >= within);
                    return;
                }
                if counted {
                    // Counted out, but moved without progress not long ago: the next look
                    // comes when its patience ends.
                    timeout = timeout.max(patient_at - now);
                }
                // The next look comes no later than the time bound.
                timeout = timeout.min(within - waited);
                self.slots[id.slot()].live.as_mut().expect("live").stalled_since = Some(since);
            }
            let live = self.slots[id.slot()].live.as_mut().expect("live");
            live.last_progress = now;
            live.timeout = timeout;
            live.scale = gate.timeout_scale;
            self.push_timer(now + timeout, id);
            return;
        }
        let live = self.cancel(id);
        self.stats.hedged_bytes += len;
        gate.hedge_room -= len;
        self.frags[f].stalled |= stall_bit(live.route, live.lane);
        // Move the fragment off the connection that stalled (once, not once per stalled
        // grant behind it): to a connection that has not stalled on it, a replica first (if
        // K admits it), then the other lane of the same server. When every connection has
        // stalled, forget the old stalls and just switch lanes.
        let frag = &self.frags[f];
        if (live.route, live.lane) == (frag.route, frag.lane) {
            let cur = frag.route;
            let admits = |r: u8| {
                let s = self.routes[(frag.routes_start + u32::from(r)) as usize];
                r == cur || self.server_live[s as usize] > 0 || self.live_servers < self.max_senders
            };
            let fresh = |r: u8, l: Lane| frag.stalled & stall_bit(r, l) == 0;
            let pick = (1..=frag.routes_len)
                .map(|k| (cur + k) % frag.routes_len)
                .filter(|&r| frag.failed_routes & (1 << r) == 0 && admits(r))
                .flat_map(|r| [(r, Lane::Primary), (r, Lane::Spare)])
                .find(|&(r, l)| fresh(r, l));
            let frag = &mut self.frags[f];
            match pick {
                Some((r, l)) => (frag.route, frag.lane) = (r, l),
                None => {
                    frag.stalled = stall_bit(live.route, live.lane);
                    frag.lane = frag.lane.other();
                }
            }
        }
        self.frags[f].holes.push(Hole {
            start: live.start,
            len,
            kind: GrantKind::Hedge,
            orig: Some(id),
            moves: live.moves,
            patience: live.patience,
            stuck: live.stuck,
        });
        self.open_hedges.insert(id, live.scale);
        self.move_followers(f, &live);
        self.requeue(f as u32);
    }

    /// Moves the grants of fragment `f` queued behind grant `head`, just hedged or moved, on
    /// its connection that have no byte yet (responses on a connection come in order: they
    /// wait for the same lost bytes) along with it, as retries: no hedge budget spent on
    /// them, no bound of their own waited (see *Stalls are per connection* in the module
    /// docs).
    fn move_followers(&mut self, f: usize, head: &Live) {
        let mut followers: Vec<(u64, GrantId)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let l = s.live.as_ref()?;
                let behind =
                    l.frag as usize == f && (l.route, l.lane) == (head.route, head.lane) && l.start > head.start;
                (behind && l.received == 0 && !l.stuck).then(|| (l.start, GrantId::new(i as u32, s.generation)))
            })
            .collect();
        followers.sort_unstable();
        for (_, id) in followers {
            let live = self.cancel(id);
            self.frags[f].holes.push(Hole::retry_of(&live));
        }
    }

    /// Moves stalled grant `id` (the transport is told to cancel it; its range is
    /// re-requested first, as a retry) to the fragment's next replica that has not failed,
    /// or, without one, to the other lane of the same server: a new connection. If the
    /// fragment already left the grant's route, the grant follows the fragment.
    ///
    /// Why the other lane: without a replica, a stalled grant whose read has spent its hedge
    /// budget used to wait for its connection, that is for the server kernel's RTO, which
    /// doubles on every lost retransmission (200 ms, 400 ms, 800 ms, ...), and beside bulk
    /// flows that keep the port's buffer full retransmissions are lost again and again. On
    /// the testbed (2 Gbit/s, 32 KiB port, 2 bulk flows) warm-up reads twice waited their
    /// whole 30 s deadline on stalled grants (once on 12 servers, once on one); whatever
    /// stalled them, with the hedges spent nothing but the deadline ended the wait. A new
    /// connection starts without that backoff. It is a move, not a copy: the cancelled
    /// grant's bytes leave the port's budget, and no hedge budget is spent.
    ///
    /// **Moves back off.** A range moved by the stall count without progress since is not
    /// moved again by it before the grant that took it over has waited twice as long as the
    /// moved one had (its `patience`, counted from its issue); progress ends that. A move
    /// cancels the request, and a server that answers every request late (a slow store,
    /// not a lost tail) starts its wait again on the new one: the stall count, started
    /// afresh by each move, moved such a range every 255 ms or less, so a server slower
    /// than that never answered and the read waited for its deadline (`incast-bench sweep
    /// --loopback --server-delay 800ms`: reads of 4 and 16 servers failed at their 10 s
    /// deadline; `naive` took 802 ms). Doubling,
    /// a server that takes `T` to answer is answered after at most about `3T` plus the
    /// first move's wait, and a lost tail, repaired by the first move, pays nothing. The
    /// time bound of a lossy port keeps its own count ([`MAX_TIMED_MOVES`]).
    ///
    /// The grants queued behind it on its connection with no byte yet go along, where the
    /// fragment moves (`move_followers`).
    fn escalate(&mut self, id: GrantId, now: Instant, timed: bool) {
        let live = self.live(id).expect("stalled grant is live");
        let frag = &self.frags[live.frag as usize];
        // A grant left behind on a route its fragment already moved off (a hedge of the grant
        // ahead of it moved the fragment) follows the fragment. Waiting for it to "end with its
        // connection" waited until the read's deadline when that server kept the connection
        // open and sent nothing, or one byte at a time.
        let next = if live.route != frag.route {
            None
        } else {
            Some(match next_route(frag, |r| r != frag.route) {
                Some(next) => (next, Lane::Primary),
                None => (frag.route, live.lane.other()),
            })
        };
        let live = self.cancel(id);
        self.stats.escalations += 1;
        // Moved, not marked failed: the server may only be slow, and stays a route to return
        // to if the replica fails.
        let frag = &mut self.frags[live.frag as usize];
        if let Some((route, lane)) = next {
            (frag.route, frag.lane) = (route, lane);
        }
        frag.backoff = 0;
        frag.holes.push(Hole {
            start: live.start,
            len: live.len,
            kind: GrantKind::Retry,
            orig: None,
            moves: live.moves.saturating_add(u8::from(timed)),
            patience: if timed {
                live.patience
            } else {
                now.saturating_duration_since(live.issued_at)
                    .saturating_mul(2)
                    .min(MAX_MOVE_PATIENCE)
            },
            stuck: live.stuck,
        });
        if next.is_some() {
            self.move_followers(live.frag as usize, &live);
        }
        self.requeue(live.frag);
    }

    fn push_timer(&mut self, at: Instant, id: GrantId) {
        self.compact_timers();
        self.timers.push(Reverse((at, id)));
    }

    /// Timer entries of grants that ended are dropped lazily; once they outnumber the live
    /// ones the heap is rebuilt with live entries only (one per live grant). A rebuild of a
    /// heap of h entries removes more than h / 2 of them, so the cost is amortized O(1) per
    /// entry and the heap stays within `2 * live + 64` (65 during a push).
    fn compact_timers(&mut self) {
        if self.timers.len() > 2 * self.live_grants as usize + 64 {
            let slots = &self.slots;
            self.timers.retain(|Reverse((_, id))| {
                slots
                    .get(id.slot())
                    .is_some_and(|s| s.generation == id.generation() && s.live.is_some())
            });
        }
    }

    fn fail(&mut self, err: ReadError) {
        for i in 0..self.slots.len() {
            if self.slots[i].live.is_some() {
                let id = GrantId::new(i as u32, self.slots[i].generation);
                let live = self.cancel(id);
                // Never granted again (the read is over), but accounted for.
                self.frags[live.frag as usize].holes.push(Hole::retry_of(&live));
            }
        }
        while self.pop_queue(Queue::Urgent).is_some() {}
        while self.pop_queue(Queue::Ready).is_some() {}
        self.timers.clear();
        self.open_hedges.clear();
        self.outcome = Some(Outcome::Failed(err));
    }

    /// The hedges decided since the last call, by the timeout multiplier they were issued
    /// under (see "Timeouts learn from spurious hedges" in [`crate::receiver`]).
    pub(crate) fn take_hedge_verdicts(&mut self) -> HedgeVerdicts {
        std::mem::take(&mut self.verdicts)
    }

    fn floor(&self) -> u64 {
        self.max_grant.min(self.budget)
    }

    fn adapt_on_stall(&mut self, now: Instant) {
        if self.adaptation != Adaptation::Static {
            self.decrease_budget(now, self.budget_eff / 2);
        }
    }

    fn adapt_on_rtt(&mut self, now: Instant, sample: Duration) {
        let Adaptation::Delay { target } = self.adaptation else {
            return;
        };
        if self.rtt.min_rtt().is_some_and(|min| sample > min + target) {
            self.decrease_budget(now, self.budget_eff - self.budget_eff / 8);
        }
    }

    /// Multiplicative decrease to `to` (never below one grant), at most once per smoothed
    /// RTT: the stalls and late samples of one congestion event arrive together.
    fn decrease_budget(&mut self, now: Instant, to: u64) {
        let spacing = self.rtt.srtt().unwrap_or_else(|| self.rtt.rto());
        if self.last_decrease.is_some_and(|t| now < t + spacing) {
            return;
        }
        self.budget_eff = to.max(self.floor());
        self.last_decrease = Some(now);
    }

    fn adapt_on_done(&mut self, len: u64) {
        if self.adaptation == Adaptation::Static || self.budget_eff >= self.budget {
            return;
        }
        let step = (u128::from(self.max_grant) * u128::from(len) / u128::from(self.budget_eff)).max(1);
        self.budget_eff = (u128::from(self.budget_eff) + step).min(u128::from(self.budget)) as u64;
    }
}

fn stall_bit(route: u8, lane: Lane) -> u32 {
    1 << (2 * u32::from(route) + u32::from(lane == Lane::Spare))
}

/// The first route after the current one (cyclically, current last) that has not failed and
/// passes `ok`.
fn next_route(frag: &Frag, ok: impl Fn(u8) -> bool) -> Option<u8> {
    (1..=frag.routes_len)
        .map(|k| (frag.route + k) % frag.routes_len)
        .find(|&r| frag.failed_routes & (1 << r) == 0 && ok(r))
}

fn violation<T>(msg: String) -> Result<T, InvariantViolation> {
    Err(InvariantViolation(msg))
}

#[cfg(test)]
mod tests;
