//! Many configurations and strategies, side by side, in one run.
//!
//! The loop is layout → senders → concurrency → round → strategy, so the strategies of one
//! configuration run back to back and a noisy machine disturbs them alike. Before the sweep,
//! the line rate is measured with one sender streaming 4 MiB blocks (the better of `naive`
//! and `default`, no background flows), and every result is expressed against it.
//!
//! # Rounds
//!
//! Back to back is not always alike enough. On loopback a configuration's strategy reads for
//! about a second, both cores busy, and the 2-core VM has slow spells of a quarter to a
//! whole second in which every strategy's cost per byte doubles: `naive` alone, in 8 rounds
//! of 250 ms, read 8 Gbit/s in one and 11-17 in the others. One run of must-show 4 gave
//! `default` 0.54 of `naive` in one cell and another 1.62 (docs/measurements.md,
//! *Thirty-fourth session*). With [`SweepSpec::rounds`] above 1, each configuration runs
//! its strategies that many times in alternating order (A B, then B A, ...), each round with
//! its own warm-up and an equal share of `--blocks`, `--min-time` and `--max-time`, so a slow
//! spell lands on both sides. A strategy keeps its client over the rounds of a
//! configuration, as a service keeps its client, so only its first round pays for the
//! client-wide receiver's learning of the path (its rate, base RTT and budget); a client
//! made anew per round would measure that start R times over. Its pooled connections do not
//! stay: before a strategy's round the others' idle connections are closed, so each round's
//! warm-up opens its strategy's connections again. Kept, they held the process's descriptors
//! (a client's and its server's per connection, servers running here): after `naive`'s round
//! of 128 reads of 64 servers, 16,384 of the 20,000 this machine allows, and `default`'s
//! next round failed to connect (`EMFILE`). Every round is a row of its
//! own ([`Measurement::round`]); [`round_summary`] pools them per strategy and pairs them
//! round by round against `naive` (docs/measurements.md, *Thirty-fifth session*), and with
//! `--mix` gives each kind's latency over the rounds.
//!
//! # Mixed reads
//!
//! Equal reads show what sharing the port does to throughput, not what it does to the small
//! read that arrives behind a large one, which is what a storage or search service serves
//! most: a few kilobytes of index or metadata beside megabytes of blocks. With
//! [`SweepSpec::mix`] (`--mix 16x4KiB`) every other concurrent reader (reader 1, 3, ... or
//! the odd places of a batch) reads stripes of that shape instead of the layout's, so half
//! the reads in flight are of each kind; both kinds' bytes count in the goodput, and each
//! row adds the mixed reads' latency against their own ideal (their bytes at the line
//! rate) and the layout's reads' latency beside it (`Measurement::mix_*`, `layout_*`).
//! Shortest-remaining-first serves the small reads ahead of the large ones' rest; a
//! scheduler per read (`per-read`) or none (`naive`) queues them behind the bytes already
//! granted or sent.
//!
//! # Open loop
//!
//! Readers that start their next read as their last one ends keep the port full whatever
//! the order, and feed a policy more of whatever it serves fastest: serve the small reads
//! first and their readers come back sooner, so the large reads wait behind a stream that
//! never thins. A service's requests come from many independent clients and do not wait
//! for each other. With [`SweepSpec::load`] (`--load 0.7`) the measured reads arrive as a
//! seeded Poisson process at that share of the line rate measured before the sweep (in
//! bytes: the mean read's size sets the rate of reads), at most `concurrency` in flight;
//! a read that arrives when they are waits for a place, and every read's latency counts
//! from its arrival ([`crate::run::Arrivals`]). Every strategy of a configuration's round
//! sees the same arrival times. With `--mix`, every other read by number is of the mixed
//! shape. This is how Homa and pFabric compare schedulers: latency by size at a fixed
//! load. The warm-up stays closed loop.
//!
//! Several loads (`--load 0.2,0.5,0.8`) make a load curve: each load is a configuration of
//! its own, the innermost one, so its rows stand together, and every load draws from the
//! same seeds, so a higher load has the same arrivals closer together. After the table,
//! [`load_curve`] lines up each strategy's mean and p99 latency by load (by kind with
//! `--mix`), with the ratio to `naive` (or to the first strategy) at each load and the share
//! of the line rate each carried; `--plot` draws mean latency against load
//! ([`crate::plot::scene`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use incast_core::ServerId;
use incast_rpc::quic::{Congestion, QuicClientConfig, QuicServerConfig, SelfSigned, TlsTrust};
use incast_rpc::tls::{TlsClientConfig, TlsServerConfig};
use incast_rpc::{ServerConfig, SocketTuning};

use crate::load::CpuLoad;
use crate::output::{table_header, table_row};
use crate::pattern::HeldPattern;
use crate::run::{
    measure, pooled_goodput, pooled_latency, Arrivals, Layout, Measurement, Mix, ReadKind, Reader, RunError, RunSpec,
    ALL_READS, LARGE_READS, MAX_LOAD, SMALL_READS,
};
use crate::servers::ServerSet;
use crate::strategy::{Strategy, ROUTE_RTO_MIN};
use crate::testbed::{host_addr, Testbed, TestbedError};

/// Share of the port's payload capacity one sender must reach for the testbed to count as
/// calibrated (the smoke test checks the same; below it the sweep warns).
pub const CALIBRATED: f64 = 0.9;
/// How long after a configuration its hosts' RTO counters are read (300 ms): a connection
/// the client abandoned after a hedge takes its RTO up to the kernel's minimum RTO (200 ms)
/// plus a round trip after its last segment. A later RTO counts in the next configuration.
pub const HOST_RTO_SETTLE: Duration = Duration::from_millis(300);

/// Most servers a sweep starts for rotating concurrent reads over (more senders than this
/// get one server each).
pub const MAX_POOL: usize = 1024;

/// Block of the line-rate probe.
pub const LINE_RATE_BLOCK: u64 = 4 << 20;
/// Measured blocks of one line-rate probe, per strategy.
pub const LINE_RATE_BLOCKS: u32 = 8;
/// Probes per strategy; the line rate is the best of them. On a 2-core VM one probe varied
/// by up to 15% (kernel work of other namespaces, timer latency of the shapers), and noise
/// only ever lowers a probe, so the best is the estimate of what the path carries.
pub const LINE_RATE_ROUNDS: u32 = 3;
/// On the testbed, more rounds (up to this many) while the best probe stays under the
/// calibrated share of the port: right after another testbed, the kernel's teardown of its
/// namespaces competes for the 2 cores for a few seconds (a smoke-test run probed 86%, the
/// next ones over 90%).
pub const LINE_RATE_MAX_ROUNDS: u32 = 8;

/// Where the servers are.
#[derive(Debug)]
pub enum Network {
    /// On the emulated switch, started by this process.
    Testbed(Arc<Testbed>),
    /// On loopback, started by this process (no shallow buffer: no incast).
    Loopback,
    /// Already running elsewhere (`incast-bench serve`).
    Hosts(Vec<SocketAddr>),
}

impl Network {
    /// "testbed", "loopback" or "hosts".
    pub fn name(&self) -> &'static str {
        match self {
            Network::Testbed(_) => "testbed",
            Network::Loopback => "loopback",
            Network::Hosts(_) => "hosts",
        }
    }
}

