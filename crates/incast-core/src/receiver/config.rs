//! The port's settings: [`ReceiverConfig`], its validated [`ReceiverConfigBuilder`] and the
//! error a rejected setting gives ([`ReceiverConfigError`]). The named defaults and the
//! constants of the control law stay beside the [`Receiver`] (in the parent module), whose
//! docs give their sources.

use super::*;

/// Why a receiver configuration was rejected.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiverConfigError {
    /// The budget bounds are out of range or out of order.
    #[error("budget bounds: need 1 <= min ({min}) <= initial ({initial}) <= max ({max}) <= {limit}")]
    Budget {
        /// Floor.
        min: u64,
        /// Start.
        initial: u64,
        /// Ceiling.
        max: u64,
        /// The largest allowed.
        limit: u64,
    },
    /// A value out of its documented range.
    #[error("{what} = {value} is out of range ({range})")]
    OutOfRange {
        /// The setting.
        what: &'static str,
        /// The value given.
        value: String,
        /// The range allowed.
        range: &'static str,
    },
}

/// The port's settings: see [`ReceiverConfigBuilder`] for each, with unit, default and range.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceiverConfig {
    pub(super) initial_budget: u64,
    pub(super) min_budget: u64,
    pub(super) max_budget: u64,
    pub(super) max_senders: u32,
    pub(super) target_delay: Duration,
    pub(super) aging_bytes: u64,
    pub(super) hedge_fraction: f64,
    pub(super) hedge_burst: u64,
    pub(super) adaptive: bool,
    pub(super) pacing: bool,
    pub(super) port_rate_bps: Option<u64>,
    /// Whether the floor follows the path (no floor was set; see "A floor that follows the
    /// path" in the module docs).
    pub(super) path_floor: bool,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        ReceiverConfigBuilder::default().build().expect("defaults are valid")
    }
}

impl ReceiverConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> ReceiverConfigBuilder {
        ReceiverConfigBuilder::default()
    }

    /// The defaults for a port of `rate_bps` bits per second with `buffer` bytes of buffer:
    /// the port's rate is `rate_bps` (nothing is measured in its place), the budget starts at
    /// [`crate::model::recommend`]'s (an assumed 100 us RTT), and where that budget is under
    /// the default floor ([`DEFAULT_MIN_BUDGET`]; buffers under about 16 KiB) it is the floor
    /// too, at least [`MIN_CHUNK`]: a 16 KiB floor overflows an 8 KiB buffer whatever the
    /// control law does.
    ///
    /// ```
    /// use incast_core::receiver::ReceiverConfig;
    /// let c = ReceiverConfig::for_port(1_000_000_000, 32 * 1024)?;
    /// assert!(c.initial_budget() > 16 * 1024 && c.initial_budget() < 64 * 1024);
    /// assert_eq!(c.min_budget(), 16 * 1024);
    /// // An 8 KiB port at 500 Mbit/s: 0.8 x 8 KiB plus 100 us at the rate, in whole segments.
    /// let c = ReceiverConfig::for_port(500_000_000, 8 * 1024)?;
    /// assert!(c.min_budget() < 16 * 1024 && c.min_budget() == c.initial_budget());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_port(rate_bps: u64, buffer: u64) -> Result<Self, ReceiverConfigError> {
        let rec = crate::model::recommend(rate_bps, Duration::from_micros(100), buffer, crate::model::MSS_1448)
            .map_err(|e| ReceiverConfigError::OutOfRange {
                what: "port rate",
                value: format!("{rate_bps} ({e})"),
                range: "1 bit/s and up",
            })?;
        let floor = rec.inflight_budget.clamp(MIN_CHUNK, DEFAULT_MIN_BUDGET);
        Self::builder()
            .min_budget(floor)
            .initial_budget(rec.inflight_budget.clamp(floor, DEFAULT_MAX_BUDGET))
            .port_rate_bps(Some(rate_bps))
            .build()
    }

    /// Starting budget, bytes.
    pub fn initial_budget(&self) -> u64 {
        self.initial_budget
    }
    /// Floor of the budget, bytes: where it follows the path
    /// ([`ReceiverConfig::floor_follows_path`]), its highest.
    pub fn min_budget(&self) -> u64 {
        self.min_budget
    }
    /// Whether the floor follows the path: true unless a floor was set
    /// ([`ReceiverConfigBuilder::min_budget`], or [`ReceiverConfig::for_port`]).
    pub fn floor_follows_path(&self) -> bool {
        self.path_floor
    }
    /// Ceiling of the budget, bytes.
    pub fn max_budget(&self) -> u64 {
        self.max_budget
    }
    /// Port-wide sender cap.
    pub fn max_senders(&self) -> u32 {
        self.max_senders
    }
    /// Aging bound: the port's time, in the bytes it could pass, per halving of a read's
    /// bytes left in its order.
    pub fn aging_bytes(&self) -> u64 {
        self.aging_bytes
    }
    /// Tolerated queueing delay.
    pub fn target_delay(&self) -> Duration {
        self.target_delay
    }
    /// Whether the budget adapts.
    pub fn adaptive(&self) -> bool {
        self.adaptive
    }
    /// Whether grants carry a pacing rate.
    pub fn pacing(&self) -> bool {
        self.pacing
    }
}

