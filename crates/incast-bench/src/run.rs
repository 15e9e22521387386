//! One measured configuration: a strategy reading blocks from N servers, `concurrency` reads
//! in flight at once through one shared client, as a striped storage service does.
//!
//! Each configuration gets a fresh [`Client`] (so socket settings never leak between
//! strategies), reads `warmup` blocks per concurrent reader that are not measured
//! (connections set up, slow start done, ARP resolved), then `blocks` measured reads. Each
//! read has its own stripe: with `R` readers the configuration uses `min(pool, N x R)`
//! servers and read `k` starts at server `k x N` of them (rotating), so concurrent reads meet
//! at the client's port, not at one server. Goodput is the bytes of completed reads over the
//! wall time of the measured ones; read latency goes into an HDR histogram (microseconds, 3
//! significant digits) that is exported with the result so runs can be merged. Every block
//! is checked byte by byte against the pattern the servers serve.
//!
//! With background flows, `F` bulk TCP flows stream to the client through the same port for
//! the whole configuration (warm-up included), each from a host of its own on the testbed (see
//! [`crate::servers`]), so reads meet a standing queue; their goodput during the measured
//! reads is reported beside the reads'.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use incast_core::stripe::Fragment;
use incast_core::{ServerId, Stripe};
use incast_rpc::quic::QuicClientConfig;
use incast_rpc::Client;

use crate::pattern;
use crate::reference::BlockingClient;
use crate::strategy::{Strategy, Trust};

/// How a block is laid out over the senders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Fixed server request unit: every sender sends this many bytes; the block grows with N.
    Sru(u64),
    /// Fixed block: this many bytes split over the senders.
    Block(u64),
}

impl Layout {
    /// Bytes per sender (the first senders get one more byte when a block does not divide).
    pub fn sru(self, senders: usize) -> u64 {
        match self {
            Layout::Sru(s) => s,
            Layout::Block(b) => b / senders.max(1) as u64,
        }
    }
    /// Bytes per block.
    pub fn block(self, senders: usize) -> u64 {
        match self {
            Layout::Sru(s) => s * senders as u64,
            Layout::Block(b) => b,
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Layout::Sru(s) => write!(f, "SRU {}", crate::output::human(*s)),
            Layout::Block(b) => write!(f, "block {}", crate::output::human(*b)),
        }
    }
}

/// The second shape of a mixed workload (`sweep --mix 16x4KiB`): every other concurrent
/// reader reads stripes of `senders` fragments of `sru` bytes, the others the
/// configuration's layout, as a service answers small lookups beside large block reads.
/// The two kinds meet at the client's port, where the small reads' latency shows whether
/// they wait behind the large reads' bytes (see the `sweep` module's *Mixed reads*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mix {
    /// Fragments (senders) of a mixed read, at least 1.
    pub senders: usize,
    /// Bytes per fragment, at least 1.
    pub sru: u64,
}

impl Mix {
    /// Bytes of one mixed read.
    pub fn block(self) -> u64 {
        self.sru.saturating_mul(self.senders as u64)
    }

    /// Whether concurrent reader `reader` (from 0: a closed-loop reader, or a read's place in
    /// its batch) reads the mixed shape: the odd ones, so half the readers, rounded down.
    pub fn reads_with(reader: usize) -> bool {
        reader % 2 == 1
    }
}

impl std::str::FromStr for Mix {
    type Err = String;

    /// `SENDERSxSIZE`, e.g. `16x4KiB`: 16 fragments of 4 KiB.
    fn from_str(s: &str) -> Result<Self, String> {
        let (n, size) = s
            .split_once(['x', 'X'])
            .ok_or_else(|| format!("`{s}`: give the mixed reads as SENDERSxSIZE, e.g. 16x4KiB"))?;
        let senders = match n.trim().parse::<usize>() {
            Ok(0) | Err(_) => return Err(format!("`{s}`: `{n}` is not a sender count of 1 or more")),
            Ok(v) => v,
        };
        let sru = crate::units::parse_bytes(size)?;
        if sru == 0 {
            return Err(format!("`{s}`: a fragment must be at least one byte"));
        }
        if sru.checked_mul(senders as u64).is_none_or(|b| b > MAX_MIX_BLOCK) {
            return Err(format!(
                "`{s}`: a mixed read of more than {} is not a small read",
                crate::output::human(MAX_MIX_BLOCK)
            ));
        }
        Ok(Mix { senders, sru })
    }
}

impl std::fmt::Display for Mix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} x {}", self.senders, crate::output::human(self.sru))
    }
}

/// Open-loop arrivals (`sweep --load 0.7`): measured reads start at the times of a seeded
/// Poisson process, as independent clients' requests reach a service, instead of each
/// reader starting its next read when its last one ends. A closed loop at full speed keeps
/// the port busy whatever the order: the faster one kind of read is served, the more of it
/// arrives, so a policy that favours small reads is also handed more of them, and the large
/// reads wait behind a stream that never thins. In an open loop the work offered is fixed
/// ahead ([`Arrivals::load`] of the line rate), every strategy of a configuration's round
/// sees the same arrival times (the same [`Arrivals::seed`]), and a read's latency counts
/// from its arrival, including any time it waited for one of the `concurrency` places.
/// Homa (Montazeri et al., SIGCOMM 2018) and pFabric measure scheduling this way, at a
/// fixed share of the link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Arrivals {
    /// Offered load: the bytes arriving per second as a share of the line rate, in
    /// `(0, MAX_LOAD]`.
    pub load: f64,
    /// Mean reads arriving per second (the load's bytes over the mean read's).
    pub per_sec: f64,
    /// Seed of the inter-arrival times.
    pub seed: u64,
}

/// The most offered load `--load` takes (1.0: the line rate; past it the reads in flight
/// fill their places and every later read waits for one, however it is scheduled).
pub const MAX_LOAD: f64 = 1.0;

/// The longest gap between two arrivals (60 s), whatever the draw: a rate near zero must not
/// leave a run waiting past its time limits for its next read.
const MAX_ARRIVAL_GAP: Duration = Duration::from_secs(60);

impl Arrivals {
    /// The arrivals of `load` (a share of `line_rate_mbps`) of reads of `mean_read_bytes`
    /// on average, or why there are none: a load out of `(0, MAX_LOAD]`, or no line rate or
    /// read size to derive a rate from.
    pub fn at_load(load: f64, line_rate_mbps: f64, mean_read_bytes: f64, seed: u64) -> Result<Self, String> {
        if !(load > 0.0 && load <= MAX_LOAD) {
            return Err(format!("an offered load of {load} is not in (0, {MAX_LOAD}]"));
        }
        let per_sec = load * line_rate_mbps * 1e6 / 8.0 / mean_read_bytes;
        if !(per_sec.is_finite() && per_sec > 0.0) {
            return Err(format!(
                "no arrival rate for a load of {load}: line rate {line_rate_mbps} Mbit/s, reads of {mean_read_bytes} bytes"
            ));
        }
        Ok(Self { load, per_sec, seed })
    }

