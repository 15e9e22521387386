//! `incast-bench`: reproduce TCP incast and measure how fan-in read strategies avoid it.
//!
//! `serve` runs pattern servers on storage hosts; `read` and `sweep` measure strategies side
//! by side against them, or against an emulated shallow-buffered switch built on this
//! machine (`--testbed`, Linux, root or `unshare -rn`); `testbed up|down|status` manages that
//! switch for other tools; `demo` runs the whole comparison with one command; `model` prints
//! chen-2012's predicted collapse.
//!
//! Run: `cargo run --release -p incast-bench -- demo`
#![deny(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use incast_core::model::{self, ModelInput};

/// `println!` that ends the program quietly when stdout is a closed pipe
/// (`incast-bench testbed status | head`), where `println!` would panic.
macro_rules! outln {
    () => { outln!("") };
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($t)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}

mod chaos;
mod cpu;
mod erasure;
mod fuzz;
mod liar;
mod load;
mod netns;
mod offload;
mod output;
mod pattern;
mod plot;
mod reference;
mod run;
mod servers;
mod strategy;
mod sweep;
mod testbed;
mod units;

use run::Layout;
use strategy::Strategy;
use sweep::{Network, SweepSpec};
use testbed::{Testbed, TestbedConfig, TestbedError};
use units::{parse_bytes, parse_duration, parse_rate};

#[derive(Parser, Debug)]
#[command(
    name = "incast-bench",
    version,
    about = "Reproduces TCP incast and measures fan-in read strategies side by side",
    after_help = "Environment:\n  INCAST_LOG=debug   print the library's telemetry (hedges, resets, budget changes, read ends) to stderr"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve synthetic (pattern) objects or files, on every storage host.
    #[command(after_help = "Examples:\n  \
        incast-bench serve --listen 0.0.0.0:7000\n  \
        incast-bench serve --listen 198.18.1.1:7000 --count 64        # 64 servers, ports 7000-7063\n  \
        incast-bench serve --listen [::]:7000 --store /srv/blocks --cc cubic
  \
        incast-bench serve --listen 0.0.0.0:7000 --quic-cert cert.pem --quic-key key.pem   # TCP and QUIC")]
    Serve(ServeArgs),
    /// Read blocks from running servers with one strategy.
    #[command(after_help = "Examples:\n  \
        incast-bench read --servers 10.0.0.1:7000,10.0.0.2:7000 --sru 256KiB --blocks 100 --strategy default\n  \
        incast-bench read --servers 10.0.0.1:7000,10.0.0.2:7000 --block 1MiB --strategy naive --json out.jsonl
  \
        incast-bench read --servers 10.0.0.1:7000,10.0.0.2:7000 --block 1MiB --strategy quic --quic-ca ca.pem")]
    Read(ReadArgs),
    /// Many configurations and strategies side by side, on the testbed, loopback or hosts.
    #[command(after_help = "Examples:\n  \
        incast-bench sweep --testbed --senders 1,2,4,8,16,32,64 --sru 32KiB --strategies naive,default\n  \
        incast-bench sweep --testbed --senders 8,16,32,64,128,256 --sru 32KiB,256KiB --block 1MiB \\\n      \
        --strategies naive,capped,scheduled,chunked,hedged,default,rto-route --blocks 100 \\\n      \
        --json sweep.jsonl --csv sweep.csv --plot sweep.svg\n  \
        incast-bench sweep --servers 10.0.0.1:7000,10.0.0.2:7000 --senders 1,2 --block 1MiB\n  \
        incast-bench sweep --loopback --senders 1,16,64 --block 1MiB --quiet
  \
        incast-bench sweep --testbed --senders 8,16,32,64,128,256 --sru 256KiB --strategies naive,default,quic,fallback")]
    Sweep(SweepArgs),
    /// The emulated switch on its own: pinned namespaces for other tools.
    #[command(after_help = "Examples:\n  \
        incast-bench testbed up --rate 1gbit --buffer 32KiB --cc cubic --hosts 16\n  \
        ip netns exec incast-host0 incast-bench serve --listen 198.18.1.1:7000 --count 4\n  \
        ip netns exec incast-client incast-bench read --servers 198.18.1.1:7000 --block 1MiB\n  \
        incast-bench testbed status\n  \
        incast-bench testbed down")]
    Testbed {
        #[command(subcommand)]
        action: TestbedAction,
    },
    /// The whole comparison in one command: naive against the library's default on the testbed.
    #[command(after_help = "Examples:\n  \
        incast-bench demo\n  \
        incast-bench demo --plot demo.svg --json demo.jsonl")]
    Demo(DemoArgs),
    /// Predicted onset and goodput of synchronized reads (chen-2012, equations 1-4), and the
    /// policy the model recommends for the port.
    #[command(after_help = "Examples:\n  \
        incast-bench model\n  \
        incast-bench model --rate 10gbit --rtt 20us --buffer 256KiB --sru 256KiB\n  \
        incast-bench model --json")]
    Model(ModelArgs),
    /// k-of-n erasure-coded reads on the testbed with one host frozen or dead, against
    /// reading the k data shards and waiting.
    #[command(after_help = "Examples:\n  \
        incast-bench erasure\n  \
        incast-bench erasure --codes 6+3,10+4 --shard 1MiB --reads 40 --freeze 500ms --json ec.jsonl")]
    Erasure(ErasureArgs),
    /// Concurrent reads on the testbed while faults are injected (loss, a frozen, killed or
    /// restarted host), every completed block checked byte for byte; one JSON line per fault.
    #[command(after_help = "Examples:\n  \
        incast-bench chaos\n  \
        incast-bench chaos --duration 120s --faults loss-0.1,loss-1,loss-5,freeze-100ms,freeze-1s,freeze-deadline,kill,restart --json chaos.jsonl\n  \
        incast-bench chaos --duration 600s --cycles 2 --samples soak.jsonl --json soak-faults.jsonl")]
    Chaos(ChaosArgs),
    /// Random and structure-aware mutated frames against the client's decoder and a live
    /// server: panics, hangs and memory (not part of CI: a million frames take a while).
    #[command(after_help = "Examples:\n  \
        incast-bench fuzz\n  \
        incast-bench fuzz --frames 5000000 --seed 7 --json fuzz.json")]
    Fuzz(FuzzArgs),
    /// The CPU load of `sweep --cpu-load` (a child process of the sweep; not for direct use).
    #[command(hide = true)]
    Spin(SpinArgs),
}

