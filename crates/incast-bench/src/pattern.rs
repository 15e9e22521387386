//! Synthetic objects with known content, so a benchmark can check every byte it reads.
//!
//! Byte `o` of object `key` is `PATTERN[(h(key) + o) mod P]`, where `PATTERN` is a fixed
//! pseudo-random sequence of period `P` = 1 MiB + 13 (odd, so fragments never line up with
//! it) and `h` is FNV-1a of the key. The pattern is stored twice in a row, so any range of at
//! most `P` bytes is one contiguous slice: the server answers without copying, and the client
//! checks a block with `memcmp`-speed comparisons. Any key names an object of
//! [`OBJECT_LEN`] bytes, so servers need no setup.

use std::sync::OnceLock;

use bytes::Bytes;
use incast_core::Stripe;
use incast_rpc::store::{FragmentStore, StoreError};

/// Period of the pattern.
pub const PERIOD: usize = (1 << 20) + 13;
/// Size of every synthetic object (1 TiB).
pub const OBJECT_LEN: u64 = 1 << 40;

fn pattern() -> &'static Bytes {
    static P: OnceLock<Bytes> = OnceLock::new();
    P.get_or_init(|| {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut v = Vec::with_capacity(2 * PERIOD);
        for _ in 0..PERIOD {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.push((x >> 24) as u8);
        }
        v.extend_from_within(..PERIOD);
        Bytes::from(v)
    })
}

fn key_hash(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn start(key: &str, offset: u64) -> usize {
    ((key_hash(key) % PERIOD as u64 + offset % PERIOD as u64) % PERIOD as u64) as usize
}

/// The expected bytes `offset..offset + len` of `key`, calling `f` with contiguous pieces.
fn for_each_piece(key: &str, offset: u64, len: u64, mut f: impl FnMut(&[u8]) -> bool) -> bool {
    let p = pattern();
    let mut s = start(key, offset);
    let mut left = len;
    while left > 0 {
        let n = left.min(PERIOD as u64) as usize;
        if !f(&p[s..s + n]) {
            return false;
        }
        left -= n as u64;
        s = (s + n) % PERIOD;
    }
    true
}

/// Serves synthetic objects; any key exists.
#[derive(Clone, Debug, Default)]
pub struct PatternStore;

impl FragmentStore for PatternStore {
    async fn read(&self, key: &str, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        if offset.checked_add(len).is_none_or(|end| end > OBJECT_LEN) {
            return Err(StoreError::OutOfRange {
                key: key.to_owned(),
                offset,
                len,
                size: OBJECT_LEN,
            });
        }
        if len <= PERIOD as u64 {
            let s = start(key, offset);
            return Ok(pattern().slice(s..s + len as usize));
        }
        // `len` is bounded by the server's request limit before the store is called.
        let mut v = Vec::with_capacity(len as usize);
        for_each_piece(key, offset, len, |piece| {
            v.extend_from_slice(piece);
            true
        });
        Ok(Bytes::from(v))
    }

    /// The query `len:<n>` (the `unsized` strategy): the first `n` bytes of object `key`,
    /// the same bytes a range read of them gives.
    async fn query(&self, key: &str, query: &[u8], limit: u64) -> Result<Bytes, StoreError> {
        let n = std::str::from_utf8(query)
            .ok()
            .and_then(|q| q.strip_prefix("len:"))
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| StoreError::BadKey {
                key: key.to_owned(),
                reason: "queries are `len:<bytes>`",
            })?;
        if n > limit {
            return Err(StoreError::TooLarge {
                key: key.to_owned(),
                size: n,
                limit,
            });
        }
        self.read(key, 0, n).await
    }
}

/// The pattern, each read and query answered after a delay that can change while the
/// servers run (`sweep --server-delay`: a slow disk; zero while the sweep probes the line
/// rate, which is the path's, not the store's).
#[derive(Clone, Debug, Default)]
pub struct HeldPattern {
    delay_us: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl HeldPattern {
    /// Every read from now on waits `d` (zero: none).
    pub fn set_delay(&self, d: std::time::Duration) {
        let us = d.as_micros().min(u128::from(u64::MAX)) as u64;
        self.delay_us.store(us, std::sync::atomic::Ordering::Relaxed);
    }

    async fn wait(&self) {
        let us = self.delay_us.load(std::sync::atomic::Ordering::Relaxed);
        if us > 0 {
            tokio::time::sleep(std::time::Duration::from_micros(us)).await;
        }
    }
}

impl FragmentStore for HeldPattern {
    async fn read(&self, key: &str, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        self.wait().await;
        PatternStore.read(key, offset, len).await
    }
    async fn query(&self, key: &str, query: &[u8], limit: u64) -> Result<Bytes, StoreError> {
        self.wait().await;
        PatternStore.query(key, query, limit).await
    }
}

/// Where a block first differs from what the pattern store serves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("block byte {at} (fragment {fragment}) differs from the pattern; block is {got} bytes, stripe says {want}")]
pub struct Mismatch {
    /// Fragment index.
    pub fragment: usize,
    /// First differing byte (or the first missing one) in the block.
    pub at: u64,
    /// Block length read.
    pub got: u64,
    /// Block length expected.
    pub want: u64,
}

/// Checks every byte of `block` against the pattern for `stripe`.
pub fn verify(stripe: &Stripe, block: &[u8]) -> Result<(), Mismatch> {
    let want = stripe.block_len();
    let mism = |fragment, at| Mismatch {
        fragment,
        at,
        got: block.len() as u64,
        want,
    };
    if block.len() as u64 != want {
        return Err(mism(0, (block.len() as u64).min(want)));
    }
    for (i, frag) in stripe.fragments().iter().enumerate() {
        let range = stripe.block_range(i);
        let mut pos = range.start as usize;
        let mut bad = None;
        let ok = for_each_piece(frag.key(), frag.offset(), frag.len(), |piece| {
            let got = &block[pos..pos + piece.len()];
            if got != piece {
                let d = got.iter().zip(piece).position(|(a, b)| a != b).unwrap_or(0);
                bad = Some((pos + d) as u64);
                return false;
            }
            pos += piece.len();
            true
        });
        if !ok {
            return Err(mism(i, bad.unwrap_or(range.start)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use incast_core::ServerId;

    fn read(key: &str, off: u64, len: u64) -> Bytes {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(PatternStore.read(key, off, len))
            .unwrap()
    }

    #[test]
    fn ranges_are_consistent_and_checked() {
        // A long read equals the concatenation of short ones, across the period boundary.
        let long = read("k", 5, 3 * PERIOD as u64);
        let a = read("k", 5, PERIOD as u64 - 1);
        let b = read("k", PERIOD as u64 + 4, 2 * PERIOD as u64 + 1);
        assert_eq!(&long[..a.len()], &a[..]);
        assert_eq!(&long[a.len()..], &b[..]);
        assert_ne!(read("k", 0, 64), read("j", 0, 64));
        let servers: Vec<ServerId> = (0..3).map(ServerId).collect();
        let stripe = Stripe::fixed_block("k", &servers, 3000).unwrap();
        let mut block = Vec::new();
        for f in stripe.fragments() {
            block.extend_from_slice(&read(f.key(), f.offset(), f.len()));
        }
        assert_eq!(verify(&stripe, &block), Ok(()));
        block[2500] ^= 1;
        assert_eq!(verify(&stripe, &block).unwrap_err().at, 2500);
        block.truncate(10);
        assert!(verify(&stripe, &block).is_err());
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        assert!(rt.block_on(PatternStore.read("k", OBJECT_LEN - 1, 2)).is_err());
    }
}