/// Builds a [`ReceiverConfig`]; [`ReceiverConfigBuilder::build`] checks every range.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceiverConfigBuilder {
    c: ReceiverConfig,
    /// Whether [`ReceiverConfigBuilder::initial_budget`] was called; if not, the starting
    /// budget follows a raised floor.
    initial_set: bool,
}

impl Default for ReceiverConfigBuilder {
    fn default() -> Self {
        Self {
            c: ReceiverConfig {
                initial_budget: DEFAULT_INITIAL_BUDGET,
                min_budget: DEFAULT_MIN_BUDGET,
                max_budget: DEFAULT_MAX_BUDGET,
                max_senders: DEFAULT_PORT_MAX_SENDERS,
                target_delay: DEFAULT_TARGET_DELAY,
                aging_bytes: DEFAULT_AGING_BYTES,
                hedge_fraction: DEFAULT_PORT_HEDGE_FRACTION,
                hedge_burst: DEFAULT_HEDGE_BURST,
                adaptive: true,
                pacing: DEFAULT_PACING,
                port_rate_bps: None,
                path_floor: true,
            },
            initial_set: false,
        }
    }
}

impl ReceiverConfigBuilder {
    /// Starting budget in bytes. Default [`DEFAULT_INITIAL_BUDGET`], or the floor
    /// ([`ReceiverConfigBuilder::min_budget`]) if that is larger; range `[min, max]`.
    pub fn initial_budget(mut self, bytes: u64) -> Self {
        self.c.initial_budget = bytes;
        self.initial_set = true;
        self
    }
    /// Floor of the adaptive budget in bytes, fixed. Default: one that follows the path, at
    /// most [`DEFAULT_MIN_BUDGET`] and, where the reads have the port to themselves, down to
    /// the port's bandwidth-delay product plus the target queue, at least
    /// [`MIN_PATH_FLOOR`] (see "A floor that follows the path" in the module docs). Range
    /// `[1, initial]` when the starting budget is set, else `[1, max]` (the starting budget
    /// then follows the floor up). A grant larger than the budget still goes out when
    /// nothing is outstanding.
    pub fn min_budget(mut self, bytes: u64) -> Self {
        self.c.min_budget = bytes;
        self.c.path_floor = false;
        self
    }
    /// Ceiling of the adaptive budget in bytes. Default [`DEFAULT_MAX_BUDGET`]; range
    /// `[initial, MAX_INFLIGHT_BUDGET]`.
    pub fn max_budget(mut self, bytes: u64) -> Self {
        self.c.max_budget = bytes;
        self
    }
    /// Most servers with grants outstanding at once, over all reads. Servers whose grants
    /// all wait in their stores do not count, and where the port's servers hold their
    /// answers a new server passes the cap while the bytes sending now fit the budget and
    /// drain within [`crate::receiver::HELD_SENDER_SHARE`] of the hold (see *A slow store
    /// is not a stall* in [`crate::receiver`]). Default [`DEFAULT_PORT_MAX_SENDERS`]; range
    /// `[1, MAX_SENDERS]`.
    pub fn max_senders(mut self, k: u32) -> Self {
        self.c.max_senders = k;
        self
    }
    /// Tolerated queueing delay above the base RTT. Default [`DEFAULT_TARGET_DELAY`]; range
    /// `[1 us, 1 s]`.
    pub fn target_delay(mut self, d: Duration) -> Self {
        self.c.target_delay = d;
        self
    }
    /// Age per halving of a read's bytes left in the port's order, counted in the bytes the
    /// port could pass since the read's start (time times the port's rate, see
    /// [`Receiver::aging_clock`]): a read goes before the reads of its priority that start
    /// more than this times `log2(its bytes left / theirs)` later (see "Aging halves a
    /// read's size per aging bound" in the module docs). In time, the bound over the port's
    /// rate: 100 ms at 1 Gbit/s for the default, 1 s at 100 Mbit/s, 10 ms at 10 Gbit/s.
    /// Default [`DEFAULT_AGING_BYTES`]; range `[0, MAX_AGING_BYTES]` (0: arrival order, no
    /// SRPT, no priority).
    pub fn aging_bytes(mut self, bytes: u64) -> Self {
        self.c.aging_bytes = bytes;
        self
    }
    /// Share of granted bytes the port may hedge. Default [`DEFAULT_PORT_HEDGE_FRACTION`];
    /// range `[0, 1]`.
    pub fn hedge_fraction(mut self, f: f64) -> Self {
        self.c.hedge_fraction = f;
        self
    }
    /// Size of the hedge bucket in bytes (the most hedged in one burst; it starts full).
    /// Default [`DEFAULT_HEDGE_BURST`]; range `[0, MAX_INFLIGHT_BUDGET]`.
    pub fn hedge_burst(mut self, bytes: u64) -> Self {
        self.c.hedge_burst = bytes;
        self
    }
    /// Whether the budget adapts (the closed loop) or stays at the initial budget. Default on.
    pub fn adaptive(mut self, on: bool) -> Self {
        self.c.adaptive = on;
        self
    }
    /// Whether every grant carries a pacing rate for its server: [`PACING_GAIN`] times the
    /// port's rate times the grant's share of the bytes outstanding once it is issued, so
    /// the responses in flight together arrive at about the port's rate instead of at each
    /// sender's line rate (see the module docs). Default [`DEFAULT_PACING`]. Either way,
    /// answers held by slow stores are paced on a lossy port (module docs, *Held answers
    /// are paced on a lossy port*).
    pub fn pacing(mut self, on: bool) -> Self {
        self.c.pacing = on;
        self
    }
    /// The port's rate in bits per second, if known: stalls are judged against it until a
    /// rate is measured. Default `None`; range `> 0`.
    pub fn port_rate_bps(mut self, bps: Option<u64>) -> Self {
        self.c.port_rate_bps = bps;
        self
    }
    /// Checks every setting.
    pub fn build(self) -> Result<ReceiverConfig, ReceiverConfigError> {
        let mut c = self.c;
        if !self.initial_set {
            c.initial_budget = c.initial_budget.max(c.min_budget);
        }
        if !(1 <= c.min_budget
            && c.min_budget <= c.initial_budget
            && c.initial_budget <= c.max_budget
            && c.max_budget <= MAX_INFLIGHT_BUDGET)
        {
            return Err(ReceiverConfigError::Budget {
                min: c.min_budget,
                initial: c.initial_budget,
                max: c.max_budget,
                limit: MAX_INFLIGHT_BUDGET,
            });
        }
        let out = |what, value: String, range| Err(ReceiverConfigError::OutOfRange { what, value, range });
        if !(1..=MAX_SENDERS).contains(&c.max_senders) {
            return out("max_senders", c.max_senders.to_string(), "1 to 65536");
        }
        if c.target_delay < Duration::from_micros(1) || c.target_delay > Duration::from_secs(1) {
            return out("target_delay", format!("{:?}", c.target_delay), "1 us to 1 s");
        }
        if c.aging_bytes > MAX_AGING_BYTES {
            return out("aging_bytes", c.aging_bytes.to_string(), "0 to 2^40");
        }
        if !(0.0..=1.0).contains(&c.hedge_fraction) {
            return out("hedge_fraction", c.hedge_fraction.to_string(), "0 to 1");
        }
        if c.hedge_burst > MAX_INFLIGHT_BUDGET {
            return out("hedge_burst", c.hedge_burst.to_string(), "0 to MAX_INFLIGHT_BUDGET");
        }
        if c.port_rate_bps == Some(0) {
            return out("port_rate_bps", "0".into(), "above 0");
        }
        Ok(c)
    }
}
