//! QUIC transport (cargo feature `quic`, quinn): the same fragment requests over QUIC streams,
//! used on its own ([`Transport::Quic`](crate::Transport::Quic)) or as the path hedges take
//! when a TCP fragment stalls ([`Transport::TcpWithQuicFallback`](crate::Transport::TcpWithQuicFallback)).
//!
//! # Why QUIC helps with incast
//!
//! TCP's retransmission timer lives in the kernel. A fragment that loses its tail waits for an
//! RTO of at least 200 ms (`rto_min`), or 8 ms with the per-socket `TCP_RTO_MIN_US` of Linux
//! 6.15+ that an application may set, while the client link idles (vasudevan-sigcomm09 §2).
//! QUIC's loss recovery runs in user space, in quinn, and its flow-control credit is granted by
//! the receiver exactly: a window cap here is a number the client advertises, not a clamp the
//! kernel approximates.
//!
//! # How requests map onto QUIC
//!
//! One bidirectional stream per request: the client writes one `Request` frame of the
//! [wire format](crate::wire) and finishes its side; the server answers on the same stream with
//! `Data` frames and an `End` (or an `Error`) exactly as over TCP, then finishes. A cancel is a
//! `STOP_SENDING` on the stream (quinn sends it when the client drops the stream), so streams
//! never block each other and a hedge never queues behind the request it replaces. The server
//! listens on UDP on the same port number as its TCP listener ([`serve`](crate::serve) with
//! [`ServerConfigBuilder::quic`](crate::ServerConfigBuilder::quic)).
//!
//! Bounds, as over TCP: at most [`ServerConfig::max_connections`](crate::ServerConfig::max_connections)
//! QUIC connections (more are refused in the handshake); at most
//! [`ServerConfig::max_outstanding`](crate::ServerConfig::max_outstanding) concurrent streams per
//! connection (enforced by QUIC stream credit); request streams get a 4 KiB receive window, so
//! a peer cannot make the server buffer more than that per stream; the request must arrive within
//! the server's frame timeout; lengths are checked against `max_request_bytes`.
//!
//! # Mapping the policy onto quinn
//!
//! - **Window caps.** The policy's window cap (bytes in flight per server) becomes both the
//!   connection receive window and the stream receive window of the client's connection to
//!   that server; the smaller one limits, so both are set. Without a cap quinn's defaults apply
//!   (1.25 MB per stream).
//! - **Initial RTT.** quinn's first PTO is about three times its initial RTT (SRTT + 4·RTTVAR
//!   with RTTVAR = RTT/2), so the initial RTT is the policy's initial RTO divided by three:
//!   1.67 ms by default, instead of quinn's 333 ms.
//! - **ACK delay.** The PTO adds the peer's `max_ack_delay`, 25 ms by default. Both sides ask
//!   their peer, through the ACK-frequency extension ([`quinn::AckFrequencyConfig`]), for a
//!   `max_ack_delay` of [`DEFAULT_MAX_ACK_DELAY`] (1 ms). quinn clamps the request to at least
//!   the peer's `min_ack_delay`, which quinn always advertises as its timer granularity, 1 ms.
//! - **Congestion control.** [`Congestion`]: Cubic (default), NewReno or BBR.
//!
//! # What this means for the fastest recovery
//!
//! quinn's timer granularity is 1 ms (`TIMER_GRANULARITY`). A lost tail is recovered by a probe
//! after the PTO = SRTT + max(4·RTTVAR, 1 ms) + max_ack_delay. On a datacenter path
//! (SRTT ≈ 100 µs, small RTTVAR) with the 1 ms ACK delay this is about
//! 0.1 + 1 + 1 ≈ 2.1 ms, against 26.1 ms with quinn's default 25 ms ACK delay and 200 ms for a
//! Linux TCP RTO. Losses followed by more packets are found sooner, by packet threshold (3) or
//! time threshold (9/8 RTT), without a timer. Nothing below 1 ms is possible with quinn: it
//! neither arms nor honours finer timers, and it will not ask a quinn peer for an ACK delay
//! below 1 ms.
//!
//! # Buffers and offload
//!
//! Every endpoint has its own UDP socket. Its receive and send buffers are set to
//! [`QuicClientConfigBuilder::udp_buffer_bytes`] (16 MiB by default on the client, which takes the
//! whole fan-in on one socket) with `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE` where the process may, else
//! capped by `net.core.rmem_max`/`wmem_max`; [`Client::quic_udp_buffers`](crate::Client::quic_udp_buffers) and
//! [`ServerHandle::quic_udp_buffers`](crate::ServerHandle::quic_udp_buffers) report what the kernel granted. quinn uses UDP GSO (segmentation offload) and GRO where the kernel offers them.
//!
//! # Example
//!
//! Run the tests that do this end to end:
//! `cargo test --release -p incast-rpc --features quic --test quic`
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use incast_core::{Policy, ServerId, Stripe};
//! use incast_rpc::quic::{QuicClientConfig, QuicServerConfig, SelfSigned};
//! use incast_rpc::{serve, Client, ClientConfig, MemStore, ServerConfig, Transport};
//!
//! // A certificate made at start (tests, demos); production loads PEM files instead.
//! let cert = SelfSigned::generate(["localhost", "127.0.0.1"])?;
//! let store = MemStore::new();
//! store.insert("blk", vec![7u8; 1 << 20]);
//! let config = ServerConfig::builder()
//!     .quic(QuicServerConfig::builder(cert.identity()).build()?)
//!     .build()?;
//! let server = serve("127.0.0.1:0".parse()?, store, config).await?; // TCP and UDP, one port
//!
//! let client = Client::with_config(
//!     [(ServerId(0), server.local_addr())],
//!     ClientConfig::builder()
//!         .transport(Transport::TcpWithQuicFallback)
//!         .quic(QuicClientConfig::builder(cert.trust()?).build()?)
//!         .build()?,
//! );
//! let stripe = Stripe::fixed_block("blk", &[ServerId(0)], 1 << 20)?;
//! let out = client.fan_in_read(&stripe, &Policy::default()).await?;
//! assert_eq!(out.block.len(), 1 << 20);
//! # Ok(()) }
//! ```

