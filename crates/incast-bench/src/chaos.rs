//! `incast-bench chaos`: concurrent reads on the testbed while faults are injected, with
//! every completed block checked byte for byte.
//!
//! Layout: `--senders` server hosts, server `i` on host `i`, one fragment each (`--sru`
//! bytes), and every fragment names the next server as its replica, so a silent or dead
//! host is covered. `--concurrency` readers share one client (the library's defaults) and
//! read back to back. The run is a sequence of phases of equal length (`--duration` split
//! over them): first `none` (the baseline), then each fault of `--faults` in order:
//!
//! - `loss-P` (P in percent, for example `loss-0.1`, `loss-1`, `loss-5`): every frame on the
//!   client's port dropped with probability P, both directions ([`Testbed::set_loss`]);
//! - `freeze-T` (`freeze-100ms`, `freeze-1s`): host [`VICTIM`]'s link goes down for T and
//!   back up, again and again (T up, at least 500 ms, between freezes): a frozen machine as
//!   the network sees it, no reset, no FIN;
//! - `freeze-deadline`: the victim stays silent for the whole phase, past every read's
//!   deadline;
//! - `kill`: the victim's server process is killed (its listener and connections closed)
//!   200 ms into the phase, mid-read, and stays dead for the phase;
//! - `restart`: the victim is killed 200 ms into the phase and started again 500 ms later,
//!   on a new port the client learns through [`Client::add_server`].
//!
//! `fault did` in the table (`attack` in the JSON) says what the fault did: frames the loss
//! rules dropped, connections held, bytes of garbage, or responses the liar sent.
//!
//! Every fault ends with its phase (links up, loss off, the victim serving), and the next
//! phase starts after a pause. Per phase: reads attempted, completed, failed (by error), the
//! corrupt blocks (must be 0: every completed block is compared with what the servers hold),
//! latency p50/p99/max against the baseline, the time of reads that moved to a replica
//! (failover), hedges, retries and kernel RTOs, and the process's resident memory and open
//! descriptors at the phase's start and end (the servers run in the same process).
//!
//! Hostile peers, against server 0 (the target) or in place of the victim:
//!
//! - `flood`: 10,000 connections opened to the target (as fast as it accepts them) and held
//!   for the phase; the server takes [`incast_rpc::ServerConfig::max_connections`] and tells
//!   the rest it is busy;
//! - `slowloris`: 2,000 connections to the target, each sending a request one byte every
//!   500 ms;
//! - `garbage`: random bytes sent to the target as fast as it takes them, over connection
//!   after connection (it closes each at the first bad header);
//! - `liar-crc`, `liar-short`, `trickle`: the victim's server replaced for the phase by one
//!   that sends the right bytes with a wrong CRC32C, ends every response after half its
//!   bytes, or sends one byte every 200 ms.
//!
//! **Soak.** `--cycles N` runs the fault list N times after the baseline (a 10-minute soak:
//! `--duration 600s --cycles 2`). Throughout, a thread samples once a second the process's
//! resident memory and open descriptors and the client runtime's live tasks ([`Sample`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use incast_core::{Policy, ServerId, Stripe};
use incast_rpc::{Client, ClientConfig, FanInError, ServerConfig};

use crate::run::Layout;
use crate::servers::ServerSet;
use crate::testbed::{host_addr, Testbed, TestbedError};

/// The host whose server freezes, dies, restarts or lies.
pub const VICTIM: usize = 1;
/// The server floods, slowloris and garbage are aimed at.
pub const TARGET: ServerId = ServerId(0);
/// When a killed server dies, into its phase.
const KILL_AFTER: Duration = Duration::from_millis(200);
/// How long a restarted server stays dead.
const DEAD_FOR: Duration = Duration::from_millis(500);
/// Pause between phases, with every fault undone.
const SETTLE: Duration = Duration::from_millis(500);
/// Shortest time a host stays up between two freezes.
const MIN_UP: Duration = Duration::from_millis(500);
/// Connections of a flood.
const FLOOD: usize = 10_000;
/// Connections of a slowloris attack.
const SLOWLORIS: usize = 2_000;
/// Time between two bytes of a slowloris connection.
const SLOWLORIS_GAP: Duration = Duration::from_millis(500);
/// Time between two bytes of a trickling liar.
pub(crate) const TRICKLE_GAP: Duration = Duration::from_millis(200);

