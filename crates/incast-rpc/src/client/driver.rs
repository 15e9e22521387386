//! One read over its sockets (and QUIC streams): the [`Driver`] a `fan_in_read` runs.

mod drain;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures_util::stream::{FuturesUnordered, StreamExt};
use incast_core::{Action, Delivery, GrantId, GrantKind, HostTime, Lane, ServerId, Stripe};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::dest::Dest;
use super::{Client, FanInError, FragmentReport, LateCounters, ReadReport, Transport};
use crate::port::ReadSched;
use crate::timer::HrTimer;
use crate::tune::{rearm_quickack, SocketTuning, TuningReport};
use crate::wire::{self, ErrorCode, Frame, Header, Kind, StartCounters, TcpCounters, WireError, HEADER_LEN};

#[cfg(feature = "tls")]
use crate::tls::Session;

/// Without the `tls` feature no connection has a TLS session.
#[cfg(not(feature = "tls"))]
#[derive(Debug)]
enum Session {}

#[cfg(not(feature = "tls"))]
impl Session {
    fn try_read(&mut self, _: &TcpStream, _: &mut [u8]) -> io::Result<usize> {
        match *self {}
    }
    fn queue(&mut self, _: &[u8]) -> io::Result<()> {
        match *self {}
    }
    fn try_flush(&mut self, _: &TcpStream) -> io::Result<()> {
        match *self {}
    }
    fn is_idle(&self) -> bool {
        match *self {}
    }
}

/// Reads what `stream` has, through its TLS session if it has one.
fn read_some(stream: &TcpStream, tls: &mut Option<Session>, buf: &mut [u8]) -> io::Result<usize> {
    match tls {
        Some(s) => s.try_read(stream, buf),
        None => stream.try_read(buf),
    }
}

/// Bytes read per `try_read` into the scratch buffer of a cancelled request.
const SCRATCH: usize = 64 * 1024;
/// The longest wait in the client's socket that a receive timestamp may report (1 s); a
/// longer one is taken for a clock stepped between the kernel's stamp and the read, and
/// dropped.
const HOST_WAIT_LIMIT: Duration = Duration::from_secs(1);
/// Capacity of a read's channel of stream events (QUIC payload batches and ends).
const STREAM_EVENTS: usize = 256;
/// How long a connection that owes only cancelled responses may stay silent, on a port
/// whose servers report loss, before it is reset (150 ms; see [`Driver::reset_quiet`]).
/// Under Linux's minimum RTO (200 ms, counted from the last acknowledgement that moved the
/// server's window, which is no later than the last byte this client read), with 50 ms for
/// a busy client to notice.
pub(crate) const QUIET_RESET_AFTER: Duration = Duration::from_millis(150);

/// What a request running as its own task (a QUIC stream) reports to the read's driver.
#[derive(Debug)]
pub(crate) struct StreamEvent {
    pub(crate) grant: GrantId,
    pub(crate) kind: StreamEventKind,
}

#[derive(Debug)]
#[cfg_attr(not(feature = "quic"), allow(dead_code))]
pub(crate) enum StreamEventKind {
    /// The next payload bytes of the response, in order.
    Data(Vec<bytes::Bytes>),
    /// The response's `End` frame.
    End {
        crc32c: Option<u32>,
        counters: Option<TcpCounters>,
        cancelled: bool,
    },
    /// The size the server announced for an open request (before any data).
    #[cfg_attr(not(feature = "quic"), allow(dead_code))]
    Length(u64),
    /// The server answered with an `Error` frame.
    Refused { code: ErrorCode, message: String },
    /// The request failed; the scheduler may retry or hedge it.
    Failed(String),
    /// The read cannot go on.
    Fatal(FanInError),
}

/// What arrived for one grant when its response ended.
struct Received {
    fragment: usize,
    len: u64,
    received: u64,
    crc: u32,
}

/// A request running as its own task.
#[derive(Debug)]
struct StreamGrant {
    server: ServerId,
    fragment: usize,
    block_offset: u64,
    object_offset: u64,
    len: u64,
    received: u64,
    crc: u32,
    task: tokio::task::AbortHandle,
}

#[derive(Debug)]
struct Inflight {
    req: u64,
    /// `None` once cancelled: the rest of its bytes are drained.
    grant: Option<GrantId>,
    /// The grant it was, once cancelled: if it still ends whole, its hedge was spurious.
    cancelled: Option<GrantId>,
    fragment: usize,
    block_offset: u64,
    object_offset: u64,
    len: u64,
    received: u64,
    crc: u32,
    /// An `OpenRequest`: a `Length` frame comes first (then `sized`).
    open: bool,
    sized: bool,
}

#[derive(Debug)]
enum Rx {
    Header {
        buf: [u8; HEADER_LEN],
        have: usize,
    },
    /// `host`: the hosts' part of the time to the frame's arrival, for a grant's first-byte
    /// sample: the server's hold its header carried ([`Header::hold`]) and the time the
    /// header waited in the client's socket ([`Conn::waited`]).
    Data {
        id: u64,
        left: u32,
        host: HostTime,
    },
    Control {
        header: Header,
        buf: Vec<u8>,
    },
}

impl Rx {
    fn new() -> Self {
        Rx::Header {
            buf: [0; HEADER_LEN],
            have: 0,
        }
    }
}

#[derive(Debug)]
pub(super) struct Conn {
    server: ServerId,
    /// The address it was opened to (a server may move: [`Client::add_server`]).
    addr: SocketAddr,
    lane: Lane,
    stream: Arc<TcpStream>,
    /// The TLS session over `stream`, with a TLS client ([`crate::ClientConfigBuilder`]'s `tls`).
    tls: Option<Session>,
    rx: Rx,
    /// How long the frame being read waited in the socket before the client read its first
    /// bytes, by the kernel's receive timestamp (plaintext TCP; see [`HOST_WAIT_LIMIT`]).
    waited: Option<Duration>,
    /// The store's part of the hold of the response at the front (a `StoreTime` frame: its
    /// request and the time), for that response's first `Data` frame.
    store: Option<(u64, Duration)>,
    /// How long the grants sent when the connection opened waited for it: the client's
    /// time, as `waited` is, which the first response's first-byte time holds (taken by
    /// the connection's first frame).
    opening: Option<Duration>,
    inflight: VecDeque<Inflight>,
    out: Vec<u8>,
    next_req: u64,
    /// The server socket's counters in the last `End` a read saw on this connection.
    counters: Option<TcpCounters>,
    /// Whose responses what the server's socket counted after `counters` belongs to.
    last_end: LastEnd,
    /// The number of the read that holds the connection, or held it last
    /// ([`ReadReport::read`]).
    read: u64,
    broken: bool,
    waiting: bool,
    /// When the connection last made progress: its last bytes read, or the request that
    /// ended an idle spell (see [`Driver::reset_quiet`]).
    quiet_since: Instant,
    /// The runtime whose reactor the socket is registered with: the pool hands it only to
    /// reads on that runtime (a socket of a runtime that shut down never becomes ready).
    pub(super) runtime: tokio::runtime::Id,
}

impl Conn {
    /// Whether the connection has been idle `timeout` or longer at `now` (a pooled
    /// connection's last progress is when it went idle).
    pub(super) fn idle_past(&self, now: Instant, timeout: Duration) -> bool {
        now.saturating_duration_since(self.quiet_since) >= timeout
    }
}

/// Whose responses the counters a server's socket took after a connection's last `End`
/// (its `counters`) belong to, when the next `End` says how many were taken before its
/// response began ([`crate::wire::StartCounters`]): the RTO that repairs a lost tail fires
/// after that tail's `End` was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LastEnd {
    /// No `End` yet on a new connection: what its socket counted before the first response
    /// (the timer of a lost SYN-ACK) is the opening read's, which waited for it.
    Opened,
    /// The last `End` ended a response for this fragment of the read holding the connection.
    Here { fragment: usize },
    /// The connection came from the pool: read `read` held it last, and its responses' tails
    /// (those a drain dropped too) are what was counted since.
    Earlier { read: u64 },
}

/// What one `End` says a response's socket counted, split by whose it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Split {
    /// RTOs and retransmits from the response's start to its `End`: this response's.
    own: (u32, u32),
    /// RTOs and retransmits from the previous `End` to this response's start: the earlier
    /// responses' ([`LastEnd`]).
    earlier: (u32, u32),
}

impl Split {
    /// Splits an `End`'s counters (`counters`, `at_start`) against the last ones seen on the
    /// connection (`last`; `None` on a new connection, whose counters start at 0). Without
    /// `at_start` (a server older than it) everything since `last` is this response's, as it
    /// was before servers sent it. A smaller value counts as no change: a retransmit the
    /// client later reported as a duplicate leaves the count (see
    /// [`TcpInfo::lost_retransmits`](crate::TcpInfo::lost_retransmits)), and a server may lie.
    fn of(counters: Option<TcpCounters>, at_start: Option<StartCounters>, last: Option<TcpCounters>) -> Self {
        let Some(new) = counters else {
            return Self::default();
        };
        let base = last.map_or(StartCounters::default(), |c| StartCounters::of(&c));
        let diff = |to: StartCounters, from: StartCounters| {
            (
                to.rtos.saturating_sub(from.rtos),
                to.retransmits.saturating_sub(from.retransmits),
            )
        };
        let end = StartCounters::of(&new);
        match at_start {
            // A start past the end is impossible for a real socket: trust the end alone.
            Some(start) if start.rtos <= end.rtos && start.retransmits <= end.retransmits => Self {
                own: diff(end, start),
                earlier: diff(start, base),
            },
            _ => Self {
                own: diff(end, base),
                earlier: (0, 0),
            },
        }
    }
}

