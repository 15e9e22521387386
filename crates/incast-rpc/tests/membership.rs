//! Live membership on loopback: servers join and leave a running `Client`.
//!
//! Run: `cargo test --release -p incast-rpc --test membership`

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use incast_core::{Fragment, Hedging, Policy, ServerId, Stripe};
use incast_rpc::store::{Delayed, MemStore};
use incast_rpc::{serve, Client, ClientConfig, FanInError, ServerConfig, ServerHandle};

use common::object;

const FRAG: usize = 48 * 1024;

/// The object of fragment `j`: held by server j (primary) and server j+1 mod n (replica).
fn frag_key(j: usize) -> String {
    format!("f{j}")
}

/// Server `i` of `n`, holding fragments i and i-1 (mod n).
async fn replica_server(i: usize, n: usize, delay: Duration) -> ServerHandle {
    let store = MemStore::new();
    for j in [i, (i + n - 1) % n] {
        store.insert(frag_key(j), object(j as u32, FRAG));
    }
    serve(
        "127.0.0.1:0".parse().unwrap(),
        Delayed::new(store, delay),
        ServerConfig::default(),
    )
    .await
    .unwrap()
}

/// `n` replica servers that answer each request after 300 ms, and their ids and addresses.
async fn slow_servers(n: usize) -> (Vec<ServerHandle>, Vec<(ServerId, std::net::SocketAddr)>) {
    let mut hs = Vec::new();
    for i in 0..n {
        hs.push(replica_server(i, n, Duration::from_millis(300)).await);
    }
    let addrs = hs
        .iter()
        .enumerate()
        .map(|(i, h)| (ServerId(i as u32), h.local_addr()))
        .collect();
    (hs, addrs)
}

/// Reads `stripe` in a task; the result and how long the read took.
fn spawn_read(
    client: &Arc<Client>,
    stripe: &Stripe,
    policy: &Policy,
) -> tokio::task::JoinHandle<(Result<incast_rpc::ReadOutput, FanInError>, Duration)> {
    let (client, stripe, policy) = (client.clone(), stripe.clone(), policy.clone());
    tokio::spawn(async move {
        let t = Instant::now();
        (client.fan_in_read(&stripe, &policy).await, t.elapsed())
    })
}

/// Fragment j on server j, without replicas.
fn lone_stripe(n: usize) -> Stripe {
    Stripe::new(
        (0..n)
            .map(|j| Fragment::new(ServerId(j as u32), frag_key(j), 0, FRAG as u64))
            .collect(),
    )
    .unwrap()
}

/// Fragment j on server j, with server j+1 as its replica.
fn replicated_stripe(n: usize) -> Stripe {
    Stripe::new(
        (0..n)
            .map(|j| {
                Fragment::new(ServerId(j as u32), frag_key(j), 0, FRAG as u64)
                    .with_replicas([ServerId(((j + 1) % n) as u32)])
            })
            .collect(),
    )
    .unwrap()
}

