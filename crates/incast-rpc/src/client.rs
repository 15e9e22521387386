//! The client: a connection pool and [`Client::fan_in_read`], which drives the sans-IO
//! [`incast_core::Scheduler`] over real sockets; with [`Sharing::Port`] (the default) every
//! concurrent read's scheduler lives in the client's one [`incast_core::Receiver`] (see the
//! `port` module).
//!
//! # How a read runs
//!
//! One task drives the whole read. It asks the scheduler for grants, writes requests on the
//! primary or spare connection of each server (connecting on demand, with the socket tuned
//! before the handshake), then waits on the readiness of every connection with a response
//! due, on a [`HrTimer`] set to the scheduler's next deadline, and on the read's deadline.
//! When a connection is readable it parses frames in place: the bytes of a `Data` frame are
//! read straight into the block at the offset the scheduler gives (one buffer, no copy beyond
//! the kernel's), the CRC32C is updated on the way, and `End` confirms the grant only if the
//! checksum matches. Bytes of a cancelled (hedged) request go to a scratch buffer and are
//! dropped. Why one task and not one per connection: per-connection tasks would need shared
//! mutable access to the block (or a copy out of their own buffers); a read is bound by the
//! link, not by one core, and concurrent reads still spread over the runtime's threads.
//!
//! # Over QUIC
//!
//! With [`Transport::Quic`] every grant, and with [`Transport::TcpWithQuicFallback`] every
//! hedge (and every later grant to a server that needed one in this read), runs as a request
//! task on its own QUIC stream instead (see the `quic` module, feature `quic`). The task
//! parses the response and sends the driver batches of payload over a channel; the driver
//! copies them into the block, checks the CRC32C and tells the scheduler exactly as for TCP
//! bytes, so hedging, budgets and the hedge budget work the same over both transports. One
//! copy is the cost: quinn decrypts into its own buffers, so there is no reading straight into
//! the block as over TCP.
//!
//! # Failure and cancellation
//!
//! A connection that closes, resets or sends a malformed frame fails every request on it; the
//! scheduler retries them on a replica or ends the read with an error naming the server. A
//! read that passes its deadline ends with [`FanInError::Timeout`] naming the servers it was
//! still waiting on. Connections go back to the pool only when they are idle and in a clean
//! state; dropping the future of a read drops its connections, so the client stays usable.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use incast_core::receiver::{PortReport, ReadOptions, ReceiverConfig, ReceiverStats};
use incast_core::{Action, Delivery, GrantId, GrantKind, Lane, Policy, ReadError, SchedulerStats};
use incast_core::{RttEstimator, ServerId, Stripe};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::port::{Port, ReadSched, SharedRead, Sharing};
use crate::timer::HrTimer;
use crate::tune::{rearm_quickack, SocketTuning, TuningReport};
use crate::wire::{self, ErrorCode, Frame, Header, Kind, TcpCounters, WireError, HEADER_LEN};

/// Default deadline of one read (10 s).
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default connect timeout (2 s).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default largest block a read may allocate (4 GiB).
pub const DEFAULT_MAX_BLOCK_BYTES: u64 = 4 << 30;
/// Bytes read per `try_read` into the scratch buffer of a cancelled request.
const SCRATCH: usize = 64 * 1024;
/// Capacity of a read's channel of stream events (QUIC payload batches and ends).
const STREAM_EVENTS: usize = 256;

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
    len: u64,
    received: u64,
    crc: u32,
    task: tokio::task::AbortHandle,
}

/// Which transport a client's requests take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transport {
    /// Every request over TCP.
    #[default]
    Tcp,
    /// Every request over QUIC (feature `quic`): one stream per request, loss recovery in
    /// user space. Needs [`ClientConfigBuilder::quic`].
    #[cfg(feature = "quic")]
    Quic,
    /// Requests over TCP; hedges (a grant that stalled past the RTO) over QUIC, so a TCP flow
    /// waiting for its 200 ms kernel RTO is overtaken in milliseconds. Once a server needed a
    /// hedge, its other requests of that read go over QUIC too (its TCP connection is stuck
    /// behind the lost segment). QUIC connections are opened in the background when a read
    /// starts. Needs [`ClientConfigBuilder::quic`].
    #[cfg(feature = "quic")]
    TcpWithQuicFallback,
}

impl Transport {
    /// Whether this transport sends anything over QUIC.
    pub fn uses_quic(self) -> bool {
        self != Transport::Tcp
    }
}