/// A watched connection became readable (or waiting on it failed).
type Ready = Pin<Box<dyn Future<Output = (usize, io::Result<()>)> + Send>>;
/// An open connection, its TLS session if it has one, and how its socket was tuned.
type Opened = (TcpStream, Option<Session>, TuningReport);
/// A connection being opened: its server, lane and address, and the outcome.
/// A connection being opened: its server, lane and address, the outcome, and when the
/// opening began (the grants that waited for it were issued then).
type Connecting =
    Pin<Box<dyn Future<Output = (ServerId, Lane, SocketAddr, Result<Opened, OpenError>, Instant)> + Send>>;

/// Why a connection could not be opened.
enum OpenError {
    /// The grants waiting for it fail with this cause (and may be retried).
    Failed(String),
    /// The process had no file descriptor left for the socket (`EMFILE`, `ENFILE`): the
    /// opening closes the client's idle connections and tries once more (see
    /// [`Client::close_idle`]), then fails as [`OpenError::Failed`].
    NoDescriptor(String),
    /// The read cannot go on (a refused certificate).
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    Fatal(FanInError),
}

pub(super) struct Driver<'a> {
    client: &'a Client,
    stripe: &'a Stripe,
    pub(super) sched: ReadSched,
    pub(super) dest: Dest<'a>,
    scratch: Vec<u8>,
    conns: Vec<Conn>,
    by_lane: HashMap<(ServerId, Lane), usize>,
    grant_conn: HashMap<GrantId, usize>,
    readable: FuturesUnordered<Ready>,
    /// Connections being opened. The driver goes on meanwhile (timers, other connections):
    /// awaiting a connect in place froze the whole read for up to the connect timeout when
    /// one server was silent, and held its grant's share of the port all that time.
    connecting: FuturesUnordered<Connecting>,
    /// Grants waiting for a connection being opened, by (server, lane).
    pending: HashMap<(ServerId, Lane), Vec<incast_core::Grant>>,
    tuning: SocketTuning,
    pub(super) report: ReadReport,
    start: Instant,
    /// The runtime the read runs on (for the pool's connections).
    runtime: tokio::runtime::Id,
    last_cause: String,
    /// Requests running as tasks (QUIC streams), by grant.
    streams: HashMap<GrantId, StreamGrant>,
    tasks: JoinSet<()>,
    events: mpsc::Receiver<StreamEvent>,
    /// Kept so `events` never reports a closed channel while the read runs.
    #[cfg_attr(not(feature = "quic"), allow(dead_code))]
    events_tx: mpsc::Sender<StreamEvent>,
    #[cfg(feature = "quic")]
    flow: crate::quic::Flow,
    /// Servers whose requests go over QUIC for the rest of this read (see `over_quic`).
    #[cfg(feature = "quic")]
    fell_back: std::collections::HashSet<ServerId>,
    /// Per fragment of unknown length, the last server that said it is too long (or
    /// announced a length over its maximum), and that length.
    too_large: HashMap<usize, (ServerId, Option<u64>)>,
    /// An error that ends the read, found where it cannot be returned at once.
    fatal: Option<FanInError>,
    /// Hedges and retries sent over TCP and not ended yet, by a read alone (see
    /// [`Driver::reset_abandoned`]).
    replacements: HashSet<GrantId>,
    /// Connections left owing only cancelled responses, by when to look at them again (see
    /// [`Driver::reset_quiet`]).
    quiet_watch: BinaryHeap<Reverse<(Instant, usize)>>,
}

/// What a burst of reading on one connection ended with.
enum Outcome {
    /// No more bytes for now.
    Idle,
    /// The connection is unusable; the string says why.
    Broken(String),
    /// The connection was lost (reset or closed by the peer, a failed read): its requests
    /// may be asked again of the same server ([`Scheduler::on_lost`](incast_core::Scheduler::on_lost)).
    Lost(String),
    /// The read cannot go on (a server refused this client's certificate).
    Fatal(FanInError),
}

impl<'a> Driver<'a> {
    /// The driver of one read of `stripe` by `client`, scheduled by `sched`.
    pub(super) fn new(
        client: &'a Client,
        stripe: &'a Stripe,
        #[cfg_attr(not(feature = "quic"), allow(unused_variables))] policy: &incast_core::Policy,
        sched: ReadSched,
        dest: Dest<'a>,
        tuning: SocketTuning,
        start: Instant,
    ) -> Self {
        let (events_tx, events) = mpsc::channel(STREAM_EVENTS);
        Driver {
            client,
            stripe,
            sched,
            dest,
            scratch: Vec::new(),
            conns: Vec::new(),
            by_lane: HashMap::new(),
            grant_conn: HashMap::new(),
            readable: FuturesUnordered::new(),
            connecting: FuturesUnordered::new(),
            pending: HashMap::new(),
            replacements: HashSet::new(),
            quiet_watch: BinaryHeap::new(),
            tuning,
            report: ReadReport {
                fragments: vec![FragmentReport::default(); stripe.len()],
                ..ReadReport::default()
            },
            start,
            runtime: tokio::runtime::Handle::current().id(),
            last_cause: String::new(),
            streams: HashMap::new(),
            tasks: JoinSet::new(),
            events,
            events_tx,
            #[cfg(feature = "quic")]
            flow: crate::quic::Flow::of(policy),
            #[cfg(feature = "quic")]
            fell_back: Default::default(),
            too_large: HashMap::new(),
            fatal: None,
        }
    }

    pub(super) async fn run(&mut self) -> Result<(), FanInError> {
        // A read alone keeps its own timer, made when it first has a deadline (a read without
        // hedging or adaptation never needs one); a shared read is woken by the port's keeper.
        let mut timer: Option<HrTimer> = None;
        // The passed deadline last handled here, so one that does not move is not handled in
        // a loop.
        let mut handled: Option<Instant> = None;
        let deadline = self.start + self.client.config.read_timeout;
        let overall = tokio::time::sleep_until(deadline.into());
        tokio::pin!(overall);
        let routed = self.sched.notify();
        let mut members = self.client.membership.subscribe();
        loop {
            self.perform_actions().await;
            if self.sched.is_finished() {
                break;
            }
            if !self.quiet_watch.is_empty() {
                self.reset_quiet(Instant::now());
            }
            let quiet_at = self.quiet_watch.peek().map(|Reverse((t, _))| *t);
            let next = self.sched.poll_timeout().map_err(FanInError::Timer)?;
            if self.sched.port_keeps_time() {
                // Passed already: handled here, the keeper does not wake a read twice for it.
                let now = Instant::now();
                if let Some(t) = next.filter(|t| *t <= now && handled != Some(*t)) {
                    handled = Some(t);
                    self.read_ready();
                    self.sched.handle_timeout(now);
                    if let Some(e) = self.fatal.take() {
                        return Err(e);
                    }
                    continue;
                }
            } else if next.is_some() || timer.is_some() {
                let t = match &mut timer {
                    Some(t) => t,
                    None => timer.insert(HrTimer::new().map_err(FanInError::Timer)?),
                };
                t.set_earlier(next).map_err(FanInError::Timer)?;
            }
            tokio::select! {
                // The port routed an action to this read (another read freed room).
                _ = async { routed.as_ref().expect("guarded").notified().await }, if routed.is_some() => {}
                Some((i, ready)) = self.readable.next() => {
                    self.conns[i].waiting = false;
                    match ready {
                        Ok(()) => self.on_readable(i),
                        // Its reactor is gone (the runtime shut down) or failed: waiting again
                        // would spin. Its requests fail and are retried on a new connection.
                        Err(e) => {
                            let why = format!("waiting on {} at {}: {e}", self.conns[i].server, self.conns[i].addr);
                            self.lose_conn(i, why);
                        }
                    }
                }
                Some((server, lane, addr, result, began)) = self.connecting.next() => {
                    self.on_connected(server, lane, addr, result, began).await;
                }
                Some(ev) = self.events.recv() => {
                    self.on_stream_event(ev)?;
                    // Drain what else is queued before polling the rest again.
                    while let Ok(ev) = self.events.try_recv() {
                        self.on_stream_event(ev)?;
                    }
                    while self.tasks.try_join_next().is_some() {}
                }
                Ok(()) = members.changed() => self.on_membership(),
                // Only while a connection owes only cancelled responses (rare): the next look.
                _ = async { tokio::time::sleep_until(quiet_at.expect("guarded").into()).await }, if quiet_at.is_some() => {
                    self.read_ready();
                }
                fired = async { timer.as_mut().expect("guarded").fired().await }, if timer.is_some() => {
                    fired.map_err(FanInError::Timer)?;
                    // Bytes already in a socket are progress: read them before judging stalls,
                    // or a busy loop (or select! picking the timer first) hedges a grant whose
                    // data is waiting in the kernel.
                    self.read_ready();
                    self.sched.handle_timeout(Instant::now());
                }
                _ = &mut overall => {
                    let mut waiting_on: Vec<ServerId> =
                        self.conns.iter().filter(|c| c.inflight.iter().any(|f| f.grant.is_some())).map(|c| c.server).collect();
                    waiting_on.extend(self.streams.values().map(|s| s.server));
                    waiting_on.extend(self.pending.iter().filter(|(_, g)| !g.is_empty()).map(|((s, _), _)| *s));
                    waiting_on.sort_unstable();
                    waiting_on.dedup();
                    let (received, block_len) = self.sched.progress();
                    return Err(FanInError::Timeout {
                        after: self.client.config.read_timeout,
                        waiting_on,
                        received,
                        block_len,
                    });
                }
            }
            if let Some(e) = self.fatal.take() {
                return Err(e);
            }
        }
        if let Some(err) = self.sched.error() {
            if let incast_core::ReadError::ServerFailed { server, fragment, .. } = err {
                if self.client.addr_of(server).is_none() {
                    return Err(FanInError::ServerRemoved { server, fragment });
                }
                if let Some(&(s, announced)) = self.too_large.get(&fragment) {
                    if s == server {
                        let max = self.stripe.fragment(fragment).len();
                        return Err(FanInError::FragmentTooLarge {
                            fragment,
                            server,
                            max,
                            announced,
                        });
                    }
                }
            }
            return Err(FanInError::Failed {
                source: err,
                cause: std::mem::take(&mut self.last_cause),
            });
        }
        Ok(())
    }

