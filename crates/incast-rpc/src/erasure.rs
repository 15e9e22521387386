//! k-of-n erasure-coded reads (cargo feature `erasure`): [`Client::erasure_read`].
//!
//! An erasure-coded store (Ceph, MinIO, HDFS-EC) cuts a block into `k` data shards and adds
//! `m` parity shards; any `k` of the `n = k + m` rebuild the block. Reading all `n` costs
//! `n / k` times the bytes (rustfs measured 2x), so the healthy path reads the `k` data shards
//! only, and parity comes in only to cover a data shard that failed or straggles:
//!
//! - every shard is its own read on the client's port, so the shards share the port's budget
//!   and its SRPT order like any concurrent reads, and one shard failing does not end the
//!   others;
//! - a shard whose read fails (its server and replicas refused, closed, were removed, or the
//!   read timed out) is covered at once by the next parity shard not yet requested;
//! - stragglers: after `j` shards are whole, the last at `t_j` from the start, the next is
//!   expected within the mean gap `g = t_j / j` (the port serves the shard reads shortest
//!   first, so they complete one after another; served together, they complete together and
//!   the gap only overestimates). If none completes by `t_j + STRAGGLER_FACTOR x g +
//!   STRAGGLER_FLOOR`, a parity shard is requested, and the wait starts again. The port serves
//!   equal reads in start order, so the earliest-started shard still running is the one it
//!   serves, and nothing completing means that one is stuck: its read is dropped as the parity
//!   starts, which frees its share of the port at once (the port keeps a silent read's
//!   grants: see "A silent server" in `incast_core::receiver`). A frozen host's shard is
//!   covered a few shard times after the healthy ones, not at the read's deadline; before the
//!   first shard completes nothing is judged late;
//! - the read ends as soon as `k` shards are whole. The reads still running are dropped: their
//!   connections are closed, not drained back into the pool (a shortfall against reads of
//!   plain stripes, which drain cancelled requests);
//! - the block is the `k` data shards when they all arrived (no decoding at all), else the
//!   decode of the `k` that did, by [`reed_solomon_erasure`] (GF(2^8)).
//!
//! # Padding
//!
//! Shards have one length, [`shard_len`]: the block's length divided by `k`, rounded up
//! (Reed-Solomon codes work on equal shards). The last data shard is padded with zeros to
//! that length (by [`encode`], and by whoever wrote the shards), and the read returns exactly
//! `block_len` bytes: the padding is never returned.
//!
//! # Which codec
//!
//! Measured by `cargo bench --bench erasure` (2-core VM, 1 MiB shards, ms per MiB of block):
//!
//! | | 6+3 encode | 6+3 decode, 1 lost | 10+4 encode | 10+4 decode, 1 lost |
//! |---|---|---|---|---|
//! | reed-solomon-simd 3.1 | 0.47 | 1.86 | 0.44 | 1.33 |
//! | reed-solomon-erasure 6.0 | 1.16 | 0.50 | 1.47 | 0.53 |
//!
//! A read decodes, and a degraded read usually misses one shard: `reed-solomon-erasure`
//! rebuilds only the missing data shards (cost grows with the shards lost), where
//! `reed-solomon-simd` pays its O(n log n) transform whatever is lost, 2.5-3.7x slower here.
//! Encoding, a writer's cost, goes the other way. `reed-solomon-erasure` also uses
//! Backblaze's Vandermonde construction, as klauspost/reedsolomon (MinIO) does by default,
//! so shards such stores wrote decode here; the two crates' codes are not interchangeable.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use incast_core::{Fragment, Policy, ServerId};
//! use incast_rpc::erasure::{shard_len, ErasureStripe};
//! use incast_rpc::Client;
//! let block_len = 6 << 20;
//! let len = shard_len(block_len, 6)?;
//! // Shard i (6 data, then 3 parity) is object "blk-7/i" on server i.
//! let shards = (0..9).map(|i| Fragment::new(ServerId(i), format!("blk-7/{i}"), 0, len)).collect();
//! let stripe = ErasureStripe::new(block_len, 6, shards)?;
//! let client = Client::new((0..9).map(|i| (ServerId(i), format!("10.0.0.{}:7000", i + 1).parse().unwrap())));
//! let out = client.erasure_read(&stripe, &Policy::default()).await?;
//! assert_eq!(out.block.len() as u64, block_len);
//! println!("used shards {:?}, {} parity requested", out.used, out.parity_requested);
//! # Ok(()) }
//! ```

