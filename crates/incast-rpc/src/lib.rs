//! # incast-rpc: the TCP transport of incast (in progress)
//!
//! Drives [`incast_core::Scheduler`] over real sockets. Done so far:
//!
//! - [`wire`]: the versioned binary frame format, with every length bounded before anything
//!   is allocated.
//!
//! Not implemented yet: the fragment server, the pooled client with `fan_in_read`, socket
//! tuning, TCP_INFO, the high-resolution timer, and QUIC. See the project's DESIGN.md.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use incast_core as core;

pub mod wire;
