//! The client: a connection pool and [`Client::fan_in_read`], which drives the sans-IO
//! [`incast_core::Scheduler`] over real sockets; with [`Sharing::Port`] (the default) every
//! concurrent read's scheduler lives in the client's one [`incast_core::Receiver`] (see the
//! `port` module).
//!
//! # How a read runs
//!
//! One task drives the whole read. It asks the scheduler for grants, writes requests on the
//! primary or spare connection of each server (connecting on demand, with the socket tuned
//! before the handshake), then waits on the readiness of every connection with a response
//! due, on a [`crate::HrTimer`] set to the scheduler's next deadline, and on the read's deadline.
//! When a connection is readable it parses frames in place: the bytes of a `Data` frame are
//! read straight into the block at the offset the scheduler gives (one buffer, no copy beyond
//! the kernel's), the CRC32C is updated on the way, and `End` confirms the grant only if the
//! checksum matches. Bytes of a cancelled (hedged) request go to a scratch buffer and are
//! dropped. A connection that owes nothing but cancelled responses is reset once it has
//! been silent for 150 ms on a lossy port, or when a hedge would queue behind it (it is
//! waiting out a lost tail, and its server would take a kernel RTO on it); a read alone
//! resets it as soon as a hedge wins. A connection a read leaves owing only cancelled
//! responses is drained by a task of its own after the read: pooled once its last owed
//! `End` arrives, reset if it stays silent for those 150 ms (see `driver::drain`, and
//! [`ClientCounters::connections_drained`]). Any other connection dropped with responses
//! still owed is reset at once.
//! Why one task and not one per connection: per-connection tasks would need shared
//! mutable access to the block (or a copy out of their own buffers); a read is bound by the
//! link, not by one core, and concurrent reads still spread over the runtime's threads.
//!
//! # Over QUIC
//!
//! With [`Transport::Quic`] every grant, and with [`Transport::TcpWithQuicFallback`] every
//! hedge (and every later grant to a server that needed one in this read), runs as a request
//! task on its own QUIC stream instead (see the `quic` module, feature `quic`). The task
//! parses the response and sends the driver batches of payload over a channel; the driver
//! copies them into the block, checks the CRC32C and tells the scheduler exactly as for TCP
//! bytes, so hedging, budgets and the hedge budget work the same over both transports. One
//! copy is the cost: quinn decrypts into its own buffers, so there is no reading straight into
//! the block as over TCP.
//!
//! # Failure and cancellation
//!
//! A connection that closes, resets or sends a malformed frame fails every request on it; the
//! scheduler retries them on a replica or ends the read with an error naming the server. A
//! read that passes its deadline ends with [`FanInError::Timeout`] naming the servers it was
//! still waiting on. Connections go back to the pool only when they are idle and in a clean
//! state (or, drained, once they are); dropping the future of a read drops its connections,
//! so the client stays usable.
//!
//! # Layout
//!
//! Split along the lines the client-wide receiver draws (quinn's endpoint / connection, tower's
//! folder per concern): `config` (settings and their builder), `report` (what a read returns
//! and why it fails), this module (the pool and `fan_in_read`), `driver` (one read over its
//! sockets and QUIC streams), `dest` (where the bytes land: a block, the caller's buffer, or
//! one buffer per fragment), `stream` ([`FragmentStream`]), and the crate's `port` module (the
//! reads' shared receiver).
//!
//! # Three ways to take a block
//!
//! - [`Client::fan_in_read`]: the block in one `Vec<u8>`, at the end.
//! - [`Client::fan_in_read_into`]: into the caller's memory (`&mut [u8]`, so a `BytesMut` or
//!   an aligned buffer), with no copy beyond the kernel's over TCP.
//! - [`Client::fan_in_read_stream`]: each fragment the moment it is whole and checked, in
//!   completion order, as [`bytes::Bytes`] (one buffer per fragment, frozen without a copy).
//!
//! All three run the same driver and scheduling; a fragment is handed over when the scheduler
//! has confirmed all of its bytes, so a hedge's late original never delivers it twice.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use incast_core::receiver::{ReadOptions, ReceiverStats};
use incast_core::{Lane, Policy, RttEstimator, ServerId, Stripe, WindowCap};

use crate::port::{Port, ReadSched, SharedRead, Sharing};
use crate::tune::SocketTuning;

mod config;
mod dest;
mod driver;
mod report;
mod stream;

