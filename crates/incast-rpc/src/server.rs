//! The fragment server: serves a [`FragmentStore`] over the [wire format](crate::wire).
//!
//! One task per connection reads requests and answers them in order: the bytes in `Data`
//! frames of at most [`ServerConfig::data_frame_bytes`], then an `End` with the CRC32C of the
//! response and the socket's TCP_INFO counters (so the client can report how many kernel RTOs
//! the server's side of the connection took). A missing key or range gets an `Error` frame
//! for that request, not a dropped connection. A `Cancel` stops a queued or running response
//! at the next frame boundary.
//!
//! Bounds: at most [`ServerConfig::max_connections`] connections (one more is told `Busy` and
//! closed), at most [`ServerConfig::max_outstanding`] queued requests per connection (beyond
//! that the server stops reading the socket, so TCP pushes back), requests of at most
//! [`ServerConfig::max_request_bytes`]. A malformed frame gets a connection-level `Error` and
//! the connection is closed; other connections are not affected. An `accept` the kernel
//! refuses for want of descriptors or memory is tried again after [`ACCEPT_BACKOFF`] instead
//! of at once (the listener stays readable meanwhile, and the loop spun a core).
//!
//! **Read-ahead.** Requests are answered in order, but a request that arrives while others are
//! queued ahead of it has its store read started at once (in a task of its own unless the
//! store answers at the first poll), up to [`ServerConfig::read_ahead_bytes`] per
//! connection: the store's latency (a disk's) overlaps
//! the responses ahead instead of adding up behind them. Why: a client that pipelines
//! grants (up to 4 per fragment by default) paid each grant's store latency one after another. On
//! loopback, 16 servers answering 256 KiB fragments in 16 KiB grants after a 1 ms store
//! delay each took 455 ms a read, 5 ms took 1.5 s; see docs/measurements.md, *Forty-first
//! session* (30-40 ms and 24-40 ms with read-ahead). A request with nothing ahead of it is
//! read when its turn comes, as before, and so is every request of a connection whose
//! store answered its last read ahead at once, but one in 16 (a store in
//! memory gains nothing from it). Over TCP and TLS; QUIC answers each request on a
//! stream of its own, at once.
//!
//! **The store's time.** A plain TCP response's first `Data` frame carries the server's hold
//! of its request, and where the store's read kept the response waiting 50 us or more a
//! `StoreTime` frame before it says how long: a client learns slow stores from that part
//! only, since the rest of a hold (this host's CPU, its other requests) grows with what the
//! client asks for (see [`crate::wire`], *The store's part of the hold*).
//!
//! **Where the `End` goes.** An `End` in a segment of its own is a tail-loss probe for
//! free: when a response's last data segment is lost, the `End` behind it draws the SACK
//! that repairs it at once, where otherwise the kernel's loss probe (two round trips, at
//! least 10 ms on Linux) or the RTO would. But it costs a system call and a packet per
//! response, on the server and through the path, and where the host's CPU is the limit that
//! is a large part of a small response. Measured on the 2-core testbed (docs/measurements.md,
//! *Sixth session*): the `End` always in the last data write lifted 1 KiB fragments from
//! 1024 senders from 37-42% to 51-62% of the line rate, but beside 2 bulk flows the reads
//! fell to 0.12-0.49 of it with more hedges. So the `End` rides with the data only where the
//! connection shows no loss: after [`MERGED_END_AFTER`] responses in a row that began with
//! no retransmit nor RTO on the socket since the one before (its TCP_INFO counters, read at
//! each response's start anyway for [`StartCounters`]). Any loss
//! ends the run; a loss that ends a run long enough to have merged doubles the run the
//! connection needs next (at most [`MAX_MERGED_END_AFTER`]), so a connection whose merged
//! tails keep being lost goes back to separate `End`s, as TCP backs its timer off. Over TCP
//! and TLS; a QUIC response's `End` is always a write of its own. [`ServerStats::merged_ends`]
//! counts them. Measured on the same testbed (docs/measurements.md, *Fifty-fourth
//! session*, alternated with the `End` always apart): the rows of 4 KiB fragments read 0.647
//! of the line rate over 36 row-runs against 0.607 over 30, and the 1 KiB rows 0.164
//! against 0.145, at 7% and 10% less CPU per GiB; beside 2 bulk flows the reads kept their
//! share (51.8-54.0% against 53.8%) with no kernel RTO. The cost: in the CPU-bound rows
//! about twice the hedges (still at most 0.14% of their grants), more of them won, and over
//! the 1 Gbit/s grid of 8-1024 senders 1.7 times the switch drops, with no kernel RTO.
//!
//! An `OpenRequest` (a fragment of unknown length) is answered with a `Length` frame, then as
//! much of the range as exists. Its size comes from [`FragmentStore::size`], or, with a query,
//! from the answer of [`FragmentStore::query`]: answers are at most
//! [`ServerConfig::max_answer_bytes`] and are kept for [`ServerConfig::answer_ttl`] in a cache
//! of [`ServerConfig::answer_cache_bytes`], so a long answer read in several requests is
//! computed once.

use std::collections::HashSet;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use crate::answers::Answers;
use crate::store::{FragmentStore, StoreError};
use crate::tcpinfo::TcpInfo;
use crate::tune::SocketTuning;
use crate::wire::{
    ErrorCode, Frame, Header, Kind, StartCounters, TcpCounters, WireError, HEADER_LEN, MAX_CONTROL_PAYLOAD,
    MAX_DATA_PAYLOAD, MIN_STORE_TIME_US,
};

/// Default connection limit (1024).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default queued requests per connection (64).
pub const DEFAULT_MAX_OUTSTANDING: usize = 64;
/// Default largest request (64 MiB).
pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 64 << 20;
/// Default data frame size (256 KiB).
pub const DEFAULT_DATA_FRAME_BYTES: u32 = 256 << 10;
/// Default time the rest of a frame may take once its first byte arrived (10 s).
pub const DEFAULT_FRAME_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time `shutdown` lets running requests finish (5 s).
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Default largest query answer (64 MiB).
pub const DEFAULT_MAX_ANSWER_BYTES: u64 = 64 << 20;
/// Default bytes of query answers kept for later requests (64 MiB).
pub const DEFAULT_ANSWER_CACHE_BYTES: u64 = 64 << 20;
/// Default time a query answer is kept for later requests (10 s).
pub const DEFAULT_ANSWER_TTL: Duration = Duration::from_secs(10);
/// Default bytes of queued requests a connection reads from the store ahead of their turn
/// (2 MiB; see *Read-ahead* in the module docs).
pub const DEFAULT_READ_AHEAD_BYTES: u64 = 2 << 20;
/// How long the accept loop waits after the kernel refused to accept for want of a file
/// descriptor or memory (10 ms). The connection stays in the listener's backlog and the
/// listener stays readable, so accepting again at once spins a core until a descriptor
/// frees (hyper's server sleeps 1 s on such errors); the wait is short, as the client's
/// handshake has completed and its request is waiting.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// Why a server configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ServerConfigError {
    /// A value is outside its range.
    #[error("server config field `{field}` = {value} is out of range: allowed {allowed}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The allowed range.
        allowed: &'static str,
    },
}

/// Server settings. Build with [`ServerConfig::builder`].
#[derive(Clone, Debug)]
pub struct ServerConfig {
    max_connections: usize,
    max_outstanding: usize,
    max_request_bytes: u64,
    data_frame_bytes: u32,
    checksums: bool,
    tuning: SocketTuning,
    shutdown_grace: Duration,
    frame_timeout: Duration,
    max_answer_bytes: u64,
    answer_cache_bytes: u64,
    answer_ttl: Duration,
    read_ahead_bytes: u64,
    #[cfg(feature = "quic")]
    quic: Option<crate::quic::QuicServerConfig>,
    #[cfg(feature = "tls")]
    tls: Option<crate::tls::TlsServerConfig>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfigBuilder::default().build().expect("defaults are valid")
    }
}