#[derive(clap::Args, Debug)]
struct SpinArgs {
    /// Spinning threads.
    #[arg(long, value_parser = parse_cpu_load)]
    threads: usize,
    /// Stop after this long (also when standard input closes).
    #[arg(long, value_parser = parse_duration)]
    max_time: Duration,
}

/// `--cpu-load` and `spin --threads`: 0 to [`load::MAX_CPU_LOAD`] (0 is refused where
/// threads must spin).
fn parse_cpu_load(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("`{s}`: {e}"))?;
    if n > load::MAX_CPU_LOAD {
        return Err(format!("`{s}`: at most {} spinning threads", load::MAX_CPU_LOAD));
    }
    Ok(n)
}

#[derive(clap::Args, Debug)]
struct FuzzArgs {
    /// Frames, through the decoder and again against the server.
    #[arg(long, default_value_t = 1_000_000)]
    frames: u64,
    /// The generator's seed (a run repeats exactly with the same seed).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the report here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

fn run_fuzz(a: &FuzzArgs) -> Result<(), CliError> {
    if a.frames == 0 {
        return Err(std::io::Error::other("--frames must be 1 or more").into());
    }
    let r = fuzz::run(a.frames, a.seed, a.quiet)?;
    outln!(
        "incast-bench fuzz: {} frames, seed {}\n  decoder: {} decoded, {} incomplete, {} refused, {} panics, {:.1} s\n  \
         server: {} connections of {} frames, {} frames read by the server, {} connections closed for a protocol violation, {} answered, {} hangs, {:.1} s; a real read afterwards: {}\n  \
         panics in the process: {}; resident memory {} -> {} -> {} MiB",
        r.frames,
        r.seed,
        r.decoded,
        r.incomplete,
        r.refused,
        r.decoder_panics,
        r.decoder_s,
        r.connections,
        fuzz::BATCH,
        r.reached,
        r.protocol_errors,
        r.answered,
        r.hangs,
        r.server_s,
        if r.read_after_ok { "byte-exact" } else { "FAILED" },
        r.panics,
        r.rss_kib.0 >> 10,
        r.rss_kib.1 >> 10,
        r.rss_kib.2 >> 10
    );
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string(&r).map_err(std::io::Error::other)? + "\n")?;
        eprintln!("wrote {}", p.display());
    }
    if r.panics + r.decoder_panics > 0 || r.hangs > 0 || !r.read_after_ok {
        return Err(std::io::Error::other("fuzzing found a panic, a hang or a server that stopped serving").into());
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
struct ChaosArgs {
    /// The whole run, split evenly over the baseline and the faults.
    #[arg(long, default_value = "90s", value_parser = parse_duration)]
    duration: Duration,
    /// Faults after the baseline, in order: loss-P (percent of frames, both ways), freeze-T,
    /// freeze-deadline, kill, restart, flood, slowloris, garbage, liar-crc, liar-short, trickle.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "loss-0.1,loss-1,loss-5,freeze-100ms,freeze-1s,freeze-deadline,kill,restart,flood,slowloris,garbage,liar-crc,liar-short,trickle"
    )]
    faults: Vec<chaos::Fault>,
    /// Server hosts, one fragment each (every fragment's replica is the next host).
    #[arg(long, default_value_t = 16)]
    senders: usize,
    /// Bytes per fragment.
    #[arg(long, default_value = "64KiB", value_parser = parse_bytes)]
    sru: u64,
    /// Readers at once, sharing one client.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Each read's deadline.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    read_timeout: Duration,
    /// Times the fault list runs after the baseline (a soak: `--duration 600s --cycles 2`).
    #[arg(long, default_value_t = 1)]
    cycles: u32,
    /// Write one JSON line per fault here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the once-a-second samples (resident memory, descriptors, live tasks) here, one
    /// JSON line each.
    #[arg(long)]
    samples: Option<PathBuf>,
    /// Plot the samples (resident memory, descriptors, live tasks over time, with the fault
    /// phases marked) to this file, `.svg` or `.png`.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    link: LinkArgs,
}

/// The soak's figure: resident memory, descriptors and tasks over time, phases marked.
fn soak_scene(rows: &[chaos::Row], samples: &[chaos::Sample], duration: Duration) -> plot::Scene {
    let series = |name: &str, f: &dyn Fn(&chaos::Sample) -> f64| {
        (
            name.to_owned(),
            samples.iter().map(|s| (s.t_s, f(s))).collect::<Vec<_>>(),
        )
    };
    let panels = [
        plot::Panel {
            label: "resident memory".into(),
            y_label: "MiB".into(),
            series: vec![series("RSS (MiB)", &|s| s.rss_kib as f64 / 1024.0)],
        },
        plot::Panel {
            label: "open descriptors".into(),
            y_label: "descriptors".into(),
            series: vec![series("descriptors", &|s| s.fds as f64)],
        },
        plot::Panel {
            label: "live tokio tasks".into(),
            y_label: "tasks".into(),
            series: vec![
                series("client tasks", &|s| s.tasks as f64),
                series("server tasks", &|s| s.server_tasks as f64),
            ],
        },
    ];
    // Phases split the run evenly (see `chaos::run`).
    let phase = duration.as_secs_f64() / rows.len().max(1) as f64;
    let marks: Vec<(f64, String)> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (i as f64 * phase, r.fault.clone()))
        .collect();
    plot::timeline(&panels, &marks, "incast-bench chaos: the process over the run")
}

