//! Microsecond RTT estimation and the application-level retransmission timeout.
//!
//! Linux arms a TCP retransmission timer of at least `RTO_min` = 200 ms, while a datacenter
//! round trip is tens to hundreds of microseconds: one lost tail costs a thousand RTTs of
//! idle link (vasudevan-sigcomm09 §2). Their fix is in the kernel: drop the floor, time in
//! microseconds. We cannot change the kernel, so the core runs the same estimator *above*
//! TCP, on request-to-first-byte times, and uses it to decide when a request has stalled
//! and should be hedged.
//!
//! The estimator is RFC 6298 (Jacobson/Karels) in nanoseconds with no 200 ms floor:
//!
//! - first sample `R`: `SRTT = R`, `RTTVAR = R / 2`;
//! - then `RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R|`, `SRTT = 7/8 SRTT + 1/8 R`;
//! - `RTO = SRTT + 4 RTTVAR`, clamped to `[min, max]` of [`RtoBounds`];
//! - backoff: `RTO * 2^k` after `k` consecutive timeouts, capped at `max`;
//! - randomized, as in vasudevan-sigcomm09 §5: `timeout = RTO + rand(0, 0.5) * RTO`, so that
//!   many flows that stalled together do not all fire (and hedge) in the same instant. The
//!   jitter is added after the cap, so a timeout is at most `1.5 * max`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Default RTO before the first sample (5 ms). High enough that the first requests of a read
/// are not hedged on a guess; still forty times shorter than Linux's 200 ms floor.
pub const DEFAULT_INITIAL_RTO: Duration = Duration::from_millis(5);
/// Default lower bound of the RTO (200 us), the value vasudevan-sigcomm09 evaluates for
/// real deployments; below it a timer's own wake-up error dominates.
pub const DEFAULT_MIN_RTO: Duration = Duration::from_micros(200);
/// Default cap of the backed-off RTO (100 ms).
pub const DEFAULT_MAX_RTO: Duration = Duration::from_millis(100);
/// Smallest allowed `min` (1 us).
pub const RTO_FLOOR: Duration = Duration::from_micros(1);
/// Largest allowed `max` (60 s).
pub const RTO_CEILING: Duration = Duration::from_secs(60);
/// Backoff exponent cap (2^16), far beyond any `max / min` ratio the bounds allow.
const MAX_BACKOFF_SHIFT: u32 = 16;

/// Bounds of the application-level RTO. Build one with [`RtoBounds::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RtoBounds {
    /// RTO used before the first RTT sample.
    #[serde(with = "crate::policy::duration_us")]
    pub(crate) initial: Duration,
    /// Lower clamp of the RTO.
    #[serde(with = "crate::policy::duration_us")]
    pub(crate) min: Duration,
    /// Upper clamp of the backed-off RTO (jitter comes on top).
    #[serde(with = "crate::policy::duration_us")]
    pub(crate) max: Duration,
}

impl Default for RtoBounds {
    fn default() -> Self {
        Self {
            initial: DEFAULT_INITIAL_RTO,
            min: DEFAULT_MIN_RTO,
            max: DEFAULT_MAX_RTO,
        }
    }
}

/// Why [`RtoBounds::new`] refused its arguments.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RtoBoundsError {
    /// `min` is below [`RTO_FLOOR`] or `max` above [`RTO_CEILING`].
    #[error("rto bounds out of range: min {min:?} must be >= {floor:?} and max {max:?} <= {ceiling:?}")]
    OutOfRange {
        /// The given min.
        min: Duration,
        /// The given max.
        max: Duration,
        /// [`RTO_FLOOR`].
        floor: Duration,
        /// [`RTO_CEILING`].
        ceiling: Duration,
    },
    /// Not `min <= initial <= max`.
    #[error("rto bounds out of order: need min {min:?} <= initial {initial:?} <= max {max:?}")]
    Order {
        /// The given min.
        min: Duration,
        /// The given initial.
        initial: Duration,
        /// The given max.
        max: Duration,
    },
}

