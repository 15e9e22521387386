//! The layout of one block over servers.
//!
//! A *synchronized read* fetches one block whose bytes are striped over N servers: every
//! server holds one fragment (the server request unit, SRU), and the client cannot go on
//! until the last fragment has arrived. The literature measures incast under two scaling
//! models, and both have a constructor here:
//!
//! - **fixed SRU** ([`Stripe::fixed_sru`]): every server sends the same number of bytes, so the
//!   block grows with N (phanishayee-fast08, chen-2012 Figure 4);
//! - **fixed block** ([`Stripe::fixed_block`]): the block size is fixed and each server sends
//!   `block / N` bytes; the remainder is spread one byte each over the first fragments, so no
//!   byte is lost and no two fragments differ by more than one byte.
//!
//! Fragments are laid end to end in the block in the order given: fragment `i` fills the
//! block range [`Stripe::block_range`]`(i)`. A fragment may name replicas, other servers that
//! hold the same bytes under the same key and offset; the scheduler retries or hedges there.
//!
//! # Lengths the client does not know
//!
//! A search shard's answer, or an object read to its end, has a size only the server knows.
//! [`Fragment::up_to`] and [`Fragment::query`] give a *maximum* instead of a length: the server
//! announces the true length in its first response frame, and the scheduler grants the rest
//! once it knows it (see [`crate::scheduler`], "Lengths learnt on the way"). Such a stripe is
//! laid out at the maxima ([`Stripe::block_range`] and [`Stripe::block_len`] are upper
//! bounds, and nothing is allocated for them); [`Stripe::has_unknown_lengths`] tells it apart.

use std::collections::HashSet;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Most fragments one stripe may have (65,536).
pub const MAX_FRAGMENTS: usize = 1 << 16;
/// Largest block a stripe may describe, in bytes (1 TiB). Guards the offset arithmetic; the
/// transport still decides whether it can allocate a block of that size.
pub const MAX_BLOCK_LEN: u64 = 1 << 40;
/// Most replicas one fragment may name besides its primary server (8).
pub const MAX_REPLICAS: usize = 8;
/// Longest query a fragment may carry ([`Fragment::query`]), in bytes (16 KiB): a query
/// travels in one request frame, which the server reads whole before answering.
pub const MAX_QUERY_LEN: usize = 16 * 1024;

/// Identifies a server. The core never resolves it; the transport maps it to an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ServerId(pub u32);

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "server {}", self.0)
    }
}

