use super::*;
use crate::policy::{GrantSize, Hedging};
use crate::receiver::MAX_TIMEOUT_SCALE;
use crate::rtt::RtoBounds;
use crate::stripe::Fragment;

fn servers(n: u32) -> Vec<ServerId> {
    (0..n).map(ServerId).collect()
}

fn requests(s: &mut Scheduler, now: Instant) -> Vec<Grant> {
    std::iter::from_fn(|| s.poll_action(now))
        .filter_map(|a| match a {
            Action::Request(g) => Some(g),
            Action::Cancel { .. } => None,
        })
        .collect()
}

fn finish(s: &mut Scheduler, g: &Grant, now: Instant) {
    assert!(matches!(s.on_bytes(now, g.id, g.len).unwrap(), Delivery::Write { .. }));
    s.on_done(now, g.id).unwrap();
}

/// A scheduler of one fragment of `len` bytes on server 0 with server 1 as its replica,
/// whole grants (or chunks of `chunk`), and a hedge budget of `hedge_bytes`.
fn replicated(len: u64, chunk: Option<u64>, hedge_bytes: u64) -> Scheduler {
    let stripe = Stripe::new(vec![
        Fragment::new(ServerId(0), "k", 0, len).with_replicas([ServerId(1)])
    ])
    .unwrap();
    let p = Policy::builder()
        .grant_size(chunk.map_or(GrantSize::Whole, |bytes| GrantSize::Chunk { bytes }))
        .pipeline_depth(2)
        .hedging(Hedging::AfterRto {
            budget_fraction: 0.0,
            min_budget_bytes: hedge_bytes,
        })
        .build()
        .unwrap();
    Scheduler::new(&stripe, &p, 7)
}

#[test]
fn admission_respects_k_and_b() {
    let stripe = Stripe::fixed_sru("k", &servers(10), 10_000).unwrap();
    let p = Policy::builder()
        .max_senders(3)
        .inflight_budget(25_000)
        .grant_size(GrantSize::Chunk { bytes: 4_000 })
        .pipeline_depth(1)
        .build()
        .unwrap();
    let now = Instant::now();
    let mut s = Scheduler::new(&stripe, &p, 1);
    let gs = requests(&mut s, now);
    // K = 3 senders, one grant per fragment: 3 grants of 4000 (B would allow 6).
    assert_eq!(gs.len(), 3);
    assert_eq!(s.live_senders(), 3);
    assert_eq!(s.outstanding(), 12_000);
    finish(&mut s, &gs[0], now);
    let next = requests(&mut s, now);
    // The finished fragment continues first (same server, second chunk).
    assert_eq!(next.len(), 1);
    assert_eq!(
        (next[0].fragment, next[0].kind, next[0].object_offset),
        (0, GrantKind::Next, 4_000)
    );
}

#[test]
fn pipelining_keeps_one_sender_busy_and_started_fragments_first() {
    let stripe = Stripe::fixed_sru("k", &servers(3), 100_000).unwrap();
    let p = Policy::builder()
        .inflight_budget(40_000)
        .grant_size(GrantSize::Chunk { bytes: 10_000 })
        .pipeline_depth(3)
        .build()
        .unwrap();
    let now = Instant::now();
    let mut s = Scheduler::new(&stripe, &p, 1);
    let gs = requests(&mut s, now);
    // Three consecutive chunks of fragment 0 (depth 3), then fragment 1 starts with the
    // budget's last 10,000 bytes.
    let got: Vec<_> = gs.iter().map(|g| (g.fragment, g.object_offset, g.kind)).collect();
    let want = [
        (0, 0, GrantKind::First),
        (0, 10_000, GrantKind::Next),
        (0, 20_000, GrantKind::Next),
        (1, 0, GrantKind::First),
    ];
    assert_eq!(got, want);
    // Completing a middle chunk first is fine. Fragment 0 is back in line behind
    // fragment 1, which continues first.
    finish(&mut s, &gs[1], now);
    let next = requests(&mut s, now);
    assert_eq!(
        next.iter().map(|g| (g.fragment, g.object_offset)).collect::<Vec<_>>(),
        [(1, 10_000)]
    );
    assert_eq!(s.completed_bytes(), 10_000);
}

/// The lengths of the grants one fragment of `len` bytes gets under `gate` (which stays
/// as it is while the read polls), with a policy chunk of `chunk` bytes.
fn grant_lens(len: u64, chunk: u64, gate: Gate) -> Vec<u64> {
    let stripe = Stripe::fixed_sru("k", &servers(1), len).unwrap();
    let p = Policy::builder()
        .inflight_budget(1 << 20)
        .grant_size(GrantSize::Chunk { bytes: chunk })
        .pipeline_depth(8)
        .build()
        .unwrap();
    let mut s = Scheduler::new(&stripe, &p, 1);
    let mut lens = Vec::new();
    while let Polled::Action(Action::Request(g)) = s.poll_gated(Instant::now(), &gate) {
        lens.push(g.len);
    }
    lens
}

#[test]
fn an_enlarged_chunk_takes_a_runt_along_and_the_policy_chunk_never_does() {
    let grants = |len: u64, enlarge: u64, max_chunk: u64| {
        grant_lens(
            len,
            1_000,
            Gate {
                grant: enlarge,
                max_chunk,
                whole_rest: max_chunk,
                ..Gate::OPEN
            },
        )
    };
    // Enlarged to 10,000: less than a whole chunk would be left, so one grant takes it all.
    assert_eq!(grants(14_000, 10_000, 15_000), [14_000]);
    assert_eq!(grants(19_999, 10_000, 15_000), [19_999]);
    // A remainder of a whole chunk or more stays its own grant...
    assert_eq!(grants(20_000, 10_000, 15_000), [10_000, 10_000]);
    assert_eq!(grants(25_000, 10_000, 15_000), [10_000, 15_000]);
    // ...unless the whole rest fits half the budget (`max_chunk`): one request for it.
    assert_eq!(grants(25_000, 10_000, 25_000), [25_000]);
    assert_eq!(grants(25_001, 10_000, 25_000), [10_000, 15_001]);
    assert_eq!(grants(36_000, 10_000, 25_000), [10_000, 10_000, 16_000]);
    // Half a budget under `max_chunk`'s floor bounds it (a budget of 4,600 bytes, its
    // chunks at least 4 KiB): the rest no longer goes whole.
    let floored = |len: u64| {
        grant_lens(
            len,
            1_000,
            Gate {
                grant: 1_150,
                max_chunk: 4_096,
                whole_rest: 2_300,
                ..Gate::OPEN
            },
        )
    };
    assert_eq!(floored(2_299), [2_299]);
    assert_eq!(floored(3_393), [1_150, 2_243]);
    // The policy's own chunk is a hard bound: 1,400 bytes are two grants, not one.
    assert_eq!(grants(1_400, 0, u64::MAX), [1_000, 400]);
    // A small budget shrinks the chunk (so several grants share it), never to zero.
    assert_eq!(grants(1_400, 0, 600), [600, 600, 200]);
    assert_eq!(grants(2, 0, 0), [1, 1]);
}

