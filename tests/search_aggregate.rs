//! Runs the `search_aggregate` example's code (the file itself, included below) and checks
//! its merged answer against a brute-force search over the same generated shards.
//!
//! Run: `cargo test --release --test search_aggregate`

#[allow(dead_code)]
#[path = "../examples/search_aggregate.rs"]
mod example;

use example::{document, hits, query, search, start_shards, DOCS, SHARDS, TOP};
use incast::rpc::Client;
use incast::ServerId;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_merges_answers_of_unknown_size_as_they_arrive() {
    let servers = start_shards().await.unwrap();
    let client = Client::new(
        servers
            .iter()
            .enumerate()
            .map(|(i, s)| (ServerId(i as u32), s.local_addr())),
    );
    for term in ["incast", "quic", "storage", "nothing-matches"] {
        let got = query(&client, term).await.unwrap();
        // Brute force over every shard's documents.
        let mut all: Vec<(u32, u32)> = (0..SHARDS)
            .flat_map(|s| {
                (0..DOCS).filter_map(move |d| {
                    let (score, title) = document(s, d);
                    title.split(' ').any(|w| w == term).then_some((score, s * DOCS + d))
                })
            })
            .collect();
        all.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(got.matches, all.len(), "{term}");
        assert_eq!(got.top, all[..all.len().min(TOP)].to_vec(), "{term}");
        for s in 0..SHARDS {
            let want = search(s, term);
            assert_eq!(got.sizes[s as usize], want.len(), "{term}: shard {s}");
            assert_eq!(
                hits(&want).unwrap().len(),
                all.iter().filter(|(_, d)| d / DOCS == s).count()
            );
        }
        assert!(got.first <= got.last);
        if term != "nothing-matches" {
            // Sizes differ from shard to shard: the point of not knowing them.
            assert!(
                got.sizes.iter().min() < got.sizes.iter().max(),
                "{term}: {:?}",
                got.sizes
            );
        }
    }
    for s in servers {
        s.shutdown().await;
    }
}
