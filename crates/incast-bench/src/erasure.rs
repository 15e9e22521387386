//! `incast-bench erasure`: k-of-n erasure-coded reads on the testbed, with one host frozen or
//! dead, against reading the `k` data shards and waiting.
//!
//! For each code (`k+m`, shard `i` on host `i`, one 1 Gbit/s NIC each) and each condition:
//! - `none`: every host up;
//! - `frozen`: the host of data shard 1 goes silent (its switch port down, both ways: no
//!   reset, no FIN) just before each read and comes back `--freeze` later;
//! - `dead`: the same host stays silent for the whole read,
//!
//! `--reads` reads of one block run one at a time with two strategies, the same client:
//! - `erasure`: `Client::erasure_read` (data shards; parity for failed or late shards);
//! - `data-only`: `fan_in_read` of the `k` data shards, which waits for the silent host (until
//!   it returns, or the read's deadline).
//!
//! Every completed block is checked byte for byte. Printed and exported: p50, p99 and max
//! latency, reads failed, mean bytes read, parity shards requested, and decode time per MiB.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use incast_core::{Fragment, Policy, ServerId, Stripe};
use incast_rpc::erasure::{encode, shard_len, ErasureStripe};
use incast_rpc::store::MemStore;
use incast_rpc::{Client, ClientConfig, ServerConfig};

use crate::servers::ServerSet;
use crate::testbed::{host_addr, Testbed};

/// The host (and data shard) that freezes or dies.
pub const FAULT_HOST: usize = 1;
/// Pause after a faulted read, with the host back, before the next read.
const SETTLE: Duration = Duration::from_millis(300);

/// What to run.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Codes, as (k, m).
    pub codes: Vec<(usize, usize)>,
    /// Bytes per shard.
    pub shard: u64,
    /// Reads per code, condition and strategy.
    pub reads: u32,
    /// How long a frozen host stays silent.
    pub freeze: Duration,
    /// Each read's deadline.
    pub read_timeout: Duration,
    /// No progress lines.
    pub quiet: bool,
}

/// One code, condition and strategy.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    /// `k+m`.
    pub code: String,
    /// `none`, `frozen` or `dead`.
    pub fault: &'static str,
    /// `erasure` or `data-only`.
    pub strategy: &'static str,
    /// Reads attempted.
    pub reads: u32,
    /// Reads that returned an error (a completed block that differed would abort the run).
    pub failed: u32,
    /// Latency percentiles of the completed reads, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Slowest completed read, ms.
    pub max_ms: f64,
    /// Mean bytes of shards read whole per completed read.
    pub bytes_read: f64,
    /// Mean parity shards requested per completed read.
    pub parity_requested: f64,
    /// Mean decode time per MiB of block over the reads that decoded, ms (0: none decoded).
    pub decode_ms_per_mib: f64,
    /// The first error, if any.
    pub first_error: Option<String>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Runs `spec` on `tb` (at least `k + m` hosts for every code).
pub fn run(spec: &Spec, tb: Arc<Testbed>) -> std::io::Result<Vec<Row>> {
    let n_max = spec.codes.iter().map(|(k, m)| k + m).max().unwrap_or(0);
    if tb.hosts().len() < n_max {
        return Err(std::io::Error::other(format!(
            "{} hosts for {n_max} shards",
            tb.hosts().len()
        )));
    }
    // Shard i of every code lives on server i, host i.
    let mut blocks = Vec::new();
    let stores: Vec<MemStore> = (0..n_max).map(|_| MemStore::new()).collect();
    for &(k, m) in &spec.codes {
        let len = spec.shard * k as u64;
        let block: Vec<u8> = (0..len as usize).map(|i| (i * 13 + i / 8191 + k) as u8).collect();
        let shards = encode(&block, k, m).map_err(std::io::Error::other)?;
        for (i, s) in shards.into_iter().enumerate() {
            stores[i].insert(format!("{k}+{m}/{i}"), s);
        }
        blocks.push(block);
    }
    let hosts = tb
        .hosts()
        .iter()
        .enumerate()
        .take(n_max)
        .map(|(h, ns)| Ok((Some(ns.try_clone()?), IpAddr::V4(host_addr(h)))))
        .collect::<std::io::Result<Vec<_>>>()?;
    let servers = ServerSet::start_with(
        hosts,
        n_max,
        Vec::new(),
        &tb.config().cc,
        ServerConfig::default(),
        move |i| stores[i].clone(),
    )?;
    let addrs: Vec<(ServerId, SocketAddr)> = servers.addrs().to_vec();
    let spec2 = spec.clone();
    let tb2 = tb.clone();
    let rows = tb.client().run(move || client_side(&spec2, tb2, addrs, blocks))??;
    drop(servers);
    Ok(rows)
}