pub use config::{
    ClientConfig, ClientConfigBuilder, ClientConfigError, Transport, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_BLOCK_BYTES,
    DEFAULT_POOL_IDLE_TIMEOUT, DEFAULT_READ_TIMEOUT, POOL_SWEEPS_PER_TIMEOUT,
};
pub use dest::CompletedFragment;
use dest::Dest;
use driver::{Conn, Driver};
#[cfg(feature = "quic")]
pub(crate) use driver::{StreamEvent, StreamEventKind};
use report::Counters;
pub use report::{ClientCounters, FanInError, FragmentReport, LateCounters, ReadOutput, ReadReport};
pub use stream::FragmentStream;

/// The client: server addresses and a pool of idle connections (a primary and a spare per
/// server). Cheap to share: wrap it in an `Arc`; concurrent reads use separate connections.
/// It also carries the RTT estimate from one read to the next, so the application-level RTO
/// of a read reflects the path's queueing, not the initial RTO or a few empty-queue samples.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use incast_core::{Policy, ServerId, Stripe};
/// use incast_rpc::Client;
/// let client = Client::new([(ServerId(0), "10.0.0.1:7000".parse()?), (ServerId(1), "10.0.0.2:7000".parse()?)]);
/// let stripe = Stripe::fixed_block("block-9", &[ServerId(0), ServerId(1)], 1 << 20)?;
/// let out = client.fan_in_read(&stripe, &Policy::default()).await?;
/// assert_eq!(out.block.len(), 1 << 20);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Client {
    /// The members: server ids and addresses ([`Client::add_server`], [`Client::remove_server`]).
    addrs: RwLock<HashMap<ServerId, SocketAddr>>,
    /// Bumped on every removal or move, so running reads drop connections to servers gone.
    membership: tokio::sync::watch::Sender<u64>,
    config: ClientConfig,
    #[cfg(feature = "quic")]
    quic: Option<Arc<crate::quic::QuicClient>>,
    idle: Idle,
    /// When a read last swept the whole pool for connections idle past its timeout (see
    /// `Client::take_idle`). Locked only with `idle` held.
    swept: Mutex<Instant>,
    last_tuning: Mutex<Option<String>>,
    reads: AtomicU64,
    /// The high half of every read's hedging seed: the process id, read once (`getpid` is a
    /// system call, and it was one per read).
    seed_base: u64,
    /// RTT estimate carried from read to read (reads alone; the port carries its own).
    rtt: Mutex<Option<RttEstimator>>,
    /// The client-wide receiver, with [`Sharing::Port`].
    port: Option<Arc<Port>>,
    /// Totals over every read, for [`Client::counters`].
    counters: Arc<Counters>,
}

/// The pool: idle connections by (server, lane). Shared with the drainers of connections a
/// read left owing bytes (see `driver::drain`), which may outlive the read.
pub(in crate::client) type Idle = Arc<IdleMap>;
/// Idle connections by (server, lane).
pub(in crate::client) type IdleMap = Mutex<HashMap<(ServerId, Lane), Vec<Conn>>>;

impl Client {
    /// A client for these servers, with the default configuration.
    pub fn new(addrs: impl IntoIterator<Item = (ServerId, SocketAddr)>) -> Self {
        Self::with_config(addrs, ClientConfig::default())
    }

    /// A client for these servers.
    pub fn with_config(addrs: impl IntoIterator<Item = (ServerId, SocketAddr)>, config: ClientConfig) -> Self {
        Self {
            addrs: RwLock::new(addrs.into_iter().collect()),
            membership: tokio::sync::watch::Sender::new(0),
            #[cfg(feature = "quic")]
            quic: config
                .quic
                .clone()
                .map(|q| Arc::new(crate::quic::QuicClient::new(q, config.connect_timeout))),
            port: (config.sharing == Sharing::Port)
                .then(|| Arc::new(Port::new(config.receiver.clone(), config.port_counter))),
            config,
            idle: Arc::default(),
            swept: Mutex::new(Instant::now()),
            last_tuning: Mutex::new(None),
            rtt: Mutex::new(None),
            reads: AtomicU64::new(0),
            seed_base: u64::from(std::process::id()) << 32,
            counters: Arc::default(),
        }
    }

