//! Client settings: [`ClientConfig`] and its validated builder.

use std::time::Duration;

use incast_core::receiver::ReceiverConfig;

use crate::port::Sharing;
use crate::tune::SocketTuning;

/// Default deadline of one read (10 s).
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default connect timeout (2 s).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default time an idle pooled connection is kept (90 s, as hyper's client pool): a read
/// that finds one older opens a new one, and the old one is closed.
pub const DEFAULT_POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// How often a read sweeps the whole pool for connections idle past its timeout, per
/// timeout (2: every 45 s by default, so an idle connection to a server no read asks for
/// again is closed within 1.5 timeouts of its last use while the client reads).
pub const POOL_SWEEPS_PER_TIMEOUT: u32 = 2;
/// Default largest block a read may allocate (4 GiB).
pub const DEFAULT_MAX_BLOCK_BYTES: u64 = 4 << 30;

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
    pub(super) read_timeout: Duration,
    pub(super) connect_timeout: Duration,
    pub(super) pool_idle_timeout: Duration,
    pub(super) max_block_bytes: u64,
    pub(super) tuning: SocketTuning,
    pub(super) rearm_quickack: bool,
    pub(super) verify_checksums: bool,
    pub(super) transport: Transport,
    pub(super) sharing: Sharing,
    pub(super) receiver: ReceiverConfig,
    pub(super) port_hint: Option<(u64, u64)>,
    pub(super) port_counter: bool,
    #[cfg(feature = "quic")]
    pub(super) quic: Option<crate::quic::QuicClientConfig>,
    #[cfg(feature = "tls")]
    pub(super) tls: Option<crate::tls::TlsClientConfig>,
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
    /// How long an idle pooled connection is kept ([`ClientConfigBuilder::pool_idle_timeout`]).
    pub fn pool_idle_timeout(&self) -> Duration {
        self.pool_idle_timeout
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
    /// Whether the client-wide receiver reads the interface's receive counter
    /// ([`ClientConfigBuilder::port_counter`]).
    pub fn port_counter(&self) -> bool {
        self.port_counter
    }
    /// The TLS settings of TCP connections, if TLS is on (feature `tls`).
    #[cfg(feature = "tls")]
    pub fn tls(&self) -> Option<&crate::tls::TlsClientConfig> {
        self.tls.as_ref()
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
                pool_idle_timeout: DEFAULT_POOL_IDLE_TIMEOUT,
                max_block_bytes: DEFAULT_MAX_BLOCK_BYTES,
                tuning: SocketTuning::client(),
                rearm_quickack: true,
                verify_checksums: true,
                transport: Transport::Tcp,
                sharing: Sharing::Port,
                receiver: ReceiverConfig::default(),
                port_hint: None,
                port_counter: true,
                #[cfg(feature = "quic")]
                quic: None,
                #[cfg(feature = "tls")]
                tls: None,
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
    /// How long an idle pooled connection is kept: a connection idle longer is closed when
    /// the pool is next used for its server, instead of being handed to a read (its server
    /// may have dropped it meanwhile, and it holds a descriptor), and when a read sweeps the
    /// pool ([`POOL_SWEEPS_PER_TIMEOUT`] times per timeout at most), whatever its server.
    /// Default [`DEFAULT_POOL_IDLE_TIMEOUT`]; range 1 ms ..= 1 day.
    pub fn pool_idle_timeout(mut self, d: Duration) -> Self {
        self.cfg.pool_idle_timeout = d;
        self
    }
    /// Largest block a read may allocate, bytes. Default [`DEFAULT_MAX_BLOCK_BYTES`]; range
    /// 1 ..= 2^40.
    pub fn max_block_bytes(mut self, n: u64) -> Self {
        self.cfg.max_block_bytes = n;
        self
    }
    /// Socket options of client connections. Default [`SocketTuning::client`]. The policy's
    /// window cap, when on, overrides `recv_buffer` and `window_clamp` (except a
    /// `WindowCap::Derived` cap under [`Sharing::Port`], where the port's moving budget
    /// bounds each connection instead: see `Client`'s socket tuning).
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
    /// Check the CRC32C of every response that carries one: a mismatch fails the response
    /// (it is retried, or the read fails naming it) and its bytes never complete a block.
    /// Off, the client does not compute the checksum at all (on loopback, 16 reads of 256 KiB
    /// at once, it took 14% of the client thread's CPU by `perf`). Default on.
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
    /// The client-wide receiver's settings. Default [`ReceiverConfig::default`]: a 16 KiB
    /// starting budget that doubles every round trip until the port shows delay or loss,
    /// then adapts to what the reads measure, over a floor that follows the path (16 KiB,
    /// lower where the reads' own losses show a slow port's buffer holds less). Replaced by
    /// [`ClientConfigBuilder::port_hint`] when that is given.
    pub fn receiver(mut self, r: ReceiverConfig) -> Self {
        self.cfg.receiver = r;
        self
    }
    /// The rate of the client's port in bits per second and the buffer of the switch port
    /// in front of it in bytes, if known: the receiver takes that rate for the port's and
    /// starts from [`incast_core::model::recommend`]'s budget ([`ReceiverConfig::for_port`],
    /// which also lowers the floor behind buffers of under about 16 KiB) instead of the
    /// default. Default none; rate > 0.
    pub fn port_hint(mut self, rate_bps: u64, buffer_bytes: u64) -> Self {
        self.cfg.port_hint = Some((rate_bps, buffer_bytes));
        self
    }
    /// Whether the client-wide receiver reads the receive counter of the client's network
    /// interface (`/sys/class/net/<interface>/statistics/rx_bytes`, the interface of the
    /// first TCP connection's local address) to learn the port's rate with every flow through
    /// it counted, where its own bytes count only the reads' share, and the reads' share of
    /// the port's bytes, which tells whose a queue is. Default true; where no counter is found
    /// the receiver measures from its own bytes, as with false. A rate hint
    /// ([`ClientConfigBuilder::port_hint`]) gives the port's rate instead; the counted share
    /// still applies. See [`incast_core::receiver`], "The port's counter".
    pub fn port_counter(mut self, on: bool) -> Self {
        self.cfg.port_counter = on;
        self
    }
    /// QUIC settings: whom to trust and how to tune connections (feature `quic`). Required by
    /// the QUIC transports.
    #[cfg(feature = "quic")]
    pub fn quic(mut self, q: crate::quic::QuicClientConfig) -> Self {
        self.cfg.quic = Some(q);
        self
    }
    /// Open TCP connections with TLS 1.3 (feature `tls`; [`crate::tls`]): whom to trust, and
    /// the certificate to present for mutual TLS. Every server must then serve TLS
    /// ([`crate::ServerConfigBuilder::tls`]). Default off: plaintext, for trusted networks.
    /// QUIC has its own settings ([`ClientConfigBuilder::quic`]).
    #[cfg(feature = "tls")]
    pub fn tls(mut self, t: crate::tls::TlsClientConfig) -> Self {
        self.cfg.tls = Some(t);
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
        if c.pool_idle_timeout < ms || c.pool_idle_timeout > Duration::from_secs(86_400) {
            return bad(
                "pool_idle_timeout",
                format!("{:?}", c.pool_idle_timeout),
                "1 ms..=1 day",
            );
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
