//! Results as they arrive and reads into the caller's memory, end to end on loopback:
//! `Client::fan_in_read_stream` and `Client::fan_in_read_into`.
//!
//! Run: `cargo test --release -p incast-rpc --test streaming`

mod common;

use std::time::Duration;

use futures_util::StreamExt;
use incast_core::{GrantSize, Hedging, Policy, ServerId};
use incast_rpc::store::MemStore;
use incast_rpc::{serve, Client, ClientConfig, FanInError, ServerConfig, ServerHandle};

use common::{expected, object, stripe_of};

/// `lens.len()` servers, server i storing `lens[i]` bytes of object "blk".
async fn servers(lens: &[usize]) -> (Vec<ServerHandle>, Client) {
    let mut hs = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        let store = MemStore::new();
        store.insert("blk", object(i as u32, len));
        hs.push(
            serve("127.0.0.1:0".parse().unwrap(), store, ServerConfig::default())
                .await
                .unwrap(),
        );
    }
    let addrs = hs.iter().enumerate().map(|(i, h)| (ServerId(i as u32), h.local_addr()));
    let client = Client::with_config(addrs, ClientConfig::default());
    (hs, client)
}

fn staged() -> Policy {
    Policy::builder()
        .max_senders(4)
        .inflight_budget(64 * 1024)
        .grant_size(GrantSize::Chunk { bytes: 16 * 1024 })
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_fragments_arrive_once_whole_and_assemble_the_block() {
    for n in [1usize, 7, 64, 256] {
        // Odd sizes, and every fifth fragment empty.
        let lens: Vec<usize> = (0..n)
            .map(|i| if i % 5 == 4 { 0 } else { (i * 7919 + 13) % 40_000 + 1 })
            .collect();
        let (hs, client) = servers(&lens).await;
        let stripe = stripe_of(&lens);
        let want = expected(&lens);
        for (name, policy) in [
            ("default", Policy::default()),
            ("naive", Policy::naive()),
            ("staged", staged()),
        ] {
            let mut got = vec![None; n];
            let mut last_at = Duration::ZERO;
            let mut results = client.fan_in_read_stream(&stripe, &policy);
            while let Some(f) = results.next().await {
                let f = f.unwrap_or_else(|e| panic!("n={n} {name}: {e}"));
                assert!(got[f.index].is_none(), "n={n} {name}: fragment {} twice", f.index);
                assert_eq!(f.block_range, stripe.block_range(f.index));
                assert_eq!(f.data.len() as u64, f.block_range.end - f.block_range.start);
                let r = f.block_range.start as usize..f.block_range.end as usize;
                assert!(f.data[..] == want[r], "n={n} {name}: fragment {} differs", f.index);
                assert_eq!(f.server.is_some(), !f.data.is_empty(), "n={n} {name}");
                // Completion order.
                assert!(f.at >= last_at, "n={n} {name}: {:?} after {last_at:?}", f.at);
                last_at = f.at;
                got[f.index] = Some(f.data);
            }
            assert!(
                results.report().is_some(),
                "n={n} {name}: a stream that ended well has a report"
            );
            let block: Vec<u8> = got
                .into_iter()
                .enumerate()
                .flat_map(|(i, d)| d.unwrap_or_else(|| panic!("n={n} {name}: fragment {i} missing")))
                .collect();
            assert!(block == want, "n={n} {name}: assembled block differs");
        }
        for h in hs {
            h.shutdown().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_fragment_reaches_the_caller_before_the_last_is_granted() {
    let lens = vec![256 * 1024; 32];
    let (hs, client) = servers(&lens).await;
    let stripe = stripe_of(&lens);
    let policy = staged();
    let mut results = client.fan_in_read_stream(&stripe, &policy);
    let first = results.next().await.unwrap().unwrap();
    let mut n = 1;
    while let Some(f) = results.next().await {
        f.unwrap();
        n += 1;
    }
    assert_eq!(n, 32);
    let report = results.report().unwrap();
    let last_granted = report.fragments.iter().filter_map(|f| f.granted).max().unwrap();
    println!(
        "first fragment after {:?}, last first grant at {last_granted:?}, whole block after {:?}",
        first.at, report.elapsed
    );
    assert!(
        first.at < last_granted,
        "first fragment at {:?}, but every fragment was granted by {last_granted:?}",
        first.at
    );
    for h in hs {
        h.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_fails_yields_one_typed_error_and_ends() {
    let lens = vec![64 * 1024; 4];
    let (mut hs, _) = servers(&lens).await;
    let cfg = ClientConfig::builder()
        .read_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let addrs = hs.iter().enumerate().map(|(i, h)| (ServerId(i as u32), h.local_addr()));
    let client = Client::with_config(addrs, cfg);
    // Server 2 is gone before the read: its fragment cannot be read.
    hs.remove(2).shutdown().await;
    let stripe = stripe_of(&lens);
    let policy = Policy::builder().hedging(Hedging::Off).build().unwrap();
    let mut results = client.fan_in_read_stream(&stripe, &policy);
    let mut errors = 0;
    while let Some(f) = results.next().await {
        match f {
            Ok(f) => assert_ne!(f.index, 2, "the dead server's fragment cannot arrive"),
            Err(FanInError::Failed { .. } | FanInError::Timeout { .. }) => errors += 1,
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!(errors, 1);
    assert!(results.next().await.is_none(), "an ended stream stays ended");
    assert!(results.report().is_none());
    for h in hs {
        h.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_into_the_callers_buffer_is_byte_exact_and_a_wrong_length_is_refused() {
    let lens: Vec<usize> = (0..16).map(|i| 1000 * i + 17).collect();
    let (hs, client) = servers(&lens).await;
    let stripe = stripe_of(&lens);
    let want = expected(&lens);
    for policy in [Policy::default(), Policy::naive(), staged()] {
        let mut buf = bytes::BytesMut::zeroed(want.len());
        // Garbage in the caller's memory must all be overwritten.
        buf.fill(0xa5);
        let report = client.fan_in_read_into(&stripe, &policy, &mut buf).await.unwrap();
        assert!(buf[..] == want[..], "block differs");
        assert_eq!(report.fragments.iter().map(|f| f.bytes).sum::<u64>(), want.len() as u64);
    }
    for len in [0, want.len() - 1, want.len() + 1] {
        let mut buf = vec![0u8; len];
        match client.fan_in_read_into(&stripe, &Policy::default(), &mut buf).await {
            Err(FanInError::BufferLength { len: l, need }) => {
                assert_eq!((l, need), (len as u64, want.len() as u64));
            }
            other => panic!("buffer of {len}: expected BufferLength, got {other:?}"),
        }
        assert!(buf.iter().all(|&b| b == 0), "a refused read writes nothing");
    }
    for h in hs {
        h.shutdown().await;
    }
}
