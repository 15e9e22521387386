//! The wire format: small, versioned, binary frames over one TCP connection.
//!
//! Every frame is a 16-byte header and a payload, all integers big-endian:
//!
//! ```text
//!  0        1        2                 4                                 8                                16
//!  +--------+--------+--------+--------+--------+--------+--------+--------+----- ... -----+
//!  |version | kind   | flags (u16)     | payload length (u32)              | request id (u64)  |
//!  +--------+--------+--------+--------+--------+--------+--------+--------+----- ... -----+
//! ```
//!
//! | kind | direction | payload |
//! |---|---|---|
//! | 1 `Request` | client to server | object offset `u64`, length `u64`, key length `u16`, key (UTF-8), then the pacing rate `u64` in bytes per second (if flag bit 0) |
//! | 2 `Cancel` | client to server | empty: stop sending request `id` |
//! | 3 `Data` | server to client | bytes of request `id`, in order, at most [`MAX_DATA_PAYLOAD`] per frame; flag bit 15 says the other 15 bits are the server's hold in microseconds ([`Header::hold`]) |
//! | 4 `End` | server to client | CRC32C `u32` (if flag bit 0), then the server socket's TCP counters (if flag bit 1): RTT us, retransmits (less those the client reported as duplicates), RTOs, RTO recoveries, RTO time ms, five `u32`; then (if flag bit 3) the socket's retransmits and RTOs when the server began this response, two `u32` |
//! | 5 `Error` | server to client | code `u16`, message (UTF-8); id 0 means the whole connection |
//! | 6 `OpenRequest` | client to server | object offset `u64`, length `u64`, size limit `u64`, key length `u16`, query length `u16`, key (UTF-8), query (if flag bit 1), then the pacing rate `u64` (if flag bit 0) |
//! | 7 `Length` | server to client | the size `u64` of the object (or of the query's answer) that request `id` reads |
//! | 8 `StoreTime` | server to client | microseconds `u32` of the hold of request `id` that its store took ([`Frame::StoreTime`]); sent just before the response's first `Data` frame |
//!
//! An `OpenRequest` reads a fragment whose length the client does not know
//! ([`incast_core::Fragment::up_to`], [`incast_core::Fragment::query`]): bytes `offset..offset +
//! length` of the object `key`, or of the answer of the server's query handler to the query
//! (at most [`MAX_QUERY_LEN`] bytes), as far as they exist. The server answers with a
//! `Length` frame first, then `Data` frames for the part of the range that exists (possibly
//! none), then `End`. An object or answer larger than the size limit is refused with an
//! `Error` (code `TooLarge`) instead; the client checks the announced size against the limit
//! too, so a server that lies about it fails that request, typed, and nothing more.
//!
//! A request with a pacing rate asks the server to send that response no faster (TCP's own
//! pacing, `SO_MAX_PACING_RATE`): the receiver spreads what many senders send at once.
//!
//! A server answers the requests of one connection in order: zero or more `Data` frames whose
//! lengths add up to the requested length (for an `OpenRequest`: a `Length`, then as much of
//! the range as exists), then `End`; or an `Error` for that id. After a
//! `Cancel` it may stop early: the `End` then carries flag bit 2 (cancelled) and the data
//! sent so far is short.
//!
//! **Counters at a response's start.** An `End` is written when the response's last byte
//! is, so an RTO that repairs a lost tail fires after it: the `End` cannot count it, and the
//! connection's next `End` does. Without more, that next response (often another read's)
//! looks as if its socket took the RTO. Flag bit 3 adds the socket's counters from when the
//! server began the response: what changed before that belongs to the earlier responses on
//! the connection, what changed after to this one (see [`StartCounters`]). The `End` payload
//! is then 32 bytes instead of 24; a client older than this flag refuses it (`BadLength`).
//!
//! **The server's hold.** A response's first `Data` frame may carry, in its flags, how long
//! the server held the request: from when its header reached the server's kernel (the
//! socket's receive timestamp), or from the end of the write of the response ahead of it on
//! the connection if that came later, to that frame's write. That is host time, not the
//! network's; the client takes it out of the first byte's time before it reads a queue
//! into it. It costs no byte: flag bit 15 says the low 15 bits are the hold in whole
//! microseconds, up to [`MAX_HOLD_US`] (a longer hold is sent as that). A client older
//! than this flag refuses such a frame (`UnknownFlags`).
//!
//! **The store's part of the hold.** A hold is the server host's CPU and queue of other
//! requests as much as its store's time, and only the store's time says the server will
//! hold the next request as long (a disk, an object store). So where the store took
//! [`MIN_STORE_TIME_US`] or more of a hold (from the first poll of its read that found it
//! not ready to its answer: a store that answers at its first poll, one in memory, took
//! none), a `StoreTime` frame with that part comes just before the `Data` frame that
//! carries the hold; a response whose hold comes without one had a store that answered at
//! once. A client older than this frame refuses it (`UnknownKind`).
//!
//! **Bounds before allocation.** [`Header::decode`] rejects a frame whose payload length
//! exceeds the bound of its kind ([`MAX_DATA_PAYLOAD`] for data, [`MAX_OPEN_REQUEST_PAYLOAD`]
//! for an `OpenRequest`, [`MAX_CONTROL_PAYLOAD`] for everything else, exact sizes for
//! `Cancel`, `End` and `Length`) before a single payload byte is read,
//! so a peer can never make the other side allocate what it asks for. Keys are at most
//! [`MAX_KEY_LEN`] bytes, requests at most [`MAX_REQUEST_LEN`] bytes. Every violation is a
//! [`WireError`]; the connection is then closed.

use bytes::{BufMut, Bytes};
pub use incast_core::stripe::MAX_QUERY_LEN;

