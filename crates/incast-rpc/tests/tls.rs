//! TLS over TCP, and mutual TLS on both transports, on loopback.
//!
//! Run: `cargo test --release -p incast-rpc --features quic --test tls -- --nocapture`
#![cfg(feature = "tls")]

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use incast_core::{Fragment, Policy, ServerId, Stripe};
use incast_rpc::tls::{CertProblem, ClientCertRefusal, SelfSigned, TlsClientConfig, TlsFailure, TlsServerConfig};
use incast_rpc::{serve, Client, ClientConfig, FanInError, MemStore, QueryFn, ServerConfig, ServerHandle, WithQueries};

use common::{expected, object, stripe_of, wait_for_count};

/// A server certificate for loopback, and a client certificate (its name does not matter).
fn certs() -> (SelfSigned, SelfSigned) {
    (
        SelfSigned::generate(["127.0.0.1"]).unwrap(),
        SelfSigned::generate(["reader.example"]).unwrap(),
    )
}

/// Server `i` with object "blk" of `len` bytes, serving `tls` (or plaintext).
async fn start(i: u32, len: usize, tls: Option<TlsServerConfig>) -> ServerHandle {
    let store = MemStore::new();
    store.insert("blk", object(i, len));
    let mut cfg = ServerConfig::builder().frame_timeout(Duration::from_secs(2));
    if let Some(t) = tls {
        cfg = cfg.tls(t);
    }
    serve("127.0.0.1:0".parse().unwrap(), store, cfg.build().unwrap())
        .await
        .unwrap()
}

fn client(servers: &[ServerHandle], tls: Option<TlsClientConfig>) -> Client {
    let mut cfg = ClientConfig::builder().read_timeout(Duration::from_secs(10));
    if let Some(t) = tls {
        cfg = cfg.tls(t);
    }
    Client::with_config(
        servers
            .iter()
            .enumerate()
            .map(|(i, h)| (ServerId(i as u32), h.local_addr())),
        cfg.build().unwrap(),
    )
}

