//! The QUIC side of the client: a pool of connections (one per server and flow-control
//! setting, shared by concurrent reads) and the task that runs one request stream.
//!
//! A request task parses the response frames itself and hands the driver of the read batches
//! of payload (`Bytes` that quinn already owns, split at frame boundaries without copying):
//! the driver copies them into the block and tells the scheduler, exactly as it does for bytes
//! read from a TCP socket. A task never outlives its read: the read's `JoinSet` aborts it, and
//! dropping its stream sends `STOP_SENDING`, which is how a QUIC request is cancelled.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use futures_util::FutureExt;
use incast_core::{GrantId, Policy, ServerId};
use quinn::{Connection, Endpoint, RecvStream};
use tokio::sync::mpsc;

use super::{transport_config, udp_socket, CertProblem, ClientCertRefusal, Knobs, QuicClientConfig, QuicError};
use crate::client::{StreamEvent, StreamEventKind};
use crate::wire::{self, Frame, Header, Kind, HEADER_LEN};

/// The request id used on every stream (one request per stream).
const STREAM_REQUEST_ID: u64 = 1;
/// Payload bytes gathered before they are handed to the driver even if more are ready.
const BATCH_BYTES: usize = 256 << 10;

/// The flow-control and RTT settings a read's policy asks of a connection. Connections are
/// pooled per (server, flow), so a read never inherits windows set for another policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Flow {
    window: Option<u32>,
    initial_rtt: Duration,
}

impl Flow {
    pub(crate) fn of(policy: &Policy) -> Self {
        Self {
            window: policy.window_cap_bytes(),
            // quinn's first PTO is about 3x its initial RTT (see the module docs).
            initial_rtt: (policy.rto().initial() / 3).max(Duration::from_micros(100)),
        }
    }
}

#[derive(Debug, Default)]
struct Slot {
    conn: tokio::sync::Mutex<Option<Connection>>,
    open: AtomicUsize,
    /// The server's cumulative (loss events, lost packets) of this connection last reported,
    /// so each response reports only what happened since.
    seen: Mutex<(u32, u32)>,
    /// The last handshake that failed on trust, either way: the server refused this client's
    /// certificate, or this client refused the server's. On which connection (its
    /// `stable_id`; `None`: in the handshake, so nothing was pooled), when a request of this
    /// client first met it, and what it was. See [`QuicClient::connection`].
    distrust: Mutex<Option<(Option<usize>, Instant, Distrust)>>,
}

/// A handshake that failed on trust: it does not heal within a read, so the read's other
/// requests get the same answer (see [`QuicClient::connection`]).
#[derive(Clone, Debug)]
enum Distrust {
    /// The server refused this client's certificate.
    Refused(ClientCertRefusal),
    /// This client refused the server's certificate, checked against `name`.
    Certificate { name: String, problem: CertProblem },
}

impl Distrust {
    /// The typed error a request to `server` at `addr` gets for it.
    fn error(self, server: ServerId, addr: SocketAddr) -> QuicError {
        match self {
            Distrust::Refused(reason) => QuicError::Refused { server, addr, reason },
            Distrust::Certificate { name, problem } => QuicError::Certificate {
                server,
                addr,
                name,
                problem,
            },
        }
    }

    /// The trust failure `e` is, if it is one.
    fn of(e: &QuicError) -> Option<Self> {
        match e {
            QuicError::Refused { reason, .. } => Some(Distrust::Refused(reason.clone())),
            QuicError::Certificate { name, problem, .. } => Some(Distrust::Certificate {
                name: name.clone(),
                problem: problem.clone(),
            }),
            _ => None,
        }
    }
}

impl Slot {
    /// When a request first met the trust failure that closed connection `conn`: now, if
    /// none had (a record of another connection is replaced). A failed handshake (`conn`
    /// `None`) is met now, each time: every handshake is a new answer, and a record kept
    /// from an earlier one would let the requests of a read that started after it, but
    /// before this one, try again.
    fn distrust_met(&self, conn: Option<usize>, what: Distrust) -> Instant {
        let mut r = self.distrust.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((id, at, _)) = &*r {
            if conn.is_some() && *id == conn {
                return *at;
            }
        }
        let now = Instant::now();
        *r = Some((conn, now, what));
        now
    }

