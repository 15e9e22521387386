//! A plain blocking client, written apart from the library's client on purpose: the
//! `blocking` strategy, so that a collapse measured through `naive` can be checked by a second
//! client that shares none of its code path (no scheduler, no tokio, no socket tuning, its
//! own frame encoding and decoding).
//!
//! It is the seeds' synchronized-read client: one kernel-default TCP connection per server,
//! every fragment requested at once, one OS thread per fragment blocking in `read` until its
//! fragment is complete, and the next block only after the last fragment arrived. It speaks
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

    /// Reads the block: every fragment at once, one thread each. Any failure fails the block
    /// (and drops that connection, so the next block reconnects).
    pub fn read(&self, stripe: &Stripe) -> io::Result<Vec<u8>> {
        let mut block = vec![0u8; stripe.block_len() as usize];
        let mut rest = block.as_mut_slice();
        let mut jobs = Vec::with_capacity(stripe.len());
        for f in stripe.fragments() {
            let (mine, tail) = rest.split_at_mut(f.len() as usize);
            rest = tail;
            jobs.push((f, mine));
        }
        // Every thread connects (first block only) and then waits, so that all requests
        // leave together: spawning 64 threads takes milliseconds here, and requests sent as
        // the threads come up would stagger the senders, which is not the synchronized read.
        let start = std::sync::Barrier::new(jobs.len());
        let start = &start;
        std::thread::scope(|s| {
            let handles: Vec<_> = jobs
                .into_iter()
                .map(|(f, out)| {
                    let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    s.spawn(move || self.fetch(f.server(), id, f.key(), f.offset(), out, start))
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

    fn fetch(
        &self,
        server: ServerId,
        id: u64,
        key: &str,
        offset: u64,
        out: &mut [u8],
        start: &std::sync::Barrier,
    ) -> io::Result<()> {
        let slot = self.conns.get(&server);
        let mut guard = slot.map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
        let connected = match guard.as_deref_mut() {
            None => Err(io::Error::other(format!("unknown server {server:?}"))),
            Some(Some(_)) => Ok(()),
            Some(conn @ None) => TcpStream::connect_timeout(&self.addrs[&server], self.timeout).and_then(|s| {
                s.set_read_timeout(Some(self.timeout))?;
                s.set_write_timeout(Some(self.timeout))?;
                *conn = Some(s);
                Ok(())
            }),
        };
        // Wait for the others even when this one failed, or they would wait forever.
        start.wait();
        connected?;
        let sock = guard.as_deref_mut().and_then(Option::as_mut).expect("connected above");
        let r = exchange(sock, id, key, offset, out);
        if r.is_err() {
            if let Some(g) = guard.as_deref_mut() {
                *g = None;
            }
        }
        r
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

/// Sends one request and reads its response into `out`.
fn exchange(sock: &mut TcpStream, id: u64, key: &str, offset: u64, out: &mut [u8]) -> io::Result<()> {
    let key = key.as_bytes();
    let mut req = Vec::with_capacity(16 + 18 + key.len());
    req.extend_from_slice(&header(REQUEST, (18 + key.len()) as u32, id));
    req.extend_from_slice(&offset.to_be_bytes());
    req.extend_from_slice(&(out.len() as u64).to_be_bytes());
    req.extend_from_slice(&(key.len() as u16).to_be_bytes());
    req.extend_from_slice(key);
    sock.write_all(&req)?;
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
