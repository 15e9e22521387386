//! TCP_INFO: what the kernel knows about a connection, including how many retransmission
//! timeouts it took, so every result can say how many kernel RTOs happened, not only how slow
//! it was.
//!
//! The RTO counters (`tcpi_total_rto`, `tcpi_total_rto_recoveries`, `tcpi_total_rto_time`)
//! exist since Linux 6.7. The kernel fills as much of the struct as it has; fields beyond the
//! returned length are reported as `None`, never as a misleading zero.

use std::io;
use std::mem::offset_of;
use std::os::fd::AsFd;
use std::time::Duration;

use crate::sys;
use crate::wire::TcpCounters;

/// A snapshot of one connection's TCP state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpInfo {
    /// Smoothed RTT.
    pub rtt: Duration,
    /// RTT variation.
    pub rttvar: Duration,
    /// The kernel's current retransmission timeout.
    pub rto: Duration,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// Bytes received (Linux 4.1+).
    pub bytes_received: u64,
    /// Retransmission timeouts over the connection's life (Linux 6.7+).
    pub total_rto: Option<u32>,
    /// Recoveries from RTOs (Linux 6.7+).
    pub total_rto_recoveries: Option<u32>,
    /// Time spent in RTO recovery (Linux 6.7+).
    pub total_rto_time: Option<Duration>,
    /// Bytes of `tcp_info` the kernel filled.
    pub kernel_len: usize,
}

impl TcpInfo {
    /// Reads TCP_INFO of a connected TCP socket.
    ///
    /// ```no_run
    /// # async fn f() -> std::io::Result<()> {
    /// let s = tokio::net::TcpStream::connect("127.0.0.1:7000").await?;
    /// let info = incast_rpc::TcpInfo::of(&s)?;
    /// println!("rtt {:?}, kernel RTOs {:?}", info.rtt, info.total_rto);
    /// # Ok(()) }
    /// ```
    pub fn of(socket: &impl AsFd) -> io::Result<Self> {
        let (i, len) = sys::tcp_info(socket.as_fd())?;
        let has = |end: usize| len >= end;
        let rto_end = offset_of!(libc::tcp_info, tcpi_total_rto_time) + 4;
        let us = |v: u32| Duration::from_micros(u64::from(v));
        Ok(Self {
            rtt: us(i.tcpi_rtt),
            rttvar: us(i.tcpi_rttvar),
            rto: us(i.tcpi_rto),
            snd_cwnd: i.tcpi_snd_cwnd,
            total_retrans: i.tcpi_total_retrans,
            bytes_received: i.tcpi_bytes_received,
            total_rto: has(rto_end).then_some(u32::from(i.tcpi_total_rto)),
            total_rto_recoveries: has(rto_end).then_some(u32::from(i.tcpi_total_rto_recoveries)),
            total_rto_time: has(rto_end).then(|| Duration::from_millis(u64::from(i.tcpi_total_rto_time))),
            kernel_len: len,
        })
    }

    /// The counters an `End` frame carries (RTO fields 0 where the kernel lacks them).
    pub fn counters(&self) -> TcpCounters {
        TcpCounters {
            rtt_us: self.rtt.as_micros().min(u128::from(u32::MAX)) as u32,
            retransmits: self.total_retrans,
            rtos: self.total_rto.unwrap_or(0),
            rto_recoveries: self.total_rto_recoveries.unwrap_or(0),
            rto_time_ms: self
                .total_rto_time
                .map_or(0, |d| d.as_millis().min(u128::from(u32::MAX)) as u32),
        }
    }
}
