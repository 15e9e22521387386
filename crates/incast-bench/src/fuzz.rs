//! `incast-bench fuzz`: random and structure-aware mutated frames against the client's frame
//! decoder and against a live server, counting panics, hangs and memory.
//!
//! Frames come from a seeded generator: a quarter are random bytes (up to 2 KiB, half of them
//! behind a valid version byte so they reach the kind and length checks), the rest are valid
//! frames of every kind (requests, open requests with queries, cancels, data, ends, errors,
//! lengths) with one mutation each: a header byte or a payload byte changed, the frame cut
//! short, a part of it repeated, or two frames spliced.
//!
//! - **Decoder.** Every frame goes through [`incast_rpc::wire::decode`], alone and as part of a
//!   stream cut at random points; a panic is caught and counted.
//! - **Live server.** The same frames, in batches of [`BATCH`], go to a server on loopback
//!   (`frame_timeout` 200 ms) over connections [`CONNECTIONS`] at a time. Each connection
//!   sends its batch, shuts its write side and reads until the server closes; a server that
//!   has not closed [`HANG_AFTER`] later counts as a hang. Afterwards the server must still
//!   serve a real read, byte-exact.
//!
//! A panic anywhere in the process (the server's tasks included) goes through a hook that
//! counts it. Resident memory is sampled before and after each part.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use incast_core::{Policy, ServerId, Stripe};
use incast_rpc::store::MemStore;
use incast_rpc::wire::{self, ErrorCode, Frame, HEADER_LEN};
use incast_rpc::{serve, Client, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Frames sent on one connection: 1, so every frame reaches the server's parser (it closes a
/// connection at its first violation, and frames after it would never be read).
pub const BATCH: usize = 1;
/// Connections at once against the live server.
pub const CONNECTIONS: usize = 32;
/// Time a server may take to close a connection after the client's last byte.
pub const HANG_AFTER: Duration = Duration::from_secs(3);

/// Panics seen by the hook.
static PANICS: AtomicU64 = AtomicU64::new(0);

/// What a fuzz run found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Report {
    /// Frames generated (each part gets all of them).
    pub frames: u64,
    /// The generator's seed.
    pub seed: u64,
    /// Decoder: frames decoded whole.
    pub decoded: u64,
    /// Decoder: frames that needed more bytes.
    pub incomplete: u64,
    /// Decoder: frames refused with a typed error.
    pub refused: u64,
    /// Decoder: panics caught.
    pub decoder_panics: u64,
    /// Decoder: wall time, s.
    pub decoder_s: f64,
    /// Server: connections used.
    pub connections: u64,
    /// Server: connections it had not closed in time.
    pub hangs: u64,
    /// Server: connections it closed for a protocol violation (its counter).
    pub protocol_errors: u64,
    /// Server: connections on which it sent something (data, or an error frame).
    pub answered: u64,
    /// Server: frames it read, up to and including the first violation of each connection
    /// (counted by decoding each batch the way the server does).
    pub reached: u64,
    /// Server: wall time, s.
    pub server_s: f64,
    /// Panics anywhere in the process (the hook's count).
    pub panics: u64,
    /// A real read after the fuzzing: byte-exact.
    pub read_after_ok: bool,
    /// Resident memory, KiB: at the start, after the decoder, after the server.
    pub rss_kib: (u64, u64, u64),
}

/// xorshift64*: enough to spread mutations; seeded, so a run can be repeated.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// A valid frame of a kind picked by `rng`.
fn valid(rng: &mut Rng) -> Vec<u8> {
    let id = 1 + rng.below(8);
    let key = ["obj", "k", "", "a/b/c"][rng.below(4) as usize].to_owned();
    let f = match rng.below(9) {
        0 | 1 => Frame::Request {
            id,
            key,
            offset: rng.below(1 << 12),
            len: rng.below(1 << 14),
            pace: (rng.below(2) == 0).then(|| 1 + rng.below(1 << 30)),
        },
        2 => Frame::OpenRequest {
            id,
            key,
            offset: rng.below(1 << 12),
            len: rng.below(1 << 14),
            limit: rng.below(1 << 20),
            query: (rng.below(2) == 0).then(|| Bytes::from(vec![b'q'; rng.below(64) as usize])),
            pace: None,
        },
        3 => Frame::Cancel { id },
        4 => Frame::Data {
            id,
            payload: Bytes::from(vec![7u8; rng.below(3000) as usize]),
        },
        5 => Frame::End {
            id,
            crc32c: Some(rng.next() as u32),
            counters: None,
            at_start: (rng.below(2) == 0).then(|| incast_rpc::wire::StartCounters {
                retransmits: rng.next() as u32,
                rtos: rng.next() as u32,
            }),
            cancelled: rng.below(2) == 0,
        },
        6 => Frame::Error {
            id,
            code: ErrorCode::Other(rng.below(20) as u16),
            message: "no".into(),
        },
        7 => Frame::Length { id, size: rng.next() },
        _ => Frame::StoreTime {
            id,
            micros: rng.next() as u32,
        },
    };
    let mut out = Vec::new();
    f.encode(&mut out);
    out
}

