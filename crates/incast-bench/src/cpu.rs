//! CPU time of this process, for the CPU-per-GiB column, and of the whole machine, for the
//! headroom a run leaves.
//!
//! One process hosts the client and, on loopback and the testbed, every server: its CPU time
//! is the whole cost of moving the bytes, both ends included. Kernel work that runs outside
//! it (the emulated NICs' and switch's softirqs, namespace teardown) shows only in the
//! machine's counters, so a testbed result reports both.
use std::time::Duration;

use nix::sys::resource::{getrusage, UsageWho};

/// User plus system CPU time of every thread of this process so far (zero if the kernel
/// refuses, which RUSAGE_SELF never does on Linux).
pub fn process_cpu() -> Duration {
    let Ok(u) = getrusage(UsageWho::RUSAGE_SELF) else {
        return Duration::ZERO;
    };
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::new(
            t.tv_sec().max(0) as u64,
            (t.tv_usec().max(0) as u32).saturating_mul(1000),
        )
    };
    tv(u.user_time()) + tv(u.system_time())
}

/// Busy and total jiffies of all CPUs (the first line of /proc/stat), or `None` where it
/// cannot be read.
pub fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let v: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let total: u64 = v.iter().sum();
    // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// Fraction of the machine's CPU time that was busy between two [`machine_ticks`] readings.
pub fn busy_fraction(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Option<f64> {
    let ((b0, t0), (b1, t1)) = (before?, after?);
    let dt = t1.checked_sub(t0).filter(|d| *d > 0)?;
    Some(b1.saturating_sub(b0) as f64 / dt as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work() {
        let before = process_cpu();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        assert!(process_cpu() > before, "{x}");
    }

    #[test]
    fn machine_busy_fraction_is_a_fraction() {
        let before = machine_ticks();
        assert!(before.is_some());
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let f = busy_fraction(before, machine_ticks()).unwrap();
        assert!(f > 0.0 && f <= 1.0, "{f} {x}");
        assert_eq!(busy_fraction(None, before), None);
    }
}
