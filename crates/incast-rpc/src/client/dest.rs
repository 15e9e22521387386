//! Where a read's bytes land: one block the read allocates, the caller's buffer, or one
//! buffer per fragment handed to the caller as each fragment completes.
//!
//! Over TCP the driver reads a `Data` frame's payload straight into the region this gives,
//! whichever the destination: the caller's buffer costs no copy beyond the kernel's, and a
//! streamed fragment is frozen into [`Bytes`] without one. (QUIC copies once, out of quinn's
//! buffers, as for a block.)

use std::ops::Range;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use incast_core::{ServerId, Stripe};
use tokio::sync::mpsc;

/// One fragment of a streamed read ([`crate::Client::fan_in_read_stream`]), whole and
/// checked: every byte arrived and, when the server sent one, its CRC32C matched.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompletedFragment {
    /// Index of the fragment in the stripe.
    pub index: usize,
    /// Where it belongs in the block. For a fragment of unknown length the start is its
    /// place in the stripe laid out at the maxima ([`incast_core::Stripe::block_range`]) and
    /// the length its true length.
    pub block_range: Range<u64>,
    /// The server whose bytes were kept (a replica, if the read moved there); `None` for an
    /// empty fragment, which no server is asked for.
    pub server: Option<ServerId>,
    /// Its bytes: exactly `block_range`'s length.
    pub data: Bytes,
    /// Time from the start of the read to its completion.
    pub at: Duration,
}

#[derive(Debug)]
pub(super) enum Dest<'a> {
    /// One block, allocated by the read and returned ([`crate::Client::fan_in_read`]).
    Block(Vec<u8>),
    /// The caller's buffer, exactly the block's length ([`crate::Client::fan_in_read_into`]).
    Caller(&'a mut [u8]),
    /// One buffer per fragment.
    Fragments {
        bufs: Vec<Buf>,
        starts: Vec<u64>,
        tx: mpsc::UnboundedSender<CompletedFragment>,
    },
}

/// A streamed fragment's buffer.
#[derive(Debug)]
pub(super) enum Buf {
    /// Its length is not known yet: nothing is allocated for a maximum.
    Unsized,
    /// Receiving.
    Open(BytesMut),
    /// Handed over.
    Taken,
}

impl<'a> Dest<'a> {
    /// Buffers for streaming `stripe`'s fragments to `tx` (allocated now for the fragments
    /// of known length, once their length is announced for the others).
    pub(super) fn fragments(stripe: &Stripe, tx: mpsc::UnboundedSender<CompletedFragment>) -> Self {
        Dest::Fragments {
            bufs: stripe
                .fragments()
                .iter()
                .map(|f| match f.known_len() {
                    Some(len) => Buf::Open(BytesMut::zeroed(len as usize)),
                    None => Buf::Unsized,
                })
                .collect(),
            starts: (0..stripe.len()).map(|i| stripe.block_range(i).start).collect(),
            tx,
        }
    }

    /// The `len` bytes at `block_offset` of the block, inside fragment `fragment`. The
    /// scheduler only hands out offsets inside the fragment of the grant; a fragment already
    /// handed over is complete, so no grant of it is live and nothing asks for it.
    pub(super) fn region(&mut self, fragment: usize, block_offset: u64, len: usize) -> &mut [u8] {
        match self {
            Dest::Block(b) => &mut b[block_offset as usize..][..len],
            Dest::Caller(b) => &mut b[block_offset as usize..][..len],
            Dest::Fragments { bufs, starts, .. } => {
                let at = (block_offset - starts[fragment]) as usize;
                let Buf::Open(buf) = &mut bufs[fragment] else {
                    unreachable!("bytes arrive only for fragments of known length, not yet handed over")
                };
                &mut buf[at..][..len]
            }
        }
    }

    /// Fragment `fragment`'s length is now known (announced by its server, and checked
    /// against its maximum by the scheduler): allocates its buffer.
    pub(super) fn set_len(&mut self, fragment: usize, len: u64) {
        if let Dest::Fragments { bufs, .. } = self {
            if matches!(bufs[fragment], Buf::Unsized) {
                bufs[fragment] = Buf::Open(BytesMut::zeroed(len as usize));
            }
        }
    }

    /// Fragment `fragment` is whole and checked: hand it over, if this destination streams.
    pub(super) fn complete(&mut self, fragment: usize, server: Option<ServerId>, at: Duration) {
        if let Dest::Fragments { bufs, starts, tx } = self {
            let buf = match std::mem::replace(&mut bufs[fragment], Buf::Taken) {
                Buf::Open(buf) => Some(buf),
                // Complete with a length never allocated for: 0 bytes.
                Buf::Unsized => Some(BytesMut::new()),
                Buf::Taken => None,
            };
            if let Some(buf) = buf {
                let start = starts[fragment];
                let data = buf.freeze();
                // A receiver that hung up only misses fragments it no longer wants.
                let _ = tx.send(CompletedFragment {
                    index: fragment,
                    block_range: start..start + data.len() as u64,
                    server,
                    data,
                    at,
                });
            }
        }
    }

    /// The read completed: hands over what was never granted (empty fragments).
    pub(super) fn complete_rest(&mut self, at: Duration) {
        let n = match self {
            Dest::Fragments { bufs, .. } => bufs.len(),
            _ => 0,
        };
        for i in 0..n {
            self.complete(i, None, at);
        }
    }
}
