//! The QUIC side of the fragment server: one task per connection, one per request stream.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use quinn::{Connection, Endpoint, RecvStream, SendStream};
use tokio::io::AsyncWrite;
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use super::{transport_config, udp_socket, Knobs, QuicServerConfig, REQUEST_STREAM_WINDOW};
use crate::server::{respond_any, send, shutdown_signal, truncate, Ctx, Sink};
use crate::store::FragmentStore;
use crate::wire::{ErrorCode, Frame, Header, Kind, TcpCounters, WireError, HEADER_LEN};

/// QUIC error code of a connection closed because the server shuts down.
const CLOSE_SHUTDOWN: u32 = 1;
/// QUIC error code of a stream reset because its request did not arrive in time.
const RESET_TIMEOUT: u32 = 2;

/// The running QUIC endpoint of a server.
#[derive(Debug)]
pub(crate) struct ServerTask {
    pub(crate) local_addr: SocketAddr,
    pub(crate) udp_buffers: (usize, usize),
    endpoint: Endpoint,
    task: JoinHandle<()>,
}

impl ServerTask {
    /// Waits for the accept loop (it ends on the shutdown signal), then closes the endpoint.
    pub(crate) async fn finish(self) {
        let _ = self.task.await;
        self.endpoint.close(CLOSE_SHUTDOWN.into(), b"shutdown");
    }
    /// Closes everything now.
    pub(crate) fn abort(self) {
        self.task.abort();
        self.endpoint.close(CLOSE_SHUTDOWN.into(), b"abort");
    }
}

/// Binds UDP `addr` and serves QUIC there until `shutdown`.
pub(crate) fn spawn_server<S: FragmentStore>(
    addr: SocketAddr,
    ctx: Arc<Ctx<S>>,
    q: &QuicServerConfig,
    shutdown: watch::Receiver<bool>,
) -> io::Result<ServerTask> {
    let (sock, udp_buffers) = udp_socket(addr, q.tuning.udp_buffer)?;
    let local_addr = sock.local_addr()?;
    let streams = ctx.cfg.max_outstanding() as u32;
    let knobs = Knobs {
        initial_rtt: q.tuning.initial_rtt,
        max_ack_delay: q.tuning.max_ack_delay,
        congestion: q.tuning.congestion,
        stream_window: Some(REQUEST_STREAM_WINDOW),
        conn_window: Some(u64::from(REQUEST_STREAM_WINDOW) * u64::from(streams)),
        max_bidi_streams: streams,
        idle_timeout: q.tuning.idle_timeout,
    };
    let mut sc = quinn::ServerConfig::with_crypto(q.crypto.clone());
    sc.transport_config(Arc::new(transport_config(&knobs)));
    sc.migration(false);
    let endpoint = super::endpoint(sock, Some(sc), q.tuning.max_gso_segments)?;
    let task = tokio::spawn(accept_loop(endpoint.clone(), ctx, shutdown));
    Ok(ServerTask {
        local_addr,
        udp_buffers,
        endpoint,
        task,
    })
}

async fn accept_loop<S: FragmentStore>(endpoint: Endpoint, ctx: Arc<Ctx<S>>, mut shutdown: watch::Receiver<bool>) {
    let limit = Arc::new(Semaphore::new(ctx.cfg.max_connections()));
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown_signal(&mut shutdown) => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                match limit.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let (ctx, rx) = (ctx.clone(), shutdown.clone());
                        conns.spawn(async move {
                            match tokio::time::timeout(ctx.cfg.frame_timeout(), incoming).await {
                                Ok(Ok(conn)) => {
                                    ctx.stats.connections.fetch_add(1, Ordering::Relaxed);
                                    connection(conn, ctx, rx).await;
                                }
                                // This side failed the handshake (a refused or missing client
                                // certificate, a malformed hello), or it did not end in time.
                                Ok(Err(quinn::ConnectionError::TransportError(_))) | Err(_) => {
                                    ctx.stats.tls_refused.fetch_add(1, Ordering::Relaxed);
                                }
                                // The client closed, reset or went quiet first.
                                Ok(Err(_)) => {
                                    ctx.stats.tls_abandoned.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        ctx.stats.refused.fetch_add(1, Ordering::Relaxed);
                        incoming.refuse();
                    }
                }
            }
        }
    }
    endpoint.set_server_config(None);
    let grace = ctx.cfg.shutdown_grace();
    let _ = tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
}