/// One fuzzed frame (or a few bytes that look like one).
fn frame(rng: &mut Rng) -> Vec<u8> {
    if rng.below(4) == 0 {
        let mut v: Vec<u8> = (0..rng.below(2048)).map(|_| rng.next() as u8).collect();
        if rng.below(2) == 0 && !v.is_empty() {
            v[0] = wire::VERSION;
        }
        return v;
    }
    let mut f = valid(rng);
    match rng.below(5) {
        // One header byte changed (version, kind, flags, length or id).
        0 => {
            let i = rng.below(HEADER_LEN as u64) as usize;
            f[i] = rng.next() as u8;
        }
        // One payload byte changed (or a header byte, for an empty payload).
        1 => {
            let i = rng.below(f.len() as u64) as usize;
            f[i] ^= 1 << rng.below(8);
        }
        // Cut short.
        2 => f.truncate(rng.below(f.len() as u64) as usize),
        // A part repeated.
        3 => {
            let a = rng.below(f.len() as u64) as usize;
            let part = f[a..].to_vec();
            f.extend_from_slice(&part);
        }
        // Two frames spliced.
        _ => {
            let g = valid(rng);
            let cut = rng.below(f.len() as u64) as usize;
            f.truncate(cut);
            f.extend_from_slice(&g[rng.below(g.len() as u64) as usize..]);
        }
    }
    f
}

/// How many of `frames`, sent back to back on one connection, the server reads: each whole
/// frame that is a request, an open request or a cancel, then the first that is not.
fn reached_by_server(frames: &[Vec<u8>]) -> u64 {
    let stream = frames.concat();
    let mut at = 0;
    let mut n = 0;
    while at < stream.len() {
        n += 1;
        match wire::decode(&stream[at..]) {
            Ok(Some((Frame::Request { .. } | Frame::OpenRequest { .. } | Frame::Cancel { .. }, used))) => at += used,
            _ => break,
        }
    }
    n
}