/// What to sweep.
#[derive(Clone, Debug)]
pub struct SweepSpec {
    /// Sender counts.
    pub senders: Vec<usize>,
    /// Reads in flight at once (one shared client), a list.
    pub concurrency: Vec<usize>,
    /// Background bulk flows through the port during every configuration.
    pub background: usize,
    /// Reads in batches of `concurrency` started together (see [`RunSpec::batch`]).
    pub batch: bool,
    /// Mixed reads: every other reader reads this shape (see *Mixed reads*).
    pub mix: Option<Mix>,
    /// Open loop at these offered loads, shares of the line rate, each a configuration of
    /// its own (see *Open loop*); empty: closed loop, or batches.
    pub load: Vec<f64>,
    /// Block layouts.
    pub layouts: Vec<Layout>,
    /// Strategies.
    pub strategies: Vec<Strategy>,
    /// Measured blocks per configuration.
    pub blocks: u32,
    /// Warm-up blocks per configuration.
    pub warmup: u32,
    /// Time limit per configuration.
    pub max_time: Duration,
    /// Shortest measurement per configuration (see [`RunSpec::min_time`]).
    pub min_time: Duration,
    /// Deadline of one block.
    pub read_timeout: Duration,
    /// Port buffer for `capped` and `hinted` (the testbed's, or a guess for real hosts).
    pub buffer_hint: u64,
    /// Port rate in bits per second for `hinted` (the testbed's, or `--rate` for real
    /// hosts; `None` on loopback, which has no port).
    pub rate_hint: Option<u64>,
    /// Congestion control the servers set on their sockets.
    pub cc: String,
    /// No progress bar, no per-configuration lines.
    pub quiet: bool,
    /// Servers on hosts: the CA that issued their QUIC certificates (PEM).
    pub quic_ca: Option<std::path::PathBuf>,
    /// Servers on hosts: the name their QUIC certificates carry (default: their addresses).
    pub quic_server_name: Option<String>,
    /// Servers started here: most datagrams per UDP GSO send.
    pub quic_gso: usize,
    /// Rounds per configuration (see *Rounds*): 1 to [`MAX_ROUNDS`]; 1 runs each strategy
    /// once, as before.
    pub rounds: u32,
    /// Servers started here: how long each store read waits (a slow disk,
    /// [`crate::pattern::HeldPattern`]; not while the line rate is probed); zero answers at
    /// once.
    pub server_delay: Duration,
    /// Spinning threads that load the machine's CPUs while each row runs, warm-up included
    /// (a busy host, see [`crate::load`]; not while the line rate is probed); 0 for none.
    pub cpu_load: usize,
}

/// Time a row's CPU load spins past the longest the row can take (its time limit plus a
/// read deadline per warm-up block and two more), in case the row outlives even that.
const CPU_LOAD_SLACK: Duration = Duration::from_secs(10);

/// Most rounds per configuration: each round repeats the warm-up, and 16 already split a
/// second of `--min-time` into 60 ms pieces.
pub const MAX_ROUNDS: u32 = 16;

/// The strategy a configuration's others are compared with in [`round_summary`]: `naive` if
/// the sweep ran it, else the first one it ran.
fn reference_strategy(names: &[&str]) -> Option<usize> {
    names
        .iter()
        .position(|s| *s == "naive")
        .or_else(|| (!names.is_empty()).then_some(0))
}

/// One line per configuration and strategy of a sweep run in rounds: its goodput over all
/// rounds (bytes over measured time), and its ratio to the reference strategy
/// ([`reference_strategy`]) over all rounds, with the median, least and most of the ratios
/// of the rounds paired one by one. The median is the estimate a slow second moves least:
/// on the 2-core VM the machine's cost per byte doubled for a quarter to a whole second
/// now and then, for whichever strategy ran (`naive` alone, 8 rounds of 250 ms: 8 and
/// 11-17 Gbit/s), and one such round moves the pooled ratio of 4 by up to a quarter.
/// With `--mix` each line adds both kinds' latency over the rounds ([`pooled_latency`]).
/// Empty when every configuration ran one round.
pub fn round_summary(results: &[Measurement]) -> Vec<String> {
    if results.iter().all(|m| m.round == 0) {
        return Vec::new();
    }
    // Configurations in first-seen order, each with its strategies in first-seen order.
    type Rounds<'a> = Vec<(&'a str, Vec<&'a Measurement>)>;
    // Layout, senders, concurrency and an open loop's load (its bits; 0: closed): each
    // load is a configuration of its own.
    type Config<'a> = (&'a str, usize, usize, u64);
    let mut configs: Vec<(Config, Rounds)> = Vec::new();
    for m in results {
        let key = (m.layout.as_str(), m.senders, m.concurrency, m.load.to_bits());
        let i = match configs.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                configs.push((key, Vec::new()));
                configs.len() - 1
            }
        };
        let strategies = &mut configs[i].1;
        match strategies.iter_mut().find(|(s, _)| *s == m.strategy) {
            Some((_, v)) => v.push(m),
            None => strategies.push((m.strategy.as_str(), vec![m])),
        }
    }
    let mut out = Vec::new();
    for ((layout, n, r, load), strategies) in &configs {
        let load = f64::from_bits(*load);
        let at_load = if load > 0.0 {
            format!(" load {load}")
        } else {
            String::new()
        };
        let names: Vec<&str> = strategies.iter().map(|(s, _)| *s).collect();
        let Some(reference) = reference_strategy(&names) else {
            continue;
        };
        let (ref_name, ref_rounds) = &strategies[reference];
        let ref_mbps = pooled_goodput(ref_rounds.iter().copied());
        for (name, rounds) in strategies {
            let mbps = pooled_goodput(rounds.iter().copied());
            let mut line = format!(
                "over {} rounds, N={n} R={r} {layout}{at_load}: {name} {mbps:.1} Mbit/s",
                rounds.len()
            );
            if name != ref_name && ref_mbps > 0.0 {
                // Per-round ratios, pairing each round with the reference's same round.
                let mut ratios: Vec<f64> = rounds
                    .iter()
                    .filter_map(|m| {
                        let other = ref_rounds.iter().find(|o| o.round == m.round)?;
                        (other.goodput_mbps > 0.0).then(|| m.goodput_mbps / other.goodput_mbps)
                    })
                    .collect();
                ratios.sort_by(f64::total_cmp);
                line += &format!(", {:.2} of {ref_name}", mbps / ref_mbps);
                if let (Some(lo), Some(hi)) = (ratios.first(), ratios.last()) {
                    let mid = ratios.len() / 2;
                    let median = if ratios.len() % 2 == 1 {
                        ratios[mid]
                    } else {
                        (ratios[mid - 1] + ratios[mid]) / 2.0
                    };
                    line += &format!(" (per round: median {median:.2}, {lo:.2}-{hi:.2})");
                }
            }
            // Mixed reads: each kind's latency over the rounds (the goodput counts both).
            if rounds.iter().any(|m| m.mix.is_some()) {
                for (label, kind) in [("small", SMALL_READS), ("large", LARGE_READS)] {
                    if let Some((mean, p99)) = pooled_latency(rounds, kind) {
                        line += &format!("; {label} reads {mean:.1} ms (p99 {p99:.1})");
                    }
                }
            }
            out.push(line);
        }
    }
    out
}