fn mutual(server: &SelfSigned, client: &SelfSigned) -> TlsServerConfig {
    TlsServerConfig::builder(server.identity())
        .client_certs(client.trust().unwrap())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_reads_are_byte_exact_at_1_to_64_servers() {
    let (server_cert, client_cert) = certs();
    for n in [1usize, 16, 64] {
        // Sizes around the TLS record (16 KiB) and the client's 64 KiB ciphertext reads.
        let lens: Vec<usize> = (0..n)
            .map(|i| match i % 4 {
                0 => 16_384,
                1 => 0,
                2 => 65_537,
                _ => (i * 7919 + 13) % 400_000 + 1,
            })
            .collect();
        let mut servers = Vec::new();
        for (i, &len) in lens.iter().enumerate() {
            servers.push(start(i as u32, len, Some(mutual(&server_cert, &client_cert))).await);
        }
        let tls = TlsClientConfig::builder(server_cert.trust().unwrap())
            .identity(client_cert.identity())
            .build()
            .unwrap();
        let c = client(&servers, Some(tls));
        let stripe = stripe_of(&lens);
        // Hedges and retries over the whole case: each may open a spare connection that the
        // read gives up, mid-handshake, when it ends first.
        let mut moved_all = 0;
        for (name, policy) in [("default", Policy::default()), ("naive", Policy::naive())] {
            // Twice: the second read runs on pooled TLS connections.
            let mut moved = 0;
            for round in 0..2 {
                let out = c.fan_in_read(&stripe, &policy).await.unwrap();
                moved += out.report.stats.hedges + out.report.stats.retries;
                assert!(
                    out.block == expected(&lens),
                    "n={n} {name} round {round}: block differs"
                );
                if round == 1 && name == "default" {
                    // Pooled connections are reused. Only a hedge or a retry in either read
                    // (a stall on a busy CI machine) may cost one: it moves a grant to the
                    // spare lane, and leaves the stalled connection unclean for the pool.
                    assert!(
                        u64::from(out.report.connects) <= moved,
                        "n={n}: the second read opened {} connections with {moved} hedges and retries",
                        out.report.connects
                    );
                }
            }
            moved_all += moved;
        }
        let abandoned: u64 = servers
            .iter()
            .map(|s| s.stats().tls_abandoned.load(Ordering::Relaxed))
            .sum();
        println!("n={n}: {moved_all} hedges and retries, {abandoned} handshakes given up");
        assert!(
            abandoned <= moved_all,
            "n={n}: {abandoned} handshakes given up with {moved_all} hedges and retries"
        );
        for (s, &len) in servers.iter().zip(&lens) {
            assert_eq!(s.stats().tls_refused.load(Ordering::Relaxed), 0);
            // Empty fragments are not asked for.
            assert_eq!(s.stats().connections.load(Ordering::Relaxed) >= 1, len > 0);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_the_client_gives_up_is_not_counted_as_refused() {
    // A read that ends while a hedge's spare connection is still in its handshake drops it:
    // the server must not count that as a refused client.
    let (server_cert, client_cert) = certs();
    let server = start(0, 1000, Some(mutual(&server_cert, &client_cert))).await;
    let addr = server.local_addr();
    // Closed before its first byte, and closed after half a ClientHello.
    drop(tokio::net::TcpStream::connect(addr).await.unwrap());
    let mut half = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut half, &[0x16, 0x03, 0x01, 0x01, 0x00, 0x01])
        .await
        .unwrap();
    drop(half);
    let stats = server.stats();
    assert_eq!(wait_for_count(&stats.tls_abandoned, 2).await, 2);
    assert_eq!(stats.tls_refused.load(Ordering::Relaxed), 0);
    // A plaintext request is refused, not given up, though its client closes too.
    let mut plain = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut plain, b"GET / HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    wait_for_count(&stats.tls_refused, 1).await;
    drop(plain);
    assert_eq!(stats.tls_refused.load(Ordering::Relaxed), 1);
    assert_eq!(stats.tls_abandoned.load(Ordering::Relaxed), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_of_unknown_length_arrive_over_tls() {
    let (server_cert, _) = certs();
    let store = WithQueries::new(
        MemStore::new(),
        QueryFn(|_key: &str, q: &[u8], _limit: u64| Ok(bytes::Bytes::from(q.repeat(10_000)))),
    );
    let tls = TlsServerConfig::builder(server_cert.identity()).build().unwrap();
    let h = serve(
        "127.0.0.1:0".parse().unwrap(),
        store,
        ServerConfig::builder().tls(tls).build().unwrap(),
    )
    .await
    .unwrap();
    // Server-only TLS: the client presents no certificate and none is asked for.
    let c = client(
        std::slice::from_ref(&h),
        Some(TlsClientConfig::builder(server_cert.trust().unwrap()).build().unwrap()),
    );
    let stripe = Stripe::new(vec![Fragment::query(ServerId(0), "idx", b"abc".to_vec(), 1 << 20)]).unwrap();
    let out = c.fan_in_read(&stripe, &Policy::default()).await.unwrap();
    assert_eq!(out.block, b"abc".repeat(10_000));
}

/// Reads one fragment from a mutual-TLS server with `tls` and returns the error.
async fn refused_read(server: ServerHandle, tls: Option<TlsClientConfig>) -> (FanInError, ServerHandle) {
    let c = client(std::slice::from_ref(&server), tls);
    let start = Instant::now();
    let err = c
        .fan_in_read(&stripe_of(&[1000]), &Policy::default())
        .await
        .unwrap_err();
    // Typed at once, not the read's deadline.
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "took {:?}: {err}",
        start.elapsed()
    );
    println!("{err}");
    (err, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_certificate_gets_a_typed_refusal() {
    let (server_cert, client_cert) = certs();
    let server = start(0, 1000, Some(mutual(&server_cert, &client_cert))).await;
    let tls = TlsClientConfig::builder(server_cert.trust().unwrap()).build().unwrap();
    let (err, server) = refused_read(server, Some(tls)).await;
    match err {
        FanInError::Tls(TlsFailure::Refused { server: s, reason, .. }) => {
            assert_eq!(s, ServerId(0));
            assert_eq!(reason, ClientCertRefusal::Missing);
        }
        other => panic!("expected a refusal for the missing certificate, got {other:?}"),
    }
    assert!(server.stats().tls_refused.load(Ordering::Relaxed) >= 1);
    assert_eq!(
        server.stats().requests.load(Ordering::Relaxed),
        0,
        "a request was served"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_of_another_issuer_is_refused() {
    let (server_cert, client_cert) = certs();
    let stranger = SelfSigned::generate(["reader.example"]).unwrap();
    let server = start(0, 1000, Some(mutual(&server_cert, &client_cert))).await;
    let tls = TlsClientConfig::builder(server_cert.trust().unwrap())
        .identity(stranger.identity())
        .build()
        .unwrap();
    match refused_read(server, Some(tls)).await.0 {
        FanInError::Tls(TlsFailure::Refused { reason, .. }) => assert_eq!(reason, ClientCertRefusal::UnknownIssuer),
        other => panic!("expected a refusal of the certificate's issuer, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_refuses_a_server_it_does_not_trust() {
    let (server_cert, client_cert) = certs();
    let other = SelfSigned::generate(["127.0.0.1"]).unwrap();
    let server = start(0, 1000, Some(mutual(&server_cert, &client_cert))).await;
    let tls = TlsClientConfig::builder(other.trust().unwrap())
        .identity(client_cert.identity())
        .build()
        .unwrap();
    match refused_read(server, Some(tls)).await.0 {
        FanInError::Tls(TlsFailure::Certificate { problem, name, .. }) => {
            assert_eq!(problem, CertProblem::UnknownIssuer);
            assert_eq!(name, "127.0.0.1");
        }
        other => panic!("expected the server's certificate refused, got {other:?}"),
    }
    // A name the certificate does not list.
    let server = start(0, 1000, Some(mutual(&server_cert, &client_cert))).await;
    let tls = TlsClientConfig::builder(server_cert.trust().unwrap())
        .identity(client_cert.identity())
        .server_name("storage-7.example")
        .build()
        .unwrap();
    match refused_read(server, Some(tls)).await.0 {
        FanInError::Tls(TlsFailure::Certificate { problem, .. }) => assert_eq!(problem, CertProblem::WrongName),
        other => panic!("expected a wrong-name refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_and_tls_do_not_mix_and_fail_within_the_deadline() {
    let (server_cert, client_cert) = certs();
    // A plaintext client against a TLS server: its request is not a ClientHello.
    let server = start(0, 1000, Some(mutual(&server_cert, &client_cert))).await;
    let c = client(std::slice::from_ref(&server), None);
    let start_at = Instant::now();
    let err = c
        .fan_in_read(&stripe_of(&[1000]), &Policy::default())
        .await
        .unwrap_err();
    assert!(
        start_at.elapsed() < Duration::from_secs(11),
        "took {:?}",
        start_at.elapsed()
    );
    assert!(
        matches!(err, FanInError::Failed { .. } | FanInError::Timeout { .. }),
        "got {err:?}"
    );
    assert!(server.stats().tls_refused.load(Ordering::Relaxed) >= 1);
    assert_eq!(server.stats().requests.load(Ordering::Relaxed), 0);

    // A TLS client against a plaintext server: the handshake fails, the read fails naming it.
    let plain = start(0, 1000, None).await;
    let tls = TlsClientConfig::builder(server_cert.trust().unwrap())
        .identity(client_cert.identity())
        .build()
        .unwrap();
    let c = client(std::slice::from_ref(&plain), Some(tls));
    match c
        .fan_in_read(&stripe_of(&[1000]), &Policy::default())
        .await
        .unwrap_err()
    {
        FanInError::Failed { cause, .. } => assert!(cause.contains("tls handshake"), "cause: {cause}"),
        other => panic!("expected a failed read naming the handshake, got {other:?}"),
    }
}

#[test]
fn bad_tls_settings_are_refused_when_built() {
    let (server_cert, client_cert) = certs();
    let e = TlsClientConfig::builder(server_cert.trust().unwrap())
        .server_name("not a name!")
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("not a name!"), "{e}");
    // A key that is not the certificate's.
    let mismatched = incast_rpc::tls::TlsIdentity::from_der(
        vec![server_cert.cert_der().to_vec()],
        rcgen::KeyPair::from_pem(client_cert.key_pem()).unwrap().serialize_der(),
    );
    assert!(TlsServerConfig::builder(mismatched.clone()).build().is_err());
    assert!(TlsClientConfig::builder(server_cert.trust().unwrap())
        .identity(mismatched)
        .build()
        .is_err());
}
