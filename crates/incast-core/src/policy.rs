//! What a fan-in read may do: how many senders at once, how many bytes in flight, in what
//! grant sizes, with what stagger, receive-window cap, hedging and adaptation.
//!
//! Why these knobs (see ../shared/seeds): incast happens when the bytes that N senders put on
//! the wire at once exceed what the bottleneck port can queue plus what the wire holds, and
//! some flow loses its tail and waits for a 200 ms kernel timeout.
//!
//! - **K, max concurrent senders**, and **B, in-flight budget**: the receiver never has more
//!   than B bytes requested and not yet received, from at most K servers. Admission control
//!   alone is not enough on Linux (the testbed showed 200 ms stalls with K = 2: a connection
//!   keeps its large congestion window between requests, so even two responses arrive as one
//!   burst), so B is enforced in bytes, not in requests.
//! - **Grant size**: `Whole` asks each server for its whole fragment (split at B if larger);
//!   `Chunk` asks for C bytes at a time, receiver-driven like Homa/pHost grants but at the
//!   RPC layer. Smaller chunks bound every burst; each costs one request.
//! - **Pipeline depth D**: grants outstanding per fragment. Deeper pipelines keep one
//!   sender's connection busy without a round trip between chunks; the budget B still bounds
//!   the sum. Since started fragments are served before new ones, a deep pipeline also means
//!   fewer concurrent senders, which is what incast wants.
//! - **Stagger**: spaces the first request to each new sender so their slow starts do not
//!   coincide (chen-2012 §2.3: the onset is where slow-start windows overflow the buffer).
//! - **Window cap**: a receive-window cap per socket (TCP_WINDOW_CLAMP / SO_RCVBUF) bounds what
//!   one sender can burst regardless of its congestion window. Derived, it is B: the budget
//!   already bounds the bytes requested, so the cap only stops a sender from bursting more
//!   than the receiver asked for; smaller caps make grants wait for (delayed) ACKs.
//! - **Hedging**: after the application-level RTO (microseconds, see [`crate::rtt`]) a stalled
//!   request is re-issued on another connection or a replica. A hedge budget caps the extra
//!   bytes per read, so a partial outage cannot turn every read into a hedge storm.
//! - **Adaptation**: `Aimd` halves the effective budget on a stall and grows it back by one
//!   grant per budget's worth of completed grants; `Delay` also shrinks it when first-byte
//!   latency exceeds the smallest seen by more than a target (queueing delay).
//!
//! A [`Policy`] is built with [`Policy::builder`], which checks every value and names the field
//! and its allowed range when one is wrong. It round-trips through serde; deserializing
//! validates too, and missing fields take the defaults.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::rtt::{RtoBounds, RtoBoundsError};
use crate::stripe::MAX_BLOCK_LEN;

/// Default K, concurrent senders (8).
pub const DEFAULT_MAX_SENDERS: u32 = 8;
/// Largest allowed K (65,536, the most fragments a stripe may have).
pub const MAX_SENDERS: u32 = 1 << 16;
/// Default B, bytes requested and not yet received (64 KiB): about a shallow port buffer plus
/// the bytes a 10 Gbit/s, 20 us path holds. `incast_core::model::recommend` derives it from
/// the real link.
pub const DEFAULT_INFLIGHT_BUDGET: u64 = 64 * 1024;
/// Largest allowed B ([`MAX_BLOCK_LEN`], i.e. unlimited).
pub const MAX_INFLIGHT_BUDGET: u64 = MAX_BLOCK_LEN;
/// Default chunk size C (16 KiB).
pub const DEFAULT_CHUNK: u64 = 16 * 1024;
/// Default pipeline depth D, grants outstanding per fragment (4). With one grant at a time a
/// lone sender (N = 1, or the last fragment of every read) idles the link for a round trip
/// between chunks; the simulated link of `incast_core::sim` measured 72% of line rate at
/// N = 1 with 16 KiB chunks and a 50 us latency.
pub const DEFAULT_PIPELINE_DEPTH: u32 = 4;
/// Largest allowed pipeline depth (1024).
pub const MAX_PIPELINE_DEPTH: u32 = 1024;
/// Longest allowed stagger gap (1 s).
pub const MAX_STAGGER: Duration = Duration::from_secs(1);
/// Smallest receive-window cap (2 KiB); Linux itself will not go below about two segments.
pub const MIN_WINDOW_CAP: u32 = 2 * 1024;
/// Largest receive-window cap (1 GiB).
pub const MAX_WINDOW_CAP: u32 = 1 << 30;
/// Default hedge budget as a fraction of the block (5%).
pub const DEFAULT_HEDGE_FRACTION: f64 = 0.05;
/// Default floor of the hedge budget (64 KiB), so that small blocks, where incast bites
/// hardest, can still hedge a few grants.
pub const DEFAULT_HEDGE_MIN_BYTES: u64 = 64 * 1024;
/// Default queueing-delay target of [`Adaptation::Delay`] (500 us).
pub const DEFAULT_DELAY_TARGET: Duration = Duration::from_micros(500);

