//! End to end through the facade's public API, on the deterministic simulated transport:
//! a stalled response costs the kernel's 200 ms without hedging and a few RTOs with it,
//! across stripe widths and both scaling models. Virtual time, so nothing here is timing
//! dependent.

use std::time::{Duration, Instant};

use incast::sim::{simulate, SimConfig, Stall};
use incast::{Fragment, Hedging, Lane, Policy, ReadError, ServerId, Stripe};

const RTO_MIN: Duration = Duration::from_millis(200);

fn stall(server: u32) -> SimConfig {
    SimConfig {
        stalls: vec![Stall {
            server: ServerId(server),
            lane: Lane::Primary,
            nth: 0,
            delay: RTO_MIN,
        }],
        ..SimConfig::default()
    }
}

fn ideal(stripe: &Stripe) -> Duration {
    Duration::from_nanos(stripe.block_len() * 8)
}

#[test]
fn hedging_recovers_a_stall_in_milliseconds_at_every_width() {
    let no_hedge = Policy::builder().hedging(Hedging::Off).build().unwrap();
    for n in [2u32, 8, 16, 64, 256] {
        let servers: Vec<ServerId> = (0..n).map(ServerId).collect();
        for stripe in [
            Stripe::fixed_block("b", &servers, 1 << 20).unwrap(),
            Stripe::fixed_sru("b", &servers, 32 * 1024).unwrap(),
        ] {
            let cfg = stall(n / 2);
            let slow = simulate(&stripe, &no_hedge, 1, &cfg, Instant::now());
            let fast = simulate(&stripe, &Policy::default(), 1, &cfg, Instant::now());
            assert!(slow.complete && fast.complete);
            assert!(
                slow.elapsed >= RTO_MIN,
                "n={n}: without hedging the stall costs the RTO: {slow:?}"
            );
            assert_eq!(slow.stats.hedges, 0);
            assert!(fast.stats.hedges >= 1, "n={n}: {fast:?}");
            // Default initial RTO is 5 ms (+50% jitter); the stall must cost about that, not 200 ms.
            let bound = ideal(&stripe) + Duration::from_millis(10);
            assert!(fast.elapsed < bound, "n={n}: {:?} >= {bound:?}", fast.elapsed);
        }
    }
}

#[test]
fn without_stalls_the_default_policy_keeps_the_link_busy() {
    for n in [1u32, 16, 256] {
        let servers: Vec<ServerId> = (0..n).map(ServerId).collect();
        let stripe = Stripe::fixed_block("b", &servers, 4 << 20).unwrap();
        let r = simulate(&stripe, &Policy::default(), 1, &SimConfig::default(), Instant::now());
        assert!(r.complete);
        assert_eq!(r.stats.hedges, 0, "no spurious hedges: {r:?}");
        let ratio = ideal(&stripe).as_secs_f64() / r.elapsed.as_secs_f64();
        assert!(ratio > 0.9, "n={n}: {:.2} of the link", ratio);
    }
}

#[test]
fn a_stall_on_a_fragment_with_a_replica_is_hedged_there() {
    let frags = (0..8u32)
        .map(|i| Fragment::new(ServerId(i), "b", 0, 64 * 1024).with_replicas([ServerId(100 + i)]))
        .collect();
    let stripe = Stripe::new(frags).unwrap();
    let r = simulate(&stripe, &Policy::default(), 1, &stall(3), Instant::now());
    assert!(r.complete && r.stats.hedges == 1, "{r:?}");
    assert!(r.elapsed < Duration::from_millis(15));
}

#[test]
fn public_errors_render_with_context() {
    let err = ReadError::ServerFailed {
        fragment: 4,
        server: ServerId(9),
        tried: vec![ServerId(9), ServerId(2)],
    };
    assert_eq!(
        err.to_string(),
        "fragment 4 failed on server 9; no replica left (tried server 9, server 2)"
    );
}
