//! What a read returns ([`ReadOutput`], [`ReadReport`]) and why it fails ([`FanInError`]).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// The caller's buffer ([`crate::Client::fan_in_read_into`]) is not the block's length.
    #[error("buffer of {len} bytes for a block of {need} bytes")]
    BufferLength {
        /// The buffer's length.
        len: u64,
        /// The block's length.
        need: u64,
    },
    /// A fragment could not be read from any of its servers.
    #[error("{source}; last cause: {cause}")]
    Failed {
        /// The scheduler's verdict, naming the fragment and server.
        source: ReadError,
        /// What went wrong on the last failed request, as seen on the wire.
        cause: String,
    },
    /// A fragment of unknown length ([`incast_core::Fragment::up_to`],
    /// [`incast_core::Fragment::query`]) is longer than its maximum on the last server tried,
    /// which either said so (`announced: None`) or announced a length over it; no replica
    /// was left to try.
    #[error("fragment {fragment} on {server} is longer than its maximum of {max} bytes{}", announced.map(|l| format!(" (the server announced {l})")).unwrap_or_default())]
    FragmentTooLarge {
        /// Index of the fragment.
        fragment: usize,
        /// The server.
        server: ServerId,
        /// The fragment's maximum.
        max: u64,
        /// The length the server announced, if it announced one.
        announced: Option<u64>,
    },
    /// [`crate::Client::fan_in_read_into`] of a stripe with fragments of unknown length:
    /// their layout in a caller's buffer is not known before the read. Use
    /// [`crate::Client::fan_in_read`] or [`crate::Client::fan_in_read_stream`].
    #[error("a stripe with fragments of unknown length cannot be read into a caller's buffer")]
    UnknownLengths,
    /// A fragment's last server was removed from the client while the read ran
    /// ([`crate::Client::remove_server`]) and no replica was left to try.
    #[error("fragment {fragment} failed: {server} was removed from the client and no replica is left")]
    ServerRemoved {
        /// The server removed.
        server: ServerId,
        /// Index of the fragment it held.
        fragment: usize,
    },
    /// The read passed its deadline. With no server in `waiting_on` the read had no request
    /// out and no connection pending at the deadline: it was waiting for admission (other
    /// reads of the client held the port's budget, shortest first) or between grants.
    #[error(
        "read timed out after {after:?} with {received} of {block_len} bytes confirmed, {}",
        waiting(waiting_on)
    )]
    Timeout {
        /// The deadline.
        after: Duration,
        /// Servers with requests outstanding (or waiting for a connection) at the deadline,
        /// every one of them (the message names the first 8 and counts the rest).
        waiting_on: Vec<ServerId>,
        /// Bytes of the block confirmed by the deadline (none of them is handed out).
        received: u64,
        /// The block's length, as far as it was known at the deadline.
        block_len: u64,
    },
    /// The high-resolution timer could not be created or armed.
    #[error("timer: {0}")]
    Timer(#[source] io::Error),
    /// QUIC could not be used: a refused certificate, the server's stream limit, a TLS or
    /// endpoint setup problem. (A lost QUIC connection is retried like a lost TCP one.)
    #[cfg(feature = "quic")]
    #[error(transparent)]
    Quic(#[from] crate::quic::QuicError),
    /// TLS over TCP refused a certificate: the client refused a server's, or a server refused
    /// this client's (or its lack of one). These do not heal by retrying; a handshake that
    /// failed otherwise is retried like a failed connect.
    #[cfg(feature = "tls")]
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsFailure),
}

/// Servers a [`FanInError::Timeout`] message names (8); the rest are counted. The error's
/// `waiting_on` keeps every one: a read of 1,024 servers that timed out would otherwise print
/// a line of 12,000 characters into a service's log.
const WAITING_LISTED: usize = 8;

fn waiting(servers: &[ServerId]) -> String {
    if servers.is_empty() {
        return "no request outstanding (the read was waiting for admission)".to_owned();
    }
    let listed = servers.len().min(WAITING_LISTED);
    let list = servers[..listed]
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    match servers.len() - listed {
        0 => format!("still waiting on {list}"),
        more => format!("still waiting on {} servers: {list} and {more} more", servers.len()),
    }
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
    /// Time from the start of the read to its first grant (the rest is time waiting for
    /// admission at the port).
    pub granted: Option<Duration>,
    /// Time from the start of the read to its first byte.
    pub first_byte: Option<Duration>,
    /// Time from the start of the read to its last confirmed byte.
    pub done: Option<Duration>,
    /// Kernel RTOs the serving sockets took while serving it (Linux 6.7+ servers).
    pub kernel_rtos: u32,
    /// Segments the serving sockets retransmitted while serving it, less those the client
    /// reported as duplicates (D-SACK: their originals had arrived).
    pub retransmits: u32,
}

