//! What `tracing` costs a read: the same loopback reads with no subscriber, with a subscriber
//! at INFO (the read's span is built, recorded and closed; no events), and at DEBUG (every
//! hedge, retry, failure and budget change event formatted too), all writing to a sink.
//!
//! Run: `cargo bench --bench telemetry` (feature `tracing` on, the default), then
//! `cargo bench --bench telemetry --no-default-features` (compiled out) and compare the
//! `no-subscriber` rows of the two runs.
//!
//! Small reads show the per-read cost best: 16 servers x 4 KiB (a 64 KiB block, where the
//! span is a larger share of the read) and 16 x 256 KiB (4 MiB). Everything runs on one
//! current-thread runtime, so the subscriber set for this thread sees every read. Before
//! criterion runs, the bench prints the mean time per read of each variant over interleaved
//! rounds and the ratios against `no-subscriber`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use incast::rpc::{serve, Client, MemStore, ServerConfig, ServerHandle};
use incast::{Policy, ServerId, Stripe};
use tokio::runtime::Runtime;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::util::SubscriberInitExt;

const N: u32 = 16;
const VARIANTS: [&str; 3] = ["no-subscriber", "info-subscriber", "debug-subscriber"];

struct Setup {
    _servers: Vec<ServerHandle>,
    stripe: Stripe,
    client: Client,
}

async fn setup(sru: u64) -> Setup {
    let ids: Vec<ServerId> = (0..N).map(ServerId).collect();
    let stripe = Stripe::fixed_sru("blk", &ids, sru).expect("valid");
    let mut servers = Vec::new();
    let mut addrs = Vec::new();
    for i in 0..N {
        let store = MemStore::new();
        store.insert("blk", vec![i as u8; sru as usize]);
        let s = serve("127.0.0.1:0".parse().unwrap(), store, ServerConfig::default())
            .await
            .expect("bind");
        addrs.push((ServerId(i), s.local_addr()));
        servers.push(s);
    }
    Setup {
        _servers: servers,
        stripe,
        client: Client::new(addrs),
    }
}

/// The subscriber of a variant, for this thread while the guard lives.
fn subscriber(variant: &str) -> Option<tracing::subscriber::DefaultGuard> {
    let level = match variant {
        "no-subscriber" => return None,
        "info-subscriber" => LevelFilter::INFO,
        _ => LevelFilter::DEBUG,
    };
    Some(
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(std::io::sink)
            .finish()
            .set_default(),
    )
}

fn read(rt: &Runtime, st: &Setup) -> usize {
    rt.block_on(st.client.fan_in_read(&st.stripe, &Policy::default()))
        .expect("read")
        .block
        .len()
}

fn bench(c: &mut Criterion) {
    let feature = if cfg!(feature = "tracing") { "on" } else { "off" };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for sru in [4u64 << 10, 256 << 10] {
        let st = rt.block_on(setup(sru));
        let rounds = if sru < 64 << 10 { 2000 } else { 200 };
        let mut took = [Duration::ZERO; VARIANTS.len()];
        for _ in 0..20 {
            black_box(read(&rt, &st)); // warm up: connections, the port's rate
        }
        for _ in 0..rounds {
            for (k, v) in VARIANTS.iter().enumerate() {
                let _guard = subscriber(v);
                let t = Instant::now();
                black_box(read(&rt, &st));
                took[k] += t.elapsed();
            }
        }
        println!(
            "\nfeature tracing {feature}: N = {N}, SRU {} KiB, {rounds} interleaved reads per variant",
            sru >> 10
        );
        println!("{:<18} {:>14} {:>16}", "variant", "us per read", "vs no-subscriber");
        for (k, v) in VARIANTS.iter().enumerate() {
            let us = took[k].as_secs_f64() * 1e6 / rounds as f64;
            let base = took[0].as_secs_f64() * 1e6 / rounds as f64;
            println!("{v:<18} {us:>14.1} {:>16.3}", us / base);
        }
        let mut g = c.benchmark_group(format!("telemetry_{feature}_sru{}k", sru >> 10));
        g.sample_size(30);
        for v in VARIANTS {
            g.bench_with_input(BenchmarkId::from_parameter(v), &v, |b, v| {
                let _guard = subscriber(v);
                b.iter(|| read(&rt, &st))
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
