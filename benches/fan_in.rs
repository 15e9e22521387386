//! `fan_in_read` against a naive tokio fan-out on loopback, same servers, same wire format.
//!
//! Run: `cargo bench --bench fan_in`
//!
//! N = 16 and 64 in-process servers, SRU = 256 KiB (fixed SRU: 4 and 16 MiB blocks).
//! Strategies, side by side on the same servers:
//! - `naive-fanout`: what an application writes without this library: one task per server,
//!   one request per fragment, `read_exact` of every frame into that fragment's own buffer
//!   (no assembly into one block, which flatters it);
//! - `fan_in-naive`: `fan_in_read` with `Policy::naive()` (all fragments at once, whole);
//! - `fan_in-default`: `fan_in_read` with `Policy::default()`;
//! - `fan_in-default-noqa`: the same without re-arming TCP_QUICKACK after every read;
//! - `fan_in-budget-1m`: B = 1 MiB in 256 KiB grants. The default B = 64 KiB is sized for a
//!   shallow switch port; on loopback it caps throughput at B / request round trip.
//!
//! Loopback has no shallow buffer, so there is no incast here: this measures the library's
//! overhead. Before criterion runs, the bench prints throughput and process CPU time per GiB
//! (user + system of the whole process, servers included, from /proc/self/stat) over a fixed
//! number of reads, and the ratios against `naive-fanout`.

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use incast::rpc::wire::{Frame, Header, Kind, HEADER_LEN};
use incast::rpc::{serve, Client, ClientConfig, MemStore, ServerConfig, ServerHandle};
use incast::{GrantSize, Policy, ServerId, Stripe};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::runtime::Runtime;
use tokio::sync::Mutex;

const SRU: u64 = 256 * 1024;

struct Setup {
    _servers: Vec<ServerHandle>,
    stripe: Stripe,
    client: Client,
    client_noqa: Client,
    naive: Arc<Vec<Mutex<TcpStream>>>,
}

async fn setup(n: u32) -> Setup {
    let ids: Vec<ServerId> = (0..n).map(ServerId).collect();
    let stripe = Stripe::fixed_sru("blk", &ids, SRU).expect("valid");
    let mut servers = Vec::new();
    let mut addrs: Vec<(ServerId, SocketAddr)> = Vec::new();
    for i in 0..n {
        let store = MemStore::new();
        store.insert("blk", vec![i as u8; SRU as usize]);
        let s = serve("127.0.0.1:0".parse().unwrap(), store, ServerConfig::default())
            .await
            .expect("bind");
        addrs.push((ServerId(i), s.local_addr()));
        servers.push(s);
    }
    let mut naive = Vec::new();
    for (_, a) in &addrs {
        let s = TcpStream::connect(a).await.expect("connect");
        s.set_nodelay(true).expect("nodelay");
        naive.push(Mutex::new(s));
    }
    let noqa = ClientConfig::builder().rearm_quickack(false).build().expect("valid");
    Setup {
        _servers: servers,
        stripe,
        client: Client::new(addrs.clone()),
        client_noqa: Client::with_config(addrs, noqa),
        naive: Arc::new(naive),
    }
}