impl ServerConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> ServerConfigBuilder {
        ServerConfigBuilder::default()
    }
    /// Connection limit.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }
    /// Queued requests per connection.
    pub fn max_outstanding(&self) -> usize {
        self.max_outstanding
    }
    /// Largest request in bytes.
    pub fn max_request_bytes(&self) -> u64 {
        self.max_request_bytes
    }
    /// Largest data frame in bytes.
    pub fn data_frame_bytes(&self) -> u32 {
        self.data_frame_bytes
    }
    /// Time the rest of a frame may take once it started (over QUIC: the request of a stream).
    pub fn frame_timeout(&self) -> Duration {
        self.frame_timeout
    }
    /// Time a shutdown lets running requests finish.
    pub fn shutdown_grace(&self) -> Duration {
        self.shutdown_grace
    }
    /// Largest query answer in bytes.
    pub fn max_answer_bytes(&self) -> u64 {
        self.max_answer_bytes
    }
    /// Bytes of query answers kept for later requests.
    pub fn answer_cache_bytes(&self) -> u64 {
        self.answer_cache_bytes
    }
    /// Time a query answer is kept for later requests.
    pub fn answer_ttl(&self) -> Duration {
        self.answer_ttl
    }
    /// Bytes of queued requests a connection reads from the store ahead of their turn.
    pub fn read_ahead_bytes(&self) -> u64 {
        self.read_ahead_bytes
    }
}

/// Builds a [`ServerConfig`].
#[derive(Clone, Debug)]
pub struct ServerConfigBuilder {
    cfg: ServerConfig,
}

impl Default for ServerConfigBuilder {
    fn default() -> Self {
        Self {
            cfg: ServerConfig {
                max_connections: DEFAULT_MAX_CONNECTIONS,
                max_outstanding: DEFAULT_MAX_OUTSTANDING,
                max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
                data_frame_bytes: DEFAULT_DATA_FRAME_BYTES,
                checksums: true,
                tuning: SocketTuning::server(),
                shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
                frame_timeout: DEFAULT_FRAME_TIMEOUT,
                max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
                answer_cache_bytes: DEFAULT_ANSWER_CACHE_BYTES,
                answer_ttl: DEFAULT_ANSWER_TTL,
                read_ahead_bytes: DEFAULT_READ_AHEAD_BYTES,
                #[cfg(feature = "quic")]
                quic: None,
                #[cfg(feature = "tls")]
                tls: None,
            },
        }
    }
}

impl ServerConfigBuilder {
    /// Most connections at once. Default [`DEFAULT_MAX_CONNECTIONS`]; range `1..=1_000_000`.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.cfg.max_connections = n;
        self
    }
    /// Most queued requests per connection. Default [`DEFAULT_MAX_OUTSTANDING`]; range `1..=65536`.
    pub fn max_outstanding(mut self, n: usize) -> Self {
        self.cfg.max_outstanding = n;
        self
    }
    /// Largest request in bytes. Default [`DEFAULT_MAX_REQUEST_BYTES`]; range `1..=2^30`.
    pub fn max_request_bytes(mut self, n: u64) -> Self {
        self.cfg.max_request_bytes = n;
        self
    }
    /// Largest data frame in bytes. Default [`DEFAULT_DATA_FRAME_BYTES`]; range `1..=2^20`.
    pub fn data_frame_bytes(mut self, n: u32) -> Self {
        self.cfg.data_frame_bytes = n;
        self
    }
    /// Send the CRC32C of every response in its `End`. Default on.
    pub fn checksums(mut self, on: bool) -> Self {
        self.cfg.checksums = on;
        self
    }
    /// Socket options for accepted connections. Default [`SocketTuning::server`]. The
    /// congestion control is also set on the listener, so that a connection is born under
    /// it rather than switched to it (a connection born under `bbr` keeps its pacing).
    pub fn tuning(mut self, t: SocketTuning) -> Self {
        self.cfg.tuning = t;
        self
    }
    /// How long [`ServerHandle::shutdown`] lets running requests finish. Default
    /// [`DEFAULT_SHUTDOWN_GRACE`]; range up to 1 hour.
    pub fn shutdown_grace(mut self, d: Duration) -> Self {
        self.cfg.shutdown_grace = d;
        self
    }
    /// How long the rest of a frame may take once its first byte has arrived; a peer that
    /// stalls mid-frame is disconnected. (An idle connection between frames is kept.)
    /// Default [`DEFAULT_FRAME_TIMEOUT`]; range 1 ms ..= 1 hour.
    pub fn frame_timeout(mut self, d: Duration) -> Self {
        self.cfg.frame_timeout = d;
        self
    }
    /// Largest answer a query handler may give, in bytes; a longer one is refused with
    /// `TooLarge`. Default [`DEFAULT_MAX_ANSWER_BYTES`]; range `0..=2^30`.
    pub fn max_answer_bytes(mut self, n: u64) -> Self {
        self.cfg.max_answer_bytes = n;
        self
    }
    /// Bytes of query answers kept for the later requests of the same query (0: none, every
    /// request runs the handler). Default [`DEFAULT_ANSWER_CACHE_BYTES`]; range `0..=2^36`.
    pub fn answer_cache_bytes(mut self, n: u64) -> Self {
        self.cfg.answer_cache_bytes = n;
        self
    }
    /// How long a query answer is kept. Default [`DEFAULT_ANSWER_TTL`]; range 1 ms ..= 1 hour.
    pub fn answer_ttl(mut self, d: Duration) -> Self {
        self.cfg.answer_ttl = d;
        self
    }
    /// Bytes of queued requests one connection may read from the store ahead of their turn
    /// (see *Read-ahead* in the [module docs](self)): memory per connection, at most this
    /// much. Default [`DEFAULT_READ_AHEAD_BYTES`]; range `0..=2^30`; 0 reads every request
    /// when its turn comes.
    pub fn read_ahead_bytes(mut self, n: u64) -> Self {
        self.cfg.read_ahead_bytes = n;
        self
    }
    /// Also serve QUIC, on UDP at the same port number as TCP (feature `quic`). Default off.
    /// The connection, stream and request bounds of this configuration apply to QUIC too.
    #[cfg(feature = "quic")]
    pub fn quic(mut self, q: crate::quic::QuicServerConfig) -> Self {
        self.cfg.quic = Some(q);
        self
    }
    /// Serve TCP over TLS 1.3 (feature `tls`), mutual when the configuration requires client
    /// certificates ([`crate::tls`]). The TCP port then speaks nothing else: a plaintext
    /// client's bytes fail the handshake. The handshake must end within
    /// [`ServerConfigBuilder::frame_timeout`]. Default off: plaintext, for trusted networks.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, t: crate::tls::TlsServerConfig) -> Self {
        self.cfg.tls = Some(t);
        self
    }
    /// Checks every field.
    pub fn build(self) -> Result<ServerConfig, ServerConfigError> {
        let c = &self.cfg;
        let check = |field, value: u64, lo: u64, hi: u64, allowed| {
            if value < lo || value > hi {
                Err(ServerConfigError::OutOfRange { field, value, allowed })
            } else {
                Ok(())
            }
        };
        check("max_connections", c.max_connections as u64, 1, 1_000_000, "1..=1000000")?;
        check("max_outstanding", c.max_outstanding as u64, 1, 65_536, "1..=65536")?;
        check("max_request_bytes", c.max_request_bytes, 1, 1 << 30, "1..=2^30")?;
        check(
            "data_frame_bytes",
            u64::from(c.data_frame_bytes),
            1,
            u64::from(MAX_DATA_PAYLOAD),
            "1..=2^20",
        )?;
        check("shutdown_grace", c.shutdown_grace.as_secs(), 0, 3600, "0..=3600 s")?;
        let frame_ms = c.frame_timeout.as_millis().min(u128::from(u64::MAX)) as u64;
        check("frame_timeout", frame_ms, 1, 3_600_000, "1 ms..=1 h")?;
        check("max_answer_bytes", c.max_answer_bytes, 0, 1 << 30, "0..=2^30")?;
        check("answer_cache_bytes", c.answer_cache_bytes, 0, 1 << 36, "0..=2^36")?;
        let ttl_ms = c.answer_ttl.as_millis().min(u128::from(u64::MAX)) as u64;
        check("answer_ttl", ttl_ms, 1, 3_600_000, "1 ms..=1 h")?;
        check("read_ahead_bytes", c.read_ahead_bytes, 0, 1 << 30, "0..=2^30")?;
        Ok(self.cfg)
    }
}