    /// Adds server `id` at `addr`, or moves it there; returns its previous address. Reads
    /// started from now on may name it. Moving a server drops its pooled connections, and
    /// running reads let go of their connections to the old address (their requests there
    /// are retried on a replica, or at the new address). Other servers' pooled connections and
    /// the port's RTT and rate state are kept.
    ///
    /// ```
    /// use incast_core::ServerId;
    /// let client = incast_rpc::Client::new([]);
    /// assert_eq!(client.add_server(ServerId(7), "127.0.0.1:7000".parse().unwrap()), None);
    /// assert_eq!(client.servers().len(), 1);
    /// ```
    pub fn add_server(&self, id: ServerId, addr: SocketAddr) -> Option<SocketAddr> {
        let old = self.addrs.write().unwrap_or_else(|e| e.into_inner()).insert(id, addr);
        if old.is_some_and(|old| old != addr) {
            self.forget(id);
        }
        old
    }

    /// Removes server `id`; returns its address if it was a member. Reads started from now on
    /// that name it fail with [`FanInError::UnknownServer`]. Running reads stop using it at
    /// once: their requests to it are retried on a replica, or the read fails with
    /// [`FanInError::ServerRemoved`]; so does a running read with a fragment that no member
    /// serves any more, requested yet or not. Its pooled connections are closed; everything
    /// else is kept.
    pub fn remove_server(&self, id: ServerId) -> Option<SocketAddr> {
        let old = self.addrs.write().unwrap_or_else(|e| e.into_inner()).remove(&id);
        if old.is_some() {
            self.forget(id);
        }
        old
    }

