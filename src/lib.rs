//! # incast: fan-in reads that stay fast
//!
//! When N servers answer one client at once, the burst overflows the shallow buffer of the
//! switch port in front of the client, a TCP flow loses its tail and waits for a 200 ms
//! retransmission timeout, and goodput collapses 10-100x ("TCP incast"). This library fixes
//! it from the application: it decides who sends what and when, caps windows, and recovers
//! stalls in microseconds.
//!
//! This facade re-exports the public API:
//!
//! - everything of [`incast_core`] at the top level (stripe, policy, scheduler, RTT
//!   estimator) and its [`model`];
//! - [`rpc`], the TCP transport (Linux): the fragment server ([`rpc::serve`]) and the pooled
//!   client with [`rpc::Client::fan_in_read`]. QUIC is not implemented yet.
//!
//! A transport of your own can also drive the sans-IO [`Scheduler`] directly.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use incast_core::*;
pub use incast_rpc as rpc;
