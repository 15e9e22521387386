//! End-to-end tests of the TCP transport on loopback: in-process servers, real sockets.
//!
//! Run: `cargo test --release -p incast-rpc --test loopback`

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use incast_core::{Fragment, GrantSize, Hedging, Policy, ReadError, RtoBounds, ServerId, Stripe};
use incast_rpc::store::{Delayed, MemStore};
use incast_rpc::wire::{decode, ErrorCode, Frame, Header, Kind, StartCounters, TcpCounters, HEADER_LEN};
use incast_rpc::{serve, Client, ClientConfig, FanInError, LateCounters, ServerConfig, ServerHandle, Sharing};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::{expected, object, stripe_of};

struct Cluster {
    servers: Vec<ServerHandle>,
    client: Client,
}

/// `n` servers; server i stores `lens[i]` bytes of object "blk" (the pattern of i); the
/// servers listed in `gates` get that delay (Duration::MAX = never answer).
async fn cluster(lens: &[usize], gates: &[(u32, Duration)], cfg: ClientConfig) -> Cluster {
    let mut servers = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        let store = MemStore::new();
        store.insert("blk", object(i as u32, len));
        let delay = gates.iter().find(|(s, _)| *s == i as u32).map(|(_, d)| *d);
        let h = serve(
            "127.0.0.1:0".parse().unwrap(),
            Delayed::new(store, delay.unwrap_or(Duration::ZERO)),
            ServerConfig::default(),
        )
        .await
        .unwrap();
        servers.push(h);
    }
    let addrs = servers
        .iter()
        .enumerate()
        .map(|(i, h)| (ServerId(i as u32), h.local_addr()));
    Cluster {
        client: Client::with_config(addrs, cfg),
        servers,
    }
}

/// RTO bounds (initial, min, max) for tests that want hedges to fire fast.
fn rto(initial: Duration, min: Duration, max: Duration) -> RtoBounds {
    RtoBounds::new(initial, min, max).unwrap()
}