mod client;
mod server;

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use incast_core::ServerId;

pub(crate) use client::{run_request, Flow, QuicClient, StreamRequest};
pub(crate) use server::{spawn_server, ServerTask};
// The TLS types live in `crate::tls`, shared with TLS over TCP; re-exported where QUIC users
// have always found them.
pub use crate::tls::{CertProblem, ClientCertRefusal, SelfSigned, TlsError, TlsIdentity, TlsTrust, ALPN};

/// Serves `store` over QUIC only (no TCP listener) on UDP `addr`; `config` must carry
/// [`ServerConfigBuilder::quic`](crate::ServerConfigBuilder::quic) settings. [`crate::serve`]
/// serves both transports on one port number.
pub async fn serve_quic<S: crate::FragmentStore>(
    addr: SocketAddr,
    store: S,
    config: crate::ServerConfig,
) -> io::Result<crate::ServerHandle> {
    crate::server::start(addr, store, config, false).await
}

/// Default `max_ack_delay` each side asks of its peer (1 ms, the least quinn grants).
pub const DEFAULT_MAX_ACK_DELAY: Duration = Duration::from_millis(1);
/// Default server initial RTT (1.67 ms: a first PTO near the default application RTO of 5 ms).
pub const DEFAULT_INITIAL_RTT: Duration = Duration::from_micros(1667);
/// Default UDP buffer of a client endpoint (16 MiB).
pub const DEFAULT_CLIENT_UDP_BUFFER: usize = 16 << 20;
/// Default UDP buffer of a server endpoint (4 MiB).
pub const DEFAULT_SERVER_UDP_BUFFER: usize = 4 << 20;
/// Default time a request waits for stream credit before the read fails with
/// [`QuicError::StreamLimit`] (1 s).
pub const DEFAULT_STREAM_WAIT: Duration = Duration::from_secs(1);
/// Default cap on the datagrams of one GSO send (see [`QuicServerConfigBuilder::max_gso_segments`]).
pub const DEFAULT_MAX_GSO_SEGMENTS: usize = 2;
/// Default idle timeout of a QUIC connection (30 s).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Receive window of a request stream on the server (4 KiB: a request frame is at most
/// 16 + 2048 bytes).
pub(crate) const REQUEST_STREAM_WINDOW: u32 = 4096;

/// The congestion controller of a QUIC endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Congestion {
    /// CUBIC (RFC 9438), quinn's default.
    #[default]
    Cubic,
    /// NewReno (RFC 9002).
    NewReno,
    /// BBR (quinn marks it experimental).
    Bbr,
}