    /// The gaps between successive arrivals: exponential with mean `1 / per_sec` (a Poisson
    /// process), each at most [`MAX_ARRIVAL_GAP`], the same sequence for the same seed.
    pub fn gaps(self) -> impl Iterator<Item = Duration> {
        use rand_pcg::rand_core::{Rng, SeedableRng};
        let mut g = rand_pcg::Pcg64Mcg::seed_from_u64(self.seed);
        std::iter::repeat_with(move || {
            // Uniform in (0, 1]: 53 random bits, plus one so that ln() is finite.
            let u = ((g.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
            Duration::try_from_secs_f64(-u.ln() / self.per_sec)
                .unwrap_or(MAX_ARRIVAL_GAP)
                .min(MAX_ARRIVAL_GAP)
        })
    }
}

/// The largest mixed read `--mix` takes: 1 GiB (a mixed read is held whole in memory, as
/// every read of the bench).
pub const MAX_MIX_BLOCK: u64 = 1 << 30;

/// The stripe of read number `no` over `senders` of the `pool` servers: one fragment per
/// sender, starting at server `no x senders` (mod the pool) and rotating, each fragment with
/// its own key, so a fragment landing in the wrong place is caught by [`pattern::verify`].
pub fn stripe(pool: &[ServerId], senders: usize, layout: Layout, no: u64) -> Stripe {
    let n = senders.clamp(1, pool.len().max(1));
    let block = layout.block(n);
    let (base, extra) = (block / n as u64, block % n as u64);
    let first = (no as usize).wrapping_mul(n) % pool.len().max(1);
    let frags = (0..n)
        .map(|i| {
            let s = pool[(first + i) % pool.len()];
            Fragment::new(s, format!("b{no}-f{i}"), 0, base + u64::from((i as u64) < extra))
        })
        .collect();
    Stripe::new(frags).expect("bench stripes are valid")
}

/// `stripe` with every fragment's length hidden from the client: fragment `i` becomes the
/// query `len:<n>` against its key, answered by [`pattern::PatternStore`] with the same bytes,
/// at most twice its length (the `unsized` strategy). Verify the block against `stripe`.
pub fn as_queries(stripe: &Stripe) -> Stripe {
    Stripe::new(
        stripe
            .fragments()
            .iter()
            .map(|f| {
                let q = format!("len:{}", f.len()).into_bytes();
                Fragment::query(f.server(), f.key_arc().clone(), q, f.len().max(1) * 2)
                    .with_replicas(f.replicas().iter().copied())
            })
            .collect(),
    )
    .expect("bench stripes are valid")
}

/// What to run.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// Strategy.
    pub strategy: Strategy,
    /// Senders (the first `senders` servers).
    pub senders: usize,
    /// Layout.
    pub layout: Layout,
    /// Measured blocks.
    pub blocks: u32,
    /// Unmeasured warm-up blocks.
    pub warmup: u32,
    /// Port buffer the `capped` strategy divides among senders and `hinted` tells the client.
    pub buffer_hint: u64,
    /// Port rate in bits per second that `hinted` tells the client (`None`: unknown).
    pub rate_hint: Option<u64>,
    /// Deadline of one block.
    pub read_timeout: Duration,
    /// Congestion control set on the client's sockets.
    pub cc: String,
    /// Stop measuring after this long even if fewer than `blocks` blocks were read.
    pub max_time: Duration,
    /// Keep reading past `blocks` until this long has been measured (bounded by `max_time`):
    /// 100 blocks of one 256 KiB fragment take 10-25 ms on loopback, too short for a rate.
    pub min_time: Duration,
    /// Trust and tuning for the QUIC strategies.
    pub quic: Option<QuicClientConfig>,
    /// Trust and identity for the `tls` strategy.
    pub tls: Option<incast_rpc::tls::TlsClientConfig>,
    /// Reads in flight at once, through one shared client.
    pub concurrency: usize,
    /// Bulk senders to stream from during the configuration (background flows).
    pub background: Vec<SocketAddr>,
    /// Reads in batches of `concurrency` started together, the next batch when the last read
    /// of this one ends (a partition-aggregate query); else closed loop.
    pub batch: bool,
    /// Mixed reads: every other reader reads this shape instead of `layout`'s (in an open
    /// loop, every other read by number).
    pub mix: Option<Mix>,
    /// Open-loop arrivals of the measured reads, at most `concurrency` in flight (`None`:
    /// closed loop, or batches with `batch`).
    pub arrivals: Option<Arrivals>,
}

/// The result of one configuration, one JSON line.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Measurement {
    /// Strategy name.
    pub strategy: String,
    /// Round of its configuration, from 0 (a sweep in rounds runs each strategy of a
    /// configuration several times, alternating; see the `sweep` module's *Rounds*). 0 when
    /// the sweep ran one.
    pub round: u32,
    /// Senders.
    pub senders: usize,
    /// The layout: "SRU 32KiB" (fixed server request unit) or "block 1MiB" (fixed block).
    pub layout: String,
    /// Bytes per sender.
    pub sru_bytes: u64,
    /// Bytes per block.
    pub block_bytes: u64,
    /// Reads in flight at once through one shared client.
    pub concurrency: usize,
    /// Measured reads attempted (fewer than asked when the time limit stopped the run).
    pub blocks: u32,
    /// Blocks that failed (error or deadline); they count as no bytes.
    pub failed_blocks: u32,
    /// Goodput of completed blocks, Mbit/s.
    pub goodput_mbps: f64,
    /// Line rate measured in the same run with one sender streaming, Mbit/s.
    pub line_rate_mbps: f64,
    /// Goodput / line rate.
    pub line_rate_fraction: f64,
    /// Block time at line rate, ms.
    pub ideal_ms: f64,
    /// Mean read latency, ms.
    pub mean_ms: f64,
    /// Read latency percentiles, ms.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest block.
    pub max_ms: f64,
    /// p99 / ideal.
    pub p99_over_ideal: f64,
    /// Kernel RTOs the servers' sockets took serving the measured reads (TCP_INFO, Linux
    /// 6.7+ servers; not measured by the `blocking` reference client), each counted for the
    /// read it belongs to, also when a later read's connection reported it
    /// ([`incast_rpc::LateCounters`]).
    pub kernel_rtos: u64,
    /// Of `kernel_rtos`, those a later read reported: RTOs that repaired a lost tail after
    /// its `End` frame was written.
    pub late_rtos: u64,
    /// RTOs of warm-up reads that measured reads reported late: in neither `kernel_rtos`
    /// nor `blocks_with_rto`. Before the split by the responses' start counters they counted
    /// as the measured read's.
    pub warmup_rtos_reported_late: u64,
    /// Requests sent over QUIC.
    pub quic_requests: u64,
    /// QUIC loss-recovery episodes on the servers' side (quinn congestion events): QUIC's
    /// counterpart of `kernel_rtos`.
    pub quic_loss_events: u64,
    /// Packets quinn declared lost on the servers' side.
    pub quic_lost_packets: u64,
    /// CPU seconds this process (client and in-process servers) spent per GiB of goodput.
    pub cpu_s_per_gib: f64,
    /// Share of the whole machine's CPU time that its own work kept busy during the
    /// measured reads (0..=1, every core, the testbed's kernel work included; steal not
    /// included): 1 minus the headroom.
    pub machine_cpu_busy: f64,
    /// Share of the whole machine's CPU time a hypervisor took from it during the measured
    /// reads (0..=1, /proc/stat's steal; 0 on bare metal). Where it is more than a few
    /// percent, the row measured a slow spell of the host (on the 2-core VM such spells
    /// doubled the CPU per GiB of a row and halved its goodput): run it again.
    pub machine_cpu_steal: f64,
    /// Blocks during which at least one kernel RTO fired.
    pub blocks_with_rto: u32,
    /// Fraction of completed blocks without a kernel RTO.
    pub rto_free_fraction: f64,
    /// Blocks slower than 100 ms.
    pub blocks_over_100ms: u32,
    /// Segments the servers retransmitted for the measured reads, those a later read
    /// reported included (as `kernel_rtos`), less those the client D-SACKed (since the
    /// fifty-first session; before, every retransmit).
    pub retransmits: u64,
    /// Hedges the scheduler fired.
    pub hedges: u64,
    /// Hedges whose replacement was confirmed before the stalled original.
    pub hedges_won: u64,
    /// Hedges whose original still completed first (the stall was not one).
    pub hedges_spurious: u64,
    /// Stalls not hedged because the read's or the port's hedge budget was spent.
    pub hedges_denied: u64,
    /// Stalled grants moved to a replica as failures after the hedge budget was spent.
    pub escalations: u64,
    /// Grants asked again of the same server after their connection was reset or closed
    /// under them (`SchedulerStats::lost_retries`; a second loss of the same fragment fails
    /// it over to a replica or fails the read).
    pub lost_retries: u64,
    /// Connections reset after a hedge of their stalled response won.
    pub connections_reset: u64,
    /// Grants whose bytes the port stopped counting while they were late (see
    /// `SchedulerStats::late_grants`).
    pub late_grants: u64,
    /// Grants held by their server's store, its learnt hold 1 ms or more (see
    /// `SchedulerStats::held_grants`).
    pub held_grants: u64,
    /// Smallest client-wide budget seen during the reads, bytes (`default`, `quic`,
    /// `fallback`; 0 otherwise).
    pub budget_min: u64,
    /// Largest client-wide budget seen during the reads, bytes.
    pub budget_max: u64,
    /// Queueing-delay samples (clean first-byte times above the base RTT).
    pub delay_samples: u64,
    /// Their mean, microseconds.
    pub delay_mean_us: f64,
    /// Their largest, microseconds.
    pub delay_max_us: f64,
    /// Mean time of the hosts taken out of those samples' first-byte times (the server's
    /// hold and the client's wait, by the kernels' receive timestamps), microseconds.
    pub host_mean_us: f64,
    /// Mean time a read waited for the port (no grant outstanding), ms.
    pub admission_wait_ms: f64,
    /// Mean time a read had grants outstanding (transferring), ms.
    pub transfer_ms: f64,
    /// The client-wide receiver's budget decreases during the configuration (warm-up
    /// included): on queueing delay, on reported loss, on stalls.
    pub budget_decreases: [u64; 3],
    /// Stalls past slow start on a port no server had reported loss on lately, which the
    /// budget left alone (`ReceiverStats::quiet_stalls`).
    pub quiet_stalls: u64,
    /// Times the port went silent and stopped counting the bytes then outstanding
    /// (`ReceiverStats::stuck_discounts`).
    pub stuck_discounts: u64,
    /// Times the client-wide receiver started competing with a standing queue of other
    /// traffic (`ReceiverStats::competing_entries`).
    pub competing_entries: u64,
    /// Queueing-delay samples above the target that held the budget's growth
    /// (`ReceiverStats::delay_holds`).
    pub delay_holds: u64,
    /// The target delay the port learnt at its last loss, microseconds (0: none learnt;
    /// `ReceiverStats::learnt_target`). A learnt target is in force only for
    /// `incast_core::receiver::TARGET_HOLD` after its loss, so a nonzero value may have
    /// lapsed by the row's end, the configured target applying again.
    pub learnt_target_us: f64,
    /// The port's base RTT at the end, microseconds (0: not measured).
    pub base_rtt_us: f64,
    /// The port's rate as the client-wide receiver knew it at the end, Mbit/s: the rate
    /// hint, else its own measurement (`ReceiverStats::link_rate_bytes_per_sec`; 0: not
    /// measured).
    pub port_rate_mbps: f64,
    /// Samples of the port's rate the receiver took from the client interface's receive
    /// counter (`ReceiverStats::counter_samples`; 0: no counter, or `own-rate`).
    pub counter_samples: u64,
    /// Whether reads came in batches of `concurrency` started together (else each reader
    /// starts its next read as its last one ends).
    pub batch: bool,
    /// Offered load of an open loop, as a share of the line rate (`--load`; 0: a closed
    /// loop or batches).
    pub load: f64,
    /// Reads of an open loop that arrived while `concurrency` reads were in flight and
    /// waited for one to end (their wait is in their latency).
    pub arrivals_queued: u32,
    /// The mixed reads' shape (`--mix`), e.g. "16 x 4KiB"; `None` when every read has the
    /// layout's shape. In a mixed run `blocks`, the goodput and the latency percentiles above
    /// count both kinds; the `mix_*` and `layout_*` fields split them.
    pub mix: Option<String>,
    /// Mixed reads that completed.
    pub mix_blocks: u32,
    /// Bytes of one mixed read.
    pub mix_block_bytes: u64,
    /// Mixed reads' mean latency, ms.
    pub mix_mean_ms: f64,
    /// Their median, ms.
    pub mix_p50_ms: f64,
    /// Their 99th percentile, ms.
    pub mix_p99_ms: f64,
    /// Their slowest, ms.
    pub mix_max_ms: f64,
    /// One mixed read's bytes at the line rate, ms.
    pub mix_ideal_ms: f64,
    /// `mix_p99_ms / mix_ideal_ms`.
    pub mix_p99_over_ideal: f64,
    /// The layout's reads of a mixed run that completed.
    pub layout_blocks: u32,
    /// Their mean latency, ms (0 without `--mix`).
    pub layout_mean_ms: f64,
    /// Their 99th percentile, ms (0 without `--mix`).
    pub layout_p99_ms: f64,
    /// Grants (requests) issued.
    pub grants: u64,
    /// Packets the switch port dropped (testbed).
    pub switch_drops: Option<u64>,
    /// Kernel RTOs of the servers' sockets on the testbed's hosts during the configuration,
    /// warm-up included: the hosts' `TCPTimeouts` counters, less the bulk senders' RTOs.
    /// Unlike `kernel_rtos` (what servers report in `End` frames) this counts the RTOs of
    /// connections the client abandoned after a hedge, whose servers never send another
    /// `End`. `None` off the testbed.
    pub host_rtos: Option<u64>,
    /// SYN-ACKs the server hosts sent again during the configuration (`TCPSynRetrans`): at
    /// most this many of `host_rtos` were the handshake timers of connections whose SYN-ACK
    /// the port dropped, not data RTOs. `None` off the testbed.
    pub host_syn_ack_retransmits: Option<u64>,
    /// Connections the server hosts accepted during the configuration (`PassiveOpens`):
    /// every handshake whose SYN-ACK crossed the port, warm-up included. `None` off the
    /// testbed.
    pub host_handshakes: Option<u64>,
    /// The part of `host_rtos` counted before the measured reads began (the warm-up, where
    /// every connection of the configuration is opened). A handshake timer fires a second
    /// after its SYN-ACK was lost, so a loss in the warm-up's last second counts after it.
    /// `None` off the testbed.
    pub host_rtos_warmup: Option<u64>,
    /// The part of `host_handshakes` accepted during the warm-up; the rest are connections
    /// opened again while the measured reads ran. `None` off the testbed.
    pub host_handshakes_warmup: Option<u64>,
    /// Kernel RTOs of the client's own sockets during the configuration, warm-up included
    /// (the client namespace's `TCPTimeouts`; not in `host_rtos`). Each handshake the client
    /// tried again from the same port counts one: the client's kernel sends that SYN again
    /// from an 8 ms timer (see `HostCounters::client_rtos`). `None` off the testbed.
    pub client_rtos: Option<u64>,
    /// The part of `client_rtos` counted before the measured reads began. `None` off the
    /// testbed.
    pub client_rtos_warmup: Option<u64>,
    /// Connections the client drained after a read and pooled, during the measured reads
    /// (`ClientCounters::connections_drained`; drains still running when the last read
    /// ended are not counted).
    pub connections_drained: u64,
    /// Such drains that ended in a reset instead (`ClientCounters::drains_reset`).
    pub drains_reset: u64,
    /// Background bulk flows through the same port.
    pub background_flows: usize,
    /// Their goodput during the measured reads, Mbit/s.
    pub background_mbps: f64,
    /// Congestion control.
    pub cc: String,
    /// Port buffer, bytes (testbed).
    pub buffer_bytes: Option<u64>,
    /// Port rate, bit/s (testbed).
    pub rate_bps: Option<u64>,
    /// Wall time of the measured blocks, s.
    pub elapsed_s: f64,
    /// First error, when blocks failed.
    pub first_error: Option<String>,
    /// HDR histogram of block latency in microseconds, V2 + DEFLATE, base64.
    pub histogram: String,
}