/// Kernel RTOs and retransmits an earlier read's responses took, reported during a later read
/// ([`ReadReport::late`]).
///
/// Why: a server writes a response's `End` frame, with its socket's counters, when it
/// writes the response's last byte. When that tail is lost, the RTO that repairs it fires
/// after the `End` was written, so the read it belongs to ends without hearing of it; the
/// connection's next response says how many the socket took before it began
/// ([`crate::wire::StartCounters`]). If a later read holds the connection by then (it came
/// from the pool), that read reports them here, for the read they belong to. RTOs that no
/// later response on the connection reports (it was closed or reset first) are counted by
/// nobody on the client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LateCounters {
    /// The read the responses belonged to ([`ReadReport::read`]).
    pub read: u64,
    /// Kernel RTOs its servers' sockets took after their `End` frames were written.
    pub rtos: u32,
    /// Segments retransmitted then.
    pub retransmits: u32,
}

/// What a read did.
#[derive(Clone, Debug, Default)]
pub struct ReadReport {
    /// This read's number on its client: 0 for the first read it ran, then in the order reads
    /// started (reads refused before they started have none). [`LateCounters::read`] refers
    /// to it.
    pub read: u64,
    /// Wall time of the read, connects included.
    pub elapsed: Duration,
    /// One entry per fragment, in stripe order.
    pub fragments: Vec<FragmentReport>,
    /// The scheduler's counters.
    pub stats: SchedulerStats,
    /// Sum of the fragments' kernel RTOs. It counts those of a lost tail that an RTO
    /// repaired after its `End` was written only when the same connection served this read
    /// again afterwards (else a later read reports them in `late`).
    pub kernel_rtos: u64,
    /// Sum of the fragments' retransmits.
    pub retransmits: u64,
    /// Kernel RTOs and retransmits of earlier reads' responses that their servers reported
    /// on this read's connections, for the reads they belong to: see [`LateCounters`]. In
    /// neither `kernel_rtos` nor `retransmits`, nor in any fragment's.
    pub late: Vec<LateCounters>,
    /// Connections opened by this read (the rest came from the pool).
    pub connects: u32,
    /// Connections this read reset because they owed only stalled responses that were hedged
    /// away: once a hedge won (their servers would have taken a kernel RTO on them), or
    /// before a hedge that would otherwise have queued behind them.
    pub connections_reset: u32,
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

impl ReadReport {
    /// The kernel RTOs and retransmits in [`ReadReport::late`], summed: what this read
    /// reported for earlier reads.
    pub fn late_totals(&self) -> (u64, u64) {
        self.late.iter().fold((0, 0), |(rtos, retransmits), l| {
            (rtos + u64::from(l.rtos), retransmits + u64::from(l.retransmits))
        })
    }
}

/// A read's result: the block, in one buffer, and the report.
#[derive(Debug)]
pub struct ReadOutput {
    /// The block: every byte of every fragment, in stripe order.
    pub block: Vec<u8>,
    /// What happened.
    pub report: ReadReport,
}

/// Totals over every read a [`crate::Client`] ran, for a service's metrics
/// ([`crate::Client::counters`]). Monotonic from the client's creation; a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientCounters {
    /// Reads started (`fan_in_read` calls, refused ones included).
    pub reads: u64,
    /// Reads that returned an error.
    pub reads_failed: u64,
    /// Bytes of the blocks returned.
    pub bytes: u64,
    /// Grants (requests) issued.
    pub grants: u64,
    /// Hedges issued.
    pub hedges: u64,
    /// Hedges whose answer arrived first.
    pub hedges_won: u64,
    /// Hedges whose original still completed first.
    pub hedges_spurious: u64,
    /// Re-requests after failures.
    pub retries: u64,
    /// Kernel RTOs the servers reported while answering ([`ReadReport::kernel_rtos`] and
    /// [`ReadReport::late`]).
    pub kernel_rtos: u64,
    /// TCP retransmits the servers reported while answering (less D-SACKed duplicates, as
    /// in [`FragmentReport::retransmits`]).
    pub retransmits: u64,
    /// QUIC loss-recovery episodes the servers reported.
    pub quic_loss_events: u64,
    /// Connections a read left owing only cancelled responses that were drained after the
    /// read and went back to the pool (instead of being reset and opened again; unless the
    /// pool already held 16 idle connections for that server and lane).
    pub connections_drained: u64,
    /// Such connections reset after all: silent too long, or a malformed frame.
    pub drains_reset: u64,
    /// Idle pooled connections closed because opening a connection found the process out
    /// of file descriptors (see [`crate::Client::close_idle`]).
    pub pool_shed: u64,
}