/// Counters of a running server.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections refused at the limit.
    pub refused: AtomicU64,
    /// Requests answered with data.
    pub requests: AtomicU64,
    /// Requests answered with an error frame.
    pub request_errors: AtomicU64,
    /// Connections closed for a protocol violation.
    pub protocol_errors: AtomicU64,
    /// Requests stopped by a cancel.
    pub cancelled: AtomicU64,
    /// Payload bytes sent.
    pub bytes: AtomicU64,
    /// Socket options the kernel refused (see [`ServerHandle::tuning_report`]).
    pub tuning_refusals: AtomicU64,
    /// TCP connections (with TLS) and QUIC connections whose handshake this server failed or
    /// that did not end within the frame timeout (a client without an accepted certificate, a
    /// plaintext client, a slow handshake).
    pub tls_refused: AtomicU64,
    /// TCP connections (with TLS) and QUIC connections that the client closed or reset
    /// before their handshake ended. Not a refusal: a client gives up a connection it is still
    /// opening when the read that wanted it ends first (a hedge's spare connection once the
    /// stalled response arrived), and a client that refuses the server's certificate closes
    /// a QUIC handshake itself.
    pub tls_abandoned: AtomicU64,
    /// Responses whose `End` rode in the write of their last `Data` frame, on a connection
    /// that showed no loss lately (see the module docs, *Where the `End` goes*).
    pub merged_ends: AtomicU64,
    /// Connections the kernel would not hand over (`accept` failed: out of file descriptors
    /// or memory, or the client reset it first); after one for want of resources the loop
    /// waits [`ACCEPT_BACKOFF`].
    pub accept_errors: AtomicU64,
}

/// A running server. Dropping the handle detaches the server: it keeps serving until the
/// runtime ends. Call [`ServerHandle::shutdown`] or [`ServerHandle::abort`] to stop it.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    accept: Option<JoinHandle<()>>,
    #[cfg(feature = "quic")]
    quic: Option<crate::quic::ServerTask>,
    stats: Arc<ServerStats>,
    tuning: Arc<Mutex<Option<String>>>,
}

impl ServerHandle {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
    /// Counters.
    pub fn stats(&self) -> &ServerStats {
        &self.stats
    }
    /// The tuning report of the most recent connection, as text.
    pub fn tuning_report(&self) -> Option<String> {
        self.tuning.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    /// The UDP socket buffer sizes (receive, send) the kernel granted the QUIC endpoint, if
    /// the server serves QUIC.
    #[cfg(feature = "quic")]
    pub fn quic_udp_buffers(&self) -> Option<(usize, usize)> {
        self.quic.as_ref().map(|q| q.udp_buffers)
    }
    /// Stops accepting, lets queued requests finish for up to the grace period, then closes
    /// every connection.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        if let Some(accept) = self.accept {
            let _ = accept.await;
        }
        #[cfg(feature = "quic")]
        if let Some(q) = self.quic {
            q.finish().await;
        }
    }
    /// Closes everything at once, as a crash would (clients see resets or EOF mid-response).
    pub fn abort(self) {
        if let Some(accept) = self.accept {
            accept.abort();
        }
        #[cfg(feature = "quic")]
        if let Some(q) = self.quic {
            q.abort();
        }
    }
}

/// Binds `addr` and serves `store` on the current tokio runtime.
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// use incast_rpc::{serve, MemStore, ServerConfig};
/// let store = MemStore::new();
/// store.insert("blk", vec![0u8; 1 << 20]);
/// let server = serve("127.0.0.1:0".parse().unwrap(), store, ServerConfig::default()).await?;
/// println!("serving on {}", server.local_addr());
/// server.shutdown().await;
/// # Ok(()) }
/// ```
///
/// With [`ServerConfigBuilder::quic`] it also serves QUIC on UDP at the same port number; when
/// `addr` has port 0 it picks a port free for both.
pub async fn serve<S: FragmentStore>(addr: SocketAddr, store: S, config: ServerConfig) -> io::Result<ServerHandle> {
    start(addr, store, config, true).await
}

/// Binds the TCP listener, with the tuning's congestion control set on it.
///
/// A connection takes its congestion control when it is established: the listener's if the
/// listener has one set, else the namespace's default. Set on the accepted socket only, a
/// connection born under `bbr` (this project's machines' default) and switched to `cubic`
/// keeps the internal pacing `bbr` turned on (Linux never clears `sk_pacing_status`), so
/// every response was paced by a per-socket timer: on loopback 12,000 pacing timers a
/// second, each an exit to the hypervisor on a VM. Set on the listener, a connection is
/// born under the requested algorithm. A refusal here is not an error: the accepted socket
/// tries again and reports it (`ServerHandle::tuning`).
async fn bind_tcp(addr: SocketAddr, tuning: &SocketTuning) -> io::Result<TcpListener> {
    let listener = TcpListener::bind(addr).await?;
    let congestion_only = SocketTuning {
        congestion: tuning.congestion.clone(),
        ..SocketTuning::default()
    };
    let _ = congestion_only.apply(&listener);
    Ok(listener)
}

/// Starts the TCP listener (if `tcp`) and the QUIC endpoint (if configured).
pub(crate) async fn start<S: FragmentStore>(
    addr: SocketAddr,
    store: S,
    config: ServerConfig,
    tcp: bool,
) -> io::Result<ServerHandle> {
    let (tx, rx) = watch::channel(false);
    let stats = Arc::new(ServerStats::default());
    let tuning = Arc::new(Mutex::new(None));
    let ctx = Arc::new(Ctx {
        store,
        answers: Answers::new(config.answer_cache_bytes, config.answer_ttl),
        cfg: config,
        stats: stats.clone(),
        tuning: tuning.clone(),
    });
    #[cfg(feature = "quic")]
    if let Some(q) = ctx.cfg.quic.clone() {
        // Port 0: take a TCP port, then the same UDP port; retry if UDP has it taken.
        let tries = if addr.port() == 0 && tcp { 32 } else { 1 };
        for attempt in 1..=tries {
            let listener = if tcp {
                Some(bind_tcp(addr, &ctx.cfg.tuning).await?)
            } else {
                None
            };
            let at = match &listener {
                Some(l) => l.local_addr()?,
                None => addr,
            };
            let quic = match crate::quic::spawn_server(at, ctx.clone(), &q, rx.clone()) {
                Ok(task) => task,
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && attempt < tries => continue,
                Err(e) => return Err(e),
            };
            let addr = quic.local_addr;
            let accept = listener.map(|l| tokio::spawn(accept_loop(l, ctx.clone(), rx.clone())));
            return Ok(ServerHandle {
                addr,
                shutdown: tx,
                accept,
                quic: Some(quic),
                stats,
                tuning,
            });
        }
        unreachable!("the last attempt returns");
    }
    if !tcp {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no transport to serve: the configuration has no quic settings",
        ));
    }
    let listener = bind_tcp(addr, &ctx.cfg.tuning).await?;
    let addr = listener.local_addr()?;
    let accept = tokio::spawn(accept_loop(listener, ctx, rx));
    Ok(ServerHandle {
        addr,
        shutdown: tx,
        accept: Some(accept),
        #[cfg(feature = "quic")]
        quic: None,
        stats,
        tuning,
    })
}

