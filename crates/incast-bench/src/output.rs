//! Results as a table, JSON lines and CSV.
//!
//! A JSON file starts with a header object (`"type": "header"`) that echoes the run: command
//! line, git commit, kernel, CPU count, testbed parameters, block and warm-up counts and the
//! measured line rate. Then one object (`"type": "result"`) per (strategy, configuration),
//! with the fields of [`Measurement`], including the block-latency HDR histogram (V2 +
//! DEFLATE, base64) so that runs can be merged with HdrHistogram's tools.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::run::Measurement;
use crate::testbed::TestbedConfig;

/// What a JSON file's header echoes.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Header {
    /// Always "header".
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The command line.
    pub command: String,
    /// Git commit the binary was built from.
    pub git_commit: &'static str,
    /// `uname -r`.
    pub kernel: String,
    /// CPUs available.
    pub cpus: usize,
    /// Testbed parameters, when the run used it.
    pub testbed: Option<TestbedConfig>,
    /// Where servers ran: "testbed", "loopback" or "hosts".
    pub network: String,
    /// Measured blocks per configuration.
    pub blocks: u32,
    /// Warm-up blocks per configuration.
    pub warmup: u32,
    /// Shortest measurement per configuration, seconds (reads go on past `blocks` until then).
    pub min_time_s: f64,
    /// Rounds per configuration (a sweep's `--rounds`; each round reads its share of
    /// `blocks` and `min_time_s`).
    pub rounds: u32,
    /// Line rate measured with one sender streaming, Mbit/s: the calibration of the run.
    pub line_rate_mbps: f64,
    /// Testbed: the most TCP payload the port can carry, Mbit/s (rate x 1448 / 1514).
    pub port_payload_capacity_mbps: Option<f64>,
    /// Testbed: the line rate over that capacity (the smoke test wants 0.9 or more).
    pub line_rate_of_capacity: Option<f64>,
    /// Seconds since the Unix epoch at the start.
    pub started_unix: u64,
    /// Threads that spun on the CPUs while the rows ran (a sweep's `--cpu-load`; 0, an idle
    /// host).
    pub cpu_load: usize,
}

impl Header {
    /// A header for this process.
    pub fn new(network: &str, testbed: Option<TestbedConfig>, blocks: u32, warmup: u32, min_time: Duration) -> Self {
        Self {
            kind: "header",
            command: std::env::args().collect::<Vec<_>>().join(" "),
            git_commit: env!("INCAST_GIT_COMMIT"),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| std::env::consts::OS.to_owned()),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            port_payload_capacity_mbps: testbed.as_ref().map(TestbedConfig::payload_capacity_mbps),
            line_rate_of_capacity: None,
            testbed,
            network: network.to_owned(),
            blocks,
            warmup,
            min_time_s: min_time.as_secs_f64(),
            rounds: 1,
            line_rate_mbps: 0.0,
            cpu_load: 0,
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }
}

impl Header {
    /// Records the line rate measured in the run, and its share of the port's capacity.
    pub fn set_line_rate(&mut self, mbps: f64) {
        self.line_rate_mbps = mbps;
        self.line_rate_of_capacity = self.port_payload_capacity_mbps.map(|c| mbps / c);
    }
}

/// A file could not be written.
#[derive(Debug, thiserror::Error)]
#[error("writing {path}: {source}")]
pub struct WriteError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub source: io::Error,
}

fn create(path: &Path) -> Result<BufWriter<File>, WriteError> {
    File::create(path).map(BufWriter::new).map_err(|source| WriteError {
        path: path.to_owned(),
        source,
    })
}

fn wrap(path: &Path) -> impl Fn(io::Error) -> WriteError + '_ {
    move |source| WriteError {
        path: path.to_owned(),
        source,
    }
}

#[derive(serde::Serialize)]
struct Tagged<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    m: &'a Measurement,
}