/// One server's part of a block: `len` bytes of object `key` starting at `offset` on `server`;
/// or, for a fragment of unknown length, at most `len` bytes of the object from `offset` to
/// its end ([`Fragment::up_to`]) or of the server's answer to a query ([`Fragment::query`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fragment {
    server: ServerId,
    key: Arc<str>,
    offset: u64,
    len: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    replicas: Vec<ServerId>,
    /// False: `len` is a maximum, the server announces the true length.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    exact: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    query: Option<Arc<[u8]>>,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Fragment {
    /// A fragment of `len` bytes of `key`, starting at byte `offset` of that object on `server`.
    pub fn new(server: ServerId, key: impl Into<Arc<str>>, offset: u64, len: u64) -> Self {
        Self {
            server,
            key: key.into(),
            offset,
            len,
            replicas: Vec::new(),
            exact: true,
            query: None,
        }
    }

    /// A fragment whose length only the server knows: the bytes of object `key` from
    /// `offset` to its end, at most `max_len` of them. The server announces the object's
    /// size in its first response frame; a size beyond `offset + max_len` fails the
    /// fragment on that server (a typed error, and the read tries a replica).
    ///
    /// ```
    /// use incast_core::{Fragment, ServerId, Stripe};
    /// let s = Stripe::new(vec![Fragment::up_to(ServerId(0), "log", 4096, 1 << 20)])?;
    /// assert!(s.has_unknown_lengths());
    /// assert_eq!(s.fragment(0).known_len(), None);
    /// assert_eq!(s.block_len(), 1 << 20); // an upper bound
    /// # Ok::<(), incast_core::StripeError>(())
    /// ```
    pub fn up_to(server: ServerId, key: impl Into<Arc<str>>, offset: u64, max_len: u64) -> Self {
        Self {
            exact: false,
            ..Self::new(server, key, offset, max_len)
        }
    }

    /// A fragment that is the server's answer to `query` (opaque bytes, at most
    /// [`MAX_QUERY_LEN`]) against `key` (for example an index name), at most `max_len`
    /// bytes long. The server's query handler computes the answer and announces its length
    /// in the first response frame; the bytes are then scheduled like any other fragment's.
    /// Replicas must give the same answer (the read may move to one half-way).
    ///
    /// ```
    /// use incast_core::{Fragment, ServerId, Stripe};
    /// let f = Fragment::query(ServerId(3), "index", b"term:incast".as_slice(), 4 << 20);
    /// assert_eq!(f.query_bytes(), Some(&b"term:incast"[..]));
    /// let s = Stripe::new(vec![f])?;
    /// # Ok::<(), incast_core::StripeError>(())
    /// ```
    pub fn query(server: ServerId, key: impl Into<Arc<str>>, query: impl Into<Arc<[u8]>>, max_len: u64) -> Self {
        Self {
            query: Some(query.into()),
            ..Self::up_to(server, key, 0, max_len)
        }
    }

    /// Names other servers that hold the same bytes (same key and offset). At most
    /// [`MAX_REPLICAS`], none equal to the primary, no duplicates; checked by [`Stripe::new`].
    pub fn with_replicas(mut self, replicas: impl IntoIterator<Item = ServerId>) -> Self {
        self.replicas = replicas.into_iter().collect();
        self
    }

    /// The primary server.
    pub fn server(&self) -> ServerId {
        self.server
    }
    /// The object key on the server.
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The shared key, cheap to clone.
    pub fn key_arc(&self) -> &Arc<str> {
        &self.key
    }
    /// Offset of the fragment inside the object, in bytes.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// Length in bytes (may be 0); for a fragment of unknown length, its maximum.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// True when the fragment has no bytes (or may have none beyond a maximum of 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The length, if the client knows it (`None` for [`Fragment::up_to`] and
    /// [`Fragment::query`] fragments).
    pub fn known_len(&self) -> Option<u64> {
        self.exact.then_some(self.len)
    }
    /// The query this fragment asks its server to answer, if any.
    pub fn query_bytes(&self) -> Option<&[u8]> {
        self.query.as_deref()
    }
    /// Replicas, in the order the scheduler tries them.
    pub fn replicas(&self) -> &[ServerId] {
        &self.replicas
    }
}

/// Why a stripe was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StripeError {
    /// A stripe needs at least one fragment (or one server).
    #[error("stripe has no fragments: give at least one server")]
    NoFragments,
    /// More fragments than [`MAX_FRAGMENTS`].
    #[error("stripe has {count} fragments, at most {max} are allowed")]
    TooManyFragments {
        /// Fragments given.
        count: usize,
        /// The limit, [`MAX_FRAGMENTS`].
        max: usize,
    },
    /// The block would be longer than [`MAX_BLOCK_LEN`].
    #[error("block of {len} bytes is too large: at most {max} bytes are allowed")]
    BlockTooLarge {
        /// Total length (saturated at `u64::MAX`).
        len: u64,
        /// The limit, [`MAX_BLOCK_LEN`].
        max: u64,
    },
    /// `offset + len` of a fragment overflows `u64`.
    #[error("fragment {fragment}: offset {offset} + length {len} overflows a 64-bit offset")]
    RangeOverflow {
        /// Index of the fragment in the stripe.
        fragment: usize,
        /// Its object offset.
        offset: u64,
        /// Its length.
        len: u64,
    },
    /// More replicas than [`MAX_REPLICAS`].
    #[error("fragment {fragment} names {count} replicas, at most {max} are allowed")]
    TooManyReplicas {
        /// Index of the fragment.
        fragment: usize,
        /// Replicas given.
        count: usize,
        /// The limit, [`MAX_REPLICAS`].
        max: usize,
    },
    /// A query longer than [`MAX_QUERY_LEN`].
    #[error("fragment {fragment} carries a {len}-byte query, at most {max} bytes are allowed")]
    QueryTooLong {
        /// Index of the fragment.
        fragment: usize,
        /// Query length.
        len: usize,
        /// The limit, [`MAX_QUERY_LEN`].
        max: usize,
    },
    /// A replica repeats the primary server or another replica.
    #[error("fragment {fragment} names {server} more than once (primary and replicas must differ)")]
    DuplicateReplica {
        /// Index of the fragment.
        fragment: usize,
        /// The repeated server.
        server: ServerId,
    },
}