/// Protocol version carried by every frame.
pub const VERSION: u8 = 1;
/// Header length in bytes.
pub const HEADER_LEN: usize = 16;
/// Longest object key, in bytes (1 KiB).
pub const MAX_KEY_LEN: usize = 1024;
/// Largest length one request may ask for (1 GiB).
pub const MAX_REQUEST_LEN: u64 = 1 << 30;
/// Largest payload of one `Data` frame (1 MiB).
pub const MAX_DATA_PAYLOAD: u32 = 1 << 20;
/// Largest payload of any other frame (2 KiB: a request with the longest key fits).
pub const MAX_CONTROL_PAYLOAD: u32 = 2048;
/// Longest error message, in bytes.
pub const MAX_ERROR_MESSAGE: usize = 1024;
/// Payload length of an `End` frame without the counters at the response's start.
pub const END_PAYLOAD: u32 = 24;
/// Payload length of an `End` frame with the counters at the response's start (flag bit 3).
pub const END_PAYLOAD_WITH_START: u32 = END_PAYLOAD + 8;
/// Payload length of a `Length` frame.
pub const LENGTH_PAYLOAD: u32 = 8;
/// Payload length of a `StoreTime` frame.
pub const STORE_TIME_PAYLOAD: u32 = 4;
/// The least store time a server sends in a `StoreTime` frame, in microseconds (50 us: a
/// store in memory answers in a few; the client reads a hold without one as a store that
/// took nothing).
pub const MIN_STORE_TIME_US: u32 = 50;
/// Largest payload of an `OpenRequest` (the longest key and query, and a pace: about 17 KiB).
pub const MAX_OPEN_REQUEST_PAYLOAD: u32 = (OPEN_FIXED + MAX_KEY_LEN + MAX_QUERY_LEN + PACE_LEN) as u32;

const END_HAS_CRC: u16 = 1;
const END_HAS_COUNTERS: u16 = 2;
const END_CANCELLED: u16 = 4;
const END_HAS_START: u16 = 8;
/// `Data` flag bit 15: the other 15 bits are the server's hold ([`Header::hold`]).
const DATA_HAS_HOLD: u16 = 0x8000;
/// The longest hold a `Data` frame carries, in microseconds (32.767 ms); a longer hold is
/// sent as this.
pub const MAX_HOLD_US: u16 = 0x7FFF;
const REQUEST_HAS_PACE: u16 = 1;
const REQUEST_FIXED: usize = 18;
const OPEN_HAS_QUERY: u16 = 2;
const OPEN_FIXED: usize = 28;
const PACE_LEN: usize = 8;

/// The kind of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Client asks for a range.
    Request = 1,
    /// Client withdraws a request.
    Cancel = 2,
    /// Server sends bytes.
    Data = 3,
    /// Server finished a request.
    End = 4,
    /// Server refuses a request or the connection.
    Error = 5,
    /// Client asks for a range of an object or query answer whose size it does not know.
    OpenRequest = 6,
    /// Server announces the size of what an `OpenRequest` reads.
    Length = 7,
    /// Server says how much of a response's hold its store took.
    StoreTime = 8,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Kind::Request,
            2 => Kind::Cancel,
            3 => Kind::Data,
            4 => Kind::End,
            5 => Kind::Error,
            6 => Kind::OpenRequest,
            7 => Kind::Length,
            8 => Kind::StoreTime,
            _ => return None,
        })
    }

    /// Allowed payload lengths: `(min, max)`.
    fn payload_bounds(self) -> (u32, u32) {
        match self {
            Kind::Request => (REQUEST_FIXED as u32, (REQUEST_FIXED + MAX_KEY_LEN + PACE_LEN) as u32),
            Kind::Cancel => (0, 0),
            Kind::Data => (0, MAX_DATA_PAYLOAD),
            Kind::End => (END_PAYLOAD, END_PAYLOAD_WITH_START),
            Kind::Error => (2, MAX_CONTROL_PAYLOAD),
            Kind::OpenRequest => (OPEN_FIXED as u32, MAX_OPEN_REQUEST_PAYLOAD),
            Kind::Length => (LENGTH_PAYLOAD, LENGTH_PAYLOAD),
            Kind::StoreTime => (STORE_TIME_PAYLOAD, STORE_TIME_PAYLOAD),
        }
    }
}

/// Why bytes are not a valid frame. The connection that sent them is closed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The peer speaks another version.
    #[error("unsupported protocol version {version} (this side speaks {VERSION})")]
    UnsupportedVersion {
        /// The version received.
        version: u8,
    },
    /// The kind byte names no frame.
    #[error("unknown frame kind {kind}")]
    UnknownKind {
        /// The byte received.
        kind: u8,
    },
    /// The payload length is outside the bounds of its kind.
    #[error("{kind:?} frame with a {len}-byte payload: allowed {min}..={max}")]
    BadLength {
        /// The frame kind.
        kind: Kind,
        /// The announced length.
        len: u32,
        /// Smallest allowed.
        min: u32,
        /// Largest allowed.
        max: u32,
    },
    /// A request's key length disagrees with its payload length.
    #[error("request key of {key_len} bytes does not match its {payload}-byte payload")]
    KeyLength {
        /// Key length announced.
        key_len: usize,
        /// Payload length.
        payload: usize,
    },
    /// A request asks for a pacing rate of 0 bytes per second.
    #[error("request with a pacing rate of 0 bytes per second")]
    ZeroPace,
    /// A request asks for more than [`MAX_REQUEST_LEN`] bytes, or its range overflows.
    #[error("request for {len} bytes at offset {offset}: at most {max} bytes, and offset + length must fit 64 bits")]
    RequestTooLarge {
        /// Offset requested.
        offset: u64,
        /// Length requested.
        len: u64,
        /// [`MAX_REQUEST_LEN`].
        max: u64,
    },
    /// An `OpenRequest`'s key and query lengths disagree with its payload length, or a query
    /// is longer than [`MAX_QUERY_LEN`].
    #[error("open request with a {key_len}-byte key and a {query_len}-byte query does not match its {payload}-byte payload (queries: at most {MAX_QUERY_LEN} bytes)")]
    QueryLength {
        /// Key length announced.
        key_len: usize,
        /// Query length announced.
        query_len: usize,
        /// Payload length.
        payload: usize,
    },
    /// A text field is not UTF-8.
    #[error("{field} is not valid UTF-8")]
    Utf8 {
        /// Which field.
        field: &'static str,
    },
    /// Flags that the kind does not define.
    #[error("{kind:?} frame with unknown flags {flags:#06x}")]
    UnknownFlags {
        /// The frame kind.
        kind: Kind,
        /// The flags received.
        flags: u16,
    },
    /// A valid frame that this side never receives (a server sent a `Request`, a client a
    /// `Data`).
    #[error("unexpected {kind:?} frame in this direction")]
    UnexpectedKind {
        /// The frame kind.
        kind: Kind,
    },
    /// Request id 0 is reserved for connection-wide errors.
    #[error("{kind:?} frame with request id 0 (reserved)")]
    ZeroId {
        /// The frame kind.
        kind: Kind,
    },
}