/// Where each strategy's goodput collapsed: the first sender count from which every wider
/// read stays under half the line rate (one read at a time, fixed-SRU layouts, no
/// background), beside chen-2012's predicted onset for the same port
/// (Equation 3: buffer, SRU and Linux's initial window of 10 segments).
pub fn onsets(results: &[Measurement], tb: &crate::testbed::TestbedConfig) -> Vec<String> {
    let mut out = Vec::new();
    let mut keys: Vec<(&str, u64)> = Vec::new();
    for m in results {
        let key = (m.strategy.as_str(), m.sru_bytes);
        if m.concurrency == 1 && m.background_flows == 0 && m.layout.starts_with("SRU") && !keys.contains(&key) {
            keys.push(key);
        }
    }
    for (strategy, sru) in keys {
        let mut rows: Vec<&Measurement> = results
            .iter()
            .filter(|m| {
                m.strategy == strategy && m.sru_bytes == sru && m.concurrency == 1 && m.layout.starts_with("SRU")
            })
            .collect();
        rows.sort_by_key(|m| m.senders);
        // The collapse, not a noisy row: the first N from which every wider read stays under
        // half the line rate (one unlucky lone read on a busy VM is not an onset).
        let from = rows
            .iter()
            .rposition(|m| m.line_rate_fraction >= 0.5)
            .map_or(0, |i| i + 1);
        let measured = rows.get(from).map_or_else(
            || format!("none up to {} senders", rows.last().map_or(0, |m| m.senders)),
            |m| format!("{} senders", m.senders),
        );
        let model = incast_core::model::onset_senders(tb.buffer_bytes, sru, incast_core::model::MSS_1448 * 10)
            .map_or_else(|e| e.to_string(), |n| format!("{n} senders"));
        out.push(format!(
            "onset (first N from which goodput stays under 50% of line rate): {strategy} SRU {}: measured {measured}; model (chen-2012 eq. 3) {model}",
            crate::output::human(sru)
        ));
    }
    out
}

/// The row of a configuration whose warm-up failed: every block counts as failed.
fn failed_row(run: &RunSpec, error: String) -> Measurement {
    Measurement {
        strategy: run.strategy.name().to_owned(),
        senders: run.senders,
        concurrency: run.concurrency.max(1),
        layout: run.layout.to_string(),
        sru_bytes: run.layout.sru(run.senders),
        block_bytes: run.layout.block(run.senders),
        blocks: run.blocks,
        failed_blocks: run.blocks,
        background_flows: run.background.len(),
        batch: run.batch,
        mix: run.mix.map(|m| m.to_string()),
        cc: run.cc.clone(),
        first_error: Some(error),
        ..Measurement::default()
    }
}

/// Measures one configuration, with the testbed's counters around it (and the per-route
/// `rto_min` for `rto-route`): the port's drops, the kernel RTOs of the server hosts minus
/// the bulk senders' ([`Measurement::host_rtos`]), and the client's own
/// ([`Measurement::client_rtos`]).
fn measure_one(
    rt: &tokio::runtime::Runtime,
    addrs: &[(ServerId, SocketAddr)],
    run: &RunSpec,
    reader: Option<&Reader>,
    (testbed, bulk_rtos): (Option<&Testbed>, Option<&AtomicU64>),
    on_block: impl FnMut(u64),
    warn: impl Fn(String),
) -> Result<Measurement, SweepError> {
    let rto_route = run.strategy == Strategy::RtoRoute;
    if let (true, Some(tb)) = (rto_route, testbed) {
        tb.set_route_rto_min(Some(ROUTE_RTO_MIN))?;
    }
    let bulk_rtos = || bulk_rtos.map_or(0, |b| b.load(Ordering::Relaxed));
    let counters =
        |tb: &Testbed| -> Result<_, TestbedError> { Ok((tb.qdisc_stats()?, tb.host_counters()?, bulk_rtos())) };
    let before = testbed.map(counters).transpose()?;
    // The hosts' counters when the warm-up ends (an error there only loses the split).
    let warm = std::cell::Cell::new(None);
    let on_warm = || warm.set(testbed.and_then(|tb| tb.host_counters().ok()).map(|h| (h, bulk_rtos())));
    let r = rt.block_on(measure(addrs, run, reader, on_warm, on_block));
    if testbed.is_some() {
        // A connection abandoned after a hedge takes its RTO up to a minimum RTO later. The
        // wait runs on the runtime, as a service's would: the client's drains of connections
        // its last reads left owing bytes go on meanwhile (a runtime that stood still here
        // froze them past their servers' RTOs).
        rt.block_on(async { tokio::time::sleep(HOST_RTO_SETTLE).await });
    }
    // The row is measured: counters that cannot be read now (a run that left the machine
    // out of descriptors) leave its drops and RTOs unknown, not the row lost.
    let after = match testbed.map(counters).transpose() {
        Ok(after) => after,
        Err(e) => {
            warn(format!(
                "warning: the testbed's counters after this row: {e}; its drops and kernel RTOs are unknown"
            ));
            None
        }
    };
    if let (true, Some(tb)) = (rto_route, testbed) {
        tb.set_route_rto_min(None)?;
    }
    let mut m = r?;
    m.cc = run.cc.clone();
    // (port counters, host RTOs, bulk senders' RTOs) before and after.
    if let (Some(tb), Some((port0, hosts0, bulk0)), Some((port1, hosts1, bulk1))) = (testbed, before, after) {
        m.switch_drops = Some(port1.since(&port0).dropped);
        m.host_rtos = Some(
            hosts1
                .rtos
                .saturating_sub(hosts0.rtos)
                .saturating_sub(bulk1.saturating_sub(bulk0)),
        );
        m.host_syn_ack_retransmits = Some(hosts1.syn_ack_retransmits.saturating_sub(hosts0.syn_ack_retransmits));
        m.host_handshakes = Some(hosts1.handshakes.saturating_sub(hosts0.handshakes));
        m.client_rtos = Some(hosts1.client_rtos.saturating_sub(hosts0.client_rtos));
        if let Some((w, bulk_w)) = warm.take() {
            let rtos = w.rtos.saturating_sub(hosts0.rtos);
            m.host_rtos_warmup = Some(rtos.saturating_sub(bulk_w.saturating_sub(bulk0)));
            m.host_handshakes_warmup = Some(w.handshakes.saturating_sub(hosts0.handshakes));
            m.client_rtos_warmup = Some(w.client_rtos.saturating_sub(hosts0.client_rtos));
        }
        m.buffer_bytes = Some(tb.config().buffer_bytes);
        m.rate_bps = Some(tb.config().rate_bps);
    }
    Ok(m)
}

/// quinn's congestion controller closest to the kernel's `cc`.
pub fn quic_congestion(cc: &str) -> Congestion {
    match cc {
        "reno" => Congestion::NewReno,
        "bbr" => Congestion::Bbr,
        _ => Congestion::Cubic,
    }
}