fn client_side(
    spec: &Spec,
    tb: Arc<Testbed>,
    addrs: Vec<(ServerId, SocketAddr)>,
    blocks: Vec<Vec<u8>>,
) -> std::io::Result<Vec<Row>> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let cfg = ClientConfig::builder()
        .read_timeout(spec.read_timeout)
        .build()
        .map_err(std::io::Error::other)?;
    let client = Arc::new(Client::with_config(addrs, cfg));
    let policy = Policy::default();
    let mut rows = Vec::new();
    for (&(k, m), block) in spec.codes.iter().zip(&blocks) {
        let sl = shard_len(block.len() as u64, k).map_err(std::io::Error::other)?;
        let frags: Vec<Fragment> = (0..k + m)
            .map(|i| Fragment::new(ServerId(i as u32), format!("{k}+{m}/{i}"), 0, sl))
            .collect();
        let ec = ErasureStripe::new(block.len() as u64, k, frags.clone()).map_err(std::io::Error::other)?;
        let data_only = Stripe::new(frags[..k].to_vec()).map_err(std::io::Error::other)?;
        // Warm up: connections and the port's rate.
        for _ in 0..3 {
            let _ = rt.block_on(client.erasure_read(&ec, &policy));
            let _ = rt.block_on(client.fan_in_read(&data_only, &policy));
        }
        for fault in ["none", "frozen", "dead"] {
            for strategy in ["erasure", "data-only"] {
                if !spec.quiet {
                    eprintln!("{k}+{m} {fault} {strategy}: {} reads", spec.reads);
                }
                let mut lat = Vec::new();
                let (mut failed, mut bytes, mut parity, mut decode, mut decoded) = (0u32, 0u64, 0usize, 0.0, 0u32);
                let mut first_error = None;
                for _ in 0..spec.reads {
                    let silent = fault != "none";
                    if silent {
                        tb.set_host_link(FAULT_HOST, false).map_err(std::io::Error::other)?;
                    }
                    let back = (fault == "frozen").then(|| {
                        let tb = tb.clone();
                        let after = spec.freeze;
                        std::thread::spawn(move || {
                            std::thread::sleep(after);
                            tb.set_host_link(FAULT_HOST, true)
                        })
                    });
                    let t = Instant::now();
                    let result: Result<(Vec<u8>, u64, usize, Option<Duration>), String> = if strategy == "erasure" {
                        rt.block_on(client.erasure_read(&ec, &policy))
                            .map(|o| {
                                let d = (o.decode > Duration::ZERO).then_some(o.decode);
                                (o.block, o.bytes_read, o.parity_requested, d)
                            })
                            .map_err(|e| e.to_string())
                    } else {
                        rt.block_on(client.fan_in_read(&data_only, &policy))
                            .map(|o| (o.block, data_only.block_len(), 0, None))
                            .map_err(|e| e.to_string())
                    };
                    let took = t.elapsed();
                    if let Some(h) = back {
                        h.join()
                            .map_err(|_| std::io::Error::other("link thread panicked"))?
                            .map_err(std::io::Error::other)?;
                    } else if silent {
                        tb.set_host_link(FAULT_HOST, true).map_err(std::io::Error::other)?;
                    }
                    match result {
                        Ok((got, b, p, d)) => {
                            // The data-only block is the k shards, padding included.
                            if got[..block.len()] != block[..] {
                                return Err(std::io::Error::other(format!(
                                    "{k}+{m} {fault} {strategy}: a completed block differs"
                                )));
                            }
                            lat.push(took.as_secs_f64() * 1e3);
                            bytes += b;
                            parity += p;
                            if let Some(d) = d {
                                decode += d.as_secs_f64() * 1e3 / (block.len() as f64 / (1 << 20) as f64);
                                decoded += 1;
                            }
                        }
                        Err(e) => {
                            failed += 1;
                            first_error.get_or_insert(e);
                        }
                    }
                    if silent {
                        std::thread::sleep(SETTLE);
                    }
                }
                lat.sort_by(f64::total_cmp);
                let done = lat.len().max(1) as f64;
                rows.push(Row {
                    code: format!("{k}+{m}"),
                    fault,
                    strategy,
                    reads: spec.reads,
                    failed,
                    p50_ms: percentile(&lat, 0.5),
                    p99_ms: percentile(&lat, 0.99),
                    max_ms: lat.last().copied().unwrap_or(f64::NAN),
                    bytes_read: bytes as f64 / done,
                    parity_requested: parity as f64 / done,
                    decode_ms_per_mib: if decoded > 0 { decode / decoded as f64 } else { 0.0 },
                    first_error,
                });
            }
        }
    }
    Ok(rows)
}
