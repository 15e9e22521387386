//! Pattern servers spread over the server hosts, and the bulk senders of background traffic.
//!
//! One thread with a current-thread runtime hosts every server: on a 2-core machine the
//! client gets the other core. On the testbed the thread enters each host's namespace in turn
//! to open that host's listeners (a socket lives in the namespace it was created in, and
//! accepted connections in their listener's), so server `i` listens on host `i % H` and its
//! responses leave through that host's NIC. What the emulation owes to separate machines is
//! each host's own queue and line-rate NIC ([`crate::testbed`]); the sending CPU is shared.
//!
//! The bulk senders run on hosts and a thread of their own, as the other tenants' machines
//! would: background flows through the client's port (the issue's "2 bulk flows through the
//! port") meet the reads there and nowhere else.
//! - **Their own hosts.** On a host shared with servers, a bulk flow's bytes queued in that
//!   host's NIC (a deep `tbf`) ahead of the servers' responses, so a read's fragments on
//!   those hosts waited behind the bulk flow twice, once at the host and once at the port.
//!   The sweep adds one host per bulk sender to the testbed.
//! - **Their own thread.** A write runs the whole emulated path inline (veth, bridge, the
//!   host's qdisc), so on the servers' thread every bulk write held back every server's accept
//!   and answer for as long as it took (docs/measurements.md, *Sixteenth session*: up to
//!   2.6 s before the bulk senders yielded, and still one write's time after that). Their
//!   listeners are opened by the servers' thread, in their hosts' namespaces.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use incast_core::ServerId;
use incast_rpc::{serve, FragmentStore, ServerConfig, SocketTuning, TcpInfo};
use tokio::sync::oneshot;

use crate::netns::Netns;
use crate::pattern::PatternStore;

/// Bytes a bulk sender writes per call (64 KiB), after which it yields to the other bulk
/// senders of its thread. A write runs the whole emulated path inline (veth, bridge, the
/// host's qdisc): on the testbed a 256 KiB write took 1.4 ms on average, and when the bulk
/// senders shared the servers' thread and never yielded, they kept every server from
/// accepting or answering for up to 2.6 s beside a 128 KiB port (traced with `perf trace`
/// and the servers' `trace` events; docs/measurements.md, *Sixteenth session*).
const BULK_WRITE: usize = 64 << 10;

/// Where servers run: one entry per host, the namespace (`None`: this thread's) and address.
pub type Hosts = Vec<(Option<Netns>, IpAddr)>;

/// Running servers; dropping the value stops them.
#[derive(Debug)]
pub struct ServerSet {
    addrs: Vec<(ServerId, SocketAddr)>,
    bulk: Vec<SocketAddr>,
    bulk_rtos: Arc<AtomicU64>,
    tuning: Option<String>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
    runtime: Option<tokio::runtime::Handle>,
}

enum Started {
    Runtime(tokio::runtime::Handle),
    Server(ServerId, SocketAddr, Option<String>),
    Bulk(SocketAddr),
}

impl ServerSet {
    /// Starts `count` servers (server `i` on host `i % hosts.len()`, ephemeral ports) and
    /// one bulk sender on each of `bulk` (its own host on the testbed: see the module docs)
    /// that streams to whoever connects until the connection closes, with congestion
    /// control `cc`.
    pub fn start(hosts: Hosts, count: usize, bulk: Hosts, cc: &str, config: ServerConfig) -> std::io::Result<Self> {
        Self::start_with(hosts, count, bulk, cc, config, |_| PatternStore)
    }