/// How many bytes one grant asks a server for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum GrantSize {
    /// The whole fragment in one request, split at B when the fragment is larger than B.
    Whole,
    /// Receiver-driven chunks of `bytes`; range `[1, B]`.
    Chunk {
        /// Chunk size in bytes.
        bytes: u64,
    },
}

/// Spacing between the first requests to new senders.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Stagger {
    /// Start senders as soon as K and B allow.
    None,
    /// At least `gap` between two sender starts; range `[0, 1 s]`.
    Fixed {
        /// The gap, serialized in microseconds.
        #[serde(with = "duration_us")]
        gap: Duration,
    },
    /// A gap drawn uniformly from `[0, max_gap)` by the scheduler's seeded generator;
    /// range `[0, 1 s]`.
    Random {
        /// Upper bound of the gap, serialized in microseconds.
        #[serde(with = "duration_us")]
        max_gap: Duration,
    },
}

/// Receive-window cap that the transport applies to each connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum WindowCap {
    /// Leave the kernel's autotuning alone.
    Off,
    /// A fixed cap in bytes; range `[MIN_WINDOW_CAP, MAX_WINDOW_CAP]`.
    Fixed {
        /// The cap in bytes.
        bytes: u32,
    },
    /// B, clamped to `[MIN_WINDOW_CAP, MAX_WINDOW_CAP]`: one sender may use the whole budget
    /// (pipelined grants, started fragments first) and no more. A cap below the grant size
    /// would make every grant wait for ACKs, and for delayed ACKs: on loopback a B / K cap of
    /// 8 KiB under 16 KiB grants cut throughput to a third. A client whose reads share one
    /// port (incast-rpc's `Sharing::Port`) applies no static cap for `Derived`: the port's
    /// budget adapts while the connection lives, and its grants bound each connection.
    Derived,
}

/// Whether and how much to hedge stalled requests.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Hedging {
    /// Never hedge; a stalled request waits for the kernel.
    Off,
    /// Re-issue a request that made no progress for one (randomized, backed-off) RTO on the
    /// spare connection or a replica. The extra bytes of one read are capped at
    /// `max(budget_fraction * block, min_budget_bytes)`.
    AfterRto {
        /// Fraction of the block that hedges may re-request; range `[0, 1]`.
        budget_fraction: f64,
        /// Floor of the hedge budget in bytes; range `[0, MAX_BLOCK_LEN]`.
        min_budget_bytes: u64,
    },
}

/// How the effective in-flight budget reacts to what the read observes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Adaptation {
    /// The budget stays at B.
    Static,
    /// Halve the effective budget on a stall (at most once per smoothed RTT), grow it by
    /// `C * C / budget` per completed grant, never below one chunk nor above B.
    Aimd,
    /// As `Aimd`, and also shrink by 1/8 when a first-byte latency exceeds the smallest seen
    /// by more than `target` (queueing builds before loss does).
    Delay {
        /// Tolerated queueing delay, serialized in microseconds; range `[1 us, 1 s]`.
        #[serde(with = "duration_us")]
        target: Duration,
    },
}

/// Why a policy was rejected.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A value lies outside its allowed range.
    #[error("policy field `{field}` = {value} is out of range: allowed {allowed}")]
    OutOfRange {
        /// The field, as named by its builder setter.
        field: &'static str,
        /// The rejected value.
        value: String,
        /// The allowed range.
        allowed: &'static str,
    },
    /// A chunk larger than the in-flight budget could never be granted.
    #[error("policy field `grant_size` chunk of {chunk} bytes exceeds `inflight_budget` of {budget} bytes")]
    ChunkExceedsBudget {
        /// The chunk size.
        chunk: u64,
        /// The budget B.
        budget: u64,
    },
    /// Adaptation scales the budget between one grant and B; with whole-fragment grants
    /// there is nothing in between.
    #[error("policy field `adaptation` needs `grant_size` chunked: with whole fragments there is nothing to adapt")]
    AdaptationNeedsChunks,
    /// The RTO bounds are invalid.
    #[error("policy field `rto`: {0}")]
    Rto(#[from] RtoBoundsError),
}