/// Why a QUIC connection or stream could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuicError {
    /// The client refused the server's certificate.
    #[error("{server} at {addr}: server certificate for `{name}` refused: {problem}")]
    Certificate {
        /// The server.
        server: ServerId,
        /// Its address.
        addr: SocketAddr,
        /// The name the certificate was checked against.
        name: String,
        /// Why it was refused.
        problem: CertProblem,
    },
    /// The server refused this client in the handshake (mutual TLS).
    #[error("{server} at {addr} refused this client over quic: {reason}")]
    Refused {
        /// The server.
        server: ServerId,
        /// Its address.
        addr: SocketAddr,
        /// Why, from the server's alert.
        reason: ClientCertRefusal,
    },
    /// The TLS configuration could not be built.
    #[error("tls setup: {0}")]
    Tls(#[from] TlsError),
    /// The handshake failed or the connection was closed, for a reason other than the
    /// certificate.
    #[error("{server} at {addr}: quic connection: {source}")]
    Connection {
        /// The server.
        server: ServerId,
        /// Its address.
        addr: SocketAddr,
        /// quinn's error.
        #[source]
        source: quinn::ConnectionError,
    },
    /// quinn refused to start the connection (e.g. an invalid server name).
    #[error("{server} at {addr}: cannot connect over quic: {source}")]
    Connect {
        /// The server.
        server: ServerId,
        /// Its address.
        addr: SocketAddr,
        /// quinn's error.
        #[source]
        source: quinn::ConnectError,
    },
    /// The handshake did not finish in time.
    #[error("{server} at {addr}: no quic handshake within {after:?}")]
    ConnectTimeout {
        /// The server.
        server: ServerId,
        /// Its address.
        addr: SocketAddr,
        /// The connect timeout.
        after: Duration,
    },
    /// The server's concurrent-stream limit was reached and no stream came free in time.
    #[error(
        "{server}: its quic stream limit is reached ({open} requests of this client in flight) and no stream \
         came free within {waited:?}; raise the server's max_outstanding or read with fewer requests in flight"
    )]
    StreamLimit {
        /// The server.
        server: ServerId,
        /// Requests of this client in flight to that server, this one included. (It can be
        /// below the server's limit: a cancelled stream holds its slot until the server has
        /// seen the cancel.)
        open: usize,
        /// How long the request waited.
        waited: Duration,
    },
    /// The UDP socket of an endpoint could not be set up.
    #[error("quic endpoint on {addr}: {source}")]
    Endpoint {
        /// The local address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Why a QUIC configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuicConfigError {
    /// A value is outside its range.
    #[error("quic config field `{field}` = {value} is out of range: allowed {allowed}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value given.
        value: String,
        /// The allowed range.
        allowed: &'static str,
    },
}

fn check_range(
    field: &'static str,
    v: Duration,
    lo: Duration,
    hi: Duration,
    allowed: &'static str,
) -> Result<(), QuicConfigError> {
    if v < lo || v > hi {
        return Err(QuicConfigError::OutOfRange {
            field,
            value: format!("{v:?}"),
            allowed,
        });
    }
    Ok(())
}

fn check_buffer(field: &'static str, n: usize) -> Result<(), QuicConfigError> {
    if !(64 << 10..=1 << 30).contains(&n) {
        return Err(QuicConfigError::OutOfRange {
            field,
            value: n.to_string(),
            allowed: "64 KiB..=1 GiB",
        });
    }
    Ok(())
}

/// The client side of QUIC: whom to trust and how to tune connections. Build with
/// [`QuicClientConfig::builder`].
#[derive(Clone, Debug)]
pub struct QuicClientConfig {
    trust: TlsTrust,
    identity: Option<TlsIdentity>,
    server_name: Option<String>,
    congestion: Congestion,
    max_ack_delay: Duration,
    udp_buffer: usize,
    stream_wait: Duration,
    idle_timeout: Duration,
}

impl QuicClientConfig {
    /// A builder that trusts `trust` (there is no default trust and no way to skip
    /// verification).
    pub fn builder(trust: TlsTrust) -> QuicClientConfigBuilder {
        QuicClientConfigBuilder {
            cfg: QuicClientConfig {
                trust,
                identity: None,
                server_name: None,
                congestion: Congestion::default(),
                max_ack_delay: DEFAULT_MAX_ACK_DELAY,
                udp_buffer: DEFAULT_CLIENT_UDP_BUFFER,
                stream_wait: DEFAULT_STREAM_WAIT,
                idle_timeout: DEFAULT_IDLE_TIMEOUT,
            },
        }
    }
}

