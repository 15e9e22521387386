//! What a service's `tracing` subscriber sees of its reads (feature `tracing`, on by default):
//! the path of `examples/traced_read.rs`, with the output captured and checked.
//!
//! Run: `cargo test --release --test telemetry`
#![cfg(feature = "tracing")]

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use incast::rpc::store::{Delayed, MemStore};
use incast::rpc::{serve, Client, ServerConfig};
use incast::{Fragment, Policy, RtoBounds, ServerId, Stripe};
use tracing_subscriber::util::SubscriberInitExt;

/// What the subscriber wrote.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

const N: u32 = 8;
const FRAG: u64 = 64 * 1024;

// A current-thread runtime: the subscriber set for this thread sees the servers and reads.
#[tokio::test]
async fn a_read_leaves_a_span_with_its_hedges_retries_and_end() {
    let out = Captured::default();
    let writer = out.clone();
    let _guard = tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish()
        .set_default();

    let stripe = Stripe::new(
        (0..N)
            .map(|j| Fragment::new(ServerId(j), format!("f{j}"), 0, FRAG).with_replicas([ServerId((j + 1) % N)]))
            .collect(),
    )
    .unwrap();
    let mut servers = Vec::new();
    for i in 0..N {
        let store = MemStore::new();
        for j in [i, (i + N - 1) % N] {
            store.insert(format!("f{j}"), vec![j as u8; FRAG as usize]);
        }
        let delay = Duration::from_millis(if i == 3 { 40 } else { 0 });
        servers.push(
            serve(
                "127.0.0.1:0".parse().unwrap(),
                Delayed::new(store, delay),
                ServerConfig::default(),
            )
            .await
            .unwrap(),
        );
    }
    let client = Client::new(
        servers
            .iter()
            .enumerate()
            .map(|(i, s)| (ServerId(i as u32), s.local_addr())),
    );
    let rto = RtoBounds::new(
        Duration::from_millis(5),
        Duration::from_millis(2),
        Duration::from_millis(50),
    )
    .unwrap();
    let policy = Policy::builder().rto(rto).build().unwrap();
    client.fan_in_read(&stripe, &policy).await.unwrap();
    // Server 0 lacks "f1": the request fails, and the read retries on server 1, which has it.
    let moved = Stripe::new(vec![
        Fragment::new(ServerId(0), "f1", 0, FRAG).with_replicas([ServerId(1)])
    ])
    .unwrap();
    client.fan_in_read(&moved, &policy).await.unwrap();
    // No server has "gone": the read fails, and says so at INFO.
    let gone = Stripe::new(vec![Fragment::new(ServerId(0), "gone", 0, FRAG)]).unwrap();
    assert!(client.fan_in_read(&gone, &policy).await.is_err());

    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let has = |s: &str| text.lines().any(|l| l.contains(s));
    assert!(
        has("fan_in_read{key=\"f0\" fragments=8 bytes=524288 servers=8"),
        "{text}"
    );
    assert!(
        has("hedge issued fragment=3"),
        "the late server's fragment is hedged:\n{text}"
    );
    assert!(has("port budget changed"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("read done") && l.contains("elapsed_us=") && l.contains("hedges=")),
        "the span records the read's end:\n{text}"
    );
    assert!(
        has("request failed") && has("retry issued fragment=0 server=server 1"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("INFO") && l.contains("key=\"gone\"") && l.contains("read failed")),
        "{text}"
    );
    for s in servers {
        s.shutdown().await;
    }
}
