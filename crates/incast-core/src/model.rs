//! The flow-rate and onset model of incast (chen-2012, §2), and starting values from it.
//!
//! **Equation 1**, before the onset: each of N senders moves its SRU in one RTT plus its share
//! of the link, so goodput = `SRU / (RTT + SRU * N / link) * N`.
//!
//! **Equation 2**, after the onset: a retransmission timeout is added to every block,
//! goodput = `SRU / (RTO + RTT + SRU * N / link) * N`. With RTO = 200 ms and RTT = 100 us this is
//! the 10-100x collapse.
//!
//! **Equation 4**, large blocks: SACK keeps data moving during part of the timeout, so only
//! `alpha * RTO` is lost (alpha = 0.6 for 1024 KB and 0.8 for 512 KB blocks in the paper).
//!
//! **Equation 3**, the onset: during slow start each flow's window doubles every round trip
//! (Table 1); the collapse begins when N of the largest slow-start windows no longer fit in
//! the port buffer: `N_onset = ceil(buffer / largest_window) + 1`.
//!
//! ## Reproducing Table 1 and the discrepancies
//!
//! The table's numbers come out exactly when the block sizes are decimal (16 KB = 16,000
//! bytes) and the windows start at 1,448 bytes and double: a 16,000-byte block is sent as
//! 1448, 2896, 5792 and a last window of 5864. The buffer of Equation 3 is binary (64 KB =
//! 65,536 bytes): that gives 13, 7 and 4 senders for 16, 32 and 64 KB blocks. The paper's text
//! says 23 for 16 KB, but its own worked example (12 windows of 5864 bytes = 70,368 > 64 KB,
//! "collapse begins after N = 13") and the equation both give 13; we implement the equation.
//! For 128 KB blocks the equation gives 3; the text says 2 (and measures 4).
//!
//! ## From the model to a policy
//!
//! [`recommend`] turns a link rate, RTT and port buffer into K, B and C: a drop-tail port
//! overflows when more than `buffer + rate * RTT` bytes are in flight toward it, so the budget
//! is that with a fifth of the buffer kept free for TCP's own burstiness (ACK compression,
//! the bytes of cancelled requests); four grants share it, so one slow sender leaves three
//! to keep the link busy; each socket's receive window is capped at one grant.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::policy::{GrantSize, Policy, PolicyError, WindowCap, MAX_WINDOW_CAP, MIN_WINDOW_CAP};

/// The segment payload of chen-2012's Linux hosts and of Ethernet with timestamps (1448 B).
pub const MSS_1448: u64 = 1448;
/// Grants the recommended budget is divided into (4).
pub const RECOMMENDED_GRANTS_IN_FLIGHT: u64 = 4;
/// Fraction of the port buffer the recommended budget may fill (0.8).
pub const RECOMMENDED_BUFFER_FILL: f64 = 0.8;
/// Longest slow-start table computed (64 rounds: a window of 2^63 segments).
const MAX_ROUNDS: usize = 64;

