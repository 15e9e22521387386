//! A process out of file descriptors: the client gives its idle pooled connections back and
//! opens the one it needs; the server waits before it accepts again instead of spinning.
//!
//! Run: `cargo test --release -p incast-rpc --test descriptors`
//!
//! One test in its own binary: it lowers the process's descriptor limit, which every test
//! running beside it in the same process would feel.

mod common;

use std::fs::File;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use incast_core::{Fragment, Hedging, Policy, ServerId, Stripe};
use incast_rpc::server::ACCEPT_BACKOFF;
use incast_rpc::store::MemStore;
use incast_rpc::{serve, Client, ClientConfig, FanInError, ServerConfig};
use nix::sys::resource::{getrlimit, setrlimit, Resource};

use common::object;

const LEN: usize = 4096;

/// One fragment of the object "blk" from each of `ids` (every id names the same server).
fn stripe(ids: std::ops::Range<u32>) -> Stripe {
    Stripe::new(ids.map(|i| Fragment::new(ServerId(i), "blk", 0, LEN as u64)).collect()).unwrap()
}

/// The highest descriptor number open in this process.
fn highest_fd() -> u64 {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .max()
        .unwrap()
}

/// Lowers the soft descriptor limit to just above the descriptors open now, and takes every
/// free number under it: the process has none left until the returned files close.
fn exhaust() -> Vec<File> {
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, highest_fd() + 16, hard).unwrap();
    let mut fillers = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(f) => fillers.push(f),
            Err(e) if e.raw_os_error() == Some(nix::libc::EMFILE) => return fillers,
            Err(e) => panic!("opening /dev/null: {e}"),
        }
    }
}

fn restore(soft: u64) {
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_client_sheds_its_idle_pool_and_the_server_backs_off() {
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let store = MemStore::new();
    store.insert("blk", object(0, LEN));
    let server = serve("127.0.0.1:0".parse().unwrap(), store, ServerConfig::default())
        .await
        .unwrap();
    // Twenty names for the one server: each is a pool key of its own.
    let addrs = (0..20).map(|i| (ServerId(i), server.local_addr()));
    let cfg = ClientConfig::builder()
        .read_timeout(Duration::from_millis(300))
        // No reading of /proc/net/dev: it would take a descriptor at any moment.
        .port_counter(false)
        .build()
        .unwrap();
    let client = Client::with_config(addrs, cfg);
    // A first read starts the port's timer (a timerfd) while descriptors are plenty.
    let out = client.fan_in_read(&stripe(0..1), &Policy::default()).await.unwrap();
    assert!(out.block == object(0, LEN));

    // One descriptor left: the client's socket takes it, the server cannot accept, and the
    // read times out. The server's accept loop waits between tries meanwhile.
    // No hedge: its connection would take a descriptor of its own.
    let alone = Policy::builder().hedging(Hedging::Off).build().unwrap();
    let mut fillers = exhaust();
    fillers.pop();
    let before = server.stats().accept_errors.load(Ordering::Relaxed);
    let began = Instant::now();
    let e = client.fan_in_read(&stripe(1..2), &alone).await.unwrap_err();
    let took = began.elapsed();
    let errors = server.stats().accept_errors.load(Ordering::Relaxed) - before;
    drop(fillers);
    restore(soft);
    assert!(matches!(e, FanInError::Timeout { .. }), "{e}");
    // One try per 10 ms (30 in 300 ms); spinning, hundreds of thousands.
    let most = (took.as_millis() / ACCEPT_BACKOFF.as_millis()) as u64 + 10;
    assert!((1..=most).contains(&errors), "{errors} accept errors in {took:?}");

    // Eight or nine idle connections in the pool, then none to spare: the next connection is opened
    // after the pool closes its idle ones.
    // No hedges here either: a hedge's spare connection would be pooled too.
    let out = client.fan_in_read(&stripe(2..10), &alone).await.unwrap();
    assert!(out.block == object(0, LEN).repeat(8));
    let idle = client.idle_connections();
    assert!(idle >= 8, "{idle} idle connections");
    let shed = client.counters().pool_shed;
    let fillers = exhaust();
    let read = client.fan_in_read(&stripe(10..11), &alone).await;
    drop(fillers);
    restore(soft);
    let out = read.unwrap();
    assert!(out.block == object(0, LEN));
    assert_eq!(client.counters().pool_shed - shed, idle as u64);
    assert_eq!(client.idle_connections(), 1);
    assert_eq!(client.close_idle(), 1);
    assert_eq!(client.idle_connections(), 0);
}