    /// The trust failure of the last handshake, if nothing was pooled since.
    fn handshake_distrust(&self) -> Option<(Instant, Distrust)> {
        match &*self.distrust.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((None, at, what)) => Some((*at, what.clone())),
            _ => None,
        }
    }
}

/// The client's QUIC endpoints and connection pool.
#[derive(Debug)]
pub(crate) struct QuicClient {
    cfg: QuicClientConfig,
    connect_timeout: Duration,
    endpoints: Mutex<HashMap<bool, Endpoint>>,
    slots: Mutex<HashMap<(ServerId, Flow), Arc<Slot>>>,
    udp_buffers: Mutex<Option<(usize, usize)>>,
}

impl QuicClient {
    pub(crate) fn new(cfg: QuicClientConfig, connect_timeout: Duration) -> Self {
        Self {
            cfg,
            connect_timeout,
            endpoints: Mutex::new(HashMap::new()),
            slots: Mutex::new(HashMap::new()),
            udp_buffers: Mutex::new(None),
        }
    }

    /// The UDP buffer sizes (receive, send) the kernel granted the client's endpoint.
    pub(crate) fn udp_buffers(&self) -> Option<(usize, usize)> {
        *self.udp_buffers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The endpoint for the address family of `addr`, created on first use (on the calling
    /// runtime, in the calling thread's network namespace).
    fn endpoint(&self, addr: SocketAddr) -> Result<Endpoint, QuicError> {
        let v6 = addr.is_ipv6();
        let mut eps = self.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = eps.get(&v6) {
            return Ok(e.clone());
        }
        let local: SocketAddr = if v6 {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        };
        let err = |source| QuicError::Endpoint { addr: local, source };
        let (sock, sizes) = udp_socket(local, self.cfg.udp_buffer).map_err(err)?;
        let ep = super::endpoint(sock, None, super::DEFAULT_MAX_GSO_SEGMENTS).map_err(err)?;
        *self.udp_buffers.lock().unwrap_or_else(|e| e.into_inner()) = Some(sizes);
        eps.insert(v6, ep.clone());
        Ok(ep)
    }

    fn slot(&self, server: ServerId, flow: Flow) -> Arc<Slot> {
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((server, flow))
            .or_default()
            .clone()
    }

    /// A live connection to `server` for `flow`: the pooled one, or a new one (concurrent
    /// callers wait for the same handshake).
    ///
    /// A handshake that failed on trust (the server refused this client's certificate, in
    /// the handshake or by closing a pooled connection, or this client refused the server's)
    /// is not tried again for a read that started before the failure was met (`since`, the
    /// read's start): that read gets the same typed error at once. Without this, a read's next
    /// request opened a new handshake for a read that was ending anyway, and gave it up
    /// half-way (the server counted it as abandoned). A read that starts later tries a new
    /// handshake, so a server that has since come to trust the client, or that now shows a
    /// certificate the client trusts, is reached.
    ///
    /// The handshake runs in a task of its own, not in the caller's: a request given up
    /// half-way through it (its grant hedged or cancelled, its read ended) leaves the handshake
    /// to the next request for the same server, which waits for it. When the handshake ran in
    /// the caller, giving the caller up dropped it; the next request began a second one, and
    /// the server counted the first as abandoned, or refused a client twice in one read (seen
    /// in 4 of 140 runs of a client-certificate test beside 6 busy processes on 2 cores: a
    /// request's grant was hedged while its handshake was still under way).
    async fn connection(
        self: &Arc<Self>,
        server: ServerId,
        addr: SocketAddr,
        flow: Flow,
        since: Instant,
    ) -> Result<(Connection, Arc<Slot>), QuicError> {
        let slot = self.slot(server, flow);
        // The common case, a pooled connection that is open, needs no task.
        let open = match slot.conn.try_lock() {
            Ok(guard) => guard.as_ref().filter(|c| c.close_reason().is_none()).cloned(),
            Err(_) => None,
        };
        if let Some(c) = open {
            return Ok((c, slot));
        }
        let me = self.clone();
        let task = tokio::spawn(async move { me.pooled_or_new(slot, server, addr, flow, since).await });
        match task.await {
            Ok(r) => r,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Cancelled: the runtime is shutting down.
            Err(_) => Err(QuicError::Connect {
                server,
                addr,
                source: quinn::ConnectError::EndpointStopping,
            }),
        }
    }

    /// The body of [`QuicClient::connection`], run in a task of its own.
    async fn pooled_or_new(
        &self,
        slot: Arc<Slot>,
        server: ServerId,
        addr: SocketAddr,
        flow: Flow,
        since: Instant,
    ) -> Result<(Connection, Arc<Slot>), QuicError> {
        let mut guard = slot.conn.lock().await;
        let met = match guard.as_ref() {
            Some(c) => match c.close_reason() {
                None => {
                    let c = c.clone();
                    drop(guard);
                    return Ok((c, slot));
                }
                Some(closed) => refusal(&closed).map(|reason| {
                    let what = Distrust::Refused(reason);
                    (slot.distrust_met(Some(c.stable_id()), what.clone()), what)
                }),
            },
            None => slot.handshake_distrust(),
        };
        if let Some((_, what)) = met.filter(|(at, _)| since <= *at) {
            return Err(what.error(server, addr));
        }
        let conn = match self.connect(server, addr, flow).await {
            Ok(conn) => conn,
            Err(e) => {
                if let Some(what) = Distrust::of(&e) {
                    slot.distrust_met(None, what);
                    *guard = None;
                }
                return Err(e);
            }
        };
        *guard = Some(conn.clone());
        *slot.seen.lock().unwrap_or_else(|e| e.into_inner()) = (0, 0);
        *slot.distrust.lock().unwrap_or_else(|e| e.into_inner()) = None;
        drop(guard);
        Ok((conn, slot))
    }

    async fn connect(&self, server: ServerId, addr: SocketAddr, flow: Flow) -> Result<Connection, QuicError> {
        let endpoint = self.endpoint(addr)?;
        let (tls, verifier) = self.cfg.trust.client_crypto(self.cfg.identity.as_ref())?;
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
            .map_err(|e| QuicError::Tls(super::TlsError::Config(e.to_string())))?;
        let mut cc = quinn::ClientConfig::new(Arc::new(crypto));
        cc.transport_config(Arc::new(transport_config(&Knobs {
            initial_rtt: flow.initial_rtt,
            max_ack_delay: self.cfg.max_ack_delay,
            congestion: self.cfg.congestion,
            stream_window: flow.window,
            conn_window: flow.window.map(u64::from),
            max_bidi_streams: 0,
            idle_timeout: self.cfg.idle_timeout,
        })));
        let name = self.cfg.server_name.clone().unwrap_or_else(|| addr.ip().to_string());
        let connecting = endpoint
            .connect_with(cc, addr, &name)
            .map_err(|source| QuicError::Connect { server, addr, source })?;
        match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(source)) => Err(match (verifier.refused(), refusal(&source)) {
                (Some(problem), _) => QuicError::Certificate {
                    server,
                    addr,
                    name,
                    problem,
                },
                (None, Some(reason)) => QuicError::Refused { server, addr, reason },
                (None, None) => QuicError::Connection { server, addr, source },
            }),
            Err(_) => Err(QuicError::ConnectTimeout {
                server,
                addr,
                after: self.connect_timeout,
            }),
        }
    }

