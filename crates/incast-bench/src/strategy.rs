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
//! | `default` | `Policy::default()` | `ClientConfig::default()`: concurrent reads share one client-wide receiver |
//! | `hinted` | `Policy::default()` | as default, told the port's rate and buffer (`ClientConfigBuilder::port_hint`; the testbed's, or `--rate` and `--buffer` with `--servers`) |
//! | `own-rate` | `Policy::default()` | as default, without the interface's receive counter (`ClientConfigBuilder::port_counter(false)`): the port's rate from the reads' own bytes alone |
//! | `per-read` | `Policy::default()` | as default, but every read schedules itself alone (`Sharing::PerRead`, the behaviour before the client-wide receiver) |
//! | `paced` | `Policy::default()` | as default, and every grant carries a pacing rate the server applies (`ReceiverConfigBuilder::pacing`) |
//! | `rto-route` | as naive; the servers' route gets `rto_min 1ms` (testbed only) | kernel defaults |
//! | `quic` | `Policy::default()` | every request over QUIC (quinn): user-space loss recovery |
//! | `fallback` | `Policy::default()` | TCP, hedges (and the rest of a stalled server's requests) over QUIC |
//! | `tls` | `Policy::default()` | as default, over mutual TLS 1.3 (servers started here only: they serve TLS on a second set of ports) |
//! | `blocking` | none: the reference client of [`crate::reference`], one thread per fragment | kernel defaults |
//!
//! Every strategy but `default`, `hinted`, `own-rate`, `tls`, `quic` and `fallback` schedules each read alone
//! (`Sharing::PerRead`): the literature's mechanisms are per read, and `naive` must not be
//! limited by a port budget.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use incast_core::policy::{GrantSize, Hedging, WindowCap, DEFAULT_HEDGE_FRACTION, DEFAULT_HEDGE_MIN_BYTES};
use incast_core::receiver::ReceiverConfig;
use incast_core::Policy;
use incast_rpc::quic::QuicClientConfig;
use incast_rpc::tls::TlsClientConfig;
use incast_rpc::{ClientConfig, Sharing, SocketTuning, Transport};

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
    /// The library's defaults, told the port's rate and buffer.
    Hinted,
    /// The library's defaults without the interface's receive counter.
    OwnRate,
    /// The library's defaults, each read scheduled alone.
    PerRead,
    /// The library's defaults, with every fragment's length unknown to the client: each is a
    /// query (`Fragment::query`, maximum twice its size) whose server announces the length.
    Unsized,
    /// The library's defaults with receiver-paced responses.
    Paced,
    /// Kernel per-route rto_min, for reference.
    RtoRoute,
    /// The library's defaults over QUIC.
    Quic,
    /// The library's defaults over TCP, hedging over QUIC.
    Fallback,
    /// The library's defaults over mutual TLS (TCP).
    Tls,
    /// The reference blocking client (not the library): checks `naive`'s measurements.
    Blocking,
}

/// The transport settings a strategy's client may need beyond plaintext TCP: QUIC's trust
/// and tuning, TLS's trust and identity (see [`Strategy::plan`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Trust<'a> {
    /// For `quic` and `fallback`.
    pub quic: Option<&'a QuicClientConfig>,
    /// For `tls`.
    pub tls: Option<&'a TlsClientConfig>,
}

