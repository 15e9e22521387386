//! # incast-core
//!
//! The pure logic of `incast`: it decides who sends what and when during a fan-in read, with
//! no I/O. No tokio, no sockets, no clock (every input carries `now`), no unseeded
//! randomness: given a seed, every run is reproducible, which is what lets the property
//! tests drive millions of event orders.
//!
//! - [`Stripe`]: one block over N servers (fixed SRU or fixed block; replicas).
//! - [`Policy`]: K senders, B bytes in flight, grant size, stagger, window cap, hedging,
//!   adaptation; validated builder, serde.
//! - [`Scheduler`]: the state machine a transport drives (`poll_action`, `on_bytes`,
//!   `on_done`, `on_failed`, `poll_timeout`, `handle_timeout`) for one read.
//! - [`Receiver`]: the client-wide receiver: every concurrent read's scheduler under one
//!   port budget, sender cap and hedge bucket, shortest remaining read first with aging, and
//!   a budget that follows measured queueing delay and loss.
//! - [`RttEstimator`]: microsecond RFC 6298 RTO with no 200 ms floor, randomized and backed off.
//! - [`model`]: chen-2012's flow-rate and onset model and [`model::recommend`].
//! - [`sim`]: a deterministic simulated transport (virtual clock, one shared link, injected
//!   stalls) for trying policies without sockets.
//!
//! ```
//! use incast_core::{model, Policy, Scheduler, ServerId, Stripe};
//! use std::time::Duration;
//!
//! // What the model says about a 1 Gbit/s port with 32 KiB of buffer:
//! let rec = model::recommend(1_000_000_000, Duration::from_micros(50), 32 * 1024, model::MSS_1448)?;
//! let policy: Policy = rec.to_policy()?;
//! let servers: Vec<ServerId> = (0..64).map(ServerId).collect();
//! let stripe = Stripe::fixed_block("block-17", &servers, 1 << 20)?;
//! let sched = Scheduler::new(&stripe, &policy, 17);
//! assert_eq!(sched.block_len(), 1 << 20);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod model;
pub mod policy;
pub mod receiver;
mod rng;
pub mod rtt;
pub mod scheduler;
pub mod sim;
pub mod stripe;

pub use policy::{Adaptation, GrantSize, Hedging, Policy, PolicyBuilder, PolicyError, Stagger, WindowCap};
pub use receiver::{HostTime, ReadKey, ReadOptions, Receiver, ReceiverConfig};
pub use rtt::{RtoBounds, RtoBoundsError, RttEstimator};
pub use scheduler::{
    Action, Delivery, EventError, Grant, GrantId, GrantKind, InvariantViolation, Lane, ReadError, Scheduler,
    SchedulerStats,
};
pub use stripe::{Fragment, ServerId, Stripe, StripeError};