#[test]
fn a_lone_fragment_takes_its_rest_when_it_fits_and_half_the_budget_else() {
    // Policy chunk 1,000, enlarged to 10,000; half the budget 25,000; the read is alone on
    // the port with 60,000 bytes of room.
    let gate = |grant: u64, spread: Option<u64>| Gate {
        grant,
        max_chunk: 25_000,
        whole_rest: 25_000,
        lone: true,
        budget: 60_000,
        spread_chunk: spread,
        ..Gate::OPEN
    };
    assert_eq!(grant_lens(60_000, 1_000, gate(10_000, None)), [60_000]);
    // Over the room: half the budget, then the rest once it fits.
    assert_eq!(grant_lens(70_000, 1_000, gate(10_000, None)), [25_000, 45_000]);
    // Not enlarged, the policy's chunk stays the bound; spreading keeps its chunks.
    assert_eq!(grant_lens(3_000, 1_000, gate(0, None)), [1_000; 3]);
    assert_eq!(grant_lens(30_000, 20_000, gate(30_000, Some(5_000))), [5_000; 6]);
    // Not `lone` (other reads share the port) the quarter-budget chunks stand.
    let shared = Gate {
        lone: false,
        ..gate(10_000, None)
    };
    assert_eq!(
        grant_lens(60_000, 1_000, shared),
        [10_000, 10_000, 10_000, 10_000, 20_000]
    );
}

#[test]
fn an_enlarged_grant_shrinks_to_the_room_but_never_under_the_policy_chunk() {
    // Policy chunk 10,000; the port enlarges chunks to `enlarge` and has `room` bytes left.
    let grants = |len: u64, enlarge: u64, room: u64| {
        grant_lens(
            len,
            10_000,
            Gate {
                grant: enlarge,
                room,
                ..Gate::OPEN
            },
        )
    };
    // Enlarged, 20,000 would be one grant; 15,000 of room take 15,000 now, the rest next.
    assert_eq!(grants(20_000, 12_000, u64::MAX), [20_000]);
    assert_eq!(grants(20_000, 12_000, 15_000), [15_000, 5_000]);
    // Room under a policy chunk: the grant waits.
    assert_eq!(grants(20_000, 12_000, 9_999), Vec::<u64>::new());
    // The policy's own chunk never shrinks to the room.
    assert_eq!(grants(10_000, 0, 9_999), Vec::<u64>::new());
    assert_eq!(grants(20_000, 0, 15_000), [10_000, 10_000]);
    // A grant of more than two policy chunks (a fast path's) waits for its room.
    assert_eq!(grants(25_000, 15_000, 20_000), Vec::<u64>::new());
}

#[test]
fn an_enlarged_grant_waits_for_its_room_in_a_budget_of_many_such_grants() {
    // Policy chunk 10,000, enlarged to 12,000: a 20,000-byte fragment is one grant, and
    // 15,000 bytes of room are left in a budget of `budget`.
    let grants = |budget: u64| {
        grant_lens(
            20_000,
            10_000,
            Gate {
                grant: 12_000,
                room: 15_000,
                budget,
                ..Gate::OPEN
            },
        )
    };
    // Under GRANTS_PER_BUDGET such grants the budget is a few grants: it shrinks to the
    // room rather than leave the budget idle.
    let many = 20_000 * crate::receiver::GRANTS_PER_BUDGET;
    assert_eq!(grants(many - 1), [15_000, 5_000]);
    // From GRANTS_PER_BUDGET on, room comes back soon: one request, not two.
    assert_eq!(grants(many), Vec::<u64>::new());
    // With the whole grant's room, it goes at once either way.
    let roomy = Gate {
        grant: 12_000,
        room: 20_000,
        budget: many,
        ..Gate::OPEN
    };
    assert_eq!(grant_lens(20_000, 10_000, roomy), [20_000]);
}

#[test]
fn whole_grants_split_at_budget() {
    let stripe = Stripe::fixed_sru("k", &servers(2), 10_000).unwrap();
    let p = Policy::builder()
        .inflight_budget(6_000)
        .grant_size(GrantSize::Whole)
        .build()
        .unwrap();
    let now = Instant::now();
    let mut s = Scheduler::new(&stripe, &p, 1);
    let gs = requests(&mut s, now);
    assert_eq!(gs.iter().map(|g| g.len).collect::<Vec<_>>(), [6_000]);
}

#[test]
fn empty_block_is_complete_at_once() {
    let stripe = Stripe::fixed_sru("k", &servers(5), 0).unwrap();
    let mut s = Scheduler::new(&stripe, &Policy::default(), 1);
    assert!(s.is_complete());
    assert_eq!(s.poll_action(Instant::now()), None);
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn queued_grants_progress_with_their_connection_and_give_no_rtt_sample() {
    // One server, 4 chunks of 16 KiB pipelined on its primary connection.
    let stripe = Stripe::fixed_sru("k", &servers(1), 64 * 1024).unwrap();
    let mut s = Scheduler::new(&stripe, &Policy::default(), 7);
    let t0 = Instant::now();
    let gs = requests(&mut s, t0);
    assert_eq!(gs.len(), 4);
    // The head transfers slowly but steadily for 3 initial RTOs; the others wait behind it.
    let mut now = t0;
    for _ in 0..15 {
        now += Duration::from_millis(1);
        s.on_bytes(now, gs[0].id, 1000).unwrap();
        s.handle_timeout(now);
    }
    assert_eq!(s.poll_action(now), None, "no queued grant may be judged stalled");
    assert_eq!(s.stats().stalls, 0);
    assert_eq!(s.rtt().samples(), 1, "only the head's first byte is a sample");
    assert_eq!(s.rtt().latest(), Some(Duration::from_millis(1)));
    // When the connection goes quiet, the grants on it do stall.
    s.handle_timeout(now + Duration::from_millis(20));
    assert!(s.stats().stalls > 0);
}

#[test]
fn the_next_timeout_follows_a_grants_progress() {
    let stripe = Stripe::fixed_sru("k", &servers(1), 10_000).unwrap();
    let mut s = Scheduler::new(&stripe, &Policy::default(), 7);
    let t0 = Instant::now();
    let grants = requests(&mut s, t0);
    assert_eq!(grants.len(), 1, "one grant: {grants:?}");
    let g = &grants[0];
    let due = s.poll_timeout().unwrap();
    let timeout = due - t0;
    // Bytes halfway to the deadline move it: the caller need not wake at the old one.
    let t1 = t0 + timeout / 2;
    s.on_bytes(t1, g.id, MIN_PROGRESS_BYTES).unwrap();
    assert_eq!(s.poll_timeout(), Some(t1 + timeout));
    s.handle_timeout(due);
    assert_eq!(s.stats().stalls, 0);
    // Silent after that, it stalls at the moved deadline and not before.
    s.handle_timeout(t1 + timeout - Duration::from_micros(1));
    assert_eq!(s.stats().stalls, 0);
    s.handle_timeout(t1 + timeout);
    assert_eq!(s.stats().stalls, 1);
    s.check_invariants().unwrap();
}

#[test]
fn a_carried_rtt_estimate_times_the_first_grants() {
    let stripe = Stripe::fixed_sru("k", &servers(1), 1_000).unwrap();
    let mut rtt = RttEstimator::new(Policy::default().rto());
    rtt.on_sample(Duration::from_micros(400));
    let mut s = Scheduler::with_rtt(&stripe, &Policy::default(), 7, rtt);
    let t0 = Instant::now();
    requests(&mut s, t0);
    let wait = s.poll_timeout().unwrap() - t0;
    // SRTT 400 us + 4 * 200 us = 1.2 ms, +0..50% jitter; not the 5 ms initial RTO.
    assert!(
        wait >= Duration::from_micros(1200) && wait < Duration::from_micros(1800),
        "{wait:?}"
    );
}

#[test]
fn stall_is_hedged_on_spare_lane_and_late_bytes_discarded() {
    let stripe = Stripe::fixed_sru("k", &servers(1), 1_000).unwrap();
    let mut s = Scheduler::new(&stripe, &Policy::default(), 7);
    let t0 = Instant::now();
    let g = requests(&mut s, t0).pop().unwrap();
    assert_eq!(g.lane, Lane::Primary);
    // Initial RTO 5 ms, jitter up to +50%.
    let due = s.poll_timeout().unwrap();
    let wait = due - t0;
    assert!(
        wait >= Duration::from_millis(5) && wait < Duration::from_micros(7_500),
        "{wait:?}"
    );
    s.handle_timeout(due - Duration::from_micros(1));
    assert_eq!(s.poll_action(due), None, "not yet due");
    s.handle_timeout(due);
    let a = s.poll_action(due).unwrap();
    assert_eq!(
        a,
        Action::Cancel {
            id: g.id,
            server: ServerId(0),
            lane: Lane::Primary
        }
    );
    let h = requests(&mut s, due).pop().unwrap();
    assert_eq!(
        (h.kind, h.lane, h.len, h.block_offset),
        (GrantKind::Hedge, Lane::Spare, 1_000, 0)
    );
    // Late bytes of the stalled request are discarded, never written.
    assert_eq!(s.on_bytes(due, g.id, 500), Ok(Delivery::Discard));
    assert_eq!(s.on_done(due, g.id), Ok(()));
    finish(&mut s, &h, due);
    assert!(s.is_complete());
    assert_eq!(s.stats().hedges, 1);
    assert_eq!(s.stats().discarded_bytes, 500);
}

/// The grants queued behind a hedged or moved grant on its connection go along with
/// it, as retries, in order: one hedge of the hedge budget (or one move) for the
/// connection's stall, not one per grant (a single read of 16 servers of a 5 ms store had
/// 12 grants queued on one connection, and their hedges spent the read's budget).
#[test]
fn grants_queued_behind_a_hedged_or_moved_grant_go_along() {
    let stripe = Stripe::fixed_sru("k", &servers(1), 4_000).unwrap();
    let p = Policy::builder()
        .grant_size(GrantSize::Chunk { bytes: 1_000 })
        .pipeline_depth(4)
        .inflight_budget(4_000)
        .build()
        .unwrap();
    for hedge in [true, false] {
        let mut s = Scheduler::new(&stripe, &p, 7);
        let t0 = Instant::now();
        let gs = requests(&mut s, t0);
        assert_eq!(gs.len(), 4);
        assert!(gs.iter().all(|g| g.lane == Lane::Primary));
        // The third grant has a byte: it is not waiting for the first one's bytes.
        assert!(matches!(s.on_bytes(t0, gs[2].id, 1), Ok(Delivery::Write { .. })));
        // The first grant stalls (the others' timers, jittered, come about then too)
        // and is hedged, or moved (its read's hedge budget spent).
        let due = t0 + Duration::from_millis(10);
        if hedge {
            let mut gate = Gate::OPEN;
            s.on_stall(due, gs[0].id, &mut gate);
        } else {
            s.escalate(gs[0].id, due, false);
        }
        let actions: Vec<Action> = std::iter::from_fn(|| s.poll_action(due)).collect();
        let cancelled: Vec<GrantId> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Cancel { id, .. } => Some(*id),
                Action::Request(_) => None,
            })
            .collect();
        let issued: Vec<(GrantKind, Lane, u64)> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Request(g) => Some((g.kind, g.lane, g.block_offset)),
                Action::Cancel { .. } => None,
            })
            .collect();
        assert_eq!(cancelled, vec![gs[0].id, gs[1].id, gs[3].id], "{actions:?}");
        let first = if hedge { GrantKind::Hedge } else { GrantKind::Retry };
        assert_eq!(
            issued,
            vec![
                (first, Lane::Spare, 0),
                (GrantKind::Retry, Lane::Spare, 1_000),
                (GrantKind::Retry, Lane::Spare, 3_000),
            ],
            "hedge {hedge}"
        );
        let st = s.stats();
        assert_eq!((st.hedges, st.escalations), (u64::from(hedge), u64::from(!hedge)));
        s.check_invariants().unwrap();
    }
}

