//! One measured configuration: a strategy reading blocks from N servers, one block at a
//! time, as a striped storage client does.
//!
//! Each configuration gets a fresh [`Client`] (so socket settings never leak between
//! strategies), reads `warmup` blocks that are not measured (connections set up, slow start
//! done, ARP resolved), then `blocks` measured blocks back to back. Goodput is the bytes of
//! completed blocks over the wall time of the measured ones; block latency goes into an HDR
//! histogram (microseconds, 3 significant digits) that is exported with the result so runs
//! can be merged. Every block is checked byte by byte against the pattern the servers serve.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use incast_core::stripe::Fragment;
use incast_core::{ServerId, Stripe};
use incast_rpc::quic::QuicClientConfig;
use incast_rpc::{Client, FanInError};

use crate::pattern;
use crate::strategy::Strategy;

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

/// The stripe of block number `no`: one fragment per sender, each with its own key, so a
/// fragment landing in the wrong place is caught by [`pattern::verify`].
pub fn stripe(servers: &[ServerId], layout: Layout, no: u64) -> Stripe {
    let n = servers.len() as u64;
    let block = layout.block(servers.len());
    let (base, extra) = (block / n, block % n);
    let frags = servers
        .iter()
        .enumerate()
        .map(|(i, s)| Fragment::new(*s, format!("b{no}-f{i}"), 0, base + u64::from((i as u64) < extra)))
        .collect();
    Stripe::new(frags).expect("bench stripes are valid")
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
    /// Port buffer the `capped` strategy divides among senders.
    pub buffer_hint: u64,
    /// Deadline of one block.
    pub read_timeout: Duration,
    /// Congestion control set on the client's sockets.
    pub cc: String,
    /// Stop measuring after this long even if fewer than `blocks` blocks were read.
    pub max_time: Duration,
    /// Trust and tuning for the QUIC strategies.
    pub quic: Option<QuicClientConfig>,
}

/// The result of one configuration, one JSON line.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Measurement {
    /// Strategy name.
    pub strategy: String,
    /// Senders.
    pub senders: usize,
    /// The layout: "SRU 32KiB" (fixed server request unit) or "block 1MiB" (fixed block).
    pub layout: String,
    /// Bytes per sender.
    pub sru_bytes: u64,
    /// Bytes per block.
    pub block_bytes: u64,
    /// Measured blocks attempted (fewer than asked when the time limit stopped the run).
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
    /// Block latency percentiles, ms.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest block.
    pub max_ms: f64,
    /// p99 / ideal.
    pub p99_over_ideal: f64,
    /// Kernel RTOs the servers' sockets took (TCP_INFO, Linux 6.7+ servers).
    pub kernel_rtos: u64,
    /// Requests sent over QUIC.
    pub quic_requests: u64,
    /// QUIC loss-recovery episodes on the servers' side (quinn congestion events): QUIC's
    /// counterpart of `kernel_rtos`.
    pub quic_loss_events: u64,
    /// Packets quinn declared lost on the servers' side.
    pub quic_lost_packets: u64,
    /// CPU seconds this process (client and in-process servers) spent per GiB of goodput.
    pub cpu_s_per_gib: f64,
    /// Blocks during which at least one kernel RTO fired.
    pub blocks_with_rto: u32,
    /// Fraction of completed blocks without a kernel RTO.
    pub rto_free_fraction: f64,
    /// Blocks slower than 100 ms.
    pub blocks_over_100ms: u32,
    /// Segments the servers retransmitted.
    pub retransmits: u64,
    /// Hedges the scheduler fired.
    pub hedges: u64,
    /// Grants (requests) issued.
    pub grants: u64,
    /// Packets the switch port dropped (testbed).
    pub switch_drops: Option<u64>,
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
    #[error("{strategy} at {senders} senders: warm-up failed: {source}")]
    Warmup {
        /// Strategy.
        strategy: Strategy,
        /// Senders.
        senders: usize,
        /// The read error.
        source: FanInError,
    },
}