/// A decoded header: everything needed to read the payload, already bounds-checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Frame kind.
    pub kind: Kind,
    /// Kind-specific flags.
    pub flags: u16,
    /// Payload length, within the bounds of `kind`.
    pub len: u32,
    /// Request id (0 only for connection-wide errors).
    pub id: u64,
}

impl Header {
    /// Decodes and checks a header; no payload byte has been read yet.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Self, WireError> {
        if b[0] != VERSION {
            return Err(WireError::UnsupportedVersion { version: b[0] });
        }
        let kind = Kind::from_u8(b[1]).ok_or(WireError::UnknownKind { kind: b[1] })?;
        let flags = u16::from_be_bytes([b[2], b[3]]);
        let len = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        let id = u64::from_be_bytes(b[8..16].try_into().expect("8 bytes"));
        let (min, max) = kind.payload_bounds();
        if len < min || len > max {
            return Err(WireError::BadLength { kind, len, min, max });
        }
        let allowed = match kind {
            Kind::End => END_HAS_CRC | END_HAS_COUNTERS | END_CANCELLED | END_HAS_START,
            Kind::Request => REQUEST_HAS_PACE,
            Kind::OpenRequest => REQUEST_HAS_PACE | OPEN_HAS_QUERY,
            // A hold's value fills the low bits, so they are allowed only beside its flag.
            Kind::Data if flags & DATA_HAS_HOLD != 0 => u16::MAX,
            _ => 0,
        };
        if flags & !allowed != 0 {
            return Err(WireError::UnknownFlags { kind, flags });
        }
        if kind == Kind::End {
            // The length follows the flag exactly: 24 bytes without the start counters, 32 with.
            let want = if flags & END_HAS_START != 0 {
                END_PAYLOAD_WITH_START
            } else {
                END_PAYLOAD
            };
            if len != want {
                return Err(WireError::BadLength {
                    kind,
                    len,
                    min: want,
                    max: want,
                });
            }
        }
        if id == 0 && kind != Kind::Error {
            return Err(WireError::ZeroId { kind });
        }
        Ok(Self { kind, flags, len, id })
    }

    /// The header of a `Data` frame of `len` bytes of request `id`, carrying the server's
    /// `hold` if given (whole microseconds, at most [`MAX_HOLD_US`]: longer holds are sent
    /// as that).
    pub fn data(id: u64, len: u32, hold: Option<std::time::Duration>) -> Self {
        let flags = hold.map_or(0, |h| DATA_HAS_HOLD | h.as_micros().min(u128::from(MAX_HOLD_US)) as u16);
        Self {
            kind: Kind::Data,
            flags,
            len,
            id,
        }
    }

    /// The server's hold a `Data` frame carries (flag bit 15): how long the server had the
    /// request before it wrote this, its first data, counted from when the request's header
    /// reached the server's kernel (its receive timestamp), or from when the response ahead
    /// of it on the connection was written if that came later (the time it queued behind
    /// that response is the connection's, not the server's). The client takes it out of the first byte's time
    /// to tell the network's queue from the hosts' (see `incast_core::receiver`, *Host
    /// time is not the port's queue*). `None` for other frames, and from servers that do
    /// not time their requests (TLS, QUIC).
    pub fn hold(&self) -> Option<std::time::Duration> {
        (self.kind == Kind::Data && self.flags & DATA_HAS_HOLD != 0)
            .then(|| std::time::Duration::from_micros(u64::from(self.flags & MAX_HOLD_US)))
    }

    /// Whether [`Header::hold`] is the cap, [`MAX_HOLD_US`]: the server held the request at
    /// least that long, perhaps much longer (a slow store).
    pub fn hold_capped(&self) -> bool {
        self.hold() == Some(std::time::Duration::from_micros(u64::from(MAX_HOLD_US)))
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = VERSION;
        b[1] = self.kind as u8;
        b[2..4].copy_from_slice(&self.flags.to_be_bytes());
        b[4..8].copy_from_slice(&self.len.to_be_bytes());
        b[8..16].copy_from_slice(&self.id.to_be_bytes());
        b
    }
}

/// Counters of the server's socket, from TCP_INFO, sent with every `End`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpCounters {
    /// Smoothed RTT in microseconds.
    pub rtt_us: u32,
    /// Segments retransmitted over the connection's life (`tcpi_total_retrans`), less those
    /// the peer reported as duplicates (`tcpi_dsack_dups`; see
    /// [`TcpInfo::lost_retransmits`](crate::TcpInfo::lost_retransmits)). It can fall back
    /// when a duplicate is reported after the retransmit was counted.
    pub retransmits: u32,
    /// Retransmission timeouts (`tcpi_total_rto`, Linux 6.7+).
    pub rtos: u32,
    /// Recoveries from RTOs (`tcpi_total_rto_recoveries`, Linux 6.7+).
    pub rto_recoveries: u32,
    /// Time spent in RTO recovery, ms (`tcpi_total_rto_time`, Linux 6.7+).
    pub rto_time_ms: u32,
}