fn want(n: usize) -> Vec<u8> {
    (0..n).flat_map(|j| object(j as u32, FRAG)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_keep_succeeding_while_servers_leave_and_join_under_load() {
    let n = 8;
    let mut hs = Vec::new();
    for i in 0..n {
        hs.push(replica_server(i, n, Duration::from_millis(2)).await);
    }
    let cfg = ClientConfig::builder()
        .read_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let client = Arc::new(Client::with_config(
        hs.iter().enumerate().map(|(i, h)| (ServerId(i as u32), h.local_addr())),
        cfg,
    ));
    let stripe = Arc::new(replicated_stripe(n));
    let expected = Arc::new(want(n));
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, removed, unknown) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut readers = Vec::new();
    for _ in 0..4 {
        let (client, stripe, expected, stop) = (client.clone(), stripe.clone(), expected.clone(), stop.clone());
        let (ok, removed, unknown) = (ok.clone(), removed.clone(), unknown.clone());
        readers.push(tokio::spawn(async move {
            let policy = Policy::default();
            while !stop.load(Ordering::Relaxed) {
                match client.fan_in_read(&stripe, &policy).await {
                    Ok(out) => {
                        assert!(out.block == *expected, "a read under churn returned a wrong block");
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    // Both a primary and its replica gone at once: typed, never a wrong block.
                    Err(FanInError::ServerRemoved { .. }) => {
                        removed.fetch_add(1, Ordering::Relaxed);
                    }
                    // Started while a server it names was out.
                    Err(FanInError::UnknownServer { .. }) => {
                        unknown.fetch_add(1, Ordering::Relaxed);
                        // A refusal returns at once: without a pause, 4 readers on 2 workers
                        // spin and starve the runtime's timers.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    Err(e) => panic!("a read under churn failed: {e}"),
                }
            }
        }));
    }
    // Churn: take one server out, let reads run, put it back (every third time at a new
    // address, a fresh server with the same objects).
    let t = Instant::now();
    let mut changes = 0;
    for round in 0..12 {
        let i = (round * 3) % n;
        let id = ServerId(i as u32);
        let addr = client.remove_server(id).expect("a member");
        tokio::time::sleep(Duration::from_millis(40)).await;
        if round % 3 == 2 {
            let fresh = replica_server(i, n, Duration::from_millis(2)).await;
            assert_eq!(client.add_server(id, fresh.local_addr()), None);
            let old = std::mem::replace(&mut hs[i], fresh);
            old.shutdown().await;
        } else {
            assert_eq!(client.add_server(id, addr), None);
        }
        changes += 2;
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.unwrap();
    }
    let (ok, removed, unknown) = (
        ok.load(Ordering::Relaxed),
        removed.load(Ordering::Relaxed),
        unknown.load(Ordering::Relaxed),
    );
    println!(
        "{changes} membership changes in {:?}: {ok} reads whole, {removed} ServerRemoved, {unknown} UnknownServer",
        t.elapsed()
    );
    // One server out at a time and every fragment replicated: no read may fail but those
    // that started while the server was out and named it.
    assert_eq!(
        removed, 0,
        "one server out at a time: its replica covers every fragment"
    );
    assert!(ok >= 20, "too few reads completed under churn: {ok}");
    assert_eq!(client.servers().len(), n);
    // Reads after the churn use the moved servers' new addresses.
    let out = client.fan_in_read(&stripe, &Policy::default()).await.unwrap();
    assert!(out.block == *expected);
    for h in hs {
        h.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_removed_mid_read_fails_the_read_typed_or_its_replica_takes_over() {
    let n = 4;
    // Slow enough that the removal lands while every request is out.
    let (hs, addrs) = slow_servers(n).await;
    // A starting budget that holds every request at once (the default starts at 16 KiB and
    // doubles per round trip, here the servers' 300 ms).
    let receiver = incast_core::receiver::ReceiverConfig::builder()
        .initial_budget((n * FRAG) as u64)
        .build()
        .unwrap();
    let cfg = ClientConfig::builder().receiver(receiver).build().unwrap();
    let client = Arc::new(Client::with_config(addrs.clone(), cfg));
    let policy = Policy::builder().hedging(Hedging::Off).build().unwrap();

    // Without a replica: a typed error naming the server, long before the read's deadline.
    let lone = lone_stripe(n);
    let reader = spawn_read(&client, &lone, &policy);
    tokio::time::sleep(Duration::from_millis(100)).await;
    client.remove_server(ServerId(2)).unwrap();
    let (result, took) = reader.await.unwrap();
    match result {
        Err(FanInError::ServerRemoved { server, fragment }) => assert_eq!((server, fragment), (ServerId(2), 2)),
        other => panic!("expected ServerRemoved naming server 2, got {other:?}"),
    }
    assert!(took < Duration::from_secs(1), "took {took:?}");
    // New reads naming it are refused, typed.
    assert!(matches!(
        client.fan_in_read(&lone, &policy).await,
        Err(FanInError::UnknownServer { server: ServerId(2) })
    ));

    // With a replica: the read moves to it and returns the whole block.
    client.add_server(ServerId(2), addrs[2].1);
    let replicated = replicated_stripe(n);
    let reader = {
        let (client, replicated, policy) = (client.clone(), replicated.clone(), policy.clone());
        tokio::spawn(async move { client.fan_in_read(&replicated, &policy).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    client.remove_server(ServerId(1)).unwrap();
    let out = reader.await.unwrap().expect("the replica of fragment 1 takes over");
    assert!(out.block == want(n));
    assert_eq!(
        out.report.fragments[1].server,
        Some(ServerId(2)),
        "fragment 1 came from its replica"
    );
    for h in hs {
        h.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_server_whose_fragment_was_not_requested_yet_fails_the_read_at_once() {
    // The default client starts its budget at 16 KiB: at first one 16 KiB grant of the
    // first fragment is out, and the last fragment's request is a few of these servers'
    // 300 ms round trips away. Removing that fragment's only server must end the read now.
    let n = 4;
    let (hs, addrs) = slow_servers(n).await;
    let client = Arc::new(Client::with_config(addrs, ClientConfig::default()));
    let policy = Policy::builder().hedging(Hedging::Off).build().unwrap();
    let lone = lone_stripe(n);
    let reader = spawn_read(&client, &lone, &policy);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let removed_at = Instant::now();
    client.remove_server(ServerId(3)).unwrap();
    let (result, took) = reader.await.unwrap();
    let after = removed_at.elapsed();
    match result {
        Err(FanInError::ServerRemoved { server, fragment }) => assert_eq!((server, fragment), (ServerId(3), 3)),
        other => panic!("expected ServerRemoved naming server 3, got {other:?}"),
    }
    // Before the first response (300 ms) came back, let alone the last fragment's turn.
    assert!(
        after < Duration::from_millis(200),
        "ended {after:?} after the removal ({took:?} in all)"
    );
    for h in hs {
        h.shutdown().await;
    }
}