/// A fault of one phase.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// No fault: the baseline.
    None,
    /// Random loss on the client's port, in frames per 10,000, both ways.
    Loss(u32),
    /// The victim's link down for this long, again and again.
    Freeze(Duration),
    /// The victim silent for the whole phase.
    FreezePastDeadline,
    /// The victim's server killed mid-phase.
    Kill,
    /// The victim's server killed and started again.
    Restart,
    /// 10,000 connections held against the target.
    Flood,
    /// 2,000 connections trickling requests to the target.
    Slowloris,
    /// Random bytes to the target, connection after connection.
    Garbage,
    /// The victim replaced by a server that lies.
    Liar(Lie),
}

/// How a lying server lies ([`Fault::Liar`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lie {
    /// The right bytes, a wrong CRC32C.
    Crc,
    /// `End` after half the bytes.
    Short,
    /// One byte every 200 ms.
    Trickle,
}

impl Fault {
    /// Its name in outputs and on the command line.
    pub fn name(&self) -> String {
        match self {
            Fault::None => "none".into(),
            Fault::Loss(p) => format!("loss-{}", *p as f64 / 100.0),
            Fault::Freeze(d) => format!("freeze-{}ms", d.as_millis()),
            Fault::FreezePastDeadline => "freeze-deadline".into(),
            Fault::Kill => "kill".into(),
            Fault::Restart => "restart".into(),
            Fault::Flood => "flood".into(),
            Fault::Slowloris => "slowloris".into(),
            Fault::Garbage => "garbage".into(),
            Fault::Liar(Lie::Crc) => "liar-crc".into(),
            Fault::Liar(Lie::Short) => "liar-short".into(),
            Fault::Liar(Lie::Trickle) => "trickle".into(),
        }
    }
}

impl std::str::FromStr for Fault {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!(
                "{s}: {why}; faults are loss-P (percent), freeze-T, freeze-deadline, kill, restart, flood, slowloris, \
                 garbage, liar-crc, liar-short, trickle"
            )
        };
        if let Some(p) = s.strip_prefix("loss-") {
            let pct: f64 = p.parse().map_err(|_| bad("not a percentage"))?;
            if !(0.01..=50.0).contains(&pct) {
                return Err(bad("loss must be 0.01% to 50%"));
            }
            return Ok(Fault::Loss((pct * 100.0).round() as u32));
        }
        match s {
            "none" => Ok(Fault::None),
            "freeze-deadline" => Ok(Fault::FreezePastDeadline),
            "kill" => Ok(Fault::Kill),
            "restart" => Ok(Fault::Restart),
            "flood" => Ok(Fault::Flood),
            "slowloris" => Ok(Fault::Slowloris),
            "garbage" => Ok(Fault::Garbage),
            "liar-crc" => Ok(Fault::Liar(Lie::Crc)),
            "liar-short" => Ok(Fault::Liar(Lie::Short)),
            "trickle" => Ok(Fault::Liar(Lie::Trickle)),
            _ => {
                let t = s.strip_prefix("freeze-").ok_or_else(|| bad("unknown fault"))?;
                let d = crate::units::parse_duration(t).map_err(|e| bad(&e))?;
                if d.is_zero() || d > Duration::from_secs(60) {
                    return Err(bad("a freeze lasts 1 ms to 60 s"));
                }
                Ok(Fault::Freeze(d))
            }
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Server hosts, one fragment each (at least 3: the victim's replica is another host).
    pub senders: usize,
    /// Bytes per fragment.
    pub sru: u64,
    /// Readers at once.
    pub concurrency: usize,
    /// The whole run, split evenly over the baseline and the faults.
    pub duration: Duration,
    /// Faults, in order, after the baseline.
    pub faults: Vec<Fault>,
    /// Each read's deadline.
    pub read_timeout: Duration,
    /// Times the fault list runs (after one baseline).
    pub cycles: u32,
    /// No progress lines.
    pub quiet: bool,
}

/// One sample of the process, taken each second of a run.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Sample {
    /// Seconds since the first phase started.
    pub t_s: f64,
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// Open descriptors.
    pub fds: u64,
    /// Live tasks of the client's runtime (0: a read runs in the caller's task).
    pub tasks: usize,
    /// Live tasks of the servers' runtime (every host but the victim): one per connection
    /// and its halves, and the listeners.
    pub server_tasks: usize,
}