/// Builds a [`QuicClientConfig`].
#[derive(Clone, Debug)]
pub struct QuicClientConfigBuilder {
    cfg: QuicClientConfig,
}

impl QuicClientConfigBuilder {
    /// The certificate and key the client presents to servers that require one (mutual TLS,
    /// [`QuicServerConfigBuilder::client_certs`]). Default: none.
    pub fn identity(mut self, identity: TlsIdentity) -> Self {
        self.cfg.identity = Some(identity);
        self
    }
    /// The name every server's certificate is checked against. Default: the server's IP
    /// address, which its certificate must then list.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.cfg.server_name = Some(name.into());
        self
    }
    /// Congestion controller for what the client sends (requests). Default [`Congestion::Cubic`].
    pub fn congestion(mut self, c: Congestion) -> Self {
        self.cfg.congestion = c;
        self
    }
    /// `max_ack_delay` asked of the servers. Default [`DEFAULT_MAX_ACK_DELAY`]; range 1 ms ..= 25 ms.
    pub fn max_ack_delay(mut self, d: Duration) -> Self {
        self.cfg.max_ack_delay = d;
        self
    }
    /// UDP receive and send buffer, bytes. Default [`DEFAULT_CLIENT_UDP_BUFFER`]; range 64 KiB ..= 1 GiB.
    pub fn udp_buffer_bytes(mut self, n: usize) -> Self {
        self.cfg.udp_buffer = n;
        self
    }
    /// How long a request waits for stream credit when the server's stream limit is reached
    /// before the read fails with [`QuicError::StreamLimit`]. Default [`DEFAULT_STREAM_WAIT`];
    /// range 1 ms ..= 60 s.
    pub fn stream_wait(mut self, d: Duration) -> Self {
        self.cfg.stream_wait = d;
        self
    }
    /// Idle timeout of pooled connections. Default [`DEFAULT_IDLE_TIMEOUT`]; range 100 ms ..= 1 h.
    pub fn idle_timeout(mut self, d: Duration) -> Self {
        self.cfg.idle_timeout = d;
        self
    }
    /// Checks every field.
    pub fn build(self) -> Result<QuicClientConfig, QuicConfigError> {
        let c = &self.cfg;
        let ms = Duration::from_millis(1);
        check_range("max_ack_delay", c.max_ack_delay, ms, 25 * ms, "1 ms..=25 ms")?;
        check_buffer("udp_buffer_bytes", c.udp_buffer)?;
        check_range("stream_wait", c.stream_wait, ms, Duration::from_secs(60), "1 ms..=60 s")?;
        check_range(
            "idle_timeout",
            c.idle_timeout,
            100 * ms,
            Duration::from_secs(3600),
            "100 ms..=1 h",
        )?;
        Ok(self.cfg)
    }
}

/// The server side of QUIC: its identity and transport settings. Build with
/// [`QuicServerConfig::builder`]; hand it to [`ServerConfigBuilder::quic`](crate::ServerConfigBuilder::quic).
#[derive(Clone)]
pub struct QuicServerConfig {
    crypto: Arc<quinn::crypto::rustls::QuicServerConfig>,
    pub(crate) tuning: ServerTuning,
}

/// The transport settings of a QUIC server, shared by its config and builder.
#[derive(Clone, Debug)]
pub(crate) struct ServerTuning {
    pub(crate) max_gso_segments: usize,
    pub(crate) congestion: Congestion,
    pub(crate) max_ack_delay: Duration,
    pub(crate) initial_rtt: Duration,
    pub(crate) udp_buffer: usize,
    pub(crate) idle_timeout: Duration,
}

impl QuicServerConfig {
    /// A builder serving with `identity`.
    pub fn builder(identity: TlsIdentity) -> QuicServerConfigBuilder {
        QuicServerConfigBuilder {
            identity,
            client_certs: None,
            tuning: ServerTuning {
                max_gso_segments: DEFAULT_MAX_GSO_SEGMENTS,
                congestion: Congestion::default(),
                max_ack_delay: DEFAULT_MAX_ACK_DELAY,
                initial_rtt: DEFAULT_INITIAL_RTT,
                udp_buffer: DEFAULT_SERVER_UDP_BUFFER,
                idle_timeout: DEFAULT_IDLE_TIMEOUT,
            },
        }
    }
}