    /// Drops the pooled connections to `server` (it left the client, or moved): the next
    /// request opens a new one. Requests running on them keep their handles until they end.
    pub(crate) fn forget(&self, server: ServerId) {
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|&(s, _), _| s != server);
    }

    /// Starts the handshake with `server` in the background if no connection is pooled, so
    /// the first hedge that falls back to QUIC does not pay for it.
    /// `since` is the start of the read that asks (see [`QuicClient::connection`]).
    pub(crate) fn prewarm(self: &Arc<Self>, server: ServerId, addr: SocketAddr, flow: Flow, since: Instant) {
        let slot = self.slot(server, flow);
        if let Ok(guard) = slot.conn.try_lock() {
            if guard.as_ref().is_some_and(|c| c.close_reason().is_none()) {
                return;
            }
        }
        let me = self.clone();
        tokio::spawn(async move {
            // Errors show up again, typed, when a request needs the connection.
            let _ = me.connection(server, addr, flow, since).await;
        });
    }
}

/// Decrements a slot's open-stream count when a request ends.
struct Open<'a>(&'a AtomicUsize);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What one request stream needs to know.
pub(crate) struct StreamRequest {
    pub(crate) grant: GrantId,
    pub(crate) server: ServerId,
    pub(crate) addr: SocketAddr,
    pub(crate) flow: Flow,
    pub(crate) key: String,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    /// An open request (a fragment of unknown length): the size limit and the query.
    pub(crate) open: Option<(u64, Option<Bytes>)>,
    /// When the request's read started (a refusal met since is not retried for it).
    pub(crate) read_start: Instant,
}