/// The figures of one phase.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Row {
    /// The fault (`none` for the baseline).
    pub fault: String,
    /// Reads started.
    pub attempted: u32,
    /// Reads that returned a block.
    pub completed: u32,
    /// Reads that returned an error.
    pub failed: u32,
    /// Failed reads by error kind.
    pub failed_by: BTreeMap<String, u32>,
    /// The first error of each kind, in full (which servers a timed-out read waited on).
    pub first_error: BTreeMap<String, String>,
    /// Completed blocks that differ from what the servers hold (must be 0).
    pub corrupt: u32,
    /// Latency of completed reads, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Slowest completed read, ms.
    pub max_ms: f64,
    /// The baseline's p50, ms.
    pub baseline_p50_ms: f64,
    /// The baseline's p99, ms.
    pub baseline_p99_ms: f64,
    /// Completed reads that took at least one fragment from a replica.
    pub failed_over: u32,
    /// Median latency of those reads, ms (the time to fail over and finish).
    pub failover_p50_ms: Option<f64>,
    /// Slowest of them, ms.
    pub failover_max_ms: Option<f64>,
    /// Goodput of completed reads over the phase, Mbit/s.
    pub goodput_mbps: f64,
    /// `goodput_mbps` over the baseline's.
    pub goodput_of_baseline: f64,
    /// What the fault did: frames dropped (loss), connections held (flood, slowloris), bytes
    /// of garbage sent, responses the liar sent.
    pub attack: u64,
    /// Hedges issued.
    pub hedges: u64,
    /// Retries on replicas after failures.
    pub retries: u64,
    /// Kernel RTOs the servers reported.
    pub kernel_rtos: u64,
    /// Segments the servers' sockets retransmitted (TCP_INFO, sent with each response).
    pub retransmits: u64,
    /// Resident memory of the process at the phase's start and end, KiB.
    pub rss_kib: (u64, u64),
    /// Open descriptors of the process at the phase's start and end.
    pub fds: (u64, u64),
}

/// Resident memory (KiB) and open descriptors of this process.
pub fn rss_and_fds() -> (u64, u64) {
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0);
    let fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    (rss, fds)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// A short name for a read's error, for `failed_by`.
fn kind(e: &FanInError) -> String {
    match e {
        FanInError::Timeout { .. } => "timeout".into(),
        FanInError::Failed { .. } => "server failed".into(),
        FanInError::ServerRemoved { .. } => "server removed".into(),
        other => {
            let s = other.to_string();
            s.split(':').next().unwrap_or(&s).to_owned()
        }
    }
}

/// The victim's server, which a fault may kill and start again.
struct Victim {
    tb: Arc<Testbed>,
    cc: String,
    set: Mutex<Option<ServerSet>>,
}

impl Victim {
    fn start(&self) -> std::io::Result<SocketAddr> {
        let host = self.tb.hosts()[VICTIM].try_clone()?;
        let set = ServerSet::start(
            vec![(Some(host), IpAddr::V4(host_addr(VICTIM)))],
            1,
            Vec::new(),
            &self.cc,
            ServerConfig::default(),
        )?;
        let addr = set.addrs()[0].1;
        *self.set.lock().unwrap_or_else(|e| e.into_inner()) = Some(set);
        Ok(addr)
    }