/// A validated read policy. See the [module docs](self) for what each knob trades.
///
/// ```
/// use std::time::Duration;
/// use incast_core::{GrantSize, Policy, PolicyError};
/// let p = Policy::builder()
///     .max_senders(16)
///     .inflight_budget(128 * 1024)
///     .grant_size(GrantSize::Chunk { bytes: 32 * 1024 })
///     .build()?;
/// assert_eq!(p.max_senders(), 16);
/// assert_eq!(p.window_cap_bytes(), Some(128 * 1024)); // derived: B
///
/// let err = Policy::builder().max_senders(0).build().unwrap_err();
/// assert!(matches!(err, PolicyError::OutOfRange { field: "max_senders", .. }));
/// # Ok::<(), PolicyError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "PolicyBuilder", into = "PolicyBuilder")]
pub struct Policy {
    max_senders: u32,
    inflight_budget: u64,
    grant_size: GrantSize,
    pipeline_depth: u32,
    stagger: Stagger,
    window_cap: WindowCap,
    hedging: Hedging,
    adaptation: Adaptation,
    rto: RtoBounds,
}

impl Default for Policy {
    /// The defaults: K = 8, B = 64 KiB, 16 KiB chunks, 4 grants per fragment, no stagger, derived window cap,
    /// hedging after the RTO with a 5% (at least 64 KiB) budget, static budget.
    fn default() -> Self {
        PolicyBuilder::default().build().expect("defaults are valid")
    }
}

impl Policy {
    /// A builder starting from the defaults.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::default()
    }

    /// What an application does without this library: every fragment requested at once,
    /// whole, no cap, no hedging. The baseline that collapses under incast.
    pub fn naive() -> Self {
        Self::builder()
            .max_senders(MAX_SENDERS)
            .inflight_budget(MAX_INFLIGHT_BUDGET)
            .grant_size(GrantSize::Whole)
            .window_cap(WindowCap::Off)
            .hedging(Hedging::Off)
            .build()
            .expect("naive policy is valid")
    }

    /// K: most servers with requests outstanding at once.
    pub fn max_senders(&self) -> u32 {
        self.max_senders
    }
    /// B: most bytes requested and not yet received.
    pub fn inflight_budget(&self) -> u64 {
        self.inflight_budget
    }
    /// Grant size.
    pub fn grant_size(&self) -> GrantSize {
        self.grant_size
    }
    /// Largest grant this policy issues: C, or B for whole fragments.
    pub fn max_grant_bytes(&self) -> u64 {
        match self.grant_size {
            GrantSize::Whole => self.inflight_budget,
            GrantSize::Chunk { bytes } => bytes,
        }
    }
    /// D: most grants outstanding per fragment.
    pub fn pipeline_depth(&self) -> u32 {
        self.pipeline_depth
    }
    /// Stagger.
    pub fn stagger(&self) -> Stagger {
        self.stagger
    }
    /// Receive-window cap mode.
    pub fn window_cap(&self) -> WindowCap {
        self.window_cap
    }
    /// The cap in bytes a transport should apply per connection, `None` when off.
    pub fn window_cap_bytes(&self) -> Option<u32> {
        match self.window_cap {
            WindowCap::Off => None,
            WindowCap::Fixed { bytes } => Some(bytes),
            WindowCap::Derived => Some(
                self.inflight_budget
                    .clamp(u64::from(MIN_WINDOW_CAP), u64::from(MAX_WINDOW_CAP)) as u32,
            ),
        }
    }
    /// Hedging.
    pub fn hedging(&self) -> Hedging {
        self.hedging
    }
    /// Hedge budget in bytes for a block of `block_len` bytes (0 when hedging is off).
    pub fn hedge_budget(&self, block_len: u64) -> u64 {
        match self.hedging {
            Hedging::Off => 0,
            Hedging::AfterRto {
                budget_fraction,
                min_budget_bytes,
            } => ((block_len as f64 * budget_fraction) as u64).max(min_budget_bytes),
        }
    }
    /// Adaptation.
    pub fn adaptation(&self) -> Adaptation {
        self.adaptation
    }
    /// Bounds of the application-level RTO.
    pub fn rto(&self) -> RtoBounds {
        self.rto
    }
}

