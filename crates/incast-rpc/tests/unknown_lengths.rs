//! Fragments whose length only the server knows, end to end on loopback: query answers
//! (`Fragment::query`, a `QueryHandler` on the server) and objects read to their end
//! (`Fragment::up_to`). Sizes from 0 to several MiB, 1 to 256 servers, byte-exact; servers
//! that claim more than the maximum, honestly or not; the handler runs once per query.
//!
//! Run: `cargo test --release -p incast-rpc --test unknown_lengths`

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use incast_core::{Fragment, GrantSize, Policy, ServerId, Stripe};
use incast_rpc::store::{MemStore, QueryFn, StoreError, WithQueries};
use incast_rpc::wire::{self, Frame};
use incast_rpc::{serve, Client, FanInError, ServerConfig, ServerHandle};

/// The answer of shard `shard` to `query`: its length is in the query (`"len:<n>"`), its bytes
/// depend on the shard and the position. The client never sees the length beforehand.
fn answer(shard: u32, query: &[u8]) -> Vec<u8> {
    let q = std::str::from_utf8(query).expect("utf-8 query");
    let n: usize = q.strip_prefix("len:").expect("len:<n>").parse().expect("a number");
    (0..n)
        .map(|j| (shard.wrapping_mul(37) as usize ^ j.wrapping_mul(13) ^ (j >> 11)) as u8)
        .collect()
}

type Handler = Box<dyn Fn(&str, &[u8], u64) -> Result<Bytes, StoreError> + Send + Sync>;
type Shard = WithQueries<MemStore, QueryFn<Handler>>;

/// A shard: a store with object "log" of `log` bytes, answering queries; counts handler runs.
fn shard(i: u32, log: usize, calls: Arc<AtomicUsize>) -> Shard {
    let store = MemStore::new();
    store.insert("log", answer(i, format!("len:{log}").as_bytes()));
    let handler: Handler = Box::new(move |_key, q, _limit| {
        calls.fetch_add(1, Ordering::Relaxed);
        Ok(Bytes::from(answer(i, q)))
    });
    WithQueries::new(store, QueryFn(handler))
}

async fn cluster(logs: &[usize], calls: &Arc<AtomicUsize>) -> (Vec<ServerHandle>, Client) {
    let mut hs = Vec::new();
    for (i, &log) in logs.iter().enumerate() {
        let s = shard(i as u32, log, calls.clone());
        hs.push(
            serve("127.0.0.1:0".parse().unwrap(), s, ServerConfig::default())
                .await
                .unwrap(),
        );
    }
    let addrs: Vec<_> = hs
        .iter()
        .enumerate()
        .map(|(i, h)| (ServerId(i as u32), h.local_addr()))
        .collect();
    (hs, Client::new(addrs))
}

fn policy() -> Policy {
    Policy::builder()
        .max_senders(16)
        .inflight_budget(256 * 1024)
        .grant_size(GrantSize::Chunk { bytes: 32 * 1024 })
        .pipeline_depth(2)
        .build()
        .unwrap()
}

