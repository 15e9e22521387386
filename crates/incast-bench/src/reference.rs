//! A plain blocking client, written apart from the library's client on purpose: the
//! `blocking` strategy, so that a collapse measured through `naive` can be checked by a second
//! client that shares none of its code path (no scheduler, no tokio, no socket tuning, its
//! own frame encoding and decoding).
//!
//! It is the seeds' synchronized-read client: one kernel-default TCP connection per server,
//! every fragment requested at once (the requests written back to back from one thread), one
//! OS thread per fragment blocking in `read` until its fragment is complete, and the next
//! block only after the last fragment arrived. It speaks
//! the wire format of [`incast_rpc::wire`] (documented there) encoded here by hand: a
//! `Request` frame, then `Data` frames and an `End` frame (or an `Error`).
//!
//! It reports no kernel RTO counts (the library's servers send them in `End`, which this
//! client skips over): its tables show goodput and latency only.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::Duration;

use incast_core::{ServerId, Stripe};

const VERSION: u8 = 1;
const REQUEST: u8 = 1;
const DATA: u8 = 3;
const END: u8 = 4;
const ERROR: u8 = 5;
/// The store's part of a response's hold (skipped: the reference client does not schedule).
const STORE_TIME: u8 = 8;
/// Largest Data payload the wire allows (1 MiB); anything larger is a broken peer.
const MAX_FRAME: usize = 1 << 20;

/// One connection per server, opened on first use.
#[derive(Debug)]
pub struct BlockingClient {
    addrs: HashMap<ServerId, SocketAddr>,
    conns: HashMap<ServerId, Mutex<Option<TcpStream>>>,
    timeout: Duration,
    next_id: std::sync::atomic::AtomicU64,
}

impl BlockingClient {
    /// A client for these servers; every socket read and write gives up after `timeout`.
    pub fn new(addrs: &[(ServerId, SocketAddr)], timeout: Duration) -> Self {
        Self {
            addrs: addrs.iter().copied().collect(),
            conns: addrs.iter().map(|(id, _)| (*id, Mutex::new(None))).collect(),
            timeout,
            next_id: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// Reads the block: every request written at once from this thread, as the seeds'
    /// clients did, then one thread per fragment blocking until its fragment is complete. Any
    /// failure fails the block (and drops that connection, so the next block reconnects).
    pub fn read(&self, stripe: &Stripe) -> io::Result<Vec<u8>> {
        // Connect and send every request before any thread starts reading: threads that sent
        // their own requests as they came up staggered the senders by milliseconds.
        let mut readers = Vec::with_capacity(stripe.len());
        for f in stripe.fragments() {
            let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            readers.push(self.request(f.server(), id, f.key(), f.offset(), f.len())?);
        }
        let mut block = vec![0u8; stripe.block_len() as usize];
        let mut rest = block.as_mut_slice();
        let mut jobs = Vec::with_capacity(stripe.len());
        for (f, (sock, id)) in stripe.fragments().iter().zip(readers) {
            let (mine, tail) = rest.split_at_mut(f.len() as usize);
            rest = tail;
            jobs.push((f.server(), sock, id, mine));
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = jobs
                .into_iter()
                .map(|(server, mut sock, id, out)| {
                    s.spawn(move || {
                        let r = response(&mut sock, id, out);
                        if r.is_err() {
                            self.forget(server);
                        }
                        r
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("reader thread panicked")))
                })
                .collect::<io::Result<Vec<()>>>()
        })?;
        Ok(block)
    }

    /// Sends one request on `server`'s connection (opened on first use) and returns a handle
    /// to read its response on.
    fn request(&self, server: ServerId, id: u64, key: &str, offset: u64, len: u64) -> io::Result<(TcpStream, u64)> {
        let (Some(slot), Some(addr)) = (self.conns.get(&server), self.addrs.get(&server)) else {
            return Err(io::Error::other(format!("unknown server {server:?}")));
        };
        let mut conn = slot.lock().unwrap_or_else(|e| e.into_inner());
        if conn.is_none() {
            let s = TcpStream::connect_timeout(addr, self.timeout)?;
            s.set_read_timeout(Some(self.timeout))?;
            s.set_write_timeout(Some(self.timeout))?;
            *conn = Some(s);
        }
        let sock = conn.as_mut().expect("connected above");
        let sent = send_request(sock, id, key, offset, len).and_then(|()| sock.try_clone());
        if sent.is_err() {
            *conn = None;
        }
        sent.map(|s| (s, id))
    }

    fn forget(&self, server: ServerId) {
        if let Some(slot) = self.conns.get(&server) {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}

fn header(kind: u8, len: u32, id: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0] = VERSION;
    h[1] = kind;
    h[4..8].copy_from_slice(&len.to_be_bytes());
    h[8..16].copy_from_slice(&id.to_be_bytes());
    h
}

/// Writes one `Request` frame.
fn send_request(sock: &mut TcpStream, id: u64, key: &str, offset: u64, len: u64) -> io::Result<()> {
    let key = key.as_bytes();
    let mut req = Vec::with_capacity(16 + 18 + key.len());
    req.extend_from_slice(&header(REQUEST, (18 + key.len()) as u32, id));
    req.extend_from_slice(&offset.to_be_bytes());
    req.extend_from_slice(&len.to_be_bytes());
    req.extend_from_slice(&(key.len() as u16).to_be_bytes());
    req.extend_from_slice(key);
    sock.write_all(&req)
}

/// Reads the response to request `id` into `out`: `Data` frames, then `End`.
fn response(sock: &mut TcpStream, id: u64, out: &mut [u8]) -> io::Result<()> {
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let mut filled = 0usize;
    let mut skip = [0u8; 2048];
    loop {
        let mut h = [0u8; 16];
        sock.read_exact(&mut h)?;
        let (kind, len) = (h[1], u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize);
        let got_id = u64::from_be_bytes(h[8..16].try_into().expect("8 bytes"));
        if h[0] != VERSION || got_id != id || len > MAX_FRAME {
            return Err(bad(format!(
                "unexpected frame: version {}, id {got_id} (want {id}), {len} bytes",
                h[0]
            )));
        }
        match kind {
            DATA => {
                let end = filled + len;
                if end > out.len() {
                    return Err(bad(format!("server sent {end} bytes of a {}-byte fragment", out.len())));
                }
                sock.read_exact(&mut out[filled..end])?;
                filled = end;
            }
            END if len <= skip.len() => {
                sock.read_exact(&mut skip[..len])?;
                return if filled == out.len() {
                    Ok(())
                } else {
                    Err(bad(format!("short fragment: {filled} of {} bytes", out.len())))
                };
            }
            STORE_TIME if len <= skip.len() => sock.read_exact(&mut skip[..len])?,
            ERROR if len <= skip.len() => {
                sock.read_exact(&mut skip[..len])?;
                let msg = String::from_utf8_lossy(skip.get(2..len).unwrap_or_default()).into_owned();
                return Err(io::Error::other(format!("server error: {msg}")));
            }
            k => return Err(bad(format!("unexpected frame kind {k} ({len} bytes)"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_frame_decodes_as_the_library_sees_it() {
        // The hand encoding must agree with the library's decoder, or the comparison means
        // nothing.
        let h = header(REQUEST, 18 + 3, 42);
        let d = incast_rpc::wire::Header::decode(&h).unwrap();
        assert_eq!(d.kind, incast_rpc::wire::Kind::Request);
        assert_eq!((d.len, d.id), (21, 42));
    }
}