/// Client settings. Build with [`ClientConfig::builder`].
#[derive(Clone, Debug)]
pub struct ClientConfig {
    read_timeout: Duration,
    connect_timeout: Duration,
    max_block_bytes: u64,
    tuning: SocketTuning,
    rearm_quickack: bool,
    verify_checksums: bool,
    transport: Transport,
    sharing: Sharing,
    receiver: ReceiverConfig,
    port_hint: Option<(u64, u64)>,
    #[cfg(feature = "quic")]
    quic: Option<crate::quic::QuicClientConfig>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfigBuilder::default().build().expect("defaults are valid")
    }
}

impl ClientConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> ClientConfigBuilder {
        ClientConfigBuilder::default()
    }
    /// Deadline of one read.
    pub fn read_timeout(&self) -> Duration {
        self.read_timeout
    }
    /// The transport.
    pub fn transport(&self) -> Transport {
        self.transport
    }
    /// How concurrent reads share the port.
    pub fn sharing(&self) -> Sharing {
        self.sharing
    }
    /// The client-wide receiver's settings (used with [`Sharing::Port`]).
    pub fn receiver(&self) -> &ReceiverConfig {
        &self.receiver
    }
}

/// Why a client configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientConfigError {
    /// A value is outside its range.
    #[error("client config field `{field}` = {value} is out of range: allowed {allowed}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value given.
        value: String,
        /// The allowed range.
        allowed: &'static str,
    },
    /// The transport uses QUIC but no [`ClientConfigBuilder::quic`] settings were given (there
    /// is no default trust).
    #[error("transport {transport:?} needs quic settings: call ClientConfigBuilder::quic")]
    MissingQuic {
        /// The transport asked for.
        transport: Transport,
    },
}

/// Builds a [`ClientConfig`].
#[derive(Clone, Debug)]
pub struct ClientConfigBuilder {
    cfg: ClientConfig,
}

impl Default for ClientConfigBuilder {
    fn default() -> Self {
        Self {
            cfg: ClientConfig {
                read_timeout: DEFAULT_READ_TIMEOUT,
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                max_block_bytes: DEFAULT_MAX_BLOCK_BYTES,
                tuning: SocketTuning::client(),
                rearm_quickack: true,
                verify_checksums: true,
                transport: Transport::Tcp,
                sharing: Sharing::Port,
                receiver: ReceiverConfig::default(),
                port_hint: None,
                #[cfg(feature = "quic")]
                quic: None,
            },
        }
    }
}

impl ClientConfigBuilder {
    /// Deadline of one read. Default [`DEFAULT_READ_TIMEOUT`]; range 1 ms ..= 1 hour.
    pub fn read_timeout(mut self, d: Duration) -> Self {
        self.cfg.read_timeout = d;
        self
    }
    /// Connect timeout. Default [`DEFAULT_CONNECT_TIMEOUT`]; range 1 ms ..= 1 minute.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.cfg.connect_timeout = d;
        self
    }
    /// Largest block a read may allocate, bytes. Default [`DEFAULT_MAX_BLOCK_BYTES`]; range
    /// 1 ..= 2^40.
    pub fn max_block_bytes(mut self, n: u64) -> Self {
        self.cfg.max_block_bytes = n;
        self
    }
    /// Socket options of client connections. Default [`SocketTuning::client`]. The policy's
    /// window cap, when on, overrides `recv_buffer` and `window_clamp`.
    pub fn tuning(mut self, t: SocketTuning) -> Self {
        self.cfg.tuning = t;
        self
    }
    /// Re-arm TCP_QUICKACK after every batch of reads on a connection (Linux clears it after
    /// one ACK). Default on.
    pub fn rearm_quickack(mut self, on: bool) -> Self {
        self.cfg.rearm_quickack = on;
        self
    }
    /// Check the CRC32C of every response that carries one. Default on.
    pub fn verify_checksums(mut self, on: bool) -> Self {
        self.cfg.verify_checksums = on;
        self
    }
    /// The transport. Default [`Transport::Tcp`].
    pub fn transport(mut self, t: Transport) -> Self {
        self.cfg.transport = t;
        self
    }
    /// How concurrent reads share the client's port. Default [`Sharing::Port`]: one
    /// client-wide receiver.
    pub fn sharing(mut self, s: Sharing) -> Self {
        self.cfg.sharing = s;
        self
    }
    /// The client-wide receiver's settings. Default [`ReceiverConfig::default`]: a 64 KiB
    /// starting budget that adapts to what the reads measure. Replaced by
    /// [`ClientConfigBuilder::port_hint`] when that is given.
    pub fn receiver(mut self, r: ReceiverConfig) -> Self {
        self.cfg.receiver = r;
        self
    }
    /// The rate of the client's port in bits per second and the buffer of the switch port
    /// in front of it in bytes, if known: the receiver starts from
    /// [`incast_core::model::recommend`]'s budget ([`ReceiverConfig::for_port`]) instead of
    /// the default. Default none; rate > 0.
    pub fn port_hint(mut self, rate_bps: u64, buffer_bytes: u64) -> Self {
        self.cfg.port_hint = Some((rate_bps, buffer_bytes));
        self
    }
    /// QUIC settings: whom to trust and how to tune connections (feature `quic`). Required by
    /// the QUIC transports.
    #[cfg(feature = "quic")]
    pub fn quic(mut self, q: crate::quic::QuicClientConfig) -> Self {
        self.cfg.quic = Some(q);
        self
    }
    /// Checks every field.
    pub fn build(self) -> Result<ClientConfig, ClientConfigError> {
        let c = &self.cfg;
        #[cfg(feature = "quic")]
        if c.transport.uses_quic() && c.quic.is_none() {
            return Err(ClientConfigError::MissingQuic { transport: c.transport });
        }
        let ms = Duration::from_millis(1);
        let bad = |field, value: String, allowed| Err(ClientConfigError::OutOfRange { field, value, allowed });
        if c.read_timeout < ms || c.read_timeout > Duration::from_secs(3600) {
            return bad("read_timeout", format!("{:?}", c.read_timeout), "1 ms..=1 h");
        }
        if c.connect_timeout < ms || c.connect_timeout > Duration::from_secs(60) {
            return bad("connect_timeout", format!("{:?}", c.connect_timeout), "1 ms..=60 s");
        }
        if c.max_block_bytes == 0 || c.max_block_bytes > 1 << 40 {
            return bad("max_block_bytes", c.max_block_bytes.to_string(), "1..=2^40");
        }
        let mut cfg = self.cfg;
        if let Some((rate, buffer)) = cfg.port_hint {
            cfg.receiver = ReceiverConfig::for_port(rate, buffer).map_err(|e| ClientConfigError::OutOfRange {
                field: "port_hint",
                value: format!("{rate} bit/s, {buffer} bytes ({e})"),
                allowed: "rate > 0",
            })?;
        }
        Ok(cfg)
    }
}