/// Why a configuration could not be measured at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// More senders asked for than servers given.
    #[error("{senders} senders asked for, but only {servers} servers are available")]
    NotEnoughServers {
        /// Asked for.
        senders: usize,
        /// Available.
        servers: usize,
    },
    /// The strategy cannot run with these settings (e.g. QUIC without trust).
    #[error("{strategy}: {why}")]
    Plan {
        /// Strategy.
        strategy: Strategy,
        /// Why.
        why: String,
    },
    /// A block came back wrong: a bug, never a measurement.
    #[error("{strategy} at {senders} senders: {source}")]
    Corrupt {
        /// Strategy.
        strategy: Strategy,
        /// Senders.
        senders: usize,
        /// Where.
        source: pattern::Mismatch,
    },
    /// The last warm-up block failed: the servers are unreachable or broken, and measuring
    /// would only count failures.
    #[error("{strategy} at {senders} senders: warm-up failed: {error}")]
    Warmup {
        /// Strategy.
        strategy: Strategy,
        /// Senders.
        senders: usize,
        /// The read error, as text (the library's or the reference client's).
        error: String,
    },
}

/// Who reads: the library's client under a policy, or the reference blocking client. A
/// sweep in rounds keeps one per strategy for every round of a configuration, as a service
/// keeps its client: what the client-wide receiver learnt in one round (the port's rate, its
/// base RTT, the budget) carries into the next, and only the first round pays for learning
/// it.
pub enum Reader {
    Library(Arc<Client>, incast_core::Policy),
    Blocking(Arc<BlockingClient>),
}