    /// [`ServerSet::start`] with server `i` serving `store(i)` instead of the pattern.
    pub fn start_with<S: FragmentStore>(
        hosts: Hosts,
        count: usize,
        bulk_hosts: Hosts,
        cc: &str,
        config: ServerConfig,
        store: impl Fn(usize) -> S + Send + 'static,
    ) -> std::io::Result<Self> {
        if hosts.is_empty() {
            return Err(std::io::Error::other("no hosts to start servers on"));
        }
        let bulk = bulk_hosts.len();
        let (addr_tx, addr_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let cc = cc.to_owned();
        let bulk_rtos = Arc::new(AtomicU64::new(0));
        let rtos = bulk_rtos.clone();
        let body = move || -> std::io::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let _ = addr_tx.send(Ok(Started::Runtime(rt.handle().clone())));
            let mut bulk_thread = None;
            rt.block_on(async {
                let enter = |h: usize| enter_host(&hosts[h % hosts.len()].0);
                let ip = |h: usize| hosts[h % hosts.len()].1;
                let mut handles = Vec::with_capacity(count);
                let fail = |e: std::io::Error| {
                    let _ = addr_tx.send(Err(e));
                };
                for i in 0..count {
                    // `serve` binds before its first await, so the listener is created in
                    // the namespace entered here.
                    let started = match enter(i) {
                        Ok(()) => serve(SocketAddr::new(ip(i), 0), store(i), config.clone()).await,
                        Err(e) => Err(e),
                    };
                    match started {
                        Ok(h) => {
                            let _ = addr_tx.send(Ok(Started::Server(
                                ServerId(i as u32),
                                h.local_addr(),
                                h.tuning_report(),
                            )));
                            handles.push(h);
                        }
                        Err(e) => return fail(e),
                    }
                }
                // The bulk senders' listeners are opened here, in their hosts' namespaces,
                // and served by a thread of their own (see the module docs).
                let mut listeners = Vec::with_capacity(bulk);
                for (ns, ip) in &bulk_hosts {
                    let opened = enter_host(ns)
                        .and_then(|()| std::net::TcpListener::bind(SocketAddr::new(*ip, 0)))
                        .and_then(|l| l.set_nonblocking(true).map(|()| l));
                    match opened {
                        Ok(l) => listeners.push(l),
                        Err(e) => return fail(e),
                    }
                }
                if !listeners.is_empty() {
                    match spawn_bulk(listeners, cc.clone(), rtos.clone(), addr_tx.clone()) {
                        Ok(b) => bulk_thread = Some(b),
                        Err(e) => return fail(e),
                    }
                }
                let _ = stop_rx.await;
                for h in handles {
                    h.abort();
                }
            });
            if let Some((stop, thread)) = bulk_thread {
                let _ = stop.send(());
                let _ = thread.join();
            }
            Ok(())
        };
        let thread = std::thread::Builder::new().name("servers".into()).spawn(body)?;
        let mut addrs = Vec::with_capacity(count);
        let mut bulk_addrs = Vec::with_capacity(bulk);
        let mut tuning = None;
        // The sender lives as long as the servers, so receive exactly what was asked (or stop
        // early when the thread ended).
        let mut runtime = None;
        for r in addr_rx.iter().take(count + bulk + 1) {
            match r? {
                Started::Runtime(h) => runtime = Some(h),
                Started::Server(id, addr, t) => {
                    addrs.push((id, addr));
                    tuning = tuning.or(t);
                }
                Started::Bulk(addr) => bulk_addrs.push(addr),
            }
        }
        if addrs.len() != count || bulk_addrs.len() != bulk {
            return Err(std::io::Error::other(format!(
                "only {} of {count} servers and {} of {bulk} bulk senders started",
                addrs.len(),
                bulk_addrs.len()
            )));
        }
        Ok(Self {
            addrs,
            bulk: bulk_addrs,
            bulk_rtos,
            tuning,
            stop: Some(stop_tx),
            thread: Some(thread),
            runtime,
        })
    }

    /// The servers' runtime (one thread serves them all), for its task count.
    pub fn runtime(&self) -> Option<&tokio::runtime::Handle> {
        self.runtime.as_ref()
    }

    /// What the kernel did with the first server's socket options, as text.
    pub fn tuning_report(&self) -> Option<&str> {
        self.tuning.as_deref()
    }

    /// Server ids and addresses.
    pub fn addrs(&self) -> &[(ServerId, SocketAddr)] {
        &self.addrs
    }

    /// Addresses of the bulk senders.
    pub fn bulk(&self) -> &[SocketAddr] {
        &self.bulk
    }

