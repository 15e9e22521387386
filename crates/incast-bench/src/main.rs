//! `incast-bench`: the benchmark tool of incast.
//!
//! Today it has one command, `model`, which prints chen-2012's predicted onset and goodput
//! curve and the policy the model recommends. `serve`, `read`, `sweep`, `testbed` and `demo`
//! are not implemented yet (they need the TCP transport); they are not listed rather than
//! pretending to work.
//!
//! Run: `cargo run --release -p incast-bench -- model --help`

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use incast_core::model::{self, ModelInput};

mod units;

use units::{parse_bytes, parse_duration, parse_rate};

#[derive(Parser, Debug)]
#[command(
    name = "incast-bench",
    version,
    about = "Benchmarks and models TCP incast for fan-in reads"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Predicted onset and goodput of synchronized reads (chen-2012, equations 1-4), and the
    /// policy the model recommends for the port.
    #[command(after_help = "Examples:\n  \
        incast-bench model\n  \
        incast-bench model --rate 10gbit --rtt 20us --buffer 256KiB --sru 256KiB\n  \
        incast-bench model --json")]
    Model(ModelArgs),
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
        println!("{out}");
        return Ok(());
    }
    println!(
        "port {} Mbit/s, buffer {} B, RTT {:?}, RTO {:?}, SRU {} B, initial window {} B",
        a.rate / 1_000_000,
        a.buffer,
        a.rtt,
        a.rto,
        a.sru,
        a.initial_window
    );
    println!("predicted onset of goodput collapse (equation 3): {onset} senders\n");
    println!(
        "{:>8} {:>14} {:>14} {:>14}",
        "senders", "eq.1 Mbit/s", "eq.2/4 Mbit/s", "predicted"
    );
    for p in &points {
        println!(
            "{:>8} {:>14.1} {:>14.1} {:>14.1}",
            p.senders,
            p.before_bps / 1e6,
            p.incast_bps / 1e6,
            p.predicted_bps / 1e6
        );
    }
    println!(
        "\nrecommended policy: K = {} senders, B = {} bytes in flight, C = {} byte grants, \
         window cap {} bytes (path holds {} bytes)",
        rec.max_senders, rec.inflight_budget, rec.chunk, rec.window_cap, rec.bdp
    );
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Model(a) => run_model(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("incast-bench: {e}");
            ExitCode::from(2)
        }
    }
}