impl Reader {
    /// The reader `spec` asks for, over the servers it uses.
    pub fn new(servers: &[(ServerId, SocketAddr)], spec: &RunSpec) -> Result<Self, RunError> {
        let used = used_servers(servers, spec)?;
        if spec.strategy == Strategy::Blocking {
            return Ok(Reader::Blocking(Arc::new(BlockingClient::new(used, spec.read_timeout))));
        }
        let (policy, config) = spec
            .strategy
            .plan(
                spec.senders,
                spec.buffer_hint,
                spec.rate_hint,
                spec.read_timeout,
                &spec.cc,
                Trust {
                    quic: spec.quic.as_ref(),
                    tls: spec.tls.as_ref(),
                },
            )
            .map_err(|why| RunError::Plan {
                strategy: spec.strategy,
                why,
            })?;
        Ok(Reader::Library(
            Arc::new(Client::with_config(used.iter().copied(), config)),
            policy,
        ))
    }

    /// Closes the client's idle pooled connections (see `Client::close_idle`).
    pub fn close_idle(&self) {
        if let Reader::Library(c, _) = self {
            c.close_idle();
        }
    }

    /// The client-wide receiver's counters so far (`None`: no port, or the blocking client).
    fn port_stats(&self) -> Option<incast_core::receiver::ReceiverStats> {
        match self {
            Reader::Library(c, _) => c.port_stats(),
            Reader::Blocking(_) => None,
        }
    }

    async fn read(&self, s: Stripe) -> Result<(Vec<u8>, Option<incast_rpc::ReadReport>), String> {
        match self {
            Reader::Library(c, p) => c
                .fan_in_read(&s, p)
                .await
                .map(|o| (o.block, Some(o.report)))
                .map_err(|e| e.to_string()),
            Reader::Blocking(c) => {
                let c = c.clone();
                tokio::task::spawn_blocking(move || c.read(&s))
                    .await
                    .map_err(|e| e.to_string())?
                    .map(|b| (b, None))
                    .map_err(|e| e.to_string())
            }
        }
    }
}

/// The servers a configuration reads from: `senders` per read, a set per concurrent read
/// while there are enough.
fn used_servers<'a>(
    servers: &'a [(ServerId, SocketAddr)],
    spec: &RunSpec,
) -> Result<&'a [(ServerId, SocketAddr)], RunError> {
    if spec.senders == 0 || spec.senders > servers.len() {
        return Err(RunError::NotEnoughServers {
            senders: spec.senders,
            servers: servers.len(),
        });
    }
    let r = spec.concurrency.max(1);
    Ok(&servers[..servers.len().min(spec.senders.saturating_mul(r))])
}

