//! # incast-rpc: the transports of incast (TCP, and QUIC behind the `quic` feature)
//!
//! Drives [`incast_core::Scheduler`] over real sockets. Linux only (it uses TCP_INFO,
//! TCP_WINDOW_CLAMP, timerfd and the per-socket RTO options). Done so far:
//!
//! - [`wire`]: the versioned binary frame format, with every length bounded before anything
//!   is allocated;
//! - [`SocketTuning`]: socket options with a report of what the kernel kept or refused;
//! - [`TcpInfo`]: TCP_INFO with the kernel's RTO counters;
//! - [`HrTimer`]: a timerfd-based timer for sub-millisecond deadlines;
//! - [`store`] and [`server`]: the [`FragmentStore`] trait, in-memory and file stores, and the
//!   fragment server ([`serve`]);
//! - [`client`]: the pooled [`Client`] and its [`Client::fan_in_read`];
//! - `quic` (cargo feature `quic`): the same requests over QUIC streams (quinn), as
//!   [`Transport::Quic`] or as the path hedges take with `Transport::TcpWithQuicFallback`,
//!   with TLS from a generated self-signed certificate (tests, demos) or PEM files;
//! - `tls` (cargo feature `tls`, brought by `quic`): TLS 1.3 over TCP, and mutual TLS on both
//!   transports. Plaintext TCP stays the default, for trusted networks.
//!
//! See the project's DESIGN.md.
#![deny(unsafe_code)]
#![warn(missing_docs)]

#[cfg(not(target_os = "linux"))]
compile_error!("incast-rpc needs Linux (TCP_INFO, TCP_WINDOW_CLAMP, timerfd)");

pub use incast_core as core;

mod answers;
pub mod client;
#[cfg(feature = "erasure")]
pub mod erasure;
mod port;
#[cfg(feature = "quic")]
pub mod quic;
mod rx_counter;
pub mod server;
pub mod store;
mod sys;
pub mod tcpinfo;
pub mod timer;
#[cfg(feature = "tls")]
pub mod tls;
mod trace;
pub mod tune;
pub mod wire;

pub use client::{
    Client, ClientConfig, ClientConfigBuilder, ClientConfigError, ClientCounters, CompletedFragment, FanInError,
    FragmentReport, FragmentStream, LateCounters, ReadOutput, ReadReport, Transport,
};
pub use port::Sharing;
pub use server::{serve, ServerConfig, ServerConfigBuilder, ServerConfigError, ServerHandle, ServerStats};
pub use store::{FileStore, FragmentStore, MemStore, QueryFn, QueryHandler, StoreError, WithQueries};
pub use tcpinfo::TcpInfo;
pub use timer::HrTimer;
pub use tune::{rearm_quickack, Applied, OptValue, Refused, SockOpt, SocketTuning, TuningReport};