/// Builds a [`Policy`]; every setter documents its unit, default and range, and
/// [`PolicyBuilder::build`] checks them all.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyBuilder {
    max_senders: u32,
    inflight_budget: u64,
    grant_size: GrantSize,
    pipeline_depth: u32,
    stagger: Stagger,
    window_cap: WindowCap,
    hedging: Hedging,
    adaptation: Adaptation,
    rto: RtoBounds,
}

impl Default for PolicyBuilder {
    fn default() -> Self {
        Self {
            max_senders: DEFAULT_MAX_SENDERS,
            inflight_budget: DEFAULT_INFLIGHT_BUDGET,
            grant_size: GrantSize::Chunk { bytes: DEFAULT_CHUNK },
            pipeline_depth: DEFAULT_PIPELINE_DEPTH,
            stagger: Stagger::None,
            window_cap: WindowCap::Derived,
            hedging: Hedging::AfterRto {
                budget_fraction: DEFAULT_HEDGE_FRACTION,
                min_budget_bytes: DEFAULT_HEDGE_MIN_BYTES,
            },
            adaptation: Adaptation::Static,
            rto: RtoBounds::default(),
        }
    }
}

impl From<Policy> for PolicyBuilder {
    fn from(p: Policy) -> Self {
        Self {
            max_senders: p.max_senders,
            inflight_budget: p.inflight_budget,
            grant_size: p.grant_size,
            pipeline_depth: p.pipeline_depth,
            stagger: p.stagger,
            window_cap: p.window_cap,
            hedging: p.hedging,
            adaptation: p.adaptation,
            rto: p.rto,
        }
    }
}

impl TryFrom<PolicyBuilder> for Policy {
    type Error = PolicyError;
    fn try_from(b: PolicyBuilder) -> Result<Self, PolicyError> {
        b.build()
    }
}

fn out_of_range(field: &'static str, value: impl ToString, allowed: &'static str) -> PolicyError {
    PolicyError::OutOfRange {
        field,
        value: value.to_string(),
        allowed,
    }
}

impl PolicyBuilder {
    /// K, most servers with requests outstanding at once. Default [`DEFAULT_MAX_SENDERS`];
    /// range `[1, MAX_SENDERS]`.
    pub fn max_senders(mut self, k: u32) -> Self {
        self.max_senders = k;
        self
    }
    /// B, most bytes requested and not yet received, in bytes. Default
    /// [`DEFAULT_INFLIGHT_BUDGET`]; range `[1, MAX_INFLIGHT_BUDGET]`.
    pub fn inflight_budget(mut self, bytes: u64) -> Self {
        self.inflight_budget = bytes;
        self
    }
    /// Grant size. Default `Chunk { bytes: DEFAULT_CHUNK }`; a chunk must be in `[1, B]`.
    pub fn grant_size(mut self, g: GrantSize) -> Self {
        self.grant_size = g;
        self
    }
    /// D, most grants outstanding per fragment. Default [`DEFAULT_PIPELINE_DEPTH`]; range
    /// `[1, MAX_PIPELINE_DEPTH]`. Under a client-wide receiver a fragment whose server's
    /// grants all wait in its store may have
    /// [`crate::scheduler::STORE_DEPTH_FACTOR`] times D.
    pub fn pipeline_depth(mut self, d: u32) -> Self {
        self.pipeline_depth = d;
        self
    }
    /// Stagger between sender starts. Default `None`; gaps in `[0, MAX_STAGGER]`.
    pub fn stagger(mut self, s: Stagger) -> Self {
        self.stagger = s;
        self
    }
    /// Receive-window cap per connection. Default `Derived`; fixed caps in
    /// `[MIN_WINDOW_CAP, MAX_WINDOW_CAP]` bytes.
    pub fn window_cap(mut self, w: WindowCap) -> Self {
        self.window_cap = w;
        self
    }
    /// Hedging. Default `AfterRto { budget_fraction: DEFAULT_HEDGE_FRACTION,
    /// min_budget_bytes: DEFAULT_HEDGE_MIN_BYTES }`; fraction in `[0, 1]`, floor in
    /// `[0, MAX_BLOCK_LEN]` bytes.
    pub fn hedging(mut self, h: Hedging) -> Self {
        self.hedging = h;
        self
    }
    /// Adaptation. Default `Static`; `Aimd` and `Delay` need chunked grants; a delay target
    /// lies in `[1 us, 1 s]`.
    pub fn adaptation(mut self, a: Adaptation) -> Self {
        self.adaptation = a;
        self
    }
    /// Bounds of the application-level RTO (see [`RtoBounds::new`] for ranges). Default
    /// `RtoBounds::default()`: initial 5 ms, min 200 us, max 100 ms.
    pub fn rto(mut self, r: RtoBounds) -> Self {
        self.rto = r;
        self
    }