#[test]
fn the_port_multiplier_never_stretches_a_grant_timeout_past_the_rto_bound() {
    let stripe = Stripe::fixed_sru("k", &servers(2), 1_000).unwrap();
    let bounds = RtoBounds::new(
        Duration::from_millis(5),
        Duration::from_millis(1),
        Duration::from_millis(100),
    )
    .unwrap();
    let policy = Policy::builder().rto(bounds).build().unwrap();
    let mut s = Scheduler::new(&stripe, &policy, 7);
    // The initial RTO (5 ms), jittered by up to half.
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let plain = ms(s.grant_timeout(0, 1));
    assert!((5.0..=7.5).contains(&plain), "{plain} ms");
    let doubled = ms(s.grant_timeout(0, 2));
    assert!((10.0..=15.0).contains(&doubled), "{doubled} ms");
    // 64 x 5 ms would be 320-480 ms, past the kernel's own 200 ms RTO.
    assert_eq!(s.grant_timeout(0, MAX_TIMEOUT_SCALE), Duration::from_millis(100));
    // A backed-off timeout already over the bound is left as it is, not cut.
    let backed_off = ms(s.grant_timeout(10, MAX_TIMEOUT_SCALE));
    assert!((100.0..=150.0).contains(&backed_off), "{backed_off} ms");
}

#[test]
fn hedges_are_counted_won_or_spurious() {
    let stripe = Stripe::fixed_sru("k", &servers(2), 1_000).unwrap();
    let mut s = Scheduler::new(&stripe, &Policy::default(), 7);
    let t0 = Instant::now();
    let gs = requests(&mut s, t0);
    let due = s.poll_timeout().unwrap() + Duration::from_millis(5);
    s.handle_timeout(due);
    let cancels: Vec<_> = std::iter::from_fn(|| s.poll_action(due)).collect();
    let hedges: Vec<Grant> = cancels
        .iter()
        .filter_map(|a| match a {
            Action::Request(g) => Some(g.clone()),
            Action::Cancel { .. } => None,
        })
        .collect();
    assert_eq!(hedges.len(), 2, "{cancels:?}");
    // Fragment 0: the hedge completes first and wins; its original's late end is ignored.
    finish(&mut s, &hedges[0], due);
    assert_eq!(s.on_done(due, gs[0].id), Ok(()));
    // Fragment 1: the original ends whole before its hedge: spurious.
    assert_eq!(s.on_done(due, gs[1].id), Ok(()));
    finish(&mut s, &hedges[1], due);
    assert!(s.is_complete());
    let st = s.stats();
    assert_eq!((st.hedges, st.hedges_won, st.hedges_spurious), (2, 1, 1));
}

#[test]
fn a_trickling_server_is_stalled_not_progressing() {
    // One byte just before every timer: every byte used to count as progress, so the
    // grant was never judged stalled and never left the server.
    let mut s = replicated(20_000, None, 0);
    let mut now = Instant::now();
    let g = requests(&mut s, now).pop().unwrap();
    assert_eq!(g.server, ServerId(0));
    let mut moved = false;
    for _ in 0..10 * ESCALATE_AFTER_STALLS {
        let due = s.poll_timeout().unwrap();
        if s.live(g.id).is_some() {
            // A byte shortly before the timer fires.
            now = due - Duration::from_micros(10);
            assert!(matches!(s.on_bytes(now, g.id, 1), Ok(Delivery::Write { .. })));
        }
        now = due;
        s.handle_timeout(now);
        if std::iter::from_fn(|| s.poll_action(now)).any(|a| matches!(a, Action::Request(r) if r.server == ServerId(1)))
        {
            moved = true;
            break;
        }
    }
    assert!(moved, "the trickled grant never moved to the replica");
    assert_eq!(s.stats().escalations, 1);
}