/// One block striped over servers. Immutable once built; see the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Stripe {
    fragments: Vec<Fragment>,
    #[serde(skip)]
    starts: Vec<u64>,
    #[serde(skip)]
    block_len: u64,
    #[serde(skip)]
    unknown: bool,
}

impl<'de> Deserialize<'de> for Stripe {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            fragments: Vec<Fragment>,
        }
        let raw = Raw::deserialize(d)?;
        Stripe::new(raw.fragments).map_err(serde::de::Error::custom)
    }
}

impl Stripe {
    /// A stripe of the given fragments, laid end to end in the block in this order.
    ///
    /// ```
    /// use incast_core::{Fragment, ServerId, Stripe};
    /// let s = Stripe::new(vec![
    ///     Fragment::new(ServerId(0), "obj", 0, 100).with_replicas([ServerId(2)]),
    ///     Fragment::new(ServerId(1), "obj", 100, 50),
    /// ])?;
    /// assert_eq!(s.block_len(), 150);
    /// assert_eq!(s.block_range(1), 100..150);
    /// # Ok::<(), incast_core::StripeError>(())
    /// ```
    pub fn new(fragments: Vec<Fragment>) -> Result<Self, StripeError> {
        if fragments.is_empty() {
            return Err(StripeError::NoFragments);
        }
        if fragments.len() > MAX_FRAGMENTS {
            return Err(StripeError::TooManyFragments {
                count: fragments.len(),
                max: MAX_FRAGMENTS,
            });
        }
        let mut starts = Vec::with_capacity(fragments.len());
        let mut total: u64 = 0;
        for (i, f) in fragments.iter().enumerate() {
            if f.offset.checked_add(f.len).is_none() {
                return Err(StripeError::RangeOverflow {
                    fragment: i,
                    offset: f.offset,
                    len: f.len,
                });
            }
            if let Some(q) = f.query.as_deref().filter(|q| q.len() > MAX_QUERY_LEN) {
                return Err(StripeError::QueryTooLong {
                    fragment: i,
                    len: q.len(),
                    max: MAX_QUERY_LEN,
                });
            }
            if f.replicas.len() > MAX_REPLICAS {
                return Err(StripeError::TooManyReplicas {
                    fragment: i,
                    count: f.replicas.len(),
                    max: MAX_REPLICAS,
                });
            }
            if !f.replicas.is_empty() {
                let mut seen = HashSet::with_capacity(f.replicas.len() + 1);
                seen.insert(f.server);
                for r in &f.replicas {
                    if !seen.insert(*r) {
                        return Err(StripeError::DuplicateReplica {
                            fragment: i,
                            server: *r,
                        });
                    }
                }
            }
            starts.push(total);
            total = total.saturating_add(f.len);
            if total > MAX_BLOCK_LEN {
                return Err(StripeError::BlockTooLarge {
                    len: total,
                    max: MAX_BLOCK_LEN,
                });
            }
        }
        let unknown = fragments.iter().any(|f| !f.exact);
        Ok(Self {
            fragments,
            starts,
            block_len: total,
            unknown,
        })
    }