    /// Checks every field and returns the policy, or the first field that is wrong.
    pub fn build(self) -> Result<Policy, PolicyError> {
        if !(1..=MAX_SENDERS).contains(&self.max_senders) {
            return Err(out_of_range("max_senders", self.max_senders, "1..=65536"));
        }
        if !(1..=MAX_INFLIGHT_BUDGET).contains(&self.inflight_budget) {
            return Err(out_of_range("inflight_budget", self.inflight_budget, "1..=2^40 bytes"));
        }
        if let GrantSize::Chunk { bytes } = self.grant_size {
            if bytes == 0 {
                return Err(out_of_range("grant_size", bytes, "chunk of 1..=inflight_budget bytes"));
            }
            if bytes > self.inflight_budget {
                return Err(PolicyError::ChunkExceedsBudget {
                    chunk: bytes,
                    budget: self.inflight_budget,
                });
            }
        }
        if !(1..=MAX_PIPELINE_DEPTH).contains(&self.pipeline_depth) {
            return Err(out_of_range("pipeline_depth", self.pipeline_depth, "1..=1024"));
        }
        match self.stagger {
            Stagger::Fixed { gap: g } | Stagger::Random { max_gap: g } if g > MAX_STAGGER => {
                return Err(out_of_range("stagger", format!("{g:?}"), "gap of 0..=1 s"));
            }
            _ => {}
        }
        if let WindowCap::Fixed { bytes } = self.window_cap {
            if !(MIN_WINDOW_CAP..=MAX_WINDOW_CAP).contains(&bytes) {
                return Err(out_of_range("window_cap", bytes, "2048..=2^30 bytes"));
            }
        }
        if let Hedging::AfterRto {
            budget_fraction,
            min_budget_bytes,
        } = self.hedging
        {
            if !(0.0..=1.0).contains(&budget_fraction) {
                return Err(out_of_range("hedging.budget_fraction", budget_fraction, "0.0..=1.0"));
            }
            if min_budget_bytes > MAX_BLOCK_LEN {
                return Err(out_of_range(
                    "hedging.min_budget_bytes",
                    min_budget_bytes,
                    "0..=2^40 bytes",
                ));
            }
        }
        match self.adaptation {
            Adaptation::Static => {}
            _ if self.grant_size == GrantSize::Whole => return Err(PolicyError::AdaptationNeedsChunks),
            Adaptation::Delay { target } if target < Duration::from_micros(1) || target > Duration::from_secs(1) => {
                return Err(out_of_range("adaptation.target", format!("{target:?}"), "1 us..=1 s"));
            }
            _ => {}
        }
        self.rto.validate()?;
        Ok(Policy {
            max_senders: self.max_senders,
            inflight_budget: self.inflight_budget,
            grant_size: self.grant_size,
            pipeline_depth: self.pipeline_depth,
            stagger: self.stagger,
            window_cap: self.window_cap,
            hedging: self.hedging,
            adaptation: self.adaptation,
            rto: self.rto,
        })
    }
}

