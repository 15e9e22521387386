//! A 6+3 erasure-coded block over 9 in-process servers, read k-of-n while one server is
//! killed mid-read.
//!
//! Run: `cargo run --release --example erasure_read --features erasure`
//!
//! The block (24 MiB) is cut into 6 data shards and 3 parity shards of 4 MiB, shard i on
//! server i. The healthy read takes the 6 data shards only. Then server 2 (a data shard)
//! dies while a read is in flight: its shard is covered by a parity shard, not re-requested,
//! and the block is rebuilt byte for byte.
use std::time::Duration;

use incast::rpc::erasure::{encode, shard_len, ErasureStripe};
use incast::rpc::store::MemStore;
use incast::rpc::{serve, Client, ServerConfig};
use incast::{Fragment, Policy, ServerId};

const K: usize = 6;
const M: usize = 3;
const BLOCK: usize = 24 << 20;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let block: Vec<u8> = (0..BLOCK).map(|i| (i * 7 + i / 4099) as u8).collect();
    let shards = encode(&block, K, M)?;
    let len = shard_len(BLOCK as u64, K)?;
    let mut servers = Vec::new();
    for (i, shard) in shards.into_iter().enumerate() {
        let store = MemStore::new();
        store.insert(format!("blk/{i}"), shard);
        servers.push(Some(
            serve("127.0.0.1:0".parse()?, store, ServerConfig::default()).await?,
        ));
    }
    let client = std::sync::Arc::new(Client::new(
        servers
            .iter()
            .enumerate()
            .map(|(i, s)| (ServerId(i as u32), s.as_ref().expect("running").local_addr())),
    ));
    let stripe = ErasureStripe::new(
        BLOCK as u64,
        K,
        (0..K + M)
            .map(|i| Fragment::new(ServerId(i as u32), format!("blk/{i}"), 0, len))
            .collect(),
    )?;
    let policy = Policy::default();

    let out = client.erasure_read(&stripe, &policy).await?;
    assert!(out.block == block);
    println!(
        "healthy: {} MiB in {:?}, shards used {:?}, {} parity requested, {} MiB read",
        out.block.len() >> 20,
        out.elapsed,
        out.used,
        out.parity_requested,
        out.bytes_read >> 20
    );

    // Kill server 2 while the next read is in flight.
    let reader = {
        let (client, stripe, policy) = (client.clone(), stripe.clone(), policy.clone());
        tokio::spawn(async move { client.erasure_read(&stripe, &policy).await })
    };
    tokio::time::sleep(Duration::from_millis(2)).await;
    servers[2].take().expect("running").abort();
    let out = reader.await??;
    assert!(out.block == block, "the rebuilt block differs");
    println!(
        "server 2 killed mid-read: {} MiB in {:?}, shards used {:?}, {} parity requested, decode {:?} ({:.2} ms per MiB); failures: {}",
        out.block.len() >> 20,
        out.elapsed,
        out.used,
        out.parity_requested,
        out.decode,
        out.decode.as_secs_f64() * 1e3 / (BLOCK >> 20) as f64,
        out.failures.iter().map(|(i, e)| format!("shard {i}: {e}")).collect::<Vec<_>>().join("; ")
    );
    for s in servers.into_iter().flatten() {
        s.shutdown().await;
    }
    Ok(())
}