/// Runs one request over QUIC and reports to the read's driver through `tx`.
pub(crate) async fn run_request(client: Arc<QuicClient>, req: StreamRequest, tx: mpsc::Sender<StreamEvent>) {
    let grant = req.grant;
    if let Err(kind) = request(&client, &req, &tx).await {
        let _ = tx.send(StreamEvent { grant, kind }).await;
    }
}

async fn request(
    client: &Arc<QuicClient>,
    req: &StreamRequest,
    tx: &mpsc::Sender<StreamEvent>,
) -> Result<(), StreamEventKind> {
    let server = req.server;
    let (conn, slot) = client
        .connection(server, req.addr, req.flow, req.read_start)
        .await
        .map_err(|e| match e {
            // The path or the server may come back: let the scheduler retry or hedge.
            QuicError::Connection { .. } | QuicError::ConnectTimeout { .. } => StreamEventKind::Failed(e.to_string()),
            // Configuration and trust problems do not heal: end the read, typed.
            e => StreamEventKind::Fatal(crate::FanInError::Quic(e)),
        })?;
    exchange(client, req, tx, &conn, &slot)
        .await
        .map_err(|kind| match kind {
            // TLS 1.3 lets the client finish its handshake before the server judges its
            // certificate: a refusal arrives as the connection's close, on the first stream.
            StreamEventKind::Failed(_) => match conn.close_reason().as_ref().and_then(refusal) {
                Some(reason) => {
                    slot.distrust_met(Some(conn.stable_id()), Distrust::Refused(reason.clone()));
                    StreamEventKind::Fatal(crate::FanInError::Quic(QuicError::Refused {
                        server,
                        addr: req.addr,
                        reason,
                    }))
                }
                None => kind,
            },
            kind => kind,
        })
}

/// The refusal of this client's certificate that closed a connection, if that is what it was:
/// the server's TLS alert, carried in a QUIC crypto error (0x100 + alert).
fn refusal(e: &quinn::ConnectionError) -> Option<ClientCertRefusal> {
    let quinn::ConnectionError::ConnectionClosed(close) = e else {
        return None;
    };
    let code = u64::from(close.error_code);
    let alert = u8::try_from(code.checked_sub(0x100)?).ok()?;
    ClientCertRefusal::of_alert_code(alert)
}