/// Writes the header and one line per result.
pub fn write_json(path: &Path, header: &Header, results: &[Measurement]) -> Result<(), WriteError> {
    let mut w = create(path)?;
    let e = wrap(path);
    serde_json::to_writer(&mut w, header).map_err(|x| e(x.into()))?;
    writeln!(w).map_err(&e)?;
    for m in results {
        serde_json::to_writer(&mut w, &Tagged { kind: "result", m }).map_err(|x| e(x.into()))?;
        writeln!(w).map_err(&e)?;
    }
    w.flush().map_err(&e)
}

const CSV_FIELDS: &str =
    "strategy,layout,senders,sru_bytes,block_bytes,blocks,failed_blocks,goodput_mbps,line_rate_mbps,\
line_rate_fraction,ideal_ms,p50_ms,p99_ms,max_ms,p99_over_ideal,kernel_rtos,blocks_with_rto,rto_free_fraction,\
blocks_over_100ms,retransmits,hedges,grants,switch_drops,host_rtos,cc,buffer_bytes,rate_bps,elapsed_s,quic_requests,\
quic_loss_events,quic_lost_packets,cpu_s_per_gib,concurrency,mean_ms,background_flows,background_mbps,machine_cpu_busy,hedges_won,hedges_spurious,budget_min,budget_max,delay_samples,delay_mean_us,delay_max_us,admission_wait_ms,batch,transfer_ms,hedges_denied,escalations,connections_reset,late_grants,host_syn_ack_retransmits,host_handshakes,host_rtos_warmup,host_handshakes_warmup,connections_drained,drains_reset,late_rtos,warmup_rtos_reported_late,client_rtos,client_rtos_warmup,round,host_mean_us,machine_cpu_steal,lost_retries,held_grants,mix,mix_blocks,mix_mean_ms,mix_p99_ms,mix_ideal_ms,layout_mean_ms,layout_p99_ms,load,arrivals_queued";

/// Writes one CSV row per result (the histogram stays in the JSON).
pub fn write_csv(path: &Path, results: &[Measurement]) -> Result<(), WriteError> {
    let mut w = create(path)?;
    let e = wrap(path);
    writeln!(w, "{CSV_FIELDS}").map_err(&e)?;
    let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
    for m in results {
        writeln!(
            w,
            "{},{},{},{},{},{},{},{:.1},{:.1},{:.4},{:.3},{:.3},{:.3},{:.3},{:.3},{},{},{:.4},{},{},{},{},{},{},{},{},{},{:.3},{},{},{},{:.3},{},{:.3},{},{:.1},{:.3},{},{},{},{},{},{:.1},{:.1},{:.3},{},{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.1},{:.3},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.2},{}",
            m.strategy,
            m.layout,
            m.senders,
            m.sru_bytes,
            m.block_bytes,
            m.blocks,
            m.failed_blocks,
            m.goodput_mbps,
            m.line_rate_mbps,
            m.line_rate_fraction,
            m.ideal_ms,
            m.p50_ms,
            m.p99_ms,
            m.max_ms,
            m.p99_over_ideal,
            m.kernel_rtos,
            m.blocks_with_rto,
            m.rto_free_fraction,
            m.blocks_over_100ms,
            m.retransmits,
            m.hedges,
            m.grants,
            opt(m.switch_drops),
            opt(m.host_rtos),
            m.cc,
            opt(m.buffer_bytes),
            opt(m.rate_bps),
            m.elapsed_s,
            m.quic_requests,
            m.quic_loss_events,
            m.quic_lost_packets,
            m.cpu_s_per_gib,
            m.concurrency,
            m.mean_ms,
            m.background_flows,
            m.background_mbps,
            m.machine_cpu_busy,
            m.hedges_won,
            m.hedges_spurious,
            m.budget_min,
            m.budget_max,
            m.delay_samples,
            m.delay_mean_us,
            m.delay_max_us,
            m.admission_wait_ms,
            m.batch,
            m.transfer_ms,
            m.hedges_denied,
            m.escalations,
            m.connections_reset,
            m.late_grants,
            opt(m.host_syn_ack_retransmits),
            opt(m.host_handshakes),
            opt(m.host_rtos_warmup),
            opt(m.host_handshakes_warmup),
            m.connections_drained,
            m.drains_reset,
            m.late_rtos,
            m.warmup_rtos_reported_late,
            opt(m.client_rtos),
            opt(m.client_rtos_warmup),
            m.round,
            m.host_mean_us,
            m.machine_cpu_steal,
            m.lost_retries,
            m.held_grants,
            m.mix.as_deref().unwrap_or_default(),
            m.mix_blocks,
            m.mix_mean_ms,
            m.mix_p99_ms,
            m.mix_ideal_ms,
            m.layout_mean_ms,
            m.layout_p99_ms,
            m.load,
            m.arrivals_queued,
        )
        .map_err(&e)?;
    }
    w.flush().map_err(&e)
}

