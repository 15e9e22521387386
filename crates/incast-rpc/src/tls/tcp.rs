//! TLS over the TCP transport: the client's handshake and record layer, the server's accept.
//!
//! **Client.** The handshake runs through tokio-rustls. After it, the read's driver keeps
//! reading sockets the way it does in plaintext: nonblocking reads straight after a readiness
//! event, until the socket has nothing more, with no task per connection. [`Session`] is the
//! record layer between the socket and the driver: it reads ciphertext in 64 KiB gulps (rustls
//! alone would read 4 KiB per system call), hands it to rustls, and returns plaintext into the
//! caller's buffer (the block, for data). It costs one copy of the ciphertext and the
//! decryption, against plaintext's single copy from the kernel.
//!
//! **Server.** A connection is accepted through tokio-rustls within the frame timeout, then
//! served by the same reader and writer as plaintext over the split stream. Pacing and
//! transport counters need the socket itself, which the split stream hides: the writer keeps a
//! duplicate of its descriptor ([`TlsWriter`]), one more descriptor per connection.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use incast_core::ServerId;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt, WriteHalf};
use tokio::net::TcpStream;

use super::{ClientCertRefusal, TlsClientConfig, TlsFailure, TlsServerConfig};
use crate::wire::TcpCounters;

/// Ciphertext read from the socket per system call.
const RX_BYTES: usize = 64 << 10;
/// How long a server keeps a connection whose handshake it refused, reading and discarding
/// what the client sent meanwhile, so its alert is not lost to a reset.
const LINGER: Duration = Duration::from_millis(500);
/// Bytes a server discards from a refused client before closing anyway.
const LINGER_BYTES: usize = 64 << 10;

/// A client's TLS session on one TCP connection, after the handshake.
pub(crate) struct Session {
    conn: Box<rustls::ClientConnection>,
    rx: Vec<u8>,
    at: usize,
    end: usize,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("buffered", &(self.end - self.at))
            .finish_non_exhaustive()
    }
}

/// Reads from a nonblocking socket without waiting (`WouldBlock` when it has nothing).
struct SockIo<'a>(&'a TcpStream);

impl Read for SockIo<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for SockIo<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Session {
    /// Reads plaintext into `buf`: `Ok(0)` when the server closed the session, `WouldBlock`
    /// when neither rustls nor the socket holds any more. A TLS error comes back as an
    /// `InvalidData` error wrapping the `rustls::Error` ([`failure_of`] reads it).
    pub(crate) fn try_read(&mut self, sock: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return r,
            }
            if self.at == self.end {
                self.rx.resize(RX_BYTES, 0);
                let n = sock.try_read(&mut self.rx)?;
                (self.at, self.end) = (0, n);
                if n == 0 {
                    // End of stream: rustls learns it, and its reader says how it ended.
                    self.conn.read_tls(&mut io::empty())?;
                    continue;
                }
            }
            let n = self.conn.read_tls(&mut &self.rx[self.at..self.end])?;
            self.at += n;
            self.conn
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            // Whatever rustls must answer (a key update, an alert) goes out now if it can;
            // else with the next request.
            if self.conn.wants_write() {
                let _ = self.conn.write_tls(&mut SockIo(sock));
            }
        }
    }

    /// Queues plaintext to send: [`Session::try_flush`] sends it.
    pub(crate) fn queue(&mut self, plain: &[u8]) -> io::Result<()> {
        self.conn.writer().write_all(plain)
    }

    /// Sends what is queued: `WouldBlock` when the socket is full (wait for writability and
    /// call again).
    pub(crate) fn try_flush(&mut self, sock: &TcpStream) -> io::Result<()> {
        while self.conn.wants_write() {
            self.conn.write_tls(&mut SockIo(sock))?;
        }
        Ok(())
    }

    /// Whether nothing is left to send or to hand over: the connection may be pooled.
    pub(crate) fn is_idle(&self) -> bool {
        !self.conn.wants_write() && self.at == self.end
    }
}

/// The failure behind an error of [`Session::try_read`] or of the handshake: the server's
/// refusal of this client, typed, or `None` for anything else.
pub(crate) fn failure_of(e: &io::Error, server: ServerId, addr: SocketAddr) -> Option<TlsFailure> {
    let reason = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .and_then(ClientCertRefusal::of_error)?;
    Some(TlsFailure::Refused { server, addr, reason })
}

