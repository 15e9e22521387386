//! k-of-n erasure-coded reads end to end on loopback (`Client::erasure_read`).
//!
//! Run: `cargo test --release --test erasure`

use std::time::{Duration, Instant};

use incast::rpc::erasure::{encode, shard_len, ErasureError, ErasureStripe};
use incast::rpc::store::{Delayed, MemStore};
use incast::rpc::{serve, Client, ClientConfig, ServerConfig, ServerHandle};
use incast::{Fragment, Hedging, Policy, ServerId};

struct Ec {
    servers: Vec<Option<ServerHandle>>,
    client: Client,
    stripe: ErasureStripe,
    block: Vec<u8>,
}

/// A `len`-byte block in `k` + `m` shards, shard i on server i; `slow` servers answer late.
async fn ec(len: usize, k: usize, m: usize, slow: &[(usize, Duration)], cfg: ClientConfig) -> Ec {
    let block: Vec<u8> = (0..len).map(|i| (i * 131 + i / 977) as u8).collect();
    let shards = encode(&block, k, m).unwrap();
    let sl = shard_len(len as u64, k).unwrap();
    let mut servers = Vec::new();
    for (i, shard) in shards.into_iter().enumerate() {
        let store = MemStore::new();
        store.insert(format!("blk/{i}"), shard);
        let delay = slow.iter().find(|(s, _)| *s == i).map_or(Duration::ZERO, |(_, d)| *d);
        servers.push(Some(
            serve(
                "127.0.0.1:0".parse().unwrap(),
                Delayed::new(store, delay),
                ServerConfig::default(),
            )
            .await
            .unwrap(),
        ));
    }
    let client = Client::with_config(
        servers
            .iter()
            .enumerate()
            .map(|(i, s)| (ServerId(i as u32), s.as_ref().unwrap().local_addr())),
        cfg,
    );
    let frags = (0..k + m)
        .map(|i| Fragment::new(ServerId(i as u32), format!("blk/{i}"), 0, sl))
        .collect();
    Ec {
        servers,
        client,
        stripe: ErasureStripe::new(len as u64, k, frags).unwrap(),
        block,
    }
}

impl Ec {
    async fn shutdown(self) {
        for s in self.servers.into_iter().flatten() {
            s.shutdown().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_healthy_path_reads_the_data_shards_only() {
    for (len, k, m) in [(6 << 20, 6, 3), (10 << 20, 10, 4), (1_000_003, 6, 3), (1, 2, 1)] {
        let c = ec(len, k, m, &[], ClientConfig::default()).await;
        for _ in 0..3 {
            let out = c.client.erasure_read(&c.stripe, &Policy::default()).await.unwrap();
            assert!(out.block == c.block, "{len} {k}+{m}: block differs");
            let mut used = out.used.clone();
            used.sort_unstable();
            assert_eq!(used, (0..k).collect::<Vec<_>>(), "{len} {k}+{m}");
            assert_eq!(out.parity_requested, 0);
            assert_eq!(out.decode, Duration::ZERO);
            assert_eq!(out.bytes_read, k as u64 * c.stripe.shard_len());
            println!("healthy {len} bytes {k}+{m}: {:?}", out.elapsed);
        }
        c.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_is_covered_by_parity_not_rerequested() {
    let mut c = ec(6 << 20, 6, 3, &[], ClientConfig::default()).await;
    c.servers[2].take().unwrap().shutdown().await;
    let policy = Policy::builder().hedging(Hedging::Off).build().unwrap();
    let out = c.client.erasure_read(&c.stripe, &policy).await.unwrap();
    assert!(out.block == c.block);
    assert!(!out.used.contains(&2));
    assert!(
        out.used.iter().any(|&i| i >= 6),
        "a parity shard was used: {:?}",
        out.used
    );
    assert_eq!(out.parity_requested, 1);
    assert_eq!(out.failures.len(), 1);
    assert_eq!(out.failures[0].0, 2);
    assert!(out.decode > Duration::ZERO);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_is_covered_long_before_the_deadline() {
    let cfg = ClientConfig::builder()
        .read_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    // 10+4, data shard 4 never answers.
    let c = ec(10 << 20, 10, 4, &[(4, Duration::MAX)], cfg).await;
    let t = Instant::now();
    let out = c.client.erasure_read(&c.stripe, &Policy::default()).await.unwrap();
    let took = t.elapsed();
    assert!(out.block == c.block);
    assert!(!out.used.contains(&4));
    assert!(out.parity_requested >= 1);
    assert!(took < Duration::from_secs(2), "covered after {took:?}");
    let shards: Vec<String> = out
        .reports
        .iter()
        .map(|(i, r)| format!("{i}: {:?}", r.elapsed))
        .collect();
    println!(
        "10+4 with a frozen data shard: {took:?}, parity requested {}, decode {:?}; shard reads {}",
        out.parity_requested,
        out.decode,
        shards.join(", ")
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_m_lost_shards_is_a_typed_error() {
    let mut c = ec(6 << 16, 6, 3, &[], ClientConfig::default()).await;
    for i in [0, 3, 7, 8] {
        c.servers[i].take().unwrap().shutdown().await;
    }
    match c.client.erasure_read(&c.stripe, &Policy::default()).await {
        Err(ErasureError::NotEnoughShards { got, need, failures }) => {
            assert_eq!(need, 6);
            assert!(got < 6);
            assert_eq!(failures.len(), 4, "{failures:?}");
        }
        other => panic!("expected NotEnoughShards, got {other:?}"),
    }
    c.shutdown().await;
}

/// The path of `examples/erasure_read.rs`: 6+3 over 9 servers, one killed mid-read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_read_is_covered_by_parity() {
    // Server 2 answers 50 ms late, so it dies with its shard in flight.
    let mut c = ec(
        6 << 20,
        6,
        3,
        &[(2, Duration::from_millis(50))],
        ClientConfig::default(),
    )
    .await;
    let client = std::sync::Arc::new(c.client);
    let stripe = c.stripe.clone();
    let reader = {
        let client = client.clone();
        tokio::spawn(async move { client.erasure_read(&stripe, &Policy::default()).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    c.servers[2].take().unwrap().abort();
    let out = reader.await.unwrap().unwrap();
    assert!(out.block == c.block);
    assert!(!out.used.contains(&2));
    assert!(
        out.used.iter().any(|&i| i >= 6),
        "a parity shard was used: {:?}",
        out.used
    );
    // Shard 2 is covered either when its server dies (a failure) or, if the other shards
    // finish first, as a straggler whose read is dropped (no failure) and then, if the death
    // still lands before the drop, once more: one or two parity shards, never a re-request.
    assert!(out.failures.iter().all(|(i, _)| *i == 2), "{:?}", out.failures);
    assert!((1..=2).contains(&out.parity_requested), "{}", out.parity_requested);
    for s in c.servers.into_iter().flatten() {
        s.shutdown().await;
    }
}