impl Strategy {
    /// Every strategy, in table order.
    pub const ALL: [Strategy; 16] = [
        Strategy::Naive,
        Strategy::Capped,
        Strategy::Scheduled,
        Strategy::Chunked,
        Strategy::Hedged,
        Strategy::Default,
        Strategy::Hinted,
        Strategy::OwnRate,
        Strategy::PerRead,
        Strategy::Unsized,
        Strategy::Paced,
        Strategy::RtoRoute,
        Strategy::Quic,
        Strategy::Fallback,
        Strategy::Tls,
        Strategy::Blocking,
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
            Strategy::Hinted => "hinted",
            Strategy::OwnRate => "own-rate",
            Strategy::PerRead => "per-read",
            Strategy::Unsized => "unsized",
            Strategy::Paced => "paced",
            Strategy::RtoRoute => "rto-route",
            Strategy::Quic => "quic",
            Strategy::Fallback => "fallback",
            Strategy::Tls => "tls",
            Strategy::Blocking => "blocking",
        }
    }

    /// Whether it sends anything over QUIC (and so needs QUIC servers and trust).
    pub fn uses_quic(self) -> bool {
        matches!(self, Strategy::Quic | Strategy::Fallback)
    }

    /// Whether it reads over TLS (and so needs servers that serve it, and a client identity).
    pub fn uses_tls(self) -> bool {
        self == Strategy::Tls
    }

    /// Whether its reads are queries of unknown length ([`crate::run::as_queries`]).
    pub fn unknown_lengths(self) -> bool {
        self == Strategy::Unsized
    }

    /// Whether it needs the testbed (it changes the servers' routes).
    pub fn testbed_only(self) -> bool {
        self == Strategy::RtoRoute
    }

    /// The policy and client configuration for `senders` servers behind a port that queues
    /// `buffer` bytes (used by `capped` and `hinted`) at `rate_bps` bits per second (used by
    /// `hinted`, which is an error without it). Every strategy sets the congestion control
    /// `cc` on its sockets and nothing else beyond what the table says. The QUIC strategies
    /// take their trust and tuning from `trust.quic`, `tls` its trust and identity from
    /// `trust.tls`; `None` for them is an error.
    pub fn plan(
        self,
        senders: usize,
        buffer: u64,
        rate_bps: Option<u64>,
        read_timeout: Duration,
        cc: &str,
        trust: Trust<'_>,
    ) -> Result<(Policy, ClientConfig), String> {
        let Trust { quic, tls } = trust;
        let plain = || {
            ClientConfig::builder()
                .tuning(SocketTuning {
                    congestion: Some(cc.to_owned()),
                    ..SocketTuning::default()
                })
                .rearm_quickack(false)
                .read_timeout(read_timeout)
                .sharing(Sharing::PerRead)
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
        let defaults = |transport, sharing| -> Result<_, String> {
            let receiver = ReceiverConfig::builder()
                .pacing(self == Strategy::Paced)
                .build()
                .map_err(|e| e.to_string())?;
            let mut b = ClientConfig::builder()
                .sharing(sharing)
                .receiver(receiver)
                .tuning(SocketTuning {
                    congestion: Some(cc.to_owned()),
                    ..SocketTuning::client()
                })
                .read_timeout(read_timeout)
                .transport(transport);
            if self == Strategy::Hinted {
                let rate = rate_bps.ok_or_else(|| {
                    format!("strategy `{self}` needs the port's rate: the testbed's, or --rate with --servers")
                })?;
                b = b.port_hint(rate, buffer);
            }
            if self == Strategy::OwnRate {
                b = b.port_counter(false);
            }
            if transport.uses_quic() {
                let q = quic.ok_or_else(|| format!("strategy `{self}` needs quic settings (trust and tuning)"))?;
                b = b.quic(q.clone());
            }
            if self.uses_tls() {
                let t = tls.ok_or_else(|| format!("strategy `{self}` needs tls settings (trust and identity)"))?;
                b = b.tls(t.clone());
            }
            b.build().map_err(|e| e.to_string())
        };
        Ok(match self {
            // `blocking` does not use the library; its plan is naive's, for the record.
            Strategy::Naive | Strategy::RtoRoute | Strategy::Blocking => (policy(naive()), plain()),
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
            Strategy::Default | Strategy::Hinted | Strategy::OwnRate | Strategy::Unsized | Strategy::Tls => {
                (Policy::default(), defaults(Transport::Tcp, Sharing::Port)?)
            }
            Strategy::PerRead => (Policy::default(), defaults(Transport::Tcp, Sharing::PerRead)?),
            Strategy::Paced => (Policy::default(), defaults(Transport::Tcp, Sharing::Port)?),
            Strategy::Quic => (Policy::default(), defaults(Transport::Quic, Sharing::Port)?),
            Strategy::Fallback => (
                Policy::default(),
                defaults(Transport::TcpWithQuicFallback, Sharing::Port)?,
            ),
        })
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
        assert!("tcp".parse::<Strategy>().unwrap_err().contains("naive"));
        let t = Duration::from_secs(1);
        let plan = |s: Strategy| s.plan(8, 32 << 10, None, t, "cubic", Trust::default());
        let (naive, _) = plan(Strategy::Naive).unwrap();
        let (capped, _) = plan(Strategy::Capped).unwrap();
        assert_eq!(naive.window_cap_bytes(), None);
        assert_eq!(capped.window_cap_bytes(), Some(4096));
        let (sched, _) = plan(Strategy::Scheduled).unwrap();
        assert!(sched.inflight_budget() < naive.inflight_budget());
        assert_eq!(sched.grant_size(), GrantSize::Whole);
        let (hedged, _) = plan(Strategy::Hedged).unwrap();
        assert_ne!(hedged.hedging(), Hedging::Off);
        let (default, config) = plan(Strategy::Default).unwrap();
        assert_eq!((default, config.transport()), (Policy::default(), Transport::Tcp));
        assert_eq!(config.sharing(), Sharing::Port);
        // `hinted` needs the port's rate, and starts from the model's budget for it.
        assert!(plan(Strategy::Hinted).unwrap_err().contains("port's rate"));
        let (hinted, config) = Strategy::Hinted
            .plan(8, 32 << 10, Some(1_000_000_000), t, "cubic", Trust::default())
            .unwrap();
        assert_eq!(hinted, Policy::default());
        assert_eq!(config.sharing(), Sharing::Port);
        assert_eq!(
            config.receiver(),
            &ReceiverConfig::for_port(1_000_000_000, 32 << 10).unwrap()
        );
        assert!(config.port_counter());
        // `own-rate` is `default` without the interface's receive counter.
        let (own, config) = plan(Strategy::OwnRate).unwrap();
        assert_eq!(
            (own, config.sharing(), config.port_counter()),
            (Policy::default(), Sharing::Port, false)
        );
        let (_, config) = plan(Strategy::PerRead).unwrap();
        assert_eq!(config.sharing(), Sharing::PerRead);
        let (_, config) = plan(Strategy::Naive).unwrap();
        assert_eq!(config.sharing(), Sharing::PerRead);
        assert!(plan(Strategy::Quic).unwrap_err().contains("quic settings"));
        assert!(plan(Strategy::Tls).unwrap_err().contains("tls settings"));
        let (_, config) = plan(Strategy::Default).unwrap();
        assert!(config.tls().is_none());
        let cert = incast_rpc::quic::SelfSigned::generate(["localhost"]).unwrap();
        let q = QuicClientConfig::builder(cert.trust().unwrap()).build().unwrap();
        let tls = incast_rpc::tls::TlsClientConfig::builder(cert.trust().unwrap())
            .build()
            .unwrap();
        let secure = |s: Strategy, trust| s.plan(8, 32 << 10, None, t, "cubic", trust).unwrap().1;
        let config = secure(
            Strategy::Tls,
            Trust {
                quic: None,
                tls: Some(&tls),
            },
        );
        assert!(config.tls().is_some());
        assert_eq!(config.sharing(), Sharing::Port);
        let quic = Trust {
            quic: Some(&q),
            tls: None,
        };
        assert_eq!(secure(Strategy::Quic, quic).transport(), Transport::Quic);
        let config = secure(Strategy::Fallback, quic);
        assert_eq!(config.transport(), Transport::TcpWithQuicFallback);
    }
}