#[test]
fn a_grant_left_behind_on_a_silent_server_follows_its_fragment() {
    // Two pipelined chunks on server 0, which goes silent. The hedge budget covers one:
    // the first is hedged and moves the fragment to the replica; the second, still on
    // server 0, must follow it there rather than wait for server 0 (it used to wait until
    // the read's deadline: "the grant will end with its connection" is not true of a
    // server that keeps the connection open and sends nothing).
    let mut s = replicated(20_000, Some(10_000), 10_000);
    let mut now = Instant::now();
    let first = requests(&mut s, now);
    assert_eq!(first.len(), 2, "{first:?}");
    assert!(first.iter().all(|g| g.server == ServerId(0)));
    // The replica answers at once; server 0 never does.
    for _ in 0..10 * ESCALATE_AFTER_STALLS {
        let Some(due) = s.poll_timeout() else { break };
        now = due;
        s.handle_timeout(now);
        for g in requests(&mut s, now) {
            assert_eq!(g.server, ServerId(1), "{g:?}");
            finish(&mut s, &g, now);
        }
        if s.is_complete() {
            break;
        }
    }
    assert!(s.is_complete(), "the grant left on server 0 never moved");
    assert_eq!((s.stats().hedges, s.stats().escalations), (1, 1));
}

#[test]
fn a_segment_is_progress() {
    // The same, with a segment before every timer: the grant stays (it is slow, not stalled).
    let mut s = replicated(60_000, None, 0);
    let g = requests(&mut s, Instant::now()).pop().unwrap();
    assert_eq!(g.len, 60_000);
    let mut got = 0;
    while got < g.len {
        let now = s.poll_timeout().unwrap() - Duration::from_micros(10);
        let n = MIN_PROGRESS_BYTES.min(g.len - got);
        s.on_bytes(now, g.id, n).unwrap();
        got += n;
        s.handle_timeout(now);
        assert_eq!(s.poll_action(now), None);
    }
    assert_eq!((s.stats().stalls, s.stats().escalations), (0, 0));
}

/// A one-fragment read of 1,000 bytes on server 0 (with `replicas`) and no hedge
/// budget, whose first grant never progresses, under a port that moves such grants
/// after `within` (`None`: stalls only): returns the scheduler, that grant, the retry it
/// was moved to after [`ESCALATE_AFTER_STALLS`] stalls or `within`, whichever came first
/// (checking that the original was cancelled first, and not before), and the time of
/// the move. The read starts at `start`.
fn escalated_within(
    replicas: &[ServerId],
    within: Option<Duration>,
    start: Instant,
) -> (Scheduler, Grant, Grant, Instant) {
    let frag = Fragment::new(ServerId(0), "k", 0, 1_000).with_replicas(replicas.iter().copied());
    let stripe = Stripe::new(vec![frag]).unwrap();
    let p = Policy::builder()
        .hedging(Hedging::AfterRto {
            budget_fraction: 0.0,
            min_budget_bytes: 0,
        })
        .build()
        .unwrap();
    let mut s = Scheduler::new(&stripe, &p, 7);
    let mut now = start;
    let g = requests(&mut s, now).pop().unwrap();
    assert_eq!((g.server, g.lane), (ServerId(0), Lane::Primary));
    let mut moved = None;
    let gate = Gate {
        escalate_within: within,
        ..Gate::OPEN
    };
    for stall in 1..=ESCALATE_AFTER_STALLS {
        now = s.poll_timeout().unwrap();
        s.handle_timeout_gated(now, &gate);
        let actions: Vec<_> = std::iter::from_fn(|| s.poll_action(now)).collect();
        let due = stall == ESCALATE_AFTER_STALLS || within.is_some_and(|w| now - start >= w);
        assert_eq!(
            !actions.is_empty(),
            due,
            "stall {stall} of {ESCALATE_AFTER_STALLS} after {:?}: {actions:?}",
            now - start
        );
        if due {
            moved = Some(actions);
            break;
        }
    }
    if let Some(w) = within {
        assert!(now - start <= w, "moved after {:?}", now - start);
    }
    let actions = moved.expect("escalated");
    assert_eq!(
        actions[0],
        Action::Cancel {
            id: g.id,
            server: ServerId(0),
            lane: Lane::Primary
        }
    );
    let Action::Request(r) = &actions[1] else {
        panic!("{actions:?}")
    };
    assert_eq!((r.kind, r.len), (GrantKind::Retry, 1_000));
    assert_eq!((s.stats().escalations, s.stats().hedges), (1, 0));
    (s, g, r.clone(), now)
}

fn escalated(replicas: &[ServerId]) -> (Scheduler, Grant, Grant, Instant) {
    escalated_within(replicas, None, Instant::now())
}

#[test]
fn on_a_lossy_port_a_grant_stalled_past_the_hedge_budget_moves_within_the_bound() {
    // Stalls alone: the sixth comes after 5 + 10 + 20 + 40 + 80 + 100 ms (and jitter),
    // past the server kernel's 200 ms RTO.
    let start = Instant::now();
    let (_, _, _, at) = escalated_within(&[], None, start);
    assert!(at - start > Duration::from_millis(200), "{:?}", at - start);
    // Where the port reports loss, within ESCALATE_WITHIN, a stall or two earlier.
    let start = Instant::now();
    let (mut s, _, r, at) = escalated_within(&[ServerId(1)], Some(ESCALATE_WITHIN), start);
    assert!(at - start <= ESCALATE_WITHIN, "{:?}", at - start);
    assert_eq!((r.server, r.lane), (ServerId(1), Lane::Primary));
    finish(&mut s, &r, at);
    assert!(s.is_complete());
}

#[test]
fn a_grant_without_progress_goes_late_before_it_stalls_and_its_first_byte_is_clamped() {
    // Under a late bound of 1 ms (the initial RTO is 5 ms), a grant with no byte goes
    // late at 1 ms: its bytes leave `late_bytes`' complement, nothing is hedged, and
    // progress brings them back. Its first byte, 8 ms after issue (a repaired loss),
    // enters the RTT estimate clamped to the 1 ms at which it went late (Karn).
    let late = Gate {
        late_after: Some(Duration::from_millis(1)),
        ..Gate::OPEN
    };
    let stripe = Stripe::new(vec![Fragment::new(ServerId(0), "k", 0, 4_000)]).unwrap();
    let mut s = Scheduler::new(&stripe, &Policy::default(), 7);
    let t = Instant::now();
    let Polled::Action(Action::Request(g)) = s.poll_gated(t, &late) else {
        panic!("a first grant")
    };
    assert_eq!(s.late_bytes(), 0);
    let due = s.poll_timeout().expect("a timer");
    assert_eq!(due, t + Duration::from_millis(1), "the late bound comes first");
    s.handle_timeout_gated(due, &late);
    assert_eq!(s.late_bytes(), g.len);
    assert_eq!((s.stats().stalls, s.stats().hedges, s.stats().late_grants), (0, 0, 1));
    // The stall timer still runs: the next due is past the late bound.
    assert!(s.poll_timeout().expect("the stall timer") > due);
    s.on_bytes(t + Duration::from_millis(8), g.id, MIN_PROGRESS_BYTES)
        .unwrap();
    assert_eq!(s.late_bytes(), 0, "progress ends lateness");
    assert_eq!(s.take_sample(), Some((Duration::from_millis(1), true)), "Karn's clamp");
    assert_eq!(s.rtt().latest(), Some(Duration::from_millis(1)));
    // Without a late bound (a read scheduled alone), the same grant is never late and its
    // sample is the whole 8 ms.
    let mut s = Scheduler::new(&stripe, &Policy::default(), 7);
    let Polled::Action(Action::Request(g)) = s.poll_gated(t, &Gate::OPEN) else {
        panic!("a first grant")
    };
    let due = s.poll_timeout().expect("a timer");
    assert!(due > t + Duration::from_millis(1));
    s.on_bytes(t + Duration::from_millis(8), g.id, MIN_PROGRESS_BYTES)
        .unwrap();
    assert_eq!(s.stats().late_grants, 0);
    assert_eq!(s.take_sample(), Some((Duration::from_millis(8), false)));
}

