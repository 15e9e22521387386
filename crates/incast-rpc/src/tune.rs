//! Socket tuning, with a report of what the kernel kept and what it refused.
//!
//! What each option is for (see the seeds and TESTBED.md):
//!
//! - `TCP_NODELAY` (on by default): requests are small and must leave at once.
//! - `TCP_QUICKACK`: delayed ACKs stall a server's window at the end of a response
//!   (phanishayee-fast08 §4.2, vasudevan-sigcomm09 §4.1). Linux clears it after the next
//!   ACK, so the client re-arms it after every read ([`SocketTuning::quickack`]).
//! - `SO_RCVBUF` and `TCP_WINDOW_CLAMP`: cap what one sender can have in flight toward the
//!   client, whatever its congestion window (receiver window capping). Set before connecting,
//!   so the window scale is negotiated for it.
//! - `TCP_USER_TIMEOUT`: how long unacknowledged data may sit before the kernel gives up.
//! - `TCP_RTO_MIN_US` / `TCP_RTO_MAX_MS` (Linux 6.15+): the per-socket RTO floor and cap. The
//!   floor accepts 4001..=200000 us and is rounded up to whole jiffies (8 ms at HZ=250).
//! - `TCP_CONGESTION`: set it explicitly; results differ by algorithm.
//! - Servers: `SO_MAX_PACING_RATE` (bytes per second) and `TCP_NOTSENT_LOWAT`.
//!
//! Nothing is silently ignored: [`SocketTuning::apply`] returns a [`TuningReport`] with, for
//! every option asked for, either the value read back from the kernel (which may differ:
//! SO_RCVBUF is doubled, RTO_MIN rounded) or the errno of the refusal.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use crate::sys;

const TCP_RTO_MAX_MS: i32 = 44;
const TCP_RTO_MIN_US: i32 = 45;
const SO_MAX_PACING_RATE: i32 = 47;

/// Sets `SO_MAX_PACING_RATE` (bytes per second; `u64::MAX` for none) on a TCP socket: the
/// kernel then paces what it sends (TCP's internal pacing when the qdisc is not `fq`). The
/// server applies a request's pacing rate with it before that response.
pub fn set_max_pacing_rate(socket: &impl AsFd, bytes_per_sec: u64) -> std::io::Result<()> {
    sys::set_opt(socket.as_fd(), libc::SOL_SOCKET, SO_MAX_PACING_RATE, bytes_per_sec)
}

/// A socket option this crate sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SockOpt {
    /// TCP_NODELAY.
    NoDelay,
    /// TCP_QUICKACK.
    QuickAck,
    /// SO_RCVBUF.
    RecvBuffer,
    /// TCP_WINDOW_CLAMP.
    WindowClamp,
    /// TCP_USER_TIMEOUT.
    UserTimeout,
    /// TCP_RTO_MIN_US (Linux 6.15+).
    RtoMin,
    /// TCP_RTO_MAX_MS (Linux 6.15+).
    RtoMax,
    /// TCP_CONGESTION.
    Congestion,
    /// SO_MAX_PACING_RATE.
    MaxPacingRate,
    /// TCP_NOTSENT_LOWAT.
    NotSentLowat,
}

impl fmt::Display for SockOpt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SockOpt::NoDelay => "TCP_NODELAY",
            SockOpt::QuickAck => "TCP_QUICKACK",
            SockOpt::RecvBuffer => "SO_RCVBUF",
            SockOpt::WindowClamp => "TCP_WINDOW_CLAMP",
            SockOpt::UserTimeout => "TCP_USER_TIMEOUT",
            SockOpt::RtoMin => "TCP_RTO_MIN_US",
            SockOpt::RtoMax => "TCP_RTO_MAX_MS",
            SockOpt::Congestion => "TCP_CONGESTION",
            SockOpt::MaxPacingRate => "SO_MAX_PACING_RATE",
            SockOpt::NotSentLowat => "TCP_NOTSENT_LOWAT",
        })
    }
}

/// An option value, in the option's own unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OptValue {
    /// On or off.
    Bool(bool),
    /// Bytes.
    Bytes(u64),
    /// Bytes per second.
    Rate(u64),
    /// A duration.
    Duration(Duration),
    /// A name (congestion control).
    Name(String),
}

impl fmt::Display for OptValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptValue::Bool(b) => write!(f, "{b}"),
            OptValue::Bytes(b) => write!(f, "{b} B"),
            OptValue::Rate(b) => write!(f, "{b} B/s"),
            OptValue::Duration(d) => write!(f, "{d:?}"),
            OptValue::Name(n) => f.write_str(n),
        }
    }
}