/// Why a read failed. Nothing of the block is returned with an error: never a short block.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FanInError {
    /// The stripe names a server the client has no address for.
    #[error("{server} has no address in this client")]
    UnknownServer {
        /// The server.
        server: ServerId,
    },
    /// The block is larger than [`ClientConfigBuilder::max_block_bytes`] allows.
    #[error("block of {len} bytes exceeds this client's limit of {max} bytes")]
    BlockTooLarge {
        /// Block length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A fragment could not be read from any of its servers.
    #[error("{source}; last cause: {cause}")]
    Failed {
        /// The scheduler's verdict, naming the fragment and server.
        source: ReadError,
        /// What went wrong on the last failed request, as seen on the wire.
        cause: String,
    },
    /// The read passed its deadline.
    #[error("read timed out after {after:?}, still waiting on {}", list(waiting_on))]
    Timeout {
        /// The deadline.
        after: Duration,
        /// Servers with requests outstanding at the deadline.
        waiting_on: Vec<ServerId>,
    },
    /// The high-resolution timer could not be created or armed.
    #[error("timer: {0}")]
    Timer(#[source] io::Error),
    /// QUIC could not be used: a refused certificate, the server's stream limit, a TLS or
    /// endpoint setup problem. (A lost QUIC connection is retried like a lost TCP one.)
    #[cfg(feature = "quic")]
    #[error(transparent)]
    Quic(#[from] crate::quic::QuicError),
}

fn list(servers: &[ServerId]) -> String {
    servers.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// What happened to one fragment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FragmentReport {
    /// The server whose bytes were kept last (a replica, if the read moved there).
    pub server: Option<ServerId>,
    /// Bytes of the fragment.
    pub bytes: u64,
    /// Grants issued for it (chunks, hedges and retries).
    pub grants: u32,
    /// Hedges fired for it.
    pub hedges: u32,
    /// Time from the start of the read to its first byte.
    pub first_byte: Option<Duration>,
    /// Time from the start of the read to its last confirmed byte.
    pub done: Option<Duration>,
    /// Kernel RTOs the serving sockets took while serving it (Linux 6.7+ servers).
    pub kernel_rtos: u32,
    /// Segments the serving sockets retransmitted while serving it.
    pub retransmits: u32,
}

/// What a read did.
#[derive(Clone, Debug, Default)]
pub struct ReadReport {
    /// Wall time of the read, connects included.
    pub elapsed: Duration,
    /// One entry per fragment, in stripe order.
    pub fragments: Vec<FragmentReport>,
    /// The scheduler's counters.
    pub stats: SchedulerStats,
    /// Sum of the fragments' kernel RTOs.
    pub kernel_rtos: u64,
    /// Sum of the fragments' retransmits.
    pub retransmits: u64,
    /// Connections opened by this read (the rest came from the pool).
    pub connects: u32,
    /// Responses whose CRC32C did not match (re-requested).
    pub checksum_failures: u32,
    /// Bytes of cancelled requests drained and dropped.
    pub drained_bytes: u64,
    /// TCP_QUICKACK re-arms the kernel refused.
    pub quickack_errors: u64,
    /// Requests sent over QUIC.
    pub quic_requests: u32,
    /// Packets quinn declared lost on the servers' side of the QUIC connections, as the
    /// servers reported them (counted once per server connection, like `retransmits`).
    pub quic_lost_packets: u64,
    /// Loss-recovery episodes (quinn's congestion events) on the servers' side of the QUIC
    /// connections: QUIC's counterpart of `kernel_rtos`.
    pub quic_loss_events: u64,
    /// What the client's port did during the read ([`Sharing::Port`] only): the budget's
    /// range, queueing-delay samples, time waiting for admission.
    pub port: Option<PortReport>,
}

/// A read's result: the block, in one buffer, and the report.
#[derive(Debug)]
pub struct ReadOutput {
    /// The block: every byte of every fragment, in stripe order.
    pub block: Vec<u8>,
    /// What happened.
    pub report: ReadReport,
}

/// The client: server addresses and a pool of idle connections (a primary and a spare per
/// server). Cheap to share: wrap it in an `Arc`; concurrent reads use separate connections.
/// It also carries the RTT estimate from one read to the next, so the application-level RTO
/// of a read reflects the path's queueing, not the initial RTO or a few empty-queue samples.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use incast_core::{Policy, ServerId, Stripe};
/// use incast_rpc::Client;
/// let client = Client::new([(ServerId(0), "10.0.0.1:7000".parse()?), (ServerId(1), "10.0.0.2:7000".parse()?)]);
/// let stripe = Stripe::fixed_block("block-9", &[ServerId(0), ServerId(1)], 1 << 20)?;
/// let out = client.fan_in_read(&stripe, &Policy::default()).await?;
/// assert_eq!(out.block.len(), 1 << 20);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Client {
    addrs: HashMap<ServerId, SocketAddr>,
    config: ClientConfig,
    #[cfg(feature = "quic")]
    quic: Option<Arc<crate::quic::QuicClient>>,
    idle: Mutex<HashMap<(ServerId, Lane), Vec<Conn>>>,
    last_tuning: Mutex<Option<String>>,
    reads: AtomicU64,
    /// RTT estimate carried from read to read (reads alone; the port carries its own).
    rtt: Mutex<Option<RttEstimator>>,
    /// The client-wide receiver, with [`Sharing::Port`].
    port: Option<Arc<Port>>,
}

impl Client {
    /// A client for these servers, with the default configuration.
    pub fn new(addrs: impl IntoIterator<Item = (ServerId, SocketAddr)>) -> Self {
        Self::with_config(addrs, ClientConfig::default())
    }

    /// A client for these servers.
    pub fn with_config(addrs: impl IntoIterator<Item = (ServerId, SocketAddr)>, config: ClientConfig) -> Self {
        Self {
            addrs: addrs.into_iter().collect(),
            #[cfg(feature = "quic")]
            quic: config
                .quic
                .clone()
                .map(|q| Arc::new(crate::quic::QuicClient::new(q, config.connect_timeout))),
            port: (config.sharing == Sharing::Port).then(|| Arc::new(Port::new(config.receiver.clone()))),
            config,
            idle: Mutex::new(HashMap::new()),
            last_tuning: Mutex::new(None),
            rtt: Mutex::new(None),
            reads: AtomicU64::new(0),
        }
    }

    /// The tuning report of the most recent connection this client opened, as text.
    pub fn tuning_report(&self) -> Option<String> {
        self.last_tuning.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The UDP socket buffer sizes (receive, send) the kernel granted this client's QUIC
    /// endpoint, once it exists.
    #[cfg(feature = "quic")]
    pub fn quic_udp_buffers(&self) -> Option<(usize, usize)> {
        self.quic.as_ref().and_then(|q| q.udp_buffers())
    }

    /// Idle pooled TCP connections.
    pub fn idle_connections(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(Vec::len)
            .sum()
    }

    /// The client-wide receiver's counters (budget, outstanding bytes, measured base RTT and
    /// rate, decreases), with [`Sharing::Port`].
    pub fn port_stats(&self) -> Option<ReceiverStats> {
        self.port.as_ref().map(|p| p.stats())
    }

    /// Reads the block `stripe` describes, under `policy`. Returns the block in one buffer
    /// and a report, or an error naming what failed; never a short or partial block.
    /// Concurrent reads of one client share its port ([`Sharing`]).
    pub async fn fan_in_read(&self, stripe: &Stripe, policy: &Policy) -> Result<ReadOutput, FanInError> {
        self.fan_in_read_with(stripe, policy, ReadOptions::default()).await
    }

    /// [`Client::fan_in_read`] with a per-read priority: under [`Sharing::Port`], a read of
    /// higher priority is served before reads of lower priority that are not yet aged.
    pub async fn fan_in_read_with(
        &self,
        stripe: &Stripe,
        policy: &Policy,
        opts: ReadOptions,
    ) -> Result<ReadOutput, FanInError> {
        let start = Instant::now();
        if stripe.block_len() > self.config.max_block_bytes {
            return Err(FanInError::BlockTooLarge {
                len: stripe.block_len(),
                max: self.config.max_block_bytes,
            });
        }
        for f in stripe.fragments() {
            for s in std::iter::once(f.server()).chain(f.replicas().iter().copied()) {
                if !self.addrs.contains_key(&s) {
                    return Err(FanInError::UnknownServer { server: s });
                }
            }
        }
        let seed = self.reads.fetch_add(1, Ordering::Relaxed) ^ (u64::from(std::process::id()) << 32);
        #[cfg(feature = "quic")]
        if let (Transport::TcpWithQuicFallback, Some(q)) = (self.config.transport, &self.quic) {
            let flow = crate::quic::Flow::of(policy);
            for s in stripe.fragments().iter().map(|f| f.server()) {
                q.prewarm(s, self.addrs[&s], flow);
            }
        }
        let (events_tx, events) = mpsc::channel(STREAM_EVENTS);
        let mut d = Driver {
            client: self,
            stripe,
            sched: match &self.port {
                Some(port) => ReadSched::Shared(SharedRead::start(port.clone(), start, stripe, policy, seed, opts)),
                None => ReadSched::own(
                    stripe,
                    policy,
                    seed,
                    self.rtt.lock().unwrap_or_else(|e| e.into_inner()).clone(),
                ),
            },
            block: vec![0u8; stripe.block_len() as usize],
            scratch: Vec::new(),
            conns: Vec::new(),
            by_lane: HashMap::new(),
            grant_conn: HashMap::new(),
            readable: FuturesUnordered::new(),
            tuning: self.tuning_for(policy),
            report: ReadReport {
                fragments: vec![FragmentReport::default(); stripe.len()],
                ..ReadReport::default()
            },
            start,
            last_cause: String::new(),
            streams: HashMap::new(),
            tasks: JoinSet::new(),
            events,
            events_tx,
            #[cfg(feature = "quic")]
            flow: crate::quic::Flow::of(policy),
            #[cfg(feature = "quic")]
            fell_back: Default::default(),
        };
        let result = d.run().await;
        d.report.elapsed = start.elapsed();
        if let Some(rtt) = d.sched.rtt_to_carry() {
            *self.rtt.lock().unwrap_or_else(|e| e.into_inner()) = Some(rtt);
        }
        (d.report.stats, d.report.port) = d.sched.finish();
        d.release_connections();
        result?;
        Ok(ReadOutput {
            block: std::mem::take(&mut d.block),
            report: std::mem::take(&mut d.report),
        })
    }

    fn tuning_for(&self, policy: &Policy) -> SocketTuning {
        let mut t = self.config.tuning.clone();
        if let Some(cap) = policy.window_cap_bytes() {
            t.recv_buffer = Some(cap);
            t.window_clamp = Some(cap);
        }
        t
    }

    fn take_idle(&self, key: (ServerId, Lane)) -> Option<Conn> {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&key)
            .and_then(Vec::pop)
    }
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
    len: u64,
    received: u64,
    crc: u32,
}

#[derive(Debug)]
enum Rx {
    Header { buf: [u8; HEADER_LEN], have: usize },
    Data { id: u64, left: u32 },
    Control { header: Header, buf: Vec<u8> },
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
struct Conn {
    server: ServerId,
    lane: Lane,
    stream: Arc<TcpStream>,
    rx: Rx,
    inflight: VecDeque<Inflight>,
    out: Vec<u8>,
    next_req: u64,
    counters: Option<TcpCounters>,
    broken: bool,
    waiting: bool,
}

type Ready = Pin<Box<dyn Future<Output = usize> + Send>>;

struct Driver<'a> {
    client: &'a Client,
    stripe: &'a Stripe,
    sched: ReadSched,
    block: Vec<u8>,
    scratch: Vec<u8>,
    conns: Vec<Conn>,
    by_lane: HashMap<(ServerId, Lane), usize>,
    grant_conn: HashMap<GrantId, usize>,
    readable: FuturesUnordered<Ready>,
    tuning: SocketTuning,
    report: ReadReport,
    start: Instant,
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
}

/// What a burst of reading on one connection ended with.
enum Outcome {
    /// No more bytes for now.
    Idle,
    /// The connection is unusable; the string says why.
    Broken(String),
}

impl Driver<'_> {
    async fn run(&mut self) -> Result<(), FanInError> {
        let mut timer = HrTimer::new().map_err(FanInError::Timer)?;
        let deadline = self.start + self.client.config.read_timeout;
        let overall = tokio::time::sleep_until(deadline.into());
        tokio::pin!(overall);
        let routed = self.sched.notify();
        loop {
            self.perform_actions().await;
            if self.sched.is_finished() {
                break;
            }
            // Re-arm only when the deadline moves earlier (or the timer is idle): a timer that
            // fires early costs one spurious wake-up, a syscall per event costs more.
            let next = self.sched.poll_timeout();
            if timer.deadline().is_none_or(|armed| next.is_some_and(|n| n < armed)) {
                timer.set(next).map_err(FanInError::Timer)?;
            }
            tokio::select! {
                // The port routed an action to this read (another read freed room).
                _ = async { routed.as_ref().expect("guarded").notified().await }, if routed.is_some() => {}
                Some(i) = self.readable.next() => {
                    self.conns[i].waiting = false;
                    self.on_readable(i);
                }
                Some(ev) = self.events.recv() => {
                    self.on_stream_event(ev)?;
                    // Drain what else is queued before polling the rest again.
                    while let Ok(ev) = self.events.try_recv() {
                        self.on_stream_event(ev)?;
                    }
                    while self.tasks.try_join_next().is_some() {}
                }
                fired = timer.fired() => {
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
                    waiting_on.sort_unstable();
                    waiting_on.dedup();
                    return Err(FanInError::Timeout { after: self.client.config.read_timeout, waiting_on });
                }
            }
        }
        if let Some(err) = self.sched.error() {
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
                    if self.over_quic(&g) {
                        self.start_stream(&g);
                        continue;
                    }
                    let i = match self.conn(g.server, g.lane).await {
                        Ok(i) => i,
                        Err(cause) => {
                            self.last_cause = cause;
                            let _ = self.sched.on_failed(Instant::now(), g.id);
                            continue;
                        }
                    };
                    let fr = &mut self.report.fragments[g.fragment];
                    fr.grants += 1;
                    fr.hedges += u32::from(g.kind == GrantKind::Hedge);
                    let c = &mut self.conns[i];
                    let req = c.next_req;
                    c.next_req += 1;
                    let key = self.stripe.fragment(g.fragment).key();
                    wire::encode_request(&mut c.out, req, key, g.object_offset, g.len);
                    c.inflight.push_back(Inflight {
                        req,
                        grant: Some(g.id),
                        cancelled: None,
                        fragment: g.fragment,
                        block_offset: g.block_offset,
                        len: g.len,
                        received: 0,
                        crc: 0,
                    });
                    self.grant_conn.insert(g.id, i);
                    touched.push(i);
                }
                Action::Cancel { id, .. } => {
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
                    }
                }
            }
        }
        for i in touched {
            self.flush(i).await;
            self.watch(i);
        }
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
        let fr = &mut self.report.fragments[g.fragment];
        fr.grants += 1;
        fr.hedges += u32::from(g.kind == GrantKind::Hedge);
        self.report.quic_requests += 1;
        let req = crate::quic::StreamRequest {
            grant: g.id,
            server: g.server,
            addr: self.client.addrs[&g.server],
            flow: self.flow,
            key: self.stripe.fragment(g.fragment).key().to_owned(),
            offset: g.object_offset,
            len: g.len,
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
                    self.block[at..at + c.len()].copy_from_slice(c);
                    s.crc = crc32c::crc32c_append(s.crc, c);
                    s.received += c.len() as u64;
                }
                let n = s.received - start;
                let fragment = s.fragment;
                if n > 0 {
                    if let Err(e) = self.sched.on_bytes(now, g, n) {
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
                    self.last_cause = why;
                    let _ = self.sched.on_failed(now, g);
                }
            }
            StreamEventKind::Refused { code, message } => {
                self.streams.remove(&g);
                self.last_cause = format!("{server} answered {code:?}: {message}");
                let _ = self.sched.on_failed(now, g);
            }
            StreamEventKind::Failed(why) => self.fail_stream(g, why),
            StreamEventKind::Fatal(e) => return Err(e),
        }
        Ok(())
    }

    /// Ends stream grant `g` as failed.
    fn fail_stream(&mut self, g: GrantId, why: String) {
        if let Some(s) = self.streams.remove(&g) {
            s.task.abort();
        }
        self.last_cause = why;
        let _ = self.sched.on_failed(Instant::now(), g);
    }

    /// The connection for (server, lane): this read's, a pooled one, or a new one.
    async fn conn(&mut self, server: ServerId, lane: Lane) -> Result<usize, String> {
        if let Some(&i) = self.by_lane.get(&(server, lane)) {
            if !self.conns[i].broken {
                return Ok(i);
            }
        }
        let conn = match self.client.take_idle((server, lane)) {
            Some(c) => c,
            None => {
                let addr = self.client.addrs[&server];
                let (stream, report) = connect(addr, &self.tuning, self.client.config.connect_timeout)
                    .await
                    .map_err(|e| format!("connecting to {server} at {addr}: {e}"))?;
                *self.client.last_tuning.lock().unwrap_or_else(|e| e.into_inner()) = Some(report.to_string());
                self.report.connects += 1;
                Conn {
                    server,
                    lane,
                    stream: Arc::new(stream),
                    rx: Rx::new(),
                    inflight: VecDeque::new(),
                    out: Vec::new(),
                    next_req: 1,
                    counters: None,
                    broken: false,
                    waiting: false,
                }
            }
        };
        self.conns.push(conn);
        let i = self.conns.len() - 1;
        self.by_lane.insert((server, lane), i);
        Ok(i)
    }

    /// Writes what is queued for connection `i`. Requests are small; the socket buffer has
    /// room in practice, and when it has not, the write waits (requests must not be lost).
    async fn flush(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if c.out.is_empty() || c.broken {
            return;
        }
        let mut written = 0;
        while written < c.out.len() {
            match c.stream.try_write(&c.out[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Err(e) = c.stream.writable().await {
                        return self.break_conn(i, format!("writing to {}: {e}", self.conns[i].server));
                    }
                }
                Err(e) => return self.break_conn(i, format!("writing to {}: {e}", self.conns[i].server)),
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
        self.readable.push(Box::pin(async move {
            let _ = stream.readable().await;
            i
        }));
    }

    /// Reads whatever the connections with responses due already have.
    fn read_ready(&mut self) {
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if c.broken || c.inflight.is_empty() {
                continue;
            }
            if let Outcome::Broken(why) = self.read_conn(i) {
                self.break_conn(i, why);
            }
        }
    }

    fn on_readable(&mut self, i: usize) {
        match self.read_conn(i) {
            Outcome::Idle => {
                if self.client.config.rearm_quickack && rearm_quickack(self.conns[i].stream.as_ref()).is_err() {
                    self.report.quickack_errors += 1;
                }
                self.watch(i);
            }
            Outcome::Broken(why) => self.break_conn(i, why),
        }
    }

    /// Reads and handles frames from connection `i` until the socket has nothing more.
    fn read_conn(&mut self, i: usize) -> Outcome {
        let server = self.conns[i].server;
        loop {
            let c = &mut self.conns[i];
            let r = match &mut c.rx {
                Rx::Header { buf, have } => c.stream.try_read(&mut buf[*have..]),
                Rx::Control { header, buf } => {
                    let have = buf.len();
                    let want = header.len as usize - have;
                    buf.resize(have + want, 0);
                    let r = c.stream.try_read(&mut buf[have..]);
                    buf.truncate(have + *r.as_ref().unwrap_or(&0));
                    r
                }
                Rx::Data { id, left } => {
                    let Some(f) = c.inflight.front() else {
                        return Outcome::Broken(format!("{server} sent data for request {id}, none is pending"));
                    };
                    if f.req != *id {
                        return Outcome::Broken(format!("{server} sent data for request {id}, expected {}", f.req));
                    }
                    let room = (f.len - f.received).min(u64::from(*left)) as usize;
                    if room < *left as usize {
                        return Outcome::Broken(format!("{server} sent more data than request {id} asked for"));
                    }
                    if f.grant.is_some() {
                        let at = (f.block_offset + f.received) as usize;
                        c.stream.try_read(&mut self.block[at..at + room])
                    } else {
                        self.scratch.resize(SCRATCH, 0);
                        let n = room.min(SCRATCH);
                        c.stream.try_read(&mut self.scratch[..n])
                    }
                }
            };
            let n = match r {
                Ok(0) => return Outcome::Broken(format!("{server} closed the connection")),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Outcome::Idle,
                Err(e) => return Outcome::Broken(format!("reading from {server}: {e}")),
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
        let server = c.server;
        match &mut c.rx {
            Rx::Header { buf, have } => {
                *have += n;
                if *have < HEADER_LEN {
                    return Ok(());
                }
                let h = Header::decode(buf).map_err(|e| format!("{server}: {e}"))?;
                c.rx = match h.kind {
                    Kind::Data => Rx::Data { id: h.id, left: h.len },
                    Kind::End | Kind::Error => Rx::Control {
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
            Rx::Data { left, .. } => {
                *left -= n as u32;
                let done = *left == 0;
                let f = c.inflight.front_mut().expect("checked before reading");
                if let Some(g) = f.grant {
                    let at = (f.block_offset + f.received) as usize;
                    f.crc = crc32c::crc32c_append(f.crc, &self.block[at..at + n]);
                    f.received += n as u64;
                    let fragment = f.fragment;
                    match self.sched.on_bytes(now, g, n as u64) {
                        Ok(Delivery::Write { block_offset }) => debug_assert_eq!(block_offset as usize, at),
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
                    self.last_cause = format!("{server} answered {code:?}: {message}");
                    self.grant_conn.remove(&g);
                    let _ = self.sched.on_failed(now, g);
                }
                Ok(())
            }
            Frame::End {
                id,
                crc32c,
                counters,
                cancelled,
            } => {
                let f = self.pop_inflight(i, id)?;
                let c = &mut self.conns[i];
                let (rtos, retrans) = match (counters, c.counters) {
                    (Some(new), Some(old)) => (
                        new.rtos.saturating_sub(old.rtos),
                        new.retransmits.saturating_sub(old.retransmits),
                    ),
                    (Some(new), None) => (new.rtos, new.retransmits),
                    _ => (0, 0),
                };
                if counters.is_some() {
                    c.counters = counters;
                }
                // Counted for cancelled requests too: a hedged request's RTO is still one the
                // port took (and the read may have waited for it before the hedge).
                let fr = &mut self.report.fragments[f.fragment];
                fr.kernel_rtos += rtos;
                fr.retransmits += retrans;
                self.report.kernel_rtos += u64::from(rtos);
                self.report.retransmits += u64::from(retrans);
                self.sched.on_loss(now, u64::from(retrans), u64::from(rtos));
                let Some(g) = f.grant else {
                    if let Some(orig) = f.cancelled.filter(|_| !cancelled && f.received == f.len) {
                        // The original of a hedge ended whole: the scheduler counts it spurious.
                        let _ = self.sched.on_done(now, orig);
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
            self.last_cause = if !checksum_ok {
                self.report.checksum_failures += 1;
                format!("{server}: checksum mismatch on {} bytes{over}", got.len)
            } else {
                let kind = if quic { "quic response" } else { "response" };
                format!("{server} ended a {kind} after {} of {} bytes", got.received, got.len)
            };
            let _ = self.sched.on_failed(now, g);
            return Ok(());
        }
        self.sched.on_done(now, g).map_err(|e| format!("{server}: {e}"))?;
        let fr = &mut self.report.fragments[got.fragment];
        fr.server = Some(server);
        fr.bytes += got.len;
        fr.done = Some(now - self.start);
        Ok(())
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
        let now = Instant::now();
        let c = &mut self.conns[i];
        c.broken = true;
        let lost: Vec<GrantId> = c.inflight.drain(..).filter_map(|f| f.grant).collect();
        if !lost.is_empty() {
            self.last_cause = why;
        }
        for g in lost {
            self.grant_conn.remove(&g);
            let _ = self.sched.on_failed(now, g);
        }
    }

    /// Returns clean, idle connections to the pool; drops the rest.
    fn release_connections(&mut self) {
        let mut idle = self.client.idle.lock().unwrap_or_else(|e| e.into_inner());
        for c in self.conns.drain(..) {
            let clean = matches!(c.rx, Rx::Header { have: 0, .. });
            if !c.broken && c.inflight.is_empty() && c.out.is_empty() && clean {
                idle.entry((c.server, c.lane))
                    .or_default()
                    .push(Conn { waiting: false, ..c });
            }
        }
    }
}

/// Opens a tuned connection: options that shape the window are set before the handshake.
async fn connect(addr: SocketAddr, tuning: &SocketTuning, timeout: Duration) -> io::Result<(TcpStream, TuningReport)> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    let report = tuning.apply(&socket);
    let stream = tokio::time::timeout(timeout, socket.connect(addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {timeout:?}")))??;
    Ok((stream, report))
}
