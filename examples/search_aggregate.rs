//! Partition-aggregate search: one query to 32 index shards, whose answers have sizes nobody
//! knows in advance, consumed as they arrive.
//!
//! Run: `cargo run --release --example search_aggregate`
//!
//! Every shard holds 2,000 generated documents and answers a term query with one record per
//! matching document (id, score, title): a few bytes from one shard, hundreds of KiB from
//! another. The client sends the query to every shard in one stripe of
//! `Fragment::query(.., max_len)` fragments. Each shard's server announces its answer's length
//! in its first response frame; the client's port grants the rest of each answer once it knows
//! it, and hands each answer over the moment it is whole, so the aggregator merges the top
//! hits while the longer answers are still arriving. `tests/search_aggregate.rs` runs this
//! same code and checks the merged result against a brute-force search.
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use incast::rpc::store::{MemStore, QueryFn, StoreError, WithQueries};
use incast::rpc::{serve, Client, ServerConfig, ServerHandle};
use incast::{Fragment, Policy, ServerId, Stripe};

/// Shards in the example.
pub const SHARDS: u32 = 32;
/// Documents per shard.
pub const DOCS: u32 = 2_000;
/// Largest answer a shard may give (1 MiB).
pub const MAX_ANSWER: u64 = 1 << 20;
/// Hits kept by the aggregator.
pub const TOP: usize = 10;

const WORDS: [&str; 12] = [
    "fan-in",
    "incast",
    "buffer",
    "switch",
    "stripe",
    "shard",
    "query",
    "retransmit",
    "window",
    "budget",
    "quic",
    "storage",
];

/// Document `doc` of shard `shard`: a score and a title of 3 to 8 words. Shard `s` favours
/// word `s % 12`, so how many documents match a term differs from shard to shard.
pub fn document(shard: u32, doc: u32) -> (u32, String) {
    let mut x = u64::from(shard) << 32 | u64::from(doc);
    let mut next = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) as usize
    };
    let n = 3 + next() % 6;
    let words: Vec<&str> = (0..n)
        .map(|_| match next() % 4 {
            0 => WORDS[shard as usize % WORDS.len()],
            _ => WORDS[next() % WORDS.len()],
        })
        .collect();
    ((next() % 100_000) as u32, words.join(" "))
}

/// A shard's answer to `term`: one record per matching document, `doc u32, score u32,
/// title length u16, title`, big-endian.
pub fn search(shard: u32, term: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for doc in 0..DOCS {
        let (score, title) = document(shard, doc);
        if title.split(' ').any(|w| w == term) {
            out.extend_from_slice(&(shard * DOCS + doc).to_be_bytes());
            out.extend_from_slice(&score.to_be_bytes());
            out.extend_from_slice(&(title.len() as u16).to_be_bytes());
            out.extend_from_slice(title.as_bytes());
        }
    }
    out
}

/// Parses an answer into (score, doc) pairs; `None` if it is malformed.
pub fn hits(answer: &[u8]) -> Option<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < answer.len() {
        let head = answer.get(at..at + 10)?;
        let doc = u32::from_be_bytes(head[0..4].try_into().ok()?);
        let score = u32::from_be_bytes(head[4..8].try_into().ok()?);
        let title = usize::from(u16::from_be_bytes([head[8], head[9]]));
        answer.get(at + 10..at + 10 + title)?;
        out.push((score, doc));
        at += 10 + title;
    }
    Some(out)
}

/// Starts the shards on loopback.
pub async fn start_shards() -> std::io::Result<Vec<ServerHandle>> {
    let mut servers = Vec::new();
    for shard in 0..SHARDS {
        let handler = QueryFn(move |_index: &str, q: &[u8], limit: u64| {
            let term = std::str::from_utf8(q).map_err(|_| StoreError::BadKey {
                key: "query".into(),
                reason: "not UTF-8",
            })?;
            let answer = search(shard, term);
            if answer.len() as u64 > limit {
                return Err(StoreError::TooLarge {
                    key: term.to_owned(),
                    size: answer.len() as u64,
                    limit,
                });
            }
            Ok(Bytes::from(answer))
        });
        let store = WithQueries::new(MemStore::new(), handler);
        servers.push(serve("127.0.0.1:0".parse().expect("address"), store, ServerConfig::default()).await?);
    }
    Ok(servers)
}

/// What one query gave.
#[derive(Debug)]
pub struct Summary {
    /// Time to the first whole shard answer.
    pub first: Duration,
    /// Time to the last.
    pub last: Duration,
    /// Answers' sizes in bytes, by shard.
    pub sizes: Vec<usize>,
    /// Matching documents over all shards.
    pub matches: usize,
    /// The best `TOP` hits, best first: (score, doc).
    pub top: Vec<(u32, u32)>,
}

/// Sends `term` to every shard and merges the answers as they arrive.
pub async fn query(client: &Client, term: &str) -> Result<Summary, Box<dyn std::error::Error>> {
    let stripe = Stripe::new(
        (0..SHARDS)
            .map(|s| Fragment::query(ServerId(s), "docs", term.as_bytes(), MAX_ANSWER))
            .collect(),
    )?;
    let policy = Policy::default();
    let start = Instant::now();
    let mut answers = client.fan_in_read_stream(&stripe, &policy);
    let mut best: BinaryHeap<Reverse<(u32, u32)>> = BinaryHeap::new();
    let (mut first, mut last, mut matches) = (None, Duration::ZERO, 0);
    let mut sizes = vec![0; SHARDS as usize];
    while let Some(answer) = answers.next().await {
        let answer = answer?;
        let at = start.elapsed();
        first.get_or_insert(at);
        last = at;
        sizes[answer.index] = answer.data.len();
        let found = hits(&answer.data).ok_or("malformed answer")?;
        matches += found.len();
        for h in found {
            best.push(Reverse(h));
            if best.len() > TOP {
                best.pop();
            }
        }
    }
    let mut top: Vec<(u32, u32)> = best.into_iter().map(|Reverse(h)| h).collect();
    top.sort_unstable_by(|a, b| b.cmp(a));
    Ok(Summary {
        first: first.unwrap_or_default(),
        last,
        sizes,
        matches,
        top,
    })
}

#[allow(dead_code)] // `tests/search_aggregate.rs` includes this file for the functions above.
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let servers = start_shards().await?;
    let client = Client::new(
        servers
            .iter()
            .enumerate()
            .map(|(i, s)| (ServerId(i as u32), s.local_addr())),
    );
    for term in ["incast", "quic", "nothing-matches"] {
        let s = query(&client, term).await?;
        let (min, max) = (
            s.sizes.iter().min().copied().unwrap_or(0),
            s.sizes.iter().max().copied().unwrap_or(0),
        );
        println!(
            "\"{term}\": {} matches in {} answers of {min} to {max} bytes ({} KiB); first answer after {:?}, last after {:?}",
            s.matches,
            SHARDS,
            s.sizes.iter().sum::<usize>() >> 10,
            s.first,
            s.last
        );
        for (score, doc) in s.top.iter().take(3) {
            println!(
                "    doc {doc:>6}  score {score:>5}  {}",
                document(doc / DOCS, doc % DOCS).1
            );
        }
    }
    for s in servers {
        s.shutdown().await;
    }
    Ok(())
}