    /// Fixed SRU: server `i` holds `sru` bytes of `key` at offset 0, so the block is
    /// `servers.len() * sru` bytes.
    ///
    /// ```
    /// use incast_core::{ServerId, Stripe};
    /// let servers: Vec<ServerId> = (0..4).map(ServerId).collect();
    /// let s = Stripe::fixed_sru("blk", &servers, 32 * 1024)?;
    /// assert_eq!(s.block_len(), 128 * 1024);
    /// # Ok::<(), incast_core::StripeError>(())
    /// ```
    pub fn fixed_sru(key: &str, servers: &[ServerId], sru: u64) -> Result<Self, StripeError> {
        let key: Arc<str> = key.into();
        let total = (servers.len() as u64).saturating_mul(sru);
        if total > MAX_BLOCK_LEN {
            return Err(StripeError::BlockTooLarge {
                len: total,
                max: MAX_BLOCK_LEN,
            });
        }
        Self::new(servers.iter().map(|s| Fragment::new(*s, key.clone(), 0, sru)).collect())
    }

    /// Fixed block: `block_len` bytes spread over the servers, `block_len / N` each, the
    /// remainder one byte each to the first `block_len % N` servers. Every fragment is at
    /// offset 0 of `key` on its server.
    ///
    /// ```
    /// use incast_core::{ServerId, Stripe};
    /// let servers: Vec<ServerId> = (0..3).map(ServerId).collect();
    /// let s = Stripe::fixed_block("blk", &servers, 10)?;
    /// let lens: Vec<u64> = s.fragments().iter().map(|f| f.len()).collect();
    /// assert_eq!(lens, [4, 3, 3]);
    /// # Ok::<(), incast_core::StripeError>(())
    /// ```
    pub fn fixed_block(key: &str, servers: &[ServerId], block_len: u64) -> Result<Self, StripeError> {
        if servers.is_empty() {
            return Err(StripeError::NoFragments);
        }
        if block_len > MAX_BLOCK_LEN {
            return Err(StripeError::BlockTooLarge {
                len: block_len,
                max: MAX_BLOCK_LEN,
            });
        }
        let key: Arc<str> = key.into();
        let n = servers.len() as u64;
        let (base, extra) = (block_len / n, block_len % n);
        Self::new(
            servers
                .iter()
                .enumerate()
                .map(|(i, s)| Fragment::new(*s, key.clone(), 0, base + u64::from((i as u64) < extra)))
                .collect(),
        )
    }

