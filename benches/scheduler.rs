//! Cost of the scheduler per event, at N = 64, 1024 and 4096 fragments.
//!
//! Run: `cargo bench --bench scheduler`
//!
//! One iteration is one whole read with a perfect transport: every grant is answered at once,
//! its bytes in two pieces, then its end. Events counted: `poll_action` calls that return
//! something, `on_bytes` calls and `on_done` calls. Criterion's "elements" throughput is
//! events per second; the inverse is the cost per event, which must not grow with N.
//! Building the scheduler (O(N), once per read) is excluded.
//!
//! The client-wide receiver (`receiver_event`): 4096 fragments spread over 64 concurrent
//! reads of 64 fragments each, all started at once under one port (default receiver
//! settings, adaptive budget, default policy), driven the same way; building the reads is
//! excluded as above.
//!
//! Two policies: `scheduled` (K = 16, B = 256 KiB, 16 KiB chunks, hedging armed, so every
//! grant pushes a timer) and `wide` (K = N, B unlimited, whole fragments: all N grants live
//! at once, the timer heap at its largest).

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use incast::receiver::{ReadOptions, Receiver, ReceiverConfig};
use incast::{Action, GrantSize, Hedging, Policy, Scheduler, ServerId, Stripe};

const SRU: u64 = 64 * 1024;

fn policies(n: u32) -> [(&'static str, Policy); 2] {
    let scheduled = Policy::builder()
        .max_senders(16)
        .inflight_budget(256 * 1024)
        .grant_size(GrantSize::Chunk { bytes: 16 * 1024 })
        .build()
        .expect("valid");
    let wide = Policy::builder()
        .max_senders(n)
        .inflight_budget(u64::from(n) * SRU)
        .grant_size(GrantSize::Whole)
        .hedging(Hedging::AfterRto {
            budget_fraction: 0.05,
            min_budget_bytes: 0,
        })
        .build()
        .expect("valid");
    [("scheduled", scheduled), ("wide", wide)]
}

/// Drives one read to completion; returns the number of events.
fn drive(mut s: Scheduler, now: Instant) -> u64 {
    let mut events = 0;
    let mut live = Vec::new();
    loop {
        while let Some(a) = s.poll_action(now) {
            events += 1;
            if let Action::Request(g) = a {
                live.push(g);
            }
        }
        black_box(s.poll_timeout());
        if live.is_empty() {
            break;
        }
        for g in live.drain(..) {
            let half = g.len / 2;
            black_box(s.on_bytes(now, g.id, half).expect("in range"));
            black_box(s.on_bytes(now, g.id, g.len - half).expect("in range"));
            s.on_done(now, g.id).expect("complete");
            events += 3;
        }
    }
    assert!(s.is_complete());
    events
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("scheduler_event");
    for n in [64u32, 1024, 4096] {
        let servers: Vec<ServerId> = (0..n).map(ServerId).collect();
        let stripe = Stripe::fixed_sru("bench", &servers, SRU).expect("valid");
        for (name, policy) in policies(n) {
            let now = Instant::now();
            let events = drive(Scheduler::new(&stripe, &policy, 1), now);
            group.throughput(Throughput::Elements(events));
            group.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter_batched(
                    || Scheduler::new(&stripe, &policy, 1),
                    |s| drive(s, now),
                    BatchSize::LargeInput,
                )
            });
        }
    }
    group.finish();
}

/// 64 reads of 64 fragments started on one receiver.
fn receiver_with_reads(stripes: &[Stripe], now: Instant) -> Receiver {
    let mut rx = Receiver::new(ReceiverConfig::default());
    for (i, st) in stripes.iter().enumerate() {
        rx.start_read(now, st, &Policy::default(), i as u64, ReadOptions::default());
    }
    rx
}

/// Drives every read of `rx` to completion; returns the number of events.
fn drive_receiver(mut rx: Receiver, now: Instant) -> u64 {
    let mut events = 0;
    let mut live = Vec::new();
    loop {
        while let Some((read, a)) = rx.poll_action(now) {
            events += 1;
            if let Action::Request(g) = a {
                live.push((read, g));
            }
        }
        if live.is_empty() {
            break;
        }
        for (read, g) in live.drain(..) {
            black_box(rx.poll_timeout_of(read));
            let half = g.len / 2;
            black_box(rx.on_bytes(now, read, g.id, half).expect("in range"));
            black_box(rx.on_bytes(now, read, g.id, g.len - half).expect("in range"));
            rx.on_done(now, read, g.id).expect("complete");
            events += 4;
        }
    }
    assert_eq!(rx.stats().outstanding, 0);
    events
}

fn bench_receiver(c: &mut Criterion) {
    let mut group = c.benchmark_group("receiver_event");
    let servers: Vec<ServerId> = (0..1024).map(ServerId).collect();
    let stripes: Vec<Stripe> = (0..64)
        .map(|r| Stripe::fixed_sru(&format!("r{r}"), &servers[(r * 16) % 960..][..64], SRU).expect("valid"))
        .collect();
    let now = Instant::now();
    let events = drive_receiver(receiver_with_reads(&stripes, now), now);
    group.throughput(Throughput::Elements(events));
    group.bench_function("4096_fragments_64_reads", |b| {
        b.iter_batched(
            || receiver_with_reads(&stripes, now),
            |rx| drive_receiver(rx, now),
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench, bench_receiver);
criterion_main!(benches);