/// What every connection task of a server shares (TCP and QUIC alike).
pub(crate) struct Ctx<S> {
    pub(crate) store: S,
    pub(crate) answers: Answers,
    pub(crate) cfg: ServerConfig,
    pub(crate) stats: Arc<ServerStats>,
    tuning: Arc<Mutex<Option<String>>>,
}

/// Where a response is written: a TCP socket or a QUIC stream. `counters` fills the `End`
/// frame's transport counters, `at_start` its counters from the response's start.
pub(crate) trait Sink: AsyncWrite + Unpin + Send {
    fn counters(&self) -> Option<TcpCounters>;

    /// The counters when the response being written began ([`StartCounters`]); `None` where
    /// nobody took them.
    fn at_start(&self) -> Option<StartCounters> {
        None
    }

    /// The server's hold of the response being written, once: from its request's arrival to
    /// now (see [`crate::wire::Header::hold`]); `None` after the first call, and where the
    /// request's arrival is not known.
    fn take_hold(&mut self) -> Option<Duration> {
        None
    }

    /// Whether the response being written may send its `End` in the write of its last
    /// `Data` frame (see [`MERGED_END_AFTER`]); `false` where nobody decided.
    fn end_with_data(&self) -> bool {
        false
    }
}

/// A sink that took its socket's counters when the response it writes began, for the
/// `End` frame's `at_start` (see [`StartCounters`] for why). One TCP_INFO read per response
/// more, on the server.
struct Started<'a, W> {
    wr: &'a mut W,
    at_start: Option<StartCounters>,
    arrived: Option<SystemTime>,
    merge_end: bool,
}

impl<'a, W: Sink> Started<'a, W> {
    /// `arrived`: the request's receive timestamp; `ahead_done`: when the response ahead of
    /// it on the connection was written, the later of the two starts the hold (see
    /// [`crate::wire::Header::hold`]).
    fn new(wr: &'a mut W, arrived: Option<SystemTime>, ahead_done: Option<SystemTime>) -> Self {
        let at_start = wr.counters().map(|c| StartCounters::of(&c));
        let arrived = arrived.map(|a| ahead_done.map_or(a, |d| d.max(a)));
        Self {
            wr,
            at_start,
            arrived,
            merge_end: false,
        }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Started<'_, W> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut *self.get_mut().wr).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut *self.get_mut().wr).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.wr.is_write_vectored()
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut *self.get_mut().wr).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut *self.get_mut().wr).poll_shutdown(cx)
    }
}

impl<W: Sink> Sink for Started<'_, W> {
    fn counters(&self) -> Option<TcpCounters> {
        self.wr.counters()
    }

    fn at_start(&self) -> Option<StartCounters> {
        self.at_start
    }

    fn end_with_data(&self) -> bool {
        self.merge_end
    }

    fn take_hold(&mut self) -> Option<Duration> {
        // The receive timestamp is CLOCK_REALTIME: a clock stepped back reads as no hold.
        self.arrived
            .take()
            .map(|t| SystemTime::now().duration_since(t).unwrap_or_default())
    }
}

impl Sink for OwnedWriteHalf {
    fn counters(&self) -> Option<TcpCounters> {
        TcpInfo::of(self.as_ref()).ok().map(|i| i.counters())
    }
}

/// A [`Sink`] over a TCP socket (plaintext or TLS), whose socket options a response may set.
pub(crate) trait TcpSink: Sink {
    fn socket(&self) -> BorrowedFd<'_>;
}

impl TcpSink for OwnedWriteHalf {
    fn socket(&self) -> BorrowedFd<'_> {
        self.as_ref().as_fd()
    }
}

/// Resolves when the server is told to shut down. Never resolves once the handle was dropped
/// without a shutdown: the server is detached and keeps serving. Cancel-safe, for `select!`.
pub(crate) async fn shutdown_signal(rx: &mut watch::Receiver<bool>) {
    loop {
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        if *rx.borrow() {
            return;
        }
    }
}

async fn accept_loop<S: FragmentStore>(listener: TcpListener, ctx: Arc<Ctx<S>>, mut shutdown: watch::Receiver<bool>) {
    let limit = Arc::new(Semaphore::new(ctx.cfg.max_connections));
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown_signal(&mut shutdown) => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, _peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        ctx.stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                        if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)) {
                            tokio::time::sleep(ACCEPT_BACKOFF).await;
                        }
                        continue;
                    }
                };
                match limit.clone().try_acquire_owned() {
                    Ok(permit) => {
                        ctx.stats.connections.fetch_add(1, Ordering::Relaxed);
                        let (ctx, rx) = (ctx.clone(), shutdown.clone());
                        conns.spawn(async move {
                            connection(stream, ctx, rx).await;
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        ctx.stats.refused.fetch_add(1, Ordering::Relaxed);
                        conns.spawn(refuse(stream));
                    }
                }
            }
        }
    }
    drop(listener);
    let grace = ctx.cfg.shutdown_grace;
    let _ = tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
    // Dropping the JoinSet aborts what did not finish in time.
}

async fn refuse(mut stream: TcpStream) {
    let mut buf = Vec::new();
    Frame::Error {
        id: 0,
        code: ErrorCode::Busy,
        message: "connection limit reached".into(),
    }
    .encode(&mut buf);
    let _ = stream.write_all(&buf).await;
    let _ = stream.shutdown().await;
}

/// Slowest pacing rate a request may ask for (1 Mbit/s): slower asks are raised to it.
pub const MIN_PACE: u64 = 125_000;

enum Item {
    Request {
        id: u64,
        key: String,
        offset: u64,
        len: u64,
        pace: Option<u64>,
        /// An `OpenRequest`: its size limit and query.
        open: Option<(u64, Option<Bytes>)>,
        /// When the request's frame began to reach this host (its header's receive
        /// timestamp), if the socket stamps: the start of the server's hold.
        arrived: Option<SystemTime>,
        /// Its store read, started ahead of its turn (see *Read-ahead*).
        ahead: Option<ReadAhead>,
    },
    Refuse {
        id: u64,
        code: ErrorCode,
        message: String,
    },
    Fatal(WireError),
}

#[derive(Default)]
struct Pending {
    queued: HashSet<u64>,
    cancelled: HashSet<u64>,
    /// Bytes of the store reads started ahead whose requests the writer has not taken yet.
    ahead_bytes: u64,
    /// The last read started ahead was not ready at its first poll: the store takes time,
    /// and every queued request is read ahead. Else one in [`READ_AHEAD_PROBE`] is.
    store_slow: bool,
    /// Queued requests that could have been read ahead, for the probe.
    candidates: u64,
}

/// While a connection's store answers at once, one queued request in this many is read
/// ahead, to find out whether it still does: reading every one ahead cost the CPU-bound rows
/// of 4 KiB grants on the testbed about 1 CPU s per GiB and up to 8 points of the line rate,
/// for nothing (see *Read-ahead* in the module docs).
const READ_AHEAD_PROBE: u64 = 16;

/// What a store read gives: the bytes, or the error code and message to refuse with.
type ReadResult = Result<Bytes, (ErrorCode, String)>;

/// A store read started ahead of its request's turn: done at once (a store in memory), or
/// running in a task of its own, aborted if its request never takes it.
struct ReadAhead {
    /// Bytes it reads.
    len: u64,
    read: AheadRead,
}