/// Why a model input was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A quantity that must be positive was zero.
    #[error("model input `{0}` must be greater than zero")]
    Zero(&'static str),
    /// `alpha` of Equation 4 is outside `[0, 1]`.
    #[error("model input `alpha` = {0} is out of range: allowed 0.0..=1.0")]
    Alpha(f64),
    /// The recommended values do not make a valid policy (a bug if it happens).
    #[error("recommended values rejected: {0}")]
    Policy(#[from] PolicyError),
}

/// Slow-start congestion windows, in bytes, of one flow sending `block` bytes: the window
/// starts at `initial_window` bytes, doubles every round trip, and the last round carries
/// what is left (chen-2012 Table 1). Empty for an empty block.
///
/// ```
/// use incast_core::model::{slow_start_windows, MSS_1448};
/// assert_eq!(slow_start_windows(16_000, MSS_1448)?, [1448, 2896, 5792, 5864]);
/// # Ok::<(), incast_core::model::ModelError>(())
/// ```
pub fn slow_start_windows(block: u64, initial_window: u64) -> Result<Vec<u64>, ModelError> {
    if initial_window == 0 {
        return Err(ModelError::Zero("initial_window"));
    }
    let mut out = Vec::new();
    let (mut left, mut w) = (block, initial_window);
    while left > 0 && out.len() < MAX_ROUNDS {
        let sent = w.min(left);
        out.push(sent);
        left -= sent;
        w = w.saturating_mul(2);
    }
    Ok(out)
}

/// The largest window of [`slow_start_windows`] (0 for an empty block).
pub fn largest_slow_start_window(block: u64, initial_window: u64) -> Result<u64, ModelError> {
    Ok(slow_start_windows(block, initial_window)?
        .into_iter()
        .max()
        .unwrap_or(0))
}

/// Equation 3: the number of synchronized senders at which goodput collapse begins,
/// `ceil(buffer / largest_window) + 1`.
///
/// ```
/// use incast_core::model::{onset_senders, MSS_1448};
/// assert_eq!(onset_senders(64 * 1024, 32_000, MSS_1448)?, 7);
/// # Ok::<(), incast_core::model::ModelError>(())
/// ```
pub fn onset_senders(per_port_buffer: u64, block: u64, initial_window: u64) -> Result<u64, ModelError> {
    if block == 0 {
        return Err(ModelError::Zero("block"));
    }
    let largest = largest_slow_start_window(block, initial_window)?;
    Ok(per_port_buffer.div_ceil(largest) + 1)
}

fn check_link(sru: u64, n: u64, link_bps: u64) -> Result<(), ModelError> {
    if sru == 0 {
        return Err(ModelError::Zero("sru"));
    }
    if n == 0 {
        return Err(ModelError::Zero("senders"));
    }
    if link_bps == 0 {
        return Err(ModelError::Zero("link_bps"));
    }
    Ok(())
}

/// Equation 4 (Equation 2 when `alpha` = 1, Equation 1 when `rto` = 0): goodput in bits per
/// second of N senders each sending `sru` bytes over a `link_bps` link.
pub fn goodput_bps(
    sru: u64,
    n: u64,
    rtt: Duration,
    rto: Duration,
    alpha: f64,
    link_bps: u64,
) -> Result<f64, ModelError> {
    check_link(sru, n, link_bps)?;
    if !(0.0..=1.0).contains(&alpha) {
        return Err(ModelError::Alpha(alpha));
    }
    let bits = sru as f64 * 8.0;
    let time = alpha * rto.as_secs_f64() + rtt.as_secs_f64() + bits * n as f64 / link_bps as f64;
    Ok(bits / time * n as f64)
}

/// Equation 1: goodput before the onset, bits per second.
///
/// ```
/// use std::time::Duration;
/// use incast_core::model::goodput_before_incast_bps;
/// // 1 MB per sender, 8 senders, 1 ms RTT on 1 Gbit/s: 8 Mbit take 64 ms on the wire.
/// let g = goodput_before_incast_bps(1_000_000, 8, Duration::from_millis(1), 1_000_000_000)?;
/// assert!((g - 64e6 / 0.065).abs() < 1.0);
/// # Ok::<(), incast_core::model::ModelError>(())
/// ```
pub fn goodput_before_incast_bps(sru: u64, n: u64, rtt: Duration, link_bps: u64) -> Result<f64, ModelError> {
    goodput_bps(sru, n, rtt, Duration::ZERO, 1.0, link_bps)
}

/// Equation 2: goodput after the onset (one full RTO per block), bits per second.
pub fn goodput_incast_bps(sru: u64, n: u64, rtt: Duration, rto: Duration, link_bps: u64) -> Result<f64, ModelError> {
    goodput_bps(sru, n, rtt, rto, 1.0, link_bps)
}

/// One point of a predicted goodput curve.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Senders.
    pub senders: u64,
    /// Equation 1, bits per second.
    pub before_bps: f64,
    /// Equation 2 (or 4 with the given alpha), bits per second.
    pub incast_bps: f64,
    /// The prediction: `before_bps` below the onset, `incast_bps` from it on.
    pub predicted_bps: f64,
}

/// The inputs of a predicted curve.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelInput {
    /// Link rate of the client's port, bits per second.
    pub link_bps: u64,
    /// Round-trip time with empty queues.
    pub rtt: Duration,
    /// The retransmission timeout a collapsed flow waits for (200 ms on Linux).
    pub rto: Duration,
    /// Partial-RTO factor of Equation 4, `[0, 1]` (1 = Equation 2).
    pub alpha: f64,
    /// Buffer of the client's switch port, bytes.
    pub buffer: u64,
    /// Bytes per sender (SRU).
    pub sru: u64,
    /// Initial congestion window, bytes.
    pub initial_window: u64,
}

