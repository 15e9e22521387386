//! The server's short-lived cache of query answers.
//!
//! A fragment of unknown length is read in one request or several (the first grant is one
//! chunk; the rest comes once the client knows the length, and a hedge or a retry asks again).
//! A query handler's answer is computed once and kept here, bounded in bytes and in time, so
//! that each later request is a slice of it rather than a second run of the handler. An
//! answer that fell out of the cache is simply computed again: the wire protocol checks that
//! the length did not change (a handler that is not deterministic fails that request, typed).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;

type Key = (String, Bytes);

/// Answers by (key, query), oldest evicted first, each kept at most `ttl`.
#[derive(Debug)]
pub(crate) struct Answers {
    inner: Mutex<Inner>,
    capacity: u64,
    ttl: Duration,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<Key, (Bytes, Instant)>,
    /// Insertion order, with the time of each insertion (an entry replaced later is skipped).
    order: VecDeque<(Key, Instant)>,
    bytes: u64,
}

impl Inner {
    fn evict_oldest(&mut self) -> bool {
        let Some((k, at)) = self.order.pop_front() else {
            return false;
        };
        if self.map.get(&k).is_some_and(|(_, t)| *t == at) {
            let (a, _) = self.map.remove(&k).expect("present");
            self.bytes -= a.len() as u64;
        }
        true
    }
}

impl Answers {
    /// A cache of at most `capacity` bytes of answers, each kept at most `ttl`.
    pub(crate) fn new(capacity: u64, ttl: Duration) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            capacity,
            ttl,
        }
    }

    /// The answer to (`key`, `query`) if it is cached and fresh.
    pub(crate) fn get(&self, key: &str, query: &Bytes, now: Instant) -> Option<Bytes> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while g
            .order
            .front()
            .is_some_and(|(_, at)| now.saturating_duration_since(*at) > self.ttl)
        {
            g.evict_oldest();
        }
        g.map.get(&(key.to_owned(), query.clone())).map(|(a, _)| a.clone())
    }

    /// Keeps `answer` (unless it alone exceeds the capacity), evicting the oldest answers.
    pub(crate) fn insert(&self, key: &str, query: Bytes, answer: Bytes, now: Instant) {
        let len = answer.len() as u64;
        if len > self.capacity {
            return;
        }
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while g.bytes + len > self.capacity && g.evict_oldest() {}
        let k = (key.to_owned(), query);
        if let Some((old, _)) = g.map.insert(k.clone(), (answer, now)) {
            g.bytes -= old.len() as u64;
        }
        g.bytes += len;
        g.order.push_back((k, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_in_bytes_and_time() {
        let t0 = Instant::now();
        let a = Answers::new(10, Duration::from_secs(1));
        let q = |s: &'static str| Bytes::from_static(s.as_bytes());
        a.insert("k", q("a"), Bytes::from(vec![1; 6]), t0);
        a.insert("k", q("b"), Bytes::from(vec![2; 4]), t0);
        assert_eq!(a.get("k", &q("a"), t0).unwrap().len(), 6);
        // A third answer evicts the oldest.
        a.insert("k", q("c"), Bytes::from(vec![3; 3]), t0);
        assert!(a.get("k", &q("a"), t0).is_none());
        assert!(a.get("k", &q("b"), t0).is_some());
        // Too large alone: not kept.
        a.insert("k", q("d"), Bytes::from(vec![4; 11]), t0);
        assert!(a.get("k", &q("d"), t0).is_none());
        // Replacing an answer keeps the byte count right.
        a.insert("k", q("b"), Bytes::from(vec![5; 2]), t0);
        assert_eq!(a.inner.lock().unwrap().bytes, 5);
        // Stale answers go.
        assert!(a.get("k", &q("c"), t0 + Duration::from_secs(2)).is_none());
        assert_eq!(a.inner.lock().unwrap().bytes, 0);
    }
}
