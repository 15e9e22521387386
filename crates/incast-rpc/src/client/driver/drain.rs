//! Draining the cancelled responses a read leaves behind, so their connection goes back to
//! the pool instead of being reset and opened again.
//!
//! # Why
//!
//! When a read ends, some of its connections may still owe the rest of a response it no
//! longer wants: the original of a hedge that won, usually. Aborting such a connection (a
//! reset) means the next read that needs that server opens a new one, and through a port
//! that is full (of bulk flows, or of the reads' own bursts) a handshake sometimes loses its
//! SYN-ACK, which the server's host counts as a kernel RTO (a one-second timer, which the
//! client's connect waits out). On the testbed (1 Gbit/s, 32 KiB port, 2 bulk flows, 16 and
//! 64 x 32 and 256 KiB x 1 and 4 reads) about 3,700 connections were accepted per run: 1,300
//! in the warm-up, 2,400 while the measured reads ran, of which only a quarter followed a
//! reset; the rest replaced connections aborted at a read's end.
//!
//! # What
//!
//! A task owns such a connection after the read: it reads and drops the bytes of every owed
//! response, and once the last `End` frame has arrived the connection is idle and goes back
//! to the pool. A connection that is silent for [`QUIET_RESET_AFTER`] is reset as before: its
//! server is waiting out a lost tail, and the reset ends its socket before Linux's minimum
//! RTO (200 ms) fires. So is one that takes longer than [`DRAIN_LIMIT`] in all, one that
//! sends a malformed frame, and one whose client is gone. Meanwhile a read that needs the
//! same server opens a connection as before; the drained one is there for a later read.
//!
//! Only plain TCP connections are drained (a TLS session stays with its read), and only
//! those that owe nothing but cancelled responses and have no request half written. The
//! task runs on the read's runtime: a runtime that stops running tasks (a current-thread
//! runtime between two `block_on`) freezes the drain past the servers' RTOs.
//!
//! # What it gave
//!
//! Measured on the testbed above, alternated with the same build aborting instead (two
//! pairs each; docs/measurements.md, *Twenty-fifth session*):
//! - 1 Gbit/s: connections accepted 2,951 and 2,907 against 3,746 and 3,688; host RTOs 1
//!   and 1 against 5 and 2; share of the link 50.7 and 51.2% against 51.7 and 51.6%.
//! - 500 Mbit/s: 3,577 and 3,630 against 4,020 and 4,043; host RTOs 3 and 2 against 6
//!   and 1; share 53.4 and 52.4% against 49.3 and 50.7%.
//! - 100 Mbit/s, and a bare 8 KiB port at 500 Mbit/s: no change in connections; host RTOs
//!   within the runs' spread.
//!
//! In one traced configuration (1 Gbit/s, 64 x 32 KiB, 1 read at a time) 45 drains ended
//! whole, within 2.6 ms at the median and 10.6 ms at most, and 72 were reset silent: most
//! tails a read leaves behind are lost and wait for their server's RTO.
//!
//! The bytes drained still cross the port without the port's budget counting them, as the
//! bytes a read drains from the original of a won hedge always did; a reset stopped them at
//! the server.

use std::io;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use incast_core::HostTime;
use tokio::sync::watch;

use super::{abort_on_drop, fill_control, owes_only_cancelled, Conn, Rx, QUIET_RESET_AFTER};
use crate::client::report::Counters;
use crate::client::{Idle, IdleMap};
use crate::wire::{Frame, Header, Kind, HEADER_LEN};

/// How long a drain may take in all before its connection is reset (2 s). A drain that
/// keeps making progress is a slow tail, not a stalled one; past this it is cheaper to open a
/// new connection than to keep the old one's bytes crossing the port.
pub(crate) const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Most idle connections the pool keeps per (server, lane) from drains (16): concurrent reads
/// hold one each, so a lane needs at most as many as reads run at once. Past this a drained
/// connection is closed (gracefully: it owes nothing).
pub(crate) const MAX_IDLE_PER_LANE: usize = 16;

/// Bytes read per `try_read` while draining.
const DRAIN_SCRATCH: usize = 16 * 1024;

/// What a drain needs of its client: it may outlive the read, and the client too.
pub(in crate::client) struct Home {
    idle: Weak<IdleMap>,
    counters: Weak<Counters>,
    /// The client's membership epoch when the read ended: a change means a server left or
    /// moved, and the drained connection is not pooled.
    membership: watch::Receiver<u64>,
}

impl Home {
    pub(in crate::client) fn of(idle: &Idle, counters: &Arc<Counters>, membership: watch::Receiver<u64>) -> Self {
        Self {
            idle: Arc::downgrade(idle),
            counters: Arc::downgrade(counters),
            membership,
        }
    }
}

/// Starts draining `c` on the current runtime, or aborts it (a reset, as before drains)
/// when it cannot be drained.
pub(super) fn start(mut c: Conn, home: Home) {
    let drainable =
        !c.broken && c.tls.is_none() && c.out.is_empty() && !c.inflight.is_empty() && owes_only_cancelled(&c);
    let runtime = tokio::runtime::Handle::try_current()
        .ok()
        .filter(|h| h.id() == c.runtime);
    match runtime.filter(|_| drainable) {
        Some(rt) => {
            c.waiting = false;
            rt.spawn(drain(c, home));
        }
        None => abort_on_drop(&c.stream),
    }
}

/// Why a drain gave up.
enum Stop {
    Quiet,
    Limit,
    Failed(String),
}