/// Reads blocks as `spec` says, with `reader` if given (see [`Reader`]; it must have been
/// made for the same servers and `spec`), else with a reader of its own. `on_warm` is called
/// once, after the warm-up and before the first measured read. `on_block` is called after
/// each measured read, and with the number of skipped reads when the time limit ends the run
/// early.
pub async fn measure(
    servers: &[(ServerId, SocketAddr)],
    spec: &RunSpec,
    reader: Option<&Reader>,
    on_warm: impl FnOnce(),
    mut on_block: impl FnMut(u64),
) -> Result<Measurement, RunError> {
    let r = spec.concurrency.max(1);
    let ids: Vec<ServerId> = used_servers(servers, spec)?.iter().map(|(id, _)| *id).collect();
    if let Some(mix) = spec.mix.filter(|m| m.senders > ids.len()) {
        return Err(RunError::NotEnoughServers {
            senders: mix.senders,
            servers: ids.len(),
        });
    }
    let own;
    let reader = match reader {
        Some(r) => r,
        None => {
            own = Reader::new(servers, spec)?;
            &own
        }
    };
    let plan_error = |why| RunError::Plan {
        strategy: spec.strategy,
        why,
    };
    // The receiver's counters are the client's since it was made: a reader kept from an
    // earlier round has counted that round's too.
    let port_before = reader.port_stats().unwrap_or_default();
    let corrupt = |source| RunError::Corrupt {
        strategy: spec.strategy,
        senders: spec.senders,
        source,
    };
    let background = Background::start(&spec.background, &spec.cc)
        .await
        .map_err(|e| plan_error(format!("background flows: {e}")))?;
    let next = std::cell::Cell::new(0u64);
    // Read `no`'s stripe: of the mixed shape, or of the layout's.
    let stripe_of = |no, mixed: bool| match spec.mix {
        Some(mix) if mixed => stripe(&ids, mix.senders, Layout::Sru(mix.sru), no),
        _ => stripe(&ids, spec.senders, spec.layout, no),
    };
    let is_mixed = |reader: usize| spec.mix.is_some() && Mix::reads_with(reader);
    let open_lengths = spec.strategy.unknown_lengths();
    // Warm-up: `warmup` reads per reader, all readers at once.
    let last_failure = RefCell::new(None);
    let warm = u64::from(spec.warmup) * r as u64;
    let first_corrupt = RefCell::new(None);
    // The number of the last warm-up read that ended whole (reads are numbered as they start).
    let last_warm = std::cell::Cell::new(None::<u64>);
    let warm_reader = |mixed: bool| {
        let (next, first_corrupt, last_warm, last_failure, stripe_of) =
            (&next, &first_corrupt, &last_warm, &last_failure, &stripe_of);
        async move {
            loop {
                let no = next.get();
                if no >= warm {
                    return;
                }
                next.set(no + 1);
                let s = stripe_of(no, mixed);
                match reader.read(if open_lengths { as_queries(&s) } else { s.clone() }).await {
                    Ok((block, report)) => {
                        if let Err(m) = pattern::verify(&s, &block) {
                            first_corrupt.borrow_mut().get_or_insert(m);
                        }
                        if let Some(r) = report {
                            last_warm.set(last_warm.get().max(Some(r.read)));
                        }
                        *last_failure.borrow_mut() = None;
                    }
                    Err(e) => *last_failure.borrow_mut() = Some(e),
                }
            }
        }
    };
    futures_util::future::join_all((0..r).map(|i| warm_reader(is_mixed(i)))).await;
    if let Some(m) = first_corrupt.take() {
        return Err(corrupt(m));
    }
    // Only the last warm-up read decides: earlier failures may be connects still settling.
    if let Some(error) = last_failure.take() {
        return Err(RunError::Warmup {
            strategy: spec.strategy,
            senders: spec.senders,
            error,
        });
    }
    on_warm();
    // Kernel RTOs by measured read (its number on the client), and those that later reads
    // reported for earlier ones: attributed once every read has ended.
    let rtos_of = RefCell::new(std::collections::HashMap::<u64, u64>::new());
    let late = RefCell::new(Vec::<incast_rpc::LateCounters>::new());
    let drains = |r: &Reader| match r {
        Reader::Library(c, _) => {
            let k = c.counters();
            (k.connections_drained, k.drains_reset)
        }
        Reader::Blocking(_) => (0, 0),
    };
    let drains_before = drains(reader);
    let new_hist = || Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds");
    let hist = RefCell::new(new_hist());
    // A mixed run's reads by kind (the layout's, the mixed shape's): latency and its sum.
    let by_kind = RefCell::new([(new_hist(), 0u128), (new_hist(), 0u128)]);
    let m = RefCell::new(Measurement {
        strategy: spec.strategy.name().to_owned(),
        senders: spec.senders,
        concurrency: r,
        layout: spec.layout.to_string(),
        sru_bytes: spec.layout.sru(spec.senders),
        block_bytes: spec.layout.block(spec.senders),
        background_flows: spec.background.len(),
        batch: spec.batch,
        budget_min: u64::MAX,
        ..Measurement::default()
    });
    let (delay_sum_us, wait_sum_us) = (std::cell::Cell::new(0f64), std::cell::Cell::new(0u128));
    let host_sum_us = std::cell::Cell::new(0f64);
    let transfer_sum_us = std::cell::Cell::new(0u128);
    let bytes = std::cell::Cell::new(0u64);
    let sum_us = std::cell::Cell::new(0u128);
    let on_block = RefCell::new(&mut on_block);
    let cpu_before = crate::cpu::process_cpu();
    let ticks_before = crate::cpu::machine_ticks();
    let bulk_before = background.bytes();
    let start = Instant::now();
    let end_no = warm + u64::from(spec.blocks);
    // One measured read: number `no`, its latency counted from `arrived` (an open loop's
    // arrival time), else from its start.
    let read_one = |no: u64, mixed: bool, arrived: Option<Instant>| {
        let (reader, m, bytes, sum_us, hist, first_corrupt, on_block) =
            (&reader, &m, &bytes, &sum_us, &hist, &first_corrupt, &on_block);
        let by_kind = &by_kind;
        let (rtos_of, late) = (&rtos_of, &late);
        let (delay_sum_us, wait_sum_us, transfer_sum_us) = (&delay_sum_us, &wait_sum_us, &transfer_sum_us);
        let host_sum_us = &host_sum_us;
        let s = stripe_of(no, mixed);
        async move {
            let t = arrived.unwrap_or_else(Instant::now);
            let res = reader.read(if open_lengths { as_queries(&s) } else { s.clone() }).await;
            let took = t.elapsed();
            let mut m = m.borrow_mut();
            m.blocks += 1;
            match res {
                Ok((block, report)) => {
                    if let Err(x) = pattern::verify(&s, &block) {
                        first_corrupt.borrow_mut().get_or_insert(x);
                    }
                    bytes.set(bytes.get() + block.len() as u64);
                    sum_us.set(sum_us.get() + took.as_micros());
                    hist.borrow_mut().saturating_record(took.as_micros().max(1) as u64);
                    let (kind_hist, kind_sum) = &mut by_kind.borrow_mut()[usize::from(mixed)];
                    kind_hist.saturating_record(took.as_micros().max(1) as u64);
                    *kind_sum += took.as_micros();
                    m.blocks_over_100ms += u32::from(took >= Duration::from_millis(100));
                    if let Some(r) = report {
                        rtos_of.borrow_mut().insert(r.read, r.kernel_rtos);
                        late.borrow_mut().extend_from_slice(&r.late);
                        m.quic_requests += u64::from(r.quic_requests);
                        m.quic_loss_events += r.quic_loss_events;
                        m.quic_lost_packets += r.quic_lost_packets;
                        m.retransmits += r.retransmits;
                        m.hedges += r.stats.hedges;
                        m.hedges_won += r.stats.hedges_won;
                        m.hedges_spurious += r.stats.hedges_spurious;
                        m.hedges_denied += r.stats.hedges_denied;
                        m.escalations += r.stats.escalations;
                        m.lost_retries += r.stats.lost_retries;
                        m.connections_reset += u64::from(r.connections_reset);
                        m.late_grants += r.stats.late_grants;
                        m.held_grants += r.stats.held_grants;
                        m.grants += r.stats.grants;
                        if let Some(p) = r.port {
                            m.budget_min = m.budget_min.min(p.budget_min);
                            m.budget_max = m.budget_max.max(p.budget_max);
                            m.delay_samples += u64::from(p.delay_samples);
                            delay_sum_us.set(
                                delay_sum_us.get() + p.delay_mean.as_secs_f64() * 1e6 * f64::from(p.delay_samples),
                            );
                            host_sum_us
                                .set(host_sum_us.get() + p.host_mean.as_secs_f64() * 1e6 * f64::from(p.delay_samples));
                            m.delay_max_us = m.delay_max_us.max(p.delay_max.as_secs_f64() * 1e6);
                            wait_sum_us.set(wait_sum_us.get() + p.admission_wait.as_micros());
                            transfer_sum_us.set(transfer_sum_us.get() + p.transfer.as_micros());
                        }
                    }
                }
                Err(e) => {
                    m.failed_blocks += 1;
                    m.first_error.get_or_insert(e);
                }
            }
            // Blocks past `blocks` (read to fill `min_time`) are not on the progress bar.
            let counted = m.blocks <= spec.blocks;
            drop(m);
            if counted {
                (on_block.borrow_mut())(1);
            }
        }
    };
    let take = || {
        let no = next.get();
        let elapsed = start.elapsed();
        if elapsed > spec.max_time || (no >= end_no && elapsed >= spec.min_time) {
            return None;
        }
        next.set(no + 1);
        Some(no)
    };
    if spec.batch {
        // Batches of R reads started together; the next batch when this one has ended.
        loop {
            let batch: Vec<u64> = std::iter::from_fn(take).take(r).collect();
            if batch.is_empty() {
                break;
            }
            let reads = batch
                .into_iter()
                .enumerate()
                .map(|(j, no)| read_one(no, is_mixed(j), None));
            futures_util::future::join_all(reads).await;
        }
    } else if let Some(arrivals) = spec.arrivals {
        // Open loop: a read arrives at each of the process's times and starts at once if
        // fewer than R are in flight, else when one ends (see [`Arrivals`]).
        use futures_util::StreamExt;
        let mut in_flight = futures_util::stream::FuturesUnordered::new();
        let mut gaps = arrivals.gaps();
        let mut due = Instant::now();
        let mut queued = 0u32;
        loop {
            // Until the next arrival, the reads in flight go on.
            loop {
                let until = tokio::time::Instant::from_std(due);
                if in_flight.is_empty() {
                    tokio::time::sleep_until(until).await;
                    break;
                }
                if tokio::time::timeout_at(until, in_flight.next()).await.is_err() {
                    break;
                }
            }
            let Some(no) = take() else { break };
            if in_flight.len() >= r {
                queued += 1;
                in_flight.next().await;
            }
            // Odd reads read the mixed shape: half of them, whatever the places.
            let mixed = spec.mix.is_some() && Mix::reads_with(no as usize);
            in_flight.push(read_one(no, mixed, Some(due)));
            due += gaps.next().unwrap_or(MAX_ARRIVAL_GAP);
        }
        while in_flight.next().await.is_some() {}
        let mut m = m.borrow_mut();
        (m.load, m.arrivals_queued) = (arrivals.load, queued);
    } else {
        let (take, read_one) = (&take, &read_one);
        futures_util::future::join_all((0..r).map(|i| async move {
            while let Some(no) = take() {
                read_one(no, is_mixed(i), None).await;
            }
        }))
        .await;
    }
    let elapsed = start.elapsed();
    if let Some(p) = reader.port_stats() {
        let b = &port_before;
        let mut m = m.borrow_mut();
        m.budget_decreases = [
            p.delay_decreases.saturating_sub(b.delay_decreases),
            p.loss_decreases.saturating_sub(b.loss_decreases),
            p.stall_decreases.saturating_sub(b.stall_decreases),
        ];
        m.quiet_stalls = p.quiet_stalls.saturating_sub(b.quiet_stalls);
        m.stuck_discounts = p.stuck_discounts.saturating_sub(b.stuck_discounts);
        m.competing_entries = p.competing_entries.saturating_sub(b.competing_entries);
        m.delay_holds = p.delay_holds.saturating_sub(b.delay_holds);
        m.learnt_target_us = p.learnt_target.map_or(0.0, |d| d.as_secs_f64() * 1e6);
        m.base_rtt_us = p.base_rtt.map_or(0.0, |d| d.as_secs_f64() * 1e6);
        m.port_rate_mbps = p.link_rate_bytes_per_sec.map_or(0.0, |r| r * 8.0 / 1e6);
        m.counter_samples = p.counter_samples.saturating_sub(b.counter_samples);
    }
    let bulk = background.bytes().saturating_sub(bulk_before);
    drop(background);
    let mut m = m.into_inner();
    let rtos = RtoCount::of(rtos_of.into_inner(), &late.into_inner(), last_warm.get());
    (m.kernel_rtos, m.late_rtos) = (rtos.measured, rtos.late);
    m.retransmits += rtos.late_retransmits;
    m.warmup_rtos_reported_late = rtos.warmup;
    m.blocks_with_rto = rtos.reads_with_rto;
    let drains_after = drains(reader);
    m.connections_drained = drains_after.0.saturating_sub(drains_before.0);
    m.drains_reset = drains_after.1.saturating_sub(drains_before.1);
    if m.blocks < spec.blocks {
        (on_block.borrow_mut())(u64::from(spec.blocks - m.blocks));
    }
    if let Some(x) = first_corrupt.take() {
        return Err(corrupt(x));
    }
    let cpu = crate::cpu::process_cpu().saturating_sub(cpu_before);
    let ticks_after = crate::cpu::machine_ticks();
    m.machine_cpu_busy = crate::cpu::busy_fraction(ticks_before, ticks_after).unwrap_or(0.0);
    m.machine_cpu_steal = crate::cpu::steal_fraction(ticks_before, ticks_after).unwrap_or(0.0);
    let bytes = bytes.get();
    if bytes > 0 {
        m.cpu_s_per_gib = cpu.as_secs_f64() / (bytes as f64 / (1u64 << 30) as f64);
    }
    let secs = elapsed.as_secs_f64().max(1e-9);
    m.elapsed_s = elapsed.as_secs_f64();
    m.goodput_mbps = bytes as f64 * 8.0 / secs / 1e6;
    m.background_mbps = bulk as f64 * 8.0 / secs / 1e6;
    let hist = hist.into_inner();
    let ms = |us: u64| us as f64 / 1000.0;
    let completed = m.blocks - m.failed_blocks;
    if completed > 0 {
        m.mean_ms = sum_us.get() as f64 / f64::from(completed) / 1000.0;
        m.admission_wait_ms = wait_sum_us.get() as f64 / f64::from(completed) / 1000.0;
        m.transfer_ms = transfer_sum_us.get() as f64 / f64::from(completed) / 1000.0;
    }
    if m.delay_samples > 0 {
        m.delay_mean_us = delay_sum_us.get() / m.delay_samples as f64;
        m.host_mean_us = host_sum_us.get() / m.delay_samples as f64;
    }
    if m.budget_min == u64::MAX {
        m.budget_min = 0;
    }
    m.p50_ms = ms(hist.value_at_quantile(0.5));
    m.p99_ms = ms(hist.value_at_quantile(0.99));
    m.max_ms = ms(hist.max());
    m.rto_free_fraction = if completed == 0 {
        0.0
    } else {
        f64::from(completed - m.blocks_with_rto) / f64::from(completed)
    };
    m.histogram = encode_histogram(&hist);
    if let Some(mix) = spec.mix {
        let [(layout, layout_sum), (mixed, mixed_sum)] = by_kind.into_inner();
        let mean = |sum: u128, n: u64| if n == 0 { 0.0 } else { sum as f64 / n as f64 / 1000.0 };
        m.mix = Some(mix.to_string());
        m.mix_block_bytes = mix.block();
        m.mix_blocks = mixed.len() as u32;
        m.mix_mean_ms = mean(mixed_sum, mixed.len());
        m.mix_p50_ms = ms(mixed.value_at_quantile(0.5));
        m.mix_p99_ms = ms(mixed.value_at_quantile(0.99));
        m.mix_max_ms = ms(mixed.max());
        m.layout_blocks = layout.len() as u32;
        m.layout_mean_ms = mean(layout_sum, layout.len());
        m.layout_p99_ms = ms(layout.value_at_quantile(0.99));
    }
    Ok(m)
}