#[test]
fn the_time_bound_moves_a_fragment_at_most_max_timed_moves_times_without_progress() {
    // Moved within the bound, the retry stalls too (it lost its own tail): it moves
    // within the bound again, MAX_TIMED_MOVES times in all; the move after those waits
    // for the stall count, so a server slower than the bound still gets to answer.
    let lossy = Gate {
        escalate_within: Some(ESCALATE_WITHIN),
        ..Gate::OPEN
    };
    let start = Instant::now();
    let (mut s, _, _, first) = escalated_within(&[], Some(ESCALATE_WITHIN), start);
    assert!(first - start <= ESCALATE_WITHIN);
    let mut moves = vec![first];
    while moves.len() <= usize::from(MAX_TIMED_MOVES) {
        let now = s.poll_timeout().expect("the retry's stall timer");
        s.handle_timeout_gated(now, &lossy);
        let moved = std::iter::from_fn(|| s.poll_action(now))
            .any(|a| matches!(a, Action::Request(g) if g.kind == GrantKind::Retry));
        if moved {
            moves.push(now);
        }
        assert!(now - first < Duration::from_secs(5), "the retry never moved");
    }
    let gaps: Vec<Duration> = moves.windows(2).map(|w| w[1] - w[0]).collect();
    let (timed, last) = gaps.split_at(gaps.len() - 1);
    assert_eq!(timed.len(), usize::from(MAX_TIMED_MOVES) - 1, "{gaps:?}");
    // Each timed move comes within the bound of the retry's expected arrival (its
    // issue plus a round trip and some jitter).
    assert!(
        timed.iter().all(|&d| d <= ESCALATE_WITHIN + Duration::from_millis(20)),
        "{gaps:?}"
    );
    assert!(last[0] > Duration::from_millis(200), "{gaps:?}");
    assert_eq!(s.stats().escalations, u64::from(MAX_TIMED_MOVES) + 1);
}

/// A fragment of two 1,000-byte chunks, `depth` of them in flight at once, without hedge
/// budget, and the gate of a lossy port (the time bound on).
fn two_chunks_on_a_lossy_port(depth: u32) -> (Scheduler, Gate) {
    let lossy = Gate {
        escalate_within: Some(ESCALATE_WITHIN),
        ..Gate::OPEN
    };
    let stripe = Stripe::new(vec![Fragment::new(ServerId(0), "k", 0, 2_000)]).unwrap();
    let p = Policy::builder()
        .grant_size(GrantSize::Chunk { bytes: 1_000 })
        .pipeline_depth(depth)
        .hedging(Hedging::AfterRto {
            budget_fraction: 0.0,
            min_budget_bytes: 0,
        })
        .build()
        .unwrap();
    (Scheduler::new(&stripe, &p, 7), lossy)
}

#[test]
fn the_time_bound_counts_moves_per_range_not_per_fragment() {
    // Two chunks of one fragment in flight at once, both losing their tails, no hedge
    // budget, on a lossy port: each range moves within the bound MAX_TIMED_MOVES times.
    // Counted per fragment, the two ranges shared the count, and the range left without
    // a timed move waited for the stall count while its server's RTO fired (traced at
    // 100 Mbit/s beside 2 bulk flows, docs/measurements.md, *Thirty-second session*).
    let (mut s, lossy) = two_chunks_on_a_lossy_port(2);
    let start = Instant::now();
    let first = requests(&mut s, start);
    assert_eq!(first.len(), 2, "{first:?}");
    // Per range (its block offset): when it was last issued, and its moves within the bound.
    let mut ranges: HashMap<u64, (Instant, u32)> = first.iter().map(|g| (g.block_offset, (start, 0))).collect();
    while ranges.values().any(|&(_, n)| n < u32::from(MAX_TIMED_MOVES)) {
        let now = s.poll_timeout().expect("a stall timer");
        assert!(now - start < Duration::from_secs(2), "moves per range: {ranges:?}");
        s.handle_timeout_gated(now, &lossy);
        for a in std::iter::from_fn(|| s.poll_action(now)).collect::<Vec<_>>() {
            let Action::Request(g) = a else { continue };
            assert_eq!(g.kind, GrantKind::Retry, "{g:?}");
            let (issued, n) = ranges.get_mut(&g.block_offset).expect("a range of the first two");
            if now - *issued <= ESCALATE_WITHIN + Duration::from_millis(20) {
                *n += 1;
            }
            *issued = now;
        }
    }
}

#[test]
fn after_progress_the_time_bound_moves_a_fragment_again() {
    // Two chunks, one at a time, no hedge budget, on a lossy port: the first chunk's
    // grant moves within the bound and its retry delivers; the second chunk's grant
    // stalls too and moves within the bound again (a fragment can lose several tails).
    let (mut s, lossy) = two_chunks_on_a_lossy_port(1);
    let mut now = Instant::now();
    let mut issued = now;
    let mut first = requests(&mut s, now);
    assert_eq!(first.len(), 1, "{first:?}");
    let mut moves = Vec::new();
    while moves.len() < 2 {
        now = s.poll_timeout().expect("a stall timer");
        s.handle_timeout_gated(now, &lossy);
        for a in std::iter::from_fn(|| s.poll_action(now)).collect::<Vec<_>>() {
            let Action::Request(g) = a else { continue };
            assert_eq!(g.kind, GrantKind::Retry, "{g:?}");
            moves.push(now - issued);
            if moves.len() == 1 {
                // The retry delivers 5 ms later (a round trip that sets the RTO): progress.
                // The second chunk goes out and stalls.
                now += Duration::from_millis(5);
                finish(&mut s, &g, now);
                first = requests(&mut s, now);
                assert_eq!(first.len(), 1, "{first:?}");
                issued = now;
            }
        }
    }
    assert!(moves.iter().all(|&d| d <= ESCALATE_WITHIN), "{moves:?}");
}

#[test]
fn moves_without_progress_back_off_until_a_slow_server_answers() {
    // One server, no replica, no hedge budget, a port without loss: a server that
    // answers every request 1 s after it arrives. Each move by the stall count cancels
    // the request and restarts the server's wait; the stall count alone moved the range
    // every 255 ms or less, so the server never answered. Each move now waits twice as
    // long as the one before, and a retry finally gets its answer.
    let start = Instant::now();
    let (mut s, _, mut r, mut now) = escalated_within(&[], None, start);
    let mut moves = vec![(now, r.clone())];
    let slow = Duration::from_secs(1);
    loop {
        let due = s.poll_timeout().expect("a stall timer");
        let answer = moves.last().expect("a move").0 + slow;
        if answer <= due {
            finish(&mut s, &r, answer);
            now = answer;
            break;
        }
        now = due;
        s.handle_timeout_gated(now, &Gate::OPEN);
        for a in std::iter::from_fn(|| s.poll_action(now)).collect::<Vec<_>>() {
            if let Action::Request(g) = a {
                assert_eq!(g.kind, GrantKind::Retry, "{g:?}");
                moves.push((now, g.clone()));
                r = g;
            }
        }
        assert!(
            now - start < Duration::from_secs(10),
            "never answered: {:?}",
            moves.len()
        );
    }
    assert!(s.is_complete());
    let gaps: Vec<Duration> = moves.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert!(
        gaps.windows(2).all(|w| w[1] >= w[0] * 2),
        "each move waits twice the last: {gaps:?}"
    );
    // The first move after 255 ms or so, then about 0.5 s, then the answer 1 s after it.
    assert!(
        now - start < Duration::from_secs(3),
        "{:?}, moves {gaps:?}",
        now - start
    );
}