fn policies() -> Vec<(&'static str, Policy)> {
    vec![
        ("default", Policy::default()),
        ("naive", Policy::naive()),
        (
            "small chunks",
            Policy::builder()
                .max_senders(3)
                .inflight_budget(10_000)
                .grant_size(GrantSize::Chunk { bytes: 1_000 })
                .pipeline_depth(2)
                .build()
                .unwrap(),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_byte_of_every_block_matches_the_stores() {
    for n in [1usize, 2, 7, 16, 64, 256] {
        // Odd sizes, and every fifth fragment empty.
        let lens: Vec<usize> = (0..n)
            .map(|i| if i % 5 == 4 { 0 } else { (i * 7919 + 13) % 40_000 + 1 })
            .collect();
        let c = cluster(&lens, &[], ClientConfig::default()).await;
        let stripe = stripe_of(&lens);
        let want = expected(&lens);
        for (name, policy) in policies() {
            for round in 0..2 {
                let out = c
                    .client
                    .fan_in_read(&stripe, &policy)
                    .await
                    .unwrap_or_else(|e| panic!("n={n} {name}: {e}"));
                assert_eq!(out.block.len(), want.len());
                assert!(out.block == want, "n={n} {name} round {round}: block differs");
                let bytes: u64 = out.report.fragments.iter().map(|f| f.bytes).sum();
                assert_eq!(bytes, want.len() as u64);
                assert_eq!(out.report.checksum_failures, 0);
            }
        }
        // The second rounds reused pooled connections.
        assert!(c.client.idle_connections() >= lens.iter().filter(|&&l| l > 0).count());
        for s in c.servers {
            s.shutdown().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_read_is_named_within_the_deadline() {
    let lens = vec![256 * 1024; 8];
    let cfg = ClientConfig::builder()
        .read_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut c = cluster(&lens, &[(3, Duration::from_millis(300))], cfg).await;
    let stripe = stripe_of(&lens);
    let victim = c.servers.remove(3);
    let client = Arc::new(c.client);
    let reader = {
        let client = client.clone();
        tokio::spawn(async move {
            let policy = Policy::builder().hedging(Hedging::Off).build().unwrap();
            let t = Instant::now();
            (client.fan_in_read(&stripe, &policy).await, t.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    victim.abort();
    let (result, took) = reader.await.unwrap();
    match result {
        Err(FanInError::Failed {
            source: ReadError::ServerFailed { server, fragment, .. },
            cause,
        }) => {
            assert_eq!((server, fragment), (ServerId(3), 3));
            assert!(cause.contains("server 3"), "{cause}");
        }
        other => panic!("expected a failure naming server 3, got {other:?}"),
    }
    assert!(took < Duration::from_secs(5), "{took:?}");
}

/// A proxy in front of `server` whose first connection is reset (SO_LINGER 0: the kernel
/// sends RST) once `after` bytes of the server's answers went through it; later
/// connections pass whole. Returns its address.
async fn resetting_proxy(server: std::net::SocketAddr, after: usize) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut client, _)) = listener.accept().await {
            let Ok(mut upstream) = TcpStream::connect(server).await else {
                return;
            };
            let reset = std::mem::take(&mut first);
            if reset {
                socket2::SockRef::from(&client)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
            }
            tokio::spawn(async move {
                let (mut up, mut down) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
                let mut sent = 0;
                loop {
                    tokio::select! {
                        r = client.read(&mut up) => match r {
                            Ok(n) if n > 0 => {
                                if upstream.write_all(&up[..n]).await.is_err() {
                                    break;
                                }
                            }
                            _ => break,
                        },
                        r = upstream.read(&mut down) => match r {
                            Ok(n) if n > 0 => {
                                let n = if reset { n.min(after - sent) } else { n };
                                if client.write_all(&down[..n]).await.is_err() {
                                    break;
                                }
                                sent += n;
                                // Dropped with SO_LINGER 0: a reset, not a FIN.
                                if reset && sent >= after {
                                    break;
                                }
                            }
                            _ => break,
                        },
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_mid_response_is_asked_again_of_the_same_server() {
    // Server 1 has no replica; the first connection to it is reset after 100 KB of its
    // 256 KiB answer. The read asks server 1 again on a new connection and completes,
    // byte-exact, where it used to fail naming server 1.
    let lens = vec![256 * 1024; 4];
    let c = cluster(&lens, &[], ClientConfig::default()).await;
    let mut addrs: Vec<_> = c.servers.iter().map(|h| h.local_addr()).collect();
    addrs[1] = resetting_proxy(addrs[1], 100_000).await;
    let client = Client::with_config(
        addrs.iter().enumerate().map(|(i, a)| (ServerId(i as u32), *a)),
        ClientConfig::default(),
    );
    let whole = Policy::builder().grant_size(GrantSize::Whole).build().unwrap();
    let out = client.fan_in_read(&stripe_of(&lens), &whole).await.unwrap();
    assert_eq!(out.block, expected(&lens));
    assert!(out.report.fragments[1].grants >= 2, "{:?}", out.report.fragments[1]);
    for s in c.servers {
        s.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_times_out_naming_it_and_a_replica_rescues_the_read() {
    let lens = vec![64 * 1024; 4];
    let cfg = ClientConfig::builder()
        .read_timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let c = cluster(&[64 * 1024; 5], &[(2, Duration::MAX)], cfg).await;
    // No replica: hedges go to the hung server's spare connection, which hangs too.
    let t = Instant::now();
    let err = c
        .client
        .fan_in_read(&stripe_of(&lens), &Policy::default())
        .await
        .unwrap_err();
    match err {
        FanInError::Timeout { ref waiting_on, .. } => assert_eq!(waiting_on, &vec![ServerId(2)], "{err}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        t.elapsed() < Duration::from_millis(1_000),
        "timeout of 400 ms took {:?}",
        t.elapsed()
    );
    // With server 4 holding a replica of fragment 2 (same bytes), the hedge completes the read.
    let (addrs, stripe, policy, _replica) = with_a_replica_of_the_hung_fragment(&c.servers).await;
    let client = Client::with_config(
        addrs,
        ClientConfig::builder()
            .read_timeout(Duration::from_secs(2))
            .build()
            .unwrap(),
    );
    let out = client.fan_in_read(&stripe, &policy).await.unwrap();
    assert!(out.block == expected(&lens));
    assert_eq!(out.report.fragments[2].server, Some(ServerId(4)), "{:?}", out.report);
    assert!(out.report.fragments[2].hedges >= 1, "{:?}", out.report);
    assert!(out.report.elapsed < Duration::from_millis(500), "{:?}", out.report);
    // The client's totals carry the read's hedges for a service's metrics.
    let n = client.counters();
    assert_eq!((n.reads, n.reads_failed, n.bytes), (1, 0, 4 * 64 * 1024));
    assert_eq!(n.hedges, out.report.stats.hedges);
    assert_eq!(
        n.hedges_won + n.hedges_spurious,
        out.report.stats.hedges_won + out.report.stats.hedges_spurious
    );
    assert!(n.hedges >= 1 && n.grants >= 4, "{n:?}");
}

/// For the cluster of `a_hung_server_...` (server 2 never answers): a replica of server 2's
/// object on a new server in place of server 4, the stripe of four 64 KiB fragments with
/// fragment 2 also on server 4, and a policy that hedges fast. Keep the handle alive.
async fn with_a_replica_of_the_hung_fragment(
    servers: &[ServerHandle],
) -> (Vec<(ServerId, std::net::SocketAddr)>, Stripe, Policy, ServerHandle) {
    let store = MemStore::new();
    store.insert("blk", object(2, 64 * 1024));
    let replica = serve("127.0.0.1:0".parse().unwrap(), store, ServerConfig::default())
        .await
        .unwrap();
    let mut addrs: Vec<_> = servers
        .iter()
        .enumerate()
        .map(|(i, h)| (ServerId(i as u32), h.local_addr()))
        .collect();
    addrs[4].1 = replica.local_addr();
    let frags = (0..4u32)
        .map(|i| {
            let f = Fragment::new(ServerId(i), "blk", 0, 64 * 1024);
            if i == 2 {
                f.with_replicas([ServerId(4)])
            } else {
                f
            }
        })
        .collect();
    // A hedge budget of the whole block: on a loaded 2-core machine first bytes can take
    // longer than the 2 ms initial RTO, every fragment then stalls spuriously, and the
    // default budget (64 KiB here) can be spent before the hung server's grants are hedged.
    // Then they would wait for the deadline: the budget is a storm limit, by design.
    let policy = Policy::builder()
        .rto(rto(
            Duration::from_millis(2),
            Duration::from_micros(200),
            Duration::from_millis(50),
        ))
        .hedging(Hedging::AfterRto {
            budget_fraction: 1.0,
            min_budget_bytes: 0,
        })
        .build()
        .unwrap();
    (addrs, Stripe::new(frags).unwrap(), policy, replica)
}

/// The port's timer keeper runs on the runtime of the read that started it. A client that
/// moves to another runtime after the first one shut down still hedges a stalled grant (a
/// read there starts a new keeper) instead of waiting for the read's deadline (2 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_moved_to_another_runtime_still_hedges_in_time() {
    let c = cluster(&[64 * 1024; 5], &[(2, Duration::MAX)], ClientConfig::default()).await;
    let (addrs, stripe, policy, _replica) = with_a_replica_of_the_hung_fragment(&c.servers).await;
    let cfg = ClientConfig::builder()
        .read_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let client = Arc::new(Client::with_config(addrs, cfg));
    let lens = vec![64 * 1024; 4];
    for round in 0..3 {
        let (client, stripe, policy) = (client.clone(), stripe.clone(), policy.clone());
        // A runtime of its own per round, dropped at the end of the round.
        let out = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(client.fan_in_read(&stripe, &policy))
        })
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(out.block == expected(&lens), "round {round}");
        assert!(out.report.fragments[2].hedges >= 1, "round {round}: {:?}", out.report);
        assert!(
            out.report.elapsed < Duration::from_millis(500),
            "round {round}: {:?}",
            out.report
        );
    }
}

/// `Client::counters` sums every read: successes, refusals and failures, never a failed
/// read's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_counters_sum_every_read() {
    let lens = vec![10_000, 20_000, 30_000];
    let c = cluster(&lens, &[], ClientConfig::default()).await;
    assert_eq!(c.client.counters(), incast_rpc::ClientCounters::default());
    let mut grants = 0;
    for _ in 0..3 {
        let out = c
            .client
            .fan_in_read(&stripe_of(&lens), &Policy::default())
            .await
            .unwrap();
        grants += out.report.stats.grants;
    }
    let unknown = Stripe::new(vec![Fragment::new(ServerId(99), "blk", 0, 10)]).unwrap();
    assert!(matches!(
        c.client.fan_in_read(&unknown, &Policy::default()).await,
        Err(FanInError::UnknownServer { .. })
    ));
    let missing = Stripe::new(vec![Fragment::new(ServerId(0), "nope", 0, 10)]).unwrap();
    assert!(c.client.fan_in_read(&missing, &Policy::default()).await.is_err());
    let n = c.client.counters();
    assert_eq!((n.reads, n.reads_failed), (5, 2), "{n:?}");
    assert_eq!(n.bytes, 3 * 60_000);
    assert!(
        n.grants > grants,
        "the failed read's grants count too: {n:?} vs {grants}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_oversized_frames_get_a_typed_error_and_the_server_keeps_serving() {
    let lens = vec![10_000; 2];
    let c = cluster(&lens, &[], ClientConfig::default()).await;
    let addr = c.servers[0].local_addr();
    let bad_inputs: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        Header {
            kind: Kind::Data,
            flags: 0,
            len: 1 << 20,
            id: 1,
        }
        .encode()
        .to_vec(),
        {
            // A request header claiming a 4 GiB payload: refused from the header alone.
            let mut h = Header {
                kind: Kind::Request,
                flags: 0,
                len: 18,
                id: 1,
            }
            .encode();
            h[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
            h.to_vec()
        },
        {
            let mut b = Vec::new();
            Frame::Request {
                id: 1,
                key: "blk".into(),
                offset: u64::MAX - 1,
                len: 10,
                pace: None,
            }
            .encode(&mut b);
            b
        },
    ];
    for bad in bad_inputs {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&bad).await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut got))
            .await
            .unwrap()
            .unwrap();
        match decode(&got) {
            Ok(Some((
                Frame::Error {
                    id: 0,
                    code: ErrorCode::BadRequest,
                    message,
                },
                _,
            ))) => assert!(!message.is_empty()),
            other => panic!("expected a connection error frame, got {other:?} for {bad:?}"),
        }
    }
    // A request larger than the server allows, and a missing key: error frames, connection kept.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut b = Vec::new();
    Frame::Request {
        id: 1,
        key: "blk".into(),
        offset: 0,
        len: 1 << 30,
        pace: None,
    }
    .encode(&mut b);
    Frame::Request {
        id: 2,
        key: "nope".into(),
        offset: 0,
        len: 1,
        pace: None,
    }
    .encode(&mut b);
    Frame::Request {
        id: 3,
        key: "blk".into(),
        offset: 0,
        len: 4,
        pace: None,
    }
    .encode(&mut b);
    s.write_all(&b).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    let mut frames = Vec::new();
    while frames.len() < 4 {
        let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "connection closed early: {frames:?}");
        got.extend_from_slice(&buf[..n]);
        while let Some((f, used)) = decode(&got).unwrap() {
            frames.push(f);
            got.drain(..used);
        }
    }
    assert!(
        matches!(
            &frames[0],
            Frame::Error {
                id: 1,
                code: ErrorCode::BadRequest,
                ..
            }
        ),
        "{:?}",
        frames[0]
    );
    assert!(
        matches!(
            &frames[1],
            Frame::Error {
                id: 2,
                code: ErrorCode::NotFound,
                ..
            }
        ),
        "{:?}",
        frames[1]
    );
    assert_eq!(
        frames[2],
        Frame::Data {
            id: 3,
            payload: Bytes::from(object(0, 4))
        }
    );
    // With the socket's counters, and those from when the server began the response.
    assert!(
        matches!(
            frames[3],
            Frame::End {
                id: 3,
                crc32c: Some(_),
                counters: Some(_),
                at_start: Some(_),
                ..
            }
        ),
        "{:?}",
        frames[3]
    );
    // Real reads still work.
    let out = c
        .client
        .fan_in_read(&stripe_of(&lens), &Policy::default())
        .await
        .unwrap();
    assert!(out.block == expected(&lens));
    assert_eq!(
        c.servers[0]
            .stats()
            .protocol_errors
            .load(std::sync::atomic::Ordering::Relaxed),
        4
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_read_leaves_the_client_correct() {
    let lens = vec![512 * 1024; 8];
    let c = cluster(&lens, &[(5, Duration::from_millis(50))], ClientConfig::default()).await;
    let stripe = stripe_of(&lens);
    for _ in 0..3 {
        // Dropped mid-read: the slow server has not answered yet.
        let r = tokio::time::timeout(
            Duration::from_millis(10),
            c.client.fan_in_read(&stripe, &Policy::default()),
        )
        .await;
        assert!(r.is_err(), "the read should still have been running");
    }
    let out = c.client.fan_in_read(&stripe, &Policy::default()).await.unwrap();
    assert!(out.block == expected(&lens));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_objects_and_unknown_servers_are_typed_errors() {
    let lens = vec![1000; 3];
    let c = cluster(&lens, &[], ClientConfig::default()).await;
    let stripe = Stripe::new(vec![
        Fragment::new(ServerId(0), "blk", 0, 1000),
        Fragment::new(ServerId(1), "missing", 0, 1000),
    ])
    .unwrap();
    match c.client.fan_in_read(&stripe, &Policy::default()).await {
        Err(FanInError::Failed {
            source: ReadError::ServerFailed {
                server: ServerId(1), ..
            },
            cause,
        }) => {
            assert!(cause.contains("NotFound"), "{cause}")
        }
        other => panic!("{other:?}"),
    }
    let beyond = Stripe::new(vec![Fragment::new(ServerId(0), "blk", 500, 1000)]).unwrap();
    assert!(matches!(
        c.client.fan_in_read(&beyond, &Policy::default()).await,
        Err(FanInError::Failed { .. })
    ));
    let stranger = Stripe::new(vec![Fragment::new(ServerId(9), "blk", 0, 1)]).unwrap();
    assert!(matches!(
        c.client.fan_in_read(&stranger, &Policy::default()).await,
        Err(FanInError::UnknownServer { server: ServerId(9) })
    ));
    let small = Client::with_config(
        [(ServerId(0), c.servers[0].local_addr())],
        ClientConfig::builder().max_block_bytes(100).build().unwrap(),
    );
    assert!(matches!(
        small.fan_in_read(&stripe_of(&[1000]), &Policy::default()).await,
        Err(FanInError::BlockTooLarge { len: 1000, max: 100 })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_handle_detaches_and_shutdown_stops_the_server() {
    let lens = vec![1000; 2];
    let mut c = cluster(&lens, &[], ClientConfig::default()).await;
    let first = c.servers.remove(0);
    let addr = first.local_addr();
    drop(first);
    let out = c
        .client
        .fan_in_read(&stripe_of(&lens), &Policy::default())
        .await
        .unwrap();
    assert!(out.block == expected(&lens));
    // An explicit shutdown closes the listener.
    let second = c.servers.remove(0);
    let addr2 = second.local_addr();
    second.shutdown().await;
    assert!(TcpStream::connect(addr2).await.is_err());
    assert!(TcpStream::connect(addr).await.is_ok());
    let _ = HEADER_LEN;
}

/// A fake server that answers every request after `delay` with `len` bytes of `fill`, and
/// ignores cancels: it plays a stalled connection whose bytes arrive after the hedge.
async fn fake_server(delay: Duration, fill: u8) -> std::net::SocketAddr {
    fake_server_per_conn(move |_| delay, fill, false).await
}

/// As [`fake_server`], with the delay of the `n`th accepted connection (from 0) given by
/// `delay_of(n)`: it answers that connection's requests in order, each after that delay.
/// With `bad_crc`, every `End` carries a CRC32C that does not match the bytes sent.
async fn fake_server_per_conn(
    delay_of: impl Fn(usize) -> Duration + Send + Sync + 'static,
    fill: u8,
    bad_crc: bool,
) -> std::net::SocketAddr {
    fake_server_with(delay_of, fill, bad_crc, None).await
}

/// As [`fake_server_per_conn`], with `counters` in every `End` (a server whose socket
/// reports retransmissions makes the client's port lossy).
async fn fake_server_with(
    delay_of: impl Fn(usize) -> Duration + Send + Sync + 'static,
    fill: u8,
    bad_crc: bool,
    counters: Option<TcpCounters>,
) -> std::net::SocketAddr {
    scripted_server(move |conn, _| (delay_of(conn), counters, None), fill, bad_crc).await
}

/// How a scripted server answers the `n`th request (from 0) of its `conn`th accepted
/// connection (from 0): after how long, and with which counters in its `End`.
type Script = dyn Fn(usize, usize) -> (Duration, Option<TcpCounters>, Option<StartCounters>) + Send + Sync;

/// A fake server that answers every request with `len` bytes of `fill` as `script` says,
/// in order per connection, and ignores cancels. With `bad_crc`, every `End` carries a
/// CRC32C that does not match the bytes sent.
async fn scripted_server(
    script: impl Fn(usize, usize) -> (Duration, Option<TcpCounters>, Option<StartCounters>) + Send + Sync + 'static,
    fill: u8,
    bad_crc: bool,
) -> std::net::SocketAddr {
    let script: Arc<Script> = Arc::new(script);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut accepted = 0;
        while let Ok((mut s, _)) = l.accept().await {
            let (conn, script) = (accepted, script.clone());
            accepted += 1;
            tokio::spawn(async move {
                let (mut got, mut buf, mut n) = (Vec::new(), vec![0u8; 4096], 0);
                loop {
                    while let Ok(Some((f, used))) = decode(&got) {
                        got.drain(..used);
                        if let Frame::Request { id, len, .. } = f {
                            let (delay, counters, at_start) = script(conn, n);
                            n += 1;
                            tokio::time::sleep(delay).await;
                            let mut out = Vec::new();
                            let payload = vec![fill; len as usize];
                            let crc32c = bad_crc.then(|| !crc32c::crc32c(&payload));
                            Frame::Data {
                                id,
                                payload: Bytes::from(payload),
                            }
                            .encode(&mut out);
                            Frame::End {
                                id,
                                crc32c,
                                counters,
                                at_start,
                                cancelled: false,
                            }
                            .encode(&mut out);
                            if s.write_all(&out).await.is_err() {
                                return;
                            }
                        }
                    }
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_whose_checksum_does_not_match_never_completes_a_block_unless_checks_are_off() {
    // A server whose every `End` carries a wrong CRC32C: its bytes are the right length but,
    // as far as the client can tell, corrupted.
    let liar = fake_server_per_conn(|_| Duration::ZERO, 0x5A, true).await;
    let stripe = Stripe::new(vec![Fragment::new(ServerId(0), "k", 0, 10_000)]).unwrap();
    let config = || ClientConfig::builder().read_timeout(Duration::from_secs(5));
    // Checked (the default): the read fails, typed and naming the mismatch, well before its
    // deadline, and returns no block.
    let client = Client::with_config([(ServerId(0), liar)], config().build().unwrap());
    let t0 = Instant::now();
    let err = client.fan_in_read(&stripe, &Policy::default()).await.unwrap_err();
    assert!(err.to_string().contains("checksum mismatch"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(client.counters().reads_failed, 1);
    // Unchecked: the same bytes make the block.
    let client = Client::with_config([(ServerId(0), liar)], config().verify_checksums(false).build().unwrap());
    let out = client.fan_in_read(&stripe, &Policy::default()).await.unwrap();
    assert!(out.block.len() == 10_000 && out.block.iter().all(|&b| b == 0x5A));
    assert_eq!(out.report.checksum_failures, 0);
}

/// Whole-fragment grants that time out after about 5 ms, with `hedge_bytes` of hedging.
fn whole_grants_hedged_after_5ms(hedge_bytes: u64) -> Policy {
    Policy::builder()
        .rto(rto(
            Duration::from_millis(5),
            Duration::from_millis(1),
            Duration::from_secs(1),
        ))
        .grant_size(GrantSize::Whole)
        .hedging(Hedging::AfterRto {
            budget_fraction: 0.0,
            min_budget_bytes: hedge_bytes,
        })
        .build()
        .unwrap()
}

/// Fragment 0: its primary (server 0) answers after `primary` with 0xEE (wrong, so that a
/// leak shows), its replica (server 1) after `replica` with 0x11. Fragment 1 (server 2)
/// answers after 250 ms and is too large for the hedge budget, so it keeps the read open
/// while the stalled primary's bytes arrive. Grants time out after about 5 ms.
async fn read_with_one_hedge(primary: Duration, replica: Duration, sharing: Sharing) -> incast_rpc::ReadOutput {
    hedged_read(primary, replica, Duration::from_millis(250), sharing)
        .await
        .1
}

/// As [`read_with_one_hedge`], with fragment 1 answering after `other` (the read ends then),
/// and the client kept.
async fn hedged_read(
    primary: Duration,
    replica: Duration,
    other: Duration,
    sharing: Sharing,
) -> (Client, incast_rpc::ReadOutput) {
    hedged_read_from(fake_server(primary, 0xEE).await, replica, other, sharing).await
}

/// As [`hedged_read`], with fragment 0's primary at `primary`.
async fn hedged_read_from(
    primary: std::net::SocketAddr,
    replica: Duration,
    other: Duration,
    sharing: Sharing,
) -> (Client, incast_rpc::ReadOutput) {
    let replica = fake_server(replica, 0x11).await;
    let other = fake_server(other, 0x22).await;
    // A read may hedge half the port's burst: 20,000 bytes here, as the policy says.
    let receiver = incast_core::receiver::ReceiverConfig::builder()
        .hedge_burst(40_000)
        .build()
        .unwrap();
    let client = Client::with_config(
        [(ServerId(0), primary), (ServerId(1), replica), (ServerId(2), other)],
        ClientConfig::builder()
            .receiver(receiver)
            .sharing(sharing)
            .build()
            .unwrap(),
    );
    let stripe = Stripe::new(vec![
        Fragment::new(ServerId(0), "k", 0, 20_000).with_replicas([ServerId(1)]),
        Fragment::new(ServerId(2), "k", 0, 30_000),
    ])
    .unwrap();
    // Room for one hedge of fragment 0, none of fragment 1.
    let policy = whole_grants_hedged_after_5ms(20_000);
    let out = client.fan_in_read(&stripe, &policy).await.unwrap();
    assert!(
        out.block[..20_000].iter().all(|&b| b == 0x11),
        "bytes of the cancelled request reached the block"
    );
    assert!(out.block[20_000..].iter().all(|&b| b == 0x22));
    assert_eq!(out.report.fragments[0].server, Some(ServerId(1)));
    assert_eq!(out.report.fragments[0].hedges, 1);
    (client, out)
}

/// Waits up to 2 s for the client's drains to end; returns (drained, reset, idle connections).
async fn after_drains(client: &Client) -> (u64, u64, usize) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let c = client.counters();
        if c.connections_drained + c.drains_reset > 0 || Instant::now() > deadline {
            return (c.connections_drained, c.drains_reset, client.idle_connections());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_original_still_owed_when_its_read_ends_is_drained_into_the_pool() {
    // The read ends at about 40 ms, when fragment 1 arrives; the primary, whose hedge won
    // at 20 ms, answers only at 100 ms (silent for less than the 150 ms that mean a stall).
    // Its connection is drained after the read and pooled, not reset.
    let (client, out) = hedged_read(
        Duration::from_millis(100),
        Duration::from_millis(20),
        Duration::from_millis(40),
        Sharing::Port,
    )
    .await;
    assert_eq!(
        (out.report.stats.hedges_won, out.report.connections_reset),
        (1, 0),
        "{:?}",
        out.report
    );
    // Pooled at the read's end: the replica's and fragment 1's connections.
    assert_eq!(client.idle_connections(), 2);
    // (drained, reset, pooled): the primary's joins them.
    assert_eq!(after_drains(&client).await, (1, 0, 3));
}

/// A fake server whose `n`th response on a connection (from 0) reports `rtos[n]`: the
/// socket's RTOs at the response's start and at its `End` (a real socket's counters only
/// grow). It answers with `len` bytes of 0x33, at once.
async fn counting_server(rtos: Vec<(u32, u32)>) -> std::net::SocketAddr {
    counting_server_after(rtos.into_iter().map(|(s, e)| (Duration::ZERO, s, e)).collect(), 0x33).await
}

/// As [`counting_server`], with the `n`th response sent `script[n].0` after its request, its
/// counters `script[n].1` and `.2`, and its bytes `fill`. It ignores cancels.
async fn counting_server_after(script: Vec<(Duration, u32, u32)>, fill: u8) -> std::net::SocketAddr {
    let answer = move |_, n: usize| {
        let (delay, start, end) = script.get(n).copied().unwrap_or_default();
        let counters = TcpCounters {
            rtos: end,
            ..TcpCounters::default()
        };
        let at_start = StartCounters {
            rtos: start,
            retransmits: 0,
        };
        (delay, Some(counters), Some(at_start))
    };
    scripted_server(answer, fill, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rtos_a_connection_reports_after_its_read_ended_are_that_reads_not_the_next_ones() {
    // Three reads of one fragment over one pooled connection. The socket took 2 RTOs after
    // the first response's `End` was written (its tail was lost), which the second
    // response's start counters show, and 1 while serving the second: the second read
    // reports 1 of its own and 2 for the first. The third response starts where the second
    // ended: nothing late.
    for sharing in [Sharing::Port, Sharing::PerRead] {
        let server = counting_server(vec![(0, 0), (2, 3), (3, 3)]).await;
        let config = ClientConfig::builder().sharing(sharing).build().unwrap();
        let client = Client::with_config([(ServerId(0), server)], config);
        let stripe = Stripe::new(vec![Fragment::new(ServerId(0), "k", 0, 4_000)]).unwrap();
        // No hedging: the test is about whose RTOs are whose, and on a loaded CI host a
        // hedge of a late response opened a second connection (once, 2026-11-27).
        let policy = Policy::builder().hedging(Hedging::Off).build().unwrap();
        let mut reports = Vec::new();
        for _ in 0..3 {
            let out = client.fan_in_read(&stripe, &policy).await.unwrap();
            assert_eq!(out.block, vec![0x33; 4_000]);
            reports.push(out.report);
        }
        let [a, b, c] = &reports[..] else { unreachable!() };
        assert_eq!(
            (a.connects, b.connects, c.connects),
            (1, 0, 0),
            "{sharing:?}: one pooled connection"
        );
        assert_eq!(
            (a.kernel_rtos, b.kernel_rtos, c.kernel_rtos),
            (0, 1, 0),
            "{sharing:?}: {reports:?}"
        );
        assert_eq!(b.fragments[0].kernel_rtos, 1);
        assert_eq!(
            b.late,
            vec![LateCounters {
                read: a.read,
                rtos: 2,
                retransmits: 0
            }],
            "{sharing:?}"
        );
        assert!(a.late.is_empty() && c.late.is_empty(), "{sharing:?}: {reports:?}");
        assert_eq!((a.read + 1, a.read + 2), (b.read, c.read));
        // The client's totals count every RTO once.
        assert_eq!(client.counters().kernel_rtos, 3, "{sharing:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rtos_of_a_drained_response_are_reported_for_its_read_by_the_next_one() {
    // Read A's original on the primary is hedged away; the primary answers it at 100 ms, after
    // A ended, so it is drained and pooled. Its socket took 1 RTO serving it and 2 after its
    // `End` was written. Read B, the next on that connection, reports all 3 for A.
    let primary = counting_server_after(vec![(Duration::from_millis(100), 0, 1), (Duration::ZERO, 3, 3)], 0xEE).await;
    let (client, a) = hedged_read_from(
        primary,
        Duration::from_millis(20),
        Duration::from_millis(40),
        Sharing::Port,
    )
    .await;
    assert_eq!(after_drains(&client).await, (1, 0, 3));
    assert_eq!(a.report.kernel_rtos, 0, "A never saw the primary's End");
    let stripe = Stripe::new(vec![Fragment::new(ServerId(0), "k", 0, 1_000)]).unwrap();
    let b = client.fan_in_read(&stripe, &Policy::default()).await.unwrap();
    assert_eq!(b.block, vec![0xEE; 1_000]);
    assert_eq!(b.report.connects, 0, "B reads over the drained connection");
    assert_eq!(b.report.kernel_rtos, 0);
    assert_eq!(
        b.report.late,
        vec![LateCounters {
            read: a.report.read,
            rtos: 3,
            retransmits: 0
        }]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_original_still_owed_when_its_read_ends_is_reset_once_silent() {
    // As above, but the primary would answer only after 2 s: its connection is silent past
    // 150 ms after the read, so the drain resets it and pools nothing.
    let (client, _) = hedged_read(
        Duration::from_secs(2),
        Duration::from_millis(20),
        Duration::from_millis(40),
        Sharing::Port,
    )
    .await;
    assert_eq!(after_drains(&client).await, (0, 1, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_read_alone_a_stalled_original_whose_hedge_won_is_reset_and_its_bytes_never_arrive() {
    // The replica answers at 20 ms, the primary only at 150 ms: the hedge wins, and the
    // primary's connection, owing nothing else, is reset before its bytes come.
    let out = read_with_one_hedge(Duration::from_millis(150), Duration::from_millis(20), Sharing::PerRead).await;
    let r = &out.report;
    // (hedges won, connections reset, bytes drained)
    assert_eq!(
        (r.stats.hedges_won, r.connections_reset, r.drained_bytes),
        (1, 1, 0),
        "{r:?}"
    );
    assert!(
        out.report.fragments[0].done < Some(Duration::from_millis(150)),
        "{:?}",
        out.report.fragments[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_port_a_slow_original_whose_hedge_won_is_drained_not_reset() {
    // As above, under the client's port: no server reported loss, so the primary's
    // connection is kept (a reset would cost a new connection, whose handshake can lose its
    // SYN-ACK on a full port); its late bytes are read and dropped, never reaching the block.
    let out = read_with_one_hedge(Duration::from_millis(150), Duration::from_millis(20), Sharing::Port).await;
    let r = &out.report;
    // (hedges won, connections reset, bytes drained)
    assert_eq!(
        (r.stats.hedges_won, r.connections_reset, r.drained_bytes),
        (1, 0, 20_000),
        "{r:?}"
    );
    assert!(
        out.report.fragments[0].done < Some(Duration::from_millis(150)),
        "{:?}",
        out.report.fragments[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_bytes_of_a_spurious_hedge_original_are_drained_and_never_reach_the_block() {
    // The primary answers at 40 ms, after its grant timed out (about 5 ms) but before the
    // replica (200 ms): the hedge was spurious, nothing is reset, and the original's bytes
    // are read and dropped.
    for sharing in [Sharing::Port, Sharing::PerRead] {
        let out = read_with_one_hedge(Duration::from_millis(40), Duration::from_millis(200), sharing).await;
        let r = &out.report;
        // (spurious hedges, connections reset, bytes drained)
        assert_eq!(
            (r.stats.hedges_spurious, r.connections_reset, r.drained_bytes),
            (1, 0, 20_000),
            "{sharing:?}: {r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedge_never_queues_behind_the_stalled_response_it_replaces() {
    // One server, no replica. Its first two connections (the fragment's primary and spare
    // lanes) answer only after 600 ms; later connections answer at once. The grant stalls
    // on the primary, its hedge on the spare, and the next hedge goes back to the primary
    // lane: that connection still owes the first response, so it is reset and the hedge
    // goes out on a new connection instead of waiting 600 ms behind it.
    let server = fake_server_per_conn(
        |n| {
            if n < 2 {
                Duration::from_millis(600)
            } else {
                Duration::ZERO
            }
        },
        0x33,
        false,
    )
    .await;
    let receiver = incast_core::receiver::ReceiverConfig::builder()
        .hedge_burst(400_000)
        .build()
        .unwrap();
    let client = Client::with_config(
        [(ServerId(0), server)],
        ClientConfig::builder().receiver(receiver).build().unwrap(),
    );
    let stripe = Stripe::new(vec![Fragment::new(ServerId(0), "k", 0, 20_000)]).unwrap();
    let policy = whole_grants_hedged_after_5ms(100_000);
    let out = client.fan_in_read(&stripe, &policy).await.unwrap();
    assert!(out.block.iter().all(|&b| b == 0x33));
    let r = &out.report;
    assert!(r.connections_reset >= 1, "{r:?}");
    assert!(r.fragments[0].hedges >= 2, "{:?}", r.fragments[0]);
    assert!(
        r.fragments[0].done < Some(Duration::from_millis(300)),
        "the hedge waited behind the stalled response: {:?}",
        r.fragments[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_hedge_budget_or_replica_a_stalled_grant_moves_to_a_new_connection() {
    // One server, no replica, no hedge budget. Its first connection answers only after 20 s
    // (a server socket deep in RTO backoff); later ones at once. After its stalls the grant
    // is moved to the server's other connection instead of waiting out the read's deadline.
    let server = fake_server_per_conn(
        |n| {
            if n < 1 {
                Duration::from_secs(20)
            } else {
                Duration::ZERO
            }
        },
        0x44,
        false,
    )
    .await;
    let receiver = incast_core::receiver::ReceiverConfig::builder()
        .hedge_burst(0)
        .hedge_fraction(0.0)
        .build()
        .unwrap();
    let client = Client::with_config(
        [(ServerId(0), server)],
        ClientConfig::builder()
            .receiver(receiver)
            .read_timeout(Duration::from_secs(5))
            .build()
            .unwrap(),
    );
    let stripe = Stripe::new(vec![Fragment::new(ServerId(0), "k", 0, 20_000)]).unwrap();
    let policy = whole_grants_hedged_after_5ms(0);
    let out = client.fan_in_read(&stripe, &policy).await.unwrap();
    assert!(out.block.iter().all(|&b| b == 0x44));
    let r = &out.report;
    assert_eq!(r.stats.hedges, 0, "{r:?}");
    assert!(r.stats.escalations >= 1, "{r:?}");
    assert!(
        r.fragments[0].done < Some(Duration::from_secs(2)),
        "the grant waited on its stalled connection: {:?}",
        r.fragments[0]
    );
}

/// A server that reads requests and never answers; `closed` gets the time its first
/// connection was closed or reset by the client.
async fn silent_server(closed: Arc<std::sync::Mutex<Option<Instant>>>) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let closed = closed.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
                closed.lock().unwrap().get_or_insert_with(Instant::now);
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_lossy_port_a_silent_connection_owing_only_cancelled_responses_is_reset() {
    // Fragment 0's primary never answers; its hedge (about 80 ms in) goes to a replica that
    // answers after 1 s. Fragment 1's server answers at once and reports retransmissions, so
    // the port is lossy. The primary's connection owes only the cancelled original from the
    // hedge on: it is reset 150 ms after its request (QUIET_RESET_AFTER), before a server's
    // 200 ms RTO could fire. Without that rule it stayed open until the read ended (2.4 s
    // in a run).
    let closed = Arc::new(std::sync::Mutex::new(None));
    let primary = silent_server(closed.clone()).await;
    let replica = fake_server(Duration::from_secs(1), 0x11).await;
    let loss = TcpCounters {
        retransmits: 1,
        ..TcpCounters::default()
    };
    let lossy = fake_server_with(|_| Duration::ZERO, 0x22, false, Some(loss)).await;
    // A budget that admits both grants at once (the default starts at 16 KiB, under the
    // primary's 20,000 bytes): the lossy answer must come while the primary's is owed.
    let receiver = incast_core::receiver::ReceiverConfig::builder()
        .initial_budget(64 * 1024)
        .build()
        .unwrap();
    let client = Client::with_config(
        [(ServerId(0), primary), (ServerId(1), replica), (ServerId(2), lossy)],
        ClientConfig::builder().receiver(receiver).build().unwrap(),
    );
    let stripe = Stripe::new(vec![
        Fragment::new(ServerId(0), "k", 0, 20_000).with_replicas([ServerId(1)]),
        Fragment::new(ServerId(2), "k", 0, 1_000),
    ])
    .unwrap();
    let policy = Policy::builder()
        .rto(rto(
            Duration::from_millis(80),
            Duration::from_millis(80),
            Duration::from_secs(1),
        ))
        .grant_size(GrantSize::Whole)
        .hedging(Hedging::AfterRto {
            budget_fraction: 0.0,
            min_budget_bytes: 20_000,
        })
        .build()
        .unwrap();
    let start = Instant::now();
    let out = client.fan_in_read(&stripe, &policy).await.unwrap();
    assert!(out.block[..20_000].iter().all(|&b| b == 0x11));
    assert!(out.block[20_000..].iter().all(|&b| b == 0x22));
    let r = &out.report;
    assert_eq!(r.fragments[0].server, Some(ServerId(1)), "{r:?}");
    assert!(r.connections_reset >= 1, "{r:?}");
    let at = closed.lock().unwrap().map(|t| t - start);
    assert!(
        at.is_some_and(|d| d < Duration::from_millis(280)),
        "the silent primary's connection was closed at {at:?}, not 150 ms after its request"
    );
}

/// A pooled connection idle past the pool's timeout is closed, not handed to the next read;
/// one idle for less is reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_idle_past_the_pools_timeout_is_not_reused() {
    let e = ClientConfig::builder()
        .pool_idle_timeout(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("pool_idle_timeout"), "{e}");
    let timeout = Duration::from_millis(500);
    let cfg = ClientConfig::builder().pool_idle_timeout(timeout).build().unwrap();
    let lens = [1000, 3000];
    let c = cluster(&lens, &[], cfg).await;
    let (stripe, policy) = (stripe_of(&lens), Policy::naive());
    let read = || c.client.fan_in_read(&stripe, &policy);
    let first = read().await.unwrap();
    assert_eq!(first.report.connects, 2);
    assert_eq!(c.client.idle_connections(), 2);
    // Idle for less than the timeout: reused.
    let again = read().await.unwrap();
    assert_eq!(again.report.connects, 0);
    tokio::time::sleep(timeout + Duration::from_millis(200)).await;
    // Idle past it: closed, and the read opens new ones.
    let late = read().await.unwrap();
    assert!(late.block == expected(&lens));
    assert_eq!(late.report.connects, 2);
    assert_eq!(c.client.idle_connections(), 2);
}

/// A connection idle past the pool's timeout to a server no read asks for again is closed
/// by a later read's sweep of the pool, not kept (with its descriptor) until the process
/// runs out of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_closes_connections_idle_past_the_pools_timeout_to_other_servers() {
    let timeout = Duration::from_millis(400);
    let cfg = ClientConfig::builder().pool_idle_timeout(timeout).build().unwrap();
    let lens = [1000, 3000];
    let c = cluster(&lens, &[], cfg).await;
    let policy = Policy::naive();
    let both = c.client.fan_in_read(&stripe_of(&lens), &policy).await.unwrap();
    assert_eq!(both.report.connects, 2);
    assert_eq!(c.client.idle_connections(), 2);
    // Past the timeout, a read of server 0 alone: server 1's connection goes too.
    tokio::time::sleep(timeout + Duration::from_millis(200)).await;
    let first = Stripe::new(vec![Fragment::new(ServerId(0), "blk", 0, 1000)]).unwrap();
    let out = c.client.fan_in_read(&first, &policy).await.unwrap();
    assert!(out.block == object(0, 1000));
    assert_eq!(out.report.connects, 1, "server 0's own connection was stale too");
    assert_eq!(
        c.client.idle_connections(),
        1,
        "server 1's stale connection is still pooled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_stalling_mid_frame_is_disconnected_and_others_are_served() {
    let store = MemStore::new();
    store.insert("blk", object(0, 1000));
    let cfg = ServerConfig::builder()
        .frame_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let server = serve("127.0.0.1:0".parse().unwrap(), store, cfg).await.unwrap();
    let mut stalled = TcpStream::connect(server.local_addr()).await.unwrap();
    let mut req = Vec::new();
    Frame::Request {
        id: 1,
        key: "blk".into(),
        offset: 0,
        len: 10,
        pace: None,
    }
    .encode(&mut req);
    stalled.write_all(&req[..5]).await.unwrap(); // half a header, then nothing
    let client = Client::new([(ServerId(0), server.local_addr())]);
    let out = client
        .fan_in_read(&stripe_of(&[1000]), &Policy::default())
        .await
        .unwrap();
    assert!(out.block == object(0, 1000));
    let mut rest = Vec::new();
    let t = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(2), stalled.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the stalled connection was never closed");
    assert!(t.elapsed() < Duration::from_millis(1500));
}

/// A request's pacing rate reaches the server's socket: 1 MiB at 10 MB/s takes about 100 ms
/// (75 ms measured: the kernel sends its first window unpaced), where loopback moves it in
/// about a millisecond unpaced; the bytes are
/// exact either way, and a client whose receiver paces reads whole blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_request_is_sent_no_faster_than_its_pace() {
    const LEN: usize = 1 << 20;
    let lens = vec![LEN];
    let receiver = incast_core::receiver::ReceiverConfig::builder()
        .pacing(true)
        .build()
        .unwrap();
    let c = cluster(&lens, &[], ClientConfig::builder().receiver(receiver).build().unwrap()).await;
    let addr = c.servers[0].local_addr();
    let fetch = |pace: Option<u64>| async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut req = Vec::new();
        incast_rpc::wire::encode_request(&mut req, 1, "blk", 0, LEN as u64, pace);
        let start = Instant::now();
        s.write_all(&req).await.unwrap();
        let (mut got, mut data, mut buf) = (Vec::new(), Vec::new(), vec![0u8; 64 * 1024]);
        loop {
            let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "closed before the end");
            got.extend_from_slice(&buf[..n]);
            while let Some((f, used)) = decode(&got).unwrap() {
                got.drain(..used);
                match f {
                    Frame::Data { payload, .. } => data.extend_from_slice(&payload),
                    Frame::End { .. } => return (start.elapsed(), data),
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    };
    let (paced, data) = fetch(Some(10_000_000)).await;
    assert!(data == object(0, LEN));
    assert!(
        paced >= Duration::from_millis(40),
        "1 MiB paced at 10 MB/s took {paced:?}"
    );
    let (_, data) = fetch(None).await;
    assert!(data == object(0, LEN));
    assert_eq!(
        c.servers[0]
            .stats()
            .tuning_refusals
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    for _ in 0..3 {
        let out = c
            .client
            .fan_in_read(&stripe_of(&lens), &Policy::default())
            .await
            .unwrap();
        assert!(out.block == expected(&lens));
    }
}

/// A listener that never accepts, with its accept queue full: a connect to it gets no answer
/// (the kernel drops the SYN), as with a silent host.
fn silent_listener() -> (std::net::SocketAddr, Vec<std::net::TcpStream>, socket2::Socket) {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    s.bind(&"127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap().into())
        .unwrap();
    s.listen(0).unwrap();
    let addr = s.local_addr().unwrap().as_socket().unwrap();
    // Fill the accept queue (backlog 0 still queues one or two).
    let mut held = Vec::new();
    for _ in 0..4 {
        let c = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        c.set_nonblocking(true).unwrap();
        let _ = c.connect(&addr.into());
        held.push(std::net::TcpStream::from(c));
    }
    std::thread::sleep(Duration::from_millis(50));
    (addr, held, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_does_not_freeze_the_rest_of_the_read() {
    let lens = vec![64 * 1024; 8];
    let c = cluster(&lens, &[], ClientConfig::default()).await;
    let (silent, _held, _listener) = silent_listener();
    // Server 100 is silent; fragment 0 lives there first, with server 0 as its replica.
    let mut addrs: Vec<_> = c
        .servers
        .iter()
        .enumerate()
        .map(|(i, h)| (ServerId(i as u32), h.local_addr()))
        .collect();
    addrs.push((ServerId(100), silent));
    let cfg = ClientConfig::builder()
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let client = Client::with_config(addrs, cfg);
    let mut frags: Vec<Fragment> = (0..8)
        .map(|i| Fragment::new(ServerId(i), "blk", 0, 64 * 1024))
        .collect();
    frags[0] = Fragment::new(ServerId(100), "blk", 0, 64 * 1024).with_replicas([ServerId(0)]);
    let stripe = Stripe::new(frags).unwrap();
    let out = client.fan_in_read(&stripe, &Policy::default()).await.unwrap();
    assert!(out.block == expected(&lens));
    let others = out.report.fragments[1..].iter().filter_map(|f| f.done).max().unwrap();
    println!(
        "fragments 1-7 done by {others:?}; fragment 0 by {:?} (from server {:?}); read {:?}",
        out.report.fragments[0].done, out.report.fragments[0].server, out.report.elapsed
    );
    assert!(
        others < Duration::from_millis(500),
        "the healthy fragments waited {others:?} behind a connect to a silent server"
    );
    assert_eq!(out.report.fragments[0].server, Some(ServerId(0)));
    for s in c.servers {
        s.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_on_a_frozen_server_does_not_starve_the_clients_other_reads() {
    // Server 0 takes requests and never answers (a frozen process); server 1 is healthy.
    // Both reads share the client's port. The frozen read's grants stay outstanding and its
    // stalls shrink the port's budget below what they hold: without the port's silence
    // rule, the healthy read waited for the frozen one's deadline (20 s here).
    let len = 1 << 20;
    let cfg = ClientConfig::builder()
        .read_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let c = cluster(&[len, len], &[(0, Duration::MAX)], cfg).await;
    let client = Arc::new(c.client);
    let frozen = Stripe::new(vec![Fragment::new(ServerId(0), "blk", 0, len as u64)]).unwrap();
    let healthy = Stripe::new(vec![Fragment::new(ServerId(1), "blk", 0, len as u64)]).unwrap();
    let stuck = {
        let client = client.clone();
        tokio::spawn(async move { client.fan_in_read(&frozen, &Policy::default()).await })
    };
    // Long enough for the frozen read's grants to stall and back off.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        client.fan_in_read(&healthy, &Policy::default()),
    )
    .await
    .expect("the healthy read waited 10 s behind the frozen one")
    .unwrap();
    let took = t.elapsed();
    assert!(out.block[..] == object(1, len)[..], "healthy block differs");
    let port = client.port_stats().expect("reads share the port");
    println!("healthy read took {took:?}; port: {port:?}");
    assert!(took < Duration::from_secs(2), "the healthy read took {took:?}");
    assert!(port.stuck_discounts >= 1);
    assert!(!stuck.is_finished(), "the frozen read ended early");
    stuck.abort();
    let _ = stuck.await;
    for s in c.servers {
        s.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_inside_a_read_does_not_starve_the_clients_other_reads() {
    // Read A spans server 0, which takes requests and never answers (no replica), and
    // servers 1-4, healthy, 4 MiB each; read B reads server 5 once A's grants have stalled.
    // A's bytes from servers 1-4 must not make server 0's grants count against the port
    // again: when a read's first byte did, B (and A's healthy fragments) went on in steps
    // of the port's 250 ms silence bound.
    let big = 4 << 20;
    let len = 1 << 20;
    let cfg = ClientConfig::builder()
        .read_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let c = cluster(&[len, big, big, big, big, len], &[(0, Duration::MAX)], cfg).await;
    let client = Arc::new(c.client);
    let frags = (0..5)
        .map(|i| Fragment::new(ServerId(i), "blk", 0, if i == 0 { len } else { big } as u64))
        .collect();
    let frozen = Stripe::new(frags).unwrap();
    let healthy = Stripe::new(vec![Fragment::new(ServerId(5), "blk", 0, len as u64)]).unwrap();
    let stuck = {
        let client = client.clone();
        tokio::spawn(async move { client.fan_in_read(&frozen, &Policy::default()).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    for _ in 0..4 {
        let out = tokio::time::timeout(
            Duration::from_secs(10),
            client.fan_in_read(&healthy, &Policy::default()),
        )
        .await
        .expect("a healthy read waited 10 s behind the frozen one")
        .unwrap();
        assert!(out.block[..] == object(5, len)[..], "healthy block differs");
    }
    let took = t.elapsed();
    let port = client.port_stats().expect("reads share the port");
    println!("4 healthy reads took {took:?}; port: {port:?}");
    assert!(took < Duration::from_secs(2), "4 healthy reads took {took:?}: {port:?}");
    assert!(!stuck.is_finished(), "the frozen read ended early");
    stuck.abort();
    let _ = stuck.await;
    for s in c.servers {
        s.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_port_reads_its_interfaces_receive_counter_unless_told_not_to() {
    // On loopback the interface is `lo`. Reads long enough to sample the port's rate (5 ms
    // of busy time per sample) take samples of its receive counter; a client told not to
    // takes none. Either way every block arrives whole.
    if !std::path::Path::new("/proc/thread-self/net/dev").exists() {
        eprintln!("skipped: no /proc/thread-self/net/dev here");
        return;
    }
    let lens = [4 << 20; 4];
    for on in [true, false] {
        let cfg = ClientConfig::builder().port_counter(on).build().unwrap();
        let c = cluster(&lens, &[], cfg).await;
        let stripe = stripe_of(&lens);
        for _ in 0..10 {
            let out = c.client.fan_in_read(&stripe, &Policy::default()).await.unwrap();
            assert!(out.block[..] == expected(&lens)[..], "block differs");
        }
        let port = c.client.port_stats().expect("reads share the port");
        if on {
            assert!(port.counter_samples > 0, "no sample of the counter: {port:?}");
            assert!(port.link_rate_bytes_per_sec.is_some_and(|r| r > 0.0), "{port:?}");
        } else {
            assert_eq!(port.counter_samples, 0, "{port:?}");
        }
        for s in c.servers {
            s.shutdown().await;
        }
    }
}

/// The next frame on a raw connection to a server, with its header (5 s at most).
async fn next_frame(s: &mut TcpStream) -> (Header, Frame) {
    let mut head = [0u8; HEADER_LEN];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut head))
        .await
        .unwrap()
        .unwrap();
    let h = Header::decode(&head).unwrap();
    let mut payload = vec![0u8; h.len as usize];
    s.read_exact(&mut payload).await.unwrap();
    let f = Frame::decode_payload(&h, payload.into()).unwrap();
    (h, f)
}

/// A connection that shows no loss sends its responses' `End` in the last data frame's
/// write once it has begun `MERGED_END_AFTER` responses in a row with no retransmit: every
/// response stays whole, in order and with the right checksum, merged or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_connection_sends_its_ends_with_the_data() {
    use incast_rpc::server::MERGED_END_AFTER;
    let store = MemStore::new();
    let body = object(7, 10_000);
    store.insert("blk", body.clone());
    let cfg = ServerConfig::builder()
        .data_frame_bytes(4096)
        .checksums(true)
        .build()
        .unwrap();
    let server = serve("127.0.0.1:0".parse().unwrap(), store, cfg).await.unwrap();
    let mut s = TcpStream::connect(server.local_addr()).await.unwrap();
    let responses = 2 * MERGED_END_AFTER as u64 + 4;
    for id in 1..=responses {
        let mut req = Vec::new();
        incast_rpc::wire::encode_request(&mut req, id, "blk", 0, 10_000, None);
        s.write_all(&req).await.unwrap();
        let mut got = Vec::new();
        loop {
            let (h, f) = next_frame(&mut s).await;
            assert_eq!(h.id, id);
            match f {
                Frame::Data { payload, .. } => got.extend_from_slice(&payload),
                Frame::End {
                    crc32c,
                    cancelled,
                    counters,
                    ..
                } => {
                    assert!(!cancelled);
                    assert!(counters.is_some(), "response {id}");
                    assert_eq!(crc32c, Some(crc32c::crc32c(&got)), "response {id}");
                    break;
                }
                f => panic!("unexpected {f:?}"),
            }
        }
        assert_eq!(got, body, "response {id}");
    }
    // The first response has no run behind it; from the (MERGED_END_AFTER + 1)th on every
    // one merged (nothing is lost on loopback).
    let merged = server.stats().merged_ends.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(merged, responses - u64::from(MERGED_END_AFTER), "merged ends");
    assert_eq!(
        server.stats().requests.load(std::sync::atomic::Ordering::Relaxed),
        responses
    );
}

/// A server times its hold of each request from the request's arrival, or from the end of
/// the response ahead of it on the connection if that came later, and sends it in that
/// response's first data frame, and only there: a store that takes 20 ms to answer holds
/// every request at least that long, and a request queued behind another is not held for
/// the other's time too. The store's part of each hold comes in a `StoreTime` frame just
/// before it; a store that answers at once sends none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_data_frame_of_a_response_carries_the_servers_hold() {
    let store = MemStore::new();
    store.insert("blk", object(0, 10_000));
    // No read-ahead: the second request's store read waits for the first response.
    let cfg = ServerConfig::builder()
        .data_frame_bytes(4096)
        .read_ahead_bytes(0)
        .build()
        .unwrap();
    let slow = serve(
        "127.0.0.1:0".parse().unwrap(),
        Delayed::new(store.clone(), Duration::from_millis(20)),
        cfg.clone(),
    )
    .await
    .unwrap();
    let fast = serve("127.0.0.1:0".parse().unwrap(), store, cfg).await.unwrap();
    // Linux turns receive timestamps on for the whole host from a work queue, a moment after
    // the first socket asks (`net_enable_timestamp`): until then segments arrive unstamped.
    let _warm = TcpStream::connect(slow.local_addr()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Every frame of two responses to two requests sent at once: kind, id, hold, store time.
    async fn frames(addr: std::net::SocketAddr) -> Vec<(Kind, u64, Option<Duration>, Option<u32>)> {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut req = Vec::new();
        for id in [1, 2] {
            incast_rpc::wire::encode_request(&mut req, id, "blk", 0, 10_000, None);
        }
        s.write_all(&req).await.unwrap();
        let (mut out, mut got, mut ends) = (Vec::new(), 0, 0);
        while ends < 2 {
            let (h, f) = next_frame(&mut s).await;
            let store = match f {
                Frame::Data { payload, .. } => {
                    got += payload.len();
                    None
                }
                Frame::End { .. } => {
                    ends += 1;
                    None
                }
                Frame::StoreTime { micros, .. } => Some(micros),
                f => panic!("unexpected {f:?}"),
            };
            out.push((h.kind, h.id, h.hold(), store));
        }
        assert_eq!(got, 20_000);
        out
    }
    let got = frames(slow.local_addr()).await;
    // A store time, then three data frames (4096 + 4096 + 1808 bytes) with the hold in the
    // first only, then the end; twice.
    let kinds: Vec<_> = got.iter().map(|f| f.0).collect();
    let one = [Kind::StoreTime, Kind::Data, Kind::Data, Kind::Data, Kind::End];
    assert_eq!(kinds, [one, one].concat(), "{got:?}");
    for (i, (_, id, hold, store)) in got.iter().enumerate() {
        assert_eq!(*id, 1 + i as u64 / 5);
        match i % 5 {
            0 => {
                let us = store.expect("a store time");
                assert!((20_000..32_000).contains(&us), "{got:?}");
            }
            1 => {
                let hold = hold.expect("the first frame carries the hold");
                assert!(
                    hold >= Duration::from_millis(20) && hold < Duration::from_secs(1),
                    "{hold:?}"
                );
                // The store's part is part of the hold.
                let store = Duration::from_micros(u64::from(got[i - 1].3.unwrap()));
                assert!(store <= hold, "{got:?}");
            }
            _ => assert_eq!(*hold, None, "frame {i}"),
        }
    }
    // The second request arrived with the first and waited for it: timed from its arrival,
    // its hold of both (over 40 ms) was longer than the field holds and went as its
    // largest. Timed from the first response's end, it is its own store's 20 ms.
    let second = got[6].2.expect("a hold");
    assert!(
        second >= Duration::from_millis(20) && second < Duration::from_millis(32),
        "{got:?}"
    );
    // A store in memory: the holds come, and no store time.
    let got = frames(fast.local_addr()).await;
    assert!(got.iter().all(|f| f.0 != Kind::StoreTime), "{got:?}");
    assert_eq!(got.iter().filter(|f| f.2.is_some()).count(), 2, "{got:?}");
    slow.shutdown().await;
    fast.shutdown().await;
}

/// The client takes the servers' hold out of its first bytes' times before it reads a
/// queue into them: reads of two servers whose store takes 5 ms to answer and two that
/// answer at once report about half that as hosts' time per sample, and a queueing delay
/// under that (read whole, the first-byte times would say a delay of 2.5 ms and no hosts'
/// time). On an idle machine the delay is tens of microseconds; on a loaded CI machine the
/// path itself took 1.6 ms on average (the hosts' time 3.5 ms), so the bound is the hosts'
/// time, not a fixed fraction of the store's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_hold_is_not_read_as_the_ports_queue() {
    let lens = vec![20_000; 4];
    let slow = Duration::from_millis(5);
    let gates = [(0, slow), (2, slow)];
    let c = cluster(&lens, &gates, ClientConfig::default()).await;
    // The first read opens the connections (and turns the host's receive timestamps on).
    c.client
        .fan_in_read(&stripe_of(&lens), &Policy::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let out = c
        .client
        .fan_in_read(&stripe_of(&lens), &Policy::default())
        .await
        .unwrap();
    assert_eq!(out.block, expected(&lens));
    let port = out.report.port.expect("a read of the client-wide receiver");
    assert!(port.delay_samples > 0, "{port:?}");
    assert!(port.host_mean >= slow / 4, "{port:?}");
    assert!(port.delay_mean < port.host_mean, "{port:?}");
}

/// A store that blocks its thread for a while and then answers at its first poll: to the
/// server, its own host's time (the CPU), not a store keeping the response waiting.
#[derive(Clone)]
struct Blocking {
    inner: MemStore,
    busy: Duration,
}

impl incast_rpc::FragmentStore for Blocking {
    async fn read(&self, key: &str, offset: u64, len: u64) -> Result<Bytes, incast_rpc::store::StoreError> {
        std::thread::sleep(self.busy);
        self.inner.read(key, offset, len).await
    }
}

/// The port's hold after a few reads of one server whose store is `store`.
async fn learnt_hold<S: incast_rpc::FragmentStore>(store: S) -> incast_core::receiver::ReceiverStats {
    let lens = [20_000];
    let h = serve("127.0.0.1:0".parse().unwrap(), store, ServerConfig::default())
        .await
        .unwrap();
    let client = Client::with_config([(ServerId(0), h.local_addr())], ClientConfig::default());
    // The first read opens the connection (and turns the host's receive timestamps on).
    client.fan_in_read(&stripe_of(&lens), &Policy::default()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..3 {
        let out = client.fan_in_read(&stripe_of(&lens), &Policy::default()).await.unwrap();
        assert_eq!(out.block, expected(&lens));
    }
    h.shutdown().await;
    client.port_stats().expect("reads share the port")
}

/// A slow store is learnt from its store's time, not from the server's whole hold: a server
/// whose store keeps each read waiting 5 ms teaches the port a hold of 5 ms or more, and one
/// whose store blocks the thread 5 ms and answers at its first poll (the host's time, as a
/// loaded 2-core server's is) teaches none, though its hold is as long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_store_is_learnt_from_its_stores_time_not_the_whole_hold() {
    let slow = Duration::from_millis(5);
    let store = MemStore::new();
    store.insert("blk", object(0, 20_000));
    let waited = learnt_hold(Delayed::new(store.clone(), slow)).await;
    assert!(waited.port_hold.is_some_and(|h| h >= slow), "{waited:?}");
    let busy = learnt_hold(Blocking {
        inner: store,
        busy: slow,
    })
    .await;
    assert!(busy.port_hold.is_some_and(|h| h < slow / 5), "{busy:?}");
    assert_eq!(busy.held, 0, "{busy:?}");
}

/// A store that answers after a delay and counts its reads in flight (the most at once).
#[derive(Clone)]
struct Counting {
    inner: Delayed<MemStore>,
    now: Arc<std::sync::atomic::AtomicUsize>,
    most: Arc<std::sync::atomic::AtomicUsize>,
}

impl incast_rpc::FragmentStore for Counting {
    async fn read(&self, key: &str, offset: u64, len: u64) -> Result<Bytes, incast_rpc::store::StoreError> {
        use std::sync::atomic::Ordering::SeqCst;
        let n = self.now.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(n, SeqCst);
        let r = self.inner.read(key, offset, len).await;
        self.now.fetch_sub(1, SeqCst);
        r
    }
}

/// Sends `n` pipelined requests of `len` bytes (the second one cancelled at once if
/// `cancel`) to a server whose store takes 20 ms a read with read-ahead of `ahead` bytes,
/// checks every response, and returns the most store reads that were in flight at once.
async fn reads_in_flight(n: u64, len: u64, ahead: u64, cancel: bool) -> usize {
    let store = MemStore::new();
    store.insert("blk", object(0, (n * len) as usize));
    let counting = Counting {
        inner: Delayed::new(store, Duration::from_millis(20)),
        now: Default::default(),
        most: Default::default(),
    };
    let most = counting.most.clone();
    let cfg = ServerConfig::builder().read_ahead_bytes(ahead).build().unwrap();
    let h = serve("127.0.0.1:0".parse().unwrap(), counting, cfg).await.unwrap();
    let mut s = TcpStream::connect(h.local_addr()).await.unwrap();
    let mut b = Vec::new();
    for id in 1..=n {
        Frame::Request {
            id,
            key: "blk".into(),
            offset: (id - 1) * len,
            len,
            pace: None,
        }
        .encode(&mut b);
        if cancel && id == 2 {
            Frame::Cancel { id }.encode(&mut b);
        }
    }
    s.write_all(&b).await.unwrap();
    let (mut got, mut buf) = (Vec::new(), vec![0u8; 64 << 10]);
    let (mut ends, mut data) = (Vec::new(), vec![Vec::new(); n as usize]);
    while ends.len() < n as usize {
        let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
        let k = r.expect("a response within 5 s").unwrap();
        assert!(k > 0, "connection closed after {} responses", ends.len());
        got.extend_from_slice(&buf[..k]);
        while let Some((f, used)) = decode(&got).unwrap() {
            got.drain(..used);
            match f {
                Frame::Data { id, payload, .. } => data[id as usize - 1].extend_from_slice(&payload),
                Frame::End { id, cancelled, .. } => ends.push((id, cancelled)),
                // The store's part of a hold (the store here takes time).
                Frame::StoreTime { .. } => {}
                other => panic!("unexpected frame {other:?}"),
            }
        }
    }
    // In order; every byte right, but a cancelled response's (short, flagged).
    let whole = object(0, (n * len) as usize);
    for (i, &(id, cancelled)) in ends.iter().enumerate() {
        assert_eq!(id, i as u64 + 1, "responses out of order: {ends:?}");
        let want = &whole[(i as u64 * len) as usize..((i as u64 + 1) * len) as usize];
        if cancel && id == 2 {
            assert!(cancelled && data[i].is_empty(), "request 2 was cancelled: {ends:?}");
        } else {
            assert!(!cancelled && data[i][..] == want[..], "response {id} differs");
        }
    }
    h.shutdown().await;
    most.load(std::sync::atomic::Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_requests_are_read_from_the_store_ahead_of_their_turn() {
    // 8 pipelined requests of 16 KiB behind a store that takes 20 ms a read: read ahead,
    // the store works on all of them at once; without, one at a time; with room for one
    // request ahead, two at once. A cancelled request is still answered as cancelled.
    assert_eq!(reads_in_flight(8, 16 << 10, 0, false).await, 1);
    assert_eq!(reads_in_flight(8, 16 << 10, 16 << 10, false).await, 2);
    let most = reads_in_flight(8, 16 << 10, 1 << 20, false).await;
    assert!(most >= 6, "{most} store reads at once");
    reads_in_flight(8, 16 << 10, 1 << 20, true).await;
}
