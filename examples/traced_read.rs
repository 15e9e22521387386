//! A service's view of its reads through `tracing`: one span per read, with events for
//! hedges, retries, failed requests and port budget changes.
//!
//! Run: `cargo run --release --example traced_read`
//!
//! Eight in-process servers hold a 2 MiB block, each fragment also on the next server. Server
//! 3 answers 30 ms late, so the first reads hedge its fragment; then server 5 leaves the
//! client mid-read and its fragment moves to its replica. The subscriber prints every span
//! when it closes (with its fields and time) and every event at DEBUG and above.
use std::time::Duration;

use incast::rpc::store::{Delayed, MemStore};
use incast::rpc::{serve, Client, ServerConfig};
use incast::{Fragment, Policy, RtoBounds, ServerId, Stripe};
use tracing_subscriber::fmt::format::FmtSpan;

const N: u32 = 8;
const FRAG: u64 = 256 * 1024;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::DEBUG)
        .with_span_events(FmtSpan::CLOSE)
        .with_target(false)
        .with_ansi(false)
        .init();
    let stripe = Stripe::new(
        (0..N)
            .map(|j| Fragment::new(ServerId(j), format!("f{j}"), 0, FRAG).with_replicas([ServerId((j + 1) % N)]))
            .collect(),
    )?;
    let mut servers = Vec::new();
    for i in 0..N {
        let store = MemStore::new();
        for j in [i, (i + N - 1) % N] {
            store.insert(format!("f{j}"), vec![j as u8; FRAG as usize]);
        }
        let delay = Duration::from_millis(if i == 3 { 30 } else { 0 });
        servers.push(
            serve(
                "127.0.0.1:0".parse()?,
                Delayed::new(store, delay),
                ServerConfig::default(),
            )
            .await?,
        );
    }
    let client = std::sync::Arc::new(Client::new(
        servers
            .iter()
            .enumerate()
            .map(|(i, s)| (ServerId(i as u32), s.local_addr())),
    ));
    // Short RTO bounds, so a 30 ms answer is a stall worth a hedge on loopback.
    let policy = Policy::builder()
        .rto(RtoBounds::new(
            Duration::from_millis(5),
            Duration::from_millis(2),
            Duration::from_millis(50),
        )?)
        .build()?;
    for _ in 0..2 {
        client.fan_in_read(&stripe, &policy).await?;
    }
    // Server 5 leaves while a read waits on server 3: its fragment moves to server 6.
    let reader = {
        let (client, stripe, policy) = (client.clone(), stripe.clone(), policy.clone());
        tokio::spawn(async move { client.fan_in_read(&stripe, &policy).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    client.remove_server(ServerId(5));
    let out = reader.await??;
    println!(
        "block of {} bytes, fragment 5 from {:?}; client counters: {:?}",
        out.block.len(),
        out.report.fragments[5].server,
        client.counters()
    );
    Ok(())
}