/// Sends one request on a new stream of `conn` and reads its response.
async fn exchange(
    client: &QuicClient,
    req: &StreamRequest,
    tx: &mpsc::Sender<StreamEvent>,
    conn: &Connection,
    slot: &Slot,
) -> Result<(), StreamEventKind> {
    let server = req.server;
    let open = slot.open.fetch_add(1, Ordering::Relaxed) + 1;
    let _open = Open(&slot.open);
    let start = Instant::now();
    let opening = conn.open_bi();
    tokio::pin!(opening);
    let opened = match (&mut opening).now_or_never() {
        Some(r) => r,
        // No stream credit: the server's limit is reached. Wait a bounded time, then say so.
        None => match tokio::time::timeout(client.cfg.stream_wait, opening).await {
            Ok(r) => r,
            Err(_) => {
                return Err(StreamEventKind::Fatal(crate::FanInError::Quic(
                    QuicError::StreamLimit {
                        server,
                        open,
                        waited: start.elapsed(),
                    },
                )))
            }
        },
    };
    let failed = |what: &str, e: &dyn std::fmt::Display| StreamEventKind::Failed(format!("{server}: quic {what}: {e}"));
    let (mut send, recv) = opened.map_err(|e| failed("opening a stream", &e))?;
    let mut out = Vec::with_capacity(64 + req.key.len());
    // QUIC paces with its own congestion controller (quinn's pacer): no pace on the wire.
    match &req.open {
        None => wire::encode_request(&mut out, STREAM_REQUEST_ID, &req.key, req.offset, req.len, None),
        Some((limit, query)) => {
            let open = wire::Open {
                limit: *limit,
                query: query.as_deref(),
            };
            wire::encode_open_request(&mut out, STREAM_REQUEST_ID, &req.key, req.offset, req.len, &open, None);
        }
    }
    send.write_all(&out)
        .await
        .map_err(|e| failed("sending a request", &e))?;
    send.finish().map_err(|e| failed("finishing a request", &e))?;
    let mut r = Reader {
        recv,
        cur: Bytes::new(),
        batch: Vec::new(),
        batched: 0,
        grant: req.grant,
        tx,
        server,
    };
    let mut got = 0u64;
    // Bytes the response may carry: the request's length, cut by an open request's `Length`.
    let mut allowed = req.open.is_none().then_some(req.len);
    loop {
        let mut head = [0u8; HEADER_LEN];
        r.fill(&mut head).await?;
        let h = Header::decode(&head).map_err(|e| failed("response", &e))?;
        if h.id != STREAM_REQUEST_ID && !(h.kind == Kind::Error && h.id == 0) {
            return Err(failed(
                "response",
                &format!("frame for request {}, expected {STREAM_REQUEST_ID}", h.id),
            ));
        }
        match h.kind {
            Kind::Data => {
                let Some(allowed) = allowed else {
                    return Err(failed("response", &"data before the length of an open request"));
                };
                if got + u64::from(h.len) > allowed {
                    return Err(failed(
                        "response",
                        &format!("more data than the {allowed} bytes asked for"),
                    ));
                }
                got += u64::from(h.len);
                r.data(h.len as usize).await?;
            }
            Kind::Length if req.open.is_some() && allowed.is_none() => {
                let mut body = [0u8; 8];
                r.fill(&mut body).await?;
                let size = u64::from_be_bytes(body);
                allowed = Some(size.min(req.offset.saturating_add(req.len)).saturating_sub(req.offset));
                let kind = StreamEventKind::Length(size);
                tx.send(StreamEvent { grant: req.grant, kind })
                    .await
                    .map_err(|_| StreamEventKind::Failed("the read ended".into()))?;
            }
            Kind::End | Kind::Error => {
                // Bounded by `Header::decode`: control frames are at most 2 KiB.
                let mut body = vec![0u8; h.len as usize];
                r.fill(&mut body).await?;
                r.flush().await?;
                let frame = Frame::decode_payload(&h, body.into()).map_err(|e| failed("response", &e))?;
                let kind = match frame {
                    Frame::End {
                        crc32c,
                        counters,
                        cancelled,
                        ..
                    } => StreamEventKind::End {
                        crc32c,
                        counters: counters.map(|c| {
                            let mut seen = slot.seen.lock().unwrap_or_else(|e| e.into_inner());
                            let delta = (c.rtos.saturating_sub(seen.0), c.retransmits.saturating_sub(seen.1));
                            *seen = (seen.0.max(c.rtos), seen.1.max(c.retransmits));
                            crate::wire::TcpCounters {
                                rtos: delta.0,
                                retransmits: delta.1,
                                ..c
                            }
                        }),
                        cancelled,
                    },
                    Frame::Error { code, message, .. } => StreamEventKind::Refused { code, message },
                    _ => unreachable!("End and Error headers decode to End and Error frames"),
                };
                let _ = tx.send(StreamEvent { grant: req.grant, kind }).await;
                return Ok(());
            }
            kind => return Err(failed("response", &crate::wire::WireError::UnexpectedKind { kind })),
        }
    }
}

