//! What a read returns ([`ReadOutput`], [`ReadReport`]) and why it fails ([`FanInError`]).

use std::io;
use std::time::Duration;

use incast_core::receiver::PortReport;
use incast_core::{ReadError, SchedulerStats, ServerId};

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
    /// The block is larger than [`super::ClientConfigBuilder::max_block_bytes`] allows.
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
    /// What the client's port did during the read ([`crate::Sharing::Port`] only): the budget's
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
