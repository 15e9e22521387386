//! Telemetry through [`tracing`](https://docs.rs/tracing), compiled out without the cargo
//! feature `tracing` (on by default).
//!
//! What a service sees (all inside one `fan_in_read` span per read, at `INFO`, with the
//! stripe's first key, its fragments, distinct servers and bytes; the span records the read's
//! elapsed time, grants and hedges when it ends):
//! - `DEBUG` events: hedges and retries issued, requests that failed and why, connections
//!   opened (with the local port and the time the connect took), reset (with the local port)
//!   or lost, port budget changes (with their cause: growth, delay, loss, stalls or a
//!   ceiling, and whether the budget is in slow start), and the read's end;
//! - an `INFO` event when a read fails, with the error.
//!
//! Nothing is emitted per byte or per frame: the costliest path is one comparison per event
//! of the port's receiver (has the budget moved?). The overhead is measured by the facade's
//! `cargo bench --bench telemetry` (with `--no-default-features` for the feature off).
//! Measured (2-core VM, loopback, 16 servers, interleaved reads): a subscriber at INFO adds
//! 1.8% to a 64 KiB read (250 us) and 0.9% to a 4 MiB read; at DEBUG 2.6% and 1.0%. With no
//! subscriber, the feature on and off are within the run-to-run noise (about 5%).

/// `event!(debug, ...)` is `tracing::debug!(...)` with the feature and nothing without.
macro_rules! event {
    ($level:ident, $($arg:tt)+) => {{
        #[cfg(feature = "tracing")]
        {
            ::tracing::$level!($($arg)+);
        }
    }};
}
pub(crate) use event;

#[cfg(feature = "tracing")]
pub(crate) use spans::{read_ended, read_span};

#[cfg(feature = "tracing")]
mod spans {
    use incast_core::Stripe;
    use tracing::field::Empty;
    use tracing::Span;

    use crate::client::{FanInError, ReadReport};

    /// The span of one read of `stripe`.
    pub(crate) fn read_span(stripe: &Stripe) -> Span {
        let key = stripe.fragments().first().map_or("", |f| f.key());
        let span = tracing::info_span!(
            "fan_in_read",
            key,
            fragments = stripe.len(),
            servers = Empty,
            bytes = stripe.block_len(),
            elapsed_us = Empty,
            grants = Empty,
            hedges = Empty,
        );
        if !span.is_disabled() {
            let mut servers: Vec<_> = stripe.fragments().iter().map(|f| f.server()).collect();
            servers.sort_unstable();
            servers.dedup();
            span.record("servers", servers.len());
        }
        span
    }

    /// Records how the read in `span` ended.
    pub(crate) fn read_ended(span: &Span, result: &Result<(), FanInError>, report: &ReadReport) {
        if span.is_disabled() {
            return;
        }
        span.record("elapsed_us", report.elapsed.as_micros() as u64);
        span.record("grants", report.stats.grants);
        span.record("hedges", report.stats.hedges);
        let _in = span.enter();
        match result {
            Ok(()) => tracing::debug!(
                hedges_won = report.stats.hedges_won,
                hedges_spurious = report.stats.hedges_spurious,
                retries = report.stats.retries,
                kernel_rtos = report.kernel_rtos,
                earlier_reads_rtos = report.late_totals().0,
                "read done"
            ),
            Err(e) => tracing::info!(error = %e, "read failed"),
        }
        // Where a read's time went, fragment by fragment (trace level: one event each).
        if tracing::enabled!(tracing::Level::TRACE) {
            let us = |d: Option<std::time::Duration>| d.map_or(-1, |d| d.as_micros() as i64);
            for (i, f) in report.fragments.iter().enumerate() {
                tracing::trace!(
                    fragment = i,
                    granted_us = us(f.granted),
                    first_byte_us = us(f.first_byte),
                    done_us = us(f.done),
                    grants = f.grants,
                    hedges = f.hedges,
                    retransmits = f.retransmits,
                    kernel_rtos = f.kernel_rtos,
                    "fragment"
                );
            }
        }
    }
}