enum AheadRead {
    Done(ReadResult),
    Running(AbortOnDrop),
}

/// A read-ahead task, aborted when dropped unused.
struct AbortOnDrop(tokio::task::JoinHandle<ReadResult>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl ReadAhead {
    /// Starts reading `len` bytes of `key` at `offset`. A read that is ready at its first
    /// poll (a store in memory) takes no task: spawning one per request cost the CPU-bound
    /// rows of 4 KiB grants 1-8 points of the line rate on the testbed.
    fn start<S: FragmentStore>(ctx: &Arc<Ctx<S>>, key: &str, offset: u64, len: u64) -> Self {
        let (c, k) = (ctx.clone(), key.to_owned());
        let mut read = Box::pin(async move { read_exact(&c, &k, offset, len).await });
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let read = match std::future::Future::poll(read.as_mut(), &mut cx) {
            std::task::Poll::Ready(r) => AheadRead::Done(r),
            // Polled again by the runtime, with its own waker.
            std::task::Poll::Pending => AheadRead::Running(AbortOnDrop(tokio::spawn(read))),
        };
        ReadAhead { len, read }
    }

    /// The read's bytes, or why it failed.
    async fn take(self) -> ReadResult {
        match self.read {
            AheadRead::Done(r) => r,
            AheadRead::Running(mut task) => match (&mut task.0).await {
                Ok(r) => r,
                Err(e) => Err((ErrorCode::Internal, format!("store read ahead of its turn failed: {e}"))),
            },
        }
    }
}

/// Starts the store read of plain request `item` now if another request is queued ahead of
/// it on its connection and the connection's read-ahead has room (see *Read-ahead*).
fn read_ahead<S: FragmentStore>(mut item: Item, ctx: &Arc<Ctx<S>>, pending: &Mutex<Pending>) -> Item {
    if let Item::Request {
        key,
        offset,
        len,
        open: None,
        ahead: ahead @ None,
        ..
    } = &mut item
    {
        let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
        // `queued` holds this request too: one more is ahead of it.
        if p.queued.len() >= 2 && p.ahead_bytes.saturating_add(*len) <= ctx.cfg.read_ahead_bytes {
            p.candidates += 1;
            if p.store_slow || p.candidates % READ_AHEAD_PROBE == 1 {
                p.ahead_bytes += *len;
                let a = ReadAhead::start(ctx, key, *offset, *len);
                p.store_slow = matches!(a.read, AheadRead::Running(_));
                *ahead = Some(a);
            }
        }
    }
    item
}

async fn connection<S: FragmentStore>(stream: TcpStream, ctx: Arc<Ctx<S>>, shutdown: watch::Receiver<bool>) {
    crate::trace::event!(
        trace,
        peer_port = stream.peer_addr().map_or(0, |a| a.port()),
        "accepted"
    );
    let report = ctx.cfg.tuning.apply(&stream);
    if !report.refused.is_empty() || !report.applied.is_empty() {
        ctx.stats
            .tuning_refusals
            .fetch_add(report.refused.len() as u64, Ordering::Relaxed);
        *ctx.tuning.lock().unwrap_or_else(|e| e.into_inner()) = Some(report.to_string());
    }
    #[cfg(feature = "tls")]
    if let Some(tls) = &ctx.cfg.tls {
        match crate::tls::accept_tcp(stream, tls, ctx.cfg.frame_timeout).await {
            Ok(stream) => {
                // Fails only when the process is out of descriptors: the connection closes.
                if let Ok((rd, wr)) = crate::tls::TlsWriter::split(stream) {
                    serve_stream(rd, wr, ctx, shutdown).await;
                }
            }
            Err(refused) => {
                let counter = if refused.abandoned() {
                    &ctx.stats.tls_abandoned
                } else {
                    &ctx.stats.tls_refused
                };
                counter.fetch_add(1, Ordering::Relaxed);
                refused.linger().await;
            }
        }
        return;
    }
    // The requests' receive timestamps time the server's hold (see `Header::hold`); a
    // socket that refuses them serves without.
    let _ = crate::sys::receive_timestamps(stream.as_fd());
    let (rd, wr) = stream.into_split();
    serve_stream(rd, wr, ctx, shutdown).await;
}

/// Serves requests on one connection (plaintext or TLS) until it ends.
async fn serve_stream<S: FragmentStore, R: RequestSource, W: TcpSink>(
    rd: R,
    wr: W,
    ctx: Arc<Ctx<S>>,
    shutdown: watch::Receiver<bool>,
) {
    let pending = Arc::new(Mutex::new(Pending::default()));
    let (tx, rx) = mpsc::channel(ctx.cfg.max_outstanding);
    let reader = read_requests(rd, tx, pending.clone(), &ctx, shutdown);
    let writer = write_responses(wr, rx, pending, &ctx);
    tokio::join!(reader, writer);
}

/// A stream of requests that may say when a request reached the host.
pub(crate) trait RequestSource: AsyncRead + Unpin {
    /// The TCP socket under it, if its receive timestamps are to be read (plaintext TCP).
    fn stamped(&self) -> Option<&TcpStream> {
        None
    }
}

impl RequestSource for OwnedReadHalf {
    fn stamped(&self) -> Option<&TcpStream> {
        Some(self.as_ref())
    }
}

/// TLS: the records' bytes do not map to requests one to one, so no stamps.
#[cfg(feature = "tls")]
impl<S: AsyncRead> RequestSource for tokio::io::ReadHalf<S> {}

/// Reads into `buf` as `rd.read` does, and if `stamp`, returns the kernel's receive
/// timestamp of what it read where `rd` has one. Cancel-safe, as `read` is.
async fn read_stamped<R: RequestSource>(
    rd: &mut R,
    buf: &mut [u8],
    stamp: bool,
) -> io::Result<(usize, Option<SystemTime>)> {
    if let Some(s) = rd.stamped().filter(|_| stamp) {
        loop {
            s.readable().await?;
            match s.try_io(Interest::READABLE, || crate::sys::recv_stamped(s.as_fd(), buf)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return r,
            }
        }
    }
    rd.read(buf).await.map(|n| (n, None))
}

/// Reads frames until EOF, an error, a protocol violation or shutdown. A frame's first
/// bytes are read with their receive timestamp where the stream has one: when the request
/// reached the host, for the server's hold (see [`crate::wire::Header::hold`]).
async fn read_requests<R: RequestSource, S: FragmentStore>(
    mut rd: R,
    tx: mpsc::Sender<Item>,
    pending: Arc<Mutex<Pending>>,
    ctx: &Arc<Ctx<S>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (max_request, frame_timeout) = (ctx.cfg.max_request_bytes, ctx.cfg.frame_timeout);
    let mut head = [0u8; HEADER_LEN];
    let mut payload = vec![0u8; MAX_CONTROL_PAYLOAD as usize];
    loop {
        // `read` is cancel-safe (`read_exact` is not): a shutdown signal arriving mid-header
        // must not lose the bytes already read.
        let mut have = 0;
        // Waiting for a new frame may take forever; the rest of a started one may not.
        let mut frame_deadline = tokio::time::Instant::now();
        // When the frame's first bytes reached the host: the start of the server's hold.
        let mut arrived = None;
        while have < HEADER_LEN {
            let n = tokio::select! {
                r = read_stamped(&mut rd, &mut head[have..], have == 0) => r,
                _ = tokio::time::sleep_until(frame_deadline), if have > 0 => return,
                _ = shutdown_signal(&mut shutdown) => return,
            };
            match n {
                Ok((0, _)) | Err(_) => return,
                Ok((n, at)) => {
                    if have == 0 {
                        frame_deadline = tokio::time::Instant::now() + frame_timeout;
                        arrived = at;
                    }
                    have += n;
                }
            }
        }
        let h = match Header::decode(&head) {
            Ok(h) if matches!(h.kind, Kind::Request | Kind::Cancel | Kind::OpenRequest) => h,
            Ok(h) => {
                let _ = tx.send(Item::Fatal(WireError::UnexpectedKind { kind: h.kind })).await;
                return;
            }
            Err(e) => {
                let _ = tx.send(Item::Fatal(e)).await;
                return;
            }
        };
        // Bounded by Header::decode: requests and cancels are control frames, an open
        // request's query at most MAX_QUERY_LEN (the buffer grows only for one that has it).
        if payload.len() < h.len as usize {
            payload.resize(h.len as usize, 0);
        }
        let body = &mut payload[..h.len as usize];
        match tokio::time::timeout_at(frame_deadline, rd.read_exact(body)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let item = match Frame::decode_payload(&h, Bytes::copy_from_slice(body)) {
            Err(e) => Item::Fatal(e),
            Ok(Frame::Cancel { id }) => {
                let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
                if p.queued.contains(&id) {
                    p.cancelled.insert(id);
                }
                continue;
            }
            Ok(Frame::Request {
                id,
                key,
                offset,
                len,
                pace,
            }) => read_ahead(
                request_item(&pending, max_request, id, key, offset, len, pace, None, arrived),
                ctx,
                &pending,
            ),
            Ok(Frame::OpenRequest {
                id,
                key,
                offset,
                len,
                limit,
                query,
                pace,
            }) => request_item(
                &pending,
                max_request,
                id,
                key,
                offset,
                len,
                pace,
                Some((limit, query)),
                arrived,
            ),
            Ok(_) => unreachable!("only requests and cancels pass the kind check"),
        };
        let fatal = matches!(item, Item::Fatal(_));
        if tx.send(item).await.is_err() || fatal {
            return;
        }
    }
}

/// A request as queued for the writer, or its refusal (a reused id, a request too large).
#[allow(clippy::too_many_arguments)]
fn request_item(
    pending: &Mutex<Pending>,
    max_request: u64,
    id: u64,
    key: String,
    offset: u64,
    len: u64,
    pace: Option<u64>,
    open: Option<(u64, Option<Bytes>)>,
    arrived: Option<SystemTime>,
) -> Item {
    let fresh = pending.lock().unwrap_or_else(|e| e.into_inner()).queued.insert(id);
    if !fresh {
        Item::Refuse {
            id,
            code: ErrorCode::BadRequest,
            message: format!("request id {id} is already in use"),
        }
    } else if len > max_request {
        Item::Refuse {
            id,
            code: ErrorCode::BadRequest,
            message: format!("request of {len} bytes exceeds this server's limit of {max_request}"),
        }
    } else {
        Item::Request {
            id,
            key,
            offset,
            len,
            pace,
            open,
            arrived,
            ahead: None,
        }
    }
}

async fn write_responses<S: FragmentStore, W: TcpSink>(
    mut wr: W,
    mut rx: mpsc::Receiver<Item>,
    pending: Arc<Mutex<Pending>>,
    ctx: &Ctx<S>,
) {
    let mut buf = Vec::with_capacity(256);
    // The pacing rate applied to the socket now (`None`: the configured one).
    let mut paced = None;
    // When the last response was written: a queued request's hold starts there.
    let mut ahead_done: Option<SystemTime> = None;
    let mut placement = EndPlacement::default();
    while let Some(item) = rx.recv().await {
        let result = match item {
            Item::Fatal(e) => {
                ctx.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
                let message = truncate(e.to_string());
                let _ = send(
                    &mut wr,
                    &mut buf,
                    Frame::Error {
                        id: 0,
                        code: ErrorCode::BadRequest,
                        message,
                    },
                )
                .await;
                break;
            }
            Item::Refuse { id, code, message } => {
                ctx.stats.request_errors.fetch_add(1, Ordering::Relaxed);
                pending.lock().unwrap_or_else(|e| e.into_inner()).queued.remove(&id);
                send(
                    &mut wr,
                    &mut buf,
                    Frame::Error {
                        id,
                        code,
                        message: truncate(message),
                    },
                )
                .await
            }
            Item::Request {
                id,
                key,
                offset,
                len,
                pace,
                open,
                arrived,
                ahead,
            } => {
                let pace = pace.map(|r| r.max(MIN_PACE));
                if pace != paced {
                    let rate = pace.or(ctx.cfg.tuning.max_pacing_rate).unwrap_or(u64::MAX);
                    if crate::tune::set_max_pacing_rate(&wr.socket(), rate).is_err() {
                        ctx.stats.tuning_refusals.fetch_add(1, Ordering::Relaxed);
                    }
                    paced = pace;
                }
                let cancelled = || {
                    pending
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .cancelled
                        .contains(&id)
                };
                // Each response's start and end, with the client's port (`INCAST_LOG=trace`).
                #[cfg(feature = "tracing")]
                let traced = tracing::enabled!(tracing::Level::TRACE)
                    .then(|| (peer_port(wr.socket()), std::time::Instant::now()));
                #[cfg(feature = "tracing")]
                if let Some((peer_port, _)) = traced {
                    tracing::trace!(peer_port, id, len, "serving");
                }
                let mut started = Started::new(&mut wr, arrived, ahead_done);
                started.merge_end = placement.merge_next(started.at_start);
                let r = match ahead {
                    Some(a) => {
                        pending.lock().unwrap_or_else(|e| e.into_inner()).ahead_bytes -= a.len;
                        respond_with(&mut started, &mut buf, &cancelled, ctx, id, a.take()).await
                    }
                    None => respond_any(&mut started, &mut buf, &cancelled, ctx, id, &key, offset, len, open).await,
                };
                #[cfg(feature = "tracing")]
                if let Some((peer_port, began)) = traced {
                    let took_us = began.elapsed().as_micros() as u64;
                    tracing::trace!(peer_port, id, len, queued = rx.len(), took_us, "served");
                }
                ahead_done = arrived.map(|_| SystemTime::now());
                let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
                p.queued.remove(&id);
                p.cancelled.remove(&id);
                r
            }
        };
        // Nothing for plaintext; TLS sends the records it still holds before waiting.
        if result.is_err() || (rx.is_empty() && wr.flush().await.is_err()) {
            break;
        }
    }
    let _ = wr.shutdown().await;
}

/// The remote port of a connection (0 once it is gone), for `trace` events.
#[cfg(feature = "tracing")]
fn peer_port(fd: BorrowedFd<'_>) -> u16 {
    socket2::SockRef::from(&fd)
        .peer_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map_or(0, |a| a.port())
}

/// Answers one request on `wr`: the data frames and an `End`, or an `Error` frame.
/// `cancelled` is asked before every frame.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn respond<S: FragmentStore, W: Sink>(
    wr: &mut W,
    buf: &mut Vec<u8>,
    cancelled: &(dyn Fn() -> bool + Sync),
    ctx: &Ctx<S>,
    id: u64,
    key: &str,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    respond_with(wr, buf, cancelled, ctx, id, read_exact(ctx, key, offset, len)).await
}

/// [`respond`] with the store read given: `read` (not polled if the request was
/// cancelled) gives the bytes, or the error to refuse the request with.
async fn respond_with<S: FragmentStore, W: Sink>(
    wr: &mut W,
    buf: &mut Vec<u8>,
    cancelled: &(dyn Fn() -> bool + Sync),
    ctx: &Ctx<S>,
    id: u64,
    read: impl std::future::Future<Output = ReadResult>,
) -> io::Result<()> {
    if cancelled() {
        ctx.stats.cancelled.fetch_add(1, Ordering::Relaxed);
        return send(wr, buf, end_frame(id, None, true, wr)).await;
    }
    let (read, store) = timed(read).await;
    match read {
        Ok(data) => send_data(wr, buf, cancelled, ctx, id, data, store).await,
        Err((code, message)) => refuse_request(wr, buf, ctx, id, code, message).await,
    }
}

/// Answers a request (`open: None`) or an open request (its size limit and query).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn respond_any<S: FragmentStore, W: Sink>(
    wr: &mut W,
    buf: &mut Vec<u8>,
    cancelled: &(dyn Fn() -> bool + Sync),
    ctx: &Ctx<S>,
    id: u64,
    key: &str,
    offset: u64,
    len: u64,
    open: Option<(u64, Option<Bytes>)>,
) -> io::Result<()> {
    match open {
        None => respond(wr, buf, cancelled, ctx, id, key, offset, len).await,
        Some((limit, query)) => {
            let req = OpenReq {
                id,
                key,
                offset,
                len,
                limit,
                query,
            };
            respond_open(wr, buf, cancelled, ctx, req).await
        }
    }
}