/// One option that took effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The option.
    pub option: SockOpt,
    /// What was asked for.
    pub requested: OptValue,
    /// What the kernel reports now (`None` if it cannot be read back).
    pub kept: Option<OptValue>,
}

/// One option the kernel refused.
#[derive(Debug)]
pub struct Refused {
    /// The option.
    pub option: SockOpt,
    /// What was asked for.
    pub requested: OptValue,
    /// The kernel's error (its errno is `error.raw_os_error()`).
    pub error: io::Error,
}

/// What [`SocketTuning::apply`] did, option by option.
#[derive(Debug, Default)]
pub struct TuningReport {
    /// Options set, with the value read back.
    pub applied: Vec<Applied>,
    /// Options refused, with the error.
    pub refused: Vec<Refused>,
}

impl TuningReport {
    /// The value the kernel kept for `option`, if it was applied and can be read back.
    pub fn kept(&self, option: SockOpt) -> Option<&OptValue> {
        self.applied
            .iter()
            .find(|a| a.option == option)
            .and_then(|a| a.kept.as_ref())
    }
}

impl fmt::Display for TuningReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for a in &self.applied {
            match &a.kept {
                Some(k) => writeln!(f, "{}: asked {}, kernel kept {k}", a.option, a.requested)?,
                None => writeln!(f, "{}: asked {}, kernel accepted (not readable)", a.option, a.requested)?,
            }
        }
        for r in &self.refused {
            writeln!(f, "{}: asked {}, refused: {}", r.option, r.requested, r.error)?;
        }
        Ok(())
    }
}

/// Which options to set; `None` leaves the kernel default. Build with struct update syntax:
///
/// ```no_run
/// use std::time::Duration;
/// use incast_rpc::SocketTuning;
/// # fn f(socket: &tokio::net::TcpSocket) {
/// let t = SocketTuning { window_clamp: Some(16 * 1024), rto_min: Some(Duration::from_millis(8)), ..SocketTuning::client() };
/// let report = t.apply(socket);
/// print!("{report}");
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SocketTuning {
    /// TCP_NODELAY.
    pub nodelay: Option<bool>,
    /// TCP_QUICKACK at setup; with `Some(true)` the client also re-arms it after every read.
    pub quickack: Option<bool>,
    /// SO_RCVBUF in bytes (the kernel doubles it for bookkeeping).
    pub recv_buffer: Option<u32>,
    /// TCP_WINDOW_CLAMP in bytes.
    pub window_clamp: Option<u32>,
    /// TCP_USER_TIMEOUT (milliseconds on the wire).
    pub user_timeout: Option<Duration>,
    /// TCP_RTO_MIN_US: 4001 us ..= 200 ms on Linux 6.15+.
    pub rto_min: Option<Duration>,
    /// TCP_RTO_MAX_MS: 1 s ..= 120 s on Linux 6.15+.
    pub rto_max: Option<Duration>,
    /// TCP_CONGESTION, e.g. "cubic", "reno", "bbr".
    pub congestion: Option<String>,
    /// SO_MAX_PACING_RATE in bytes per second (servers).
    pub max_pacing_rate: Option<u64>,
    /// TCP_NOTSENT_LOWAT in bytes (servers).
    pub notsent_lowat: Option<u32>,
}

impl SocketTuning {
    /// Client defaults: TCP_NODELAY and TCP_QUICKACK on; everything else the kernel's.
    pub fn client() -> Self {
        Self {
            nodelay: Some(true),
            quickack: Some(true),
            ..Self::default()
        }
    }

    /// Server defaults: TCP_NODELAY on; everything else the kernel's.
    pub fn server() -> Self {
        Self {
            nodelay: Some(true),
            ..Self::default()
        }
    }