    /// Carries out every action the scheduler has, then flushes the requests written.
    async fn perform_actions(&mut self) {
        let mut touched = Vec::new();
        while let Some(action) = self.sched.poll_action(Instant::now()) {
            match action {
                Action::Request(g) => {
                    match g.kind {
                        GrantKind::Hedge => crate::trace::event!(
                            debug,
                            fragment = g.fragment,
                            server = %g.server,
                            bytes = g.len,
                            "hedge issued"
                        ),
                        GrantKind::Retry => crate::trace::event!(
                            debug,
                            fragment = g.fragment,
                            server = %g.server,
                            bytes = g.len,
                            "retry issued"
                        ),
                        GrantKind::First | GrantKind::Next => {}
                    }
                    let fr = &mut self.report.fragments[g.fragment];
                    fr.grants += 1;
                    fr.granted.get_or_insert(self.start.elapsed());
                    fr.hedges += u32::from(g.kind == GrantKind::Hedge);
                    if self.over_quic(&g) {
                        self.start_stream(&g);
                        continue;
                    }
                    // A hedge, or a stalled grant moved after the hedge budget was spent
                    // (a retry): both replace a response stuck on a connection.
                    if matches!(g.kind, GrantKind::Hedge | GrantKind::Retry) {
                        if !self.sched.is_shared() {
                            self.replacements.insert(g.id);
                        }
                        self.reset_behind_hole(g.server, g.lane);
                    }
                    match self.conn(g.server, g.lane) {
                        Ok(Some(i)) => {
                            self.send_request(i, &g);
                            touched.push(i);
                        }
                        Ok(None) => self.pending.entry((g.server, g.lane)).or_default().push(g),
                        Err(cause) => self.grant_failed(Instant::now(), g.id, cause),
                    }
                }
                Action::Cancel { id, server, lane } => {
                    // Not sent yet: its connection is still being opened.
                    if let Some(waiting) = self.pending.get_mut(&(server, lane)) {
                        if let Some(at) = waiting.iter().position(|g| g.id == id) {
                            waiting.remove(at);
                            continue;
                        }
                    }
                    if let Some(s) = self.streams.remove(&id) {
                        // Aborting the task drops its stream: quinn sends STOP_SENDING.
                        s.task.abort();
                        continue;
                    }
                    let Some(i) = self.grant_conn.remove(&id) else { continue };
                    let c = &mut self.conns[i];
                    if let Some(f) = c.inflight.iter_mut().find(|f| f.grant == Some(id)) {
                        f.grant = None;
                        f.cancelled = Some(id);
                        Frame::Cancel { id: f.req }.encode(&mut c.out);
                        touched.push(i);
                        if owes_only_cancelled(c) {
                            self.quiet_watch.push(Reverse((c.quiet_since + QUIET_RESET_AFTER, i)));
                        }
                    }
                }
            }
        }
        for i in touched {
            self.flush(i).await;
            self.watch(i);
        }
    }

