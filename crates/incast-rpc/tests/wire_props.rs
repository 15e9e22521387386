//! Property tests of the wire format: arbitrary bytes never panic the decoder (and anything it
//! accepts is a valid frame), every valid frame round-trips, and a stream of frames cut at any
//! points decodes to the same frames.
//!
//! Run: `cargo test --release -p incast-rpc --test wire_props` (10,000 cases per property in
//! release builds, 500 in debug; `PROPTEST_CASES` overrides).

use bytes::Bytes;
use incast_rpc::wire::{
    decode, ErrorCode, Frame, StartCounters, TcpCounters, HEADER_LEN, MAX_DATA_PAYLOAD, MAX_KEY_LEN, VERSION,
};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    let default = if cfg!(debug_assertions) { 500 } else { 10_000 };
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

fn frame() -> impl Strategy<Value = Frame> {
    let id = 1u64..;
    let counters = proptest::option::of(any::<[u32; 5]>().prop_map(|c| TcpCounters {
        rtt_us: c[0],
        retransmits: c[1],
        rtos: c[2],
        rto_recoveries: c[3],
        rto_time_ms: c[4],
    }));
    let at_start = proptest::option::of(any::<[u32; 2]>().prop_map(|c| StartCounters {
        retransmits: c[0],
        rtos: c[1],
    }));
    let code = prop_oneof![
        Just(ErrorCode::NotFound),
        Just(ErrorCode::OutOfRange),
        Just(ErrorCode::BadRequest),
        Just(ErrorCode::Busy),
        Just(ErrorCode::ShuttingDown),
        Just(ErrorCode::Internal),
        Just(ErrorCode::TooLarge),
        Just(ErrorCode::Unsupported),
        (9u16..).prop_map(ErrorCode::Other),
    ];
    prop_oneof![
        (
            id.clone(),
            "[a-z0-9/._-]{0,64}",
            any::<u32>(),
            0u64..=(1 << 30),
            proptest::option::of(1u64..)
        )
            .prop_map(|(id, key, offset, len, pace)| Frame::Request {
                id,
                key,
                offset: u64::from(offset),
                len,
                pace,
            }),
        (
            id.clone(),
            "[a-z0-9/._-]{0,64}",
            (any::<u32>(), 0u64..=(1 << 30), any::<u64>()),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
            proptest::option::of(1u64..)
        )
            .prop_map(|(id, key, (offset, len, limit), query, pace)| Frame::OpenRequest {
                id,
                key,
                offset: u64::from(offset),
                len,
                limit,
                query: query.map(Bytes::from),
                pace,
            }),
        (id.clone(), any::<u64>()).prop_map(|(id, size)| Frame::Length { id, size }),
        id.clone().prop_map(|id| Frame::Cancel { id }),
        (id.clone(), proptest::collection::vec(any::<u8>(), 0..4096)).prop_map(|(id, p)| Frame::Data {
            id,
            payload: Bytes::from(p)
        }),
        (
            id,
            proptest::option::of(any::<u32>()),
            counters,
            at_start,
            any::<bool>()
        )
            .prop_map(|(id, crc32c, counters, at_start, cancelled)| Frame::End {
                id,
                crc32c,
                counters,
                at_start,
                cancelled
            }),
        (any::<u64>(), code, "[ -~]{0,200}").prop_map(|(id, code, message)| Frame::Error { id, code, message }),
    ]
}

/// Bytes that look like frames often enough to get past the header checks.
fn near_frames() -> impl Strategy<Value = Vec<u8>> {
    let len = prop_oneof![0u32..64, any::<u32>()];
    (
        any::<u8>(),
        1u8..=8,
        any::<u16>(),
        len,
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(id, kind, flags, len, tail)| {
            let mut b = vec![VERSION, kind];
            b.extend_from_slice(&(flags & 7).to_be_bytes());
            b.extend_from_slice(&len.to_be_bytes());
            b.extend_from_slice(&u64::from(id).to_be_bytes());
            b.extend_from_slice(&tail);
            b
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop_oneof![proptest::collection::vec(any::<u8>(), 0..600), near_frames()]) {
        match decode(&bytes) {
            Ok(None) => {
                // Undecided only while the header or the announced (bounded) payload is incomplete.
                if bytes.len() >= HEADER_LEN {
                    let len = u32::from_be_bytes(bytes[4..8].try_into().unwrap()) as usize;
                    prop_assert!(bytes.len() < HEADER_LEN + len);
                    prop_assert!(len <= MAX_DATA_PAYLOAD as usize);
                }
            }
            Ok(Some((frame, used))) => {
                prop_assert!(used <= bytes.len());
                prop_assert!(frame.check().is_ok());
                // Re-encoding gives the same bytes, except the unused fields of an End
                // without a CRC or counters, which are sent as zeros.
                let mut again = Vec::new();
                frame.encode(&mut again);
                if !matches!(frame, Frame::End { .. }) {
                    prop_assert_eq!(&again[..], &bytes[..used]);
                }
                prop_assert_eq!(decode(&again), Ok(Some((frame, again.len()))));
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn valid_frames_round_trip(f in frame()) {
        prop_assert!(f.check().is_ok());
        let mut buf = Vec::new();
        f.encode(&mut buf);
        prop_assert_eq!(decode(&buf), Ok(Some((f, buf.len()))));
    }

    #[test]
    fn streams_decode_the_same_whatever_the_cuts(
        frames in proptest::collection::vec(frame(), 1..20),
        cuts in proptest::collection::vec(any::<u16>(), 0..20),
    ) {
        let mut stream = Vec::new();
        for f in &frames {
            f.encode(&mut stream);
        }
        let mut cut_at: Vec<usize> = cuts.iter().map(|c| *c as usize % (stream.len() + 1)).collect();
        cut_at.push(stream.len());
        cut_at.sort_unstable();
        // Feed the stream in pieces, as reads from a socket would deliver it.
        let (mut pending, mut got, mut fed) = (Vec::new(), Vec::new(), 0);
        for end in cut_at {
            pending.extend_from_slice(&stream[fed..end]);
            fed = end;
            while let Some((f, used)) = decode(&pending).unwrap() {
                got.push(f);
                pending.drain(..used);
            }
        }
        prop_assert!(pending.is_empty());
        prop_assert_eq!(got, frames);
    }
}

#[test]
fn longest_request_fits_the_control_bound() {
    let f = Frame::Request {
        id: 1,
        key: "k".repeat(MAX_KEY_LEN),
        offset: 0,
        len: 1,
        pace: Some(u64::MAX),
    };
    assert!(f.check().is_ok());
}
