//! What hedging buys, on the simulated transport of `incast::sim`: one of 16 servers loses
//! the tail of its first response and, like a TCP flow in incast, would sit out a 200 ms
//! kernel timeout. The same 1 MiB read with hedging off and with the default policy.
//!
//! Run: `cargo run --release --example simulated_read`
//!
//! The simulation is deterministic (virtual clock); see `incast::sim` for what it models.

use std::time::{Duration, Instant};

use incast::sim::{simulate, SimConfig, Stall};
use incast::{Hedging, Lane, Policy, ServerId, Stripe};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let servers: Vec<ServerId> = (0..16).map(ServerId).collect();
    let stripe = Stripe::fixed_block("block-0", &servers, 1 << 20)?;
    let stall = Stall {
        server: ServerId(5),
        lane: Lane::Primary,
        nth: 0,
        delay: Duration::from_millis(200),
    };
    let cfg = SimConfig {
        stalls: vec![stall],
        ..SimConfig::default()
    };
    let policies = [
        ("default, hedging off", Policy::builder().hedging(Hedging::Off).build()?),
        ("default", Policy::default()),
    ];
    println!("1 MiB block over 16 servers, 1 Gbit/s, server 5 stalls its first response for 200 ms\n");
    println!("{:<22} {:>12} {:>8} {:>8}", "policy", "block time", "grants", "hedges");
    for (name, policy) in &policies {
        let r = simulate(&stripe, policy, 1, &cfg, Instant::now());
        assert!(r.complete, "{r:?}");
        let ms = r.elapsed.as_secs_f64() * 1e3;
        println!("{name:<22} {ms:>9.2} ms {:>8} {:>8}", r.stats.grants, r.stats.hedges);
    }
    println!(
        "\nideal (wire time only): {:.2} ms",
        (1u64 << 20) as f64 * 8.0 / 1e9 * 1e3
    );
    Ok(())
}