/// An `OpenRequest`, decoded.
pub(crate) struct OpenReq<'a> {
    pub(crate) id: u64,
    pub(crate) key: &'a str,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) limit: u64,
    pub(crate) query: Option<Bytes>,
}

/// Answers one `OpenRequest` on `wr`: a `Length` frame, the data frames of the part of the
/// range that exists, and an `End`; or an `Error` frame (nothing sent before it).
pub(crate) async fn respond_open<S: FragmentStore, W: Sink>(
    wr: &mut W,
    buf: &mut Vec<u8>,
    cancelled: &(dyn Fn() -> bool + Sync),
    ctx: &Ctx<S>,
    req: OpenReq<'_>,
) -> io::Result<()> {
    let OpenReq {
        id,
        key,
        offset,
        len,
        limit,
        query,
    } = req;
    if cancelled() {
        ctx.stats.cancelled.fetch_add(1, Ordering::Relaxed);
        return send(wr, buf, end_frame(id, None, true, wr)).await;
    }
    let read = async {
        let refusal = |e: StoreError| (code_of(&e), e.to_string());
        let (size, answer) = match query {
            Some(q) => {
                let a = answer(ctx, key, q, limit).await.map_err(refusal)?;
                (a.len() as u64, Some(a))
            }
            None => (ctx.store.size(key).await.map_err(refusal)?, None),
        };
        if size > limit {
            return Err(refusal(StoreError::TooLarge {
                key: key.to_owned(),
                size,
                limit,
            }));
        }
        let end = offset.saturating_add(len).min(size);
        let n = end.saturating_sub(offset);
        let data = match answer {
            Some(a) if n > 0 => a.slice(offset as usize..end as usize),
            None if n > 0 => read_exact(ctx, key, offset, n).await?,
            _ => Bytes::new(),
        };
        Ok((size, data))
    };
    let (read, store) = timed(read).await;
    let (size, data) = match read {
        Ok(got) => got,
        Err((code, message)) => return refuse_request(wr, buf, ctx, id, code, message).await,
    };
    send(wr, buf, Frame::Length { id, size }).await?;
    send_data(wr, buf, cancelled, ctx, id, data, store).await
}