/// Goodput of several measurements of one strategy and configuration (the rounds of a
/// sweep in rounds) taken together: their bytes over their measured time, Mbit/s. A
/// measurement without a measured time (a failed configuration) weighs as one second. 0
/// when there are none.
pub fn pooled_goodput<'a>(ms: impl IntoIterator<Item = &'a Measurement>) -> f64 {
    let (mut bits, mut time) = (0.0, 0.0);
    for m in ms {
        let t = if m.elapsed_s > 0.0 { m.elapsed_s } else { 1.0 };
        bits += m.goodput_mbps * t;
        time += t;
    }
    if time > 0.0 {
        bits / time
    } else {
        0.0
    }
}

/// One kind of a row's reads: how many completed, their mean and p99 latency (ms).
pub type ReadKind = fn(&Measurement) -> (u32, f64, f64);
/// Every read of a row.
pub const ALL_READS: ReadKind = |m| (m.blocks.saturating_sub(m.failed_blocks), m.mean_ms, m.p99_ms);
/// The mixed reads of a `--mix` row.
pub const SMALL_READS: ReadKind = |m| (m.mix_blocks, m.mix_mean_ms, m.mix_p99_ms);
/// The layout's reads of a `--mix` row.
pub const LARGE_READS: ReadKind = |m| (m.layout_blocks, m.layout_mean_ms, m.layout_p99_ms);