    /// Stops the server: its listener and every connection close, as when its process dies.
    fn kill(&self) {
        drop(self.set.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    fn alive(&self) -> bool {
        self.set.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }
}

/// Runs `spec` on `tb` (at least `spec.senders` hosts).
pub fn run(spec: &Spec, tb: Arc<Testbed>) -> std::io::Result<(Vec<Row>, Vec<Sample>)> {
    if spec.senders < 3 || tb.hosts().len() < spec.senders {
        return Err(std::io::Error::other(format!(
            "chaos needs at least 3 senders on as many hosts ({} senders, {} hosts)",
            spec.senders,
            tb.hosts().len()
        )));
    }
    if spec.faults.iter().any(|f| matches!(f, Fault::Loss(_))) {
        // Fails now, with the package to install, rather than in the middle of the run.
        tb.set_loss(None).map_err(std::io::Error::other)?;
    }
    let cc = tb.config().cc.clone();
    // Every host but the victim in one server set; the victim alone, so it can die.
    let others: Vec<usize> = (0..spec.senders).filter(|&h| h != VICTIM).collect();
    let hosts = others
        .iter()
        .map(|&h| Ok((Some(tb.hosts()[h].try_clone()?), IpAddr::V4(host_addr(h)))))
        .collect::<std::io::Result<Vec<_>>>()?;
    let main = ServerSet::start(hosts, others.len(), Vec::new(), &cc, ServerConfig::default())?;
    let mut addrs: Vec<(ServerId, SocketAddr)> = others
        .iter()
        .zip(main.addrs())
        .map(|(&h, (_, a))| (ServerId(h as u32), *a))
        .collect();
    let victim = Arc::new(Victim {
        tb: tb.clone(),
        cc,
        set: Mutex::new(None),
    });
    addrs.push((ServerId(VICTIM as u32), victim.start()?));
    let spec2 = spec.clone();
    let tb2 = tb.clone();
    let servers_rt = main.runtime().cloned();
    let rows = tb
        .client()
        .run(move || client_side(&spec2, tb2, victim, addrs, servers_rt))??;
    drop(main);
    Ok(rows)
}

/// The stripe of read `no`: fragment `i` on server `i`, its replica on server `i + 1`.
fn stripe_of(spec: &Spec, pool: &[ServerId], no: u64) -> Stripe {
    let base = crate::run::stripe(pool, spec.senders, Layout::Sru(spec.sru), no);
    let frags = base
        .fragments()
        .iter()
        .map(|f| {
            let next = ServerId((f.server().0 + 1) % spec.senders as u32);
            f.clone().with_replicas([next])
        })
        .collect();
    Stripe::new(frags).expect("chaos stripes are valid")
}

fn client_side(
    spec: &Spec,
    tb: Arc<Testbed>,
    victim: Arc<Victim>,
    addrs: Vec<(ServerId, SocketAddr)>,
    servers_rt: Option<tokio::runtime::Handle>,
) -> std::io::Result<(Vec<Row>, Vec<Sample>)> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let cfg = ClientConfig::builder()
        .read_timeout(spec.read_timeout)
        .build()
        .map_err(std::io::Error::other)?;
    let client = Arc::new(Client::with_config(addrs, cfg));
    let policy = Policy::default();
    let pool: Vec<ServerId> = (0..spec.senders as u32).map(ServerId).collect();
    let target = client
        .servers()
        .into_iter()
        .find(|(id, _)| *id == TARGET)
        .map(|(_, a)| a)
        .ok_or_else(|| std::io::Error::other("no target server"))?;
    let phases: Vec<Fault> = std::iter::once(Fault::None)
        .chain((0..spec.cycles.max(1)).flat_map(|_| spec.faults.iter().copied()))
        .collect();
    let each = spec.duration / phases.len() as u32;
    // Warm up: connections, and the port's rate and RTT.
    for no in 0..5 {
        let _ = rt.block_on(client.fan_in_read(&stripe_of(spec, &pool, no), &policy));
    }
    let mut rows: Vec<Row> = Vec::new();
    let mut next_no = 5u64;
    // The sampler: once a second until the phases are over.
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (done, handle) = (done.clone(), rt.handle().clone());
        std::thread::Builder::new()
            .name("chaos-sampler".into())
            .spawn(move || {
                let t0 = Instant::now();
                let mut samples = Vec::new();
                let mut next = Duration::ZERO;
                while !done.load(Ordering::Relaxed) {
                    if t0.elapsed() >= next {
                        let (rss_kib, fds) = rss_and_fds();
                        samples.push(Sample {
                            t_s: t0.elapsed().as_secs_f64(),
                            rss_kib,
                            fds,
                            tasks: handle.metrics().num_alive_tasks(),
                            server_tasks: servers_rt.as_ref().map_or(0, |h| h.metrics().num_alive_tasks()),
                        });
                        next += Duration::from_secs(1);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                samples
            })?
    };
    for fault in phases {
        if !spec.quiet {
            eprintln!("chaos: {} for {:?}", fault.name(), each);
        }
        let before = rss_and_fds();
        let stop = Arc::new(AtomicBool::new(false));
        let injector = {
            let env = Env {
                tb: tb.clone(),
                victim: victim.clone(),
                client: client.clone(),
                target,
            };
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("chaos-fault".into())
                .spawn(move || inject(fault, each, &env, &stop))?
        };
        let mut row = rt.block_on(phase(spec, &client, &policy, &pool, each, &mut next_no));
        stop.store(true, Ordering::Relaxed);
        let undone = injector
            .join()
            .map_err(|_| std::io::Error::other("the fault thread panicked"))?;
        // Undo whatever the fault left, even if injecting it failed half-way.
        tb.set_host_link(VICTIM, true).map_err(std::io::Error::other)?;
        if matches!(fault, Fault::Loss(_)) {
            // The frames the loss rules dropped: evidence the loss was on the path.
            row.attack = tb.set_loss(None).map_err(std::io::Error::other)?;
        }
        if !victim.alive() {
            let addr = victim.start()?;
            client.add_server(ServerId(VICTIM as u32), addr);
        }
        let attack = undone.map_err(std::io::Error::other)?;
        if !matches!(fault, Fault::Loss(_)) {
            row.attack = attack;
        }
        let after = rss_and_fds();
        row.fault = fault.name();
        row.rss_kib = (before.0, after.0);
        row.fds = (before.1, after.1);
        let (p50, p99, goodput) = rows.first().map_or((row.p50_ms, row.p99_ms, row.goodput_mbps), |b| {
            (b.p50_ms, b.p99_ms, b.goodput_mbps)
        });
        row.baseline_p50_ms = p50;
        row.baseline_p99_ms = p99;
        row.goodput_of_baseline = row.goodput_mbps / goodput.max(f64::MIN_POSITIVE);
        if !spec.quiet {
            eprintln!(
                "chaos: {}: {} of {} completed, {} corrupt, p99 {:.1} ms",
                row.fault, row.completed, row.attempted, row.corrupt, row.p99_ms
            );
        }
        rows.push(row);
        std::thread::sleep(SETTLE);
    }
    done.store(true, Ordering::Relaxed);
    let samples = sampler
        .join()
        .map_err(|_| std::io::Error::other("the sampler thread panicked"))?;
    Ok((rows, samples))
}

/// What a fault acts on.
struct Env {
    tb: Arc<Testbed>,
    victim: Arc<Victim>,
    client: Arc<Client>,
    /// Server [`TARGET`]'s address, for the floods.
    target: SocketAddr,
}

/// Applies `fault` for `phase` (or until `stop`); returns when the phase is over, with how
/// much the attack did ([`Row::attack`]). Runs on a thread of the client's namespace.
fn inject(fault: Fault, phase: Duration, env: &Env, stop: &AtomicBool) -> Result<u64, TestbedError> {
    let (tb, victim, client) = (&env.tb, &env.victim, &env.client);
    let mut attack = 0u64;
    let start = Instant::now();
    let over = || stop.load(Ordering::Relaxed) || start.elapsed() >= phase;
    let sleep_until = |t: Duration| {
        while !over() && start.elapsed() < t {
            std::thread::sleep(Duration::from_millis(5).min(t.saturating_sub(start.elapsed())));
        }
    };
    match fault {
        Fault::None => {}
        Fault::Loss(p) => {
            tb.set_loss(Some(p))?;
        }
        Fault::FreezePastDeadline => tb.set_host_link(VICTIM, false)?,
        Fault::Freeze(d) => {
            let mut at = Duration::from_millis(100);
            while !over() {
                sleep_until(at);
                if over() {
                    break;
                }
                tb.set_host_link(VICTIM, false)?;
                sleep_until(at + d);
                tb.set_host_link(VICTIM, true)?;
                at += d + d.max(MIN_UP);
            }
        }
        Fault::Kill => {
            sleep_until(KILL_AFTER);
            victim.kill();
        }
        Fault::Restart => {
            sleep_until(KILL_AFTER);
            victim.kill();
            sleep_until(KILL_AFTER + DEAD_FOR);
            let addr = victim.start().map_err(TestbedError::Io)?;
            client.add_server(ServerId(VICTIM as u32), addr);
        }
        Fault::Flood => {
            let mut held = Vec::with_capacity(FLOOD);
            while !over() && held.len() < FLOOD {
                match std::net::TcpStream::connect_timeout(&env.target, Duration::from_millis(500)) {
                    Ok(c) => held.push(c),
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
            attack = held.len() as u64;
            sleep_until(phase);
        }
        Fault::Slowloris => {
            use std::io::Write as _;
            let mut conns = Vec::with_capacity(SLOWLORIS);
            while !over() && conns.len() < SLOWLORIS {
                if let Ok(c) = std::net::TcpStream::connect_timeout(&env.target, Duration::from_millis(500)) {
                    if c.set_nonblocking(true).is_ok() {
                        conns.push(c);
                    }
                }
            }
            attack = conns.len() as u64;
            // A valid request, one byte at a time on every connection.
            let mut req = Vec::new();
            incast_rpc::wire::encode_request(&mut req, 1, "b0-f0", 0, 4096, None);
            let mut at = Duration::ZERO;
            for i in 0.. {
                if over() {
                    break;
                }
                for c in &mut conns {
                    let _ = c.write(&req[i % req.len()..][..1]);
                }
                at += SLOWLORIS_GAP;
                sleep_until(at);
            }
        }
        Fault::Garbage => {
            use std::io::Write as _;
            let mut rng = start.elapsed().as_nanos() as u64 | 1;
            let mut buf = vec![0u8; 64 << 10];
            while !over() {
                let Ok(mut c) = std::net::TcpStream::connect_timeout(&env.target, Duration::from_millis(500)) else {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                };
                let _ = c.set_write_timeout(Some(Duration::from_millis(100)));
                for b in buf.chunks_mut(8) {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    b.copy_from_slice(&rng.to_le_bytes()[..b.len()]);
                }
                // The server closes the connection at the first bad header; then a new one.
                while !over() {
                    match c.write(&buf) {
                        Ok(n) if n > 0 => attack += n as u64,
                        _ => break,
                    }
                }
            }
        }
        Fault::Liar(lie) => {
            victim.kill();
            let host = tb.hosts()[VICTIM].try_clone()?;
            let liar = crate::liar::Liar::start(host, IpAddr::V4(host_addr(VICTIM)), lie)?;
            client.add_server(ServerId(VICTIM as u32), liar.addr());
            sleep_until(phase);
            attack = liar.responses();
            // Dropping it stops it; the phase's end restarts the real server.
        }
    }
    Ok(attack)
}

/// Reads back to back with `spec.concurrency` readers for `len`.
async fn phase(
    spec: &Spec,
    client: &Client,
    policy: &Policy,
    pool: &[ServerId],
    len: Duration,
    next_no: &mut u64,
) -> Row {
    let start = Instant::now();
    let end = start + len;
    let next = std::cell::Cell::new(*next_no);
    let row = std::cell::RefCell::new(Row::default());
    let lat = std::cell::RefCell::new(Vec::new());
    let failover = std::cell::RefCell::new(Vec::new());
    let bytes = std::cell::Cell::new(0u64);
    futures_util::future::join_all((0..spec.concurrency).map(|_| async {
        while Instant::now() < end {
            let no = next.get();
            next.set(no + 1);
            let stripe = stripe_of(spec, pool, no);
            let t = Instant::now();
            let result = client.fan_in_read(&stripe, policy).await;
            let took = t.elapsed().as_secs_f64() * 1e3;
            let mut r = row.borrow_mut();
            r.attempted += 1;
            match result {
                Ok(out) => {
                    r.completed += 1;
                    if crate::pattern::verify(&stripe, &out.block).is_err() {
                        r.corrupt += 1;
                    }
                    bytes.set(bytes.get() + out.block.len() as u64);
                    lat.borrow_mut().push(took);
                    r.hedges += out.report.stats.hedges;
                    r.retries += out.report.stats.retries;
                    // Late ones too: totals, whichever read they belong to.
                    let (late_rtos, late_retransmits) = out.report.late_totals();
                    r.kernel_rtos += out.report.kernel_rtos + late_rtos;
                    r.retransmits += out.report.retransmits + late_retransmits;
                    let moved = out
                        .report
                        .fragments
                        .iter()
                        .zip(stripe.fragments())
                        .any(|(fr, f)| fr.server.is_some_and(|s| s != f.server()));
                    if moved {
                        r.failed_over += 1;
                        failover.borrow_mut().push(took);
                    }
                }
                Err(e) => {
                    r.failed += 1;
                    *r.failed_by.entry(kind(&e)).or_default() += 1;
                    r.first_error.entry(kind(&e)).or_insert_with(|| e.to_string());
                }
            }
        }
    }))
    .await;
    *next_no = next.get();
    let mut row = row.into_inner();
    let mut lat = lat.into_inner();
    lat.sort_by(f64::total_cmp);
    row.p50_ms = percentile(&lat, 0.5);
    row.p99_ms = percentile(&lat, 0.99);
    row.max_ms = lat.last().copied().unwrap_or(f64::NAN);
    let mut fo = failover.into_inner();
    fo.sort_by(f64::total_cmp);
    row.failover_p50_ms = (!fo.is_empty()).then(|| percentile(&fo, 0.5));
    row.failover_max_ms = fo.last().copied();
    row.goodput_mbps = bytes.get() as f64 * 8.0 / start.elapsed().as_secs_f64() / 1e6;
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_name_themselves() {
        for (s, f) in [
            ("loss-0.1", Fault::Loss(10)),
            ("loss-1", Fault::Loss(100)),
            ("loss-5", Fault::Loss(500)),
            ("freeze-100ms", Fault::Freeze(Duration::from_millis(100))),
            ("freeze-1s", Fault::Freeze(Duration::from_secs(1))),
            ("freeze-deadline", Fault::FreezePastDeadline),
            ("kill", Fault::Kill),
            ("restart", Fault::Restart),
            ("flood", Fault::Flood),
            ("slowloris", Fault::Slowloris),
            ("garbage", Fault::Garbage),
            ("liar-crc", Fault::Liar(Lie::Crc)),
            ("liar-short", Fault::Liar(Lie::Short)),
            ("trickle", Fault::Liar(Lie::Trickle)),
        ] {
            assert_eq!(s.parse::<Fault>(), Ok(f), "{s}");
            if !matches!(f, Fault::Freeze(_)) {
                assert_eq!(f.name(), s);
            }
        }
        assert_eq!(Fault::Loss(10).name(), "loss-0.1");
        assert_eq!(Fault::Freeze(Duration::from_secs(1)).name(), "freeze-1000ms");
        for bad in ["loss-0", "loss-90", "loss-x", "freeze-0s", "freeze-2h", "melt"] {
            assert!(bad.parse::<Fault>().is_err(), "{bad}");
        }
    }
}