/// Reads blocks as `spec` says. `on_block` is called after each measured block, and with the
/// number of skipped blocks when the time limit ends the run early.
pub async fn measure(
    servers: &[(ServerId, SocketAddr)],
    spec: &RunSpec,
    mut on_block: impl FnMut(u64),
) -> Result<Measurement, RunError> {
    if spec.senders == 0 || spec.senders > servers.len() {
        return Err(RunError::NotEnoughServers {
            senders: spec.senders,
            servers: servers.len(),
        });
    }
    let used = &servers[..spec.senders];
    let ids: Vec<ServerId> = used.iter().map(|(id, _)| *id).collect();
    let (policy, config) = spec
        .strategy
        .plan(
            spec.senders,
            spec.buffer_hint,
            spec.read_timeout,
            &spec.cc,
            spec.quic.as_ref(),
        )
        .map_err(|why| RunError::Plan {
            strategy: spec.strategy,
            why,
        })?;
    let client = Arc::new(Client::with_config(used.iter().copied(), config));
    let corrupt = |source| RunError::Corrupt {
        strategy: spec.strategy,
        senders: spec.senders,
        source,
    };
    let mut no = 0u64;
    let mut last_failure = None;
    for _ in 0..spec.warmup {
        let s = stripe(&ids, spec.layout, no);
        no += 1;
        match client.fan_in_read(&s, &policy).await {
            Ok(out) => {
                pattern::verify(&s, &out.block).map_err(corrupt)?;
                last_failure = None;
            }
            Err(e) => last_failure = Some(e),
        }
    }
    // Only the last warm-up block decides: earlier failures may be connects still settling.
    if let Some(source) = last_failure {
        return Err(RunError::Warmup {
            strategy: spec.strategy,
            senders: spec.senders,
            source,
        });
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds");
    let mut m = Measurement {
        strategy: spec.strategy.name().to_owned(),
        senders: spec.senders,
        layout: spec.layout.to_string(),
        sru_bytes: spec.layout.sru(spec.senders),
        block_bytes: spec.layout.block(spec.senders),
        ..Measurement::default()
    };
    let mut bytes = 0u64;
    let cpu_before = crate::cpu::process_cpu();
    let start = Instant::now();
    for i in 0..spec.blocks {
        if start.elapsed() > spec.max_time {
            on_block(u64::from(spec.blocks - i));
            break;
        }
        m.blocks += 1;
        let s = stripe(&ids, spec.layout, no);
        no += 1;
        let t = Instant::now();
        match client.fan_in_read(&s, &policy).await {
            Ok(out) => {
                let took = t.elapsed();
                pattern::verify(&s, &out.block).map_err(corrupt)?;
                bytes += out.block.len() as u64;
                hist.saturating_record(took.as_micros().max(1) as u64);
                let r = &out.report;
                m.kernel_rtos += r.kernel_rtos;
                m.quic_requests += u64::from(r.quic_requests);
                m.quic_loss_events += r.quic_loss_events;
                m.quic_lost_packets += r.quic_lost_packets;
                m.blocks_with_rto += u32::from(r.kernel_rtos > 0);
                m.blocks_over_100ms += u32::from(took >= Duration::from_millis(100));
                m.retransmits += r.retransmits;
                m.hedges += r.stats.hedges;
                m.grants += r.stats.grants;
            }
            Err(e) => {
                m.failed_blocks += 1;
                m.first_error.get_or_insert_with(|| e.to_string());
            }
        }
        on_block(1);
    }
    let elapsed = start.elapsed();
    let cpu = crate::cpu::process_cpu().saturating_sub(cpu_before);
    if bytes > 0 {
        m.cpu_s_per_gib = cpu.as_secs_f64() / (bytes as f64 / (1u64 << 30) as f64);
    }
    m.elapsed_s = elapsed.as_secs_f64();
    m.goodput_mbps = bytes as f64 * 8.0 / elapsed.as_secs_f64().max(1e-9) / 1e6;
    let ms = |us: u64| us as f64 / 1000.0;
    m.p50_ms = ms(hist.value_at_quantile(0.5));
    m.p99_ms = ms(hist.value_at_quantile(0.99));
    m.max_ms = ms(hist.max());
    let completed = m.blocks - m.failed_blocks;
    m.rto_free_fraction = if completed == 0 {
        0.0
    } else {
        f64::from(completed - m.blocks_with_rto) / f64::from(completed)
    };
    m.histogram = encode_histogram(&hist);
    Ok(m)
}

impl Measurement {
    /// Fills in the line rate and the ratios that depend on it.
    pub fn set_line_rate(&mut self, mbps: f64) {
        self.line_rate_mbps = mbps;
        if mbps > 0.0 {
            self.line_rate_fraction = self.goodput_mbps / mbps;
            self.ideal_ms = self.block_bytes as f64 * 8.0 / (mbps * 1e6) * 1e3;
            self.p99_over_ideal = self.p99_ms / self.ideal_ms;
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
    fn layouts_and_stripes() {
        assert_eq!(Layout::Block(1 << 20).sru(256), 4096);
        assert_eq!(Layout::Sru(32 << 10).block(8), 256 << 10);
        let ids: Vec<ServerId> = (0..3).map(ServerId).collect();
        let s = stripe(&ids, Layout::Block(10), 7);
        assert_eq!(s.block_len(), 10);
        assert_ne!(s.fragment(0).key(), s.fragment(1).key());
    }
}