/// The onset (Equation 3) and the goodput curve at each sender count.
pub fn predict(input: &ModelInput, senders: &[u64]) -> Result<(u64, Vec<CurvePoint>), ModelError> {
    if input.sru == 0 {
        return Err(ModelError::Zero("sru"));
    }
    let onset = onset_senders(input.buffer, input.sru, input.initial_window)?;
    let points = senders
        .iter()
        .map(|&n| {
            let before = goodput_before_incast_bps(input.sru, n, input.rtt, input.link_bps)?;
            let incast = goodput_bps(input.sru, n, input.rtt, input.rto, input.alpha, input.link_bps)?;
            let predicted = if n < onset { before } else { incast };
            Ok(CurvePoint {
                senders: n,
                before_bps: before,
                incast_bps: incast,
                predicted_bps: predicted,
            })
        })
        .collect::<Result<_, ModelError>>()?;
    Ok((onset, points))
}

/// Starting values of K, B and C for a port, derived as the [module docs](self) explain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recommendation {
    /// K.
    pub max_senders: u32,
    /// B, bytes.
    pub inflight_budget: u64,
    /// C, bytes.
    pub chunk: u64,
    /// Receive-window cap per connection, bytes.
    pub window_cap: u32,
    /// Bytes the path itself holds, `link * rtt`.
    pub bdp: u64,
}

impl Recommendation {
    /// A policy with these values and the other fields at their defaults.
    pub fn to_policy(&self) -> Result<Policy, ModelError> {
        Ok(Policy::builder()
            .max_senders(self.max_senders)
            .inflight_budget(self.inflight_budget)
            .grant_size(GrantSize::Chunk { bytes: self.chunk })
            .window_cap(WindowCap::Fixed { bytes: self.window_cap })
            .build()?)
    }
}