/// The answer to `query` against `key`: cached, or computed (at most the server's answer
/// limit) and cached.
async fn answer<S: FragmentStore>(ctx: &Ctx<S>, key: &str, query: Bytes, limit: u64) -> Result<Bytes, StoreError> {
    let now = std::time::Instant::now();
    if let Some(a) = ctx.answers.get(key, &query, now) {
        return Ok(a);
    }
    let max = ctx.cfg.max_answer_bytes;
    let a = ctx.store.query(key, &query, limit.min(max)).await?;
    if a.len() as u64 > max {
        return Err(StoreError::TooLarge {
            key: key.to_owned(),
            size: a.len() as u64,
            limit: max,
        });
    }
    ctx.answers.insert(key, query, a.clone(), now);
    Ok(a)
}

fn end_frame<W: Sink>(id: u64, crc32c: Option<u32>, cancelled: bool, wr: &W) -> Frame {
    Frame::End {
        id,
        crc32c,
        counters: wr.counters(),
        at_start: wr.at_start(),
        cancelled,
    }
}

/// Refuses request `id` with `code`.
async fn refuse_request<S: FragmentStore, W: Sink>(
    wr: &mut W,
    buf: &mut Vec<u8>,
    ctx: &Ctx<S>,
    id: u64,
    code: ErrorCode,
    message: String,
) -> io::Result<()> {
    ctx.stats.request_errors.fetch_add(1, Ordering::Relaxed);
    let message = truncate(message);
    send(wr, buf, Frame::Error { id, code, message }).await
}

/// The wire code of a store error.
fn code_of(e: &StoreError) -> ErrorCode {
    match e {
        StoreError::NotFound { .. } => ErrorCode::NotFound,
        StoreError::OutOfRange { .. } => ErrorCode::OutOfRange,
        StoreError::BadKey { .. } => ErrorCode::BadRequest,
        StoreError::TooLarge { .. } => ErrorCode::TooLarge,
        StoreError::Unsupported { .. } => ErrorCode::Unsupported,
        _ => ErrorCode::Internal,
    }
}

/// Exactly `len` bytes of `key` from `offset`, or the refusal to send instead: a store that
/// returns another length is an internal error, never a short response.
async fn read_exact<S: FragmentStore>(ctx: &Ctx<S>, key: &str, offset: u64, len: u64) -> ReadResult {
    match ctx.store.read(key, offset, len).await {
        Ok(d) if d.len() as u64 == len => Ok(d),
        Ok(d) => Err((
            ErrorCode::Internal,
            format!("store returned {} of {len} bytes of `{key}`", d.len()),
        )),
        Err(e) => Err((code_of(&e), e.to_string())),
    }
}

/// Awaits a store read, and how long it kept the response waiting: from its first poll that
/// found it not ready to its answer. A store that answers at its first poll (one in
/// memory) took nothing, even where the thread was preempted in it: the server's CPU, not
/// its store (see `wire`, *The store's part of the hold*).
async fn timed<F: std::future::Future>(read: F) -> (F::Output, Duration) {
    let mut read = std::pin::pin!(read);
    let mut waiting: Option<std::time::Instant> = None;
    std::future::poll_fn(|cx| match read.as_mut().poll(cx) {
        std::task::Poll::Ready(v) => std::task::Poll::Ready((v, waiting.map_or(Duration::ZERO, |t| t.elapsed()))),
        std::task::Poll::Pending => {
            waiting.get_or_insert_with(std::time::Instant::now);
            std::task::Poll::Pending
        }
    })
    .await
}

