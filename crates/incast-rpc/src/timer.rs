//! A high-resolution timer for sub-millisecond deadlines.
//!
//! tokio's timer wheel ticks in milliseconds: a 200 us sleep wakes after about 1 ms (TESTBED.md
//! measured a median error of 850-925 us). Application-level RTOs in a datacenter are hundreds
//! of microseconds, so the client waits on a Linux `timerfd` (CLOCK_MONOTONIC, the clock of
//! `std::time::Instant`) registered with tokio's reactor instead: the wake-up comes from epoll
//! with the kernel's high-resolution timers behind it. `examples/timer_accuracy.rs` measures
//! both.

use std::io;
use std::time::Instant;

use tokio::io::unix::AsyncFd;

use crate::sys;

/// A one-shot timer on a timerfd. Cancel-safe: dropping [`HrTimer::fired`] loses nothing.
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// use std::time::{Duration, Instant};
/// let mut t = incast_rpc::HrTimer::new()?;
/// t.set(Some(Instant::now() + Duration::from_micros(200)))?;
/// t.fired().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct HrTimer {
    fd: AsyncFd<sys::Timerfd>,
    deadline: Option<Instant>,
}

impl HrTimer {
    /// A disarmed timer. Needs a tokio runtime with I/O enabled.
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            fd: sys::async_timerfd(sys::Timerfd::new()?)?,
            deadline: None,
        })
    }

    /// Arms the timer for `deadline` (a past deadline fires at once), or disarms it.
    pub fn set(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        if deadline == self.deadline {
            return Ok(());
        }
        let after = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        self.fd.get_ref().set(after)?;
        self.deadline = deadline;
        Ok(())
    }

    /// Arms the timer for `deadline` only if it is idle or `deadline` is earlier than the
    /// armed one. A later deadline (or none) leaves it armed: a timer that fires early costs
    /// one spurious wake-up, while re-arming on every event costs a syscall each (and, on a
    /// virtual machine, a hypervisor exit for a deadline before the next tick).
    pub fn set_earlier(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        if self.deadline.is_none_or(|armed| deadline.is_some_and(|d| d < armed)) {
            self.set(deadline)?;
        }
        Ok(())
    }

    /// The armed deadline.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Completes when the armed deadline passes; never, while disarmed.
    pub async fn fired(&mut self) -> io::Result<()> {
        if self.deadline.is_none() {
            return std::future::pending().await;
        }
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| fd.get_ref().read()) {
                Ok(Ok(())) => {
                    self.deadline = None;
                    return Ok(());
                }
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }
}