impl std::fmt::Debug for QuicServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The rustls configuration has no Debug; the settings are what a reader wants.
        f.debug_struct("QuicServerConfig")
            .field("tuning", &self.tuning)
            .finish_non_exhaustive()
    }
}

/// Builds a [`QuicServerConfig`].
#[derive(Debug)]
pub struct QuicServerConfigBuilder {
    identity: TlsIdentity,
    client_certs: Option<TlsTrust>,
    tuning: ServerTuning,
}

impl QuicServerConfigBuilder {
    /// Require every client to present a certificate that chains to `trust` (mutual TLS); a
    /// client without one fails its read with [`QuicError::Refused`]. Default: no client
    /// certificates asked for.
    pub fn client_certs(mut self, trust: TlsTrust) -> Self {
        self.client_certs = Some(trust);
        self
    }
    /// Congestion controller for responses. Default [`Congestion::Cubic`].
    pub fn congestion(mut self, c: Congestion) -> Self {
        self.tuning.congestion = c;
        self
    }
    /// `max_ack_delay` asked of clients; it enters this server's PTO. Default
    /// [`DEFAULT_MAX_ACK_DELAY`]; range 1 ms ..= 25 ms.
    pub fn max_ack_delay(mut self, d: Duration) -> Self {
        self.tuning.max_ack_delay = d;
        self
    }
    /// RTT assumed before the first sample. Default [`DEFAULT_INITIAL_RTT`]; range 100 µs ..= 1 s.
    pub fn initial_rtt(mut self, d: Duration) -> Self {
        self.tuning.initial_rtt = d;
        self
    }
    /// UDP receive and send buffer, bytes. Default [`DEFAULT_SERVER_UDP_BUFFER`]; range 64 KiB ..= 1 GiB.
    pub fn udp_buffer_bytes(mut self, n: usize) -> Self {
        self.tuning.udp_buffer = n;
        self
    }
    /// Idle timeout of connections. Default [`DEFAULT_IDLE_TIMEOUT`]; range 100 ms ..= 1 h.
    pub fn idle_timeout(mut self, d: Duration) -> Self {
        self.tuning.idle_timeout = d;
        self
    }
    /// Most datagrams quinn may hand the kernel in one GSO send: 1 turns GSO off, 10 is
    /// quinn's own limit. Larger batches cost fewer system calls but leave as one burst, which
    /// a shallow switch buffer shared by many senders drops. Default
    /// [`DEFAULT_MAX_GSO_SEGMENTS`]; range 1 ..= 64.
    pub fn max_gso_segments(mut self, n: usize) -> Self {
        self.tuning.max_gso_segments = n;
        self
    }
    /// Checks every field and builds the TLS configuration.
    pub fn build(self) -> Result<QuicServerConfig, QuicServerConfigError> {
        let ms = Duration::from_millis(1);
        check_range("max_ack_delay", self.tuning.max_ack_delay, ms, 25 * ms, "1 ms..=25 ms")?;
        check_range(
            "initial_rtt",
            self.tuning.initial_rtt,
            Duration::from_micros(100),
            Duration::from_secs(1),
            "100 us..=1 s",
        )?;
        check_buffer("udp_buffer_bytes", self.tuning.udp_buffer)?;
        if !(1..=64).contains(&self.tuning.max_gso_segments) {
            return Err(QuicConfigError::OutOfRange {
                field: "max_gso_segments",
                value: self.tuning.max_gso_segments.to_string(),
                allowed: "1..=64",
            }
            .into());
        }
        check_range(
            "idle_timeout",
            self.tuning.idle_timeout,
            100 * ms,
            Duration::from_secs(3600),
            "100 ms..=1 h",
        )?;
        let tls = self.identity.server_crypto(self.client_certs.as_ref())?;
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
            .map_err(|e| QuicServerConfigError::Tls(TlsError::Config(e.to_string())))?;
        Ok(QuicServerConfig {
            crypto: Arc::new(crypto),
            tuning: self.tuning,
        })
    }
}

