//! [`FragmentStream`]: a read that yields its fragments as they complete.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;
use tokio::sync::mpsc;

use super::{CompletedFragment, FanInError, ReadReport};

type Run<'a> = Pin<Box<dyn Future<Output = Result<ReadReport, FanInError>> + Send + 'a>>;

/// The fragments of one read, in completion order ([`crate::Client::fan_in_read_stream`]).
///
/// Polling the stream drives the read; nothing happens between polls but what the kernel
/// buffers. The stream yields every fragment once, whole and checked, then ends; or it
/// yields one `Err` and ends. Dropping it cancels the read.
pub struct FragmentStream<'a> {
    run: Option<Run<'a>>,
    rx: mpsc::UnboundedReceiver<CompletedFragment>,
    report: Option<ReadReport>,
}

impl std::fmt::Debug for FragmentStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FragmentStream")
            .field("running", &self.run.is_some())
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

impl<'a> FragmentStream<'a> {
    pub(super) fn new(run: Run<'a>, rx: mpsc::UnboundedReceiver<CompletedFragment>) -> Self {
        Self {
            run: Some(run),
            rx,
            report: None,
        }
    }

    /// The read's report, once the stream has ended without an error.
    pub fn report(&self) -> Option<&ReadReport> {
        self.report.as_ref()
    }
}

impl Stream for FragmentStream<'_> {
    type Item = Result<CompletedFragment, FanInError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // Fragments already handed over come first; the read runs only when there are none.
        if let Ok(f) = self.rx.try_recv() {
            return Poll::Ready(Some(Ok(f)));
        }
        let Some(run) = self.run.as_mut() else {
            // Ended: the rest of what the read handed over, then the end.
            return Poll::Ready(self.rx.try_recv().ok().map(Ok));
        };
        match run.as_mut().poll(cx) {
            Poll::Pending => match self.rx.try_recv() {
                Ok(f) => Poll::Ready(Some(Ok(f))),
                Err(_) => Poll::Pending,
            },
            Poll::Ready(result) => {
                self.run = None;
                match result {
                    Ok(report) => {
                        self.report = Some(report);
                        // Every fragment was sent before the read returned.
                        Poll::Ready(self.rx.try_recv().ok().map(Ok))
                    }
                    Err(e) => {
                        // The error ends the stream, as documented: fragments the read
                        // handed over but the caller has not taken are dropped.
                        self.rx.close();
                        while self.rx.try_recv().is_ok() {}
                        Poll::Ready(Some(Err(e)))
                    }
                }
            }
        }
    }
}