use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use incast_core::{Fragment, Policy, Stripe};
use tokio::sync::oneshot;

use crate::{Client, FanInError, ReadReport};

/// Most shards (data plus parity) one erasure stripe may have.
pub const MAX_SHARDS: usize = 256;
/// A shard is late when none completes for this many mean gaps between completions...
pub const STRAGGLER_FACTOR: f64 = 3.0;
/// ...plus this, so scheduling noise between fast shards does not count as a straggler (a
/// margin for a loaded machine; on the testbed it adds about 15 ms to a faulted read over a
/// 5 ms floor).
pub const STRAGGLER_FLOOR: Duration = Duration::from_millis(20);

/// Why an erasure stripe is invalid, or an erasure read failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErasureError {
    /// `k` is 0, or larger than the shards given, or the shards exceed [`MAX_SHARDS`].
    #[error("{data} data shards of {shards} (at least 1 data shard, at most {MAX_SHARDS} shards)")]
    ShardCount {
        /// Data shards asked for.
        data: usize,
        /// Shards given.
        shards: usize,
    },
    /// The block is empty.
    #[error("an erasure-coded block cannot be empty")]
    EmptyBlock,
    /// A shard's length is not [`shard_len`] of the block.
    #[error("shard {index} is {len} bytes; a block of {block_len} bytes in {data} data shards needs {want}")]
    ShardLength {
        /// The shard.
        index: usize,
        /// Its length.
        len: u64,
        /// The length it must have.
        want: u64,
        /// The block's length.
        block_len: u64,
        /// Data shards.
        data: usize,
    },
    /// A shard is not a valid one-fragment stripe (replica count, range overflow).
    #[error("shard {index}: {source}")]
    Shard {
        /// The shard.
        index: usize,
        /// Why.
        source: incast_core::StripeError,
    },
    /// The shards together exceed [`crate::ClientConfigBuilder::max_block_bytes`].
    #[error("{shards} shards of {shard_len} bytes exceed this client's limit of {max} bytes")]
    TooLarge {
        /// Shards.
        shards: usize,
        /// Bytes per shard.
        shard_len: u64,
        /// The limit.
        max: u64,
    },
    /// Fewer than `k` shards could be read: the block cannot be rebuilt.
    #[error("{got} of the {need} shards needed could be read; failures: {}", list(failures))]
    NotEnoughShards {
        /// Shards read whole.
        got: usize,
        /// Shards needed (`k`).
        need: usize,
        /// Every shard read that failed, with why.
        failures: Vec<(usize, FanInError)>,
    },
    /// The codec refused the shards (a bug, or shards written by another code).
    #[error("reed-solomon: {0}")]
    Codec(String),
}

