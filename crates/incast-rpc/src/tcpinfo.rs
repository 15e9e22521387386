//! TCP_INFO: what the kernel knows about a connection, including how many retransmission
//! timeouts it took, so every result can say how many kernel RTOs happened, not only how slow
//! it was.
//!
//! The RTO counters (`tcpi_total_rto`, `tcpi_total_rto_recoveries`, `tcpi_total_rto_time`)
//! exist since Linux 6.7. The kernel fills as much of the struct as it has; fields beyond the
//! returned length are reported as `None`, never as a misleading zero.
//!
//! # Retransmits that were not losses
//!
//! The retransmits an `End` frame reports ([`TcpInfo::counters`]) leave out the segments the
//! peer reported as duplicates (D-SACK, RFC 2883; `tcpi_dsack_dups`): a retransmit whose
//! original had arrived lost nothing. The receiver's budget cuts on retransmits (see
//! `incast_core::receiver`), and on this kind of machine most of the retransmits where the
//! switch dropped nothing were such: at 10 Gbit/s every one was a tail loss probe that the
//! busy client had not yet acknowledged, and at 5 Gbit/s 199 of 238 were fast retransmits of
//! segments that the emulated path had reordered (`TcpExt` counters of the hosts and the
//! client, 2026-11-29). Each one cut the budget as a loss would: 64 x 256 KiB x 4 read
//! 0.61-0.76 of the port's rate a round. The D-SACK comes about one round trip after the
//! retransmit: the count can fall back by the duplicates once they are reported, and the
//! client reads a count that went backwards as no change.

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
    /// Segments the peer reported receiving twice (D-SACK), over the connection's life
    /// (`tcpi_dsack_dups`, Linux 5.0+): retransmits that were not needed.
    pub dsack_dups: Option<u32>,
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
        let dsack_end = offset_of!(libc::tcp_info, tcpi_dsack_dups) + 4;
        let us = |v: u32| Duration::from_micros(u64::from(v));
        Ok(Self {
            rtt: us(i.tcpi_rtt),
            rttvar: us(i.tcpi_rttvar),
            rto: us(i.tcpi_rto),
            snd_cwnd: i.tcpi_snd_cwnd,
            total_retrans: i.tcpi_total_retrans,
            dsack_dups: has(dsack_end).then_some(i.tcpi_dsack_dups),
            bytes_received: i.tcpi_bytes_received,
            total_rto: has(rto_end).then_some(u32::from(i.tcpi_total_rto)),
            total_rto_recoveries: has(rto_end).then_some(u32::from(i.tcpi_total_rto_recoveries)),
            total_rto_time: has(rto_end).then(|| Duration::from_millis(u64::from(i.tcpi_total_rto_time))),
            kernel_len: len,
        })
    }

    /// The counters an `End` frame carries (RTO fields 0 where the kernel lacks them). The
    /// retransmits are those the peer did not report as duplicates (see *Retransmits that
    /// were not losses* in the module docs).
    pub fn counters(&self) -> TcpCounters {
        TcpCounters {
            rtt_us: self.rtt.as_micros().min(u128::from(u32::MAX)) as u32,
            retransmits: self.lost_retransmits(),
            rtos: self.total_rto.unwrap_or(0),
            rto_recoveries: self.total_rto_recoveries.unwrap_or(0),
            rto_time_ms: self
                .total_rto_time
                .map_or(0, |d| d.as_millis().min(u128::from(u32::MAX)) as u32),
        }
    }

    /// Retransmitted segments less those the peer reported as duplicates (all of them
    /// where the kernel does not count duplicates).
    pub fn lost_retransmits(&self) -> u32 {
        self.total_retrans.saturating_sub(self.dsack_dups.unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(total_retrans: u32, dsack_dups: Option<u32>) -> TcpInfo {
        TcpInfo {
            rtt: Duration::from_micros(50),
            rttvar: Duration::ZERO,
            rto: Duration::from_millis(200),
            snd_cwnd: 10,
            total_retrans,
            dsack_dups,
            bytes_received: 0,
            total_rto: Some(0),
            total_rto_recoveries: Some(0),
            total_rto_time: Some(Duration::ZERO),
            kernel_len: std::mem::size_of::<libc::tcp_info>(),
        }
    }

    /// Retransmits the peer reported as duplicates are not reported as losses; a kernel that
    /// does not count duplicates reports every retransmit, and more duplicates than
    /// retransmits (the network duplicated a segment) report none, never a wrapped count.
    #[test]
    fn end_counters_leave_out_retransmits_the_peer_reported_as_duplicates() {
        assert_eq!(info(7, Some(5)).counters().retransmits, 2);
        assert_eq!(info(7, None).counters().retransmits, 7);
        assert_eq!(info(3, Some(5)).counters().retransmits, 0);
        assert_eq!(info(3, Some(5)).lost_retransmits(), 0);
    }

    /// A live socket reports the field where the kernel has it (Linux 5.0+).
    #[test]
    fn a_socket_reports_its_duplicates() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let i = TcpInfo::of(&s).unwrap();
        assert_eq!(i.dsack_dups, Some(0), "kernel filled {} bytes", i.kernel_len);
        assert_eq!(i.counters().retransmits, i.total_retrans);
    }
}