/// Runs the client's handshake on a connected socket and returns the socket with its session.
pub(crate) async fn connect(
    stream: TcpStream,
    cfg: &TlsClientConfig,
    server: ServerId,
    addr: SocketAddr,
) -> Result<(TcpStream, Session), TlsFailure> {
    let handshake = |detail: String| TlsFailure::Handshake { server, addr, detail };
    let (crypto, verifier) = cfg.crypto().map_err(|e| handshake(e.to_string()))?;
    let name = cfg.name_for(addr);
    let server_name =
        ServerName::try_from(name.clone()).map_err(|e| handshake(format!("server name `{name}`: {e}")))?;
    let connector = tokio_rustls::TlsConnector::from(crypto);
    match connector.connect(server_name, stream).await {
        Ok(tls) => {
            let (stream, mut conn) = tls.into_inner();
            // Requests are bounded by the read's grants; the driver flushes after queueing.
            conn.set_buffer_limit(None);
            let session = Session {
                conn: Box::new(conn),
                rx: Vec::new(),
                at: 0,
                end: 0,
            };
            Ok((stream, session))
        }
        Err(e) => Err(match verifier.refused() {
            Some(problem) => TlsFailure::Certificate {
                server,
                addr,
                name,
                problem,
            },
            None => failure_of(&e, server, addr).unwrap_or_else(|| handshake(e.to_string())),
        }),
    }
}

/// The server's side of an accepted connection once its handshake is done.
pub(crate) type ServerStream = tokio_rustls::server::TlsStream<TcpStream>;

/// Runs the server's handshake within `timeout`. `Err`: refused, too slow, or given up by
/// the client; the caller counts it, then lets [`Refused::linger`] close the connection.
pub(crate) async fn accept(
    stream: TcpStream,
    cfg: &TlsServerConfig,
    timeout: Duration,
) -> Result<ServerStream, Refused> {
    let acceptor = tokio_rustls::TlsAcceptor::from(cfg.crypto());
    match tokio::time::timeout(timeout, acceptor.accept(stream).into_fallible()).await {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err((e, _))) if is_abandoned(&e) => Err(Refused::Abandoned),
        Ok(Err((_, stream))) => Err(Refused::Failed(stream)),
        Err(_) => Err(Refused::TimedOut),
    }
}

/// Whether a handshake ended because the client closed or reset its connection, not because
/// its bytes failed. A client does this when it no longer needs a connection it was opening:
/// a read that ends while a spare connection for a hedge is still in its handshake. rustls
/// reports a refused or malformed handshake as `InvalidData`.
fn is_abandoned(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

/// A connection whose handshake did not end.
pub(crate) enum Refused {
    /// The server failed it (a refused certificate, bytes that are not TLS): the stream is
    /// kept so the client can read the alert.
    Failed(TcpStream),
    /// It did not end within the timeout; dropped.
    TimedOut,
    /// The client closed or reset it first: not a refusal, and nothing is left to say.
    Abandoned,
}

impl Refused {
    /// Whether the client closed the connection before its handshake ended: not a refusal.
    pub(crate) fn abandoned(&self) -> bool {
        matches!(self, Refused::Abandoned)
    }

    /// Closes the connection so the client can read the alert. tokio-rustls has written it;
    /// closing now with the client's requests unread would reset the connection, and a reset
    /// can destroy the alert before the client reads it. So: finish our side, and discard
    /// what comes, for a bounded time and count.
    pub(crate) async fn linger(self) {
        let Refused::Failed(mut stream) = self else { return };
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 4096];
        let mut left = LINGER_BYTES;
        let _ = tokio::time::timeout(LINGER, async {
            while left > 0 {
                match stream.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => left = left.saturating_sub(n),
                }
            }
        })
        .await;
    }
}

/// The writing half of a server's TLS connection, with a duplicate of its socket's descriptor
/// for pacing and transport counters.
pub(crate) struct TlsWriter {
    half: WriteHalf<ServerStream>,
    fd: OwnedFd,
}

impl TlsWriter {
    /// Splits `tls`: the reading half, and the writer. Fails only if the descriptor cannot be
    /// duplicated (the process is out of descriptors).
    pub(crate) fn split(tls: ServerStream) -> io::Result<(tokio::io::ReadHalf<ServerStream>, TlsWriter)> {
        let fd = tls.get_ref().0.as_fd().try_clone_to_owned()?;
        let (rd, half) = tokio::io::split(tls);
        Ok((rd, TlsWriter { half, fd }))
    }
}

impl crate::server::TcpSink for TlsWriter {
    fn socket(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsyncWrite for TlsWriter {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.half).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.half).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.half.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.half).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.half).poll_shutdown(cx)
    }
}

impl crate::server::Sink for TlsWriter {
    fn counters(&self) -> Option<TcpCounters> {
        crate::TcpInfo::of(&self.fd).ok().map(|i| i.counters())
    }
}