/// A server socket's counters when the server began a response ([`Frame::End`]'s
/// `at_start`), from the same TCP_INFO fields as [`TcpCounters`].
///
/// Why: the counters an `End` carries are read when the response's last byte is written,
/// before its tail has been acknowledged. An RTO that repairs a lost tail fires after that,
/// so it shows first in the connection's next `End`. With the counters at the next
/// response's start, a client tells the two apart: what changed between the previous `End`
/// and this start belongs to the earlier responses (their tails), what changed from this
/// start to this `End` to this response. A response that starts while an earlier tail is
/// still unrepaired queues behind it (TCP delivers in order), so an RTO that fires then
/// counts for this one: it waited for it too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StartCounters {
    /// Segments retransmitted over the connection's life, less duplicates, as in
    /// [`TcpCounters::retransmits`].
    pub retransmits: u32,
    /// Retransmission timeouts over the connection's life (`tcpi_total_rto`, Linux 6.7+).
    pub rtos: u32,
}

impl StartCounters {
    /// The start counters of a socket whose counters are `c`.
    pub fn of(c: &TcpCounters) -> Self {
        Self {
            retransmits: c.retransmits,
            rtos: c.rtos,
        }
    }
}

/// Error codes of `Error` frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// No object with that key.
    NotFound,
    /// The range lies (partly) outside the object.
    OutOfRange,
    /// The request was malformed or too large.
    BadRequest,
    /// The server is at its connection or request limit.
    Busy,
    /// The server is shutting down.
    ShuttingDown,
    /// The store failed.
    Internal,
    /// The object or query answer is larger than the request's size limit.
    TooLarge,
    /// The server cannot serve this kind of request (for example queries, without a query
    /// handler).
    Unsupported,
    /// A code this side does not know (kept, so nothing is lost).
    Other(u16),
}

impl ErrorCode {
    fn to_u16(self) -> u16 {
        match self {
            ErrorCode::NotFound => 1,
            ErrorCode::OutOfRange => 2,
            ErrorCode::BadRequest => 3,
            ErrorCode::Busy => 4,
            ErrorCode::ShuttingDown => 5,
            ErrorCode::Internal => 6,
            ErrorCode::TooLarge => 7,
            ErrorCode::Unsupported => 8,
            ErrorCode::Other(c) => c,
        }
    }
    fn from_u16(c: u16) -> Self {
        match c {
            1 => ErrorCode::NotFound,
            2 => ErrorCode::OutOfRange,
            3 => ErrorCode::BadRequest,
            4 => ErrorCode::Busy,
            5 => ErrorCode::ShuttingDown,
            6 => ErrorCode::Internal,
            7 => ErrorCode::TooLarge,
            8 => ErrorCode::Unsupported,
            c => ErrorCode::Other(c),
        }
    }
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Ask for `len` bytes of `key` from `offset`.
    Request {
        /// Request id, not 0.
        id: u64,
        /// Object key, at most [`MAX_KEY_LEN`] bytes.
        key: String,
        /// Offset in the object.
        offset: u64,
        /// Bytes wanted, at most [`MAX_REQUEST_LEN`].
        len: u64,
        /// Send the response no faster than this many bytes per second (`None`: as fast as
        /// the server's congestion control allows). Never 0.
        pace: Option<u64>,
    },
    /// Ask for `len` bytes from `offset` of the object `key`, or of the answer to `query`,
    /// as far as they exist; the size is announced by a [`Frame::Length`] first.
    OpenRequest {
        /// Request id, not 0.
        id: u64,
        /// Object key (or what the query runs against), at most [`MAX_KEY_LEN`] bytes.
        key: String,
        /// Offset in the object or answer.
        offset: u64,
        /// Bytes wanted at most, at most [`MAX_REQUEST_LEN`].
        len: u64,
        /// The largest object or answer the client accepts, in bytes.
        limit: u64,
        /// The query, at most [`MAX_QUERY_LEN`] bytes (`None`: read the object `key`).
        query: Option<Bytes>,
        /// As for [`Frame::Request`].
        pace: Option<u64>,
    },
    /// The size of the object or answer that request `id` reads (an `OpenRequest`).
    Length {
        /// Request id.
        id: u64,
        /// Size in bytes.
        size: u64,
    },
    /// Of the hold that request `id`'s first `Data` frame carries ([`Header::hold`]), the
    /// time the server's store took to give the bytes; the rest was the server host's (its
    /// CPU, other requests). Sent only where the store took at least [`MIN_STORE_TIME_US`].
    StoreTime {
        /// Request id.
        id: u64,
        /// Whole microseconds (a longer time is sent as `u32::MAX`, about 71 minutes).
        micros: u32,
    },
    /// Withdraw request `id`.
    Cancel {
        /// Request id.
        id: u64,
    },
    /// Bytes of request `id`.
    Data {
        /// Request id.
        id: u64,
        /// At most [`MAX_DATA_PAYLOAD`] bytes.
        payload: Bytes,
    },
    /// Request `id` is finished.
    End {
        /// Request id.
        id: u64,
        /// CRC32C of all the request's data, if the server computed it.
        crc32c: Option<u32>,
        /// The server socket's counters, if it could read them.
        counters: Option<TcpCounters>,
        /// The socket's counters when the server began this response (flag bit 3), if it
        /// read them: see [`StartCounters`].
        at_start: Option<StartCounters>,
        /// The server stopped early because of a `Cancel`.
        cancelled: bool,
    },
    /// Request `id` (or, with id 0, the connection) failed.
    Error {
        /// Request id, 0 for the connection.
        id: u64,
        /// What went wrong.
        code: ErrorCode,
        /// Human-readable detail, at most [`MAX_ERROR_MESSAGE`] bytes.
        message: String,
    },
}

impl Frame {
    /// The request id.
    pub fn id(&self) -> u64 {
        match self {
            Frame::Request { id, .. }
            | Frame::Cancel { id }
            | Frame::Data { id, .. }
            | Frame::End { id, .. }
            | Frame::Error { id, .. }
            | Frame::OpenRequest { id, .. }
            | Frame::Length { id, .. }
            | Frame::StoreTime { id, .. } => *id,
        }
    }

