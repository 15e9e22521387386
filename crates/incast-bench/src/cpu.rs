//! CPU time of this process, for the CPU-per-GiB column, and of the whole machine, for the
//! headroom a run leaves and for the time a hypervisor took from it (steal).
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

/// The machine's CPU time so far, in jiffies of all CPUs (the first line of /proc/stat).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MachineTicks {
    /// Time the guest's CPUs worked: user, nice, system, irq and softirq.
    pub busy: u64,
    /// Time a hypervisor ran something else while this machine had work ("steal"): 0 on
    /// bare metal. A run measured while it grew measures the host, not the library.
    pub steal: u64,
    /// All of it, idle and iowait included.
    pub total: u64,
}

/// The machine's CPU time so far, or `None` where /proc/stat cannot be read.
pub fn machine_ticks() -> Option<MachineTicks> {
    parse_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// Parses the first (all-CPU) line of /proc/stat: user nice system idle iowait irq softirq
/// steal (guest time is already counted in user and nice).
fn parse_stat(stat: &str) -> Option<MachineTicks> {
    let mut fields = stat.lines().next()?.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields.take(8).map(|x| x.parse().unwrap_or(0)).collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    let total: u64 = v.iter().sum();
    let steal = at(7);
    let idle = at(3) + at(4);
    Some(MachineTicks {
        busy: total.saturating_sub(idle).saturating_sub(steal),
        steal,
        total,
    })
}

/// Share of the machine's CPU time between two [`machine_ticks`] readings that `part`
/// took (0..=1), or `None` without both readings or with no time between them.
fn share(
    before: Option<MachineTicks>,
    after: Option<MachineTicks>,
    part: impl Fn(&MachineTicks) -> u64,
) -> Option<f64> {
    let (b, a) = (before?, after?);
    let dt = a.total.checked_sub(b.total).filter(|d| *d > 0)?;
    Some(part(&a).saturating_sub(part(&b)) as f64 / dt as f64)
}

/// Fraction of the machine's CPU time that its own work kept busy between two
/// [`machine_ticks`] readings (steal not included).
pub fn busy_fraction(before: Option<MachineTicks>, after: Option<MachineTicks>) -> Option<f64> {
    share(before, after, |t| t.busy)
}

/// Fraction of the machine's CPU time a hypervisor took between two [`machine_ticks`]
/// readings ("steal").
pub fn steal_fraction(before: Option<MachineTicks>, after: Option<MachineTicks>) -> Option<f64> {
    share(before, after, |t| t.steal)
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
        let after = machine_ticks();
        let f = busy_fraction(before, after).unwrap();
        assert!(f > 0.0 && f <= 1.0, "{f} {x}");
        let s = steal_fraction(before, after).unwrap();
        assert!((0.0..=1.0).contains(&s) && f + s <= 1.0, "{f} {s}");
        assert_eq!(busy_fraction(None, before), None);
    }

    #[test]
    fn steal_is_not_busy_and_shares_add_up() {
        let line =
            |user: u64, idle: u64, steal: u64| format!("cpu  {user} 0 10 {idle} 5 1 4 {steal} 0 0\ncpu0 1 2 3\n");
        let before = parse_stat(&line(100, 1000, 50));
        let after = parse_stat(&line(160, 1100, 90));
        assert_eq!(
            before,
            Some(MachineTicks {
                busy: 115,
                steal: 50,
                total: 1170
            })
        );
        // 200 jiffies passed: 60 of work, 100 idle, 40 stolen.
        assert_eq!(busy_fraction(before, after), Some(0.3));
        assert_eq!(steal_fraction(before, after), Some(0.2));
        // A kernel without the steal field (fewer columns) reads as no steal.
        let old = parse_stat("cpu  1 2 3 4\n").unwrap();
        assert_eq!((old.busy, old.steal, old.total), (6, 0, 10));
        assert_eq!(parse_stat("intr 1 2\n"), None);
        assert_eq!(parse_stat(""), None);
        // No time between the readings: no share.
        assert_eq!(steal_fraction(before, before), None);
    }
}