    /// Kernel RTOs of the bulk senders' sockets so far (each socket's `tcpi_total_rto`,
    /// read after each write and when its connection ends).
    pub fn bulk_rtos(&self) -> Arc<AtomicU64> {
        self.bulk_rtos.clone()
    }
}

/// How often a bulk sender adds its sockets' kernel RTOs to the shared count (5 ms), also
/// while a write waits: a socket that just took an RTO cannot write until its
/// retransmission is acknowledged, and counted only after each write, its RTO reached the
/// count after the sweep had read it and was charged to the reads.
const BULK_RTO_POLL: std::time::Duration = std::time::Duration::from_millis(5);

/// Enters a host's namespace on this thread (`None`: stays in this thread's).
fn enter_host(ns: &Option<Netns>) -> std::io::Result<()> {
    ns.as_ref().map_or(Ok(()), Netns::enter)
}

/// Starts the bulk senders' thread: a current-thread runtime that serves `listeners` (opened
/// nonblocking in their hosts' namespaces) until `stop` fires, and reports each one's
/// address, or the error that kept it from starting, on `started`.
fn spawn_bulk(
    listeners: Vec<std::net::TcpListener>,
    cc: String,
    rtos: Arc<AtomicU64>,
    started: mpsc::Sender<std::io::Result<Started>>,
) -> std::io::Result<(oneshot::Sender<()>, JoinHandle<()>)> {
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let body = move || {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                let _ = started.send(Err(e));
                return;
            }
        };
        rt.block_on(async move {
            let mut tasks = Vec::with_capacity(listeners.len());
            for l in listeners {
                match l
                    .local_addr()
                    .and_then(|a| Ok((a, tokio::net::TcpListener::from_std(l)?)))
                {
                    Ok((addr, l)) => {
                        let _ = started.send(Ok(Started::Bulk(addr)));
                        tasks.push(tokio::spawn(bulk_sender(l, cc.clone(), rtos.clone())));
                    }
                    Err(e) => {
                        let _ = started.send(Err(e));
                        break;
                    }
                }
            }
            let _ = stop_rx.await;
            for t in tasks {
                t.abort();
            }
        });
    };
    let thread = std::thread::Builder::new().name("bulk".into()).spawn(body)?;
    Ok((stop_tx, thread))
}

/// Streams a constant buffer to every connection until it closes, and adds the kernel RTOs
/// of its sockets (`tcpi_total_rto`) to `rtos`, at least every [`BULK_RTO_POLL`].
async fn bulk_sender(listener: tokio::net::TcpListener, cc: String, rtos: Arc<AtomicU64>) {
    // On the listener too, so a connection is born under `cc` (see `incast_rpc::serve`).
    let born = SocketTuning {
        congestion: Some(cc.clone()),
        ..SocketTuning::default()
    };
    let _ = born.apply(&listener);
    let data = vec![0x5a_u8; BULK_WRITE];
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            return;
        };
        let _ = SocketTuning {
            congestion: Some(cc.clone()),
            ..SocketTuning::default()
        }
        .apply(&sock);
        let data = data.clone();
        let rtos = rtos.clone();
        tokio::spawn(async move {
            let mut seen = 0;
            let mut count = |sock: &tokio::net::TcpStream| {
                if let Some(n) = TcpInfo::of(sock).ok().and_then(|i| i.total_rto) {
                    rtos.fetch_add(u64::from(n.saturating_sub(seen)), Ordering::Relaxed);
                    seen = seen.max(n);
                }
            };
            let mut poll = tokio::time::interval(BULK_RTO_POLL);
            poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    w = sock.writable() => {
                        if w.is_err() {
                            break;
                        }
                        match sock.try_write(&data) {
                            // Take turns with the other bulk senders: neither `writable` nor
                            // `try_write` spends tokio's cooperative budget, and a socket
                            // whose bytes leave at once (its qdisc takes them) stays writable,
                            // so this loop held the thread for up to 2.6 s (see BULK_WRITE).
                            Ok(_) => tokio::task::yield_now().await,
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            Err(_) => break,
                        }
                    }
                    _ = poll.tick() => count(&sock),
                }
            }
            count(&sock);
        });
    }
}

impl Drop for ServerSet {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