async fn connection<S: FragmentStore>(conn: Connection, ctx: Arc<Ctx<S>>, mut shutdown: watch::Receiver<bool>) {
    let mut streams = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown_signal(&mut shutdown) => break,
            Some(_) = streams.join_next(), if !streams.is_empty() => {}
            accepted = conn.accept_bi() => match accepted {
                Ok((send, recv)) => {
                    let (ctx, conn) = (ctx.clone(), conn.clone());
                    streams.spawn(async move { stream(send, recv, conn, &ctx).await });
                }
                // Closed by the peer, idle, or lost: nothing more to serve.
                Err(_) => break,
            },
        }
    }
    // Let running responses finish (the accept loop bounds this by the grace period).
    while streams.join_next().await.is_some() {}
    conn.close(CLOSE_SHUTDOWN.into(), b"shutdown");
}

/// A QUIC send stream as a response sink; its `End` frames carry quinn's path counters in the
/// TCP counter fields (see [`crate::wire::TcpCounters`]).
struct QuicSink {
    send: SendStream,
    conn: Connection,
}

impl AsyncWrite for QuicSink {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        AsyncWrite::poll_write(Pin::new(&mut self.send), cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        AsyncWrite::poll_flush(Pin::new(&mut self.send), cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        AsyncWrite::poll_shutdown(Pin::new(&mut self.send), cx)
    }
}

impl Sink for QuicSink {
    fn counters(&self) -> Option<TcpCounters> {
        let s = self.conn.stats();
        let c = |v: u64| v.min(u64::from(u32::MAX)) as u32;
        Some(TcpCounters {
            rtt_us: c(s.path.rtt.as_micros() as u64),
            retransmits: c(s.path.lost_packets),
            rtos: c(s.path.congestion_events),
            rto_recoveries: 0,
            rto_time_ms: 0,
        })
    }
}

/// Reads the one request of a stream, with every length bounded by the wire format.
async fn read_request(recv: &mut RecvStream) -> Result<Option<Frame>, WireError> {
    let mut head = [0u8; HEADER_LEN];
    if recv.read_exact(&mut head).await.is_err() {
        return Ok(None);
    }
    let h = Header::decode(&head)?;
    if !matches!(h.kind, Kind::Request | Kind::OpenRequest) {
        return Err(WireError::UnexpectedKind { kind: h.kind });
    }
    // Bounded by `Header::decode`: a request is a control frame (at most 2 KiB), an open
    // request at most `MAX_OPEN_REQUEST_PAYLOAD` (about 17 KiB).
    let mut body = vec![0u8; h.len as usize];
    if recv.read_exact(&mut body).await.is_err() {
        return Ok(None);
    }
    Frame::decode_payload(&h, body.into()).map(Some)
}

async fn stream<S: FragmentStore>(out: SendStream, mut recv: RecvStream, conn: Connection, ctx: &Ctx<S>) {
    let mut sink = QuicSink { send: out, conn };
    let mut buf = Vec::with_capacity(256);
    let stats = &ctx.stats;
    let request = match tokio::time::timeout(ctx.cfg.frame_timeout(), read_request(&mut recv)).await {
        Err(_) => {
            stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
            let _ = sink.send.reset(RESET_TIMEOUT.into());
            return;
        }
        Ok(Ok(None)) => return,
        Ok(Err(e)) => {
            stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
            let message = truncate(e.to_string());
            let error = Frame::Error {
                id: 0,
                code: ErrorCode::BadRequest,
                message,
            };
            let _ = send(&mut sink, &mut buf, error).await;
            let _ = sink.send.finish();
            return;
        }
        Ok(Ok(Some(frame))) => frame,
    };
    drop(recv);
    let (id, key, offset, len, open) = match request {
        Frame::Request {
            id, key, offset, len, ..
        } => (id, key, offset, len, None),
        Frame::OpenRequest {
            id,
            key,
            offset,
            len,
            limit,
            query,
            ..
        } => (id, key, offset, len, Some((limit, query))),
        _ => unreachable!("read_request returns requests only"),
    };
    let max = ctx.cfg.max_request_bytes();
    let result = if len > max {
        stats.request_errors.fetch_add(1, Ordering::Relaxed);
        let error = Frame::Error {
            id,
            code: ErrorCode::BadRequest,
            message: format!("request of {len} bytes exceeds this server's limit of {max}"),
        };
        send(&mut sink, &mut buf, error).await
    } else {
        // A cancel is the client's STOP_SENDING: the next write fails.
        respond_any(&mut sink, &mut buf, &|| false, ctx, id, &key, offset, len, open).await
    };
    match result {
        Ok(()) => {
            let _ = sink.send.finish();
        }
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
            stats.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => {}
    }
}