/// The share of the machine's CPU time taken by a hypervisor (steal) from which a table
/// row says that it measured the host (5%): on the 2-core VM, rows measured in such
/// spells read up to half their goodput at twice their CPU per GiB, while outside them
/// steal stayed under 1%.
pub const STEAL_WARNING: f64 = 0.05;

/// Header of the table.
pub fn table_header() -> String {
    format!(
        "{:<10} {:>5} {:>3} {:>9} {:>9} {:>9} {:>6} {:>8} {:>8} {:>8} {:>8} {:>7} {:>6} {:>8} {:>8} {:>8} {:>6} {:>6} {:>9} {:>6} {:>7} {:>5} {:>5} {:>7} {:>11} {:>7}",
        "strategy",
        "N",
        "R",
        "sru",
        "block",
        "Mbit/s",
        "%line",
        "mean ms",
        "p50 ms",
        "p99 ms",
        "max ms",
        "p99/id",
        "RTOs",
        "hRTO w+r",
        "cRTO w+r",
        "RTO-free",
        "drops",
        "hedges",
        "won/spur",
        "QUIC-l",
        "CPU/GiB",
        "busy",
        "steal",
        "bg Mb/s",
        "budget KiB",
        "wait ms"
    )
}

/// One row of the table.
pub fn table_row(m: &Measurement) -> String {
    let drops = m.switch_drops.map_or("-".to_owned(), |d| d.to_string());
    // Host and client RTOs as warm-up + measured reads, where the split is known.
    let split = |all: Option<u64>, warm: Option<u64>| match (all, warm) {
        (Some(all), Some(warm)) => format!("{}+{}", warm.min(all), all.saturating_sub(warm)),
        (Some(all), None) => all.to_string(),
        (None, _) => "-".to_owned(),
    };
    let host_rtos = split(m.host_rtos, m.host_rtos_warmup);
    let client_rtos = split(m.client_rtos, m.client_rtos_warmup);
    // QUIC loss-recovery episodes, for strategies that sent anything over QUIC.
    let quic_losses = if m.quic_requests > 0 {
        m.quic_loss_events.to_string()
    } else {
        "-".to_owned()
    };
    let failed = if m.failed_blocks > 0 {
        format!(
            "  ({} blocks failed: {})",
            m.failed_blocks,
            m.first_error.as_deref().unwrap_or("")
        )
    } else {
        String::new()
    };
    // The two kinds of a mixed run, after the row's columns (which count both).
    let mixed = match &m.mix {
        Some(shape) => format!(
            "  (mixed {shape}: {} reads, mean {:.2} ms, p99 {:.2} ms, {:.1}x its ideal; the layout's {} reads: mean {:.2} ms, p99 {:.2} ms)",
            m.mix_blocks, m.mix_mean_ms, m.mix_p99_ms, m.mix_p99_over_ideal, m.layout_blocks, m.layout_mean_ms, m.layout_p99_ms
        ),
        None => String::new(),
    };
    // An open loop's offered load: the latency columns count from each read's arrival.
    let open = if m.load > 0.0 {
        format!(
            "  (open loop at {:.2} of the line rate, {} reads waited for a place)",
            m.load, m.arrivals_queued
        )
    } else {
        String::new()
    };
    let stolen = if m.machine_cpu_steal >= STEAL_WARNING {
        format!(
            "  (the hypervisor took {:.0}% of the CPU: this row measured the host; run it again)",
            m.machine_cpu_steal * 100.0
        )
    } else {
        String::new()
    };
    let rtos = if m.strategy == "blocking" {
        "-".to_owned()
    } else {
        m.kernel_rtos.to_string()
    };
    let bg = if m.background_flows > 0 {
        format!("{:.0}", m.background_mbps)
    } else {
        "-".to_owned()
    };
    let budget = if m.budget_max > 0 {
        format!("{}-{}", m.budget_min >> 10, m.budget_max >> 10)
    } else {
        "-".to_owned()
    };
    format!(
        "{:<10} {:>5} {:>3} {:>9} {:>9} {:>9.1} {:>5.1}% {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>7.2} {:>6} {:>8} {:>8} {:>7.1}% {:>6} {:>6} {:>9} {:>6} {:>6.2}s {:>4.0}% {:>4.0}% {:>7} {:>11} {:>7.2}{open}{mixed}{failed}{stolen}",
        m.strategy,
        m.senders,
        m.concurrency,
        human(m.sru_bytes),
        human(m.block_bytes),
        m.goodput_mbps,
        m.line_rate_fraction * 100.0,
        m.mean_ms,
        m.p50_ms,
        m.p99_ms,
        m.max_ms,
        m.p99_over_ideal,
        rtos,
        host_rtos,
        client_rtos,
        m.rto_free_fraction * 100.0,
        drops,
        m.hedges,
        format!("{}/{}", m.hedges_won, m.hedges_spurious),
        quic_losses,
        m.cpu_s_per_gib,
        m.machine_cpu_busy * 100.0,
        m.machine_cpu_steal * 100.0,
        bg,
        budget,
        m.admission_wait_ms
    )
}