    /// The fragments, in block order.
    pub fn fragments(&self) -> &[Fragment] {
        &self.fragments
    }
    /// Fragment `i`. Panics if `i >= self.len()`, like slice indexing.
    pub fn fragment(&self, i: usize) -> &Fragment {
        &self.fragments[i]
    }
    /// Number of fragments (at least 1).
    pub fn len(&self) -> usize {
        self.fragments.len()
    }
    /// Always false: a stripe has at least one fragment. Present for clippy's `len` convention.
    pub fn is_empty(&self) -> bool {
        self.fragments.is_empty()
    }
    /// Total bytes of the block; with [unknown lengths](self#lengths-the-client-does-not-know),
    /// the sum of the maxima (an upper bound).
    pub fn block_len(&self) -> u64 {
        self.block_len
    }
    /// Whether some fragment's length is known only to its server ([`Fragment::up_to`],
    /// [`Fragment::query`]).
    pub fn has_unknown_lengths(&self) -> bool {
        self.unknown
    }
    /// Where fragment `i` lands in the block (laid out at the maxima for fragments of
    /// unknown length). Panics if `i >= self.len()`.
    pub fn block_range(&self, i: usize) -> Range<u64> {
        let start = self.starts[i];
        start..start + self.fragments[i].len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(n: u32) -> Vec<ServerId> {
        (0..n).map(ServerId).collect()
    }

    #[test]
    fn fixed_block_spreads_remainder_and_loses_nothing() {
        for n in [1u32, 2, 3, 7, 64, 4096] {
            for block in [0u64, 1, 5, 1000, 1 << 20, (1 << 20) + 13] {
                let s = Stripe::fixed_block("k", &servers(n), block).unwrap();
                assert_eq!(s.block_len(), block);
                let lens: Vec<u64> = s.fragments().iter().map(Fragment::len).collect();
                let (min, max) = (lens.iter().min().unwrap(), lens.iter().max().unwrap());
                assert!(max - min <= 1, "n={n} block={block}");
                assert_eq!(lens.iter().sum::<u64>(), block);
                // Ranges tile the block.
                let mut at = 0;
                for i in 0..s.len() {
                    let r = s.block_range(i);
                    assert_eq!(r.start, at);
                    at = r.end;
                }
                assert_eq!(at, block);
            }
        }
    }

    #[test]
    fn fixed_sru_grows_with_n() {
        let s = Stripe::fixed_sru("k", &servers(64), 256 * 1024).unwrap();
        assert_eq!(s.block_len(), 64 * 256 * 1024);
        assert!(s.fragments().iter().all(|f| f.len() == 256 * 1024));
    }

    #[test]
    fn bad_stripes_get_typed_errors() {
        assert_eq!(Stripe::new(vec![]), Err(StripeError::NoFragments));
        assert_eq!(Stripe::fixed_block("k", &[], 10), Err(StripeError::NoFragments));
        assert!(matches!(
            Stripe::fixed_sru("k", &servers(2), MAX_BLOCK_LEN),
            Err(StripeError::BlockTooLarge { .. })
        ));
        assert!(matches!(
            Stripe::new(vec![Fragment::new(ServerId(0), "k", u64::MAX, 1)]),
            Err(StripeError::RangeOverflow { fragment: 0, .. })
        ));
        let dup = Fragment::new(ServerId(0), "k", 0, 1).with_replicas([ServerId(1), ServerId(0)]);
        assert_eq!(
            Stripe::new(vec![dup]),
            Err(StripeError::DuplicateReplica {
                fragment: 0,
                server: ServerId(0)
            })
        );
        let many = Fragment::new(ServerId(0), "k", 0, 1).with_replicas((1..=9).map(ServerId));
        assert!(matches!(
            Stripe::new(vec![many]),
            Err(StripeError::TooManyReplicas { count: 9, .. })
        ));
        let too_many: Vec<Fragment> = (0..=MAX_FRAGMENTS as u32)
            .map(|i| Fragment::new(ServerId(i), "k", 0, 0))
            .collect();
        assert!(matches!(
            Stripe::new(too_many),
            Err(StripeError::TooManyFragments { .. })
        ));
        let long = Fragment::query(ServerId(0), "k", vec![0u8; MAX_QUERY_LEN + 1], 1);
        assert!(matches!(
            Stripe::new(vec![long]),
            Err(StripeError::QueryTooLong { fragment: 0, .. })
        ));
        let msg = StripeError::RangeOverflow {
            fragment: 3,
            offset: 1,
            len: 2,
        }
        .to_string();
        assert!(msg.starts_with("fragment 3"), "{msg}");
    }

    #[test]
    fn serde_round_trip_revalidates() {
        let s = Stripe::new(vec![
            Fragment::new(ServerId(0), "a", 0, 10).with_replicas([ServerId(5)]),
            Fragment::new(ServerId(1), "b", 7, 0),
        ])
        .unwrap();
        let json = serde_json::to_string(&s).unwrap();
        let back: Stripe = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.block_range(1), 10..10);
        let open = Stripe::new(vec![
            Fragment::query(ServerId(0), "idx", b"q".as_slice(), 100),
            Fragment::up_to(ServerId(1), "b", 7, 9),
        ])
        .unwrap();
        let back: Stripe = serde_json::from_str(&serde_json::to_string(&open).unwrap()).unwrap();
        assert_eq!(back, open);
        assert!(back.has_unknown_lengths() && !s.has_unknown_lengths());
        let bad = r#"{"fragments":[{"server":0,"key":"a","offset":0,"len":1,"replicas":[0]}]}"#;
        let err = serde_json::from_str::<Stripe>(bad).unwrap_err().to_string();
        assert!(err.contains("more than once"), "{err}");
    }
}