/// K, B and C for a client port of `link_bps` bits per second and `switch_buffer` bytes, with
/// round-trip time `rtt` and segment payload `mss` (use [`MSS_1448`]).
///
/// ```
/// use std::time::Duration;
/// use incast_core::model::{recommend, MSS_1448};
/// // 1 Gbit/s, 50 us, 32 KiB: B = 0.8 * 32 KiB + 6250 B, in whole segments.
/// let r = recommend(1_000_000_000, Duration::from_micros(50), 32 * 1024, MSS_1448)?;
/// assert_eq!(r.inflight_budget, 22 * 1448);
/// assert_eq!((r.max_senders, r.chunk), (4, 5 * 1448));
/// let policy = r.to_policy()?;
/// assert_eq!(policy.inflight_budget(), r.inflight_budget);
/// # Ok::<(), incast_core::model::ModelError>(())
/// ```
pub fn recommend(link_bps: u64, rtt: Duration, switch_buffer: u64, mss: u64) -> Result<Recommendation, ModelError> {
    if link_bps == 0 {
        return Err(ModelError::Zero("link_bps"));
    }
    if mss == 0 {
        return Err(ModelError::Zero("mss"));
    }
    let bdp = (link_bps as f64 / 8.0 * rtt.as_secs_f64()) as u64;
    let raw = (switch_buffer as f64 * RECOMMENDED_BUFFER_FILL) as u64 + bdp;
    let budget = (raw / mss).max(2) * mss;
    let chunk = (budget / RECOMMENDED_GRANTS_IN_FLIGHT / mss).max(1) * mss;
    let max_senders = (budget / chunk).clamp(1, u64::from(u32::MAX)) as u32;
    let window_cap = chunk.clamp(u64::from(MIN_WINDOW_CAP), u64::from(MAX_WINDOW_CAP)) as u32;
    Ok(Recommendation {
        max_senders,
        inflight_budget: budget,
        chunk,
        window_cap,
        bdp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// chen-2012 Table 1, columns 16, 32, 64 and 128 KB (decimal KB, see the module docs).
    #[test]
    fn table_1_slow_start_windows() {
        let table: [(u64, &[u64]); 4] = [
            (16_000, &[1448, 2896, 5792, 5864]),
            (32_000, &[1448, 2896, 5792, 11584, 10280]),
            (64_000, &[1448, 2896, 5792, 11584, 23168, 19112]),
            (128_000, &[1448, 2896, 5792, 11584, 23168, 46336, 36776]),
        ];
        for (block, windows) in table {
            assert_eq!(slow_start_windows(block, MSS_1448).unwrap(), windows, "block {block}");
            assert_eq!(windows.iter().sum::<u64>(), block);
        }
        assert_eq!(slow_start_windows(0, MSS_1448).unwrap(), Vec::<u64>::new());
        assert_eq!(slow_start_windows(u64::MAX, 1).unwrap().len(), 64);
        assert_eq!(slow_start_windows(10, 0), Err(ModelError::Zero("initial_window")));
    }

    /// Equation 3 with a 64 KB (65,536-byte) port: 7 senders for 32 KB blocks, 4 for 64 KB,
    /// and 13 for 16 KB (the paper's text says 23; see the module docs).
    #[test]
    fn equation_3_onsets() {
        let buf = 64 * 1024;
        assert_eq!(onset_senders(buf, 16_000, MSS_1448).unwrap(), 13);
        assert_eq!(onset_senders(buf, 32_000, MSS_1448).unwrap(), 7);
        assert_eq!(onset_senders(buf, 64_000, MSS_1448).unwrap(), 4);
        assert_eq!(onset_senders(buf, 128_000, MSS_1448).unwrap(), 3);
        // The worked example: 12 of the 5864-byte windows need 70,368 bytes > 64 KB.
        assert!(12 * largest_slow_start_window(16_000, MSS_1448).unwrap() > buf);
        assert!(11 * largest_slow_start_window(16_000, MSS_1448).unwrap() < buf);
        assert_eq!(onset_senders(buf, 0, MSS_1448), Err(ModelError::Zero("block")));
    }

    #[test]
    fn equations_1_2_4() {
        let (rtt, rto, link) = (Duration::from_millis(1), Duration::from_millis(200), 1_000_000_000);
        // Equation 1 approaches the link rate as N grows; Equation 2 collapses.
        let g1 = goodput_before_incast_bps(256_000, 64, rtt, link).unwrap();
        let g2 = goodput_incast_bps(256_000, 64, rtt, rto, link).unwrap();
        assert!(g1 > 0.99 * 1e9 * 131.072 / 132.072 - 1.0 && g1 < 1e9);
        assert!(g1 / g2 > 2.0);
        let small = goodput_incast_bps(64_000, 8, rtt, rto, link).unwrap();
        assert!(small < 25e6, "64 KB x 8 after an RTO: {small}");
        // alpha scales the RTO term.
        let g4 = goodput_bps(1_024_000, 16, rtt, rto, 0.6, link).unwrap();
        let expect = 1_024_000.0 * 8.0 / (0.12 + 0.001 + 1_024_000.0 * 8.0 * 16.0 / 1e9) * 16.0;
        assert!((g4 - expect).abs() < 1e-3 * expect);
        assert_eq!(goodput_bps(1, 1, rtt, rto, 1.5, link), Err(ModelError::Alpha(1.5)));
        assert_eq!(goodput_bps(0, 1, rtt, rto, 1.0, link), Err(ModelError::Zero("sru")));
        assert_eq!(goodput_bps(1, 0, rtt, rto, 1.0, link), Err(ModelError::Zero("senders")));
        assert_eq!(goodput_bps(1, 1, rtt, rto, 1.0, 0), Err(ModelError::Zero("link_bps")));
    }

    #[test]
    fn predict_switches_at_onset() {
        let input = ModelInput {
            link_bps: 1_000_000_000,
            rtt: Duration::from_micros(100),
            rto: Duration::from_millis(200),
            alpha: 1.0,
            buffer: 64 * 1024,
            sru: 32_000,
            initial_window: MSS_1448,
        };
        let (onset, pts) = predict(&input, &[1, 6, 7, 64]).unwrap();
        assert_eq!(
            predict(&ModelInput { sru: 0, ..input }, &[1]),
            Err(ModelError::Zero("sru"))
        );
        assert_eq!(onset, 7);
        assert_eq!(pts[1].predicted_bps, pts[1].before_bps);
        assert_eq!(pts[2].predicted_bps, pts[2].incast_bps);
        assert!(pts[2].predicted_bps < pts[1].predicted_bps / 10.0);
    }

    #[test]
    fn recommend_scales_with_buffer_and_bdp() {
        let r = recommend(10_000_000_000, Duration::from_micros(20), 256 * 1024, MSS_1448).unwrap();
        assert_eq!(r.bdp, 25_000);
        assert!(r.inflight_budget <= 256 * 1024 * 8 / 10 + 25_000);
        assert!(r.inflight_budget % MSS_1448 == 0 && r.chunk % MSS_1448 == 0);
        assert_eq!(
            r.max_senders as u64 * r.chunk,
            r.inflight_budget - r.inflight_budget % r.chunk
        );
        // Tiny buffers still give a usable policy of two segments.
        let t = recommend(1_000_000, Duration::ZERO, 0, MSS_1448).unwrap();
        assert_eq!((t.inflight_budget, t.chunk, t.max_senders), (2 * MSS_1448, MSS_1448, 2));
        t.to_policy().unwrap();
        assert_eq!(recommend(0, Duration::ZERO, 1, 1), Err(ModelError::Zero("link_bps")));
    }
}