    /// Appends the encoded frame to `out`. Panics only on values that [`Frame::check`]
    /// rejects (keys or payloads over their bound): call it first for untrusted values.
    pub fn encode(&self, out: &mut Vec<u8>) {
        if let Frame::Request {
            id,
            key,
            offset,
            len,
            pace,
        } = self
        {
            return encode_request(out, *id, key, *offset, *len, *pace);
        }
        if let Frame::OpenRequest {
            id,
            key,
            offset,
            len,
            limit,
            query,
            pace,
        } = self
        {
            let open = Open {
                limit: *limit,
                query: query.as_deref(),
            };
            return encode_open_request(out, *id, key, *offset, *len, &open, *pace);
        }
        let start = out.len();
        out.extend_from_slice(&[0; HEADER_LEN]);
        let (kind, flags) = match self {
            Frame::Request { .. } | Frame::OpenRequest { .. } => unreachable!("encoded above"),
            Frame::Length { size, .. } => {
                out.put_u64(*size);
                (Kind::Length, 0)
            }
            Frame::StoreTime { micros, .. } => {
                out.put_u32(*micros);
                (Kind::StoreTime, 0)
            }
            Frame::Cancel { .. } => (Kind::Cancel, 0),
            Frame::Data { payload, .. } => {
                out.extend_from_slice(payload);
                (Kind::Data, 0)
            }
            Frame::End {
                crc32c,
                counters,
                at_start,
                cancelled,
                ..
            } => {
                out.put_u32(crc32c.unwrap_or(0));
                let c = counters.unwrap_or_default();
                for v in [c.rtt_us, c.retransmits, c.rtos, c.rto_recoveries, c.rto_time_ms] {
                    out.put_u32(v);
                }
                if let Some(s) = at_start {
                    out.put_u32(s.retransmits);
                    out.put_u32(s.rtos);
                }
                let flags = if crc32c.is_some() { END_HAS_CRC } else { 0 }
                    | if counters.is_some() { END_HAS_COUNTERS } else { 0 }
                    | if *cancelled { END_CANCELLED } else { 0 }
                    | if at_start.is_some() { END_HAS_START } else { 0 };
                (Kind::End, flags)
            }
            Frame::Error { code, message, .. } => {
                out.put_u16(code.to_u16());
                out.extend_from_slice(message.as_bytes());
                (Kind::Error, 0)
            }
        };
        let len = (out.len() - start - HEADER_LEN) as u32;
        let header = Header {
            kind,
            flags,
            len,
            id: self.id(),
        };
        out[start..start + HEADER_LEN].copy_from_slice(&header.encode());
    }

    /// Checks the bounds [`Frame::encode`] relies on.
    pub fn check(&self) -> Result<(), WireError> {
        let mut buf = Vec::new();
        let fits = match self {
            Frame::Request { key, .. } => key.len() <= MAX_KEY_LEN,
            Frame::OpenRequest { key, query, .. } => {
                key.len() <= MAX_KEY_LEN && query.as_ref().is_none_or(|q| q.len() <= MAX_QUERY_LEN)
            }
            Frame::Data { payload, .. } => payload.len() <= MAX_DATA_PAYLOAD as usize,
            Frame::Error { message, .. } => message.len() <= MAX_ERROR_MESSAGE,
            _ => true,
        };
        if !fits {
            let kind = self.kind();
            let (min, max) = kind.payload_bounds();
            return Err(WireError::BadLength {
                kind,
                len: u32::MAX,
                min,
                max,
            });
        }
        self.encode(&mut buf);
        let header = Header::decode(buf[..HEADER_LEN].try_into().expect("header"))?;
        Frame::decode_payload(&header, Bytes::from(buf).slice(HEADER_LEN..)).map(|_| ())
    }