#[test]
fn a_grant_stalled_past_the_hedge_budget_escalates_to_a_replica() {
    let (mut s, _, r, now) = escalated(&[ServerId(1)]);
    assert_eq!((r.server, r.lane), (ServerId(1), Lane::Primary));
    finish(&mut s, &r, now);
    assert!(s.is_complete());
}

#[test]
fn without_a_replica_a_stalled_grant_escalates_to_the_other_lane() {
    // One server, no replica, no hedge budget: the grant used to wait for its
    // connection (the server kernel's backed-off RTO) until the read's deadline.
    let (mut s, g, r, now) = escalated(&[]);
    assert_eq!((r.server, r.lane), (ServerId(0), Lane::Spare));
    // The late bytes of the moved grant are dropped; the retry completes the block.
    assert_eq!(s.on_bytes(now, g.id, 10), Ok(Delivery::Discard));
    finish(&mut s, &r, now);
    assert!(s.is_complete());
}

#[test]
fn hedge_prefers_replica() {
    let stripe = Stripe::new(vec![
        Fragment::new(ServerId(0), "k", 0, 100).with_replicas([ServerId(9)])
    ])
    .unwrap();
    let mut s = Scheduler::new(&stripe, &Policy::default(), 7);
    let t0 = Instant::now();
    requests(&mut s, t0);
    let due = s.poll_timeout().unwrap();
    s.handle_timeout(due);
    let h = requests(&mut s, due).pop().unwrap();
    assert_eq!((h.server, h.lane), (ServerId(9), Lane::Primary));
}

#[test]
fn repeated_hedges_avoid_connections_that_stalled() {
    let stripe = Stripe::new(vec![
        Fragment::new(ServerId(0), "k", 0, 100).with_replicas([ServerId(9)])
    ])
    .unwrap();
    let mut s = Scheduler::new(&stripe, &Policy::default(), 7);
    let mut now = Instant::now();
    let mut seen = vec![];
    for _ in 0..5 {
        let g = requests(&mut s, now).pop().unwrap();
        seen.push((g.server.0, g.lane));
        now = s.poll_timeout().unwrap();
        s.handle_timeout(now);
    }
    // Every (server, lane) once before any repeats, the other server first each time.
    let (p, sp) = (Lane::Primary, Lane::Spare);
    assert_eq!(&seen[..4], &[(0, p), (9, p), (0, sp), (9, sp)]);
}

#[test]
fn hedge_budget_caps_hedges_and_backs_off() {
    let stripe = Stripe::fixed_sru("k", &servers(1), 1_000).unwrap();
    let p = Policy::builder()
        .hedging(Hedging::AfterRto {
            budget_fraction: 0.0,
            min_budget_bytes: 1_500,
        })
        .build()
        .unwrap();
    let mut s = Scheduler::new(&stripe, &p, 7);
    let mut now = Instant::now();
    requests(&mut s, now);
    let mut gaps = vec![];
    for _ in 0..4 {
        let due = s.poll_timeout().unwrap();
        gaps.push(due - now);
        now = due;
        s.handle_timeout(now);
        requests(&mut s, now);
    }
    assert_eq!(s.stats().hedges, 1, "second hedge would exceed the 1500-byte budget");
    assert_eq!(s.stats().hedges_denied, 3);
    assert!(gaps[3] > gaps[1], "backoff grows: {gaps:?}");
}

#[test]
fn a_lost_connection_asks_the_last_server_again_once() {
    let stripe = Stripe::fixed_sru("k", &servers(4), 1_000).unwrap();
    let whole = Policy::builder().grant_size(GrantSize::Whole).build().unwrap();
    let mut s = Scheduler::new(&stripe, &whole, 1);
    let t = Instant::now();
    let gs = requests(&mut s, t);
    assert_eq!(gs.len(), 4);
    // The connection to server 2 resets mid-response: the range goes to server 2 again.
    s.on_bytes(t, gs[2].id, 400).unwrap();
    s.on_lost(t, gs[2].id).unwrap();
    assert!(!s.is_finished());
    let again = requests(&mut s, t);
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!((again[0].server, again[0].fragment), (ServerId(2), 2));
    assert_eq!(again[0].kind, GrantKind::Retry);
    assert_eq!(s.stats().lost_retries, 1);
    // The others complete; the retry is lost too, a second loss: the read fails naming
    // the server, as a failure would.
    for g in [&gs[0], &gs[1], &gs[3]] {
        finish(&mut s, g, t);
    }
    let later = t + Duration::from_millis(1);
    s.on_lost(later, again[0].id).unwrap();
    assert_eq!(
        s.error(),
        Some(&ReadError::ServerFailed {
            fragment: 2,
            server: ServerId(2),
            tried: vec![ServerId(2)]
        })
    );
    s.check_invariants().unwrap();
}

#[test]
fn grants_lost_with_one_connection_share_one_retry_and_a_replica_takes_a_loss() {
    // Two chunks of one fragment on one connection, lost at the same instant: one loss,
    // both asked again of the same server.
    let stripe = Stripe::fixed_sru("k", &servers(1), 4_000).unwrap();
    let chunked = Policy::builder()
        .grant_size(GrantSize::Chunk { bytes: 1_000 })
        .pipeline_depth(2)
        .build()
        .unwrap();
    let mut s = Scheduler::new(&stripe, &chunked, 1);
    let t = Instant::now();
    let gs = requests(&mut s, t);
    assert_eq!(gs.len(), 2, "{gs:?}");
    for g in &gs {
        s.on_lost(t, g.id).unwrap();
    }
    assert!(!s.is_finished(), "{:?}", s.error());
    let again = requests(&mut s, t);
    assert_eq!(again.len(), 2, "{again:?}");
    assert!(again
        .iter()
        .all(|g| g.server == ServerId(0) && g.kind == GrantKind::Retry));
    assert_eq!(s.stats().lost_retries, 2);
    // With a replica the loss moves the range there, as a failure does.
    let mut r = replicated(1_000, None, 0);
    let g = requests(&mut r, t);
    assert_eq!(g.len(), 1);
    r.on_lost(t, g[0].id).unwrap();
    let moved = requests(&mut r, t);
    assert_eq!(moved.len(), 1);
    assert_eq!((moved[0].server, r.stats().lost_retries), (ServerId(1), 0));
}

#[test]
fn failure_without_replica_names_server_and_cancels_the_rest() {
    let stripe = Stripe::fixed_sru("k", &servers(4), 100).unwrap();
    let mut s = Scheduler::new(&stripe, &Policy::default(), 1);
    let now = Instant::now();
    let gs = requests(&mut s, now);
    assert_eq!(gs.len(), 4);
    s.on_bytes(now, gs[2].id, 50).unwrap();
    s.on_failed(now, gs[2].id).unwrap();
    assert_eq!(
        s.error(),
        Some(&ReadError::ServerFailed {
            fragment: 2,
            server: ServerId(2),
            tried: vec![ServerId(2)]
        })
    );
    let cancelled: Vec<_> = std::iter::from_fn(|| s.poll_action(now)).collect();
    assert_eq!(cancelled.len(), 3);
    assert!(!s.is_complete());
    assert_eq!(
        s.error().unwrap().to_string(),
        "fragment 2 failed on server 2; no replica left (tried server 2)"
    );
}