/// Why a [`QuicServerConfig`] was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuicServerConfigError {
    /// A value is outside its range.
    #[error(transparent)]
    Range(#[from] QuicConfigError),
    /// The identity could not be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// The transport knobs shared by both sides.
struct Knobs {
    initial_rtt: Duration,
    max_ack_delay: Duration,
    congestion: Congestion,
    stream_window: Option<u32>,
    conn_window: Option<u64>,
    max_bidi_streams: u32,
    idle_timeout: Duration,
}

fn transport_config(k: &Knobs) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.initial_rtt(k.initial_rtt);
    let mut ack = quinn::AckFrequencyConfig::default();
    ack.max_ack_delay(Some(k.max_ack_delay));
    t.ack_frequency_config(Some(ack));
    match k.congestion {
        Congestion::Cubic => t.congestion_controller_factory(Arc::new(quinn::congestion::CubicConfig::default())),
        Congestion::NewReno => t.congestion_controller_factory(Arc::new(quinn::congestion::NewRenoConfig::default())),
        Congestion::Bbr => t.congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default())),
    };
    if let Some(w) = k.stream_window {
        t.stream_receive_window(quinn::VarInt::from_u32(w));
    }
    if let Some(w) = k.conn_window {
        t.receive_window(quinn::VarInt::from_u64(w).unwrap_or(quinn::VarInt::MAX));
    }
    t.max_concurrent_bidi_streams(quinn::VarInt::from_u32(k.max_bidi_streams));
    t.max_concurrent_uni_streams(quinn::VarInt::from_u32(0));
    let idle = quinn::IdleTimeout::try_from(k.idle_timeout).ok();
    t.max_idle_timeout(idle);
    t.enable_segmentation_offload(true);
    t
}

/// A UDP socket bound to `addr` with buffers of `bytes` (forced past `rmem_max` where the
/// process may). Returns the socket and the (receive, send) sizes the kernel reports.
fn udp_socket(addr: SocketAddr, bytes: usize) -> io::Result<(UdpSocket, (usize, usize))> {
    let sock = UdpSocket::bind(addr)?;
    let want = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        if crate::sys::set_opt(sock.as_fd(), libc::SOL_SOCKET, force, want).is_err() {
            // Without CAP_NET_ADMIN: the kernel caps this at net.core.[rw]mem_max.
            let _ = crate::sys::set_opt(sock.as_fd(), libc::SOL_SOCKET, plain, want);
        }
    }
    let get = |name| crate::sys::get_int::<4>(sock.as_fd(), libc::SOL_SOCKET, name).map(|v| v as usize);
    let sizes = (get(libc::SO_RCVBUF)?, get(libc::SO_SNDBUF)?);
    Ok((sock, sizes))
}

/// A UDP socket that lets quinn batch at most `max_segments` datagrams into one GSO send.
///
/// With GSO quinn hands the kernel up to 10 datagrams (about 14 KiB) at once, and they leave
/// back to back at the sender's link speed. Into a shallow switch buffer shared by N senders
/// those bursts are what overflows it: on the testbed (1 Gbit/s, 32 KiB) 8 senders took 816
/// drops in 20 blocks with quinn's batches and none with single datagrams. A cap keeps most of
/// GSO's saving in system calls while bounding the burst.
#[derive(Debug)]
struct CappedGso {
    inner: Arc<dyn quinn::AsyncUdpSocket>,
    max_segments: usize,
}

impl quinn::AsyncUdpSocket for CappedGso {
    fn create_io_poller(self: Arc<Self>) -> std::pin::Pin<Box<dyn quinn::UdpPoller>> {
        self.inner.clone().create_io_poller()
    }
    fn try_send(&self, transmit: &quinn::udp::Transmit) -> io::Result<()> {
        self.inner.try_send(transmit)
    }
    fn poll_recv(
        &self,
        cx: &mut std::task::Context,
        bufs: &mut [std::io::IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> std::task::Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments().min(self.max_segments)
    }
    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }
    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// An endpoint on `sock` whose GSO batches hold at most `max_segments` datagrams.
fn endpoint(sock: UdpSocket, server: Option<quinn::ServerConfig>, max_segments: usize) -> io::Result<quinn::Endpoint> {
    use quinn::Runtime as _;
    let runtime = Arc::new(quinn::TokioRuntime);
    let inner = runtime.wrap_udp_socket(sock)?;
    let socket = Arc::new(CappedGso { inner, max_segments });
    quinn::Endpoint::new_with_abstract_socket(quinn::EndpointConfig::default(), server, socket, runtime)
}