/// One naive read: a task per server, `read_exact` of each frame into the fragment's buffer.
async fn naive_read(conns: Arc<Vec<Mutex<TcpStream>>>) -> usize {
    let tasks: Vec<_> = (0..conns.len())
        .map(|i| {
            let conns = conns.clone();
            tokio::spawn(async move {
                let mut s = conns[i].lock().await;
                let mut req = Vec::new();
                Frame::Request {
                    id: 1,
                    key: "blk".into(),
                    offset: 0,
                    len: SRU,
                    pace: None,
                }
                .encode(&mut req);
                s.write_all(&req).await.expect("write");
                let mut frag = vec![0u8; SRU as usize];
                let mut at = 0;
                let mut head = [0u8; HEADER_LEN];
                loop {
                    s.read_exact(&mut head).await.expect("header");
                    let h = Header::decode(&head).expect("valid header");
                    match h.kind {
                        Kind::Data => {
                            s.read_exact(&mut frag[at..at + h.len as usize]).await.expect("data");
                            at += h.len as usize;
                        }
                        Kind::End => {
                            let mut rest = vec![0u8; h.len as usize];
                            s.read_exact(&mut rest).await.expect("end");
                            break;
                        }
                        k => panic!("unexpected {k:?}"),
                    }
                }
                black_box(frag).len()
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    total
}

fn cpu_seconds() -> f64 {
    // utime and stime, fields 14 and 15 of /proc/self/stat, in clock ticks (100 per second
    // on Linux).
    let stat = std::fs::read_to_string("/proc/self/stat").expect("procfs");
    let after_comm = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = after_comm.split_whitespace().collect();
    (f[11].parse::<f64>().expect("utime") + f[12].parse::<f64>().expect("stime")) / 100.0
}

async fn one(st: &Setup, which: &str) -> usize {
    match which {
        "naive-fanout" => naive_read(st.naive.clone()).await,
        "fan_in-naive" => st
            .client
            .fan_in_read(&st.stripe, &Policy::naive())
            .await
            .expect("read")
            .block
            .len(),
        "fan_in-default" => st
            .client
            .fan_in_read(&st.stripe, &Policy::default())
            .await
            .expect("read")
            .block
            .len(),
        "fan_in-budget-1m" => st
            .client
            .fan_in_read(&st.stripe, &budget_1m())
            .await
            .expect("read")
            .block
            .len(),
        "fan_in-default-noqa" => st
            .client_noqa
            .fan_in_read(&st.stripe, &Policy::default())
            .await
            .expect("read")
            .block
            .len(),
        _ => unreachable!(),
    }
}

const STRATEGIES: [&str; 5] = [
    "naive-fanout",
    "fan_in-naive",
    "fan_in-default",
    "fan_in-default-noqa",
    "fan_in-budget-1m",
];

/// B = 1 MiB in 256 KiB grants: a budget sized for a fast path instead of a shallow port.
fn budget_1m() -> Policy {
    Policy::builder()
        .inflight_budget(1 << 20)
        .grant_size(GrantSize::Chunk { bytes: 256 << 10 })
        .build()
        .expect("valid")
}

fn bench(c: &mut Criterion) {
    let rt = Runtime::new().expect("runtime");
    for n in [16u32, 64] {
        let st = rt.block_on(setup(n));
        let block = st.stripe.block_len();
        // Side-by-side summary: interleaved rounds so that drift hits every strategy alike.
        let reads = (256 << 20) / block as usize; // 256 MiB per strategy
        let mut wall = [Duration::ZERO; STRATEGIES.len()];
        let mut cpu = [0f64; STRATEGIES.len()];
        for w in STRATEGIES {
            rt.block_on(one(&st, w)); // warm up: connections, slow start
        }
        for _ in 0..reads {
            for (k, w) in STRATEGIES.iter().enumerate() {
                let (t, c0) = (Instant::now(), cpu_seconds());
                assert_eq!(rt.block_on(one(&st, w)), block as usize);
                wall[k] += t.elapsed();
                cpu[k] += cpu_seconds() - c0;
            }
        }
        let gib = (reads as f64 * block as f64) / (1u64 << 30) as f64;
        println!(
            "\nN = {n}, SRU 256 KiB, {reads} reads of {} MiB per strategy",
            block >> 20
        );
        println!(
            "{:<22} {:>10} {:>12} {:>14} {:>12}",
            "strategy", "Gbit/s", "vs naive", "CPU s / GiB", "vs naive"
        );
        let base = (gib * 8.0 * 1.073_741_824 / wall[0].as_secs_f64(), cpu[0] / gib);
        for (k, w) in STRATEGIES.iter().enumerate() {
            let gbps = gib * 8.0 * 1.073_741_824 / wall[k].as_secs_f64();
            let cpg = cpu[k] / gib;
            println!(
                "{w:<22} {gbps:>10.2} {:>12.2} {cpg:>14.2} {:>12.2}",
                gbps / base.0,
                cpg / base.1
            );
        }
        let mut g = c.benchmark_group(format!("fan_in_n{n}"));
        g.throughput(Throughput::Bytes(block));
        g.sample_size(20);
        for w in STRATEGIES {
            g.bench_with_input(BenchmarkId::new(w, n), &w, |b, w| b.iter(|| rt.block_on(one(&st, w))));
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