fn list(failures: &[(usize, FanInError)]) -> String {
    failures
        .iter()
        .map(|(i, e)| format!("shard {i}: {e}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The length of every shard of a `block_len`-byte block in `data` data shards: the block
/// divided by `data`, rounded up.
///
/// ```
/// use incast_rpc::erasure::shard_len;
/// assert_eq!(shard_len(6 << 20, 6).unwrap(), 1 << 20);
/// assert_eq!(shard_len(1001, 10).unwrap(), 101);
/// ```
pub fn shard_len(block_len: u64, data: usize) -> Result<u64, ErasureError> {
    if block_len == 0 {
        return Err(ErasureError::EmptyBlock);
    }
    if data == 0 || data > MAX_SHARDS {
        return Err(ErasureError::ShardCount { data, shards: data });
    }
    Ok(block_len.div_ceil(data as u64))
}

/// Cuts `block` into `data` data shards of [`shard_len`] (the last one zero-padded) and
/// computes `parity` parity shards: the `data + parity` shards to store, in order.
///
/// ```
/// let shards = incast_rpc::erasure::encode(b"hello, erasure coding", 4, 2).unwrap();
/// assert_eq!(shards.len(), 6);
/// assert!(shards.iter().all(|s| s.len() == 6)); // 21 bytes in 4 shards of 6, padded
/// ```
pub fn encode(block: &[u8], data: usize, parity: usize) -> Result<Vec<Vec<u8>>, ErasureError> {
    let n = data + parity;
    if n > MAX_SHARDS {
        return Err(ErasureError::ShardCount { data, shards: n });
    }
    let len = shard_len(block.len() as u64, data)? as usize;
    let mut shards: Vec<Vec<u8>> = (0..data)
        .map(|i| {
            let mut s = vec![0u8; len];
            let from = (i * len).min(block.len());
            let to = ((i + 1) * len).min(block.len());
            s[..to - from].copy_from_slice(&block[from..to]);
            s
        })
        .collect();
    if parity > 0 {
        shards.extend((0..parity).map(|_| vec![0u8; len]));
        codec(data, parity)?
            .encode(&mut shards)
            .map_err(|e| ErasureError::Codec(e.to_string()))?;
    }
    Ok(shards)
}

fn codec(data: usize, parity: usize) -> Result<reed_solomon_erasure::galois_8::ReedSolomon, ErasureError> {
    reed_solomon_erasure::galois_8::ReedSolomon::new(data, parity).map_err(|e| ErasureError::Codec(e.to_string()))
}

/// An erasure-coded block: `k` data shards then `m` parity shards, each one [`Fragment`] of
/// [`shard_len`] bytes (a shard may name replicas, tried as for any fragment).
#[derive(Clone, Debug)]
pub struct ErasureStripe {
    block_len: u64,
    data: usize,
    shard_len: u64,
    /// One single-fragment stripe per shard.
    shards: Vec<Stripe>,
}

impl ErasureStripe {
    /// The block of `block_len` bytes stored as `shards`: the first `data` are the data
    /// shards, the rest parity. Every shard must be [`shard_len`]`(block_len, data)` long.
    pub fn new(block_len: u64, data: usize, shards: Vec<Fragment>) -> Result<Self, ErasureError> {
        if data == 0 || data > shards.len() || shards.len() > MAX_SHARDS {
            return Err(ErasureError::ShardCount {
                data,
                shards: shards.len(),
            });
        }
        let want = shard_len(block_len, data)?;
        let shards = shards
            .into_iter()
            .enumerate()
            .map(|(index, f)| {
                if f.len() != want {
                    return Err(ErasureError::ShardLength {
                        index,
                        len: f.len(),
                        want,
                        block_len,
                        data,
                    });
                }
                Stripe::new(vec![f]).map_err(|source| ErasureError::Shard { index, source })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            block_len,
            data,
            shard_len: want,
            shards,
        })
    }

    /// The block's length (what a read returns).
    pub fn block_len(&self) -> u64 {
        self.block_len
    }
    /// Data shards (`k`).
    pub fn data_shards(&self) -> usize {
        self.data
    }
    /// Parity shards (`m`).
    pub fn parity_shards(&self) -> usize {
        self.shards.len() - self.data
    }
    /// Bytes per shard.
    pub fn shard_len(&self) -> u64 {
        self.shard_len
    }
    /// Shard `i`.
    pub fn shard(&self, i: usize) -> &Fragment {
        self.shards[i].fragment(0)
    }
}

/// What an erasure read returns.
#[derive(Debug)]
#[non_exhaustive]
pub struct ErasureOutput {
    /// The block: exactly `block_len` bytes, no padding.
    pub block: Vec<u8>,
    /// The `k` shards the block was built from, in the order they arrived.
    pub used: Vec<usize>,
    /// Parity shards requested (0 on the healthy path).
    pub parity_requested: usize,
    /// Shard reads that failed, with why (each was covered by a parity shard if one was left).
    pub failures: Vec<(usize, FanInError)>,
    /// Bytes of the shards read whole (reads dropped when `k` had arrived are not counted).
    pub bytes_read: u64,
    /// Time spent decoding (zero when every data shard arrived).
    pub decode: Duration,
    /// Wall time of the read.
    pub elapsed: Duration,
    /// The report of each shard read that completed, by shard.
    pub reports: Vec<(usize, ReadReport)>,
}

impl Client {
    /// Reads the erasure-coded block `stripe` describes: its `k` data shards on the healthy
    /// path, parity only for shards that fail or straggle, done when any `k` are whole. See
    /// the [`erasure`](crate::erasure) module for the policy. Each shard is read under
    /// `policy` as its own read on the client's port.
    pub async fn erasure_read(&self, stripe: &ErasureStripe, policy: &Policy) -> Result<ErasureOutput, ErasureError> {
        let start = Instant::now();
        let n = stripe.shards.len();
        let k = stripe.data;
        let total = stripe.shard_len.saturating_mul(n as u64);
        if total > self.max_block_bytes() {
            return Err(ErasureError::TooLarge {
                shards: n,
                shard_len: stripe.shard_len,
                max: self.max_block_bytes(),
            });
        }
        let mut bufs: Vec<Option<Vec<u8>>> = vec![None; n];
        let mut used = Vec::with_capacity(k);
        let mut failures = Vec::new();
        let mut reports = Vec::new();
        let mut running = FuturesUnordered::new();
        let mut runs = Runs::new(n);
        for i in 0..k {
            running.push(self.shard_read(stripe, policy, i, runs.start(i)));
        }
        let mut next = k;
        // The last completion (or straggler round), and the mean gap between completions.
        let mut last: Option<(Instant, Duration)> = None;
        let mut dropped = 0;
        while used.len() < k {
            // Reads dropped but not yet ended will not deliver.
            if used.len() + (running.len() - dropped) + (n - next) < k {
                return Err(ErasureError::NotEnoughShards {
                    got: used.len(),
                    need: k,
                    failures,
                });
            }
            let straggle_at = last.map(|(t, gap)| t + gap.mul_f64(STRAGGLER_FACTOR) + STRAGGLER_FLOOR);
            tokio::select! {
                Some((i, r)) = running.next() => {
                    runs.drop_tx[i] = None;
                    match r {
                        Some(Ok((buf, report))) => {
                            bufs[i] = Some(buf);
                            used.push(i);
                            reports.push((i, report));
                            let now = Instant::now();
                            last = Some((now, (now - start) / used.len() as u32));
                        }
                        Some(Err(e)) => {
                            failures.push((i, e));
                            if next < n {
                                running.push(self.shard_read(stripe, policy, next, runs.start(next)));
                                next += 1;
                            }
                        }
                        // Dropped as a straggler: its parity is already on the way.
                        None => dropped -= 1,
                    }
                },
                _ = tokio::time::sleep_until(straggle_at.unwrap_or(start).into()), if straggle_at.is_some() => {
                    // A shard is late: cover it with a parity shard, and wait again. The port
                    // serves equal reads in start order, so the earliest-started shard still
                    // running is the one it serves: nothing completing means that one is
                    // stuck. Drop its read, which frees its share of the port at once (a
                    // stuck read holds it, and on a lossy port its stalls shrink the budget
                    // under it).
                    if next < n {
                        let late = (0..n)
                            .filter(|&i| runs.drop_tx[i].is_some())
                            .min_by_key(|&i| runs.order[i]);
                        if let Some(tx) = late.and_then(|i| runs.drop_tx[i].take()) {
                            let _ = tx.send(());
                            dropped += 1;
                        }
                        running.push(self.shard_read(stripe, policy, next, runs.start(next)));
                        next += 1;
                    }
                    if let Some((t, _)) = &mut last {
                        *t = Instant::now();
                    }
                }
                // Not reached: while fewer than `k` are whole, a read runs (checked above).
                else => {
                    return Err(ErasureError::NotEnoughShards { got: used.len(), need: k, failures });
                }
            }
        }
        // Dropping the rest cancels them.
        drop(running);
        let (block_len, decoded) = (stripe.block_len, (0..k).any(|i| bufs[i].is_none()));
        let t = Instant::now();
        let block = if decoded {
            // Decoding takes milliseconds per MiB: off the runtime's worker threads.
            tokio::task::spawn_blocking(move || assemble(k, block_len, &mut bufs))
                .await
                .map_err(|e| ErasureError::Codec(format!("decoding task: {e}")))??
        } else {
            assemble(k, block_len, &mut bufs)?
        };
        let decode = if decoded { t.elapsed() } else { Duration::ZERO };
        Ok(ErasureOutput {
            block,
            bytes_read: used.len() as u64 * stripe.shard_len,
            parity_requested: next - k,
            used,
            failures,
            decode,
            elapsed: start.elapsed(),
            reports,
        })
    }

    /// Reads shard `i` whole into its own buffer; `None` if dropped through `dropped` first.
    async fn shard_read(
        &self,
        stripe: &ErasureStripe,
        policy: &Policy,
        i: usize,
        dropped: oneshot::Receiver<()>,
    ) -> (usize, Option<Result<(Vec<u8>, ReadReport), FanInError>>) {
        let mut buf = vec![0u8; stripe.shard_len as usize];
        let read = self.fan_in_read_into(&stripe.shards[i], policy, &mut buf);
        tokio::select! {
            r = read => (i, Some(r.map(|report| (buf, report)))),
            Ok(()) = dropped => (i, None),
        }
    }
}

/// The shard reads of one erasure read: start order, and how to drop one while it runs.
struct Runs {
    order: Vec<usize>,
    drop_tx: Vec<Option<oneshot::Sender<()>>>,
    started: usize,
}

impl Runs {
    fn new(n: usize) -> Self {
        Self {
            order: vec![usize::MAX; n],
            drop_tx: (0..n).map(|_| None).collect(),
            started: 0,
        }
    }

    /// Shard `i` starts: what its read listens on to be dropped.
    fn start(&mut self, i: usize) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.drop_tx[i] = Some(tx);
        self.order[i] = self.started;
        self.started += 1;
        rx
    }
}

/// The block from the shards that arrived (at least `k`): the data shards, with the missing
/// ones decoded from parity, cut to the block's length.
fn assemble(k: usize, block_len: u64, bufs: &mut [Option<Vec<u8>>]) -> Result<Vec<u8>, ErasureError> {
    let m = bufs.len() - k;
    if bufs[..k].iter().any(Option::is_none) {
        // Rebuilds the missing data shards only (not the parity).
        codec(k, m)?
            .reconstruct_data(bufs)
            .map_err(|e| ErasureError::Codec(e.to_string()))?;
    }
    let mut block = Vec::with_capacity(block_len as usize);
    for b in &bufs[..k] {
        let b = b
            .as_ref()
            .ok_or_else(|| ErasureError::Codec("a data shard was not restored".into()))?;
        let take = (block_len as usize - block.len()).min(b.len());
        block.extend_from_slice(&b[..take]);
    }
    debug_assert_eq!(block.len() as u64, block_len);
    Ok(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_k_shards_rebuild_the_block_and_the_padding_is_never_returned() {
        for (len, k, m) in [(1usize, 1usize, 1usize), (1001, 10, 4), (6 << 10, 6, 3), (12_345, 6, 3)] {
            let block: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let shards = encode(&block, k, m).unwrap();
            let sl = shard_len(len as u64, k).unwrap();
            assert!(shards.iter().all(|s| s.len() as u64 == sl));
            let frags = (0..k + m)
                .map(|i| Fragment::new(incast_core::ServerId(i as u32), "s", 0, sl))
                .collect();
            let stripe = ErasureStripe::new(len as u64, k, frags).unwrap();
            // Drop up to m shards: the first m data shards, then alternating ones.
            for lose in [
                vec![],
                (0..m.min(k)).collect::<Vec<_>>(),
                (0..k + m).step_by(2).take(m).collect(),
            ] {
                let mut bufs: Vec<Option<Vec<u8>>> = shards
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (!lose.contains(&i)).then(|| s.clone()))
                    .collect();
                let got = assemble(stripe.data_shards(), stripe.block_len(), &mut bufs).unwrap();
                assert!(got == block, "len {len} {k}+{m} losing {lose:?}");
            }
        }
    }

    #[test]
    fn bad_layouts_are_typed_errors() {
        let f = |len| Fragment::new(incast_core::ServerId(0), "s", 0, len);
        assert!(matches!(shard_len(0, 3), Err(ErasureError::EmptyBlock)));
        assert!(matches!(
            ErasureStripe::new(100, 0, vec![f(100)]),
            Err(ErasureError::ShardCount { .. })
        ));
        assert!(matches!(
            ErasureStripe::new(100, 3, vec![f(34), f(34)]),
            Err(ErasureError::ShardCount { .. })
        ));
        assert!(matches!(
            ErasureStripe::new(100, 2, vec![f(50), f(52), f(50)]),
            Err(ErasureError::ShardLength { index: 1, want: 50, .. })
        ));
        assert!(matches!(
            encode(&[1; 10], 200, 100),
            Err(ErasureError::ShardCount { .. })
        ));
    }
}
