//! # incast-rpc (not implemented yet)
//!
//! This crate will hold the transports that drive [`incast_core::Scheduler`] over real
//! sockets: the wire format, the TCP server and pooled client with `fan_in_read`, socket
//! tuning with a report of what the kernel kept, TCP_INFO counters, a high-resolution timer,
//! and QUIC behind the `quic` feature. See the project's DESIGN.md.
//!
//! **Nothing here works yet.** The crate exists so that the workspace has its final shape;
//! it only re-exports the core so that depending on it is harmless.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use incast_core as core;