/// One kind of read's latency over a strategy's rounds at one load: the mean weighted by the
/// reads each round completed, and the worst round's p99 (ms); `None` if no read completed.
pub fn pooled_latency(rows: &[&Measurement], kind: impl Fn(&Measurement) -> (u32, f64, f64)) -> Option<(f64, f64)> {
    let (mut reads, mut sum, mut p99) = (0u64, 0.0, 0.0f64);
    for m in rows {
        let (n, mean, p) = kind(m);
        reads += u64::from(n);
        sum += f64::from(n) * mean;
        p99 = p99.max(p);
    }
    (reads > 0).then(|| (sum / reads as f64, p99))
}

/// The kernel RTOs of a configuration's measured reads, each counted for the read it
/// belongs to (see [`incast_rpc::LateCounters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct RtoCount {
    /// RTOs of the measured reads, late ones included.
    measured: u64,
    /// Of `measured`, those a later read reported.
    late: u64,
    /// RTOs of warm-up reads that measured reads reported.
    warmup: u64,
    /// Measured reads with at least one RTO.
    reads_with_rto: u32,
    /// Segments retransmitted for the measured reads that later reads reported (the
    /// warm-up's left out, as its RTOs are).
    late_retransmits: u64,
}

impl RtoCount {
    /// `own`: each measured read's RTOs from its report, by its number on the client;
    /// `late`: what the measured reads reported for earlier reads; `last_warm`: the number of
    /// the last warm-up read that ended whole (every warm-up read started before the first
    /// measured one). Late RTOs of a read that is neither (a measured read that failed, so
    /// has no report) count with the measured reads' totals, never hidden, but mark no read.
    /// Late retransmits follow the same rule.
    fn of(
        mut own: std::collections::HashMap<u64, u64>,
        late: &[incast_rpc::LateCounters],
        last_warm: Option<u64>,
    ) -> Self {
        let mut c = Self::default();
        for l in late {
            let rtos = u64::from(l.rtos);
            match own.get_mut(&l.read) {
                Some(n) => {
                    *n += rtos;
                    c.late += rtos;
                }
                None if last_warm.is_some_and(|w| l.read <= w) => {
                    c.warmup += rtos;
                    continue;
                }
                None => {
                    c.measured += rtos;
                    c.late += rtos;
                }
            }
            c.late_retransmits += u64::from(l.retransmits);
        }
        c.measured += own.values().sum::<u64>();
        c.reads_with_rto = own.values().filter(|&&n| n > 0).count() as u32;
        c
    }
}