impl RtoBounds {
    /// `initial` before any sample; the RTO is clamped to `[min, max]`.
    /// Range: `1 us <= min <= initial <= max <= 60 s`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use incast_core::RtoBounds;
    /// let b = RtoBounds::new(Duration::from_millis(1), Duration::from_micros(100), Duration::from_millis(50))?;
    /// assert_eq!(b.min(), Duration::from_micros(100));
    /// assert!(RtoBounds::new(Duration::from_millis(1), Duration::from_millis(2), Duration::from_millis(3)).is_err());
    /// # Ok::<(), incast_core::RtoBoundsError>(())
    /// ```
    pub fn new(initial: Duration, min: Duration, max: Duration) -> Result<Self, RtoBoundsError> {
        let b = Self { initial, min, max };
        b.validate()?;
        Ok(b)
    }

    pub(crate) fn validate(&self) -> Result<(), RtoBoundsError> {
        let Self { initial, min, max } = *self;
        if min < RTO_FLOOR || max > RTO_CEILING {
            return Err(RtoBoundsError::OutOfRange {
                min,
                max,
                floor: RTO_FLOOR,
                ceiling: RTO_CEILING,
            });
        }
        if !(min <= initial && initial <= max) {
            return Err(RtoBoundsError::Order { min, initial, max });
        }
        Ok(())
    }

    /// RTO before the first sample.
    pub fn initial(&self) -> Duration {
        self.initial
    }
    /// Lower clamp.
    pub fn min(&self) -> Duration {
        self.min
    }
    /// Upper clamp of the backed-off RTO.
    pub fn max(&self) -> Duration {
        self.max
    }
}