/// 32768 -> "32KiB".
pub fn human(b: u64) -> String {
    for (unit, div) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if b >= div && b % div == 0 {
            return format!("{}{unit}", b / div);
        }
    }
    if b >= 1 << 20 {
        return format!("{:.1}MiB", b as f64 / (1u64 << 20) as f64);
    }
    if b >= 1 << 10 {
        return format!("{:.1}KiB", b as f64 / 1024.0);
    }
    format!("{b}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(human(32 << 10), "32KiB");
        assert_eq!(human(1 << 20), "1MiB");
        assert_eq!(human(4000), "3.9KiB");
        assert_eq!(human(100), "100B");
    }

    #[test]
    fn a_row_measured_while_the_hypervisor_took_the_cpu_says_so() {
        let m = |steal: f64| Measurement {
            strategy: "default".into(),
            machine_cpu_steal: steal,
            ..Measurement::default()
        };
        let calm = table_row(&m(0.01));
        assert!(!calm.contains("hypervisor"), "{calm}");
        let stolen = table_row(&m(0.2));
        assert!(stolen.contains("hypervisor took 20%"), "{stolen}");
        // The column lines up with the header's.
        let head = table_header();
        let col = head.find("steal").unwrap() + "steal".len();
        assert_eq!(&calm[col - 2..col], "1%", "{head}\n{calm}");
    }

    #[test]
    fn csv_has_one_value_per_field() {
        let dir = std::env::temp_dir().join(format!("incast-csv-{}", std::process::id()));
        let m = Measurement {
            strategy: "naive".into(),
            switch_drops: Some(3),
            ..Measurement::default()
        };
        write_csv(&dir, &[m]).unwrap();
        let text = std::fs::read_to_string(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].split(',').count(), lines[1].split(',').count());
        assert!(lines[1].starts_with("naive,"));
    }
}