fn run_chaos(a: &ChaosArgs) -> Result<(), CliError> {
    if let Some(p) = &a.plot {
        plot::check_format(p)?;
    }
    if a.senders < 3 || a.concurrency == 0 || a.duration < Duration::from_secs(1) {
        return Err(std::io::Error::other(
            "chaos needs --senders 3 or more, --concurrency 1 or more and --duration 1s or more",
        )
        .into());
    }
    let config = a.link.testbed(a.senders);
    if !a.quiet {
        eprintln!("building the testbed: {config}");
    }
    let tb = Arc::new(Testbed::up(config.clone())?);
    let spec = chaos::Spec {
        senders: a.senders,
        sru: a.sru,
        concurrency: a.concurrency,
        duration: a.duration,
        faults: a.faults.clone(),
        read_timeout: a.read_timeout,
        cycles: a.cycles,
        quiet: a.quiet,
    };
    let (rows, samples) = chaos::run(&spec, tb)?;
    outln!(
        "incast-bench chaos on the testbed: {config}; {} senders x {} KiB, {} readers, host {} is the victim, every fragment has a replica",
        a.senders,
        a.sru >> 10,
        a.concurrency,
        chaos::VICTIM
    );
    outln!(
        "{:<16} {:>6} {:>6} {:>6} {:>7} {:>8} {:>8} {:>8} {:>9} {:>7} {:>7} {:>6} {:>11} {:>9} {:>12}  failed by",
        "fault",
        "reads",
        "done",
        "failed",
        "corrupt",
        "p50 ms",
        "p99 ms",
        "base p99",
        "failover",
        "hedges",
        "retries",
        "RTOs",
        "RSS MiB",
        "fds",
        "fault did"
    );
    for r in &rows {
        outln!(
            "{:<16} {:>6} {:>6} {:>6} {:>7} {:>8.1} {:>8.1} {:>8.1} {:>9} {:>7} {:>7} {:>6} {:>11} {:>9} {:>12}  {}",
            r.fault,
            r.attempted,
            r.completed,
            r.failed,
            r.corrupt,
            r.p50_ms,
            r.p99_ms,
            r.baseline_p99_ms,
            r.failover_p50_ms.map_or("-".into(), |v| format!("{v:.1}")),
            r.hedges,
            r.retries,
            r.kernel_rtos,
            format!("{}->{}", r.rss_kib.0 >> 10, r.rss_kib.1 >> 10),
            format!("{}->{}", r.fds.0, r.fds.1),
            r.attack,
            r.failed_by
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(p) = &a.json {
        write_json_lines(p, &rows)?;
    }
    if let (Some(first), Some(last)) = (samples.first(), samples.last()) {
        let max = |f: fn(&chaos::Sample) -> u64| samples.iter().map(f).max().unwrap_or(0);
        outln!(
            "process over {:.0} s ({} samples): RSS {} -> {} MiB (max {}), descriptors {} -> {} (max {}), client tasks {} -> {} (max {}), server tasks {} -> {} (max {})",
            last.t_s,
            samples.len(),
            first.rss_kib >> 10,
            last.rss_kib >> 10,
            max(|s| s.rss_kib) >> 10,
            first.fds,
            last.fds,
            max(|s| s.fds),
            first.tasks,
            last.tasks,
            max(|s| s.tasks as u64),
            first.server_tasks,
            last.server_tasks,
            max(|s| s.server_tasks as u64)
        );
    }
    if let Some(p) = &a.samples {
        write_json_lines(p, &samples)?;
    }
    if let Some(p) = &a.plot {
        plot::write_scene(p, &soak_scene(&rows, &samples, a.duration))?;
    }
    let corrupt: u32 = rows.iter().map(|r| r.corrupt).sum();
    if corrupt > 0 {
        return Err(std::io::Error::other(format!(
            "{corrupt} completed blocks differed from what the servers hold"
        ))
        .into());
    }
    if rows.first().is_some_and(|r| r.completed == 0) {
        return Err(std::io::Error::other("no read completed without faults").into());
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
struct ErasureArgs {
    /// Codes, as k+m (k data shards, m parity shards; shard i on host i).
    #[arg(long, value_delimiter = ',', default_value = "6+3,10+4", value_parser = parse_code)]
    codes: Vec<(usize, usize)>,
    /// Bytes per shard (the block is k shards).
    #[arg(long, default_value = "1MiB", value_parser = parse_bytes)]
    shard: u64,
    /// Reads per code, condition and strategy.
    #[arg(long, default_value_t = 30)]
    reads: u32,
    /// How long a frozen host stays silent.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    freeze: Duration,
    /// Each read's deadline (a data-only read with a dead host fails after it).
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    read_timeout: Duration,
    /// Write one JSON line per row here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    link: LinkArgs,
}

/// `--codes`: `k+m`.
fn parse_code(s: &str) -> Result<(usize, usize), String> {
    let (k, m) = s
        .split_once('+')
        .ok_or_else(|| format!("{s}: give a code as k+m, for example 6+3"))?;
    let k: usize = k.trim().parse().map_err(|e| format!("{s}: k: {e}"))?;
    let m: usize = m.trim().parse().map_err(|e| format!("{s}: m: {e}"))?;
    if k == 0 || m == 0 || k + m > 64 {
        return Err(format!("{s}: need k >= 1, m >= 1 and k + m <= 64 (one host per shard)"));
    }
    Ok((k, m))
}

/// Writes one JSON line per item to `path`, and says so.
fn write_json_lines<T: serde::Serialize>(path: &std::path::Path, items: &[T]) -> Result<(), CliError> {
    let mut out = String::new();
    for item in items {
        out.push_str(&serde_json::to_string(item).map_err(std::io::Error::other)?);
        out.push('\n');
    }
    std::fs::write(path, out)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn run_erasure(a: &ErasureArgs) -> Result<(), CliError> {
    let hosts = a.codes.iter().map(|(k, m)| k + m).max().unwrap_or(1);
    let config = a.link.testbed(hosts);
    if !a.quiet {
        eprintln!("building the testbed: {config}");
    }
    let tb = Arc::new(Testbed::up(config.clone())?);
    let spec = erasure::Spec {
        codes: a.codes.clone(),
        shard: a.shard,
        reads: a.reads,
        freeze: a.freeze,
        read_timeout: a.read_timeout,
        quiet: a.quiet,
    };
    let rows = erasure::run(&spec, tb)?;
    outln!(
        "incast-bench erasure on the testbed: {config}; shard {} KiB, {} reads per row, host {} frozen for {:?} or dead",
        a.shard >> 10,
        a.reads,
        erasure::FAULT_HOST,
        a.freeze
    );
    outln!(
        "{:<6} {:<7} {:<10} {:>7} {:>9} {:>9} {:>9} {:>10} {:>7} {:>14}",
        "code",
        "fault",
        "strategy",
        "failed",
        "p50 ms",
        "p99 ms",
        "max ms",
        "MiB read",
        "parity",
        "decode ms/MiB"
    );
    for r in &rows {
        outln!(
            "{:<6} {:<7} {:<10} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>10.2} {:>7.2} {:>14.3}",
            r.code,
            r.fault,
            r.strategy,
            r.failed,
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            r.bytes_read / (1u64 << 20) as f64,
            r.parity_requested,
            r.decode_ms_per_mib
        );
    }
    if let Some(p) = &a.json {
        write_json_lines(p, &rows)?;
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// Address of the first server.
    #[arg(long)]
    listen: SocketAddr,
    /// `mem` for synthetic objects (any key, content checked by read/sweep), or a directory
    /// whose files are the objects (keys are relative paths).
    #[arg(long, default_value = "mem")]
    store: String,
    /// Servers to start, on consecutive ports from --listen.
    #[arg(long, default_value_t = 1)]
    count: u16,
    /// Congestion control set on every server socket.
    #[arg(long, default_value = "cubic")]
    cc: String,
    /// Stop after this long (default: run until killed).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Also serve QUIC (UDP, same port) with this certificate chain (PEM); needs --quic-key.
    #[arg(long, requires = "quic_key")]
    quic_cert: Option<PathBuf>,
    /// Private key (PEM) of --quic-cert.
    #[arg(long, requires = "quic_cert")]
    quic_key: Option<PathBuf>,
    /// Most datagrams per UDP GSO send (1 = no GSO, 10 = quinn's limit).
    #[arg(long, default_value_t = incast_rpc::quic::DEFAULT_MAX_GSO_SEGMENTS)]
    quic_gso: usize,
}

#[derive(clap::Args, Debug, Clone)]
struct Common {
    /// Fixed server request unit(s): each sender sends this many bytes; comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_bytes)]
    sru: Vec<u64>,
    /// Fixed block size(s), split over the senders; comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_bytes)]
    block: Vec<u64>,
    /// Measured blocks per configuration.
    #[arg(long, default_value_t = 100)]
    blocks: u32,
    /// Warm-up blocks per configuration (not measured).
    #[arg(long, default_value_t = 5)]
    warmup: u32,
    /// Stop a configuration after this long even if fewer blocks were read.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    max_time: Duration,
    /// Keep a configuration reading past --blocks until it has measured this long (never
    /// past --max-time): a fast path reads 100 small blocks in milliseconds, too short to
    /// give a rate that one scheduling hiccup does not swing.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    min_time: Duration,
    /// Deadline of one block.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    read_timeout: Duration,
    /// Servers on hosts, `quic` and `fallback` strategies: PEM file of the CA that issued the
    /// servers' certificates (`serve --quic-cert`). Servers started by this process get a
    /// certificate made for the run instead.
    #[arg(long)]
    quic_ca: Option<PathBuf>,
    /// Servers on hosts: the name their certificates carry (default: their IP addresses).
    #[arg(long)]
    quic_server_name: Option<String>,
    /// Servers started here: most datagrams per UDP GSO send (1 = no GSO, 10 = quinn's limit).
    #[arg(long, default_value_t = incast_rpc::quic::DEFAULT_MAX_GSO_SEGMENTS)]
    quic_gso: usize,
    /// Write JSON lines (a header object, then one object per result).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write CSV.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write a plot (.svg or .png): goodput against senders, or with several --load values
    /// the mean latency against the offered load (a panel per kind of read, log scale).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Reads in flight at once through one shared client (each on its own stripe);
    /// comma-separated. The `blocking` reference client runs at 1 only.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    concurrency: Vec<usize>,
    /// Long-lived bulk flows to the client through the same port, for the whole of every
    /// configuration (testbed or loopback). On the testbed each comes from a host of its own,
    /// added to the server hosts, so the flows meet the reads only at the client's port.
    #[arg(long, default_value_t = 0)]
    background: usize,
    /// Start the concurrent reads in batches of `--concurrency` that begin together (the
    /// next batch once this one ended), as a partition-aggregate query does, instead of
    /// each reader starting its next read when its last one ends.
    #[arg(long)]
    batch: bool,
    /// Mixed reads, as SENDERSxSIZE (e.g. 16x4KiB): every other concurrent reader reads
    /// stripes of that many fragments of that size instead of the layout's, as small
    /// lookups beside large block reads. Each row adds the mixed reads' latency against
    /// their own ideal and the layout's reads' beside it. Needs --concurrency 2 or more.
    #[arg(long)]
    mix: Option<run::Mix>,
    /// Open loop at these offered loads, shares of the line rate measured in the same run,
    /// comma-separated (e.g. 0.7, or 0.2,0.5,0.8 for a load curve; each load a
    /// configuration of its own): the measured reads arrive as a seeded Poisson process,
    /// the same arrival times for every strategy of a round, at most --concurrency of them
    /// in flight (a read arriving when they are waits for a place, in its latency). Every
    /// other read by number reads the --mix shape if given. Not with --batch.
    #[arg(long, value_delimiter = ',')]
    load: Vec<f64>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(clap::Args, Debug)]
struct ReadArgs {
    /// Server addresses (`incast-bench serve --store mem`), comma-separated; all are senders.
    #[arg(long, value_delimiter = ',', required = true)]
    servers: Vec<SocketAddr>,
    /// Strategy.
    #[arg(long, default_value = "default")]
    strategy: Strategy,
    /// Port buffer in front of the client, used by `capped` to size windows.
    #[arg(long, default_value = "32KiB", value_parser = parse_bytes)]
    buffer: u64,
    /// Congestion control label for the outputs (set it on the servers with `serve --cc`).
    #[arg(long, default_value = "cubic")]
    cc: String,
    #[command(flatten)]
    common: Common,
}

#[derive(clap::Args, Debug)]
struct SweepArgs {
    /// Sender counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
    senders: Vec<usize>,
    /// Strategies, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "naive,default")]
    strategies: Vec<Strategy>,
    /// Build the emulated switch and run there (Linux, root or `unshare -rn`).
    #[arg(long, conflicts_with_all = ["servers", "loopback"])]
    testbed: bool,
    /// Start servers on loopback (no shallow buffer, so no incast: a smoke test).
    #[arg(long, conflicts_with = "servers")]
    loopback: bool,
    /// Running servers (`incast-bench serve --store mem`), comma-separated.
    #[arg(long, value_delimiter = ',')]
    servers: Vec<SocketAddr>,
    /// Run each configuration's strategies this many times, in alternating order (A B, then
    /// B A), each round with its own warm-up and an equal share of --blocks, --min-time and
    /// --max-time, so that a slow second of the machine lands on every strategy alike. Every
    /// round is a row; a summary after the table pools them and gives each strategy's ratio
    /// to `naive` (or to the first strategy). 1 to 16.
    #[arg(long, default_value_t = 1)]
    rounds: u32,
    /// Servers started here (--testbed, --loopback): each request waits this long before
    /// the server reads its bytes, as on a slow disk (0 to 10s; default 0, at once).
    #[arg(long, default_value = "0s", value_parser = parse_server_delay)]
    server_delay: Duration,
    /// A busy host: this many threads (of a child process) spin on the CPUs while each row
    /// runs, its warm-up included, as a service's own work or other tenants would; not while
    /// the line rate is probed, so the rows' share of it says what the load cost. 0 to 64;
    /// 0 is an idle host.
    #[arg(long, default_value_t = 0, value_parser = parse_cpu_load)]
    cpu_load: usize,
    #[command(flatten)]
    link: LinkArgs,
    #[command(flatten)]
    common: Common,
}

#[derive(clap::Args, Debug, Clone)]
struct LinkArgs {
    /// Testbed: rate of the client's switch port. With --servers: the rate the `hinted`
    /// strategy tells the client.
    #[arg(long, default_value = "1gbit", value_parser = parse_rate)]
    rate: u64,
    /// Testbed: bytes the client's switch port can queue (with --servers: a hint for `capped`
    /// and `hinted`).
    #[arg(long, default_value = "32KiB", value_parser = parse_bytes)]
    buffer: u64,
    /// Testbed: tbf token bucket of the port. Default: 131 us at the port's rate, at least
    /// 16 KiB (16 KiB at 1 Gbit/s).
    #[arg(long, value_parser = parse_bytes)]
    burst: Option<u64>,
    /// Congestion control (testbed: set in the namespaces; always: on the servers' sockets).
    #[arg(long, default_value = "cubic", value_parser = ["cubic", "reno", "bbr"])]
    cc: String,
    /// Testbed: server hosts (namespaces, each with its own NIC into the switch); servers
    /// share them round-robin. Default: one per sender of the widest read, at most 64; 512 at
    /// most. Each `--background` flow gets a host of its own on top of these.
    #[arg(long)]
    hosts: Option<usize>,
    /// Testbed: rate of each host's NIC, or `off` for no NIC shaper (bursts at infinite rate).
    /// Default: the port's rate.
    #[arg(long, value_parser = parse_host_rate)]
    host_rate: Option<HostRate>,
    /// Testbed: token bucket of each host's NIC shaper. Default: 131 us at the NIC's rate, at
    /// least 16 KiB (16 KiB at 1 Gbit/s).
    #[arg(long, value_parser = parse_bytes)]
    host_burst: Option<u64>,
    /// Testbed: largest super-packet (GSO unit) a host hands its NIC whole, the interface's
    /// `gso_max_size`, or `kernel` for the kernel's 64 KiB. The port queues or drops such a
    /// unit whole. Default: half the port's buffer where a host's units could be larger (its
    /// bucket, or 64 KiB without a NIC shaper), else the kernel's.
    #[arg(long, value_parser = parse_host_gso)]
    host_gso_max: Option<HostGso>,
}

/// Longest `--server-delay`.
const MAX_SERVER_DELAY: Duration = Duration::from_secs(10);

/// `--server-delay`: a duration of at most [`MAX_SERVER_DELAY`].
fn parse_server_delay(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d > MAX_SERVER_DELAY {
        return Err(format!("`{s}`: a server delay is at most {MAX_SERVER_DELAY:?}"));
    }
    Ok(d)
}

/// `--host-gso-max`: bytes, or `kernel`.
#[derive(Clone, Copy, Debug)]
struct HostGso(Option<u64>);

fn parse_host_gso(s: &str) -> Result<HostGso, String> {
    word_or(s, "kernel", parse_bytes).map(HostGso)
}

/// `--host-rate`: a rate, or `off`.
#[derive(Clone, Copy, Debug)]
struct HostRate(Option<u64>);

fn parse_host_rate(s: &str) -> Result<HostRate, String> {
    word_or(s, "off", parse_rate).map(HostRate)
}

/// `None` for `word` (any case), else what `parse` reads from `s`.
fn word_or(s: &str, word: &str, parse: fn(&str) -> Result<u64, String>) -> Result<Option<u64>, String> {
    if s.eq_ignore_ascii_case(word) {
        return Ok(None);
    }
    parse(s).map(Some)
}

impl LinkArgs {
    /// The testbed for a sweep whose widest read has `senders` senders.
    fn testbed(&self, senders: usize) -> TestbedConfig {
        let host_rate_bps = self.host_rate.map_or(Some(self.rate), |h| h.0);
        let host_burst_bytes = self
            .host_burst
            .unwrap_or_else(|| testbed::default_bucket(host_rate_bps.unwrap_or(self.rate)));
        TestbedConfig {
            rate_bps: self.rate,
            buffer_bytes: self.buffer,
            burst_bytes: self.burst.unwrap_or_else(|| testbed::default_bucket(self.rate)),
            cc: self.cc.clone(),
            hosts: self.hosts.unwrap_or_else(|| testbed::default_hosts(senders)),
            host_rate_bps,
            host_burst_bytes,
            host_gso_max_bytes: self.host_gso_max.map_or_else(
                || testbed::default_host_gso_max(self.buffer, host_rate_bps, host_burst_bytes),
                |g| g.0,
            ),
        }
    }
}

#[derive(Subcommand, Debug)]
enum TestbedAction {
    /// Build the switch and pin its namespaces (incast-client, incast-switch, incast-host0, ...).
    Up(LinkArgs),
    /// Remove the pinned namespaces and every testbed interface.
    Down,
    /// Show the pinned namespaces, addresses and the shaped queue's counters.
    Status,
}

#[derive(clap::Args, Debug)]
struct DemoArgs {
    /// Where to write the plot.
    #[arg(long, default_value = "incast-demo.svg")]
    plot: PathBuf,
    /// Also write JSON lines.
    #[arg(long)]
    json: Option<PathBuf>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(clap::Args, Debug)]
struct ModelArgs {
    /// Link rate of the client's switch port (e.g. 1gbit, 10gbit, 100mbit).
    #[arg(long, default_value = "1gbit", value_parser = parse_rate)]
    rate: u64,
    /// Round-trip time with empty queues (e.g. 100us, 1ms).
    #[arg(long, default_value = "100us", value_parser = parse_duration)]
    rtt: Duration,
    /// Retransmission timeout a collapsed flow waits for.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    rto: Duration,
    /// Partial-RTO factor of equation 4 (1 = a full RTO, 0.6 for 1 MB blocks in the paper).
    #[arg(long, default_value_t = 1.0)]
    alpha: f64,
    /// Buffer of the client's switch port (e.g. 32KiB, 64KB).
    #[arg(long, default_value = "32KiB", value_parser = parse_bytes)]
    buffer: u64,
    /// Bytes each sender sends (server request unit).
    #[arg(long, default_value = "32KiB", value_parser = parse_bytes)]
    sru: u64,
    /// Initial congestion window in bytes (Linux today: 10 segments = 14480).
    #[arg(long, default_value = "14480", value_parser = parse_bytes)]
    initial_window: u64,
    /// Segment payload in bytes.
    #[arg(long, default_value_t = model::MSS_1448)]
    mss: u64,
    /// Sender counts to predict.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64,128,256")]
    senders: Vec<u64>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn run_model(a: &ModelArgs) -> Result<(), model::ModelError> {
    let input = ModelInput {
        link_bps: a.rate,
        rtt: a.rtt,
        rto: a.rto,
        alpha: a.alpha,
        buffer: a.buffer,
        sru: a.sru,
        initial_window: a.initial_window,
    };
    let (onset, points) = model::predict(&input, &a.senders)?;
    let rec = model::recommend(a.rate, a.rtt, a.buffer, a.mss)?;
    if a.json {
        let out = serde_json::json!({ "input": input, "onset_senders": onset, "curve": points, "recommendation": rec });
        outln!("{out}");
        return Ok(());
    }
    outln!(
        "port {} Mbit/s, buffer {} B, RTT {:?}, RTO {:?}, SRU {} B, initial window {} B",
        a.rate / 1_000_000,
        a.buffer,
        a.rtt,
        a.rto,
        a.sru,
        a.initial_window
    );
    outln!("predicted onset of goodput collapse (equation 3): {onset} senders\n");
    outln!(
        "{:>8} {:>14} {:>14} {:>14}",
        "senders",
        "eq.1 Mbit/s",
        "eq.2/4 Mbit/s",
        "predicted"
    );
    for p in &points {
        outln!(
            "{:>8} {:>14.1} {:>14.1} {:>14.1}",
            p.senders,
            p.before_bps / 1e6,
            p.incast_bps / 1e6,
            p.predicted_bps / 1e6
        );
    }
    outln!(
        "\nrecommended policy: K = {} senders, B = {} bytes in flight, C = {} byte grants, \
         window cap {} bytes (path holds {} bytes)",
        rec.max_senders,
        rec.inflight_budget,
        rec.chunk,
        rec.window_cap,
        rec.bdp
    );
    Ok(())
}

/// Any command's failure.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Model(#[from] model::ModelError),
    #[error(transparent)]
    Sweep(#[from] sweep::SweepError),
    #[error(transparent)]
    Testbed(#[from] TestbedError),
    #[error(transparent)]
    Write(#[from] output::WriteError),
    #[error(transparent)]
    Plot(#[from] plot::PlotError),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

fn layouts(c: &Common) -> Result<Vec<Layout>, CliError> {
    let mut v: Vec<Layout> = c.sru.iter().map(|s| Layout::Sru(*s)).collect();
    v.extend(c.block.iter().map(|b| Layout::Block(*b)));
    if v.is_empty() {
        return Err(CliError::Usage("give --sru SIZE or --block SIZE (or both)".into()));
    }
    if let Some(z) = v.iter().find(|l| matches!(l, Layout::Sru(0) | Layout::Block(0))) {
        return Err(CliError::Usage(format!("{z}: sizes must be at least one byte")));
    }
    Ok(v)
}

impl Common {
    /// The sweep these options describe, for these senders and strategies.
    fn spec(
        &self,
        senders: Vec<usize>,
        strategies: Vec<Strategy>,
        buffer_hint: u64,
        rate_hint: Option<u64>,
        cc: &str,
    ) -> Result<SweepSpec, CliError> {
        Ok(SweepSpec {
            senders,
            concurrency: self.concurrency.clone(),
            background: self.background,
            batch: self.batch,
            mix: self.mix,
            load: self.load.clone(),
            layouts: layouts(self)?,
            strategies,
            blocks: self.blocks,
            warmup: self.warmup,
            max_time: self.max_time,
            min_time: self.min_time,
            read_timeout: self.read_timeout,
            buffer_hint,
            rate_hint,
            cc: cc.to_owned(),
            quiet: self.quiet,
            quic_ca: self.quic_ca.clone(),
            quic_server_name: self.quic_server_name.clone(),
            quic_gso: self.quic_gso,
            rounds: 1,
            server_delay: Duration::ZERO,
            cpu_load: 0,
        })
    }
}

/// Writes the files the options ask for, with every row measured; then the error that
/// stopped the sweep early, if one did (taken out of `r`).
fn finish(
    c: &Common,
    network: &str,
    testbed: Option<TestbedConfig>,
    r: &mut sweep::SweepResult,
    title: &str,
) -> Result<(), CliError> {
    let mut header = output::Header::new(network, testbed, c.blocks, c.warmup, c.min_time);
    header.set_line_rate(r.line_rate_mbps);
    header.rounds = r.results.iter().map(|m| m.round + 1).max().unwrap_or(1);
    header.cpu_load = r.cpu_load;
    if let Some(p) = &c.json {
        output::write_json(p, &header, &r.results)?;
        eprintln!("wrote {}", p.display());
    }
    if let Some(p) = &c.csv {
        output::write_csv(p, &r.results)?;
        eprintln!("wrote {}", p.display());
    }
    if let Some(p) = &c.plot {
        plot::write(p, &r.results, title)?;
        eprintln!("wrote {}", p.display());
    }
    match r.stopped.take() {
        Some(e) => {
            eprintln!("the sweep stopped after {} rows", r.results.len());
            Err(e.into())
        }
        None => Ok(()),
    }
}

fn run_sweep(a: &SweepArgs) -> Result<(), CliError> {
    // The port's rate for `hinted`: the testbed's, or the user's word for real hosts.
    let rate_hint = (a.testbed || !a.servers.is_empty()).then_some(a.link.rate);
    let spec = SweepSpec {
        rounds: a.rounds,
        server_delay: a.server_delay,
        cpu_load: a.cpu_load,
        ..a.common.spec(
            a.senders.clone(),
            a.strategies.clone(),
            a.link.buffer,
            rate_hint,
            &a.link.cc,
        )?
    };
    let (network, tb_config) = if a.testbed {
        let mut config = a.link.testbed(a.senders.iter().copied().max().unwrap_or(1));
        // The bulk senders' own hosts (see `servers`).
        config.hosts += spec.background;
        if !a.common.quiet {
            eprintln!("building the testbed: {config}");
        }
        let tb = Testbed::up(config.clone())?;
        (Network::Testbed(Arc::new(tb)), Some(config))
    } else if !a.servers.is_empty() {
        (Network::Hosts(a.servers.clone()), None)
    } else if a.loopback {
        (Network::Loopback, None)
    } else {
        return Err(CliError::Usage(
            "say where the servers are: --testbed, --loopback or --servers A,B,...".into(),
        ));
    };
    let name = network.name();
    let mut r = sweep::run(spec, network)?;
    let title = match &tb_config {
        Some(t) => format!("incast-bench sweep on the testbed: {t}"),
        None => format!("incast-bench sweep ({name}, {})", a.link.cc),
    };
    finish(&a.common, name, tb_config, &mut r, &title)
}

fn run_read(a: &ReadArgs) -> Result<(), CliError> {
    let spec = a
        .common
        .spec(vec![a.servers.len()], vec![a.strategy], a.buffer, None, &a.cc)?;
    let mut r = sweep::run(spec, Network::Hosts(a.servers.clone()))?;
    finish(&a.common, "hosts", None, &mut r, "incast-bench read")
}

fn run_serve(a: &ServeArgs) -> Result<(), CliError> {
    use incast_rpc::{FileStore, ServerConfig, SocketTuning};
    let mut config = ServerConfig::builder().tuning(SocketTuning {
        congestion: Some(a.cc.clone()),
        ..SocketTuning::server()
    });
    if let (Some(cert), Some(key)) = (&a.quic_cert, &a.quic_key) {
        let identity =
            incast_rpc::quic::TlsIdentity::from_pem_files(cert, key).map_err(|e| CliError::Usage(e.to_string()))?;
        let q = incast_rpc::quic::QuicServerConfig::builder(identity)
            .congestion(sweep::quic_congestion(&a.cc))
            .max_gso_segments(a.quic_gso)
            .build()
            .map_err(|e| CliError::Usage(e.to_string()))?;
        config = config.quic(q);
    }
    let config = config.build().map_err(|e| CliError::Usage(e.to_string()))?;
    if a.count == 0 || u32::from(a.listen.port()) + u32::from(a.count) > 65536 {
        return Err(CliError::Usage(format!(
            "--count {} from port {} runs past port 65535",
            a.count,
            a.listen.port()
        )));
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let mut handles = Vec::new();
        for i in 0..a.count {
            let mut addr = a.listen;
            if addr.port() != 0 {
                addr.set_port(a.listen.port() + i);
            }
            let h = if a.store == "mem" {
                incast_rpc::serve(addr, pattern::PatternStore, config.clone()).await
            } else {
                incast_rpc::serve(addr, FileStore::new(&a.store), config.clone()).await
            }
            .map_err(|e| CliError::Usage(format!("cannot listen on {addr}: {e}")))?;
            outln!("serving {} on {}", a.store, h.local_addr());
            if let Some(t) = h.tuning_report() {
                if t.contains("refused") {
                    eprintln!("socket tuning: {t}");
                }
            }
            handles.push(h);
        }
        match a.duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending::<()>().await,
        }
        for h in handles {
            h.shutdown().await;
        }
        Ok(())
    })
}

fn run_testbed(action: &TestbedAction) -> Result<(), CliError> {
    match action {
        TestbedAction::Up(link) => {
            let pinned = testbed::pinned();
            if !pinned.is_empty() {
                return Err(CliError::Usage(format!(
                    "the testbed is already up ({}); `incast-bench testbed down` first",
                    pinned.join(", ")
                )));
            }
            let tb = Testbed::up(link.testbed(TESTBED_UP_HOSTS))?;
            tb.pin()?;
            outln!("testbed up: {}", tb.config());
            outln!(
                "client {} in netns incast-client; host h at {} ... in netns incast-host<h>;\n\
                 the shaped port is {} in netns incast-switch.\n\
                 e.g.  ip netns exec incast-host0 incast-bench serve --listen {}:7000 &\n      \
                 ip netns exec incast-host1 incast-bench serve --listen {}:7000 &\n      \
                 ip netns exec incast-client incast-bench read --servers {}:7000,{}:7000 --block 1MiB\n\
                 remove it with `incast-bench testbed down`",
                testbed::CLIENT_ADDR,
                testbed::host_addr(0),
                testbed::SWITCH_CLIENT_PORT,
                testbed::host_addr(0),
                testbed::host_addr(1),
                testbed::host_addr(0),
                testbed::host_addr(1),
            );
            Ok(())
        }
        TestbedAction::Down => {
            let removed = testbed::down()?;
            if removed.is_empty() {
                outln!("no testbed namespaces to remove");
            } else {
                outln!("removed {}", removed.join(", "));
            }
            Ok(())
        }
        TestbedAction::Status => {
            let stray = testbed::leftover_interfaces()?;
            if !stray.is_empty() {
                outln!(
                    "interfaces named {}* in this namespace: {}",
                    testbed::PREFIX,
                    stray.join(", ")
                );
            }
            let pinned = testbed::pinned();
            if pinned.is_empty() {
                outln!("testbed down (no pinned incast namespaces)");
                return Ok(());
            }
            for ns in &pinned {
                let out = std::process::Command::new("ip")
                    .args(["-n", ns, "-br", "addr"])
                    .output()?;
                outln!("== {ns}\n{}", String::from_utf8_lossy(&out.stdout).trim_end());
            }
            let out = std::process::Command::new("ip")
                .args(["netns", "exec", "incast-switch", "tc", "-s", "qdisc", "show", "dev"])
                .arg(testbed::SWITCH_CLIENT_PORT)
                .output()?;
            outln!("== shaped port\n{}", String::from_utf8_lossy(&out.stdout).trim_end());
            Ok(())
        }
    }
}

/// Hosts `testbed up` builds unless `--hosts` says otherwise.
const TESTBED_UP_HOSTS: usize = 16;

/// The demo's configuration: the seeds' experiment (fixed 64 KiB per sender, the block grows
/// with the stripe) at a few widths, one read at a time and four at once, `naive` against the
/// library's `default` and `default` over QUIC.
const DEMO_SENDERS: [usize; 4] = [1, 4, 16, 64];
const DEMO_SRU: u64 = 64 << 10;
const DEMO_CONCURRENCY: [usize; 2] = [1, 4];
const DEMO_BLOCKS: u32 = 40;
/// Shortest measurement per demo configuration (shorter than the sweep's default, so the
/// demo stays under a minute).
const DEMO_MIN_TIME: Duration = Duration::from_millis(500);

fn run_demo(a: &DemoArgs) -> Result<(), CliError> {
    let tb_config = TestbedConfig {
        hosts: testbed::default_hosts(DEMO_SENDERS[DEMO_SENDERS.len() - 1]),
        ..TestbedConfig::default()
    };
    let (network, tb) = match Testbed::up(tb_config.clone()) {
        Ok(tb) => {
            outln!(
                "Built an emulated cluster in network namespaces: {tb_config}.\n\
                 Reading blocks striped over 1-64 servers, 64 KiB from each, one read at a time and\n\
                 four at once through one client, with `naive` (every fragment at once, kernel\n\
                 defaults), the library's `default`, and `default` over QUIC.\n"
            );
            (Network::Testbed(Arc::new(tb)), Some(tb_config.clone()))
        }
        Err(e @ (TestbedError::NoPrivilege { .. } | TestbedError::NotLinux | TestbedError::MissingTool { .. })) => {
            outln!(
                "Cannot build the emulated cluster: {e}.\n\
                 Running on loopback instead. Loopback has no shallow switch buffer, so it shows no\n\
                 incast; and the default in-flight budget (64 KiB, sized for a shallow-buffered\n\
                 1-10 Gbit/s port) holds `default` to a fraction of naive's loopback throughput\n\
                 (the README's known limitation). For the real comparison run as root (or inside\n\
                 `unshare -rn`) with iproute2 installed.\n"
            );
            (Network::Loopback, None)
        }
        Err(e) => return Err(e.into()),
    };
    let name = network.name();
    let common = Common {
        sru: vec![DEMO_SRU],
        block: vec![],
        blocks: DEMO_BLOCKS,
        warmup: 3,
        max_time: Duration::from_secs(8),
        min_time: DEMO_MIN_TIME,
        read_timeout: Duration::from_secs(30),
        json: a.json.clone(),
        csv: None,
        plot: Some(a.plot.clone()),
        quiet: a.quiet,
        quic_ca: None,
        quic_server_name: None,
        quic_gso: incast_rpc::quic::DEFAULT_MAX_GSO_SEGMENTS,
        concurrency: DEMO_CONCURRENCY.to_vec(),
        background: 0,
        batch: false,
        mix: None,
        load: Vec::new(),
    };
    let spec = common.spec(
        DEMO_SENDERS.to_vec(),
        vec![Strategy::Naive, Strategy::Default, Strategy::Quic],
        tb_config.buffer_bytes,
        tb.as_ref().map(|t| t.rate_bps),
        &tb_config.cc,
    )?;
    let mut r = sweep::run(spec, network)?;
    let title = match &tb {
        Some(t) => format!("incast-bench demo: {t}"),
        None => "incast-bench demo (loopback: no incast expected)".to_owned(),
    };
    finish(&common, name, tb, &mut r, &title)?;
    summarize_demo(&r.results);
    Ok(())
}

fn summarize_demo(results: &[run::Measurement]) {
    outln!();
    for r in DEMO_CONCURRENCY {
        for n in DEMO_SENDERS.iter().filter(|n| **n > 1) {
            let get = |s: &str| {
                results
                    .iter()
                    .find(|m| m.senders == *n && m.concurrency == r && m.strategy == s)
            };
            if let (Some(naive), Some(def)) = (get("naive"), get("default")) {
                // The hosts' own count where there is one: `End` frames miss the RTOs of
                // abandoned connections.
                let rtos = |m: &run::Measurement| m.host_rtos.unwrap_or(m.kernel_rtos);
                outln!(
                    "{n:>3} senders, {r} at once: default {:.0} Mbit/s, p99 {:.1} ms, {} kernel RTOs; naive {:.0} Mbit/s, \
                     p99 {:.1} ms, {} kernel RTOs ({:.1}x goodput)",
                    def.goodput_mbps,
                    def.p99_ms,
                    rtos(def),
                    naive.goodput_mbps,
                    naive.p99_ms,
                    rtos(naive),
                    def.goodput_mbps / naive.goodput_mbps.max(1e-9)
                );
            }
            if let Some(q) = get("quic") {
                outln!(
                    "                        quic {:.0} Mbit/s, p99 {:.1} ms, {} QUIC loss-recovery events, {:.2} CPU s/GiB",
                    q.goodput_mbps, q.p99_ms, q.quic_loss_events, q.cpu_s_per_gib
                );
            }
        }
    }
}

/// Open files this process asks for: the servers run in-process beside the client, and
/// 1024 senders x 16 concurrent reads hold two sockets per connection (32k descriptors).
const WANTED_OPEN_FILES: u64 = 1 << 20;

/// Raises the open-file limit: to [`WANTED_OPEN_FILES`] where the process may (root), else
/// the soft limit to the hard one. Failures leave the limit as it was (a run that then runs
/// out of descriptors says so in its error).
fn raise_open_file_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= WANTED_OPEN_FILES {
        return;
    }
    if setrlimit(Resource::RLIMIT_NOFILE, WANTED_OPEN_FILES, WANTED_OPEN_FILES.max(hard)).is_err() && soft < hard {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

/// The environment variable that turns on the library's telemetry: `INCAST_LOG=debug`
/// prints every hedge, retry, failed request, lost connection, port budget change and read
/// end to stderr (see `incast_rpc`'s client docs, *Telemetry*).
const LOG_ENV: &str = "INCAST_LOG";

/// Installs a stderr subscriber at the level `INCAST_LOG` names (`error`, `warn`, `info`,
/// `debug` or `trace`); nothing when it is unset. An unknown level is an error, not a
/// silent default.
fn init_logging() -> Result<(), String> {
    let Some(level) = std::env::var_os(LOG_ENV) else {
        return Ok(());
    };
    let level = level.to_string_lossy();
    let level: tracing_subscriber::filter::LevelFilter = level
        .parse()
        .map_err(|_| format!("{LOG_ENV}={level:?}: expected error, warn, info, debug, trace or off"))?;
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .init();
    Ok(())
}

fn main() -> ExitCode {
    raise_open_file_limit();
    let cli = Cli::parse();
    if let Err(e) = init_logging() {
        eprintln!("incast-bench: {e}");
        return ExitCode::from(2);
    }
    let result = match &cli.command {
        Command::Model(a) => run_model(a).map_err(CliError::from),
        Command::Serve(a) => run_serve(a),
        Command::Read(a) => run_read(a),
        Command::Sweep(a) => run_sweep(a),
        Command::Testbed { action } => run_testbed(action),
        Command::Demo(a) => run_demo(a),
        Command::Erasure(a) => run_erasure(a),
        Command::Chaos(a) => run_chaos(a),
        Command::Fuzz(a) => run_fuzz(a),
        Command::Spin(a) => load::spin(a.threads, a.max_time).map_err(CliError::from),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("incast-bench: {e}");
            ExitCode::from(2)
        }
    }
}
