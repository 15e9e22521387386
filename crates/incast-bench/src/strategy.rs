//! The strategies `incast-bench` compares: each a named policy plus client socket settings.
//!
//! They isolate one idea of the literature each, so a sweep shows which one removes which
//! part of the collapse:
//!
//! | name | policy | sockets |
//! |---|---|---|
//! | `naive` | every fragment requested at once, whole | kernel defaults |
//! | `capped` | as naive | receive window capped at `buffer / N` (vasudevan-sigcomm09 §6, ICTCP) |
//! | `scheduled` | admission only: K senders, B bytes in flight, whole grants | kernel defaults |
//! | `chunked` | receiver-driven grants of C bytes under K and B | kernel defaults |
//! | `hedged` | as naive, plus application-level microsecond RTO hedging | kernel defaults |
//! | `default` | `Policy::default()` | `ClientConfig::default()` |
//! | `rto-route` | as naive; the servers' route gets `rto_min 1ms` (testbed only) | kernel defaults |

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use incast_core::policy::{GrantSize, Hedging, WindowCap, DEFAULT_HEDGE_FRACTION, DEFAULT_HEDGE_MIN_BYTES};
use incast_core::Policy;
use incast_rpc::{ClientConfig, SocketTuning};

/// The per-route `rto_min` of the `rto-route` reference (1 ms, as in ../shared/TESTBED.md).
pub const ROUTE_RTO_MIN: Duration = Duration::from_millis(1);

/// A named strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Everything at once, kernel defaults.
    Naive,
    /// Receive-window cap only.
    Capped,
    /// Admission control only.
    Scheduled,
    /// Receiver-driven chunks.
    Chunked,
    /// Application-level RTO hedging only.
    Hedged,
    /// The library's defaults.
    Default,
    /// Kernel per-route rto_min, for reference.
    RtoRoute,
}

impl Strategy {
    /// Every strategy, in table order.
    pub const ALL: [Strategy; 7] = [
        Strategy::Naive,
        Strategy::Capped,
        Strategy::Scheduled,
        Strategy::Chunked,
        Strategy::Hedged,
        Strategy::Default,
        Strategy::RtoRoute,
    ];

    /// Its name on the command line and in outputs.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
            Strategy::Capped => "capped",
            Strategy::Scheduled => "scheduled",
            Strategy::Chunked => "chunked",
            Strategy::Hedged => "hedged",
            Strategy::Default => "default",
            Strategy::RtoRoute => "rto-route",
        }
    }

    /// Whether it needs the testbed (it changes the servers' routes).
    pub fn testbed_only(self) -> bool {
        self == Strategy::RtoRoute
    }

    /// The policy and client configuration for `senders` servers behind a port that queues
    /// `buffer` bytes (used by `capped` only). Every strategy sets the congestion control
    /// `cc` on its sockets and nothing else beyond what the table says.
    pub fn plan(self, senders: usize, buffer: u64, read_timeout: Duration, cc: &str) -> (Policy, ClientConfig) {
        let plain = || {
            ClientConfig::builder()
                .tuning(SocketTuning {
                    congestion: Some(cc.to_owned()),
                    ..SocketTuning::default()
                })
                .rearm_quickack(false)
                .read_timeout(read_timeout)
                .build()
                .expect("valid client config")
        };
        let policy = |b: incast_core::PolicyBuilder| b.build().expect("strategy policies are valid");
        let naive = || {
            Policy::builder()
                .max_senders(incast_core::policy::MAX_SENDERS)
                .inflight_budget(incast_core::policy::MAX_INFLIGHT_BUDGET)
                .grant_size(GrantSize::Whole)
                .window_cap(WindowCap::Off)
                .hedging(Hedging::Off)
        };
        let base = || Policy::builder().window_cap(WindowCap::Off).hedging(Hedging::Off);
        match self {
            Strategy::Naive | Strategy::RtoRoute => (policy(naive()), plain()),
            Strategy::Capped => {
                let cap = (buffer / senders.max(1) as u64).clamp(
                    u64::from(incast_core::policy::MIN_WINDOW_CAP),
                    u64::from(incast_core::policy::MAX_WINDOW_CAP),
                ) as u32;
                (policy(naive().window_cap(WindowCap::Fixed { bytes: cap })), plain())
            }
            Strategy::Scheduled => (policy(base().grant_size(GrantSize::Whole).pipeline_depth(1)), plain()),
            Strategy::Chunked => (policy(base()), plain()),
            Strategy::Hedged => (
                policy(naive().hedging(Hedging::AfterRto {
                    budget_fraction: DEFAULT_HEDGE_FRACTION,
                    min_budget_bytes: DEFAULT_HEDGE_MIN_BYTES,
                })),
                plain(),
            ),
            Strategy::Default => (
                Policy::default(),
                ClientConfig::builder()
                    .tuning(SocketTuning {
                        congestion: Some(cc.to_owned()),
                        ..SocketTuning::client()
                    })
                    .read_timeout(read_timeout)
                    .build()
                    .expect("valid client config"),
            ),
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Strategy::ALL.into_iter().find(|st| st.name() == s).ok_or_else(|| {
            let names: Vec<_> = Strategy::ALL.iter().map(|s| s.name()).collect();
            format!("unknown strategy `{s}`: one of {}", names.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_plans_differ() {
        for s in Strategy::ALL {
            assert_eq!(s.name().parse::<Strategy>(), Ok(s));
        }
        assert!("quic".parse::<Strategy>().unwrap_err().contains("naive"));
        let t = Duration::from_secs(1);
        let (naive, _) = Strategy::Naive.plan(8, 32 << 10, t, "cubic");
        let (capped, _) = Strategy::Capped.plan(8, 32 << 10, t, "cubic");
        assert_eq!(naive.window_cap_bytes(), None);
        assert_eq!(capped.window_cap_bytes(), Some(4096));
        let (sched, _) = Strategy::Scheduled.plan(8, 32 << 10, t, "cubic");
        assert!(sched.inflight_budget() < naive.inflight_budget());
        assert_eq!(sched.grant_size(), GrantSize::Whole);
        let (hedged, _) = Strategy::Hedged.plan(8, 32 << 10, t, "cubic");
        assert_ne!(hedged.hedging(), Hedging::Off);
        assert_eq!(Strategy::Default.plan(8, 32 << 10, t, "cubic").0, Policy::default());
    }
}
