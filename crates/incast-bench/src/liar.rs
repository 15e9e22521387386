//! A fragment server that lies, for `incast-bench chaos`: it speaks the wire format and sends
//! the pattern's bytes, but with a wrong CRC32C, or ends each response after half of them, or
//! sends one byte at a time. The client must never return what it sent as a block.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::BytesMut;
use incast_rpc::store::FragmentStore;
use incast_rpc::wire::{self, Frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use crate::chaos::Lie;
use crate::netns::Netns;
use crate::pattern::PatternStore;

/// A running liar; dropping it stops it and closes its connections.
#[derive(Debug)]
pub struct Liar {
    addr: SocketAddr,
    responses: Arc<AtomicU64>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Liar {
    /// Starts a liar on `ip` (port chosen by the kernel) inside `ns`.
    pub fn start(ns: Netns, ip: IpAddr, lie: Lie) -> std::io::Result<Self> {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let responses = Arc::new(AtomicU64::new(0));
        let sent = responses.clone();
        let thread = std::thread::Builder::new().name("liar".into()).spawn(move || {
            let rt = match ns
                .enter()
                .and_then(|()| tokio::runtime::Builder::new_current_thread().enable_all().build())
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = addr_tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::bind(SocketAddr::new(ip, 0)).await {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e));
                        return;
                    }
                };
                let _ = addr_tx.send(listener.local_addr());
                let accept = async {
                    loop {
                        let Ok((conn, _)) = listener.accept().await else {
                            continue;
                        };
                        tokio::spawn(serve(conn, lie, sent.clone()));
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stop_rx => {}
                }
            });
            // The runtime's drop aborts every connection task.
        })?;
        let addr = addr_rx
            .recv()
            .map_err(|_| std::io::Error::other("the liar's thread ended before it listened"))??;
        Ok(Self {
            addr,
            responses,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Responses it has sent (or started, for a trickle).
    pub fn responses(&self) -> u64 {
        self.responses.load(Ordering::Relaxed)
    }
}

impl Drop for Liar {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers the requests of one connection, in order, lying as told.
async fn serve(mut conn: tokio::net::TcpStream, lie: Lie, sent: Arc<AtomicU64>) {
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        let frame = loop {
            match wire::decode(&buf) {
                Ok(Some((f, used))) => {
                    let _ = buf.split_to(used);
                    break f;
                }
                Ok(None) => match conn.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                },
                Err(_) => return,
            }
        };
        let Frame::Request {
            id, key, offset, len, ..
        } = frame
        else {
            continue;
        };
        let Ok(data) = PatternStore.read(&key, offset, len).await else {
            return;
        };
        sent.fetch_add(1, Ordering::Relaxed);
        let mut out = Vec::new();
        let (body, crc) = match lie {
            Lie::Crc => (&data[..], Some(crc32c::crc32c(&data) ^ 0x5A5A_5A5A)),
            Lie::Short => (&data[..data.len() / 2], Some(crc32c::crc32c(&data[..data.len() / 2]))),
            Lie::Trickle => (&data[..], Some(crc32c::crc32c(&data))),
        };
        let step = if lie == Lie::Trickle { 1 } else { 256 << 10 };
        for chunk in body.chunks(step) {
            out.clear();
            Frame::Data {
                id,
                payload: bytes::Bytes::copy_from_slice(chunk),
            }
            .encode(&mut out);
            if conn.write_all(&out).await.is_err() {
                return;
            }
            if lie == Lie::Trickle {
                tokio::time::sleep(crate::chaos::TRICKLE_GAP).await;
            }
        }
        out.clear();
        Frame::End {
            id,
            crc32c: crc,
            counters: None,
            at_start: None,
            cancelled: false,
        }
        .encode(&mut out);
        if conn.write_all(&out).await.is_err() {
            return;
        }
    }
}