    /// Sets every option that is `Some`, reads each back, and reports.
    pub fn apply(&self, socket: &impl AsFd) -> TuningReport {
        let fd = socket.as_fd();
        let mut r = TuningReport::default();
        let (tcp, sol) = (libc::IPPROTO_TCP, libc::SOL_SOCKET);
        let ms = |d: Duration| d.as_millis().min(i32::MAX as u128) as i32;
        let us = |d: Duration| d.as_micros().min(i32::MAX as u128) as i32;
        if let Some(v) = self.nodelay {
            int(
                &mut r,
                fd,
                SockOpt::NoDelay,
                tcp,
                libc::TCP_NODELAY,
                i32::from(v),
                OptValue::Bool(v),
                |k| OptValue::Bool(k != 0),
            );
        }
        if let Some(v) = self.quickack {
            int(
                &mut r,
                fd,
                SockOpt::QuickAck,
                tcp,
                libc::TCP_QUICKACK,
                i32::from(v),
                OptValue::Bool(v),
                |k| OptValue::Bool(k != 0),
            );
        }
        if let Some(v) = self.recv_buffer {
            let req = OptValue::Bytes(u64::from(v));
            int(
                &mut r,
                fd,
                SockOpt::RecvBuffer,
                sol,
                libc::SO_RCVBUF,
                v.min(i32::MAX as u32) as i32,
                req,
                OptValue::Bytes,
            );
        }
        if let Some(v) = self.window_clamp {
            let req = OptValue::Bytes(u64::from(v));
            let val = v.min(i32::MAX as u32) as i32;
            int(
                &mut r,
                fd,
                SockOpt::WindowClamp,
                tcp,
                libc::TCP_WINDOW_CLAMP,
                val,
                req,
                OptValue::Bytes,
            );
        }
        if let Some(v) = self.user_timeout {
            int(
                &mut r,
                fd,
                SockOpt::UserTimeout,
                tcp,
                libc::TCP_USER_TIMEOUT,
                ms(v),
                OptValue::Duration(v),
                |k| OptValue::Duration(Duration::from_millis(k)),
            );
        }
        if let Some(v) = self.rto_min {
            int(
                &mut r,
                fd,
                SockOpt::RtoMin,
                tcp,
                TCP_RTO_MIN_US,
                us(v),
                OptValue::Duration(v),
                |k| OptValue::Duration(Duration::from_micros(k)),
            );
        }
        if let Some(v) = self.rto_max {
            int(
                &mut r,
                fd,
                SockOpt::RtoMax,
                tcp,
                TCP_RTO_MAX_MS,
                ms(v),
                OptValue::Duration(v),
                |k| OptValue::Duration(Duration::from_millis(k)),
            );
        }
        if let Some(name) = &self.congestion {
            let req = OptValue::Name(name.clone());
            let sock = socket2::SockRef::from(&fd);
            match sock.set_tcp_congestion(name.as_bytes()) {
                Ok(()) => {
                    let kept = sock.tcp_congestion().ok().map(|buf| {
                        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                        OptValue::Name(String::from_utf8_lossy(&buf[..end]).into_owned())
                    });
                    r.applied.push(Applied {
                        option: SockOpt::Congestion,
                        requested: req,
                        kept,
                    });
                }
                Err(error) => r.refused.push(Refused {
                    option: SockOpt::Congestion,
                    requested: req,
                    error,
                }),
            }
        }
        if let Some(v) = self.max_pacing_rate {
            let req = OptValue::Rate(v);
            match sys::set_opt(fd, sol, SO_MAX_PACING_RATE, v) {
                Ok(()) => {
                    let kept = sys::get_int::<8>(fd, sol, SO_MAX_PACING_RATE).ok().map(OptValue::Rate);
                    r.applied.push(Applied {
                        option: SockOpt::MaxPacingRate,
                        requested: req,
                        kept,
                    });
                }
                Err(error) => r.refused.push(Refused {
                    option: SockOpt::MaxPacingRate,
                    requested: req,
                    error,
                }),
            }
        }
        if let Some(v) = self.notsent_lowat {
            let req = OptValue::Bytes(u64::from(v));
            let val = v.min(i32::MAX as u32) as i32;
            int(
                &mut r,
                fd,
                SockOpt::NotSentLowat,
                tcp,
                libc::TCP_NOTSENT_LOWAT,
                val,
                req,
                OptValue::Bytes,
            );
        }
        r
    }
}

/// Re-arms TCP_QUICKACK (Linux clears it after the next ACK). Errors are returned, not
/// hidden; callers on the hot path count them.
pub fn rearm_quickack(socket: &impl AsFd) -> io::Result<()> {
    sys::set_opt(socket.as_fd(), libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1i32)
}

#[allow(clippy::too_many_arguments)]
fn int(
    r: &mut TuningReport,
    fd: BorrowedFd<'_>,
    option: SockOpt,
    level: i32,
    name: i32,
    value: i32,
    requested: OptValue,
    read: impl Fn(u64) -> OptValue,
) {
    match sys::set_opt(fd, level, name, value) {
        Ok(()) => {
            let kept = sys::get_int::<4>(fd, level, name).ok().map(read);
            r.applied.push(Applied {
                option,
                requested,
                kept,
            });
        }
        Err(error) => r.refused.push(Refused {
            option,
            requested,
            error,
        }),
    }
}