/// Sends `data` as the response to request `id`: data frames, then an `End`. `store`: how long
/// its store kept it waiting, sent before the first data frame where that frame carries a hold
/// (see `wire`, *The store's part of the hold*).
///
/// The `End` leaves in a write (and so a segment) of its own, a tail-loss probe for free,
/// unless the sink says it may ride in the last data frame's write
/// ([`Sink::end_with_data`]: a connection that showed no loss lately, see
/// [`EndPlacement`]).
async fn send_data<S: FragmentStore, W: Sink>(
    wr: &mut W,
    buf: &mut Vec<u8>,
    cancelled: &(dyn Fn() -> bool + Sync),
    ctx: &Ctx<S>,
    id: u64,
    data: Bytes,
    store: Duration,
) -> io::Result<()> {
    let mut crc = 0u32;
    let mut store = Some(store.as_micros().min(u128::from(u32::MAX)) as u32);
    let chunks = data.chunks(ctx.cfg.data_frame_bytes as usize);
    let last = chunks.len().wrapping_sub(1);
    for (i, chunk) in chunks.enumerate() {
        if cancelled() {
            ctx.stats.cancelled.fetch_add(1, Ordering::Relaxed);
            return send(wr, buf, end_frame(id, None, true, wr)).await;
        }
        // The first frame carries the server's hold (`take_hold` answers once), and a store
        // that took part of it says so just before (see `wire`, *The store's part*).
        let hold = wr.take_hold();
        if let Some(micros) = store.take().filter(|&us| hold.is_some() && us >= MIN_STORE_TIME_US) {
            send(wr, buf, Frame::StoreTime { id, micros }).await?;
        }
        let header = Header::data(id, chunk.len() as u32, hold).encode();
        if ctx.cfg.checksums {
            crc = crc32c::crc32c_append(crc, chunk);
        }
        if i == last && wr.end_with_data() {
            // The `End` rides in the last data frame's write (see `EndPlacement`). Its
            // counters are read before that write: a retransmit of it shows in the
            // connection's next `End`, as one of an earlier tail (`StartCounters`).
            buf.clear();
            end_frame(id, ctx.cfg.checksums.then_some(crc), false, wr).encode(buf);
            write_parts(wr, [&header[..], chunk, buf]).await?;
            ctx.stats.bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            ctx.stats.requests.fetch_add(1, Ordering::Relaxed);
            ctx.stats.merged_ends.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        write_parts(wr, [&header[..], chunk]).await?;
        ctx.stats.bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
    }
    ctx.stats.requests.fetch_add(1, Ordering::Relaxed);
    send(wr, buf, end_frame(id, ctx.cfg.checksums.then_some(crc), false, wr)).await
}

pub(crate) fn truncate(mut s: String) -> String {
    if s.len() > crate::wire::MAX_ERROR_MESSAGE {
        let mut cut = crate::wire::MAX_ERROR_MESSAGE;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

pub(crate) async fn send<W: AsyncWrite + Unpin>(wr: &mut W, buf: &mut Vec<u8>, frame: Frame) -> io::Result<()> {
    buf.clear();
    frame.encode(buf);
    wr.write_all(buf).await
}

/// Responses in a row (8) that a connection must begin with no retransmit nor RTO on its
/// socket since the response before, before its `End`s ride in their last data write (see
/// the module docs, *Where the `End` goes*).
pub const MERGED_END_AFTER: u32 = 8;

/// The longest clean run (1024 responses) a connection must show again after a loss that
/// came while its `End`s rode with the data: each such loss doubles the run it needs.
pub const MAX_MERGED_END_AFTER: u32 = 1024;

/// Whether a connection's next response sends its `End` in a write of its own or in the
/// write of its last `Data` frame: see the module docs, *Where the `End` goes*.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EndPlacement {
    /// The socket's counters at the last response's start.
    last: Option<StartCounters>,
    /// Responses in a row that began with no loss since the one before.
    clean: u32,
    /// The run that merges.
    need: u32,
}

impl Default for EndPlacement {
    fn default() -> Self {
        Self {
            last: None,
            clean: 0,
            need: MERGED_END_AFTER,
        }
    }
}

impl EndPlacement {
    /// A response begins with its socket's counters `now` (`None`: not readable): whether
    /// its `End` rides in its last data write.
    pub(crate) fn merge_next(&mut self, now: Option<StartCounters>) -> bool {
        self.clean = match (self.last, now) {
            (Some(a), Some(b)) if a.retransmits == b.retransmits && a.rtos == b.rtos => self.clean.saturating_add(1),
            (Some(_), Some(_)) => {
                if self.clean >= self.need {
                    self.need = self.need.saturating_mul(2).min(MAX_MERGED_END_AFTER);
                }
                0
            }
            _ => 0,
        };
        self.last = now;
        self.clean >= self.need
    }
}

/// Writes a header and a payload with as few syscalls (and segments) as possible.
pub(crate) async fn write_parts<W: AsyncWrite + Unpin, const N: usize>(w: &mut W, parts: [&[u8]; N]) -> io::Result<()> {
    let mut bufs = parts.map(IoSlice::new);
    let mut slices: &mut [IoSlice<'_>] = &mut bufs;
    while !slices.is_empty() {
        let n = w.write_vectored(slices).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The listener carries the congestion control, so a connection is born under it; set
    /// only on the accepted socket, a connection born under `bbr` keeps `bbr`'s pacing.
    #[tokio::test]
    async fn the_listener_carries_the_congestion_control() {
        let tuning = SocketTuning {
            congestion: Some("reno".into()),
            ..SocketTuning::server()
        };
        let listener = bind_tcp("127.0.0.1:0".parse().unwrap(), &tuning).await.unwrap();
        let name = socket2::SockRef::from(&listener).tcp_congestion().unwrap();
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        assert_eq!(&name[..end], b"reno");
    }

    fn counters(retransmits: u32, rtos: u32) -> Option<StartCounters> {
        Some(StartCounters { retransmits, rtos })
    }

    /// Responses begun with `c` until the first that merges, counting it (panics past the
    /// longest run that can be needed).
    fn first_merge(p: &mut EndPlacement, c: Option<StartCounters>) -> u32 {
        (1..=MAX_MERGED_END_AFTER + 1)
            .find(|_| p.merge_next(c))
            .expect("never merged")
    }

    /// The `End` rides with the data only after a clean run of `MERGED_END_AFTER` responses;
    /// a retransmit or an RTO ends the run, and one that ends a merging run doubles the run
    /// needed next, up to `MAX_MERGED_END_AFTER`. Unreadable counters never merge.
    #[test]
    fn the_end_rides_with_the_data_only_after_a_clean_run() {
        let mut p = EndPlacement::default();
        // The first response has nothing to compare with; then MERGED_END_AFTER clean ones.
        let merged: Vec<bool> = (0..=MERGED_END_AFTER).map(|_| p.merge_next(counters(3, 1))).collect();
        assert_eq!(merged.iter().filter(|&&m| m).count(), 1, "{merged:?}");
        assert!(merged[MERGED_END_AFTER as usize]);
        // A retransmit since the last start ends the run, and this run had merged: twice as
        // long a run is needed now.
        assert!(!p.merge_next(counters(4, 1)));
        assert_eq!(first_merge(&mut p, counters(4, 1)), 2 * MERGED_END_AFTER);
        // An RTO alone ends it too (and doubles the run needed: this one had merged).
        assert!(!p.merge_next(counters(4, 2)));
        // A loss in a run too short to merge does not double the need again.
        for _ in 0..3 {
            assert!(!p.merge_next(counters(4, 2)));
        }
        assert!(!p.merge_next(counters(5, 2)));
        assert_eq!(first_merge(&mut p, counters(5, 2)), 4 * MERGED_END_AFTER);
        // Losses while merging double the need up to its bound, never past it.
        for r in 6..26 {
            assert!(first_merge(&mut p, counters(r, 2)) <= MAX_MERGED_END_AFTER);
            assert!(!p.merge_next(counters(r + 1, 2)));
        }
        assert_eq!(p.need, MAX_MERGED_END_AFTER);
        // A socket whose counters cannot be read never merges.
        let mut q = EndPlacement::default();
        assert!((0..100).all(|_| !q.merge_next(None)));
    }

    #[test]
    fn read_ahead_is_bounded() {
        assert_eq!(ServerConfig::default().read_ahead_bytes(), DEFAULT_READ_AHEAD_BYTES);
        assert!(ServerConfig::builder().read_ahead_bytes(0).build().is_ok());
        let e = ServerConfig::builder()
            .read_ahead_bytes((1 << 30) + 1)
            .build()
            .unwrap_err();
        assert!(
            matches!(
                e,
                ServerConfigError::OutOfRange {
                    field: "read_ahead_bytes",
                    ..
                }
            ),
            "{e}"
        );
    }
}