/// Bulk flows that stream from the bulk senders to this client until dropped.
struct Background {
    bytes: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Background {
    async fn start(senders: &[SocketAddr], cc: &str) -> std::io::Result<Self> {
        use tokio::io::AsyncReadExt;
        let bytes = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::with_capacity(senders.len());
        for a in senders {
            let mut sock = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(a))
                .await
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, format!("connecting to {a}")))??;
            let _ = incast_rpc::SocketTuning {
                congestion: Some(cc.to_owned()),
                ..incast_rpc::SocketTuning::default()
            }
            .apply(&sock);
            let count = bytes.clone();
            tasks.push(tokio::spawn(async move {
                let mut buf = vec![0u8; 256 << 10];
                while let Ok(n @ 1..) = sock.read(&mut buf).await {
                    count.fetch_add(n as u64, Ordering::Relaxed);
                }
            }));
        }
        Ok(Self { bytes, tasks })
    }

    fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Measurement {
    /// Fills in the line rate and the ratios that depend on it.
    pub fn set_line_rate(&mut self, mbps: f64) {
        self.line_rate_mbps = mbps;
        if mbps > 0.0 {
            self.line_rate_fraction = self.goodput_mbps / mbps;
            self.ideal_ms = self.block_bytes as f64 * 8.0 / (mbps * 1e6) * 1e3;
            self.p99_over_ideal = self.p99_ms / self.ideal_ms;
            if self.mix_block_bytes > 0 {
                self.mix_ideal_ms = self.mix_block_bytes as f64 * 8.0 / (mbps * 1e6) * 1e3;
                self.mix_p99_over_ideal = self.mix_p99_ms / self.mix_ideal_ms;
            }
        }
    }
}

fn encode_histogram(h: &Histogram<u64>) -> String {
    let mut raw = Vec::new();
    if V2DeflateSerializer::new().serialize(h, &mut raw).is_err() {
        return String::new();
    }
    base64(&raw)
}

/// Standard base64 with padding (what HdrHistogram's tools read). The `base64` crate is
/// already in the build, as a dependency of hdrhistogram's serialization.
fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_rto_reported_late_counts_for_the_read_it_belongs_to() {
        let late = |read, rtos| incast_rpc::LateCounters {
            read,
            rtos,
            retransmits: 10 * rtos + 1,
        };
        // Warm-up reads 0-3; measured reads 4-7, read 6 failed (no report).
        let own = [(4, 0), (5, 2), (7, 0)].into_iter().collect();
        let reported = [late(1, 5), late(4, 1), late(5, 1), late(6, 3)];
        assert_eq!(
            RtoCount::of(own, &reported, Some(3)),
            RtoCount {
                measured: 2 + 1 + 1 + 3,
                late: 1 + 1 + 3,
                warmup: 5,
                reads_with_rto: 2,
                late_retransmits: 11 + 11 + 31,
            }
        );
        // Nothing late: each read's own.
        let own = [(0, 0), (1, 1)].into_iter().collect();
        assert_eq!(
            RtoCount::of(own, &[], None),
            RtoCount {
                measured: 1,
                late: 0,
                warmup: 0,
                reads_with_rto: 1,
                late_retransmits: 0,
            }
        );
    }

    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn arrivals_are_a_seeded_poisson_process_at_the_load_asked() {
        // 0.5 of 1 Gbit/s in reads of 1 MB: 62.5 reads a second.
        let a = Arrivals::at_load(0.5, 1000.0, 1e6, 7).unwrap();
        assert!((a.per_sec - 62.5).abs() < 1e-9, "{a:?}");
        let gaps: Vec<Duration> = a.gaps().take(20_000).collect();
        assert_eq!(
            gaps,
            a.gaps().take(20_000).collect::<Vec<_>>(),
            "the same seed, the same times"
        );
        let other: Vec<Duration> = Arrivals { seed: 8, ..a }.gaps().take(100).collect();
        assert_ne!(other, gaps[..100], "another seed, other times");
        // Exponential gaps: mean 1/rate (16 ms), and as many under the median ln 2 / rate as
        // over it; a fixed interval or a uniform draw fails one of the two.
        let mean = gaps.iter().map(Duration::as_secs_f64).sum::<f64>() / gaps.len() as f64;
        assert!((mean * 62.5 - 1.0).abs() < 0.03, "mean gap {mean}");
        let median = std::f64::consts::LN_2 / 62.5;
        let under = gaps.iter().filter(|g| g.as_secs_f64() < median).count();
        assert!(
            (under as f64 / gaps.len() as f64 - 0.5).abs() < 0.02,
            "{under} under the median"
        );
        for (load, rate, bytes) in [
            (0.0, 1000.0, 1e6),
            (1.5, 1000.0, 1e6),
            (f64::NAN, 1000.0, 1e6),
            (0.5, 0.0, 1e6),
        ] {
            assert!(
                Arrivals::at_load(load, rate, bytes, 1).is_err(),
                "{load} {rate} {bytes}"
            );
        }
        // A rate near zero still draws gaps no longer than the bound.
        let slow = Arrivals::at_load(1e-6, 1e-6, 1e6, 1).unwrap();
        assert!(slow.gaps().take(10).all(|g| g == MAX_ARRIVAL_GAP));
    }

    #[test]
    fn mixed_shapes_parse_and_bad_ones_say_why() {
        let m: Mix = "16x4KiB".parse().unwrap();
        assert_eq!(m, Mix { senders: 16, sru: 4096 });
        assert_eq!((m.block(), m.to_string()), (65_536, "16 x 4KiB".to_owned()));
        assert_eq!(
            " 2 X 1MiB".parse::<Mix>(),
            Ok(Mix {
                senders: 2,
                sru: 1 << 20
            })
        );
        for (bad, why) in [
            ("16", "SENDERSxSIZE"),
            ("0x4KiB", "sender count"),
            ("ax4KiB", "sender count"),
            ("16x0", "at least one byte"),
            ("16x4parsecs", "unknown size unit"),
            ("1025x1MiB", "not a small read"),
            ("99999999999999999999x1", "sender count"),
        ] {
            let e = bad.parse::<Mix>().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        // Half the readers, the odd ones, read the mixed shape.
        let mixed: Vec<usize> = (0..6).filter(|&r| Mix::reads_with(r)).collect();
        assert_eq!(mixed, [1, 3, 5]);
    }

    #[test]
    fn layouts_and_stripes() {
        assert_eq!(Layout::Block(1 << 20).sru(256), 4096);
        assert_eq!(Layout::Sru(32 << 10).block(8), 256 << 10);
        let ids: Vec<ServerId> = (0..3).map(ServerId).collect();
        let s = stripe(&ids, 3, Layout::Block(10), 7);
        assert_eq!(s.block_len(), 10);
        assert_ne!(s.fragment(0).key(), s.fragment(1).key());
        // Reads rotate over a pool larger than a stripe: read k starts at server k x N.
        let pool: Vec<ServerId> = (0..8).map(ServerId).collect();
        let servers = |no| -> Vec<u32> {
            stripe(&pool, 2, Layout::Sru(4), no)
                .fragments()
                .iter()
                .map(|f| f.server().0)
                .collect()
        };
        assert_eq!(servers(0), [0, 1]);
        assert_eq!(servers(1), [2, 3]);
        assert_eq!(servers(4), [0, 1]);
        let odd: Vec<ServerId> = (0..5).map(ServerId).collect();
        let s = stripe(&odd, 2, Layout::Sru(4), 2);
        assert_eq!((s.fragment(0).server().0, s.fragment(1).server().0), (4, 0));
    }
}