#[test]
fn failure_with_replica_retries_whole_grant() {
    let stripe = Stripe::new(vec![
        Fragment::new(ServerId(0), "k", 7, 100).with_replicas([ServerId(1)])
    ])
    .unwrap();
    let mut s = Scheduler::new(&stripe, &Policy::default(), 1);
    let now = Instant::now();
    let g = requests(&mut s, now).pop().unwrap();
    s.on_bytes(now, g.id, 60).unwrap();
    // A short end is refused without changing state; the transport reports a failure.
    assert!(matches!(
        s.on_done(now, g.id),
        Err(EventError::Short { received: 60, .. })
    ));
    s.on_failed(now, g.id).unwrap();
    let r = requests(&mut s, now).pop().unwrap();
    assert_eq!(
        (r.server, r.kind, r.object_offset, r.len),
        (ServerId(1), GrantKind::Retry, 7, 100)
    );
    assert!(matches!(
        s.on_bytes(now, r.id, 101),
        Err(EventError::TooManyBytes { extra: 1, .. })
    ));
    finish(&mut s, &r, now);
    assert!(s.is_complete());
}

#[test]
fn unknown_ids_are_errors() {
    let stripe = Stripe::fixed_sru("k", &servers(1), 10).unwrap();
    let mut s = Scheduler::new(&stripe, &Policy::default(), 1);
    let bogus = GrantId::new(5, 0);
    let now = Instant::now();
    assert_eq!(s.on_bytes(now, bogus, 1), Err(EventError::UnknownGrant { id: bogus }));
    assert_eq!(s.on_done(now, bogus), Err(EventError::UnknownGrant { id: bogus }));
    assert_eq!(s.on_failed(now, bogus), Err(EventError::UnknownGrant { id: bogus }));
}

#[test]
fn fixed_stagger_spaces_starts() {
    let stripe = Stripe::fixed_sru("k", &servers(3), 10).unwrap();
    let gap = Duration::from_micros(100);
    let p = Policy::builder().stagger(Stagger::Fixed { gap }).build().unwrap();
    let mut s = Scheduler::new(&stripe, &p, 1);
    let t0 = Instant::now();
    assert_eq!(requests(&mut s, t0).len(), 1);
    assert_eq!(s.poll_timeout(), Some(t0 + gap));
    assert_eq!(requests(&mut s, t0 + gap).len(), 1);
    assert_eq!(requests(&mut s, t0 + gap * 2).len(), 1);
}

#[test]
fn aimd_halves_on_stall_and_regrows() {
    let stripe = Stripe::fixed_sru("k", &servers(64), 64_000).unwrap();
    let p = Policy::builder()
        .max_senders(64)
        .inflight_budget(64_000)
        .grant_size(GrantSize::Chunk { bytes: 4_000 })
        .hedging(Hedging::Off)
        .adaptation(Adaptation::Aimd)
        .build()
        .unwrap();
    let mut s = Scheduler::new(&stripe, &p, 3);
    let t0 = Instant::now();
    let gs = requests(&mut s, t0);
    assert_eq!(gs.len(), 16);
    let due = s.poll_timeout().unwrap();
    s.handle_timeout(due);
    assert_eq!(s.effective_budget(), 32_000, "one decrease per RTT even if all stall");
    for g in &gs {
        finish(&mut s, g, due);
    }
    // Additive increase: C * C / B_eff per grant, about 500 bytes each here.
    let b = s.effective_budget();
    assert!(b > 32_000 && b < 48_000, "{b}");
    assert_eq!(
        requests(&mut s, due).len() as u64,
        b / 4_000,
        "grants fill the effective budget, not B"
    );
}

/// A transport that answers every grant at once; fragment `i` of unknown length is
/// `lens[i]` bytes long. Returns the bytes delivered per fragment.
fn run_unknown(s: &mut Scheduler, stripe: &Stripe, lens: &[u64], now: Instant) -> Vec<u64> {
    let mut got = vec![0u64; stripe.len()];
    let mut rounds = 0;
    while !s.is_finished() {
        rounds += 1;
        assert!(rounds < 100_000, "no progress");
        let gs = requests(s, now);
        assert!(!gs.is_empty(), "idle but not finished");
        for g in gs {
            if stripe.fragment(g.fragment).known_len().is_none() {
                s.on_length(now, g.id, lens[g.fragment]).unwrap();
            }
            // The grant as cut: what the server sends.
            let start = g.object_offset - stripe.fragment(g.fragment).offset();
            let n = g.len.min(s.fragment_len(g.fragment).unwrap().saturating_sub(start));
            if n > 0 {
                assert!(matches!(s.on_bytes(now, g.id, n).unwrap(), Delivery::Write { .. }));
            }
            got[g.fragment] += n;
            s.on_done(now, g.id).unwrap();
        }
    }
    got
}

#[test]
fn unknown_lengths_are_learnt_and_read_whole() {
    let p = Policy::builder()
        .grant_size(GrantSize::Chunk { bytes: 1000 })
        .pipeline_depth(4)
        .inflight_budget(8_000)
        .build()
        .unwrap();
    // Lengths around the chunk and the maximum, and 0.
    let lens = [0u64, 1, 999, 1000, 1001, 4321, 10_000, 0];
    let mut frags: Vec<Fragment> = lens
        .iter()
        .enumerate()
        .map(|(i, _)| Fragment::query(ServerId(i as u32), "idx", vec![i as u8], 10_000))
        .collect();
    frags.push(Fragment::new(ServerId(9), "k", 0, 2500));
    let lens: Vec<u64> = lens.iter().copied().chain([2500]).collect();
    let stripe = Stripe::new(frags).unwrap();
    let now = Instant::now();
    let mut s = Scheduler::new(&stripe, &p, 7);
    assert_eq!(s.block_len(), 8 * 10_000 + 2500);
    assert_eq!(s.fragment_len(0), None);
    assert_eq!(s.fragment_len(8), Some(2500));
    let got = run_unknown(&mut s, &stripe, &lens, now);
    assert!(s.is_complete());
    assert_eq!(got, lens);
    assert_eq!(s.block_len(), lens.iter().sum::<u64>());
    for (i, l) in lens.iter().enumerate() {
        assert_eq!(s.fragment_len(i), Some(*l));
        assert_eq!(s.fragment_confirmed(i), Some(*l));
    }
    s.check_invariants().unwrap();
}

/// A fragment whose grants all wait in its store takes up to [`STORE_DEPTH_FACTOR`]
/// times the pipeline depth, each grant held as the receiver holds it; a fragment whose
/// server answers at once stays at the policy's depth.
#[test]
fn a_fragment_held_by_its_store_takes_a_deeper_pipeline() {
    let p = Policy::builder()
        .grant_size(GrantSize::Chunk { bytes: 1000 })
        .pipeline_depth(2)
        .inflight_budget(1_000_000)
        .build()
        .unwrap();
    let stripe = Stripe::fixed_sru("a", &[ServerId(0)], 100_000).unwrap();
    let now = Instant::now();
    let hold = now + Duration::from_millis(20);
    for store in [true, false] {
        let mut s = Scheduler::new(&stripe, &p, 1);
        let mut issued = 0;
        loop {
            let more = requests(&mut s, now);
            if more.is_empty() {
                break;
            }
            for g in &more {
                s.expect_by(now, g.id, hold, store);
                issued += 1;
            }
            s.check_invariants().unwrap();
        }
        // Held: 4 (STORE_DEPTH_FACTOR) times the policy's 2.
        let depth = if store { 8 } else { 2 };
        assert_eq!((issued, s.live_grants()), (depth, depth), "store {store}");
    }
}

