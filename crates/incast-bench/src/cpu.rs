//! CPU time of this process, for the CPU-per-GiB column.
//!
//! One process hosts the client and, on loopback and the testbed, every server: its CPU time
//! is the whole cost of moving the bytes, both ends included.
#![allow(unsafe_code)]

use std::time::Duration;

/// User plus system CPU time of every thread of this process so far.
pub fn process_cpu() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` is valid for writes of one `rusage`; RUSAGE_SELF cannot fail on Linux, and
    // on failure the zeroed value is read, which is a valid `rusage`.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32).saturating_mul(1000));
    tv(ru.ru_utime) + tv(ru.ru_stime)
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
}