/// Serde helper: a `Duration` as whole microseconds (`u64`). Sub-microsecond parts are
/// dropped; no policy value needs them.
pub(crate) mod duration_us {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_micros(u64::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(e: PolicyError) -> &'static str {
        match e {
            PolicyError::OutOfRange { field, .. } => field,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn defaults_are_documented_values() {
        let p = Policy::default();
        assert_eq!(p.max_senders(), DEFAULT_MAX_SENDERS);
        assert_eq!(p.inflight_budget(), DEFAULT_INFLIGHT_BUDGET);
        assert_eq!(p.grant_size(), GrantSize::Chunk { bytes: DEFAULT_CHUNK });
        assert_eq!(p.pipeline_depth(), DEFAULT_PIPELINE_DEPTH);
        assert_eq!(p.window_cap_bytes(), Some(DEFAULT_INFLIGHT_BUDGET as u32));
        assert_eq!(p.hedge_budget(1 << 20), DEFAULT_HEDGE_MIN_BYTES);
        assert_eq!(p.hedge_budget(100 << 20), 5 << 20);
        let n = Policy::naive();
        assert_eq!(
            (n.max_grant_bytes(), n.window_cap_bytes(), n.hedge_budget(1 << 30)),
            (MAX_BLOCK_LEN, None, 0)
        );
    }

    #[test]
    fn every_bad_field_is_named() {
        let b = Policy::builder;
        assert_eq!(field_of(b().max_senders(0).build().unwrap_err()), "max_senders");
        assert_eq!(
            field_of(b().max_senders(MAX_SENDERS + 1).build().unwrap_err()),
            "max_senders"
        );
        assert_eq!(field_of(b().inflight_budget(0).build().unwrap_err()), "inflight_budget");
        assert_eq!(field_of(b().pipeline_depth(0).build().unwrap_err()), "pipeline_depth");
        assert_eq!(
            field_of(b().pipeline_depth(1025).build().unwrap_err()),
            "pipeline_depth"
        );
        assert_eq!(
            field_of(b().grant_size(GrantSize::Chunk { bytes: 0 }).build().unwrap_err()),
            "grant_size"
        );
        assert_eq!(
            b().inflight_budget(10)
                .grant_size(GrantSize::Chunk { bytes: 11 })
                .build()
                .unwrap_err(),
            PolicyError::ChunkExceedsBudget { chunk: 11, budget: 10 }
        );
        let long = Duration::from_secs(2);
        assert_eq!(
            field_of(b().stagger(Stagger::Fixed { gap: long }).build().unwrap_err()),
            "stagger"
        );
        assert_eq!(
            field_of(b().stagger(Stagger::Random { max_gap: long }).build().unwrap_err()),
            "stagger"
        );
        assert_eq!(
            field_of(b().window_cap(WindowCap::Fixed { bytes: 100 }).build().unwrap_err()),
            "window_cap"
        );
        let h = |f, m| Hedging::AfterRto {
            budget_fraction: f,
            min_budget_bytes: m,
        };
        assert_eq!(
            field_of(b().hedging(h(f64::NAN, 0)).build().unwrap_err()),
            "hedging.budget_fraction"
        );
        assert_eq!(
            field_of(b().hedging(h(1.5, 0)).build().unwrap_err()),
            "hedging.budget_fraction"
        );
        assert_eq!(
            field_of(b().hedging(h(0.1, u64::MAX)).build().unwrap_err()),
            "hedging.min_budget_bytes"
        );
        assert_eq!(
            b().grant_size(GrantSize::Whole)
                .adaptation(Adaptation::Aimd)
                .build()
                .unwrap_err(),
            PolicyError::AdaptationNeedsChunks
        );
        let zero = Adaptation::Delay { target: Duration::ZERO };
        assert_eq!(field_of(b().adaptation(zero).build().unwrap_err()), "adaptation.target");
        let msg = b().max_senders(0).build().unwrap_err().to_string();
        assert_eq!(msg, "policy field `max_senders` = 0 is out of range: allowed 1..=65536");
    }

    #[test]
    fn serde_round_trip_and_validation() {
        let p = Policy::builder()
            .max_senders(3)
            .stagger(Stagger::Random {
                max_gap: Duration::from_micros(250),
            })
            .adaptation(Adaptation::Delay {
                target: Duration::from_micros(300),
            })
            .window_cap(WindowCap::Fixed { bytes: 4096 })
            .build()
            .unwrap();
        let json = serde_json::to_string(&p).unwrap();
        assert!(json.contains(r#""max_gap":250"#), "{json}");
        let back: Policy = serde_json::from_str(&json).unwrap();
        assert_eq!(back, p);
        // Missing fields take defaults; bad ones are refused with the field name.
        let partial: Policy = serde_json::from_str(r#"{"max_senders": 5}"#).unwrap();
        assert_eq!(partial.max_senders(), 5);
        assert_eq!(partial.inflight_budget(), DEFAULT_INFLIGHT_BUDGET);
        let err = serde_json::from_str::<Policy>(r#"{"max_senders": 0}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_senders"), "{err}");
        assert!(serde_json::from_str::<Policy>(r#"{"typo": 1}"#).is_err());
    }
}