/// Sizes 0 to `max`, with 0, 1, the chunk size and its neighbours, and `max` itself among them.
fn sizes(n: usize, max: usize) -> Vec<usize> {
    let special = [0, 1, 32 * 1024 - 1, 32 * 1024, 32 * 1024 + 1, max];
    (0..n)
        .map(|i| match i % 7 {
            k if k < special.len() && i < 14 => special[k].min(max),
            _ => (i * 104_729 + 7) % (max + 1),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_answers_of_unknown_size_arrive_byte_exact_at_1_to_256_servers() {
    for (n, max) in [
        (1usize, 5 << 20),
        (3, 3 << 20),
        (16, 1 << 20),
        (64, 100_000),
        (256, 20_000),
    ] {
        let calls = Arc::new(AtomicUsize::new(0));
        let (hs, client) = cluster(&vec![0; n], &calls).await;
        let lens = sizes(n, max);
        let stripe = Stripe::new(
            lens.iter()
                .enumerate()
                .map(|(i, l)| Fragment::query(ServerId(i as u32), "idx", format!("len:{l}").into_bytes(), max as u64))
                .collect(),
        )
        .unwrap();
        let out = client.fan_in_read(&stripe, &policy()).await.unwrap();
        let want: Vec<u8> = lens
            .iter()
            .enumerate()
            .flat_map(|(i, l)| answer(i as u32, format!("len:{l}").as_bytes()))
            .collect();
        assert_eq!(out.block.len(), want.len(), "n={n}");
        assert!(out.block == want, "n={n}: block differs");
        let got: Vec<usize> = out.report.fragments.iter().map(|f| f.bytes as usize).collect();
        assert_eq!(got, lens, "n={n}");
        // Long answers take several requests; the server computed each once (it caches),
        // but for a hedge or retry sent before the first answer was ready.
        let st = out.report.stats;
        let runs = calls.load(Ordering::Relaxed) as u64;
        assert!(
            runs >= n as u64 && runs <= n as u64 + st.hedges + st.retries,
            "n={n}: {runs} handler runs for {} grants, {} hedges",
            st.grants,
            st.hedges
        );
        for h in hs {
            h.shutdown().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_read_in_many_requests_is_computed_once() {
    let calls = Arc::new(AtomicUsize::new(0));
    let s = shard(0, 0, calls.clone());
    let h = serve("127.0.0.1:0".parse().unwrap(), s, ServerConfig::default())
        .await
        .unwrap();
    // One read alone under its policy: 32 KiB grants, so a 3 MiB answer takes about 96.
    let config = incast_rpc::ClientConfig::builder()
        .sharing(incast_rpc::Sharing::PerRead)
        .build()
        .unwrap();
    let client = Client::with_config([(ServerId(0), h.local_addr())], config);
    let q = b"len:3145728".to_vec();
    let stripe = Stripe::new(vec![Fragment::query(ServerId(0), "idx", q.clone(), 4 << 20)]).unwrap();
    let out = client.fan_in_read(&stripe, &policy()).await.unwrap();
    assert!(out.block == answer(0, &q));
    let st = out.report.stats;
    let runs = calls.load(Ordering::Relaxed) as u64;
    assert!(st.grants >= 90, "{} grants", st.grants);
    assert!(
        runs <= 1 + st.hedges + st.retries,
        "{runs} handler runs for {} grants",
        st.grants
    );
    h.shutdown().await;
    // Without the cache, every request runs the handler again.
    let calls = Arc::new(AtomicUsize::new(0));
    let s = shard(0, 0, calls.clone());
    let uncached = ServerConfig::builder().answer_cache_bytes(0).build().unwrap();
    let h = serve("127.0.0.1:0".parse().unwrap(), s, uncached).await.unwrap();
    client.add_server(ServerId(0), h.local_addr());
    let out = client.fan_in_read(&stripe, &policy()).await.unwrap();
    assert!(out.block == answer(0, &q));
    // (A request cancelled by a hedge before it is served runs nothing.)
    let runs = calls.load(Ordering::Relaxed) as u64;
    assert!(
        runs + out.report.stats.hedges >= out.report.stats.grants && runs >= 45,
        "{runs} runs"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_read_to_their_end_and_streamed_as_they_complete() {
    let logs = [0usize, 1, 70_000, 3 << 20, 12_345, 40_000];
    let calls = Arc::new(AtomicUsize::new(0));
    let (hs, client) = cluster(&logs, &calls).await;
    // From offset 100 to the end, at most 4 MiB: the 0- and 1-byte logs end before 100.
    let stripe = Stripe::new(
        (0..logs.len())
            .map(|i| Fragment::up_to(ServerId(i as u32), "log", 100, 4 << 20))
            .collect(),
    )
    .unwrap();
    let policy = policy();
    let mut s = client.fan_in_read_stream(&stripe, &policy);
    let mut seen = vec![false; logs.len()];
    while let Some(f) = s.next().await {
        let f = f.unwrap();
        let full = answer(f.index as u32, format!("len:{}", logs[f.index]).as_bytes());
        let want = &full[full.len().min(100)..];
        assert!(f.data[..] == *want, "fragment {}", f.index);
        assert_eq!(f.block_range.end - f.block_range.start, want.len() as u64);
        assert!(
            !std::mem::replace(&mut seen[f.index], true),
            "fragment {} twice",
            f.index
        );
    }
    assert!(seen.iter().all(|&s| s));
    assert_eq!(calls.load(Ordering::Relaxed), 0);
    // Into a caller's buffer: refused, typed, before anything is sent.
    let mut buf = vec![0u8; 10];
    assert!(matches!(
        client.fan_in_read_into(&stripe, &policy, &mut buf).await,
        Err(FanInError::UnknownLengths)
    ));
    for h in hs {
        h.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_the_maximum_is_a_typed_error_or_moves_to_a_replica() {
    let calls = Arc::new(AtomicUsize::new(0));
    let (hs, client) = cluster(&[0, 0, 0], &calls).await;
    let q = |l: usize| format!("len:{l}").into_bytes();
    // Server 1's answer (2000 bytes) is over the maximum of 1000: the server refuses it.
    let stripe = Stripe::new(vec![
        Fragment::query(ServerId(0), "idx", q(500), 1000),
        Fragment::query(ServerId(1), "idx", q(2000), 1000),
    ])
    .unwrap();
    match client.fan_in_read(&stripe, &policy()).await {
        Err(FanInError::FragmentTooLarge {
            fragment: 1,
            server: ServerId(1),
            max: 1000,
            announced: None,
        }) => {}
        other => panic!("want FragmentTooLarge, got {other:?}"),
    }
    // A server without a query handler says so, typed, and the read names it.
    let plain = serve("127.0.0.1:0".parse().unwrap(), MemStore::new(), ServerConfig::default())
        .await
        .unwrap();
    client.add_server(ServerId(9), plain.local_addr());
    let stripe = Stripe::new(vec![Fragment::query(ServerId(9), "idx", q(5), 10)]).unwrap();
    let err = client.fan_in_read(&stripe, &policy()).await.unwrap_err().to_string();
    assert!(err.contains("Unsupported") && err.contains("queries"), "{err}");
    // The client stays usable, and a fragment within its maximum still reads.
    let stripe = Stripe::new(vec![Fragment::query(ServerId(2), "idx", q(999), 1000)]).unwrap();
    let out = client.fan_in_read(&stripe, &policy()).await.unwrap();
    assert_eq!(out.block, answer(2, &q(999)));
    plain.shutdown().await;
    for h in hs {
        h.shutdown().await;
    }
}

/// A server that lies: it answers every open request with a `Length` of `claim` bytes.
fn liar(claim: u64) -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { return };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    match wire::decode(&buf) {
                        Ok(Some((frame, used))) => {
                            buf.drain(..used);
                            if let Frame::OpenRequest { id, .. } = frame {
                                let mut out = Vec::new();
                                Frame::Length { id, size: claim }.encode(&mut out);
                                if c.write_all(&out).is_err() {
                                    return;
                                }
                            }
                        }
                        Ok(None) => match c.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        },
                        Err(_) => return,
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_claims_more_than_the_maximum_fails_only_its_request() {
    let calls = Arc::new(AtomicUsize::new(0));
    let (hs, client) = cluster(&[0, 0], &calls).await;
    client.add_server(ServerId(7), liar(1 << 40));
    let q = |l: usize| format!("len:{l}").into_bytes();
    // The liar is the primary of fragment 1; server 1 is its replica: the read goes on.
    let stripe = Stripe::new(vec![
        Fragment::query(ServerId(0), "idx", q(70_000), 100_000),
        Fragment::query(ServerId(7), "idx", q(50_000), 100_000).with_replicas([ServerId(1)]),
    ])
    .unwrap();
    let out = client.fan_in_read(&stripe, &policy()).await.unwrap();
    let want: Vec<u8> = [answer(0, &q(70_000)), answer(1, &q(50_000))].concat();
    assert!(out.block == want);
    assert_eq!(out.report.fragments[1].server, Some(ServerId(1)));
    assert_eq!(out.report.stats.retries, 1);
    // With no replica the read fails, typed, naming what the server announced.
    let stripe = Stripe::new(vec![
        Fragment::query(ServerId(0), "idx", q(10), 100),
        Fragment::query(ServerId(7), "idx", q(10), 100),
    ])
    .unwrap();
    match client.fan_in_read(&stripe, &policy()).await {
        Err(FanInError::FragmentTooLarge {
            fragment: 1,
            server: ServerId(7),
            max: 100,
            announced: Some(a),
        }) => assert_eq!(a, 1 << 40),
        other => panic!("want FragmentTooLarge, got {other:?}"),
    }
    for h in hs {
        h.shutdown().await;
    }
}