    /// The client's members changed: lets go of connections and QUIC requests to servers that
    /// left or moved. Their requests fail, so the scheduler retries them on a replica (or at
    /// the new address), or fails the read naming the server.
    fn on_membership(&mut self) {
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if !c.broken && self.client.addr_of(c.server) != Some(c.addr) {
                let why = format!("{} at {} was removed from the client", c.server, c.addr);
                self.break_conn(i, why);
            }
        }
        let left: Vec<(ServerId, Lane)> = self
            .pending
            .keys()
            .filter(|(s, _)| self.client.addr_of(*s).is_none())
            .copied()
            .collect();
        for key in left {
            // The connect's result is dropped when it comes (`on_connected`).
            for g in self.pending.remove(&key).unwrap_or_default() {
                self.grant_failed(Instant::now(), g.id, format!("{} was removed from the client", key.0));
            }
        }
        let gone: Vec<GrantId> = self
            .streams
            .iter()
            .filter(|(_, s)| self.client.addr_of(s.server).is_none())
            .map(|(&g, _)| g)
            .collect();
        for g in gone {
            let server = self.streams[&g].server;
            self.fail_stream(g, format!("{server} was removed from the client"));
        }
        // A fragment that no member serves any more ends the read now, typed, not when its
        // turn to be granted comes: under a small budget (a fresh client's starts at 16 KiB,
        // a slow port's stays there) that may be many round trips away.
        if self.fatal.is_none() {
            let orphan = self.stripe.fragments().iter().enumerate().find(|(i, f)| {
                std::iter::once(f.server())
                    .chain(f.replicas().iter().copied())
                    .all(|s| self.client.addr_of(s).is_none())
                    && self.fragment_len(*i) != Some(self.report.fragments[*i].bytes)
            });
            if let Some((fragment, f)) = orphan {
                self.fatal = Some(FanInError::ServerRemoved {
                    server: f.server(),
                    fragment,
                });
            }
        }
    }

    /// Fragment `i`'s length, once known: the stripe's, else (one more look at the port) the
    /// one its server announced. A fragment is whole once its report counts that many bytes.
    fn fragment_len(&self, i: usize) -> Option<u64> {
        self.stripe
            .fragment(i)
            .known_len()
            .or_else(|| self.sched.fragment_len(i))
    }

    /// Writes grant `g`'s request on connection `i` (flushed by the caller).
    fn send_request(&mut self, i: usize, g: &incast_core::Grant) {
        let c = &mut self.conns[i];
        if c.inflight.is_empty() {
            c.quiet_since = Instant::now();
        }
        let req = c.next_req;
        c.next_req += 1;
        let frag = self.stripe.fragment(g.fragment);
        let open = frag.known_len().is_none();
        if open {
            let o = wire::Open {
                limit: frag.offset().saturating_add(frag.len()),
                query: frag.query_bytes(),
            };
            wire::encode_open_request(&mut c.out, req, frag.key(), g.object_offset, g.len, &o, g.pace);
        } else {
            wire::encode_request(&mut c.out, req, frag.key(), g.object_offset, g.len, g.pace);
        }
        c.inflight.push_back(Inflight {
            req,
            grant: Some(g.id),
            cancelled: None,
            fragment: g.fragment,
            block_offset: g.block_offset,
            object_offset: g.object_offset,
            len: g.len,
            received: 0,
            crc: 0,
            open,
            sized: false,
        });
        self.grant_conn.insert(g.id, i);
    }

    /// A connection this read was opening is open (or failed): sends the grants that waited
    /// for it, or fails them.
    async fn on_connected(
        &mut self,
        server: ServerId,
        lane: Lane,
        addr: SocketAddr,
        result: Result<Opened, OpenError>,
        began: Instant,
    ) {
        let waiting = self.pending.remove(&(server, lane)).unwrap_or_default();
        let now = Instant::now();
        let (stream, tls) = match result {
            // A server that left or moved meanwhile gets nothing on the old address.
            Ok(_) if self.client.addr_of(server) != Some(addr) => {
                for g in waiting {
                    self.grant_failed(now, g.id, format!("{server} at {addr} was removed from the client"));
                }
                return;
            }
            Ok((stream, tls, report)) => {
                *self.client.last_tuning.lock().unwrap_or_else(|e| e.into_inner()) = Some(report.to_string());
                if let Ok(local) = stream.local_addr() {
                    self.sched.note_local_address(local.ip());
                }
                (stream, tls)
            }
            Err(OpenError::Failed(why) | OpenError::NoDescriptor(why)) => {
                for g in waiting {
                    self.grant_failed(now, g.id, why.clone());
                }
                return;
            }
            Err(OpenError::Fatal(e)) => {
                self.fatal = Some(e);
                return;
            }
        };
        self.report.connects += 1;
        self.conns.push(Conn {
            server,
            addr,
            lane,
            stream: Arc::new(stream),
            tls,
            rx: Rx::new(),
            waited: None,
            store: None,
            // The first response answers a grant that waited for this connection.
            opening: (!waiting.is_empty()).then(|| now.saturating_duration_since(began)),
            inflight: VecDeque::new(),
            out: Vec::new(),
            next_req: 1,
            counters: None,
            last_end: LastEnd::Opened,
            read: self.report.read,
            broken: false,
            waiting: false,
            quiet_since: now,
            runtime: self.runtime,
        });
        let i = self.conns.len() - 1;
        self.by_lane.insert((server, lane), i);
        for g in &waiting {
            self.send_request(i, g);
        }
        self.flush(i).await;
        self.watch(i);
    }

    /// Whether grant `g` goes over QUIC. With the fallback, a hedge does, and so does every
    /// later grant to a server that needed one in this read: its TCP connection is stuck
    /// behind a lost segment until the kernel's RTO, and requests queued on it would stall too.
    #[cfg_attr(not(feature = "quic"), allow(unused_variables))]
    fn over_quic(&mut self, g: &incast_core::Grant) -> bool {
        match self.client.config.transport {
            Transport::Tcp => false,
            #[cfg(feature = "quic")]
            Transport::Quic => true,
            #[cfg(feature = "quic")]
            Transport::TcpWithQuicFallback => {
                if g.kind == GrantKind::Hedge {
                    self.fell_back.insert(g.server);
                }
                self.fell_back.contains(&g.server)
            }
        }
    }

    /// Starts grant `g` as a QUIC stream task.
    #[cfg(feature = "quic")]
    fn start_stream(&mut self, g: &incast_core::Grant) {
        let Some(q) = self.client.quic.clone() else {
            unreachable!("ClientConfigBuilder::build refuses QUIC transports without quic settings")
        };
        let Some(addr) = self.client.addr_of(g.server) else {
            self.grant_failed(
                Instant::now(),
                g.id,
                format!("{} was removed from the client", g.server),
            );
            return;
        };
        self.report.quic_requests += 1;
        let frag = self.stripe.fragment(g.fragment);
        let open = frag.known_len().is_none().then(|| {
            (
                frag.offset().saturating_add(frag.len()),
                frag.query_bytes().map(bytes::Bytes::copy_from_slice),
            )
        });
        let req = crate::quic::StreamRequest {
            open,
            grant: g.id,
            server: g.server,
            addr,
            flow: self.flow,
            key: self.stripe.fragment(g.fragment).key().to_owned(),
            offset: g.object_offset,
            len: g.len,
            read_start: self.start,
        };
        let task = self
            .tasks
            .spawn(crate::quic::run_request(q, req, self.events_tx.clone()));
        self.streams.insert(
            g.id,
            StreamGrant {
                server: g.server,
                fragment: g.fragment,
                block_offset: g.block_offset,
                object_offset: g.object_offset,
                len: g.len,
                received: 0,
                crc: 0,
                task,
            },
        );
    }

    #[cfg(not(feature = "quic"))]
    fn start_stream(&mut self, _g: &incast_core::Grant) {
        unreachable!("only QUIC grants run as stream tasks")
    }

    /// Applies what a stream task reported.
    fn on_stream_event(&mut self, ev: StreamEvent) -> Result<(), FanInError> {
        let now = Instant::now();
        let g = ev.grant;
        // Events of a cancelled request are late: drop them.
        let Some(s) = self.streams.get_mut(&g) else {
            return Ok(());
        };
        let server = s.server;
        match ev.kind {
            StreamEventKind::Data(chunks) => {
                let start = s.received;
                for c in &chunks {
                    let at = (s.block_offset + s.received) as usize;
                    // The task checks lengths against the request; this keeps the block safe
                    // whatever it does.
                    if s.received + c.len() as u64 > s.len {
                        let why = format!("{server} sent more data than a quic request asked for");
                        self.fail_stream(g, why);
                        return Ok(());
                    }
                    self.dest.region(s.fragment, at as u64, c.len()).copy_from_slice(c);
                    if self.client.config.verify_checksums {
                        s.crc = crc32c::crc32c_append(s.crc, c);
                    }
                    s.received += c.len() as u64;
                }
                let n = s.received - start;
                let fragment = s.fragment;
                if n > 0 {
                    if let Err(e) = self.sched.on_bytes(now, g, n, HostTime::default()) {
                        self.fail_stream(g, format!("{server}: {e}"));
                        return Ok(());
                    }
                    self.report.fragments[fragment]
                        .first_byte
                        .get_or_insert(now - self.start);
                }
            }
            StreamEventKind::End {
                crc32c,
                counters,
                cancelled,
            } => {
                let s = self.streams.remove(&g).expect("looked up above");
                if let Some(c) = counters {
                    // Already made per-request deltas by the task (see `quic::client`).
                    self.report.quic_loss_events += u64::from(c.rtos);
                    self.report.quic_lost_packets += u64::from(c.retransmits);
                    self.sched.on_loss(now, u64::from(c.retransmits), u64::from(c.rtos));
                }
                let got = Received {
                    fragment: s.fragment,
                    len: s.len,
                    received: s.received,
                    crc: s.crc,
                };
                if let Err(why) = self.end_response(now, g, server, got, crc32c, cancelled, true) {
                    self.grant_failed(now, g, why);
                }
            }
            StreamEventKind::Length(size) => {
                // The task allows only data of the cut length after this.
                s.len = size
                    .min(s.object_offset.saturating_add(s.len))
                    .saturating_sub(s.object_offset);
                let fragment = s.fragment;
                if let Err(why) = self.on_length(now, g, server, fragment, size) {
                    self.fail_stream(g, why);
                }
            }
            StreamEventKind::Refused { code, message } => {
                let s = self.streams.remove(&g).expect("looked up above");
                self.note_refusal(s.fragment, server, code);
                self.grant_failed(now, g, format!("{server} answered {code:?}: {message}"));
            }
            StreamEventKind::Failed(why) => self.fail_stream(g, why),
            StreamEventKind::Fatal(e) => return Err(e),
        }
        Ok(())
    }

    /// The server of live grant `g` (of `fragment`) announced the size of what it reads:
    /// tells the scheduler the fragment's length and sizes the fragment's buffer. `Err`: the
    /// scheduler refused it (over the maximum, or unlike the length learnt before); the caller
    /// fails the grant with that cause.
    fn on_length(
        &mut self,
        now: Instant,
        g: GrantId,
        server: ServerId,
        fragment: usize,
        size: u64,
    ) -> Result<(), String> {
        let len = size.saturating_sub(self.stripe.fragment(fragment).offset());
        match self.sched.on_length(now, g, len) {
            Ok(()) => {
                self.dest.set_len(fragment, len);
                Ok(())
            }
            Err(e) => {
                if let incast_core::EventError::LengthOverMax { len, .. } = e {
                    self.too_large.insert(fragment, (server, Some(len)));
                }
                Err(format!("{server}: {e}"))
            }
        }
    }

    /// A server refused a request of `fragment` with `code`: remembered when it says the
    /// fragment is too large, for the read's typed error.
    fn note_refusal(&mut self, fragment: usize, server: ServerId, code: ErrorCode) {
        if code == ErrorCode::TooLarge {
            self.too_large.insert(fragment, (server, None));
        }
    }

    /// Ends stream grant `g` as failed.
    fn fail_stream(&mut self, g: GrantId, why: String) {
        if let Some(s) = self.streams.remove(&g) {
            s.task.abort();
        }
        self.grant_failed(Instant::now(), g, why);
    }

    /// Grant `g` failed because of `why`: the scheduler retries it on a replica, or fails
    /// the read (then `why` is the read's last cause).
    fn grant_failed(&mut self, now: Instant, g: GrantId, why: String) {
        crate::trace::event!(debug, grant = g.as_u64(), cause = %why, "request failed");
        self.replacements.remove(&g);
        self.last_cause = why;
        let _ = self.sched.on_failed(now, g);
    }

    /// The connection for (server, lane): this read's or a pooled one (`Some`), or `None`
    /// while one is being opened (started here if it is not yet): the grant then waits in
    /// `pending`.
    fn conn(&mut self, server: ServerId, lane: Lane) -> Result<Option<usize>, String> {
        if let Some(&i) = self.by_lane.get(&(server, lane)) {
            if !self.conns[i].broken {
                return Ok(Some(i));
            }
        }
        let Some(addr) = self.client.addr_of(server) else {
            return Err(format!("{server} was removed from the client"));
        };
        if self.pending.contains_key(&(server, lane)) {
            return Ok(None);
        }
        if let Some(conn) = self
            .client
            .take_idle((server, lane), self.runtime)
            .filter(|c| c.addr == addr)
        {
            let mut conn = conn;
            conn.last_end = LastEnd::Earlier { read: conn.read };
            conn.read = self.report.read;
            self.conns.push(conn);
            let i = self.conns.len() - 1;
            self.by_lane.insert((server, lane), i);
            return Ok(Some(i));
        }
        let tuning = self.tuning.clone();
        let timeout = self.client.config.connect_timeout;
        #[cfg(feature = "tls")]
        let tls = self.client.config.tls.clone();
        #[cfg(not(feature = "tls"))]
        let tls: TlsSettings = None;
        let idle = self.client.idle.clone();
        let counters = self.client.counters.clone();
        self.connecting.push(Box::pin(async move {
            let began = Instant::now();
            let mut shed = false;
            let result = loop {
                // Without the `tls` feature the settings are a `Copy` unit.
                #[cfg_attr(not(feature = "tls"), allow(clippy::clone_on_copy))]
                let result = tokio::time::timeout(timeout, connect(server, addr, &tuning, tls.clone()))
                    .await
                    .unwrap_or_else(|_| {
                        Err(OpenError::Failed(format!(
                            "connecting to {server} at {addr}: no answer within {timeout:?}"
                        )))
                    });
                // Out of descriptors: the pool's idle connections give theirs back, once.
                match result {
                    Err(OpenError::NoDescriptor(why)) if !shed => {
                        shed = true;
                        let closed = super::shed(&idle);
                        if closed == 0 {
                            break Err(OpenError::Failed(format!("{why} (no idle connection to close)")));
                        }
                        counters.pool_shed.fetch_add(closed as u64, std::sync::atomic::Ordering::Relaxed);
                        crate::trace::event!(warn, server = %server, closed, "out of file descriptors: closed the idle connections");
                    }
                    result => break result,
                }
            };
            // The local port ties the connection to what `ss` or a packet capture shows.
            crate::trace::event!(debug, server = %server, local_port = result.as_ref().ok().and_then(|o| o.0.local_addr().ok()).map_or(0, |a| a.port()), took_us = began.elapsed().as_micros() as u64, ok = result.is_ok(), "connected");
            (server, lane, addr, result, began)
        }));
        self.pending.insert((server, lane), Vec::new());
        Ok(None)
    }

    /// Writes what is queued for connection `i`. Requests are small; the socket buffer has
    /// room in practice, and when it has not, the write waits (requests must not be lost).
    async fn flush(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if c.out.is_empty() || c.broken {
            return;
        }
        if let Some(tls) = &mut c.tls {
            let mut sent = tls.queue(&c.out);
            c.out.clear();
            loop {
                match sent.and_then(|()| tls.try_flush(&c.stream)) {
                    Ok(()) => return,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => sent = c.stream.writable().await,
                    Err(e) => {
                        return self.end_conn(i, format!("writing to {}: {e}", self.conns[i].server), is_lost(&e))
                    }
                }
            }
        }
        let mut written = 0;
        while written < c.out.len() {
            match c.stream.try_write(&c.out[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Err(e) = c.stream.writable().await {
                        return self.end_conn(i, format!("writing to {}: {e}", self.conns[i].server), is_lost(&e));
                    }
                }
                Err(e) => return self.end_conn(i, format!("writing to {}: {e}", self.conns[i].server), is_lost(&e)),
            }
        }
        c.out.clear();
    }

    /// Makes sure connection `i` is watched for readability while it owes responses.
    fn watch(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if c.waiting || c.broken || c.inflight.is_empty() {
            return;
        }
        c.waiting = true;
        let stream = c.stream.clone();
        self.readable
            .push(Box::pin(async move { (i, stream.readable().await) }));
    }

    /// Reads whatever the connections with responses due already have.
    fn read_ready(&mut self) {
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if c.broken || c.inflight.is_empty() {
                continue;
            }
            self.after_read(i, false);
        }
    }

    fn on_readable(&mut self, i: usize) {
        self.after_read(i, true);
    }

    /// Reads connection `i` and acts on how it ended; `rewatch`: watch it again if idle.
    fn after_read(&mut self, i: usize, rewatch: bool) {
        match self.read_conn(i) {
            Outcome::Idle if rewatch => {
                if self.client.config.rearm_quickack && rearm_quickack(self.conns[i].stream.as_ref()).is_err() {
                    self.report.quickack_errors += 1;
                }
                self.watch(i);
            }
            Outcome::Idle => {}
            Outcome::Broken(why) => self.break_conn(i, why),
            Outcome::Lost(why) => self.lose_conn(i, why),
            Outcome::Fatal(e) => {
                self.break_conn(i, e.to_string());
                self.fatal.get_or_insert(e);
            }
        }
    }

    /// Reads and handles frames from connection `i` until the socket has nothing more.
    fn read_conn(&mut self, i: usize) -> Outcome {
        let server = self.conns[i].server;
        loop {
            let c = &mut self.conns[i];
            let r = match &mut c.rx {
                // A frame's first bytes: when they reached the host, where the socket says.
                Rx::Header { buf, have: 0 } if c.tls.is_none() => {
                    let stream = &c.stream;
                    stream
                        .try_io(Interest::READABLE, || crate::sys::recv_stamped(stream.as_fd(), buf))
                        .map(|(n, at)| {
                            c.waited = at
                                .and_then(|t| SystemTime::now().duration_since(t).ok())
                                .filter(|w| *w <= HOST_WAIT_LIMIT);
                            n
                        })
                }
                Rx::Header { buf, have } => read_some(&c.stream, &mut c.tls, &mut buf[*have..]),
                Rx::Control { header, buf } => fill_control(header, buf, |b| read_some(&c.stream, &mut c.tls, b)),
                Rx::Data { id, left, .. } => {
                    let Some(f) = c.inflight.front() else {
                        return Outcome::Broken(format!("{server} sent data for request {id}, none is pending"));
                    };
                    if f.req != *id {
                        return Outcome::Broken(format!("{server} sent data for request {id}, expected {}", f.req));
                    }
                    if f.open && !f.sized {
                        return Outcome::Broken(format!("{server} sent data for request {id} before its length"));
                    }
                    let room = (f.len - f.received).min(u64::from(*left)) as usize;
                    if room < *left as usize {
                        return Outcome::Broken(format!("{server} sent more data than request {id} asked for"));
                    }
                    if f.grant.is_some() {
                        let at = f.block_offset + f.received;
                        read_some(&c.stream, &mut c.tls, self.dest.region(f.fragment, at, room))
                    } else {
                        self.scratch.resize(SCRATCH, 0);
                        let n = room.min(SCRATCH);
                        read_some(&c.stream, &mut c.tls, &mut self.scratch[..n])
                    }
                }
            };
            let n = match r {
                Ok(0) => return Outcome::Lost(format!("{server} closed the connection")),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Outcome::Idle,
                Err(e) => {
                    return match refused(&e, server, self.conns[i].addr) {
                        Some(fatal) => Outcome::Fatal(fatal),
                        None if is_lost(&e) => Outcome::Lost(format!("reading from {server}: {e}")),
                        None => Outcome::Broken(format!("reading from {server}: {e}")),
                    }
                }
            };
            if let Err(why) = self.advance(i, n) {
                return Outcome::Broken(why);
            }
        }
    }

    /// Accounts for `n` bytes just read into the current state of connection `i`.
    fn advance(&mut self, i: usize, n: usize) -> Result<(), String> {
        let now = Instant::now();
        let c = &mut self.conns[i];
        c.quiet_since = now;
        let server = c.server;
        match &mut c.rx {
            Rx::Header { buf, have } => {
                *have += n;
                if *have < HEADER_LEN {
                    return Ok(());
                }
                let h = Header::decode(buf).map_err(|e| format!("{server}: {e}"))?;
                // Only the connection's first frame answers a grant that waited for it.
                let opening = c.opening.take().unwrap_or_default();
                // A hold without a `StoreTime` frame before it was the server host's alone.
                let store = c.store.take().filter(|&(req, _)| req == h.id).map(|(_, d)| d);
                c.rx = match h.kind {
                    Kind::Data => Rx::Data {
                        id: h.id,
                        left: h.len,
                        host: HostTime {
                            server: h.hold().unwrap_or_default(),
                            client: c.waited.take().unwrap_or_default() + opening,
                            server_capped: h.hold_capped(),
                            store: h.hold().map(|_| store.unwrap_or_default()),
                        },
                    },
                    Kind::End | Kind::Error | Kind::Length | Kind::StoreTime => Rx::Control {
                        header: h,
                        buf: Vec::with_capacity(h.len as usize),
                    },
                    kind => return Err(format!("{server}: {}", WireError::UnexpectedKind { kind })),
                };
                if h.len == 0 {
                    return self.frame_done(i);
                }
                Ok(())
            }
            Rx::Data { left, host, .. } => {
                *left -= n as u32;
                let done = *left == 0;
                // The hosts' part of the grant's first-byte time (counted for its first
                // bytes only).
                let host_time = std::mem::take(host);
                let f = c.inflight.front_mut().expect("checked before reading");
                if let Some(g) = f.grant {
                    let at = f.block_offset + f.received;
                    // The checksum is the one pass over the bytes besides the copy: skipped
                    // when nothing checks it.
                    if self.client.config.verify_checksums {
                        f.crc = crc32c::crc32c_append(f.crc, self.dest.region(f.fragment, at, n));
                    }
                    f.received += n as u64;
                    let fragment = f.fragment;
                    match self.sched.on_bytes(now, g, n as u64, host_time) {
                        Ok(Delivery::Write { block_offset }) => debug_assert_eq!(block_offset, at),
                        Ok(Delivery::Discard) => {}
                        Err(e) => return Err(format!("{server}: {e}")),
                    }
                    let fr = &mut self.report.fragments[fragment];
                    fr.first_byte.get_or_insert(now - self.start);
                } else {
                    f.received += n as u64;
                    self.report.drained_bytes += n as u64;
                }
                if done {
                    self.conns[i].rx = Rx::new();
                }
                Ok(())
            }
            Rx::Control { header, buf } => {
                if buf.len() < header.len as usize {
                    return Ok(());
                }
                self.frame_done(i)
            }
        }
    }

    /// A whole `End` or `Error` frame has been read on connection `i` (or a frame without
    /// payload): act on it.
    fn frame_done(&mut self, i: usize) -> Result<(), String> {
        let now = Instant::now();
        let c = &mut self.conns[i];
        let server = c.server;
        let rx = std::mem::replace(&mut c.rx, Rx::new());
        let frame = match rx {
            Rx::Control { header, buf } => {
                Frame::decode_payload(&header, buf.into()).map_err(|e| format!("{server}: {e}"))?
            }
            // An empty data frame; End and Error frames always have a payload.
            Rx::Data { .. } | Rx::Header { .. } => return Ok(()),
        };
        match frame {
            Frame::Error { id: 0, code, message } => {
                Err(format!("{server} refused the connection: {code:?}: {message}"))
            }
            Frame::Error { id, code, message } => {
                let f = self.pop_inflight(i, id)?;
                if let Some(g) = f.grant {
                    self.grant_conn.remove(&g);
                    self.note_refusal(f.fragment, server, code);
                    self.grant_failed(now, g, format!("{server} answered {code:?}: {message}"));
                }
                Ok(())
            }
            Frame::StoreTime { id, micros } => {
                let c = &mut self.conns[i];
                if c.inflight.front().is_none_or(|f| f.req != id) {
                    return Err(format!("{server} sent a store time for request {id} out of order"));
                }
                c.store = Some((id, Duration::from_micros(u64::from(micros))));
                Ok(())
            }
            Frame::Length { id, size } => {
                let c = &mut self.conns[i];
                let Some(f) = c.inflight.front_mut().filter(|f| f.req == id) else {
                    return Err(format!("{server} sent a length for request {id} out of order"));
                };
                if !f.open || f.sized {
                    return Err(format!("{server} sent an unexpected length for request {id}"));
                }
                // What the server sends now: the part of the range below the size.
                f.sized = true;
                f.len = size
                    .min(f.object_offset.saturating_add(f.len))
                    .saturating_sub(f.object_offset);
                let (grant, fragment) = (f.grant, f.fragment);
                if let Some(g) = grant {
                    if let Err(why) = self.on_length(now, g, server, fragment, size) {
                        // Its bytes are drained; the scheduler retries the range elsewhere.
                        if let Some(f) = self.conns[i].inflight.front_mut() {
                            f.grant = None;
                        }
                        self.grant_conn.remove(&g);
                        self.grant_failed(now, g, why);
                    }
                }
                Ok(())
            }
            Frame::End {
                id,
                crc32c,
                counters,
                at_start,
                cancelled,
            } => {
                let f = self.pop_inflight(i, id)?;
                let c = &mut self.conns[i];
                let split = Split::of(counters, at_start, c.counters);
                let last_end = c.last_end;
                if counters.is_some() {
                    c.counters = counters;
                    c.last_end = LastEnd::Here { fragment: f.fragment };
                }
                // Counted for cancelled requests too: a hedged request's RTO is still one the
                // port took (and the read may have waited for it before the hedge).
                self.count_loss(f.fragment, split.own);
                match last_end {
                    LastEnd::Opened => self.count_loss(f.fragment, split.earlier),
                    LastEnd::Here { fragment } => self.count_loss(fragment, split.earlier),
                    LastEnd::Earlier { read } => {
                        if split.earlier != (0, 0) {
                            self.report.late.push(LateCounters {
                                read,
                                rtos: split.earlier.0,
                                retransmits: split.earlier.1,
                            });
                        }
                    }
                }
                // The port hears of every loss, earlier reads' too, as before the split (and
                // since drains stopped moving the baseline, those of drained responses).
                let (rtos, retrans) = (split.own.0 + split.earlier.0, split.own.1 + split.earlier.1);
                self.sched.on_loss(now, u64::from(retrans), u64::from(rtos));
                let Some(g) = f.grant else {
                    if let Some(orig) = f.cancelled.filter(|_| !cancelled && f.received == f.len) {
                        // The original of a hedge ended whole: the scheduler counts it spurious.
                        let _ = self.sched.on_done(now, orig, f.fragment);
                    }
                    return Ok(());
                };
                self.grant_conn.remove(&g);
                let got = Received {
                    fragment: f.fragment,
                    len: f.len,
                    received: f.received,
                    crc: f.crc,
                };
                self.end_response(now, g, server, got, crc32c, cancelled, false)
            }
            other => Err(format!(
                "{server}: {}",
                WireError::UnexpectedKind { kind: other.kind() }
            )),
        }
    }

    /// A response to grant `g` ended with an `End` frame (over TCP or QUIC): confirms the
    /// grant if every byte arrived and the checksum matches, else fails it so the scheduler
    /// retries. `Err` is a protocol violation the scheduler refused.
    #[allow(clippy::too_many_arguments)]
    fn end_response(
        &mut self,
        now: Instant,
        g: GrantId,
        server: ServerId,
        got: Received,
        crc32c: Option<u32>,
        cancelled: bool,
        quic: bool,
    ) -> Result<(), String> {
        let over = if quic { " over quic" } else { "" };
        let checksum_ok = !self.client.config.verify_checksums || crc32c.is_none_or(|crc| crc == got.crc);
        if cancelled || got.received != got.len || !checksum_ok {
            let why = if !checksum_ok {
                self.report.checksum_failures += 1;
                format!("{server}: checksum mismatch on {} bytes{over}", got.len)
            } else {
                let kind = if quic { "quic response" } else { "response" };
                format!("{server} ended a {kind} after {} of {} bytes", got.received, got.len)
            };
            self.grant_failed(now, g, why);
            return Ok(());
        }
        // The scheduler's count, not `+= got.len`: the late end of a hedged original is not
        // counted twice.
        let confirmed = self
            .sched
            .on_done(now, g, got.fragment)
            .map_err(|e| format!("{server}: {e}"))?;
        if self.replacements.remove(&g) {
            self.reset_abandoned(got.fragment);
        }
        let len = self.fragment_len(got.fragment);
        let fr = &mut self.report.fragments[got.fragment];
        let whole = len == Some(confirmed);
        if confirmed > fr.bytes || (whole && fr.done.is_none()) {
            fr.bytes = confirmed;
            fr.server = Some(server);
            fr.done = Some(now - self.start);
            if whole {
                self.dest.complete(got.fragment, Some(server), now - self.start);
            }
        }
        Ok(())
    }

    /// Counts `(rtos, retransmits)` that a server's socket took serving `fragment`.
    fn count_loss(&mut self, fragment: usize, (rtos, retransmits): (u32, u32)) {
        let fr = &mut self.report.fragments[fragment];
        fr.kernel_rtos += rtos;
        fr.retransmits += retransmits;
        self.report.kernel_rtos += u64::from(rtos);
        self.report.retransmits += u64::from(retransmits);
    }

    /// A hedge (or a retry: a stalled grant moved after the hedge budget was spent) of
    /// `fragment` won, in a read alone ([`crate::Sharing::PerRead`]): resets every
    /// connection that now owes only cancelled responses, one of them this fragment's
    /// stalled original.
    ///
    /// Why: such a connection is almost always waiting out a lost tail (often a lost
    /// retransmission, which Linux repairs only by its RTO: no loss probe in recovery, and
    /// no later segment to show the loss). The hedge already saved the read, but left alone
    /// the server's socket takes a kernel RTO about 200 ms later, keeps sending bytes nobody
    /// wants, and holds the connection until then. Measured on the testbed (16 KiB port, 12
    /// configurations of 16-256 senders): the servers' hosts counted about 20 RTOs per run
    /// that no `End` frame reported, on connections like these. A reset (`connect` to
    /// `AF_UNSPEC`: the kernel sends RST and forgets the connection) ends the server's socket
    /// before its timer fires; the next grant to that server opens a new connection. A
    /// hedge whose original ends first (spurious) resets nothing, so the port still learns
    /// from spurious hedges.
    ///
    /// Not under the port ([`crate::Sharing::Port`]): there [`Driver::reset_quiet`] resets
    /// the originals that really wait out a lost tail (silent for 150 ms, under the minimum
    /// RTO), and most originals of a won hedge were only slow: they end within
    /// milliseconds, and their connection serves the next grant. Resetting them at once cost
    /// a new connection each, and a handshake through a full port sometimes loses its
    /// SYN-ACK, which the server's host counts as a kernel RTO (a 1 s timer) even though no
    /// read waits for it. Measured on the testbed (1 Gbit/s, 32 KiB port, 2 bulk flows, 16
    /// and 64 x 32 and 256 KiB, 1 and 4 reads; four alternated pairs of runs): with the reset
    /// 6,971-7,513 connections accepted and 3-9 host RTOs per run, all SYN-ACK timeouts;
    /// without it 3,576-3,662 and 1-4, the same share of the link (49.6-51.9% against
    /// 49.5-51.2%), and no data RTO. At 500 and 100 Mbit/s: 8-16 host RTOs per run against
    /// 13-18 (docs/measurements.md, *Twenty-fourth session*). A read alone has no port to tell it
    /// that the path is lossy, so its quiet reset never fires: it keeps this one.
    fn reset_abandoned(&mut self, fragment: usize) {
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            let stalled_here = c
                .inflight
                .iter()
                .any(|f| f.fragment == fragment && f.cancelled.is_some());
            if stalled_here && owes_only_cancelled(c) {
                let why = format!("{} reset after a hedge of its stalled response won", c.server);
                self.reset_conn(i, why);
            }
        }
    }

    /// Resets connection `i` (`connect` to `AF_UNSPEC`: the kernel sends RST and forgets it),
    /// counts it in the report and marks it broken; the next grant to its lane opens a new one.
    fn reset_conn(&mut self, i: usize, why: String) {
        let c = &self.conns[i];
        if crate::sys::disconnect(std::os::fd::AsFd::as_fd(c.stream.as_ref())).is_ok() {
            crate::trace::event!(debug, server = %c.server, local_port = c.stream.local_addr().map_or(0, |a| a.port()), cause = %why, "stalled connection reset");
            self.report.connections_reset += 1;
            self.break_conn(i, why);
        }
    }

    /// A hedge or a retry is about to go to `(server, lane)`: if that connection owes only
    /// cancelled responses (an earlier stalled grant of this read, hedged or moved away),
    /// resets it, so the replacement goes out on a new connection instead of queueing
    /// behind the old response.
    ///
    /// Why: a response that stalled is almost always behind a lost segment that only the
    /// server's RTO will repair, and TCP delivers in order, so a hedge sent behind it
    /// stalls with it. The scheduler moves a stalled fragment to its other lane, but when
    /// both lanes stalled it moves back to the first. Measured on the testbed (2 Gbit/s,
    /// 32 KiB port, 2 bulk flows, 16 x 32 KiB): one fragment's hedges alternated between
    /// two such connections every 100 ms until a kernel RTO freed one, and the read took
    /// 426 ms instead of 6. A reset also ends the server's socket before its RTO fires.
    /// A connection that still carries live grants is left alone: they would have to be
    /// re-requested too.
    fn reset_behind_hole(&mut self, server: ServerId, lane: Lane) {
        let Some(&i) = self.by_lane.get(&(server, lane)) else {
            return;
        };
        let c = &self.conns[i];
        if c.inflight.iter().any(|f| f.cancelled.is_some()) && owes_only_cancelled(c) {
            self.reset_conn(
                i,
                format!("{server} reset: a hedge or retry would queue behind its stalled response"),
            );
        }
    }

    /// Resets every watched connection that owes only cancelled responses and has been
    /// silent for [`QUIET_RESET_AFTER`] while the port's servers report loss.
    ///
    /// Why: a cancelled response that stalls is almost always behind a lost segment that
    /// only the server's RTO will repair, and the two resets above wait for its replacement
    /// to win (or to be sent to the same connection). On a lossy port the replacement is
    /// often slow too (beside bulk flows its hedge may be denied, and a grant moved after
    /// 100 ms can lose its own tail), and the server's RTO fires first. Traced on the testbed
    /// (500 Mbit/s, 2 bulk flows, 64 x 32 and 256 KiB x 1 read), the reads' host RTOs came
    /// about 213 ms after the server last sent on their connection, with the client doing
    /// nothing on it meanwhile. The reset ends the server's socket first, and its unwanted
    /// retransmissions with it. It pairs with the scheduler's repeated moves
    /// (`incast_core::scheduler::MAX_TIMED_MOVES`), which cancel such grants after 100 ms:
    /// beside bulk flows at 500 Mbit/s, the two together left 0-3 host RTOs per 8 rows in
    /// alternated runs where either alone left 8-25 (docs/measurements.md, *Twentieth
    /// session*). Only on a lossy port: a slow server's late original is how the port learns
    /// that its hedges were spurious.
    fn reset_quiet(&mut self, now: Instant) {
        while let Some(&Reverse((at, i))) = self.quiet_watch.peek() {
            if at > now {
                return;
            }
            self.quiet_watch.pop();
            let c = &self.conns[i];
            if c.inflight.is_empty() || !owes_only_cancelled(c) {
                continue;
            }
            let due = c.quiet_since + QUIET_RESET_AFTER;
            if due > now {
                self.quiet_watch.push(Reverse((due, i)));
            } else if self.sched.port_is_lossy(now) {
                let why = format!("{} reset: it owed only cancelled responses and was silent", c.server);
                self.reset_conn(i, why);
            } else {
                // Looked at again later: the port may report loss by then.
                self.quiet_watch.push(Reverse((now + QUIET_RESET_AFTER, i)));
            }
        }
    }

    fn pop_inflight(&mut self, i: usize, id: u64) -> Result<Inflight, String> {
        let c = &mut self.conns[i];
        match c.inflight.front() {
            Some(f) if f.req == id => Ok(c.inflight.pop_front().expect("front exists")),
            _ => Err(format!("{} answered request {id} out of order", c.server)),
        }
    }

    /// Marks connection `i` unusable and fails every live request on it.
    fn break_conn(&mut self, i: usize, why: String) {
        self.end_conn(i, why, false);
    }

    /// Marks connection `i` unusable; its live requests are lost with it, not failed: the
    /// scheduler may ask their server again ([`Scheduler::on_lost`](incast_core::Scheduler::on_lost)).
    fn lose_conn(&mut self, i: usize, why: String) {
        self.end_conn(i, why, true);
    }

    /// Marks connection `i` unusable and reports every live request on it as `lost` (the
    /// connection went) or failed (the server answered wrongly, or left the client).
    fn end_conn(&mut self, i: usize, why: String, lost: bool) {
        let now = Instant::now();
        let c = &mut self.conns[i];
        c.broken = true;
        let gone: Vec<GrantId> = c.inflight.drain(..).filter_map(|f| f.grant).collect();
        if !gone.is_empty() {
            crate::trace::event!(debug, server = %c.server, requests = gone.len(), cause = %why, "connection lost");
            self.last_cause = why;
        }
        for g in gone {
            self.grant_conn.remove(&g);
            let _ = if lost {
                self.sched.on_lost(now, g)
            } else {
                self.sched.on_failed(now, g)
            };
        }
    }

    /// The destination, once the read is over.
    pub(super) fn into_dest(self) -> Dest<'a> {
        self.dest
    }

    /// Returns clean, idle connections to the pool, hands those that owe only cancelled
    /// responses to a drain (see [`drain`]), and drops the rest.
    pub(super) fn release_connections(&mut self) {
        let mut idle = self.client.idle.lock().unwrap_or_else(|e| e.into_inner());
        let mut owing = Vec::new();
        for c in self.conns.drain(..) {
            let clean = matches!(c.rx, Rx::Header { have: 0, .. }) && c.tls.as_ref().is_none_or(Session::is_idle);
            // A server that left or moved during the read keeps no pooled connection.
            let member = self.client.addr_of(c.server) == Some(c.addr);
            if !c.broken && c.inflight.is_empty() && c.out.is_empty() && clean && member {
                // Those idle past the pool's timeout go when the pool is next asked for this
                // server and lane, or when a read sweeps it (`Client::take_idle`).
                idle.entry((c.server, c.lane))
                    .or_default()
                    .push(Conn { waiting: false, ..c });
            } else if !c.inflight.is_empty() && member {
                owing.push(c);
            } else if !c.inflight.is_empty() {
                abort_on_drop(&c.stream);
            }
        }
        drop(idle);
        for c in owing {
            let home = drain::Home::of(
                &self.client.idle,
                &self.client.counters,
                self.client.membership.subscribe(),
            );
            drain::start(c, home);
        }
    }
}