async fn drain(mut c: Conn, home: Home) {
    let began = Instant::now();
    let mut scratch = vec![0u8; DRAIN_SCRATCH];
    let stop = loop {
        match drain_some(&mut c, &mut scratch) {
            Ok(true) => break None,
            Ok(false) => {}
            Err(why) => break Some(Stop::Failed(why)),
        }
        let quiet_at = c.quiet_since + QUIET_RESET_AFTER;
        let limit_at = began + DRAIN_LIMIT;
        let until = quiet_at.min(limit_at);
        match tokio::time::timeout_at(until.into(), c.stream.readable()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => break Some(Stop::Failed(format!("waiting on {}: {e}", c.server))),
            Err(_) if Instant::now() >= limit_at => break Some(Stop::Limit),
            Err(_) if Instant::now() >= quiet_at => break Some(Stop::Quiet),
            Err(_) => {}
        }
    };
    if let Some(k) = home.counters.upgrade() {
        let which = if stop.is_none() {
            &k.connections_drained
        } else {
            &k.drains_reset
        };
        which.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    match stop {
        None => {
            crate::trace::event!(debug, server = %c.server, took_us = began.elapsed().as_micros() as u64, "connection drained after its read");
            let moved = home.membership.has_changed().unwrap_or(true);
            if let (Some(idle), false) = (home.idle.upgrade(), moved) {
                let mut idle = idle.lock().unwrap_or_else(|e| e.into_inner());
                let lane = idle.entry((c.server, c.lane)).or_default();
                if lane.len() < MAX_IDLE_PER_LANE {
                    lane.push(c);
                }
            }
        }
        Some(stop) => {
            #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
            let why = match stop {
                Stop::Quiet => "silent".to_owned(),
                Stop::Limit => format!("not drained within {DRAIN_LIMIT:?}"),
                Stop::Failed(why) => why,
            };
            crate::trace::event!(debug, server = %c.server, cause = %why, "draining connection reset");
            abort_on_drop(&c.stream);
        }
    }
}

/// Reads what the socket has, dropping the bytes of the owed responses: `Ok(true)` once the
/// last owed `End` frame has arrived (the connection is idle), `Ok(false)` when the socket
/// has nothing more for now. `Err` for a closed connection or a frame that does not fit.
fn drain_some(c: &mut Conn, scratch: &mut [u8]) -> Result<bool, String> {
    let server = c.server;
    loop {
        if c.inflight.is_empty() && matches!(c.rx, Rx::Header { have: 0, .. }) {
            return Ok(true);
        }
        let r = match &mut c.rx {
            Rx::Header { buf, have } => c.stream.try_read(&mut buf[*have..]),
            Rx::Data { left, .. } => {
                let n = (*left as usize).min(scratch.len());
                c.stream.try_read(&mut scratch[..n])
            }
            Rx::Control { header, buf } => fill_control(header, buf, |b| c.stream.try_read(b)),
        };
        let n = match r {
            Ok(0) => return Err(format!("{server} closed the connection")),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(format!("reading from {server}: {e}")),
        };
        c.quiet_since = Instant::now();
        match &mut c.rx {
            Rx::Header { buf, have } => {
                *have += n;
                if *have < HEADER_LEN {
                    continue;
                }
                let h = Header::decode(buf).map_err(|e| format!("{server}: {e}"))?;
                c.rx = match h.kind {
                    Kind::Data if c.inflight.front().is_some_and(|f| f.req == h.id) => Rx::Data {
                        id: h.id,
                        left: h.len,
                        host: HostTime::default(),
                    },
                    Kind::Data => return Err(format!("{server} sent data for request {} out of order", h.id)),
                    Kind::End | Kind::Error | Kind::Length | Kind::StoreTime => Rx::Control {
                        header: h,
                        buf: Vec::with_capacity(h.len as usize),
                    },
                    kind => return Err(format!("{server}: unexpected frame {kind:?}")),
                };
                if h.len == 0 {
                    control_done(c)?;
                }
            }
            Rx::Data { left, .. } => {
                *left -= n as u32;
                if *left == 0 {
                    c.rx = Rx::new();
                }
            }
            Rx::Control { header, buf } => {
                if buf.len() == header.len as usize {
                    control_done(c)?;
                }
            }
        }
    }
}

/// A whole control frame (or an empty data frame) has arrived on `c`: an `End` or `Error`
/// ends the owed response at the front.
fn control_done(c: &mut Conn) -> Result<(), String> {
    let server = c.server;
    let frame = match std::mem::replace(&mut c.rx, Rx::new()) {
        Rx::Control { header, buf } => {
            Frame::decode_payload(&header, buf.into()).map_err(|e| format!("{server}: {e}"))?
        }
        Rx::Data { .. } | Rx::Header { .. } => return Ok(()),
    };
    let ended = match frame {
        Frame::Error { id: 0, .. } => return Err(format!("{server} refused the connection")),
        Frame::Length { .. } | Frame::StoreTime { .. } => return Ok(()),
        // Its counters stay unread: the next read's first `End` on this connection counts
        // what changed since the last `End` a read saw, and the counters at its response's
        // start tell it which of that was this read's (its drained responses' tails).
        Frame::End { id, .. } => id,
        Frame::Error { id, .. } => id,
        other => return Err(format!("{server}: unexpected frame {:?}", other.kind())),
    };
    match c.inflight.front() {
        Some(f) if f.req == ended => {
            c.inflight.pop_front();
            Ok(())
        }
        _ => Err(format!("{server} ended request {ended} out of order")),
    }
}