/// Reads a response stream chunk by chunk, handing payload to the driver in batches.
struct Reader<'a> {
    recv: RecvStream,
    cur: Bytes,
    batch: Vec<Bytes>,
    batched: usize,
    grant: GrantId,
    tx: &'a mpsc::Sender<StreamEvent>,
    server: ServerId,
}

impl Reader<'_> {
    /// Makes `cur` non-empty: takes a chunk that is ready, or hands over the batch and waits.
    async fn next(&mut self) -> Result<(), StreamEventKind> {
        while self.cur.is_empty() {
            let ready = self.recv.read_chunk(usize::MAX, true).now_or_never();
            let chunk = match ready {
                Some(r) => r,
                None => {
                    self.flush().await?;
                    self.recv.read_chunk(usize::MAX, true).await
                }
            };
            self.cur = match chunk {
                Ok(Some(c)) => c.bytes,
                Ok(None) => {
                    return Err(StreamEventKind::Failed(format!(
                        "{} ended a quic response mid-frame",
                        self.server
                    )))
                }
                Err(e) => return Err(StreamEventKind::Failed(format!("{}: quic response: {e}", self.server))),
            };
        }
        Ok(())
    }

    /// Fills `out` (a header or a control payload) from the stream.
    async fn fill(&mut self, out: &mut [u8]) -> Result<(), StreamEventKind> {
        let mut have = 0;
        while have < out.len() {
            self.next().await?;
            let n = (out.len() - have).min(self.cur.len());
            out[have..have + n].copy_from_slice(&self.cur[..n]);
            self.cur.advance(n);
            have += n;
        }
        Ok(())
    }

    /// Moves `len` payload bytes into the batch (without copying).
    async fn data(&mut self, mut len: usize) -> Result<(), StreamEventKind> {
        while len > 0 {
            self.next().await?;
            let n = len.min(self.cur.len());
            self.batch.push(self.cur.split_to(n));
            self.batched += n;
            len -= n;
            if self.batched >= BATCH_BYTES {
                self.flush().await?;
            }
        }
        Ok(())
    }

    /// Hands the batch to the driver. A closed channel means the read is over.
    async fn flush(&mut self) -> Result<(), StreamEventKind> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.batched = 0;
        let kind = StreamEventKind::Data(std::mem::take(&mut self.batch));
        self.tx
            .send(StreamEvent {
                grant: self.grant,
                kind,
            })
            .await
            .map_err(|_| StreamEventKind::Failed("the read ended".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quic::{QuicServerConfig, SelfSigned};
    use crate::store::MemStore;
    use crate::{serve, FanInError, ServerConfig};

    /// The fatal error of one request of a read that started at `read_start`.
    async fn fatal_of(client: &Arc<QuicClient>, addr: SocketAddr, read_start: Instant) -> QuicError {
        let (tx, mut rx) = mpsc::channel(4);
        // A grant id as a scheduler mints it.
        let stripe = incast_core::Stripe::fixed_sru("blk", &[ServerId(0)], 4_000).unwrap();
        let grant = match incast_core::Scheduler::new(&stripe, &Policy::default(), 1).poll_action(read_start) {
            Some(incast_core::Action::Request(g)) => g.id,
            other => panic!("expected a request, got {other:?}"),
        };
        let req = StreamRequest {
            grant,
            server: ServerId(0),
            addr,
            flow: Flow::of(&Policy::default()),
            key: "blk".into(),
            offset: 0,
            len: 4_000,
            open: None,
            read_start,
        };
        run_request(client.clone(), req, tx).await;
        match rx.recv().await.map(|e| e.kind) {
            Some(StreamEventKind::Fatal(FanInError::Quic(e))) => e,
            other => panic!("expected a fatal error, got {other:?}"),
        }
    }

    async fn refusal_of(client: &Arc<QuicClient>, addr: SocketAddr, read_start: Instant) -> ClientCertRefusal {
        match fatal_of(client, addr, read_start).await {
            QuicError::Refused { reason, .. } => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    async fn distrusted(client: &Arc<QuicClient>, addr: SocketAddr, read_start: Instant) -> CertProblem {
        match fatal_of(client, addr, read_start).await {
            QuicError::Certificate { problem, .. } => problem,
            other => panic!("expected the server's certificate refused, got {other:?}"),
        }
    }

    async fn count_reaches(counter: &std::sync::atomic::AtomicU64, n: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(5);
        while counter.load(Ordering::Relaxed) < n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        counter.load(Ordering::Relaxed)
    }

    /// The counter 50 ms from now: where a handshake that should not happen would have shown.
    async fn after_a_while(counter: &std::sync::atomic::AtomicU64) -> u64 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        counter.load(Ordering::Relaxed)
    }

    /// A server of one 4,000-byte object, `blk`, over QUIC with `quic`.
    async fn server_of_blk(quic: QuicServerConfig) -> crate::ServerHandle {
        let store = MemStore::new();
        store.insert("blk", vec![7u8; 4_000]);
        serve(
            "127.0.0.1:0".parse().unwrap(),
            store,
            ServerConfig::builder().quic(quic).build().unwrap(),
        )
        .await
        .unwrap()
    }

    /// The destination connection ID of a QUIC version 1 Initial packet: which handshake sent it.
    fn initial_dcid(p: &[u8]) -> Option<Vec<u8>> {
        // Long header and fixed bit set, packet type 0 (Initial), version 1.
        if p.len() < 6 || p[0] & 0xf0 != 0xc0 || p[1..5] != [0, 0, 0, 1] {
            return None;
        }
        p.get(6..6 + usize::from(p[5])).map(<[u8]>::to_vec)
    }

    /// A request given up half-way through its handshake (its grant hedged, its read ended)
    /// leaves the handshake to the next request for the same server, which waits for it: no
    /// second handshake begins while the first is under way.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_given_up_mid_handshake_leaves_the_handshake_to_the_next() {
        // A server that never answers: a handshake stays under way, and shows as the
        // connection ID of its Initial packets.
        let hole = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = hole.local_addr().unwrap();
        let cert = SelfSigned::generate(["localhost", "127.0.0.1"]).unwrap();
        let cfg = QuicClientConfig::builder(cert.trust().unwrap()).build().unwrap();
        let client = Arc::new(QuicClient::new(cfg, Duration::from_secs(5)));
        let (flow, read) = (Flow::of(&Policy::default()), Instant::now());
        let ask = || {
            let c = client.clone();
            tokio::spawn(async move { c.connection(ServerId(0), addr, flow, read).await.map(|_| ()) })
        };
        let first = ask();
        let mut buf = vec![0u8; 65_536];
        let (n, _) = hole.recv_from(&mut buf).await.unwrap();
        let handshake = initial_dcid(&buf[..n]).expect("the client's first packet is an Initial");
        first.abort();
        let second = ask();
        let mut others = std::collections::BTreeSet::new();
        let until = tokio::time::Instant::now() + Duration::from_millis(200);
        while let Ok(Ok((n, _))) = tokio::time::timeout_at(until, hole.recv_from(&mut buf)).await {
            others.extend(initial_dcid(&buf[..n]).filter(|d| *d != handshake));
        }
        assert!(others.is_empty(), "a second handshake began: {others:x?}");
        assert!(
            !second.is_finished(),
            "the second request waits for the first handshake"
        );
        second.abort();
    }

    /// The requests of a read that met the server's refusal of its certificate get the same
    /// refusal without a new handshake; a read that starts after the refusal tries again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refusal_is_the_answer_for_the_rest_of_its_read_and_not_after() {
        let server_cert = SelfSigned::generate(["localhost", "127.0.0.1"]).unwrap();
        let trusted = SelfSigned::generate(["reader.example"]).unwrap();
        let quic = QuicServerConfig::builder(server_cert.identity())
            .client_certs(trusted.trust().unwrap())
            .build()
            .unwrap();
        let h = server_of_blk(quic).await;
        let cfg = QuicClientConfig::builder(server_cert.trust().unwrap()).build().unwrap();
        let client = Arc::new(QuicClient::new(cfg.clone(), Duration::from_secs(5)));
        let read = Instant::now();
        assert_eq!(
            refusal_of(&client, h.local_addr(), read).await,
            ClientCertRefusal::Missing
        );
        assert_eq!(count_reaches(&h.stats().tls_refused, 1).await, 1);
        // The same read's next request: the refusal again, and no handshake.
        assert_eq!(
            refusal_of(&client, h.local_addr(), read).await,
            ClientCertRefusal::Missing
        );
        assert_eq!(after_a_while(&h.stats().tls_refused).await, 1, "a second handshake");
        assert_eq!(h.stats().tls_abandoned.load(Ordering::Relaxed), 0);
        // A read that starts now: a new handshake, refused again.
        let later = Instant::now();
        assert_eq!(
            refusal_of(&client, h.local_addr(), later).await,
            ClientCertRefusal::Missing
        );
        assert_eq!(count_reaches(&h.stats().tls_refused, 2).await, 2);
        // A refusal met in the handshake, when nothing was pooled: the same for the reads
        // that started before it (no handshake), and a new handshake for a later one.
        let fresh = Arc::new(QuicClient::new(cfg.clone(), Duration::from_secs(5)));
        let flow = Flow::of(&Policy::default());
        let read = Instant::now();
        fresh
            .slot(ServerId(0), flow)
            .distrust_met(None, Distrust::Refused(ClientCertRefusal::Missing));
        match fresh.connection(ServerId(0), h.local_addr(), flow, read).await {
            Err(QuicError::Refused { reason, .. }) => assert_eq!(reason, ClientCertRefusal::Missing),
            other => panic!("expected the handshake's refusal again, got {other:?}"),
        }
        assert_eq!(after_a_while(&h.stats().tls_refused).await, 2, "a handshake");
        let later = Instant::now();
        // The client may finish its side of the handshake before the server refuses it.
        let _ = fresh.connection(ServerId(0), h.local_addr(), flow, later).await;
        assert_eq!(count_reaches(&h.stats().tls_refused, 3).await, 3);
        assert_eq!(h.stats().tls_abandoned.load(Ordering::Relaxed), 0);
        h.shutdown().await;
    }

    /// A server whose certificate this client refuses is not asked again by the same read
    /// (every other request of it gets the same error, with no handshake); a read that starts
    /// later tries again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refused_server_certificate_is_the_answer_for_the_rest_of_its_read_and_not_after() {
        let server_cert = SelfSigned::generate(["localhost", "127.0.0.1"]).unwrap();
        let other = SelfSigned::generate(["localhost", "127.0.0.1"]).unwrap();
        let h = server_of_blk(QuicServerConfig::builder(server_cert.identity()).build().unwrap()).await;
        // The client trusts another certificate than the one the server shows.
        let cfg = QuicClientConfig::builder(other.trust().unwrap()).build().unwrap();
        let client = Arc::new(QuicClient::new(cfg, Duration::from_secs(5)));
        let read = Instant::now();
        assert_eq!(
            distrusted(&client, h.local_addr(), read).await,
            CertProblem::UnknownIssuer
        );
        assert_eq!(count_reaches(&h.stats().tls_abandoned, 1).await, 1);
        // The same read's next request: the same error, and no handshake.
        assert_eq!(
            distrusted(&client, h.local_addr(), read).await,
            CertProblem::UnknownIssuer
        );
        assert_eq!(after_a_while(&h.stats().tls_abandoned).await, 1, "a second handshake");
        // A read that starts now: a new handshake, refused again.
        let later = Instant::now();
        assert_eq!(
            distrusted(&client, h.local_addr(), later).await,
            CertProblem::UnknownIssuer
        );
        assert_eq!(count_reaches(&h.stats().tls_abandoned, 2).await, 2);
        // That read's next request: the same error, and no third handshake.
        assert_eq!(
            distrusted(&client, h.local_addr(), later).await,
            CertProblem::UnknownIssuer
        );
        assert_eq!(after_a_while(&h.stats().tls_abandoned).await, 2, "a third handshake");
        assert_eq!(h.stats().connections.load(Ordering::Relaxed), 0);
        h.shutdown().await;
    }
}
