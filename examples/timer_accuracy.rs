//! Wake-up error of a 200 us deadline: incast's timerfd-based `HrTimer` against
//! `tokio::time::sleep`, 2000 runs each, on a current-thread runtime.
//!
//! Run: `cargo run --release --example timer_accuracy`
//!
//! Error = actual wake-up time - deadline. tokio's timer wheel has 1 ms ticks, so a 200 us
//! sleep should wake near 1 ms; the timerfd should wake within tens of microseconds.

use std::time::{Duration, Instant};

use incast::rpc::HrTimer;

const RUNS: usize = 2000;
const DEADLINE: Duration = Duration::from_micros(200);

fn summary(name: &str, mut errs: Vec<Duration>) {
    errs.sort_unstable();
    let q = |p: f64| errs[((errs.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6;
    println!(
        "{name:<20} median {:>7.1} us   p99 {:>7.1} us   max {:>7.1} us",
        q(0.5),
        q(0.99),
        q(1.0)
    );
}

fn main() -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let mut timer = HrTimer::new()?;
        let mut hr = Vec::with_capacity(RUNS);
        let mut tk = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let deadline = Instant::now() + DEADLINE;
            timer.set(Some(deadline))?;
            timer.fired().await?;
            hr.push(Instant::now() - deadline);

            let deadline = Instant::now() + DEADLINE;
            tokio::time::sleep_until(deadline.into()).await;
            tk.push(Instant::now() - deadline);
        }
        println!("wake-up error for a {DEADLINE:?} deadline, {RUNS} runs each (interleaved)");
        summary("HrTimer (timerfd)", hr);
        summary("tokio::time::sleep", tk);
        Ok(())
    })
}