/// A held (or stuck, or late) first grant of a fragment whose length was unknown, cut by
/// the length its server announces, keeps its state's count to the bytes it still
/// waits for. The held count kept the bytes cut away, and in a release build the port's
/// counted bytes wrapped below zero and it admitted nothing more
/// (`tests/search_aggregate.rs` timed out).
#[test]
fn a_cut_grant_leaves_the_held_stuck_and_late_counts_exact() {
    let p = Policy::builder()
        .grant_size(GrantSize::Chunk { bytes: 1000 })
        .build()
        .unwrap();
    let stripe = Stripe::new(vec![Fragment::up_to(ServerId(0), "log", 0, 50_000)]).unwrap();
    let now = Instant::now();
    for state in ["held", "stuck"] {
        let mut s = Scheduler::new(&stripe, &p, 1);
        let g = requests(&mut s, now).pop().expect("a first grant");
        if state == "held" {
            s.expect_by(now, g.id, now + Duration::from_millis(20), true);
            assert_eq!(s.held_bytes(), 1000);
        } else {
            s.mark_stuck();
            assert_eq!(s.stuck_bytes(), 1000);
        }
        s.on_length(now, g.id, 300).unwrap();
        s.check_invariants().unwrap();
        assert_eq!(s.held_bytes() + s.stuck_bytes(), 300, "{state}");
        s.on_bytes(now, g.id, 300).unwrap();
        s.on_done(now, g.id).unwrap();
        assert_eq!((s.held_bytes(), s.stuck_bytes(), s.outstanding()), (0, 0, 0), "{state}");
        assert!(s.is_complete());
    }
    // Late: a grant past the receiver's late bound before its length came.
    let late = Gate {
        late_after: Some(Duration::from_millis(1)),
        ..Gate::OPEN
    };
    let mut s = Scheduler::new(&stripe, &p, 1);
    let Polled::Action(Action::Request(g)) = s.poll_gated(now, &late) else {
        panic!("a first grant")
    };
    let due = s.poll_timeout().expect("the late bound");
    s.handle_timeout_gated(due, &late);
    assert_eq!(s.late_bytes(), 1000);
    s.on_length(due, g.id, 300).unwrap();
    s.check_invariants().unwrap();
    assert_eq!(s.late_bytes(), 300);
}

#[test]
fn an_unknown_fragment_gets_one_grant_until_its_length_and_frees_the_rest_of_it() {
    let p = Policy::builder()
        .grant_size(GrantSize::Chunk { bytes: 1000 })
        .pipeline_depth(4)
        .inflight_budget(100_000)
        .build()
        .unwrap();
    let stripe = Stripe::new(vec![Fragment::up_to(ServerId(0), "log", 0, 50_000)]).unwrap();
    let now = Instant::now();
    let mut s = Scheduler::new(&stripe, &p, 1);
    let gs = requests(&mut s, now);
    // Depth 4, but the length is unknown: one grant, one chunk (unscheduled bytes).
    assert_eq!(gs.len(), 1);
    assert_eq!(gs[0].len, 1000);
    assert_eq!(s.outstanding(), 1000);
    // Bytes before the length are refused, and change nothing.
    assert!(matches!(
        s.on_bytes(now, gs[0].id, 10),
        Err(EventError::LengthUnknown { .. })
    ));
    assert!(matches!(
        s.on_length(now, gs[0].id, 50_001),
        Err(EventError::LengthOverMax {
            len: 50_001,
            max: 50_000,
            ..
        })
    ));
    assert_eq!(s.outstanding(), 1000);
    s.on_length(now, gs[0].id, 300).unwrap();
    // The grant is cut to 300 bytes: the budget it held beyond that is free at once.
    assert_eq!(s.outstanding(), 300);
    assert_eq!(s.block_len(), 300);
    assert!(requests(&mut s, now).is_empty());
    // The same length again is fine; another is refused.
    s.on_length(now, gs[0].id, 300).unwrap();
    assert!(matches!(
        s.on_length(now, gs[0].id, 301),
        Err(EventError::LengthChanged {
            len: 301,
            known: 300,
            ..
        })
    ));
    assert!(matches!(
        s.on_bytes(now, gs[0].id, 301),
        Err(EventError::TooManyBytes { .. })
    ));
    s.on_bytes(now, gs[0].id, 300).unwrap();
    s.on_done(now, gs[0].id).unwrap();
    assert!(s.is_complete());
}

#[test]
fn a_length_over_the_maximum_moves_the_fragment_to_a_replica() {
    let stripe = Stripe::new(vec![
        Fragment::query(ServerId(0), "idx", b"q".as_slice(), 5000).with_replicas([ServerId(1)])
    ])
    .unwrap();
    let now = Instant::now();
    let mut s = Scheduler::new(&stripe, &Policy::default(), 3);
    let g = requests(&mut s, now).remove(0);
    assert_eq!(g.server, ServerId(0));
    assert!(s.on_length(now, g.id, 6000).is_err());
    // The transport fails the grant; the read moves on to the replica.
    s.on_failed(now, g.id).unwrap();
    let r = requests(&mut s, now).remove(0);
    assert_eq!((r.server, r.kind), (ServerId(1), GrantKind::Retry));
    s.on_length(now, r.id, 4000).unwrap();
    s.on_bytes(now, r.id, r.len.min(4000)).unwrap();
    s.on_done(now, r.id).unwrap();
    run_unknown(&mut s, &stripe, &[4000], now);
    assert!(s.is_complete());
    assert_eq!(s.fragment_len(0), Some(4000));
    // With no replica left, the read fails naming the server.
    let lone = Stripe::new(vec![Fragment::up_to(ServerId(0), "k", 0, 10)]).unwrap();
    let mut s = Scheduler::new(&lone, &Policy::default(), 3);
    let g = requests(&mut s, now).remove(0);
    assert!(s.on_length(now, g.id, 11).is_err());
    s.on_failed(now, g.id).unwrap();
    assert!(matches!(s.error(), Some(ReadError::ServerFailed { fragment: 0, .. })));
}

/// A grant to a slow store that stops making progress counts as stalled only after the
/// lesser of its store's hold and [`STORE_STALL_WAIT`] (a re-request would wait in the
/// store again, where the server's kernel repairs a lost tail sooner); a grant to a quick
/// store, or to none, at its timeout (5-7.5 ms here, the initial RTO and its jitter).
#[test]
fn a_grant_to_a_slow_store_waits_before_it_is_hedged() {
    let stripe = Stripe::fixed_sru("k", &servers(1), 100_000).unwrap();
    let p = Policy::builder().grant_size(GrantSize::Whole).build().unwrap();
    let t0 = Instant::now();
    for (hold, store) in [(100, true), (10, true), (2, true), (100, false)] {
        let hold = Duration::from_millis(hold);
        let mut s = Scheduler::new(&stripe, &p, 7);
        let g = requests(&mut s, t0).pop().unwrap();
        s.expect_by(t0, g.id, t0 + hold, store);
        // Its store answers on time, then a segment of its answer is lost.
        let progress = t0 + hold;
        s.handle_timeout(progress);
        assert_eq!(
            s.on_bytes(progress, g.id, 1448),
            Ok(Delivery::Write { block_offset: 0 }),
            "{hold:?} store {store}"
        );
        let stalled = (0..16)
            .find_map(|_| {
                let due = s.poll_timeout()?;
                s.handle_timeout(due);
                let cancelled = std::iter::from_fn(|| s.poll_action(due)).any(|a| matches!(a, Action::Cancel { .. }));
                cancelled.then_some(due)
            })
            .expect("the grant stalls");
        let waited = stalled - progress;
        let want = if store {
            hold.min(STORE_STALL_WAIT)
        } else {
            Duration::ZERO
        };
        assert!(waited >= want, "{hold:?} store {store}: hedged after {waited:?}");
        let latest = want.max(Duration::from_micros(7_500));
        assert!(waited <= latest, "{hold:?} store {store}: hedged after {waited:?}");
        s.check_invariants().unwrap();
    }
}