    /// This frame's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Frame::Request { .. } => Kind::Request,
            Frame::Cancel { .. } => Kind::Cancel,
            Frame::Data { .. } => Kind::Data,
            Frame::End { .. } => Kind::End,
            Frame::Error { .. } => Kind::Error,
            Frame::OpenRequest { .. } => Kind::OpenRequest,
            Frame::Length { .. } => Kind::Length,
            Frame::StoreTime { .. } => Kind::StoreTime,
        }
    }

    /// Decodes the payload of a checked header (`payload.len() == header.len`).
    pub fn decode_payload(h: &Header, payload: Bytes) -> Result<Frame, WireError> {
        debug_assert_eq!(payload.len(), h.len as usize);
        let id = h.id;
        let p = &payload[..];
        Ok(match h.kind {
            Kind::Request => {
                let offset = u64::from_be_bytes(p[0..8].try_into().expect("bounded"));
                let len = u64::from_be_bytes(p[8..16].try_into().expect("bounded"));
                let key_len = usize::from(u16::from_be_bytes([p[16], p[17]]));
                let paced = h.flags & REQUEST_HAS_PACE != 0;
                if REQUEST_FIXED + key_len + if paced { PACE_LEN } else { 0 } != p.len() {
                    return Err(WireError::KeyLength {
                        key_len,
                        payload: p.len(),
                    });
                }
                check_range(offset, len)?;
                let key_end = REQUEST_FIXED + key_len;
                let key =
                    std::str::from_utf8(&p[REQUEST_FIXED..key_end]).map_err(|_| WireError::Utf8 { field: "key" })?;
                let pace = pace_at(p, key_end, paced)?;
                Frame::Request {
                    id,
                    key: key.to_owned(),
                    offset,
                    len,
                    pace,
                }
            }
            Kind::OpenRequest => {
                let u = |i: usize| u64::from_be_bytes(p[i..i + 8].try_into().expect("bounded"));
                let (offset, len, limit) = (u(0), u(8), u(16));
                let key_len = usize::from(u16::from_be_bytes([p[24], p[25]]));
                let query_len = usize::from(u16::from_be_bytes([p[26], p[27]]));
                let paced = h.flags & REQUEST_HAS_PACE != 0;
                let has_query = h.flags & OPEN_HAS_QUERY != 0;
                let want = OPEN_FIXED + key_len + query_len + if paced { PACE_LEN } else { 0 };
                if want != p.len() || query_len > MAX_QUERY_LEN || (!has_query && query_len > 0) {
                    return Err(WireError::QueryLength {
                        key_len,
                        query_len,
                        payload: p.len(),
                    });
                }
                check_range(offset, len)?;
                let key_end = OPEN_FIXED + key_len;
                let key = std::str::from_utf8(&p[OPEN_FIXED..key_end]).map_err(|_| WireError::Utf8 { field: "key" })?;
                let query_end = key_end + query_len;
                let pace = pace_at(p, query_end, paced)?;
                Frame::OpenRequest {
                    id,
                    key: key.to_owned(),
                    offset,
                    len,
                    limit,
                    query: has_query.then(|| payload.slice(key_end..query_end)),
                    pace,
                }
            }
            Kind::Length => Frame::Length {
                id,
                size: u64::from_be_bytes(p[0..8].try_into().expect("bounded")),
            },
            Kind::StoreTime => Frame::StoreTime {
                id,
                micros: u32::from_be_bytes(p[0..4].try_into().expect("bounded")),
            },
            Kind::Cancel => Frame::Cancel { id },
            Kind::Data => Frame::Data { id, payload },
            Kind::End => {
                let w = |i: usize| u32::from_be_bytes(p[i..i + 4].try_into().expect("bounded"));
                let counters = TcpCounters {
                    rtt_us: w(4),
                    retransmits: w(8),
                    rtos: w(12),
                    rto_recoveries: w(16),
                    rto_time_ms: w(20),
                };
                Frame::End {
                    id,
                    crc32c: (h.flags & END_HAS_CRC != 0).then(|| w(0)),
                    counters: (h.flags & END_HAS_COUNTERS != 0).then_some(counters),
                    at_start: (h.flags & END_HAS_START != 0).then(|| StartCounters {
                        retransmits: w(24),
                        rtos: w(28),
                    }),
                    cancelled: h.flags & END_CANCELLED != 0,
                }
            }
            Kind::Error => {
                let code = ErrorCode::from_u16(u16::from_be_bytes([p[0], p[1]]));
                let msg = &p[2..];
                if msg.len() > MAX_ERROR_MESSAGE {
                    return Err(WireError::BadLength {
                        kind: Kind::Error,
                        len: h.len,
                        min: 2,
                        max: (2 + MAX_ERROR_MESSAGE) as u32,
                    });
                }
                let message = std::str::from_utf8(msg).map_err(|_| WireError::Utf8 { field: "error message" })?;
                Frame::Error {
                    id,
                    code,
                    message: message.to_owned(),
                }
            }
        })
    }
}

/// Appends a `Request` frame from a borrowed key, without building a [`Frame`]: the client
/// sends one per grant and the key is the stripe's. Same bounds as [`Frame::encode`] (a key
/// of at most [`MAX_KEY_LEN`] bytes; a pace of `Some(0)` is sent as no pace).
pub fn encode_request(out: &mut Vec<u8>, id: u64, key: &str, offset: u64, len: u64, pace: Option<u64>) {
    let pace = pace.filter(|&r| r > 0);
    let header = Header {
        kind: Kind::Request,
        flags: if pace.is_some() { REQUEST_HAS_PACE } else { 0 },
        len: (REQUEST_FIXED + key.len() + if pace.is_some() { PACE_LEN } else { 0 }) as u32,
        id,
    };
    out.extend_from_slice(&header.encode());
    out.put_u64(offset);
    out.put_u64(len);
    out.put_u16(key.len() as u16);
    out.extend_from_slice(key.as_bytes());
    if let Some(r) = pace {
        out.put_u64(r);
    }
}

/// A request's range: at most [`MAX_REQUEST_LEN`] bytes, and `offset + len` fits 64 bits.
fn check_range(offset: u64, len: u64) -> Result<(), WireError> {
    if len > MAX_REQUEST_LEN || offset.checked_add(len).is_none() {
        return Err(WireError::RequestTooLarge {
            offset,
            len,
            max: MAX_REQUEST_LEN,
        });
    }
    Ok(())
}

/// A request's pacing rate at `at` of a length-checked payload, if flagged (never 0).
fn pace_at(p: &[u8], at: usize, paced: bool) -> Result<Option<u64>, WireError> {
    if !paced {
        return Ok(None);
    }
    match u64::from_be_bytes(p[at..at + PACE_LEN].try_into().expect("bounded")) {
        0 => Err(WireError::ZeroPace),
        r => Ok(Some(r)),
    }
}

/// What makes a request an `OpenRequest`: the size limit, and the query if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Open<'a> {
    /// The largest object or answer the client accepts, in bytes.
    pub limit: u64,
    /// The query (`None`: read the object).
    pub query: Option<&'a [u8]>,
}

/// Appends an `OpenRequest` frame from borrowed parts (see [`encode_request`]). Same bounds
/// as [`Frame::encode`]: a key of at most [`MAX_KEY_LEN`] bytes, a query of at most
/// [`MAX_QUERY_LEN`].
pub fn encode_open_request(
    out: &mut Vec<u8>,
    id: u64,
    key: &str,
    offset: u64,
    len: u64,
    open: &Open<'_>,
    pace: Option<u64>,
) {
    let pace = pace.filter(|&r| r > 0);
    let query = open.query.unwrap_or_default();
    let flags =
        if pace.is_some() { REQUEST_HAS_PACE } else { 0 } | if open.query.is_some() { OPEN_HAS_QUERY } else { 0 };
    let header = Header {
        kind: Kind::OpenRequest,
        flags,
        len: (OPEN_FIXED + key.len() + query.len() + if pace.is_some() { PACE_LEN } else { 0 }) as u32,
        id,
    };
    out.extend_from_slice(&header.encode());
    out.put_u64(offset);
    out.put_u64(len);
    out.put_u64(open.limit);
    out.put_u16(key.len() as u16);
    out.put_u16(query.len() as u16);
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(query);
    if let Some(r) = pace {
        out.put_u64(r);
    }
}

