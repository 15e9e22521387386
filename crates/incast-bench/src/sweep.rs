//! Many configurations and strategies, side by side, in one run.
//!
//! The loop is layout → senders → strategy, so the strategies of one configuration run
//! back to back and a noisy machine disturbs them alike. Before the sweep, the line rate is
//! measured with one sender streaming 4 MiB blocks (the better of `naive` and `default`), and
//! every result is expressed against it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use incast_core::ServerId;
use incast_rpc::quic::{Congestion, QuicClientConfig, QuicServerConfig, SelfSigned, TlsTrust};
use incast_rpc::{ServerConfig, SocketTuning};

use crate::output::{table_header, table_row};
use crate::run::{measure, Layout, Measurement, RunError, RunSpec};
use crate::servers::ServerSet;
use crate::strategy::{Strategy, ROUTE_RTO_MIN};
use crate::testbed::{Testbed, TestbedError};

/// Block of the line-rate probe.
pub const LINE_RATE_BLOCK: u64 = 4 << 20;

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
    /// Deadline of one block.
    pub read_timeout: Duration,
    /// Port buffer for `capped` (the testbed's, or a guess for real hosts).
    pub buffer_hint: u64,
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
    /// One per (layout, senders, strategy).
    pub results: Vec<Measurement>,
}

/// Runs the sweep; prints the table as results arrive.
pub fn run(spec: SweepSpec, network: Network) -> Result<SweepResult, SweepError> {
    let max_n = spec.senders.iter().copied().max().unwrap_or(0);
    if max_n == 0 || spec.layouts.is_empty() || spec.strategies.is_empty() || spec.blocks == 0 {
        return Err(SweepError::Invalid(
            "nothing to run: give senders, a layout, strategies and at least one block".into(),
        ));
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
                let ip = match &network {
                    Network::Testbed(tb) => tb.server_ip(),
                    _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
                };
                let cert = SelfSigned::generate(["localhost".to_owned(), ip.to_string()]).map_err(|e| invalid(&e))?;
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
        }
        quic_client = Some(b.build().map_err(|e| invalid(&e))?);
    }
    let server_config = server_config.build().map_err(|e| invalid(&e))?;
    let (servers, testbed, addrs) = match &network {
        Network::Testbed(tb) => {
            let set = ServerSet::start(Some(tb.servers()), tb.server_ip(), max_n, server_config)?;
            let addrs = set.addrs().to_vec();
            (Some(set), Some(tb.clone()), addrs)
        }
        Network::Loopback => {
            let set = ServerSet::start(None, IpAddr::V4(Ipv4Addr::LOCALHOST), max_n, server_config)?;
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
            let addrs = h.iter().enumerate().map(|(i, a)| (ServerId(i as u32), *a)).collect();
            (None, None, addrs)
        }
    };
    if let Some(t) = servers.as_ref().and_then(|s| s.tuning_report()) {
        if t.contains("refused") && !spec.quiet {
            eprintln!("warning: the servers' socket options were not all taken:\n{t}");
        }
    }
    let body = move || client_side(spec, testbed, addrs, quic_client);
    let out = match &network {
        Network::Testbed(tb) => tb.client().run(body)?,
        _ => body(),
    };
    drop(servers);
    out
}

fn client_side(
    spec: SweepSpec,
    testbed: Option<Arc<Testbed>>,
    addrs: Vec<(ServerId, SocketAddr)>,
    quic: Option<QuicClientConfig>,
) -> Result<SweepResult, SweepError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let configs = spec.layouts.len() * spec.senders.len() * spec.strategies.len();
    let total = configs as u64 * u64::from(spec.blocks);
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
    let base = |strategy, senders, layout| RunSpec {
        strategy,
        senders,
        layout,
        blocks: spec.blocks,
        warmup: spec.warmup,
        buffer_hint: spec.buffer_hint,
        read_timeout: spec.read_timeout,
        cc: spec.cc.clone(),
        max_time: spec.max_time,
        quic: quic.clone(),
    };
    // Line rate: one sender streaming, the better of naive and default.
    bar.set_message("line rate (1 sender, 4 MiB blocks)");
    let mut line_rate: f64 = 0.0;
    for st in [Strategy::Naive, Strategy::Default] {
        let probe = RunSpec {
            blocks: 8,
            warmup: 2,
            ..base(st, 1, Layout::Block(LINE_RATE_BLOCK))
        };
        let m = rt.block_on(measure(&addrs, &probe, |_| {}))?;
        line_rate = line_rate.max(m.goodput_mbps);
    }
    say(format!("line rate (one sender streaming): {line_rate:.1} Mbit/s"));
    bar.suspend(|| println!("{}", table_header()));
    let mut results = Vec::with_capacity(configs);
    for &layout in &spec.layouts {
        for &n in &spec.senders {
            for &st in &spec.strategies {
                bar.set_message(format!("{st} N={n} {layout}"));
                let rto_route = st == Strategy::RtoRoute;
                if let (true, Some(tb)) = (rto_route, &testbed) {
                    tb.set_route_rto_min(Some(ROUTE_RTO_MIN))?;
                }
                let before = testbed.as_ref().map(|tb| tb.qdisc_stats()).transpose()?;
                let r = rt.block_on(measure(&addrs, &base(st, n, layout), |k| bar.inc(k)));
                let after = testbed.as_ref().map(|tb| tb.qdisc_stats()).transpose()?;
                if let (true, Some(tb)) = (rto_route, &testbed) {
                    tb.set_route_rto_min(None)?;
                }
                let mut m = r?;
                m.set_line_rate(line_rate);
                m.cc = spec.cc.clone();
                if let (Some(tb), Some(b), Some(a)) = (&testbed, before, after) {
                    m.switch_drops = Some(a.since(&b).dropped);
                    m.buffer_bytes = Some(tb.config().buffer_bytes);
                    m.rate_bps = Some(tb.config().rate_bps);
                }
                let row = table_row(&m);
                bar.suspend(|| println!("{row}"));
                results.push(m);
            }
        }
    }
    bar.finish_and_clear();
    Ok(SweepResult {
        line_rate_mbps: line_rate,
        results,
    })
}