/// Runs `frames` fuzzed frames through the decoder and against a live server.
pub fn run(frames: u64, seed: u64, quiet: bool) -> std::io::Result<Report> {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::Relaxed);
        previous(info);
    }));
    let mut r = Report {
        frames,
        seed,
        ..Report::default()
    };
    let rss0 = crate::chaos::rss_and_fds().0;
    // Part 1: the decoder, frame by frame and as a stream.
    let t = Instant::now();
    let mut rng = Rng(seed | 1);
    let mut stream = Vec::new();
    for n in 0..frames {
        let f = frame(&mut rng);
        match std::panic::catch_unwind(|| wire::decode(&f)) {
            Ok(Ok(Some(_))) => r.decoded += 1,
            Ok(Ok(None)) => r.incomplete += 1,
            Ok(Err(_)) => r.refused += 1,
            Err(_) => r.decoder_panics += 1,
        }
        // A stream of frames, decoded while it grows and cut where a frame is refused.
        stream.extend_from_slice(&f);
        let res = std::panic::catch_unwind(AssertUnwindSafe(|| loop {
            match wire::decode(&stream) {
                Ok(Some((_, used))) => {
                    stream.drain(..used);
                }
                Ok(None) => break,
                Err(_) => {
                    stream.clear();
                    break;
                }
            }
        }));
        if res.is_err() {
            r.decoder_panics += 1;
            stream.clear();
        }
        if stream.len() > 1 << 20 {
            // A header that announced a large payload, never completed: start over.
            stream.clear();
        }
        if !quiet && n % 200_000 == 0 && n > 0 {
            eprintln!("fuzz: decoder {n} frames");
        }
    }
    r.decoder_s = t.elapsed().as_secs_f64();
    let rss1 = crate::chaos::rss_and_fds().0;
    // Part 2: a live server.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let t = Instant::now();
    let (stats, read_ok) = rt.block_on(async {
        let store = MemStore::new();
        let obj: Vec<u8> = (0..1 << 16).map(|i| (i * 7) as u8).collect();
        for k in ["obj", "k", "a/b/c"] {
            store.insert(k, obj.clone());
        }
        let cfg = ServerConfig::builder()
            .frame_timeout(Duration::from_millis(200))
            .build()
            .map_err(std::io::Error::other)?;
        let server = serve("127.0.0.1:0".parse().expect("address"), store, cfg).await?;
        let addr = server.local_addr();
        let hangs = Arc::new(AtomicU64::new(0));
        let answered = Arc::new(AtomicU64::new(0));
        let batches = frames.div_ceil(BATCH as u64);
        let mut rng = Rng(seed | 1);
        let mut next = 0u64;
        let mut reached = 0u64;
        let mut running = tokio::task::JoinSet::new();
        while next < batches || !running.is_empty() {
            while next < batches && running.len() < CONNECTIONS {
                let n = BATCH.min((frames - next * BATCH as u64) as usize);
                let frames: Vec<Vec<u8>> = (0..n).map(|_| frame(&mut rng)).collect();
                reached += reached_by_server(&frames);
                let batch: Vec<u8> = frames.concat();
                let (hangs, answered) = (hangs.clone(), answered.clone());
                running.spawn(async move {
                    let Ok(mut c) = tokio::net::TcpStream::connect(addr).await else {
                        return;
                    };
                    let (mut rd, mut wr) = c.split();
                    let send = async {
                        let _ = wr.write_all(&batch).await;
                        let _ = wr.shutdown().await;
                    };
                    let recv = async {
                        let mut buf = vec![0u8; 64 << 10];
                        let mut got = 0u64;
                        loop {
                            match rd.read(&mut buf).await {
                                Ok(0) | Err(_) => return got,
                                Ok(n) => got += n as u64,
                            }
                        }
                    };
                    let (_, got) = tokio::join!(send, async {
                        tokio::time::timeout(HANG_AFTER + Duration::from_millis(200) * BATCH as u32, recv).await
                    });
                    match got {
                        Ok(bytes) => {
                            if bytes > 0 {
                                answered.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(_) => {
                            hangs.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
                next += 1;
                if !quiet && next % 2000 == 0 {
                    eprintln!("fuzz: server {} frames", next * BATCH as u64);
                }
            }
            let _ = running.join_next().await;
        }
        // The server still serves a real read, byte-exact.
        let client = Client::new([(ServerId(0), addr)]);
        let stripe = Stripe::fixed_sru("obj", &[ServerId(0)], 1 << 16).map_err(std::io::Error::other)?;
        let ok = client
            .fan_in_read(&stripe, &Policy::default())
            .await
            .is_ok_and(|o| o.block == obj);
        let s = server.stats();
        let out = (
            (
                batches,
                hangs.load(Ordering::Relaxed),
                s.protocol_errors.load(Ordering::Relaxed),
                answered.load(Ordering::Relaxed),
                reached,
            ),
            ok,
        );
        server.shutdown().await;
        Ok::<_, std::io::Error>(out)
    })?;
    r.server_s = t.elapsed().as_secs_f64();
    (r.connections, r.hangs, r.protocol_errors, r.answered, r.reached) = stats;
    r.read_after_ok = read_ok;
    r.panics = PANICS.load(Ordering::Relaxed);
    r.rss_kib = (rss0, rss1, crate::chaos::rss_and_fds().0);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_reaches_every_outcome_and_nothing_panics() {
        let r = run(3_000, 7, true).unwrap();
        assert_eq!(r.decoder_panics + r.panics, 0, "{r:?}");
        assert!(r.decoded > 100 && r.incomplete > 100 && r.refused > 100, "{r:?}");
        assert_eq!(r.hangs, 0, "{r:?}");
        assert!(r.protocol_errors > 0 && r.answered > 0, "{r:?}");
        assert!(r.read_after_ok);
    }
}
