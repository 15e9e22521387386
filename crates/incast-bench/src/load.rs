//! A busy host: threads of a child process that spin on the CPUs while a sweep measures
//! (`incast-bench sweep --cpu-load N`).
//!
//! A service's host is rarely idle: the service computes, compacts, serializes, and other
//! tenants run beside it. A client whose reads are driven by the receiver (a grant goes out
//! when an earlier one's bytes were read) waits for the CPU at every turn of that loop, where
//! `naive`'s requests are all out at once and the kernel receives their bytes whatever the
//! process does. So a busy host is a check of its own, and one a reader of the results must
//! be able to rerun: the load is an option of the bench, recorded in the JSON header, not a
//! shell loop beside it.
//!
//! The load runs in a child process (this executable's hidden `spin` subcommand), not in
//! threads of the bench: the bench's CPU-per-GiB column counts its own process, and spinning
//! threads would be counted as the cost of moving the bytes. The child shares the bench's
//! session, so where the kernel groups a session's tasks (`sched_autogroup_enabled`) its
//! threads compete with the client's and the servers' threads in one group, as a busy loop
//! started from the same shell does; the testbed's softirqs (the emulated switch) run
//! outside it, at a kernel thread's priority when they pile up.
//!
//! The child stops by itself: when its time limit passes, and when its standard input
//! closes, which it does when the bench ends however it ends (the bench holds the pipe's
//! other end). [`CpuLoad`]'s drop also kills it by its PID and reaps it.
//!
//! Example (the first line is the command that runs it):
//!
//! ```text
//! incast-bench sweep --testbed --cpu-load 2 --senders 16,64 --sru 64KiB --concurrency 1,16
//! ```
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most spinning threads `--cpu-load` takes: a few times the CPUs of any machine this bench
/// runs on, and a bound on what a typo can start.
pub const MAX_CPU_LOAD: usize = 64;

/// How often the child looks at its clock and its stop flag while it waits.
const SPIN_POLL: Duration = Duration::from_millis(10);

/// A child process whose threads spin until it is dropped (or its time limit passes).
#[derive(Debug)]
pub struct CpuLoad {
    child: Child,
}

impl CpuLoad {
    /// Starts `threads` spinning threads in a child process of this executable, for at most
    /// `limit`. `None` for zero threads.
    ///
    /// # Errors
    ///
    /// More than [`MAX_CPU_LOAD`] threads (`InvalidInput`), or the child could not start.
    pub fn start(threads: usize, limit: Duration) -> std::io::Result<Option<Self>> {
        Self::start_with(&std::env::current_exe()?, threads, limit)
    }

    /// [`Self::start`] with the executable given (its `spin` subcommand runs the load).
    ///
    /// # Errors
    ///
    /// As [`Self::start`].
    pub fn start_with(exe: &std::path::Path, threads: usize, limit: Duration) -> std::io::Result<Option<Self>> {
        if threads == 0 {
            return Ok(None);
        }
        check_threads(threads).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let child = Command::new(exe)
            .arg("spin")
            .arg("--threads")
            .arg(threads.to_string())
            .arg("--max-time")
            .arg(format!("{}ms", limit.as_millis().max(1)))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()?;
        Ok(Some(Self { child }))
    }
}

impl Drop for CpuLoad {
    fn drop(&mut self) {
        // Closing its standard input stops it; killing it by its PID makes sure; waiting
        // reaps it. A child that already ended makes `kill` fail, which is fine.
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `threads` within 1 to [`MAX_CPU_LOAD`], else why not.
pub fn check_threads(threads: usize) -> Result<(), String> {
    if (1..=MAX_CPU_LOAD).contains(&threads) {
        Ok(())
    } else {
        Err(format!(
            "a CPU load is 1 to {MAX_CPU_LOAD} spinning threads, not {threads}"
        ))
    }
}

/// The child's side (`incast-bench spin`): `threads` threads spin until `limit` passed or
/// standard input closed, whichever comes first; then they stop and this returns.
///
/// # Errors
///
/// `threads` out of range (see [`check_threads`]), or a thread could not start.
pub fn spin(threads: usize, limit: Duration) -> std::io::Result<()> {
    check_threads(threads).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let stop = Arc::new(AtomicBool::new(false));
    // Standard input's end is the parent's: read to its end, then stop everything. (The
    // thread stays blocked in its read if the limit comes first; the process ends anyway.)
    {
        let stop = stop.clone();
        std::thread::Builder::new().name("spin-stdin".into()).spawn(move || {
            let mut sink = [0u8; 64];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            stop.store(true, Ordering::Relaxed);
        })?;
    }
    spin_until(threads, limit, &stop)
}

/// `threads` threads spin until `limit` passed or `stop` is set; then they stop and this
/// returns.
///
/// # Errors
///
/// `threads` out of range (see [`check_threads`]), or a thread could not start.
pub fn spin_until(threads: usize, limit: Duration, stop: &Arc<AtomicBool>) -> std::io::Result<()> {
    check_threads(threads).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let spinners = (0..threads)
        .map(|i| {
            let stop = stop.clone();
            std::thread::Builder::new().name(format!("spin-{i}")).spawn(move || {
                let mut x: u64 = 0;
                while !stop.load(Ordering::Relaxed) {
                    // Work the optimizer cannot drop, between looks at the flag.
                    for _ in 0..1024 {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    }
                }
                x
            })
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    let end = Instant::now() + limit;
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        std::thread::sleep(SPIN_POLL.min(end.saturating_duration_since(Instant::now())));
    }
    stop.store(true, Ordering::Relaxed);
    for s in spinners {
        let _ = s.join();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_out_of_range_are_refused() {
        assert!(check_threads(0).is_err());
        assert!(check_threads(MAX_CPU_LOAD + 1).is_err());
        assert!(check_threads(1).is_ok());
        assert!(check_threads(MAX_CPU_LOAD).is_ok());
        assert!(spin(0, Duration::from_millis(1)).is_err());
        let exe = std::path::Path::new("/nonexistent");
        assert!(CpuLoad::start_with(exe, MAX_CPU_LOAD + 1, Duration::from_secs(1)).is_err());
        assert!(CpuLoad::start_with(exe, 0, Duration::from_secs(1)).unwrap().is_none());
    }

    #[test]
    fn spinning_stops_at_its_limit() {
        let t = Instant::now();
        spin_until(1, Duration::from_millis(50), &Arc::new(AtomicBool::new(false))).unwrap();
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(50), "stopped early: {took:?}");
        // Generous: a loaded 2-core machine may be slow to join, but not by seconds.
        assert!(took < Duration::from_secs(5), "did not stop: {took:?}");
    }

    #[test]
    fn spinning_stops_when_told() {
        let stop = Arc::new(AtomicBool::new(false));
        let setter = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                stop.store(true, Ordering::Relaxed);
            })
        };
        let t = Instant::now();
        spin_until(2, Duration::from_secs(60), &stop).unwrap();
        setter.join().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "ran past its stop: {:?}",
            t.elapsed()
        );
    }
}