/// Whether `e` says the connection went (reset, aborted, closed under a write, cut short)
/// rather than that its peer said something wrong: its requests may be asked again.
fn is_lost(e: &io::Error) -> bool {
    use io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof | NotConnected | TimedOut
    )
}

/// Makes the socket's close an abort (SO_LINGER 0: the kernel sends a reset). For a
/// connection dropped while its server still owes it bytes (the cancelled original of a
/// hedge, usually): closed normally, the server's socket would keep retransmitting its lost
/// tail to a client that no longer wants it, and take a kernel RTO 200 ms later; the reset
/// ends that socket at once. Best effort: a refusal leaves an ordinary close.
fn abort_on_drop(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

/// The read-ending error behind a failed read of a TLS connection: the server refused this
/// client's certificate. `None` for anything else (and always without the `tls` feature).
#[cfg_attr(not(feature = "tls"), allow(unused_variables))]
fn refused(e: &io::Error, server: ServerId, addr: SocketAddr) -> Option<FanInError> {
    #[cfg(feature = "tls")]
    return crate::tls::failure_of_io(e, server, addr).map(FanInError::Tls);
    #[cfg(not(feature = "tls"))]
    None
}

/// The TLS settings a connection is opened with (none without the `tls` feature).
#[cfg(feature = "tls")]
type TlsSettings = Option<crate::tls::TlsClientConfig>;
#[cfg(not(feature = "tls"))]
type TlsSettings = Option<()>;

/// Opens a tuned connection (options that shape the window are set before the handshake),
/// and runs the TLS handshake on it when the client has TLS settings. The caller bounds the
/// time.
#[cfg_attr(not(feature = "tls"), allow(unused_variables))]
async fn connect(
    server: ServerId,
    addr: SocketAddr,
    tuning: &SocketTuning,
    tls: TlsSettings,
) -> Result<Opened, OpenError> {
    let failed = |e: io::Error| {
        let why = format!("connecting to {server} at {addr}: {e}");
        match e.raw_os_error() {
            Some(nix::libc::EMFILE | nix::libc::ENFILE) => OpenError::NoDescriptor(why),
            _ => OpenError::Failed(why),
        }
    };
    let (stream, report) = handshake(server, addr, tuning).await.map_err(failed)?;
    // Receive timestamps say how long a response's first bytes waited for the client (see
    // `Conn::waited`); a socket that refuses them reads without.
    let _ = crate::sys::receive_timestamps(stream.as_fd());
    #[cfg(feature = "tls")]
    if let Some(cfg) = tls {
        return match crate::tls::connect_tcp(stream, &cfg, server, addr).await {
            Ok((stream, session)) => Ok((stream, Some(session), report)),
            Err(e) if e.is_permanent() => Err(OpenError::Fatal(FanInError::Tls(e))),
            Err(e) => Err(OpenError::Failed(e.to_string())),
        };
    }
    Ok((stream, None, report))
}

/// How long a TCP handshake waits for its SYN-ACK before the client tries again from the
/// same local port (50 ms): well over a handshake through a full shallow port (under 20 ms
/// on the testbed, 1 Gbit/s), far under the second Linux waits before it sends a SYN again.
pub(crate) const HANDSHAKE_RETRY_AFTER: Duration = Duration::from_millis(50);

/// Handshakes tried from the same local port before the last one waits for the kernel's own
/// timers (3).
const HANDSHAKE_ATTEMPTS: u32 = 3;

/// Opens a TCP connection to `addr`, tuned before its SYN; a handshake without an answer
/// within [`HANDSHAKE_RETRY_AFTER`] is tried again from the same local port.
///
/// Why: a SYN-ACK lost at the full port in front of the client is sent again only when the
/// server's handshake timer fires, a second later (Linux's initial RTO; the client's own
/// SYN goes again at the same time). The connection waits that second, and the server's
/// host counts the timer as a kernel RTO: on the testbed, beside bulk flows, half the host
/// RTOs at 100 Mbit/s (docs/measurements.md, *Twenty-sixth session*). A new socket bound to
/// the same port sends a SYN with a new initial sequence number. The server still holds the
/// half-open request for that port and answers with an ACK of the old one; the client's
/// kernel answers that with a reset, which removes the request (`EmbryonicRsts` on the
/// server, no timeout), and, seeing an ACK it did not expect before any SYN went twice,
/// sends its SYN again two ticks later (`tcp_rcv_synsent_state_process`: a previous
/// connection's lingering state is what it is built for). That SYN meets no request and
/// opens the connection. Measured in two namespaces, SYN-ACKs dropped for the first 50 ms:
/// the connection opened after 71-88 ms with no timeout on the server, against 1.004 s and
/// one timeout without. On the testbed (100 Mbit/s, 32 KiB port, 2 bulk flows, 16 and 64 x
/// 32 and 256 KiB x 1 and 4 reads, three alternated pairs of runs): SYN-ACKs sent again
/// 1, 0 and 0 per run against 11, 16 and 21; host RTOs 13, 13 and 11 against 12, 17 and 18
/// (the rest are data RTOs); the reads' share 41.3-43.0% against 42.4-42.9%.
///
/// What it costs: the timer that sends the SYN again two ticks later is the client's
/// retransmission timer, and Linux counts its firing as an RTO (`TCPTimeouts`) in the
/// client's namespace. By the kernel's counters the retry moves the lost handshake's RTO
/// from the server (a second) to the client (8 ms at HZ 250); it does not remove it. Traced
/// on the testbed (100 Mbit/s, bulk flows), each of the client's RTOs in a run was a retried
/// handshake (docs/measurements.md, *Twenty-seventh session*).
///
/// The old socket stays open until the new one is bound, so the port cannot be taken
/// meanwhile; when it cannot be bound again the old socket is waited for. A path that
/// tracks connections by their ISN (a stateful firewall) may drop the new SYN; the third
/// try then waits for the kernel's timers, as every handshake did before.
async fn handshake(
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))] server: ServerId,
    addr: SocketAddr,
    tuning: &SocketTuning,
) -> io::Result<(TcpStream, TuningReport)> {
    let mut previous: Option<(TcpStream, TuningReport)> = None;
    for attempt in 1..=HANDSHAKE_ATTEMPTS {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        socket.set_nonblocking(true)?;
        socket.set_reuse_address(true)?;
        let report = tuning.apply(&socket);
        if let Some((old, _)) = &previous {
            #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
            let Ok(local) = old
                .local_addr()
                .and_then(|local| socket.bind(&local.into()).map(|()| local))
            else {
                break;
            };
            crate::trace::event!(debug, server = %server, attempt, local_port = local.port(), "handshake tried again from the same port");
        }
        // The old socket closes quietly (a socket that never connected sends nothing).
        drop(previous.take());
        match socket.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(nix::libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        let stream = TcpStream::from_std(std::net::TcpStream::from(socket))?;
        if attempt == HANDSHAKE_ATTEMPTS {
            previous = Some((stream, report));
            break;
        }
        match tokio::time::timeout(HANDSHAKE_RETRY_AFTER, stream.writable()).await {
            Ok(ready) => return ready.and_then(|()| connected(stream, report)),
            // Connected after all, its readiness not yet seen (a busy runtime): closing it
            // now would hand the server a connection that ends before its first byte.
            Err(_) if stream.peer_addr().is_ok() => return connected(stream, report),
            Err(_) => previous = Some((stream, report)),
        }
    }
    // The last attempt, or one whose port could not be bound again: the kernel's timers
    // (and the caller's connect timeout) decide.
    let (stream, report) = previous.expect("a handshake was started");
    stream.writable().await?;
    connected(stream, report)
}

/// A socket whose handshake ended (it became writable): the stream, or why it failed.
fn connected(stream: TcpStream, report: TuningReport) -> io::Result<(TcpStream, TuningReport)> {
    match stream.take_error()? {
        Some(e) => Err(e),
        None => Ok((stream, report)),
    }
}

/// Reads the rest of a control frame's payload into `buf` (which holds what arrived so far)
/// with `read`, keeping only the bytes read.
fn fill_control(
    header: &Header,
    buf: &mut Vec<u8>,
    read: impl FnOnce(&mut [u8]) -> io::Result<usize>,
) -> io::Result<usize> {
    let have = buf.len();
    buf.resize(header.len as usize, 0);
    let r = read(&mut buf[have..]);
    buf.truncate(have + *r.as_ref().unwrap_or(&0));
    r
}

/// A live connection whose every outstanding response was cancelled (hedged away): nothing
/// it still owes is wanted, so resetting it loses no live grant.
fn owes_only_cancelled(c: &Conn) -> bool {
    !c.broken && c.inflight.iter().all(|f| f.grant.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(rtos: u32, retransmits: u32) -> Option<TcpCounters> {
        Some(TcpCounters {
            rtos,
            retransmits,
            ..TcpCounters::default()
        })
    }

    fn start(rtos: u32, retransmits: u32) -> Option<StartCounters> {
        Some(StartCounters { retransmits, rtos })
    }

    #[tokio::test]
    async fn a_handshake_without_an_answer_is_tried_again_within_milliseconds() {
        // A listener whose accept queue is full drops SYNs, as a full port drops SYN-ACKs:
        // the kernel alone would send the SYN again only after a second. The queue frees 20
        // ms in; the try 50 ms in gets through (or the last, 100 ms in, if both timers fire
        // in one turn of a loaded runtime). The queue is freed on the test's own runtime, so
        // its timer cannot lag the handshake's: freed from a thread, it lagged past both
        // tries once on a loaded 2-core machine and the handshake took the kernel's second.
        let l = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        l.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
        l.listen(0).unwrap();
        let addr = l.local_addr().unwrap().as_socket().unwrap();
        let filler = std::net::TcpStream::connect(addr).unwrap();
        let began = Instant::now();
        let freer = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            // The filler waits in the queue: this accept returns at once.
            l.accept().unwrap()
        };
        let tuning = SocketTuning::default();
        let (shaken, taken) = tokio::join!(handshake(ServerId(0), addr, &tuning), freer);
        let (stream, _) = shaken.unwrap();
        let took = began.elapsed();
        assert_eq!(stream.peer_addr().unwrap(), addr);
        assert!(took < Duration::from_millis(600), "took {took:?}: no second try");
        drop((filler, taken, l));
    }

    #[tokio::test]
    async fn a_handshake_refused_fails_at_once_and_typed() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = free.local_addr().unwrap();
        drop(free);
        let err = handshake(ServerId(0), addr, &SocketTuning::default())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn an_end_splits_its_counters_at_its_responses_start() {
        let split = |own, earlier| Split { own, earlier };
        // Last `End` at (1 RTO, 4 retransmits); 2 and 3 more before this response began, 1
        // and 2 while it was served.
        assert_eq!(Split::of(tcp(4, 9), start(3, 7), tcp(1, 4)), split((1, 2), (2, 3)));
        // A server without start counters: everything since the last `End` is this one's.
        assert_eq!(Split::of(tcp(4, 9), None, tcp(1, 4)), split((3, 5), (0, 0)));
        // A new connection: its counters start at 0.
        assert_eq!(Split::of(tcp(2, 2), start(1, 1), None), split((1, 1), (1, 1)));
        assert_eq!(Split::of(tcp(2, 2), None, None), split((2, 2), (0, 0)));
        // No counters: nothing to split.
        assert_eq!(Split::of(None, start(5, 5), tcp(1, 1)), Split::default());
        // Counters that went backwards (a lying or restarted server) count as no change, and
        // a start past the end is not trusted.
        assert_eq!(Split::of(tcp(1, 1), start(0, 0), tcp(5, 5)), split((1, 1), (0, 0)));
        assert_eq!(Split::of(tcp(4, 4), start(9, 0), tcp(1, 1)), split((3, 3), (0, 0)));
    }
}