/// RFC 6298 estimator in nanoseconds, with no 200 ms floor. See the [module docs](self).
///
/// ```
/// use std::time::Duration;
/// use incast_core::{RtoBounds, RttEstimator};
/// let mut e = RttEstimator::new(RtoBounds::default());
/// e.on_sample(Duration::from_micros(100));
/// // SRTT 100 us, RTTVAR 50 us: RTO = 100 + 4 * 50 = 300 us.
/// assert_eq!(e.rto(), Duration::from_micros(300));
/// // The randomized timeout lies in [RTO, 1.5 RTO).
/// assert_eq!(e.timeout(0, 0.0), Duration::from_micros(300));
/// assert_eq!(e.timeout(0, 0.5), Duration::from_micros(375));
/// // Backoff doubles per consecutive timeout.
/// assert_eq!(e.timeout(2, 0.0), Duration::from_micros(1200));
/// ```
#[derive(Clone, Debug)]
pub struct RttEstimator {
    bounds: RtoBounds,
    srtt_ns: u64,
    rttvar_ns: u64,
    min_ns: u64,
    latest_ns: u64,
    samples: u64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl RttEstimator {
    /// An estimator with no samples yet; its RTO is `bounds.initial()`.
    pub fn new(bounds: RtoBounds) -> Self {
        Self {
            bounds,
            srtt_ns: 0,
            rttvar_ns: 0,
            min_ns: u64::MAX,
            latest_ns: 0,
            samples: 0,
        }
    }

    /// The same estimate under other bounds (a later read's policy).
    pub fn with_bounds(mut self, bounds: RtoBounds) -> Self {
        self.bounds = bounds;
        self
    }

    /// Feeds one round-trip sample.
    pub fn on_sample(&mut self, rtt: Duration) {
        let r = nanos(rtt);
        if self.samples == 0 {
            self.srtt_ns = r;
            self.rttvar_ns = r / 2;
        } else {
            let err = self.srtt_ns.abs_diff(r);
            self.rttvar_ns = (3 * (self.rttvar_ns / 4)).saturating_add(err / 4);
            self.srtt_ns = (7 * (self.srtt_ns / 8)).saturating_add(r / 8);
        }
        self.min_ns = self.min_ns.min(r);
        self.latest_ns = r;
        self.samples += 1;
    }

    /// Smoothed RTT, `None` before the first sample.
    pub fn srtt(&self) -> Option<Duration> {
        (self.samples > 0).then(|| Duration::from_nanos(self.srtt_ns))
    }
    /// RTT variation, `None` before the first sample.
    pub fn rttvar(&self) -> Option<Duration> {
        (self.samples > 0).then(|| Duration::from_nanos(self.rttvar_ns))
    }
    /// Smallest sample seen (an estimate of the RTT with empty queues).
    pub fn min_rtt(&self) -> Option<Duration> {
        (self.samples > 0).then(|| Duration::from_nanos(self.min_ns))
    }
    /// The most recent sample.
    pub fn latest(&self) -> Option<Duration> {
        (self.samples > 0).then(|| Duration::from_nanos(self.latest_ns))
    }
    /// Number of samples fed.
    pub fn samples(&self) -> u64 {
        self.samples
    }
    /// The bounds this estimator clamps to.
    pub fn bounds(&self) -> &RtoBounds {
        &self.bounds
    }

    /// `SRTT + 4 RTTVAR` clamped to `[min, max]`; `initial` before the first sample.
    pub fn rto(&self) -> Duration {
        if self.samples == 0 {
            return self.bounds.initial;
        }
        let raw = self.srtt_ns.saturating_add(self.rttvar_ns.saturating_mul(4));
        Duration::from_nanos(raw.clamp(nanos(self.bounds.min), nanos(self.bounds.max)))
    }

    /// `RTO * 2^backoff`, capped at `max`.
    pub fn backed_off(&self, backoff: u32) -> Duration {
        let rto = nanos(self.rto());
        let shifted = rto.saturating_mul(1u64 << backoff.min(MAX_BACKOFF_SHIFT));
        Duration::from_nanos(shifted.min(nanos(self.bounds.max).max(rto)))
    }

    /// The randomized timeout `T + unit * T / 2` with `T = self.backed_off(backoff)`.
    /// `unit` is a uniform draw in `[0, 1)` supplied by the caller (the scheduler's seeded
    /// generator); values outside are clamped into that range.
    pub fn timeout(&self, backoff: u32, unit: f64) -> Duration {
        let t = self.backed_off(backoff);
        let unit = if unit.is_finite() { unit.clamp(0.0, 1.0) } else { 0.0 };
        t + t.mul_f64(unit * 0.5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn rfc6298_updates() {
        let mut e = RttEstimator::new(RtoBounds::default());
        assert_eq!(e.rto(), DEFAULT_INITIAL_RTO);
        e.on_sample(100 * US);
        assert_eq!((e.srtt(), e.rttvar()), (Some(100 * US), Some(50 * US)));
        e.on_sample(200 * US);
        // RTTVAR = 3/4*50 + 1/4*100 = 62.5; SRTT = 7/8*100 + 1/8*200 = 112.5
        assert_eq!(e.rttvar(), Some(Duration::from_nanos(62_500)));
        assert_eq!(e.srtt(), Some(Duration::from_nanos(112_500)));
        assert_eq!(e.rto(), Duration::from_nanos(112_500 + 4 * 62_500));
        assert_eq!(e.min_rtt(), Some(100 * US));
        assert_eq!(e.latest(), Some(200 * US));
    }

    #[test]
    fn no_200ms_floor_and_clamps() {
        let b = RtoBounds::new(10 * US, 5 * US, Duration::from_millis(1)).unwrap();
        let mut e = RttEstimator::new(b);
        for _ in 0..100 {
            e.on_sample(20 * US);
        }
        // Converges to SRTT = 20 us with vanishing variance, far below 200 ms.
        assert!(e.rto() < 30 * US, "{:?}", e.rto());
        assert!(e.rto() >= 5 * US);
        // Backoff doubles and then caps at max.
        let r = e.rto();
        assert_eq!(e.backed_off(1), 2 * r);
        assert_eq!(e.backed_off(40), Duration::from_millis(1));
        // Jitter stays within [T, 1.5 T).
        assert_eq!(
            e.timeout(40, 0.999_999).max(Duration::from_micros(1500)),
            Duration::from_micros(1500)
        );
        assert_eq!(e.timeout(0, f64::NAN), r);
        e.on_sample(Duration::from_secs(10));
        assert_eq!(e.rto(), Duration::from_millis(1));
    }

    #[test]
    fn bounds_validation() {
        let ms = Duration::from_millis(1);
        assert!(matches!(
            RtoBounds::new(ms, Duration::ZERO, ms),
            Err(RtoBoundsError::OutOfRange { .. })
        ));
        assert!(matches!(
            RtoBounds::new(ms, ms, Duration::from_secs(61)),
            Err(RtoBoundsError::OutOfRange { .. })
        ));
        assert!(matches!(
            RtoBounds::new(3 * ms, ms, 2 * ms),
            Err(RtoBoundsError::Order { .. })
        ));
        assert!(RtoBounds::new(ms, ms, ms).is_ok());
    }
}