/// Decodes one frame from the front of `buf`: `Ok(None)` if more bytes are needed, else the
/// frame and how many bytes it used. Never allocates more than the bounds of the module docs.
///
/// ```
/// use incast_rpc::wire::{decode, Frame};
/// let f = Frame::Request { id: 7, key: "blk".into(), offset: 0, len: 4096, pace: Some(12_500_000) };
/// let mut buf = Vec::new();
/// f.encode(&mut buf);
/// assert_eq!(decode(&buf[..10]), Ok(None));
/// assert_eq!(decode(&buf), Ok(Some((f, buf.len()))));
/// ```
pub fn decode(buf: &[u8]) -> Result<Option<(Frame, usize)>, WireError> {
    let Some(head) = buf.first_chunk::<HEADER_LEN>() else {
        return Ok(None);
    };
    let h = Header::decode(head)?;
    let total = HEADER_LEN + h.len as usize;
    if buf.len() < total {
        return Ok(None);
    }
    let payload = Bytes::copy_from_slice(&buf[HEADER_LEN..total]);
    Ok(Some((Frame::decode_payload(&h, payload)?, total)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(f: &Frame) -> Vec<u8> {
        let mut v = Vec::new();
        f.encode(&mut v);
        v
    }

    #[test]
    fn every_kind_round_trips() {
        let frames = [
            Frame::Request {
                id: 1,
                key: "k".repeat(MAX_KEY_LEN),
                offset: 5,
                len: MAX_REQUEST_LEN,
                pace: None,
            },
            Frame::Request {
                id: 2,
                key: "k".repeat(MAX_KEY_LEN),
                offset: 0,
                len: 1,
                pace: Some(u64::MAX),
            },
            Frame::OpenRequest {
                id: 5,
                key: "k".repeat(MAX_KEY_LEN),
                offset: 3,
                len: MAX_REQUEST_LEN,
                limit: u64::MAX,
                query: Some(Bytes::from(vec![9u8; MAX_QUERY_LEN])),
                pace: Some(1),
            },
            Frame::OpenRequest {
                id: 6,
                key: "log".into(),
                offset: 0,
                len: 1,
                limit: 0,
                query: None,
                pace: None,
            },
            Frame::OpenRequest {
                id: 7,
                key: String::new(),
                offset: 0,
                len: 1,
                limit: 10,
                query: Some(Bytes::new()),
                pace: None,
            },
            Frame::Length { id: 8, size: u64::MAX },
            Frame::StoreTime {
                id: 9,
                micros: u32::MAX,
            },
            Frame::StoreTime { id: 10, micros: 0 },
            Frame::Cancel { id: u64::MAX },
            Frame::Data {
                id: 3,
                payload: Bytes::from(vec![7u8; MAX_DATA_PAYLOAD as usize]),
            },
            Frame::Data {
                id: 3,
                payload: Bytes::new(),
            },
            Frame::End {
                id: 4,
                crc32c: Some(0xDEAD_BEEF),
                counters: None,
                at_start: None,
                cancelled: false,
            },
            Frame::End {
                id: 4,
                crc32c: None,
                counters: Some(TcpCounters {
                    rtt_us: 1,
                    retransmits: 2,
                    rtos: 3,
                    rto_recoveries: 4,
                    rto_time_ms: 5,
                }),
                at_start: None,
                cancelled: true,
            },
            Frame::End {
                id: 5,
                crc32c: Some(1),
                counters: Some(TcpCounters {
                    rtt_us: 10,
                    retransmits: 20,
                    rtos: 30,
                    rto_recoveries: 40,
                    rto_time_ms: 50,
                }),
                at_start: Some(StartCounters {
                    retransmits: 6,
                    rtos: 7,
                }),
                cancelled: false,
            },
            Frame::Error {
                id: 0,
                code: ErrorCode::Busy,
                message: "full".into(),
            },
            Frame::Error {
                id: 9,
                code: ErrorCode::Other(999),
                message: String::new(),
            },
        ];
        for f in frames {
            f.check().unwrap();
            let b = enc(&f);
            assert_eq!(decode(&b), Ok(Some((f, b.len()))));
        }
    }

    #[test]
    fn a_data_frame_carries_the_servers_hold_in_its_flags() {
        use std::time::Duration;
        let us = Duration::from_micros;
        for (hold, sent) in [
            (Some(us(0)), Some(us(0))),
            (Some(Duration::from_nanos(1_999)), Some(us(1))),
            (Some(us(850)), Some(us(850))),
            (Some(us(u64::from(MAX_HOLD_US))), Some(us(u64::from(MAX_HOLD_US)))),
            // Longer holds are sent as the longest.
            (Some(Duration::from_secs(3)), Some(us(u64::from(MAX_HOLD_US)))),
            (None, None),
        ] {
            let h = Header::data(7, 4096, hold);
            let back = Header::decode(&h.encode()).unwrap();
            assert_eq!(back, h);
            assert_eq!(back.hold(), sent, "{hold:?}");
        }
        // Only a data frame has a hold, and its bits mean nothing without the flag.
        let mut end = Header::data(7, END_PAYLOAD, Some(us(5)));
        end.kind = Kind::End;
        assert!(matches!(
            Header::decode(&end.encode()),
            Err(WireError::UnknownFlags { .. })
        ));
        let bits = Header {
            flags: 5,
            ..Header::data(7, 1, None)
        };
        assert_eq!(
            Header::decode(&bits.encode()),
            Err(WireError::UnknownFlags {
                kind: Kind::Data,
                flags: 5
            })
        );
    }

    #[test]
    fn bounds_are_checked_from_the_header_alone() {
        let mut h = Header {
            kind: Kind::Data,
            flags: 0,
            len: MAX_DATA_PAYLOAD + 1,
            id: 1,
        }
        .encode();
        assert!(matches!(
            Header::decode(&h),
            Err(WireError::BadLength { kind: Kind::Data, .. })
        ));
        h[1] = Kind::Request as u8;
        h[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        // Claims 4 GiB: refused with only 16 bytes read.
        assert!(matches!(
            decode(&h),
            Err(WireError::BadLength {
                kind: Kind::Request,
                ..
            })
        ));
        h[0] = 2;
        assert_eq!(decode(&h), Err(WireError::UnsupportedVersion { version: 2 }));
        h[0] = VERSION;
        h[1] = 99;
        assert_eq!(decode(&h), Err(WireError::UnknownKind { kind: 99 }));
        let long = Header {
            kind: Kind::StoreTime,
            flags: 0,
            len: 8,
            id: 1,
        }
        .encode();
        assert!(matches!(
            decode(&long),
            Err(WireError::BadLength {
                kind: Kind::StoreTime,
                min: STORE_TIME_PAYLOAD,
                max: STORE_TIME_PAYLOAD,
                ..
            })
        ));
        let zero = Header {
            kind: Kind::Cancel,
            flags: 0,
            len: 0,
            id: 0,
        }
        .encode();
        assert_eq!(decode(&zero), Err(WireError::ZeroId { kind: Kind::Cancel }));
        let flags = Header {
            kind: Kind::Data,
            flags: 1,
            len: 0,
            id: 1,
        }
        .encode();
        assert!(matches!(decode(&flags), Err(WireError::UnknownFlags { .. })));
    }

    #[test]
    fn an_end_frames_length_follows_its_start_counters_flag() {
        let end = |flags, len| {
            Header::decode(
                &Header {
                    kind: Kind::End,
                    flags,
                    len,
                    id: 1,
                }
                .encode(),
            )
        };
        assert!(end(END_HAS_START, END_PAYLOAD_WITH_START).is_ok());
        assert!(end(END_HAS_COUNTERS, END_PAYLOAD).is_ok());
        for (flags, len) in [
            (END_HAS_START, END_PAYLOAD),
            (END_HAS_COUNTERS, END_PAYLOAD_WITH_START),
            (0, END_PAYLOAD + 4),
        ] {
            assert!(
                matches!(end(flags, len), Err(WireError::BadLength { kind: Kind::End, .. })),
                "flags {flags:#x}, {len} bytes: {:?}",
                end(flags, len)
            );
        }
    }

    #[test]
    fn malformed_payloads_are_typed_errors() {
        let mut b = enc(&Frame::Request {
            id: 1,
            key: "abc".into(),
            offset: 0,
            len: 1,
            pace: None,
        });
        b[HEADER_LEN + 17] = 4; // key length 4, payload has 3
        assert_eq!(
            decode(&b),
            Err(WireError::KeyLength {
                key_len: 4,
                payload: 21
            })
        );
        let b = enc(&Frame::Request {
            id: 1,
            key: "a".into(),
            offset: u64::MAX,
            len: 1,
            pace: None,
        });
        assert!(matches!(decode(&b), Err(WireError::RequestTooLarge { .. })));
        let mut b = enc(&Frame::Request {
            id: 1,
            key: "a".into(),
            offset: 0,
            len: 1,
            pace: None,
        });
        *b.last_mut().unwrap() = 0xFF;
        assert_eq!(decode(&b), Err(WireError::Utf8 { field: "key" }));
        // A pace of 0 is refused; a pace flag without its 8 bytes is a length mismatch.
        let mut b = Vec::new();
        encode_request(&mut b, 1, "a", 0, 1, Some(5));
        let n = b.len();
        b[n - 8..].fill(0);
        assert_eq!(decode(&b), Err(WireError::ZeroPace));
        let mut b = Vec::new();
        encode_request(&mut b, 1, "a", 0, 1, None);
        b[3] |= 1;
        assert!(matches!(decode(&b), Err(WireError::KeyLength { .. })));
        // An open request's query past its bound, or a query length without the query flag.
        let open = Frame::OpenRequest {
            id: 1,
            key: "a".into(),
            offset: 0,
            len: 1,
            limit: 1,
            query: Some(Bytes::from_static(b"qq")),
            pace: None,
        };
        let mut b = enc(&open);
        b[3] &= !2;
        assert!(matches!(decode(&b), Err(WireError::QueryLength { query_len: 2, .. })));
        let mut b = enc(&open);
        b[HEADER_LEN + 26..HEADER_LEN + 28].copy_from_slice(&3u16.to_be_bytes());
        assert!(matches!(decode(&b), Err(WireError::QueryLength { query_len: 3, .. })));
        let too_long = Frame::OpenRequest {
            id: 1,
            key: "a".into(),
            offset: 0,
            len: 1,
            limit: 1,
            query: Some(Bytes::from(vec![0u8; MAX_QUERY_LEN + 1])),
            pace: None,
        };
        assert!(too_long.check().is_err());
        let mut h = Header {
            kind: Kind::Length,
            flags: 0,
            len: 9,
            id: 1,
        }
        .encode();
        assert!(matches!(
            Header::decode(&h),
            Err(WireError::BadLength { kind: Kind::Length, .. })
        ));
        h[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        h[1] = Kind::OpenRequest as u8;
        assert!(matches!(
            decode(&h),
            Err(WireError::BadLength {
                kind: Kind::OpenRequest,
                ..
            })
        ));
        let long = Frame::Request {
            id: 1,
            key: "k".repeat(MAX_KEY_LEN + 1),
            offset: 0,
            len: 1,
            pace: None,
        };
        assert!(long.check().is_err());
        assert_eq!(
            WireError::BadLength {
                kind: Kind::Data,
                len: 5,
                min: 0,
                max: 4
            }
            .to_string(),
            "Data frame with a 5-byte payload: allowed 0..=4"
        );
    }
}