    /// The members, sorted by id.
    pub fn servers(&self) -> Vec<(ServerId, SocketAddr)> {
        let mut v: Vec<_> = self
            .addrs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(&s, &a)| (s, a))
            .collect();
        v.sort_unstable();
        v
    }

    /// The address of member `id`.
    fn addr_of(&self, id: ServerId) -> Option<SocketAddr> {
        self.addrs.read().unwrap_or_else(|e| e.into_inner()).get(&id).copied()
    }

    /// Drops what the client pooled for `id` and tells running reads the members changed.
    fn forget(&self, id: ServerId) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|&(s, _), _| s != id);
        #[cfg(feature = "quic")]
        if let Some(q) = &self.quic {
            q.forget(id);
        }
        self.membership.send_modify(|epoch| *epoch += 1);
    }

    /// Largest block (or, for an erasure read, all shards together) this client reads.
    #[cfg(feature = "erasure")]
    pub(crate) fn max_block_bytes(&self) -> u64 {
        self.config.max_block_bytes
    }

    /// The tuning report of the most recent connection this client opened, as text.
    pub fn tuning_report(&self) -> Option<String> {
        self.last_tuning.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The UDP socket buffer sizes (receive, send) the kernel granted this client's QUIC
    /// endpoint, once it exists.
    #[cfg(feature = "quic")]
    pub fn quic_udp_buffers(&self) -> Option<(usize, usize)> {
        self.quic.as_ref().and_then(|q| q.udp_buffers())
    }

    /// Idle pooled TCP connections.
    pub fn idle_connections(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(Vec::len)
            .sum()
    }

    /// Closes every idle pooled TCP connection and returns how many it closed. Connections
    /// that running reads hold, and those still draining a read's cancelled responses, are
    /// left alone. The next read to a server opens a connection again.
    ///
    /// The pool keeps every connection a read leaves clean, so it holds about as many per
    /// server as the most reads that ran at once: 128 reads of 64 servers leave 8,192. That
    /// saves each later read a handshake and a slow start; this call gives the descriptors
    /// back when the process needs them elsewhere. A connection idle longer than
    /// [`ClientConfigBuilder::pool_idle_timeout`] (90 s by default) is closed when the pool
    /// is next used for its server and lane, or when a read next sweeps the pool (at most
    /// [`POOL_SWEEPS_PER_TIMEOUT`] times per timeout). A client does it by itself when opening a
    /// connection finds the process out of descriptors (`EMFILE`, `ENFILE`): it closes its
    /// idle connections and tries once more ([`ClientCounters::pool_shed`]).
    ///
    /// ```
    /// let client = incast_rpc::Client::new([]);
    /// assert_eq!(client.close_idle(), 0);
    /// assert_eq!(client.idle_connections(), 0);
    /// ```
    pub fn close_idle(&self) -> usize {
        shed(&self.idle)
    }

    /// Totals over every read this client ran: reads (failed ones too), bytes, grants,
    /// hedges issued, won and spurious, retries, and the kernel RTOs, retransmits and QUIC
    /// loss events the servers reported. For a service's metrics; cheap (relaxed atomics).
    ///
    /// ```
    /// let client = incast_rpc::Client::new([]);
    /// assert_eq!(client.counters().reads, 0);
    /// ```
    pub fn counters(&self) -> ClientCounters {
        self.counters.snapshot()
    }

    /// The client-wide receiver's counters (budget, outstanding bytes, measured base RTT and
    /// rate, decreases), with [`Sharing::Port`].
    pub fn port_stats(&self) -> Option<ReceiverStats> {
        self.port.as_ref().map(|p| p.stats())
    }

    /// Reads the block `stripe` describes, under `policy`. Returns the block in one buffer
    /// and a report, or an error naming what failed; never a short or partial block.
    /// Concurrent reads of one client share its port ([`Sharing`]).
    ///
    /// Runs on a tokio runtime with I/O and time enabled (it panics outside one, as tokio's
    /// sockets do). A client may move between runtimes: pooled connections are reused only
    /// on the runtime that opened them, and the port's timer follows the reads.
    ///
    /// With fragments of unknown length ([`incast_core::Fragment::up_to`],
    /// [`incast_core::Fragment::query`]) the block is the fragments' bytes end to end in stripe
    /// order, each as long as its server announced (`report.fragments[i].bytes`); they are
    /// received into one buffer each and joined at the end, one copy.
    /// [`Client::fan_in_read_stream`] hands them over without it.
    pub async fn fan_in_read(&self, stripe: &Stripe, policy: &Policy) -> Result<ReadOutput, FanInError> {
        self.fan_in_read_with(stripe, policy, ReadOptions::default()).await
    }

    /// [`Client::fan_in_read`] with a per-read priority: under [`Sharing::Port`], a read of
    /// higher priority is served before reads of lower priority, unless they started
    /// [`incast_core::receiver::PRIORITY_AGING_BOUNDS`] aging bounds earlier (counted in the
    /// bytes the port passed since, see `ReceiverConfigBuilder::aging_bytes`).
    pub async fn fan_in_read_with(
        &self,
        stripe: &Stripe,
        policy: &Policy,
        opts: ReadOptions,
    ) -> Result<ReadOutput, FanInError> {
        self.admit(stripe)?;
        if stripe.has_unknown_lengths() {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let (result, report, _) = self.run_read(stripe, policy, opts, Dest::fragments(stripe, tx)).await;
            result?;
            let mut parts: Vec<Option<bytes::Bytes>> = vec![None; stripe.len()];
            while let Ok(f) = rx.try_recv() {
                parts[f.index] = Some(f.data);
            }
            let total: usize = parts.iter().flatten().map(bytes::Bytes::len).sum();
            let mut block = Vec::with_capacity(total);
            for p in parts.iter().flatten() {
                block.extend_from_slice(p);
            }
            debug_assert!(
                parts.iter().all(Option::is_some),
                "a completed read hands over every fragment"
            );
            return Ok(ReadOutput { block, report });
        }
        let (result, report, dest) = self
            .run_read(
                stripe,
                policy,
                opts,
                Dest::Block(vec![0u8; stripe.block_len() as usize]),
            )
            .await;
        result?;
        let Dest::Block(block) = dest else {
            unreachable!("run_read gives back the destination it was given")
        };
        Ok(ReadOutput { block, report })
    }

    /// Reads the block `stripe` describes into `buf`, the caller's memory (an aligned or
    /// pooled buffer of a storage engine; a `BytesMut` derefs to one). Over TCP the bytes go
    /// from the socket straight into `buf`, with no copy beyond the kernel's.
    ///
    /// `buf` must be exactly the block's length ([`FanInError::BufferLength`] otherwise,
    /// before anything is sent), and the stripe's lengths known ([`FanInError::UnknownLengths`]
    /// otherwise). On an error `buf` holds an unspecified mix of received bytes
    /// and what it held before: never use it as data then.
    ///
    /// ```no_run
    /// # async fn f(client: incast_rpc::Client, stripe: incast_core::Stripe) -> Result<(), incast_rpc::FanInError> {
    /// let mut buf = bytes::BytesMut::zeroed(stripe.block_len() as usize);
    /// let report = client.fan_in_read_into(&stripe, &incast_core::Policy::default(), &mut buf).await?;
    /// println!("{} bytes in {:?}", buf.len(), report.elapsed);
    /// # Ok(()) }
    /// ```
    pub async fn fan_in_read_into(
        &self,
        stripe: &Stripe,
        policy: &Policy,
        buf: &mut [u8],
    ) -> Result<ReadReport, FanInError> {
        self.admit(stripe)?;
        if stripe.has_unknown_lengths() {
            return Err(FanInError::UnknownLengths);
        }
        if buf.len() as u64 != stripe.block_len() {
            return Err(FanInError::BufferLength {
                len: buf.len() as u64,
                need: stripe.block_len(),
            });
        }
        let (result, report, _) = self
            .run_read(stripe, policy, ReadOptions::default(), Dest::Caller(buf))
            .await;
        result.map(|()| report)
    }

    /// Reads the block `stripe` describes and yields each fragment the moment it is whole
    /// and checked, in completion order, for an aggregator that acts on each server's answer
    /// as it lands. The first fragment reaches the caller while later ones are still being
    /// granted. Each fragment is its own buffer, frozen into [`bytes::Bytes`] without a copy.
    ///
    /// The stream drives the read: poll it to make progress. It ends after every fragment, or
    /// after one `Err` (then no further fragment is yielded, and those already yielded are
    /// still whole and correct). [`FragmentStream::report`] gives the read's report once it
    /// ended. Dropping the stream cancels the read and frees its share of the port.
    ///
    /// ```no_run
    /// # async fn f(client: incast_rpc::Client, stripe: incast_core::Stripe) -> Result<(), incast_rpc::FanInError> {
    /// use futures_util::StreamExt;
    /// let policy = incast_core::Policy::default();
    /// let mut results = client.fan_in_read_stream(&stripe, &policy);
    /// while let Some(fragment) = results.next().await {
    ///     let fragment = fragment?;
    ///     println!("fragment {} from {:?}: {} bytes", fragment.index, fragment.server, fragment.data.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn fan_in_read_stream<'a>(&'a self, stripe: &'a Stripe, policy: &'a Policy) -> FragmentStream<'a> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let run = async move {
            self.admit(stripe)?;
            let (result, report, _) = self
                .run_read(stripe, policy, ReadOptions::default(), Dest::fragments(stripe, tx))
                .await;
            result.map(|()| report)
        };
        FragmentStream::new(Box::pin(run), rx)
    }

    /// Refuses a read this client cannot run, before anything is allocated or sent.
    fn admit(&self, stripe: &Stripe) -> Result<(), FanInError> {
        if stripe.block_len() > self.config.max_block_bytes {
            self.counters.refused();
            return Err(FanInError::BlockTooLarge {
                len: stripe.block_len(),
                max: self.config.max_block_bytes,
            });
        }
        let addrs = self.addrs.read().unwrap_or_else(|e| e.into_inner());
        for f in stripe.fragments() {
            for s in std::iter::once(f.server()).chain(f.replicas().iter().copied()) {
                if !addrs.contains_key(&s) {
                    self.counters.refused();
                    return Err(FanInError::UnknownServer { server: s });
                }
            }
        }
        Ok(())
    }

    /// Runs one admitted read into `dest`; gives back the outcome, the report and `dest`.
    async fn run_read<'a>(
        &'a self,
        stripe: &'a Stripe,
        policy: &'a Policy,
        opts: ReadOptions,
        dest: Dest<'a>,
    ) -> (Result<(), FanInError>, ReadReport, Dest<'a>) {
        let start = Instant::now();
        let read = self.reads.fetch_add(1, Ordering::Relaxed);
        let seed = read ^ self.seed_base;
        #[cfg(feature = "quic")]
        if let (Transport::TcpWithQuicFallback, Some(q)) = (self.config.transport, &self.quic) {
            let flow = crate::quic::Flow::of(policy);
            for s in stripe.fragments().iter().map(|f| f.server()) {
                if let Some(addr) = self.addr_of(s) {
                    q.prewarm(s, addr, flow, start);
                }
            }
        }
        let sched = match &self.port {
            Some(port) => ReadSched::Shared(SharedRead::start(port.clone(), start, stripe, policy, seed, opts)),
            None => ReadSched::own(
                stripe,
                policy,
                seed,
                self.rtt.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            ),
        };
        let mut d = Driver::new(self, stripe, policy, sched, dest, self.tuning_for(policy), start);
        d.report.read = read;
        #[cfg(feature = "tracing")]
        let span = crate::trace::read_span(stripe);
        #[cfg(feature = "tracing")]
        let result = tracing::Instrument::instrument(d.run(), span.clone()).await;
        #[cfg(not(feature = "tracing"))]
        let result = d.run().await;
        d.report.elapsed = start.elapsed();
        if result.is_ok() {
            d.dest.complete_rest(d.report.elapsed);
        }
        if let Some(rtt) = d.sched.rtt_to_carry() {
            *self.rtt.lock().unwrap_or_else(|e| e.into_inner()) = Some(rtt);
        }
        (d.report.stats, d.report.port) = d.sched.finish();
        let bytes = match (&result, stripe.has_unknown_lengths()) {
            (Err(_), _) => 0,
            (Ok(()), false) => stripe.block_len(),
            (Ok(()), true) => d.report.fragments.iter().map(|f| f.bytes).sum(),
        };
        self.counters.record(result.is_ok(), bytes, &d.report);
        d.release_connections();
        let report = std::mem::take(&mut d.report);
        #[cfg(feature = "tracing")]
        crate::trace::read_ended(&span, &result, &report);
        (result, report, d.into_dest())
    }

    /// The socket options of a read's connections: the client's, with the policy's window cap.
    ///
    /// Under [`Sharing::Port`] a [`WindowCap::Derived`] cap is not applied. Derived means "the
    /// budget", and the port's budget moves (from 64 KiB up to tens of MiB on a fast path)
    /// while a cap is set once per connection; a hand-set SO_RCVBUF also turns the kernel's
    /// receive autotuning off. The port's grants already bound what each connection has in
    /// flight to bytes the port admitted. Measured (2-core VM, loopback, 16 concurrent reads
    /// of 16 x 256 KiB): the 64 KiB cap held `default` to 0.58x of `naive`, without it 0.93x;
    /// on the 1 Gbit/s testbed the two were within noise of each other (16 to 1024 senders,
    /// SRU 32 and 256 KiB, concurrency 1 and 4). A [`WindowCap::Fixed`] cap still applies.
    fn tuning_for(&self, policy: &Policy) -> SocketTuning {
        let mut t = self.config.tuning.clone();
        let derived_by_port = self.port.is_some() && policy.window_cap() == WindowCap::Derived;
        if let Some(cap) = policy.window_cap_bytes().filter(|_| !derived_by_port) {
            t.recv_buffer = Some(cap);
            t.window_clamp = Some(cap);
        }
        t
    }

    /// An idle connection to `key` registered with runtime `rt`. Idle connections of other
    /// runtimes are dropped: their runtime may have shut down, and a socket whose reactor is
    /// gone never becomes ready.
    ///
    /// At most once per timeout over [`POOL_SWEEPS_PER_TIMEOUT`] (45 s by default), the call
    /// also closes the connections idle past the pool's timeout to every other server and
    /// lane: a service whose reads move on to other servers (a stripe's placement changes, a
    /// server leaves) would otherwise keep their connections, and their descriptors, until
    /// the process runs out. The sweep rides on the reads instead of a task of its own (hyper's
    /// pool spawns one): it needs no runtime of its own and costs nothing between reads,
    /// at the price that a client nobody reads with keeps its idle connections until its
    /// next read, [`Client::close_idle`] or its drop.
    fn take_idle(&self, key: (ServerId, Lane), rt: tokio::runtime::Id) -> Option<Conn> {
        let now = Instant::now();
        let timeout = self.config.pool_idle_timeout;
        // Declared before the lock's guard, so the sockets close after it is released (a
        // close may take the kernel a while).
        let mut stale: Vec<Conn> = Vec::new();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let mut swept = self.swept.lock().unwrap_or_else(|e| e.into_inner());
        if now.saturating_duration_since(*swept) >= timeout / POOL_SWEEPS_PER_TIMEOUT {
            *swept = now;
            idle.retain(|_, conns| {
                let (old, keep) = std::mem::take(conns)
                    .into_iter()
                    .partition(|c| c.idle_past(now, timeout));
                stale.extend::<Vec<Conn>>(old);
                *conns = keep;
                !conns.is_empty()
            });
        }
        drop(swept);
        let conns = idle.get_mut(&key)?;
        // Idle past the pool's timeout: closed, not handed out (see `pool_idle_timeout`).
        conns.retain(|c| c.runtime == rt && !c.idle_past(now, timeout));
        conns.pop()
    }
}

/// Closes every connection in `idle`; returns how many. The sockets close after the lock is
/// released (a close may take the kernel a while).
pub(in crate::client) fn shed(idle: &IdleMap) -> usize {
    let all: Vec<Conn> = idle
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain()
        .flat_map(|(_, v)| v)
        .collect();
    all.len()
}