/// Why a sweep stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SweepError {
    /// The testbed failed.
    #[error(transparent)]
    Testbed(#[from] TestbedError),
    /// A configuration could not be measured.
    #[error(transparent)]
    Run(#[from] RunError),
    /// Servers, runtime or threads could not be started.
    #[error("sweep: {0}")]
    Io(#[from] std::io::Error),
    /// The request makes no sense.
    #[error("{0}")]
    Invalid(String),
}

/// A finished sweep.
#[derive(Debug)]
pub struct SweepResult {
    /// Line rate, Mbit/s.
    pub line_rate_mbps: f64,
    /// One per (layout, senders, concurrency, strategy, round) measured.
    pub results: Vec<Measurement>,
    /// Why the sweep stopped before its last configuration, if it did: `results` then holds
    /// the rows measured before, which the caller still writes out (a long sweep that fails
    /// in its last row loses nothing it measured).
    pub stopped: Option<SweepError>,
    /// Spinning threads that loaded the CPUs while the rows ran ([`SweepSpec::cpu_load`]).
    pub cpu_load: usize,
}

/// Bytes of the mean read of a configuration: the layout's block, or with mixed reads the
/// mean of it and the mixed shape's (half the reads are of each).
fn mean_read_bytes(layout: Layout, senders: usize, mix: Option<Mix>) -> f64 {
    let block = layout.block(senders) as f64;
    mix.map_or(block, |m| (block + m.block() as f64) / 2.0)
}

/// The load curve of a sweep over several offered loads (`--load 0.2,0.5,0.8`): for each
/// configuration and strategy, one line of its read latency at each load, ms, with the
/// ratio of its mean to the reference strategy's at the same load ([`reference_strategy`]),
/// and the share of the line rate it carried there. Every strategy gets the same arrivals,
/// so one that carried less than another could not keep up: its reads arrived faster than
/// it ended them, and their wait for a place grew with the run. (All of them short of the
/// load by the same share is the seeded draw's own load over a short run.)
/// With `--mix` the two kinds stand apart (`small` the mixed reads, `large` the layout's),
/// as Homa and pFabric plot latency by size against load. Rounds pool: the mean over every
/// round's reads, the worst round's p99. Empty for a sweep of one load or none.
pub fn load_curve(results: &[Measurement]) -> Vec<String> {
    let mut configs: Vec<(&str, usize, usize)> = Vec::new();
    for m in results.iter().filter(|m| m.load > 0.0) {
        let key = (m.layout.as_str(), m.senders, m.concurrency);
        if !configs.contains(&key) {
            configs.push(key);
        }
    }
    let mut out = Vec::new();
    for (layout, n, r) in configs {
        let rows: Vec<&Measurement> = results
            .iter()
            .filter(|m| m.load > 0.0 && (m.layout.as_str(), m.senders, m.concurrency) == (layout, n, r))
            .collect();
        let mut loads: Vec<f64> = Vec::new();
        let mut names: Vec<&str> = Vec::new();
        for m in &rows {
            if !loads.contains(&m.load) {
                loads.push(m.load);
            }
            if !names.contains(&m.strategy.as_str()) {
                names.push(m.strategy.as_str());
            }
        }
        if loads.len() < 2 {
            continue;
        }
        // A curve runs from the lightest load up, in whatever order the sweep ran them.
        loads.sort_by(f64::total_cmp);
        let Some(reference) = reference_strategy(&names) else {
            continue;
        };
        let mixed = rows.iter().any(|m| m.mix.is_some());
        let kinds: &[(&str, ReadKind)] = if mixed {
            &[("small ", SMALL_READS), ("large ", LARGE_READS)]
        } else {
            &[("", ALL_READS)]
        };
        out.push(format!(
            "load curve, N={n} R={r} {layout}: mean read latency, ms (p99), at each offered load \
             (and the share of the line rate carried); the ratio is to {}'s mean at that load",
            names[reference]
        ));
        let at = |name: &str, load: f64| -> Vec<&Measurement> {
            rows.iter()
                .copied()
                .filter(|m| m.strategy == name && m.load == load)
                .collect()
        };
        for &name in &names {
            let mut cells = Vec::new();
            for &load in &loads {
                let mine = at(name, load);
                let theirs = at(names[reference], load);
                let mut parts = Vec::new();
                for (label, kind) in kinds {
                    let Some((mean, p99)) = pooled_latency(&mine, kind) else {
                        parts.push(format!("{label}-"));
                        continue;
                    };
                    let mut part = format!("{label}{mean:.1} ({p99:.1})");
                    if name != names[reference] {
                        if let Some((ref_mean, _)) = pooled_latency(&theirs, kind).filter(|(m, _)| *m > 0.0) {
                            part += &format!(" {:.2}x", mean / ref_mean);
                        }
                    }
                    parts.push(part);
                }
                // The share of the line rate the strategy carried: less than another's under
                // the same arrivals, its reads arrived faster than it ended them.
                let line = mine.first().map_or(0.0, |m| m.line_rate_mbps);
                let carried = if line > 0.0 {
                    format!(" (carried {:.2})", pooled_goodput(mine.iter().copied()) / line)
                } else {
                    String::new()
                };
                cells.push(format!("{load}{carried}: {}", parts.join(", ")));
            }
            out.push(format!("  {name}: {}", cells.join("; ")));
        }
    }
    out
}

/// Runs the sweep; prints the table as results arrive.
pub fn run(spec: SweepSpec, network: Network) -> Result<SweepResult, SweepError> {
    let max_n = spec.senders.iter().copied().max().unwrap_or(0);
    let max_r = spec.concurrency.iter().copied().max().unwrap_or(0);
    if spec.senders.contains(&0) || spec.concurrency.contains(&0) {
        return Err(SweepError::Invalid("senders and concurrency must be at least 1".into()));
    }
    if max_n == 0 || max_r == 0 || spec.layouts.is_empty() || spec.strategies.is_empty() || spec.blocks == 0 {
        return Err(SweepError::Invalid(
            "nothing to run: give senders, a layout, strategies and at least one block".into(),
        ));
    }
    if spec.mix.is_some() && spec.load.is_empty() && spec.concurrency.contains(&1) {
        return Err(SweepError::Invalid(
            "--mix needs --concurrency of 2 or more, or --load: every other reader reads the mixed shape".into(),
        ));
    }
    if spec.batch && !spec.load.is_empty() {
        return Err(SweepError::Invalid(
            "--load and --batch do not go together: reads arrive one by one or in batches".into(),
        ));
    }
    for &load in &spec.load {
        if !(load > 0.0 && load <= MAX_LOAD) {
            return Err(SweepError::Invalid(format!(
                "--load {load}: give the offered load as a share of the line rate, more than 0 and at most {MAX_LOAD}"
            )));
        }
    }
    if let Some(mix) = spec.mix.filter(|m| m.senders > max_n * max_r) {
        return Err(SweepError::Invalid(format!(
            "--mix {mix}: {} senders, but the sweep starts {} servers (the widest read's senders times \
             the most concurrent reads)",
            mix.senders,
            max_n * max_r
        )));
    }
    if !(1..=MAX_ROUNDS).contains(&spec.rounds) {
        return Err(SweepError::Invalid(format!(
            "rounds must be 1 to {MAX_ROUNDS}, not {}",
            spec.rounds
        )));
    }
    if let Some(s) = spec.strategies.iter().find(|s| s.testbed_only()) {
        if !matches!(network, Network::Testbed(_)) {
            return Err(SweepError::Invalid(format!(
                "strategy `{s}` changes the servers' routes and runs only with --testbed"
            )));
        }
    }
    let mut server_config = ServerConfig::builder().tuning(SocketTuning {
        congestion: Some(spec.cc.clone()),
        ..SocketTuning::server()
    });
    let invalid = |e: &dyn std::fmt::Display| SweepError::Invalid(e.to_string());
    // QUIC: servers started here get a certificate made for this run, which the client
    // trusts; servers on hosts need the CA that issued theirs.
    let mut quic_client = None;
    if spec.strategies.iter().any(|s| s.uses_quic()) {
        let congestion = quic_congestion(&spec.cc);
        let trust = match &network {
            Network::Hosts(_) => {
                let Some(ca) = &spec.quic_ca else {
                    return Err(SweepError::Invalid(
                        "the quic strategies need --quic-ca FILE (the CA of the servers' certificates)".into(),
                    ));
                };
                TlsTrust::from_pem_file(ca).map_err(|e| invalid(&e))?
            }
            _ => {
                // One name for every host of the testbed (the client asks for it below), so
                // the certificate does not grow with the host count.
                let cert = SelfSigned::generate(["localhost".to_owned(), Ipv4Addr::LOCALHOST.to_string()])
                    .map_err(|e| invalid(&e))?;
                let q = QuicServerConfig::builder(cert.identity())
                    .congestion(congestion)
                    .max_gso_segments(spec.quic_gso)
                    .build()
                    .map_err(|e| invalid(&e))?;
                server_config = server_config.quic(q);
                cert.trust().map_err(|e| invalid(&e))?
            }
        };
        let mut b = QuicClientConfig::builder(trust).congestion(congestion);
        if let Some(name) = &spec.quic_server_name {
            b = b.server_name(name.clone());
        } else if matches!(network, Network::Testbed(_)) {
            b = b.server_name("localhost".to_owned());
        }
        quic_client = Some(b.build().map_err(|e| invalid(&e))?);
    }
    let server_config = server_config.build().map_err(|e| invalid(&e))?;
    // TLS: a second set of servers, serving mutual TLS on their own ports, with certificates
    // made for this run (a server requiring TLS speaks nothing else).
    let mut tls = None;
    if spec.strategies.iter().any(|s| s.uses_tls()) {
        if matches!(network, Network::Hosts(_)) {
            return Err(SweepError::Invalid(
                "strategy `tls` runs only with servers started here (--loopback or --testbed)".into(),
            ));
        }
        let server_cert =
            SelfSigned::generate(["localhost".to_owned(), Ipv4Addr::LOCALHOST.to_string()]).map_err(|e| invalid(&e))?;
        let client_cert = SelfSigned::generate(["incast-bench"]).map_err(|e| invalid(&e))?;
        let trust = |c: &SelfSigned| c.trust().map_err(|e| invalid(&e));
        let server = TlsServerConfig::builder(server_cert.identity())
            .client_certs(trust(&client_cert)?)
            .build()
            .map_err(|e| invalid(&e))?;
        let client = TlsClientConfig::builder(trust(&server_cert)?)
            .identity(client_cert.identity())
            .server_name("localhost")
            .build()
            .map_err(|e| invalid(&e))?;
        let config = ServerConfig::builder()
            .tuning(SocketTuning {
                congestion: Some(spec.cc.clone()),
                ..SocketTuning::server()
            })
            .tls(server)
            .build()
            .map_err(|e| invalid(&e))?;
        tls = Some((config, client));
    }
    // Concurrent reads rotate over more servers than one read uses (see `run`).
    let pool = max_n.saturating_mul(max_r).min(max_n.max(MAX_POOL));
    let hosts = || -> std::io::Result<crate::servers::Hosts> {
        match &network {
            Network::Testbed(tb) => tb
                .hosts()
                .iter()
                .enumerate()
                .map(|(h, ns)| Ok((Some(ns.try_clone()?), IpAddr::V4(host_addr(h)))))
                .collect(),
            _ => Ok(vec![(None, IpAddr::V4(Ipv4Addr::LOCALHOST))]),
        }
    };
    // On the testbed the last `background` hosts are the bulk senders' own (see
    // `crate::servers`); elsewhere every bulk sender shares the servers' one host.
    let split = || -> std::io::Result<(crate::servers::Hosts, crate::servers::Hosts)> {
        let mut servers = hosts()?;
        let bulk = match &network {
            Network::Testbed(_) => {
                let keep = servers
                    .len()
                    .checked_sub(spec.background)
                    .filter(|&k| k > 0)
                    .ok_or_else(|| {
                        std::io::Error::other(format!(
                        "the testbed has {} hosts: too few for {} bulk senders on hosts of their own and a server host",
                        servers.len(),
                        spec.background
                    ))
                    })?;
                servers.split_off(keep)
            }
            _ => (0..spec.background)
                .map(|_| (None, IpAddr::V4(Ipv4Addr::LOCALHOST)))
                .collect(),
        };
        Ok((servers, bulk))
    };
    // The servers' stores share one delay: zero while the line rate is probed.
    let held = HeldPattern::default();
    let store = || {
        let held = held.clone();
        move |_| held.clone()
    };
    let start = || {
        let (servers, bulk) = split()?;
        ServerSet::start_with(servers, pool, bulk, &spec.cc, server_config.clone(), store())
    };
    // The TLS servers (no bulk flows of their own) and the client's TLS settings.
    let tls = match tls {
        Some((config, client)) => {
            let set = ServerSet::start_with(split()?.0, pool, Vec::new(), &spec.cc, config, store())?;
            Some((set, client))
        }
        None => None,
    };
    let (servers, testbed, addrs) = match &network {
        Network::Testbed(tb) => {
            let set = start()?;
            let addrs = set.addrs().to_vec();
            (Some(set), Some(tb.clone()), addrs)
        }
        Network::Loopback => {
            let set = start()?;
            let addrs = set.addrs().to_vec();
            (Some(set), None, addrs)
        }
        Network::Hosts(h) => {
            if h.len() < max_n {
                return Err(SweepError::Invalid(format!(
                    "{max_n} senders asked for, but only {} servers given",
                    h.len()
                )));
            }
            if spec.background > 0 {
                return Err(SweepError::Invalid(
                    "--background needs servers started here (--testbed or --loopback)".into(),
                ));
            }
            if !spec.server_delay.is_zero() {
                return Err(SweepError::Invalid(
                    "--server-delay needs servers started here (--testbed or --loopback)".into(),
                ));
            }
            let addrs = h.iter().enumerate().map(|(i, a)| (ServerId(i as u32), *a)).collect();
            (None, None, addrs)
        }
    };
    let bulk = servers.as_ref().map(|s| s.bulk().to_vec()).unwrap_or_default();
    let bulk_rtos = servers.as_ref().map(ServerSet::bulk_rtos);
    if let Some(t) = servers.as_ref().and_then(|s| s.tuning_report()) {
        if t.contains("refused") && !spec.quiet {
            eprintln!("warning: the servers' socket options were not all taken:\n{t}");
        }
    }
    let secure = Secure {
        quic: quic_client,
        tls: tls.as_ref().map(|(set, client)| (set.addrs().to_vec(), client.clone())),
    };
    let body = move || client_side(spec, testbed, addrs, (bulk, bulk_rtos), secure, held);
    let out = match &network {
        Network::Testbed(tb) => tb.client().run(body)?,
        _ => body(),
    };
    drop(servers);
    drop(tls);
    out
}

/// What the encrypted strategies need on the client's side.
struct Secure {
    /// QUIC's trust and tuning (the servers serve QUIC on the same ports).
    quic: Option<QuicClientConfig>,
    /// The addresses of the servers that serve mutual TLS, and the client's TLS settings.
    tls: Option<(Vec<(ServerId, SocketAddr)>, TlsClientConfig)>,
}

fn client_side(
    spec: SweepSpec,
    testbed: Option<Arc<Testbed>>,
    addrs: Vec<(ServerId, SocketAddr)>,
    (bulk, bulk_rtos): (Vec<SocketAddr>, Option<Arc<AtomicU64>>),
    secure: Secure,
    held: HeldPattern,
) -> Result<SweepResult, SweepError> {
    let Secure { quic, tls } = secure;
    let (tls_addrs, tls) = tls.unzip();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // The `blocking` reference client reads one block at a time: it runs at concurrency 1 only.
    let runs = |r: usize| {
        spec.strategies
            .iter()
            .filter(|s| r == 1 || **s != Strategy::Blocking)
            .count()
    };
    // Each offered load is a configuration of its own; a closed loop (no load) is one.
    let loads: Vec<Option<f64>> = if spec.load.is_empty() {
        vec![None]
    } else {
        spec.load.iter().copied().map(Some).collect()
    };
    let configs = spec.layouts.len()
        * spec.senders.len()
        * loads.len()
        * spec.concurrency.iter().map(|r| runs(*r)).sum::<usize>();
    // Each round reads its share of the blocks and of the time (see *Rounds*).
    let rounds = spec.rounds;
    let round_blocks = spec.blocks.div_ceil(rounds);
    let total = configs as u64 * u64::from(round_blocks) * u64::from(rounds);
    let bar = if spec.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new(total);
        b.set_style(
            indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} blocks  {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        b
    };
    // A hidden bar (quiet, or stderr not a terminal) would swallow `println`; print around it.
    let say = |line: String| match (spec.quiet, bar.is_hidden()) {
        (true, _) => {}
        (false, true) => eprintln!("{line}"),
        (false, false) => bar.suspend(|| eprintln!("{line}")),
    };
    let base = |strategy, senders, layout, concurrency| RunSpec {
        strategy,
        senders,
        layout,
        blocks: spec.blocks,
        warmup: spec.warmup,
        buffer_hint: spec.buffer_hint,
        rate_hint: spec.rate_hint,
        read_timeout: spec.read_timeout,
        cc: spec.cc.clone(),
        max_time: spec.max_time,
        min_time: spec.min_time,
        quic: quic.clone(),
        tls: tls.clone(),
        concurrency,
        background: Vec::new(),
        batch: spec.batch,
        mix: spec.mix,
        arrivals: None,
    };
    // Line rate: one sender streaming, the better of naive and default.
    bar.set_message("line rate (1 sender, 4 MiB blocks)");
    let mut line_rate: f64 = 0.0;
    let target = testbed
        .as_ref()
        .map_or(0.0, |tb| CALIBRATED * tb.config().payload_capacity_mbps());
    for round in 0..LINE_RATE_MAX_ROUNDS {
        if round >= LINE_RATE_ROUNDS && line_rate >= target {
            break;
        }
        for st in [Strategy::Naive, Strategy::Default, Strategy::PerRead] {
            let probe = RunSpec {
                blocks: LINE_RATE_BLOCKS,
                warmup: 2,
                min_time: Duration::ZERO,
                mix: None,
                ..base(st, 1, Layout::Block(LINE_RATE_BLOCK), 1)
            };
            let m = rt.block_on(measure(&addrs, &probe, None, || {}, |_| {}))?;
            line_rate = line_rate.max(m.goodput_mbps);
        }
    }
    say(format!("line rate (one sender streaming): {line_rate:.1} Mbit/s"));
    held.set_delay(spec.server_delay);
    if let Some(tb) = &testbed {
        let capacity = tb.config().payload_capacity_mbps();
        if line_rate < CALIBRATED * capacity {
            // Always said, also with --quiet: every number after this measures the machine.
            eprintln!(
                "warning: one sender reaches only {:.0}% of the port's payload capacity ({capacity:.0} Mbit/s): \
                 this machine cannot emulate the port at this rate (CPU, or timer latency of the shapers), \
                 so the results measure the machine, not incast",
                line_rate / capacity * 100.0
            );
        }
    }
    bar.suspend(|| outln!("{}", table_header()));
    let mut results = Vec::with_capacity(configs);
    let (senders, concurrency, loads) = (&spec.senders, &spec.concurrency, &loads);
    // Loads innermost: a load curve's rows stand together.
    let configurations = spec.layouts.iter().flat_map(|&layout| {
        senders.iter().flat_map(move |&n| {
            concurrency
                .iter()
                .flat_map(move |&r| loads.iter().map(move |&load| (layout, n, r, load)))
        })
    });
    let mut stopped = None;
    'configurations: for (layout, n, r, load) in configurations {
        let strategies: Vec<Strategy> = spec
            .strategies
            .iter()
            .copied()
            .filter(|s| r == 1 || *s != Strategy::Blocking)
            .collect();
        // One reader per strategy for all rounds of the configuration (see *Rounds*).
        let mut readers: Vec<Option<Reader>> = strategies.iter().map(|_| None).collect();
        for round in 0..rounds {
            // A B, then B A: neither strategy always runs first after the warm-up.
            let order: Vec<usize> = if round % 2 == 0 {
                (0..strategies.len()).collect()
            } else {
                (0..strategies.len()).rev().collect()
            };
            for i in order {
                let st = strategies[i];
                let of_rounds = if rounds > 1 {
                    format!(" round {}/{rounds}", round + 1)
                } else {
                    String::new()
                };
                let at_load = load.map_or(String::new(), |l| format!(" load {l}"));
                bar.set_message(format!("{st} N={n} R={r} {layout}{at_load}{of_rounds}"));
                // The same arrival times for every strategy of the round.
                let arrivals = match load {
                    None => None,
                    Some(load) => {
                        let seed = u64::from(round) + 1;
                        let at = Arrivals::at_load(load, line_rate, mean_read_bytes(layout, n, spec.mix), seed);
                        Some(at.map_err(SweepError::Invalid)?)
                    }
                };
                let run = RunSpec {
                    background: bulk.clone(),
                    blocks: round_blocks,
                    min_time: spec.min_time / rounds,
                    max_time: spec.max_time / rounds,
                    arrivals,
                    ..base(st, n, layout, r)
                };
                let servers = match &tls_addrs {
                    Some(a) if st.uses_tls() => a,
                    _ => &addrs,
                };
                if rounds > 1 && readers[i].is_none() {
                    match Reader::new(servers, &run) {
                        Ok(reader) => readers[i] = Some(reader),
                        Err(e) => {
                            stopped = Some(e.into());
                            break 'configurations;
                        }
                    }
                }
                // The other strategies' pooled connections go: with servers in this process
                // each holds two descriptors, and `naive`'s pool after 128 reads of 64 servers
                // (16,384) left the next strategy none (see *Rounds*).
                for other in readers
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .filter_map(|(_, r)| r.as_ref())
                {
                    other.close_idle();
                }
                let progress = |k| bar.inc(k);
                // Said also with --quiet (the row's drops are missing), around the bar.
                let warn = |line: String| bar.suspend(|| eprintln!("{line}"));
                let hosts = (testbed.as_deref(), bulk_rtos.as_deref());
                // A busy host for this row alone (warm-up included), at most as long as the
                // row can take; it stops when dropped at the row's end.
                let load_limit = run.max_time + run.read_timeout.saturating_mul(run.warmup + 2) + CPU_LOAD_SLACK;
                let load = match CpuLoad::start(spec.cpu_load, load_limit) {
                    Ok(load) => load,
                    Err(e) => {
                        stopped = Some(SweepError::Invalid(format!("--cpu-load {}: {e}", spec.cpu_load)));
                        break 'configurations;
                    }
                };
                let measured = measure_one(&rt, servers, &run, readers[i].as_ref(), hosts, progress, warn);
                drop(load);
                let mut m = match measured {
                    Ok(m) => m,
                    // A configuration the machine cannot set up (out of descriptors, a server
                    // that never answers) is a failed row, not the end of the sweep.
                    Err(SweepError::Run(e @ RunError::Warmup { .. })) => {
                        bar.inc(u64::from(run.blocks));
                        failed_row(&run, e.to_string())
                    }
                    Err(e) => {
                        stopped = Some(e);
                        break 'configurations;
                    }
                };
                m.set_line_rate(line_rate);
                m.round = round;
                let row = table_row(&m) + &of_rounds;
                bar.suspend(|| outln!("{row}"));
                results.push(m);
            }
        }
    }
    bar.finish_and_clear();
    for line in round_summary(&results).into_iter().chain(load_curve(&results)) {
        outln!("{line}");
    }
    if let Some(tb) = &testbed {
        for line in onsets(&results, tb.config()) {
            bar.suspend(|| outln!("{line}"));
        }
    }
    Ok(SweepResult {
        line_rate_mbps: line_rate,
        results,
        stopped,
        cpu_load: spec.cpu_load,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_onset_is_where_goodput_stays_low_not_one_noisy_row() {
        let row = |n, f| Measurement {
            strategy: "naive".into(),
            senders: n,
            concurrency: 1,
            layout: "SRU 64KiB".into(),
            sru_bytes: 64 << 10,
            line_rate_fraction: f,
            ..Measurement::default()
        };
        let tb = crate::testbed::TestbedConfig::default();
        let lines = onsets(
            &[row(1, 0.3), row(2, 0.7), row(4, 0.45), row(8, 0.2), row(16, 0.1)],
            &tb,
        );
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("measured 4 senders"), "{}", lines[0]);
        assert!(lines[0].contains("model (chen-2012 eq. 3) 3 senders"), "{}", lines[0]);
        let none = onsets(&[row(1, 0.9), row(8, 0.8)], &tb);
        assert!(none[0].contains("none up to 8 senders"), "{}", none[0]);
    }

    #[test]
    fn a_sweep_in_rounds_pools_each_strategy_and_pairs_its_rounds() {
        let row = |strategy: &str, round, mbps, elapsed_s| Measurement {
            strategy: strategy.into(),
            round,
            senders: 16,
            concurrency: 4,
            layout: "SRU 256KiB".into(),
            goodput_mbps: mbps,
            elapsed_s,
            ..Measurement::default()
        };
        // naive: 1000 Mbit/s for 1 s, then 500 for 1 s (a slow second); default 900, then 600.
        let rows = [
            row("default", 0, 900.0, 1.0),
            row("naive", 0, 1000.0, 1.0),
            row("naive", 1, 500.0, 1.0),
            row("default", 1, 600.0, 1.0),
        ];
        let lines = round_summary(&rows);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].contains("default 750.0 Mbit/s, 1.00 of naive (per round: median 1.05, 0.90-1.20)"),
            "{lines:?}"
        );
        assert!(
            lines[1].contains("naive 750.0 Mbit/s") && !lines[1].contains("of naive"),
            "{lines:?}"
        );
        assert!(lines[0].contains("over 2 rounds, N=16 R=4 SRU 256KiB"), "{lines:?}");
        // Without naive the first strategy is the reference; one round has no summary.
        let own = [
            row("default", 0, 900.0, 1.0),
            row("own-rate", 0, 450.0, 1.0),
            row("default", 1, 900.0, 1.0),
            row("own-rate", 1, 900.0, 1.0),
        ];
        assert!(round_summary(&own)[1]
            .contains("own-rate 675.0 Mbit/s, 0.75 of default (per round: median 0.75, 0.50-1.00)"));
        assert!(round_summary(&rows[..2]).is_empty());
        // One slow round moves the pooled ratio, not the median.
        let slow = [
            row("naive", 0, 1000.0, 1.0),
            row("default", 0, 900.0, 1.0),
            row("default", 1, 1000.0, 1.0),
            row("naive", 1, 1000.0, 1.0),
            row("naive", 2, 1000.0, 1.0),
            row("default", 2, 400.0, 1.0),
        ];
        let lines = round_summary(&slow);
        assert!(
            lines[1].contains("0.77 of naive (per round: median 0.90, 0.40-1.00)"),
            "{lines:?}"
        );
    }

    #[test]
    fn a_load_curve_lines_up_each_strategys_latency_by_load_and_pools_its_rounds() {
        let row = |strategy: &str, load, round, mean_ms, p99_ms| Measurement {
            strategy: strategy.into(),
            round,
            senders: 16,
            concurrency: 8,
            layout: "SRU 256KiB".into(),
            load,
            blocks: 10,
            mean_ms,
            p99_ms,
            ..Measurement::default()
        };
        // One load, or a closed loop: no curve.
        assert!(load_curve(&[row("naive", 0.5, 0, 10.0, 20.0)]).is_empty());
        assert!(load_curve(&[row("naive", 0.0, 0, 10.0, 20.0), row("naive", 0.5, 0, 10.0, 20.0)]).is_empty());
        let mut slow = row("default", 0.8, 1, 30.0, 90.0);
        slow.blocks = 30;
        // A row that knows the line rate says what share of it the strategy carried.
        let carried = |mut m: Measurement, mbps| {
            m.line_rate_mbps = 1000.0;
            m.goodput_mbps = mbps;
            m.elapsed_s = 1.0;
            m
        };
        // Run heaviest first (`--load 0.8,0.2`): the curve still runs from the lightest.
        let rows = [
            row("naive", 0.8, 0, 40.0, 100.0),
            slow,
            row("default", 0.8, 0, 10.0, 50.0),
            row("naive", 0.8, 1, 40.0, 110.0),
            row("naive", 0.2, 0, 10.0, 20.0),
            carried(row("default", 0.2, 0, 5.0, 12.0), 190.0),
        ];
        let lines = load_curve(&rows);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].starts_with("load curve, N=16 R=8 SRU 256KiB"), "{lines:?}");
        assert!(lines[0].contains("to naive's mean"), "{lines:?}");
        assert_eq!(lines[1], "  naive: 0.2: 10.0 (20.0); 0.8: 40.0 (110.0)");
        // At 0.8: (10 reads x 10 ms + 30 x 30 ms) / 40 = 25 ms, 0.62 of naive's 40; p99 the
        // worse round's.
        assert_eq!(
            lines[2],
            "  default: 0.2 (carried 0.19): 5.0 (12.0) 0.50x; 0.8: 25.0 (90.0) 0.62x"
        );
        // Mixed reads: each kind against its own kind.
        let mixed = |strategy: &str, load, small, large| Measurement {
            mix: Some("4 x 16KiB".into()),
            mix_blocks: 5,
            mix_mean_ms: small,
            mix_p99_ms: 2.0 * small,
            layout_blocks: 5,
            layout_mean_ms: large,
            layout_p99_ms: 2.0 * large,
            ..row(strategy, load, 0, 0.0, 0.0)
        };
        let lines = load_curve(&[
            mixed("per-read", 0.5, 10.0, 100.0),
            mixed("default", 0.5, 5.0, 150.0),
            mixed("per-read", 0.9, 20.0, 200.0),
            mixed("default", 0.9, 4.0, 100.0),
        ]);
        assert!(lines[0].contains("to per-read's mean"), "{lines:?}");
        assert_eq!(
            lines[2],
            "  default: 0.5: small 5.0 (10.0) 0.50x, large 150.0 (300.0) 1.50x; \
             0.9: small 4.0 (8.0) 0.20x, large 100.0 (200.0) 0.50x"
        );
    }

    #[test]
    fn a_mixed_sweep_in_rounds_pools_each_kinds_latency() {
        let row = |round, small_reads, small_ms, large_ms| Measurement {
            strategy: "default".into(),
            round,
            senders: 16,
            concurrency: 4,
            layout: "SRU 256KiB".into(),
            goodput_mbps: 500.0,
            elapsed_s: 1.0,
            mix: Some("4 x 16KiB".into()),
            mix_blocks: small_reads,
            mix_mean_ms: small_ms,
            mix_p99_ms: 3.0 * small_ms,
            layout_blocks: 2,
            layout_mean_ms: large_ms,
            layout_p99_ms: 2.0 * large_ms,
            ..Measurement::default()
        };
        // Small reads: (10 x 2 ms + 30 x 6 ms) / 40 = 5 ms, p99 the worse round's 18.
        let lines = round_summary(&[row(0, 10, 2.0, 100.0), row(1, 30, 6.0, 300.0)]);
        assert_eq!(
            lines,
            [
                "over 2 rounds, N=16 R=4 SRU 256KiB: default 500.0 Mbit/s; small reads 5.0 ms (p99 18.0); \
              large reads 200.0 ms (p99 600.0)"
            ]
        );
    }

    #[test]
    fn the_rounds_of_each_load_pool_apart() {
        let row = |strategy: &str, round, load, mbps| Measurement {
            strategy: strategy.into(),
            round,
            senders: 16,
            concurrency: 4,
            layout: "SRU 256KiB".into(),
            load,
            goodput_mbps: mbps,
            elapsed_s: 1.0,
            ..Measurement::default()
        };
        let lines = round_summary(&[
            row("naive", 0, 0.2, 200.0),
            row("naive", 1, 0.2, 200.0),
            row("naive", 0, 0.8, 800.0),
            row("naive", 1, 0.8, 800.0),
        ]);
        assert_eq!(
            lines,
            [
                "over 2 rounds, N=16 R=4 SRU 256KiB load 0.2: naive 200.0 Mbit/s",
                "over 2 rounds, N=16 R=4 SRU 256KiB load 0.8: naive 800.0 Mbit/s"
            ]
        );
    }

    /// A sweep of one naive read of 1 KiB from one server (hosts that do not exist: a
    /// check that refuses it must come before any connection).
    fn tiny_spec() -> SweepSpec {
        SweepSpec {
            senders: vec![1],
            concurrency: vec![1],
            background: 0,
            batch: false,
            mix: None,
            load: Vec::new(),
            layouts: vec![Layout::Sru(1024)],
            strategies: vec![Strategy::Naive],
            blocks: 1,
            warmup: 0,
            max_time: Duration::from_secs(1),
            min_time: Duration::ZERO,
            read_timeout: Duration::from_secs(1),
            buffer_hint: 32 << 10,
            rate_hint: None,
            cc: "cubic".into(),
            quiet: true,
            quic_ca: None,
            quic_server_name: None,
            quic_gso: 1,
            rounds: 1,
            server_delay: Duration::ZERO,
            cpu_load: 0,
        }
    }

    #[test]
    fn rounds_out_of_range_are_refused_before_anything_starts() {
        for rounds in [0, MAX_ROUNDS + 1] {
            let spec = SweepSpec { rounds, ..tiny_spec() };
            let e = run(spec, Network::Hosts(Vec::new())).unwrap_err();
            assert!(
                matches!(&e, SweepError::Invalid(m) if m.contains("rounds must be 1 to 16")),
                "{e}"
            );
        }
    }

    #[test]
    fn an_open_loop_takes_a_load_in_range_and_no_batches() {
        // Every load of a curve is checked, not the first alone.
        for load in [0.0, -0.5, 1.01, f64::NAN] {
            let spec = SweepSpec {
                load: vec![0.5, load],
                ..tiny_spec()
            };
            let e = run(spec, Network::Hosts(Vec::new())).unwrap_err();
            assert!(
                matches!(&e, SweepError::Invalid(m) if m.contains("more than 0 and at most 1")),
                "{load}: {e}"
            );
        }
        let batches = SweepSpec {
            load: vec![0.5],
            batch: true,
            ..tiny_spec()
        };
        let e = run(batches, Network::Hosts(Vec::new())).unwrap_err();
        assert!(
            matches!(&e, SweepError::Invalid(m) if m.contains("--load and --batch")),
            "{e}"
        );
        // Mixed reads alternate by number in an open loop: one place is enough.
        let one_place = SweepSpec {
            load: vec![0.5],
            mix: Some(Mix { senders: 1, sru: 512 }),
            ..tiny_spec()
        };
        let e = run(one_place, Network::Hosts(Vec::new())).unwrap_err();
        assert!(!e.to_string().contains("--concurrency of 2"), "{e}");
    }

    #[test]
    fn a_mix_without_a_second_reader_or_enough_servers_is_refused() {
        let mix = Some(Mix { senders: 2, sru: 1024 });
        let one_reader = SweepSpec { mix, ..tiny_spec() };
        let e = run(one_reader, Network::Hosts(Vec::new())).unwrap_err();
        assert!(
            matches!(&e, SweepError::Invalid(m) if m.contains("--concurrency of 2 or more")),
            "{e}"
        );
        let wide = SweepSpec {
            mix: Some(Mix { senders: 3, sru: 1024 }),
            concurrency: vec![2],
            ..tiny_spec()
        };
        let e = run(wide, Network::Hosts(Vec::new())).unwrap_err();
        assert!(
            matches!(&e, SweepError::Invalid(m) if m.contains("3 senders, but the sweep starts 2 servers")),
            "{e}"
        );
    }
}