/// The client's running totals behind [`ClientCounters`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    reads: AtomicU64,
    reads_failed: AtomicU64,
    bytes: AtomicU64,
    grants: AtomicU64,
    hedges: AtomicU64,
    hedges_won: AtomicU64,
    hedges_spurious: AtomicU64,
    retries: AtomicU64,
    kernel_rtos: AtomicU64,
    retransmits: AtomicU64,
    quic_loss_events: AtomicU64,
    pub(crate) connections_drained: AtomicU64,
    pub(crate) drains_reset: AtomicU64,
    pub(crate) pool_shed: AtomicU64,
}

impl Counters {
    /// Counts a read that ended: `bytes` returned (0 on failure) and what its report says.
    pub(crate) fn record(&self, ok: bool, bytes: u64, r: &ReadReport) {
        let add = |c: &AtomicU64, v: u64| {
            c.fetch_add(v, Ordering::Relaxed);
        };
        add(&self.reads, 1);
        add(&self.reads_failed, u64::from(!ok));
        add(&self.bytes, bytes);
        add(&self.grants, r.stats.grants);
        add(&self.hedges, r.stats.hedges);
        add(&self.hedges_won, r.stats.hedges_won);
        add(&self.hedges_spurious, r.stats.hedges_spurious);
        add(&self.retries, r.stats.retries);
        let (late_rtos, late_retransmits) = r.late_totals();
        add(&self.kernel_rtos, r.kernel_rtos + late_rtos);
        add(&self.retransmits, r.retransmits + late_retransmits);
        add(&self.quic_loss_events, r.quic_loss_events);
    }

    /// Counts a read refused before it started.
    pub(crate) fn refused(&self) {
        self.record(false, 0, &ReadReport::default());
    }

    pub(crate) fn snapshot(&self) -> ClientCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ClientCounters {
            reads: get(&self.reads),
            reads_failed: get(&self.reads_failed),
            bytes: get(&self.bytes),
            grants: get(&self.grants),
            hedges: get(&self.hedges),
            hedges_won: get(&self.hedges_won),
            hedges_spurious: get(&self.hedges_spurious),
            retries: get(&self.retries),
            kernel_rtos: get(&self.kernel_rtos),
            retransmits: get(&self.retransmits),
            quic_loss_events: get(&self.quic_loss_events),
            connections_drained: get(&self.connections_drained),
            drains_reset: get(&self.drains_reset),
            pool_shed: get(&self.pool_shed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_says_how_far_the_read_got_and_what_it_waited_for() {
        let t = |waiting_on: Vec<ServerId>| FanInError::Timeout {
            after: Duration::from_secs(30),
            waiting_on,
            received: 4096,
            block_len: 1 << 20,
        };
        assert_eq!(
            t(vec![ServerId(2), ServerId(5)]).to_string(),
            "read timed out after 30s with 4096 of 1048576 bytes confirmed, still waiting on server 2, server 5"
        );
        assert_eq!(
            t((0..300u32).map(ServerId).collect()).to_string(),
            "read timed out after 30s with 4096 of 1048576 bytes confirmed, still waiting on 300 \
             servers: server 0, server 1, server 2, server 3, server 4, server 5, server 6, \
             server 7 and 292 more"
        );
        assert_eq!(
            t(vec![]).to_string(),
            "read timed out after 30s with 4096 of 1048576 bytes confirmed, no request outstanding \
             (the read was waiting for admission)"
        );
    }
}
