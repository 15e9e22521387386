use super::*;
use crate::scheduler::MIN_PROGRESS_BYTES;
use crate::stripe::ServerId;
use crate::Action;

fn servers(n: u32) -> Vec<ServerId> {
    (0..n).map(ServerId).collect()
}

/// A receiver told the port's rate (bits per second), starting at `budget` bytes.
fn at_rate(bps: u64, budget: u64) -> Receiver {
    Receiver::new(
        ReceiverConfig::builder()
            .port_rate_bps(Some(bps))
            .initial_budget(budget)
            .build()
            .unwrap(),
    )
}

fn requests(rx: &mut Receiver, now: Instant) -> Vec<(ReadKey, crate::Grant)> {
    std::iter::from_fn(|| rx.poll_action(now))
        .filter_map(|(k, a)| match a {
            Action::Request(g) => Some((k, g)),
            Action::Cancel { .. } => None,
        })
        .collect()
}

/// A fixed budget of the smallest chunk (one grant at a time), aging by `aging_bytes`, on
/// a port of `rate_bps` if given.
fn one_grant_at_a_time(aging_bytes: u64, rate_bps: Option<u64>) -> Receiver {
    let cfg = ReceiverConfig::builder()
        .adaptive(false)
        .min_budget(MIN_CHUNK)
        .initial_budget(MIN_CHUNK)
        .aging_bytes(aging_bytes)
        .port_rate_bps(rate_bps)
        .build()
        .unwrap();
    Receiver::new(cfg)
}

fn finish(rx: &mut Receiver, now: Instant, k: ReadKey, g: &crate::Grant) {
    rx.on_bytes(now, k, g.id, g.len).unwrap();
    rx.on_done(now, k, g.id).unwrap();
}

/// A server whose first bytes said its store held the request 20 ms: the port's next
/// grants to it are expected 20 ms after their issue, held till then (the port is not
/// busy with them), and not stalled nor hedged before; a server that answered at once
/// gets no hold. The hold ends at the expected time, or at the first byte.
#[test]
fn grants_to_a_slow_store_are_held_until_their_expected_first_byte() {
    let mut rx = Receiver::new(ReceiverConfig::default());
    let t = Instant::now();
    let hold = Duration::from_millis(20);
    let stripe = Stripe::fixed_sru("a", &servers(2), MIN_CHUNK).unwrap();
    let a = rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
    let gs = requests(&mut rx, t);
    assert_eq!(gs.len(), 2, "{gs:?}");
    assert_eq!(rx.stats().held, 0, "nothing learnt yet");
    // Server 0 answers after its store's 20 ms, server 1 at once (a hold of 50 us: zero
    // would say its transport cannot tell, and teach nothing).
    for (k, g) in &gs {
        let (at, server) = if g.server == ServerId(0) {
            (t + hold, hold)
        } else {
            (t, Duration::from_micros(50))
        };
        let host = HostTime {
            server,
            ..HostTime::default()
        };
        rx.on_bytes_timed(at.max(t + Duration::from_micros(100)), *k, g.id, g.len, host)
            .unwrap();
        rx.on_done(at, *k, g.id).unwrap();
    }
    assert!(rx.finish_read(a).is_some_and(|f| f.complete));
    let t = t + hold + Duration::from_millis(1);
    let b = rx.start_read(t, &stripe, &Policy::default(), 2, ReadOptions::default());
    let gs = requests(&mut rx, t);
    let slow = gs
        .iter()
        .find(|(_, g)| g.server == ServerId(0))
        .expect("a grant to server 0");
    let fast = gs
        .iter()
        .find(|(_, g)| g.server == ServerId(1))
        .expect("a grant to server 1");
    assert_eq!(rx.stats().held, slow.1.len, "only the slow store's grant is held");
    rx.check_invariants().unwrap();
    // The fast server's answer does not end the slow one's hold.
    finish(&mut rx, t + Duration::from_micros(100), fast.0, &fast.1);
    assert_eq!(rx.stats().held, slow.1.len);
    // Its stall timer does not fire before the hold is over.
    while let Some(due) = rx.poll_timeout().filter(|&d| d < t + hold) {
        rx.handle_timeout(due);
        assert!(
            requests(&mut rx, due).is_empty(),
            "nothing hedged before the hold is over"
        );
    }
    assert_eq!(rx.stats().held, slow.1.len);
    // The hold ends at the expected first byte.
    let due = rx.poll_timeout().expect("the hold's timer");
    assert!(due >= t + hold, "{:?}", due - t);
    rx.handle_timeout(t + hold);
    assert_eq!(rx.stats().held, 0, "the hold ends at the expected first byte");
    let f = rx.finish_read(b).expect("live");
    assert_eq!((f.stats.hedges, f.stats.held_grants), (0, 1));
    assert_eq!(rx.stats().held, 0);
    rx.check_invariants().unwrap();
}

/// A receiver's first read, of one chunk from one server, whose bytes came `after` their
/// request with `host` the hosts' part of that; the stripe, and when the read ended.
fn one_read_of_one_server(after: Duration, host: HostTime) -> (Receiver, Stripe, Instant) {
    let mut rx = Receiver::new(ReceiverConfig::default());
    let t = Instant::now();
    let stripe = Stripe::fixed_sru("a", &servers(1), MIN_CHUNK).unwrap();
    let a = rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
    let (k, g) = requests(&mut rx, t).pop().expect("a grant");
    rx.on_bytes_timed(t + after, k, g.id, g.len, host).unwrap();
    rx.on_done(t + after, k, g.id).unwrap();
    assert!(rx.finish_read(a).is_some_and(|f| f.complete));
    (rx, stripe, t + after)
}

/// A hold the server's host took, not its store, is not learnt: a first byte 20 ms
/// after its request, of which the transport says the store took nothing (a 2-core
/// server busy with 500 other requests), leaves the next grant to that server unheld,
/// and the budget counts it; the same hold said to be the store's holds it.
#[test]
fn a_hold_its_store_did_not_take_is_not_learnt() {
    let hold = Duration::from_millis(20);
    for (store, held) in [(Duration::ZERO, false), (hold, true)] {
        let host = HostTime {
            server: hold,
            store: Some(store),
            ..HostTime::default()
        };
        let (mut rx, stripe, t) = one_read_of_one_server(hold, host);
        let _b = rx.start_read(t, &stripe, &Policy::default(), 2, ReadOptions::default());
        let (_, g) = requests(&mut rx, t).pop().expect("a grant");
        let st = rx.stats();
        assert_eq!(st.port_hold, Some(store), "{st:?}");
        assert_eq!(st.held, if held { g.len } else { 0 }, "store {store:?}: {st:?}");
        rx.check_invariants().unwrap();
    }
}

/// Bytes held by a slow store leave the budget, up to a budget: with a fixed budget of
/// 16 KiB and a server known to hold its answers 20 ms, one read pipelines 32 KiB to it
/// (16 KiB counted, 16 KiB held); counted, it had stopped at 16 KiB, a budget per hold.
#[test]
fn held_bytes_leave_the_budget_up_to_a_budget() {
    let budget = 16 * 1024;
    let cfg = ReceiverConfig::builder()
        .adaptive(false)
        .min_budget(budget)
        .initial_budget(budget)
        .build()
        .unwrap();
    let mut rx = Receiver::new(cfg);
    let t = Instant::now();
    let hold = Duration::from_millis(20);
    let learn = Stripe::fixed_sru("a", &servers(1), MIN_CHUNK).unwrap();
    let a = rx.start_read(t, &learn, &Policy::default(), 1, ReadOptions::default());
    let (k, g) = requests(&mut rx, t).pop().expect("a grant");
    let host = HostTime {
        server: hold,
        ..HostTime::default()
    };
    rx.on_bytes_timed(t + hold, k, g.id, g.len, host).unwrap();
    rx.on_done(t + hold, k, g.id).unwrap();
    assert!(rx.finish_read(a).is_some_and(|f| f.complete));
    let t = t + hold;
    let deep = Policy::builder().pipeline_depth(8).build().unwrap();
    let stripe = Stripe::fixed_sru("b", &servers(1), 256 * 1024).unwrap();
    let _b = rx.start_read(t, &stripe, &deep, 2, ReadOptions::default());
    let gs = requests(&mut rx, t);
    let st = rx.stats();
    assert_eq!(st.outstanding, 2 * budget, "{gs:?}");
    assert_eq!(st.held, 2 * budget);
    rx.check_invariants().unwrap();
}

/// A fixed budget of two 16 KiB grants on a port told 16 KiB per ms, and a policy that
/// pipelines deep enough to spend it on one fragment: (chunk, budget, config, policy).
fn a_budget_of_two_grants() -> (u64, u64, ReceiverConfig, Policy) {
    let chunk = 16 * 1024;
    let budget = 2 * chunk;
    let cfg = ReceiverConfig::builder()
        .adaptive(false)
        .min_budget(budget)
        .initial_budget(budget)
        .port_rate_bps(Some(8 * chunk * 1000))
        .build()
        .unwrap();
    (
        chunk,
        budget,
        cfg,
        Policy::builder().pipeline_depth(64).build().unwrap(),
    )
}

/// Grants to a slow store carry a pace on a lossy port only: the grant's bytes over an
/// eighth of the hold, times the pacing gain, but over no longer than the budget takes
/// to drain at the port's rate nor shorter than the grant takes at it. Not before any
/// loss, nor once the loss is older than the lossy window, nor where the port's servers
/// hold their answers less than the spare credit's threshold.
#[test]
fn held_answers_are_paced_on_a_lossy_port_only() {
    let (chunk, _, cfg, deep) = a_budget_of_two_grants();
    let ms = Duration::from_millis;
    let stripe = Stripe::fixed_sru("a", &servers(4), 1 << 20).unwrap();
    let paces = |hold: Duration, loss_ago: Option<Duration>| {
        let mut rx = Receiver::new(cfg.clone());
        rx.port_hold = Some(hold);
        let t = Instant::now() + Duration::from_secs(10);
        if let Some(ago) = loss_ago {
            rx.on_loss(t - ago, 1, 0);
        }
        rx.start_read(t, &stripe, &deep, 1, ReadOptions::default());
        let gs = requests(&mut rx, t);
        assert!(!gs.is_empty());
        rx.check_invariants().unwrap();
        gs.into_iter().map(|(_, g)| (g.len, g.pace)).collect::<Vec<_>>()
    };
    // A hold of 12 ms: 16 KiB over an eighth of it (1.5 ms), times 1.25: 13.7 MB/s.
    for (len, pace) in paces(ms(12), Some(ms(10))) {
        assert_eq!(len, chunk);
        let want = PACING_GAIN * len as f64 / (0.012 * HELD_ANSWER_SPREAD);
        let got = pace.expect("a held answer on a lossy port is paced") as f64;
        assert!((got - want).abs() <= 0.01 * want, "pace {got} against {want}");
    }
    // A hold of 20 ms: an eighth is 2.5 ms, longer than the budget of two grants takes
    // at the port's 16 KiB per ms (2 ms), so 16 KiB over 2 ms, times 1.25: 10.2 MB/s.
    // Over 2.5 ms the two paced grants the budget holds would carry 0.8 of the port.
    for (len, pace) in paces(ms(20), Some(ms(10))) {
        let want = PACING_GAIN * len as f64 / 0.002;
        let got = pace.expect("a held answer on a lossy port is paced") as f64;
        assert!((got - want).abs() <= 0.01 * want, "pace {got} against {want}");
    }
    // At the threshold's hold (4 ms) an eighth is 0.5 ms, less than the grant takes at
    // the port's rate (1 ms): the pace is the gain times the port's rate.
    let link = chunk as f64 * 1000.0;
    for (_, pace) in paces(SPARE_CREDIT_HOLD, Some(ms(10))) {
        let got = pace.expect("paced") as f64;
        let want = PACING_GAIN * link;
        assert!((got - want).abs() <= 0.01 * want, "pace {got} against {want}");
    }
    for (hold, loss_ago) in [
        (ms(20), None),
        (ms(20), Some(LOSSY_PORT_WINDOW + ms(1))),
        (SPARE_CREDIT_HOLD - ms(1), Some(ms(10))),
    ] {
        assert!(
            paces(hold, loss_ago).iter().all(|(_, p)| p.is_none()),
            "hold {hold:?}, loss {loss_ago:?} ago"
        );
    }
}

/// Told the port's rate, held bytes leave the budget as fast as the port passes bytes,
/// not a budget's worth at once: one server known to hold its answers 20 ms, a budget
/// of two 16 KiB grants, a port of 16 KiB per ms. Polled every millisecond, one more
/// grant is held each time; polled once after an idle while, at most a budget more than
/// the budget.
#[test]
fn held_bytes_leave_the_budget_at_the_port_rate() {
    let (chunk, _, cfg, deep) = a_budget_of_two_grants();
    let ms = Duration::from_millis;
    let stripe = Stripe::fixed_sru("a", &servers(1), 1 << 20).unwrap();
    for polled_every_ms in [true, false] {
        let mut rx = Receiver::new(cfg.clone());
        rx.port_hold = Some(ms(20));
        let t = Instant::now();
        let _a = rx.start_read(t, &stripe, &deep, 1, ReadOptions::default());
        assert_eq!(requests(&mut rx, t).len(), 2, "no credit yet: the budget alone");
        if polled_every_ms {
            for i in 1..=5u32 {
                let n = requests(&mut rx, t + ms(1) * i).len();
                assert_eq!(n, 1, "one grant's worth of credit per ms (poll {i})");
                rx.check_invariants().unwrap();
            }
            assert_eq!(rx.stats().held, 7 * chunk);
        } else {
            let n = requests(&mut rx, t + ms(5)).len();
            assert_eq!(n, 4, "an idle port banks at most a budget of credit");
            assert_eq!(rx.stats().held, 6 * chunk);
        }
        rx.check_invariants().unwrap();
    }
}

/// A port blocked on the credit of held bytes looks again as the credit fills, with no
/// other event: the port above, driven by its timers alone, puts one more grant in the
/// store every millisecond (without the wake its next timer was the first hold's end,
/// 20 ms on). The blocked read carries the wake; none once nothing is left to grant.
#[test]
fn a_port_blocked_on_credit_looks_again_as_it_fills() {
    let (chunk, _, cfg, deep) = a_budget_of_two_grants();
    let ms = Duration::from_millis;
    let stripe = Stripe::fixed_sru("a", &servers(1), 8 * chunk).unwrap();
    let mut rx = Receiver::new(cfg);
    rx.port_hold = Some(ms(20));
    let t = Instant::now();
    let a = rx.start_read(t, &stripe, &deep, 1, ReadOptions::default());
    assert_eq!(requests(&mut rx, t).len(), 2, "the budget alone");
    let mut now = t;
    for i in 1..=6u32 {
        let due = rx.poll_timeout().expect("a wake");
        assert!(due > now && due <= now + ms(1), "wake {i} {:?} on", due - now);
        assert_eq!(rx.poll_timeout_of(a), Some(due));
        now = due;
        rx.handle_timeout(now);
        assert_eq!(requests(&mut rx, now).len(), 1, "wake {i}");
        rx.check_invariants().unwrap();
    }
    assert_eq!(rx.stats().held, 8 * chunk, "the whole block is in the store");
    let due = rx.poll_timeout().expect("the holds' timers");
    assert!(due >= t + ms(20), "nothing left to grant: no wake ({:?} on)", due - now);
}

/// Bytes a store released count against the budget again, but they do not stop the
/// stores' next grants: the credit that held bytes do not use adds to the budget. A
/// budget of two 16 KiB grants, a port of 16 KiB per ms, servers that hold 20 ms: with
/// two released grants filling the budget, two more go out once the credit has filled.
#[test]
fn released_bytes_do_not_stop_the_stores_next_grants() {
    let (_, budget, cfg, deep) = a_budget_of_two_grants();
    let ms = Duration::from_millis;
    let stripe = Stripe::fixed_sru("a", &servers(8), 1 << 20).unwrap();
    let mut rx = Receiver::new(cfg);
    rx.port_hold = Some(ms(20));
    let t = Instant::now();
    let _a = rx.start_read(t, &stripe, &deep, 1, ReadOptions::default());
    let first = requests(&mut rx, t);
    assert_eq!(first.len(), 2, "the budget alone");
    // The first two release their first bytes: held no more, they fill the budget.
    for (k, g) in &first {
        rx.on_bytes(t + ms(20), *k, g.id, 1).unwrap();
    }
    let st = rx.stats();
    assert_eq!((st.held, st.outstanding), (0, budget - 2));
    // Twenty ms of credit, capped at a budget over the held bytes (none): a budget spare.
    let more = requests(&mut rx, t + ms(20));
    assert_eq!(more.len(), 2, "the spare credit takes two more grants");
    let st = rx.stats();
    assert_eq!((st.held, st.spare_credit), (budget, 0), "the credit is spent: {st:?}");
    rx.check_invariants().unwrap();
    // Without a hold learnt the same released bytes hold the next grants back.
    let mut rx = Receiver::new(rx.config.clone());
    let _a = rx.start_read(t, &stripe, &deep, 1, ReadOptions::default());
    for (k, g) in requests(&mut rx, t) {
        rx.on_bytes(t + ms(20), k, g.id, 1).unwrap();
    }
    assert_eq!(rx.stats().spare_credit, 0);
    assert!(requests(&mut rx, t + ms(20)).is_empty());
}

/// The spare credit is for grants the stores hold: a grant to a server that answers at
/// once takes it too, but spends it. A budget of two 16 KiB grants, a port of 16 KiB per
/// ms whose servers held 20 ms lately (the port's hold: one slow answer can set it), but
/// whose every server answered at once (each server's own hold, 20 us): 20 ms after the
/// budget's two grants, the credit takes two more, not the whole block.
#[test]
fn grants_that_no_store_holds_spend_the_spare_credit() {
    let (chunk, budget, cfg, deep) = a_budget_of_two_grants();
    let ms = Duration::from_millis;
    let stripe = Stripe::fixed_sru("a", &servers(8), 1 << 20).unwrap();
    let mut rx = Receiver::new(cfg);
    rx.port_hold = Some(ms(20));
    for s in servers(8) {
        rx.holds.insert(s, Duration::from_micros(20));
    }
    let t = Instant::now();
    let _a = rx.start_read(t, &stripe, &deep, 1, ReadOptions::default());
    assert_eq!(requests(&mut rx, t).len(), 2, "the budget alone");
    let st = rx.stats();
    assert_eq!((st.held, st.outstanding), (0, budget), "no grant is held: {st:?}");
    let more = requests(&mut rx, t + ms(20));
    assert_eq!(more.len(), 2, "a budget of spare credit, spent: {more:?}");
    let st = rx.stats();
    assert_eq!((st.held, st.outstanding, st.spare_credit), (0, 4 * chunk, 0), "{st:?}");
    rx.check_invariants().unwrap();
    // It fills again at the port's rate: one more grant a millisecond.
    assert_eq!(requests(&mut rx, t + ms(21)).len(), 1);
}

/// On a lossy port, bytes the stores released spend their credit: grants to slow stores
/// go out at the port's rate, not at that rate plus the rate the stores release. A port
/// of one 16 KiB grant a millisecond, servers that hold 20 ms, every answer arriving
/// whole at its hold's end: over three holds a port that a server reported loss on puts
/// out a grant a millisecond, give or take two budgets; one that lost nothing puts out
/// one more a millisecond every hold (1, 2, then 3 a millisecond).
#[test]
fn released_bytes_spend_the_credit_of_held_bytes_on_a_lossy_port() {
    let (chunk, budget, cfg, deep) = a_budget_of_two_grants();
    let ms = Duration::from_millis;
    let stripe = Stripe::fixed_sru("a", &servers(64), 1 << 20).unwrap();
    let granted = |lossy: bool| {
        let mut rx = Receiver::new(cfg.clone());
        rx.port_hold = Some(ms(20));
        let t = Instant::now();
        if lossy {
            rx.on_loss(t, 1, 0);
        }
        let _a = rx.start_read(t, &stripe, &deep, 1, ReadOptions::default());
        let mut in_store = std::collections::VecDeque::new();
        let mut issued = 0;
        for i in 0..=60u32 {
            let now = t + ms(1) * i;
            while in_store.front().is_some_and(|(at, _, _)| *at <= now) {
                let (_, k, g) = in_store.pop_front().unwrap();
                finish(&mut rx, now, k, &g);
            }
            rx.handle_timeout(now);
            for (k, g) in requests(&mut rx, now) {
                issued += g.len;
                in_store.push_back((now + ms(20), k, g));
            }
            rx.check_invariants().unwrap();
        }
        issued
    };
    let passed = 61 * chunk;
    let lossy = granted(true);
    assert!(
        lossy <= passed + 2 * budget && lossy + 2 * budget >= passed,
        "lossy: {} grants where the port passes 61",
        lossy / chunk
    );
    let clean = granted(false);
    assert!(clean >= 2 * passed - 4 * budget, "lossless: {} grants", clean / chunk);
}

/// Servers waiting on their stores send nothing: they leave the sender cap, however many,
/// and the budget bounds them instead (held bytes leave it up to the budget's worth while
/// the port's rate is not known). A port told 4 senders at most and a 256 KiB budget, whose
/// 64 servers hold their 16 KiB answers 20 ms, has 32 of them waiting at once: the budget's
/// worth held and the budget's worth beside (4 without a learnt hold, the cap).
#[test]
fn held_senders_leave_the_sender_cap_bounded_by_the_budget() {
    let cfg = ReceiverConfig::builder()
        .adaptive(false)
        .initial_budget(256 << 10)
        .max_senders(4)
        .build()
        .unwrap();
    let stripe = Stripe::fixed_sru("a", &servers(64), 16 * 1024).unwrap();
    for (hold, want) in [(None, 4), (Some(Duration::from_millis(20)), 32)] {
        let mut rx = Receiver::new(cfg.clone());
        rx.port_hold = hold;
        let t = Instant::now();
        let _a = rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
        let gs = requests(&mut rx, t);
        let st = rx.stats();
        assert_eq!(st.senders, want, "{hold:?}: {gs:?}");
        assert!(gs.iter().all(|(_, g)| g.len == 16 * 1024), "{gs:?}");
        rx.check_invariants().unwrap();
    }
}

/// A sender its store holds is not sending yet: where the port's servers hold their
/// answers, a new sender passes the sender cap while the bytes sending now fit the budget
/// and drain, at the port's rate, within half the hold (it sends after they are done). A
/// port of 16 KiB per ms with a budget of four 16 KiB grants and a cap of 2 senders, whose
/// servers held 20 ms: with the four first grants released (four servers sending, 4 ms of
/// bytes), the credit lets more servers start; none with the budget cut to two grants (the
/// bytes sending over it), nor where the port's hold is 6 ms (they drain in more than 3).
#[test]
fn a_sender_its_store_holds_passes_the_cap_while_the_senders_drain_within_the_hold() {
    let chunk = 16 * 1024;
    let cfg = ReceiverConfig::builder()
        .adaptive(false)
        .min_budget(2 * chunk)
        .initial_budget(4 * chunk)
        .max_senders(2)
        .port_rate_bps(Some(8 * chunk * 1000))
        .build()
        .unwrap();
    let ms = Duration::from_millis;
    let stripe = Stripe::fixed_sru("a", &servers(16), chunk).unwrap();
    // (the port's hold when polled, the budget then, new senders)
    for (hold, budget, want) in [(ms(20), 4 * chunk, 4), (ms(20), 2 * chunk, 0), (ms(6), 4 * chunk, 0)] {
        let mut rx = Receiver::new(cfg.clone());
        rx.port_hold = Some(ms(20));
        let t = Instant::now();
        let _a = rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
        let first = requests(&mut rx, t);
        assert_eq!(first.len(), 4, "the budget alone");
        let at = t + ms(20);
        for (k, g) in &first {
            rx.on_bytes(at, *k, g.id, 1).unwrap();
        }
        let st = rx.stats();
        assert_eq!((st.senders, st.held_senders, st.held), (4, 0, 0), "{st:?}");
        (rx.port_hold, rx.budget) = (Some(hold), budget);
        let more = requests(&mut rx, at);
        assert_eq!(more.len(), want, "{hold:?}, budget {budget}: {more:?}");
        assert_eq!(rx.stats().held_senders as usize, more.len());
        rx.check_invariants().unwrap();
    }
}

/// A port whose servers hold their answers 20 ms (learnt from other servers): a grant
/// to a server not learnt yet waits as long, and when such grants stall (the store
/// is slower still) their stalls are the store's: in slow start they shrink nothing.
#[test]
fn stalls_of_grants_to_slow_stores_are_not_loss() {
    let (mut rx, t) = a_wide_read();
    rx.port_hold = Some(Duration::from_millis(20));
    assert!(!requests(&mut rx, t).is_empty());
    assert!(rx.stats().held > 0, "the port's hold stands for servers not learnt yet");
    let before = rx.budget();
    let now = stall_until(&mut rx, t, |st| st.store_stalls > 0);
    assert!(now >= t + Duration::from_millis(20), "no stall before the hold");
    rx.on_loss(now + Duration::from_millis(1), 0, 0);
    let st = rx.stats();
    assert_eq!((st.stall_decreases, st.loss_decreases), (0, 0), "{st:?}");
    assert!(rx.slow_start && rx.budget() == before, "{st:?}");
}

/// A decrease that finds the budget at its floor leaves it there, and leaves slow start
/// on: its bytes cannot have overflowed a buffer. One that takes it down ends it.
#[test]
fn a_decrease_at_the_floor_leaves_slow_start_on() {
    let mut rx = Receiver::new(ReceiverConfig::default());
    let t = Instant::now();
    let floor = rx.config.min_budget;
    assert_eq!(rx.budget(), floor);
    assert!(rx.decrease(t, 0.5, floor));
    assert!(rx.slow_start && rx.budget() == floor);
    rx.budget = 4 * floor;
    assert!(rx.decrease(t + Duration::from_secs(1), 0.5, floor));
    assert!(!rx.slow_start);
    assert_eq!(rx.budget(), 2 * floor);
}

/// A severe delay shrinks the budget only where the budget could have queued it: at
/// 1 Gbit/s a 64 KiB budget drains in 0.5 ms, so a 5 ms delay is not its queue (on a
/// 2-core host, a client late to send its requests); a 2 MiB budget drains in 17 ms.
#[test]
fn a_delay_longer_than_the_budget_can_queue_shrinks_nothing() {
    for (budget, shrinks) in [(64 * 1024, false), (2 << 20, true)] {
        let mut rx = at_rate(1_000_000_000, budget);
        let t = Instant::now();
        let stripe = Stripe::fixed_sru("a", &servers(8), 1 << 20).unwrap();
        let k = rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
        rx.on_sample(t, k, Duration::from_micros(100), HostTime::default());
        let late = t + Duration::from_millis(10);
        rx.on_sample(late, k, Duration::from_millis(5), HostTime::default());
        let st = rx.stats();
        assert_eq!(st.delay_decreases > 0, shrinks, "budget {budget}: {st:?}");
        assert_eq!(rx.budget() < budget, shrinks);
    }
}

#[test]
fn the_report_splits_admission_wait_from_transfer() {
    let mut rx = one_grant_at_a_time(DEFAULT_AGING_BYTES, None);
    let t = Instant::now();
    let stripe = Stripe::fixed_block("x", &servers(1), MIN_CHUNK).unwrap();
    let a = rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
    let b = rx.start_read(t, &stripe, &Policy::default(), 2, ReadOptions::default());
    let g = requests(&mut rx, t);
    assert_eq!(g.len(), 1, "one 4 KiB grant fills the budget");
    let ms = Duration::from_millis(1);
    finish(&mut rx, t + ms, g[0].0, &g[0].1);
    let g = requests(&mut rx, t + ms);
    assert_eq!(g.len(), 1);
    finish(&mut rx, t + 3 * ms, g[0].0, &g[0].1);
    let (ra, rb) = (rx.finish_read(a).unwrap().port, rx.finish_read(b).unwrap().port);
    assert_eq!((ra.admission_wait, ra.transfer), (Duration::ZERO, ms));
    assert_eq!((rb.admission_wait, rb.transfer), (ms, 2 * ms));
}

#[test]
fn one_budget_for_all_reads_and_a_dropped_read_frees_its_share() {
    let cfg = ReceiverConfig::builder().adaptive(false).build().unwrap();
    let mut rx = Receiver::new(cfg);
    let t = Instant::now();
    let stripe = Stripe::fixed_sru("a", &servers(16), 64 * 1024).unwrap();
    let a = rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
    let b = rx.start_read(t, &stripe, &Policy::default(), 2, ReadOptions::default());
    let gs = requests(&mut rx, t);
    let total: u64 = gs.iter().map(|(_, g)| g.len).sum();
    assert_eq!(total, DEFAULT_INITIAL_BUDGET, "both reads under one budget");
    assert!(
        gs.iter().all(|(k, _)| *k == a),
        "equal reads: the first started goes first"
    );
    assert!(rx.finish_read(a).is_some());
    assert_eq!(rx.stats().outstanding, 0);
    let gs = requests(&mut rx, t);
    assert!(!gs.is_empty() && gs.iter().all(|(k, _)| *k == b));
    assert_eq!(
        rx.on_bytes(t, a, gs[0].1.id, 1),
        Err(EventError::UnknownRead { read: a })
    );
}

#[test]
fn shortest_remaining_first_then_priority_then_aging() {
    let mut rx = one_grant_at_a_time(DEFAULT_AGING_BYTES, None);
    let t = Instant::now();
    let long = Stripe::fixed_block("l", &servers(1), 1 << 20).unwrap();
    let short = Stripe::fixed_block("s", &servers(1), 64 * 1024).unwrap();
    let l = rx.start_read(t, &long, &Policy::default(), 1, ReadOptions::default());
    let s = rx.start_read(t, &short, &Policy::default(), 2, ReadOptions::default());
    let g = requests(&mut rx, t);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].0, s, "shortest first");
    let p = rx.start_read(t, &long, &Policy::default(), 3, ReadOptions { priority: 1 });
    finish(&mut rx, t, g[0].0, &g[0].1);
    let g = requests(&mut rx, t);
    assert_eq!(g[0].0, p, "a higher priority goes before a shorter read");
    rx.finish_read(p).unwrap();
    rx.finish_read(s).unwrap();
    assert_eq!(rx.reads_in_order().iter().map(|r| r.0).collect::<Vec<_>>(), [l]);
}

/// A read's bytes left count half as much per aging bound of the port's time, counted in
/// the bytes the port could pass (time times its rate): a 1 MiB read, 16 times (4
/// halvings) a 64 KiB read, goes after one that starts less than 4 bounds after it, and
/// before one that starts more. The same times on a port ten times slower are a tenth of
/// the bounds: both small reads go first.
#[test]
fn a_read_ages_by_the_ports_time_times_its_rate() {
    const AGING: u64 = 1000;
    for (bps, order_of, aged) in [
        (80_000_000_000, [0, 2, 1, 3], [true, false, true, false]),
        (8_000_000_000, [0, 2, 3, 1], [false; 4]),
    ] {
        let mut rx = one_grant_at_a_time(AGING, Some(bps));
        let t = Instant::now();
        let long = Stripe::fixed_block("l", &servers(1), 1 << 20).unwrap();
        let short = Stripe::fixed_block("s", &servers(1), 64 * 1024).unwrap();
        let l = rx.start_read(t, &long, &Policy::default(), 1, ReadOptions::default());
        let x = rx.start_read(t, &short, &Policy::default(), 2, ReadOptions::default());
        let g = requests(&mut rx, t);
        assert_eq!((g.len(), g[0].0), (1, x), "one grant at a time");
        // 3.9 and 4.1 bounds at 80 Gbit/s (10^10 bytes a second, 1,000 bytes a bound).
        let s1 = rx.start_read(
            t + Duration::from_nanos(390),
            &short,
            &Policy::default(),
            3,
            ReadOptions::default(),
        );
        let at = t + Duration::from_nanos(410);
        let s2 = rx.start_read(at, &short, &Policy::default(), 4, ReadOptions::default());
        assert!(requests(&mut rx, at).is_empty());
        let keys = [x, l, s1, s2];
        let order: Vec<ReadKey> = rx.reads_in_order().iter().map(|r| r.0).collect();
        assert_eq!(order, order_of.map(|i| keys[i]), "{bps} bit/s");
        // Aged (a bound's time since the start) is reported, and is no class of its own:
        // the aged `l` waits behind `s1`, which is not aged.
        let was_aged: Vec<bool> = rx.reads_in_order().iter().map(|r| r.1).collect();
        assert_eq!(was_aged, aged, "{bps} bit/s");
        let clock = rx.aging_clock();
        assert!((clock - 410e-9 * bps as f64 / 8.0).abs() < 1.0, "{clock}");
    }
}

#[test]
fn without_an_aging_bound_reads_go_in_arrival_order() {
    let mut rx = one_grant_at_a_time(0, None);
    let t = Instant::now();
    let long = Stripe::fixed_block("l", &servers(1), 1 << 20).unwrap();
    let short = Stripe::fixed_block("s", &servers(1), 4096).unwrap();
    let l = rx.start_read(t, &long, &Policy::default(), 1, ReadOptions::default());
    let s = rx.start_read(t, &short, &Policy::default(), 2, ReadOptions { priority: 9 });
    let g = requests(&mut rx, t);
    assert_eq!(g[0].0, l, "first come, first served, whatever the size or priority");
    let order: Vec<ReadKey> = rx.reads_in_order().iter().map(|r| r.0).collect();
    assert_eq!(order, [l, s]);
}

#[test]
fn budget_grows_without_signals_and_halves_once_per_rtt_on_loss() {
    // Started over the floor, so that the decreases below are not clamped by it.
    let initial = 64 * 1024;
    let mut rx = Receiver::new(started_at(initial));
    let t = Instant::now();
    let stripe = Stripe::fixed_sru("a", &servers(8), 256 * 1024).unwrap();
    rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
    let gs = requests(&mut rx, t);
    let t = t + Duration::from_micros(50);
    for (k, g) in gs {
        finish(&mut rx, t, k, &g);
    }
    let grown = rx.budget();
    assert!(grown >= 2 * initial, "slow start doubles: {grown}");
    // The first loss window (alpha starts at 1, every response lossy) halves.
    let mut now = t + Duration::from_millis(1);
    rx.on_loss(now, 3, 0);
    assert_eq!(rx.budget(), grown / 2);
    rx.on_loss(now + Duration::from_micros(10), 3, 0);
    assert_eq!(rx.budget(), grown / 2, "one decision per round trip");
    // That window (one lossy response of two) shrinks by alpha / 2, a little less than half.
    now += Duration::from_millis(1);
    rx.on_loss(now, 0, 0);
    let b1 = rx.budget();
    assert!(b1 < grown / 2 && b1 > grown / 4, "{} -> {b1}", grown / 2);
    // A window without loss: no decrease.
    now += Duration::from_millis(1);
    rx.on_loss(now, 0, 0);
    assert_eq!(rx.budget(), b1, "no loss, no decrease");
    // A trickle (1 response in 10 lossy): alpha has decayed, so less than half again.
    now += Duration::from_millis(1);
    for i in 0..10 {
        rx.on_loss(now, u64::from(i == 0), 0);
    }
    now += Duration::from_millis(1);
    rx.on_loss(now, 0, 0);
    let b = rx.budget();
    assert!(b < b1 && b > b1 / 2, "gentle: {b1} -> {b}");
    // A kernel RTO halves at once.
    now += Duration::from_millis(1);
    rx.on_loss(now, 0, 1);
    assert_eq!(rx.budget(), (b / 2).max(DEFAULT_MIN_BUDGET), "never below the floor");
}

#[test]
fn without_a_hint_the_first_grants_fit_a_slow_port_and_slow_start_doubles_them() {
    // 64 servers of 4 KiB: 64 KiB at once would overflow a 10 Mbit/s port that holds
    // 48 KiB with its token bucket; the first grants hold the floor.
    let mut rx = Receiver::new(ReceiverConfig::default());
    assert_eq!(rx.budget(), DEFAULT_MIN_BUDGET);
    let t = Instant::now();
    let stripe = Stripe::fixed_sru("a", &servers(64), MIN_CHUNK).unwrap();
    rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
    let gs = requests(&mut rx, t);
    let first: u64 = gs.iter().map(|(_, g)| g.len).sum();
    assert_eq!(first, DEFAULT_MIN_BUDGET, "{} grants", gs.len());
    assert_eq!(rx.stats().outstanding, DEFAULT_MIN_BUDGET);
    // Delivered without delay or loss, they double the budget: a fast path is not held
    // to the floor for more than a few round trips.
    let t = t + Duration::from_micros(100);
    for (k, g) in gs {
        finish(&mut rx, t, k, &g);
    }
    assert_eq!(rx.budget(), 2 * DEFAULT_MIN_BUDGET);
    let second: u64 = requests(&mut rx, t).iter().map(|(_, g)| g.len).sum();
    assert_eq!(second, 2 * DEFAULT_MIN_BUDGET);
    // A raised floor lifts the default start with it; an explicit start is checked.
    let c = ReceiverConfig::builder().min_budget(32 * 1024).build().unwrap();
    assert_eq!(c.initial_budget(), 32 * 1024);
    assert!(ReceiverConfig::builder()
        .min_budget(32 * 1024)
        .initial_budget(16 * 1024)
        .build()
        .is_err());
}

/// The default settings with a starting budget of `bytes`, over the default floor, so
/// that a test sees several grants at once and decreases that the floor does not clamp.
fn started_at(bytes: u64) -> ReceiverConfig {
    ReceiverConfig::builder().initial_budget(bytes).build().unwrap()
}

/// A receiver started at 64 KiB with one read over 64 servers at pipeline depth 1, and its first
/// grants, one per server: each on an idle connection, so each first byte is a clean
/// queueing-delay sample.
fn one_grant_per_server(t: Instant) -> (Receiver, ReadKey, Vec<(ReadKey, crate::Grant)>) {
    let mut rx = Receiver::new(started_at(64 * 1024));
    let stripe = Stripe::fixed_sru("a", &servers(64), 64 * 1024).unwrap();
    let one_deep = Policy::builder().pipeline_depth(1).build().unwrap();
    let k = rx.start_read(t, &stripe, &one_deep, 1, ReadOptions::default());
    let mut gs = requests(&mut rx, t);
    gs.dedup_by_key(|(_, g)| g.server);
    assert!(gs.len() >= 4, "the budget admits four servers at least");
    (rx, k, gs)
}

/// How long after its issue the one grant of a one-server read moves (a retry), on a
/// port with no hedge budget whose servers reported loss (`lossy`) or did not. With
/// `rtt`, a read of another server first measures that first-byte time.
fn time_to_move(lossy: bool, rtt: Option<Duration>) -> Duration {
    let mut t = Instant::now();
    let mut rx = Receiver::new(ReceiverConfig::builder().hedge_burst(0).build().unwrap());
    if let Some(rtt) = rtt {
        let warm = Stripe::new(vec![crate::Fragment::new(ServerId(1), "w", 0, 1_000)]).unwrap();
        let w = rx.start_read(t, &warm, &Policy::default(), 1, ReadOptions::default());
        let gs = requests(&mut rx, t);
        assert_eq!(gs.len(), 1);
        t += rtt;
        finish(&mut rx, t, w, &gs[0].1);
        rx.finish_read(w);
        assert_eq!(rx.stats().base_rtt, Some(rtt));
    }
    if lossy {
        rx.on_loss(t, 1, 0);
    }
    let stripe = Stripe::new(vec![crate::Fragment::new(ServerId(0), "k", 0, 1_000)]).unwrap();
    let k = rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
    assert_eq!(requests(&mut rx, t).len(), 1);
    for _ in 0..100 {
        let now = rx.poll_timeout().expect("a stall timer");
        rx.handle_timeout(now);
        let moved = std::iter::from_fn(|| rx.poll_action(now))
            .any(|(key, a)| key == k && matches!(a, Action::Request(g) if g.kind == crate::GrantKind::Retry));
        if moved {
            return now - t;
        }
    }
    panic!("the stalled grant never moved");
}

#[test]
fn on_a_port_that_reports_loss_a_grant_without_hedges_moves_before_the_servers_rto() {
    // With loss reported, within the time bound (MIN_ESCALATE_WITHIN before any RTT is
    // measured); without, after six backed-off stalls, past the kernel's 200 ms RTO (a
    // slow server is not taken for a lost tail).
    let lossy = time_to_move(true, None);
    assert!(lossy <= crate::scheduler::MIN_ESCALATE_WITHIN, "{lossy:?}");
    let clean = time_to_move(false, None);
    assert!(clean > Duration::from_millis(200), "{clean:?}");
}

#[test]
fn on_a_lossy_port_the_time_bound_follows_the_round_trip() {
    use crate::scheduler::{ESCALATE_WITHIN, ESCALATE_WITHIN_RTTS, MIN_ESCALATE_WITHIN};
    // A short round trip: the floor (not 8 x 500 us), so the server's tail-loss probe
    // comes first.
    let short = time_to_move(true, Some(Duration::from_micros(500)));
    let floor = MIN_ESCALATE_WITHIN - Duration::from_millis(1)..=MIN_ESCALATE_WITHIN;
    assert!(floor.contains(&short), "{short:?}");
    // A 5 ms round trip (100 Mbit/s beside bulk flows): eight of them, not the floor.
    let rtt = Duration::from_millis(5);
    let mid = time_to_move(true, Some(rtt));
    assert!(
        mid > MIN_ESCALATE_WITHIN && mid <= rtt * ESCALATE_WITHIN_RTTS,
        "{mid:?}"
    );
    // A long round trip: the upper bound, before the server's 200 ms RTO.
    let long = time_to_move(true, Some(Duration::from_millis(15)));
    assert!(long > rtt * ESCALATE_WITHIN_RTTS && long <= ESCALATE_WITHIN, "{long:?}");
}

#[test]
fn spurious_hedges_double_the_timeouts_once_per_multiplier_and_a_won_hedge_halves_them() {
    let t = Instant::now();
    let (mut rx, k, gs) = one_grant_per_server(t);
    assert_eq!(rx.stats().timeout_scale, 1);
    let is_hedge = |(_, g): &(ReadKey, crate::Grant)| g.kind == crate::GrantKind::Hedge;
    // Every grant stalls; the port hedges as many as its bucket allows.
    let stalled = t + Duration::from_millis(150);
    rx.handle_timeout_of(stalled, k).unwrap();
    let hedges: Vec<_> = requests(&mut rx, stalled).into_iter().filter(is_hedge).collect();
    assert!(hedges.len() >= 4, "{} hedges", hedges.len());
    // Three originals end whole before their hedges: spurious. Their timers ran under the
    // same multiplier, so together they say once that it was too short: it doubles once,
    // not once per hedge (one scheduling pause used to take it from 1 to 64).
    let later = stalled + Duration::from_millis(1);
    for (_, g) in &gs[..3] {
        finish(&mut rx, later, k, g);
    }
    assert_eq!(rx.stats().timeout_scale, 2);
    // Their hedges end too, late: that frees the budget and decides nothing.
    for (_, h) in hedges
        .iter()
        .filter(|(_, h)| gs[..3].iter().any(|(_, g)| g.server == h.server))
    {
        finish(&mut rx, later, k, h);
    }
    assert_eq!(rx.stats().timeout_scale, 2);
    let next: Vec<_> = requests(&mut rx, later)
        .into_iter()
        .filter(|(_, g)| g.kind == crate::GrantKind::Next)
        .collect();
    assert!(next.len() >= 2, "the finished fragments take their next grants");
    // Those grants run under the doubled multiplier. They stall and are hedged; the
    // first one's original ends first: spurious again, which is news about the doubled
    // multiplier, and it doubles again.
    let stalled_again = later + Duration::from_millis(400);
    rx.handle_timeout_of(stalled_again, k).unwrap();
    let again: Vec<_> = requests(&mut rx, stalled_again).into_iter().filter(is_hedge).collect();
    let hedge_of = |g: &crate::Grant| {
        again
            .iter()
            .find(|(_, h)| h.server == g.server && h.object_offset == g.object_offset)
            .map(|(_, h)| h.clone())
    };
    let end = stalled_again + Duration::from_millis(1);
    assert!(
        hedge_of(&next[0].1).is_some(),
        "a grant armed under the doubled multiplier is hedged"
    );
    finish(&mut rx, end, k, &next[0].1);
    assert_eq!(rx.stats().timeout_scale, 4);
    // The second one's hedge ends first: it won under the doubled multiplier, which drops
    // to half of that (it used to drop by one, so one burst of spurious hedges held long
    // timeouts for many wins).
    let won = hedge_of(&next[1].1).expect("the second grant is hedged too");
    finish(&mut rx, end, k, &won);
    assert_eq!(rx.stats().timeout_scale, 1);
}

#[test]
fn queueing_delay_holds_growth_and_far_above_target_shrinks() {
    let t = Instant::now();
    let (mut rx, k, gs) = one_grant_per_server(t);
    // A clean sample at 50 us sets the base RTT.
    let at = t + Duration::from_micros(50);
    rx.on_bytes(at, k, gs[0].1.id, 1).unwrap();
    let b0 = rx.budget();
    // 1 ms above base (5 targets): growth held, no decrease.
    let late = t + Duration::from_micros(1_050);
    rx.on_bytes(late, k, gs[1].1.id, 1).unwrap();
    assert_eq!(rx.stats().delay_decreases, 0);
    for (_, g) in &gs[..2] {
        rx.on_bytes(late, k, g.id, g.len - 1).unwrap();
        rx.on_done(late, k, g.id).unwrap();
    }
    assert_eq!(rx.budget(), b0, "held above the target");
    let st = rx.stats();
    assert_eq!(st.base_rtt, Some(Duration::from_micros(50)));
    // 10 ms above base (50 targets): Swift's decrease, at most MAX_DECREASE.
    let very = late + Duration::from_millis(10);
    rx.on_bytes(very, k, gs[2].1.id, 1).unwrap();
    assert_eq!(rx.stats().delay_decreases, 1);
    let b1 = rx.budget();
    assert!(
        b1 < b0 && b1 as f64 >= b0 as f64 * (1.0 - MAX_DECREASE) - 1.0,
        "{b0} -> {b1}"
    );
}

#[test]
fn slow_start_grows_through_a_delay_hold_and_a_decrease_ends_that() {
    // First bytes 250 us above the base RTT (over the 200 us target), then the grants
    // complete. `decrease_first`: a server reports a kernel RTO before any sample.
    let run = |decrease_first: bool| {
        let t = Instant::now();
        let (mut rx, k, gs) = one_grant_per_server(t);
        if decrease_first {
            rx.on_loss(t, 0, 1);
        }
        let us = Duration::from_micros;
        rx.on_bytes(t + us(50), k, gs[0].1.id, 1).unwrap();
        let late = t + us(300);
        rx.on_bytes(late, k, gs[1].1.id, 1).unwrap();
        assert_eq!(rx.stats().delay_holds, 1, "the late first byte holds growth");
        let b0 = rx.budget();
        for (_, g) in &gs[..2] {
            rx.on_bytes(late, k, g.id, g.len - 1).unwrap();
            rx.on_done(late, k, g.id).unwrap();
        }
        (b0, rx.budget())
    };
    let (b0, b1) = run(false);
    assert!(b1 > b0, "slow start grows through the hold: {b0} -> {b1}");
    let (b0, b1) = run(true);
    assert_eq!(b1, b0, "after a decrease the hold holds");
}

#[test]
fn a_loss_teaches_the_target_the_queue_at_which_the_buffer_overflowed() {
    // A port whose buffer holds 120 us of queue: the default 200 us target is never
    // reached, so without the learnt target no delay sample would hold growth.
    let t = Instant::now();
    let (mut rx, k, gs) = one_grant_per_server(t);
    let us = Duration::from_micros;
    // Base RTT 50 us, then a first byte 120 us above it: under the target, no hold.
    rx.on_bytes(t + us(50), k, gs[0].1.id, 1).unwrap();
    rx.on_bytes(t + us(170), k, gs[1].1.id, 1).unwrap();
    assert_eq!((rx.stats().delay_holds, rx.stats().learnt_target), (0, None));
    // The buffer overflows: a response reports retransmits; a round trip later the loss
    // window closes and the budget shrinks.
    let lossy = t + us(400);
    rx.on_loss(lossy, 3, 0);
    rx.on_loss(lossy + Duration::from_millis(1), 0, 0);
    assert_eq!(rx.stats().loss_decreases, 1);
    assert_eq!(rx.stats().learnt_target, Some(us(60)), "half of the 120 us peak");
    // Now a first byte 100 us above the base RTT, under the default target, holds growth.
    let later = lossy + Duration::from_millis(2);
    rx.on_bytes(later, k, gs[2].1.id, 1).unwrap();
    assert_eq!(rx.stats().delay_holds, 1);
    let b0 = rx.budget();
    rx.on_bytes(later, k, gs[2].1.id, gs[2].1.len - 1).unwrap();
    rx.on_done(later, k, gs[2].1.id).unwrap();
    assert_eq!(rx.budget(), b0, "held at the learnt target");
    // It is still in force just before TARGET_HOLD, and lapses after it: the same delay
    // no longer holds.
    assert_eq!(rx.target(lossy + TARGET_HOLD - Duration::from_millis(1)), us(60));
    let lapsed = lossy + TARGET_HOLD + Duration::from_millis(3);
    rx.on_bytes(lapsed, k, gs[3].1.id, 1).unwrap();
    assert_eq!(rx.target(lapsed), DEFAULT_TARGET_DELAY);
}

/// Completes every grant the receiver has to issue, `rounds` times over, round `i` at
/// `at + i * step`; returns the largest budget seen.
fn deliver_rounds(rx: &mut Receiver, at: Instant, step: Duration, rounds: u32) -> u64 {
    let mut max = rx.budget();
    for i in 0..rounds {
        let now = at + step * i;
        for (k, g) in requests(rx, now) {
            finish(rx, now, k, &g);
            max = max.max(rx.budget());
        }
    }
    max
}

/// A port with a 256 KiB budget and one read of 64 servers x 1 MiB, started now.
fn a_wide_read() -> (Receiver, Instant) {
    let cfg = ReceiverConfig::builder().initial_budget(256 * 1024).build().unwrap();
    let mut rx = Receiver::new(cfg);
    let t = Instant::now();
    let stripe = Stripe::fixed_sru("a", &servers(64), 1 << 20).unwrap();
    rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
    (rx, t)
}

#[test]
fn a_loss_sets_a_ceiling_that_losses_at_or_under_it_keep_and_that_lapses() {
    let (mut rx, t) = a_wide_read();
    let ms = Duration::from_millis;
    // An RTO: the budget halves, and may grow back to 0.85 of the budget that lost.
    let lost_at = rx.budget();
    rx.on_loss(t + ms(1), 0, 1);
    let ceiling = (lost_at as f64 * LOSS_CEILING_SHARE) as u64;
    assert_eq!(rx.stats().loss_ceiling, Some(ceiling));
    assert!(rx.budget() < ceiling);
    let max = deliver_rounds(&mut rx, t + ms(2), Duration::ZERO, 40);
    assert_eq!(max, ceiling, "grew to the ceiling, not past it");
    // A loss at the ceiling keeps it: the budget shrinks under it, the ceiling stays
    // (lowering it at every such loss ratcheted it to the floor in milliseconds, on the
    // late reports of the overflow that set it).
    rx.on_loss(t + ms(3), 0, 1);
    assert_eq!(rx.stats().loss_ceiling, Some(ceiling));
    assert!(rx.budget() < ceiling);
    // A loss under it (here at half of it: another flow's doing) keeps it too.
    let half = rx.budget();
    rx.on_loss(t + ms(4), 0, 1);
    assert!(rx.budget() < half);
    assert_eq!(rx.stats().loss_ceiling, Some(ceiling));
    // CEILING_HOLD after the loss that set it, it lapses (the losses at and under it did
    // not renew it): the budget grows past it.
    let later = t + ms(1) + CEILING_HOLD + ms(1);
    // (Rounds 100 us apart: the rate measured across the gap would cap growth.)
    let grown = deliver_rounds(&mut rx, later, Duration::from_micros(100), 200);
    assert!(grown > ceiling, "{grown} {ceiling} {:?}", rx.stats());
    // A loss over the lapsed ceiling sets a new one from the budget that lost (never
    // under one bandwidth-delay product plus the target queue).
    let (lost_again, at) = (rx.budget(), later + ms(30));
    let want = ((lost_again as f64 * LOSS_CEILING_SHARE) as u64).max(rx.bdp(at).unwrap_or(0.0) as u64);
    rx.on_loss(at, 0, 1);
    assert_eq!(rx.stats().loss_ceiling, Some(want));
    assert_ne!(want, ceiling);
}

/// A port of `rate_bps` (its rate hint) with one read of 64 servers x `sru` bytes under
/// `policy`, started now.
fn a_read_on_a_port_of(rate_bps: u64, sru: u64, policy: &Policy) -> (Receiver, Instant, ReadKey) {
    let cfg = ReceiverConfig::builder().port_rate_bps(Some(rate_bps)).build().unwrap();
    let mut rx = Receiver::new(cfg);
    let t = Instant::now();
    let stripe = Stripe::fixed_sru("a", &servers(64), sru).unwrap();
    let k = rx.start_read(t, &stripe, policy, 1, ReadOptions::default());
    (rx, t, k)
}

/// Delivers whole grants of `rx`'s reads, oldest first, for `ms` milliseconds at about
/// `bytes_per_ms`; the grants not yet due stay outstanding.
fn deliver_at(rx: &mut Receiver, from: Instant, ms: u32, bytes_per_ms: u64) -> Instant {
    let mut now = from;
    let mut owed = 0u64;
    let mut pending = VecDeque::new();
    for _ in 0..ms {
        now += Duration::from_millis(1);
        owed += bytes_per_ms;
        while owed > 0 {
            if pending.is_empty() {
                pending.extend(requests(rx, now));
            }
            let Some((k, g)) = pending.pop_front() else { break };
            finish(rx, now, k, &g);
            owed = owed.saturating_sub(g.len);
        }
    }
    for (k, g) in pending {
        finish(rx, now, k, &g);
    }
    now
}

#[test]
fn a_late_grant_leaves_the_budget_while_the_queue_is_another_flows() {
    // A 1 Gbit/s port whose reads get 24% of it: the queue is another flow's, and a grant
    // without progress past its late bound likely lost its bytes to it. Its bytes stop
    // counting, so the read grants on; when it makes progress they count again.
    // One grant per server at a time, so that each grant has its own connection.
    let one_deep = Policy::builder().pipeline_depth(1).build().unwrap();
    let (mut rx, t, k) = a_read_on_a_port_of(1_000_000_000, 256 * 1024, &one_deep);
    let now = deliver_at(&mut rx, t, 40, 30_000);
    assert!(!rx.queue_is_ours() && rx.late_after().is_some());
    let out = requests(&mut rx, now);
    assert!(out.len() >= 2, "{} grants", out.len());
    assert!(requests(&mut rx, now).is_empty(), "the budget is full");
    // Every grant but the first makes progress, and the grants its bytes make room for
    // are issued.
    let soon = now + Duration::from_micros(100);
    for (_, g) in &out[1..] {
        rx.on_bytes(soon, k, g.id, MIN_PROGRESS_BYTES.min(g.len)).unwrap();
    }
    let _ = requests(&mut rx, soon);
    let due = rx.poll_timeout_of(k).expect("a timer");
    let (g0, hedges) = (&out[0].1, rx.read_stats(k).unwrap().hedges);
    // At the late bound the first grant goes late, unhedged, and its room is granted.
    rx.handle_timeout_of(due, k).unwrap();
    let st = rx.read_stats(k).unwrap();
    assert_eq!((st.late_grants, st.hedges, st.stalls), (1, hedges, 0), "{st:?}");
    assert_eq!(rx.late, g0.len);
    let more = requests(&mut rx, due);
    let granted: u64 = more.iter().map(|(_, g)| g.len).sum();
    assert!(
        granted > 0 && granted <= g0.len,
        "granted {granted} for a late {}",
        g0.len
    );
    let counted = rx.counted();
    assert!(counted <= rx.budget);
    // Its first bytes arrive: the rest of it counts again.
    let back = due + Duration::from_millis(5);
    rx.on_bytes(back, k, g0.id, MIN_PROGRESS_BYTES).unwrap();
    assert_eq!(rx.late, 0);
    assert_eq!(rx.counted(), counted + g0.len - MIN_PROGRESS_BYTES);
    // While the reads fill the port the queue is theirs: no grant is ever late.
    let (mut rx, t, _) = a_read_on_a_port_of(1_000_000_000, 256 * 1024, &Policy::default());
    deliver_at(&mut rx, t, 40, 150_000);
    assert!(rx.queue_is_ours() && rx.late_after().is_none());
}

#[test]
fn only_a_loss_while_the_reads_fill_the_port_teaches_a_ceiling() {
    // A 1 Gbit/s port (125 bytes per us) whose reads get 70% of it: the queue counts as
    // theirs (over OWN_QUEUE_SHARE) but a reported loss is a neighbour's.
    let (mut rx, t, _) = a_read_on_a_port_of(1_000_000_000, 4 << 20, &Policy::default());
    let now = deliver_at(&mut rx, t, 40, 87_500);
    let share = rx.rate.unwrap() / 125e6;
    assert!((OWN_QUEUE_SHARE..CEILING_RATE_SHARE).contains(&share), "share {share}");
    assert!(rx.queue_is_ours());
    let before = rx.budget();
    rx.on_loss(now, 0, 1);
    let st = rx.stats();
    assert!(rx.budget() < before, "the loss still shrank the budget");
    let foreign = st.foreign_losses;
    assert!(st.loss_ceiling.is_none() && foreign > 0, "{st:?}");
    // The same loss while the reads take the whole port teaches one.
    let now = deliver_at(&mut rx, now, 60, 150_000);
    let share = rx.rate.unwrap() / 125e6;
    assert!(share >= CEILING_RATE_SHARE, "share {share}");
    rx.on_loss(now, 0, 1);
    let st = rx.stats();
    assert!(st.loss_ceiling.is_some(), "{st:?}");
    assert_eq!(st.foreign_losses, foreign);
    // Back at 70%, a reported loss ends that ceiling well before CEILING_HOLD.
    let now = deliver_at(&mut rx, now, 40, 87_500);
    assert!(now < t + CEILING_HOLD * 2);
    rx.on_loss(now, 0, 1);
    let st = rx.stats();
    assert!(st.loss_ceiling.is_none() && st.foreign_losses > foreign, "{st:?}");
}

/// Fires the timers of `rx` every millisecond from `t` until `done` holds of its
/// counters (well before [`PORT_SILENCE`], which would call the reads stuck instead);
/// returns the time it held.
fn stall_until(rx: &mut Receiver, t: Instant, done: impl Fn(&ReceiverStats) -> bool) -> Instant {
    let mut now = t;
    while !done(&rx.stats()) && now < t + PORT_SILENCE / 2 {
        now += Duration::from_millis(1);
        rx.handle_timeout(now);
    }
    assert!(done(&rx.stats()), "{:?}", rx.stats());
    now
}

#[test]
fn stalls_shrink_the_budget_in_slow_start_or_where_servers_report_loss() {
    let ms = Duration::from_millis;
    // Nothing arrives: the grants stall, and a clean response later closes the loss
    // window. In slow start the stalls count as loss: the budget has not met the port.
    // They teach no target: the queue they saw may be the host's.
    let (mut rx, t) = a_wide_read();
    assert!(!requests(&mut rx, t).is_empty());
    let before = rx.budget();
    rx.peak_delay = Duration::from_micros(120);
    let now = stall_until(&mut rx, t, |st| st.stall_decreases > 0);
    rx.on_loss(now + ms(1), 0, 0);
    let st = rx.stats();
    assert!(rx.budget() < before && !rx.slow_start, "{st:?}");
    assert!(st.loss_decreases > 0 && st.learnt_target.is_none(), "{st:?}");
    // Past slow start, on a quiet port, the same stalls are the host's: the budget stays.
    let (mut rx, t) = a_wide_read();
    rx.slow_start = false;
    assert!(!requests(&mut rx, t).is_empty());
    let now = stall_until(&mut rx, t, |st| st.quiet_stalls > 0);
    rx.on_loss(now + ms(1), 0, 0);
    let st = rx.stats();
    assert_eq!((st.stall_decreases, st.loss_decreases), (0, 0), "{st:?}");
    assert_eq!(rx.budget(), before, "stalls on a quiet port are not loss");
    // A lossy port: a server reported loss (its window closes with a clean response),
    // then the same stalls count as loss and shrink the budget again, but teach no
    // ceiling: a stall is not a reported loss.
    let (mut rx, t) = a_wide_read();
    assert!(!requests(&mut rx, t).is_empty());
    rx.peak_delay = Duration::from_micros(120);
    rx.on_loss(t, 1, 0);
    rx.on_loss(t + ms(1), 0, 0);
    let (reported, ceiling) = (rx.budget(), rx.stats().loss_ceiling);
    let us = Duration::from_micros;
    assert_eq!(rx.stats().learnt_target, Some(us(60)), "a reported loss teaches it");
    assert!(
        reported < before && !rx.slow_start && rx.is_lossy(t + ms(1)),
        "{:?}",
        rx.stats()
    );
    let now = stall_until(&mut rx, t + ms(1), |st| st.stall_decreases > 0);
    rx.on_loss(now + ms(1), 0, 0);
    let st = rx.stats();
    assert_eq!(st.quiet_stalls, 0, "{st:?}");
    assert!(rx.budget() < reported, "the stalls shrank the budget: {st:?}");
    assert_eq!(st.loss_ceiling, ceiling, "a stall teaches no ceiling");
}

#[test]
fn a_small_budget_is_spent_in_smaller_chunks() {
    let budget = 24 * 1024;
    let cfg = ReceiverConfig::builder()
        .adaptive(false)
        .initial_budget(budget)
        .build()
        .unwrap();
    let mut rx = Receiver::new(cfg);
    let t = Instant::now();
    let stripe = Stripe::fixed_sru("a", &servers(8), 64 * 1024).unwrap();
    rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
    let gs = requests(&mut rx, t);
    // Half the budget each (12 KiB, under the policy's 16 KiB): two grants in flight.
    assert_eq!(
        gs.iter().map(|(_, g)| g.len).collect::<Vec<_>>(),
        [budget / 2, budget / 2]
    );
    // A budget of two policy chunks or more keeps the policy's chunk.
    let cfg = ReceiverConfig::builder()
        .adaptive(false)
        .initial_budget(64 * 1024)
        .build();
    let mut rx = Receiver::new(cfg.unwrap());
    rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
    assert!(requests(&mut rx, t).iter().all(|(_, g)| g.len == 16 * 1024));
}

/// The servers of the grants a fresh read of 8 x 64 KiB issues under a fixed budget,
/// with their lengths, after a server reported loss or not, on a port other traffic
/// keeps full (the receiver competes with its standing queue).
fn first_grants(budget: u64, lossy: bool) -> Vec<(u32, u64)> {
    first_grants_of(budget, lossy, false)
}

/// As [`first_grants`], on a port whose queue is the receiver's own when `ours`.
fn first_grants_of(budget: u64, lossy: bool, ours: bool) -> Vec<(u32, u64)> {
    let cfg = ReceiverConfig::builder()
        .adaptive(false)
        .min_budget(budget.min(DEFAULT_MIN_BUDGET))
        .initial_budget(budget)
        .build()
        .unwrap();
    let mut rx = Receiver::new(cfg);
    let t = Instant::now();
    if lossy {
        rx.on_loss(t, 3, 0);
    }
    assert_eq!(rx.is_lossy(t), lossy);
    rx.competing = !ours;
    assert_eq!(rx.queue_is_ours(), ours);
    let stripe = Stripe::fixed_sru("a", &servers(8), 64 * 1024).unwrap();
    rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
    requests(&mut rx, t).iter().map(|(_, g)| (g.server.0, g.len)).collect()
}

#[test]
fn on_a_lossy_port_a_small_budget_spreads_over_connections() {
    let chunk = crate::policy::DEFAULT_CHUNK;
    // Quiet port, 32 KiB: two policy chunks, pipelined on the first fragment's server.
    assert_eq!(first_grants(2 * chunk, false), [(0, chunk), (0, chunk)]);
    // Lossy port: a quarter of the budget each, one per server.
    let q = 2 * chunk / SPREAD_GRANTS_PER_BUDGET;
    assert_eq!(first_grants(2 * chunk, true), [(0, q), (1, q), (2, q), (3, q)]);
    // Never under the smallest chunk: a 12 KiB budget takes three 4 KiB grants.
    assert_eq!(
        first_grants(3 * MIN_CHUNK, true),
        [(0, MIN_CHUNK), (1, MIN_CHUNK), (2, MIN_CHUNK)]
    );
    // A budget of four policy chunks or more keeps the policy's chunk and its pipelining.
    let big = SPREAD_GRANTS_PER_BUDGET * chunk;
    assert_eq!(first_grants(big, true), first_grants(big, false));
    assert!(first_grants(big, true).iter().all(|&(s, len)| s == 0 && len == chunk));
    // Where the queue is the reads' own, a loss is their own overflow: no spreading.
    assert_eq!(first_grants_of(2 * chunk, true, true), first_grants(2 * chunk, false));
}

#[test]
fn a_queue_the_port_does_not_own_does_not_hold_growth() {
    // A 10 Gbit/s port whose reads get a trickle: the queue they see is someone else's.
    let one_deep = Policy::builder().pipeline_depth(1).build().unwrap();
    let (mut rx, t, k) = a_read_on_a_port_of(10_000_000_000, 1 << 20, &one_deep);
    let mut gs = requests(&mut rx, t);
    gs.dedup_by_key(|(_, g)| g.server);
    assert!(gs.len() >= 2);
    let g0 = &gs[0].1;
    rx.on_bytes(t + Duration::from_micros(50), k, g0.id, 1).unwrap();
    // 100 bytes per ms for 40 ms: far below 60% of the port's rate.
    let mut now = t + Duration::from_micros(50);
    for _ in 0..40 {
        now += Duration::from_millis(1);
        rx.on_bytes(now, k, g0.id, 100).unwrap();
    }
    assert!(!rx.queue_is_ours(), "rate {:?}", rx.rate);
    // A first byte 1 ms above the base RTT (5 targets) does not hold growth here.
    let g1 = &gs[1].1;
    rx.on_bytes(now, k, g1.id, 1).unwrap();
    assert_eq!((rx.stats().foreign_delays, rx.stats().delay_holds), (1, 0));
    let b0 = rx.budget();
    rx.on_bytes(now, k, g1.id, g1.len - 1).unwrap();
    rx.on_done(now, k, g1.id).unwrap();
    assert!(rx.budget() > b0, "grew: {b0} -> {}", rx.budget());
}

/// On a port whose servers reported no loss for [`CLEAN_PORT_WINDOW`], growth stops at
/// the servers' usual answer (the path's base plus their smoothed host time), not at
/// their quickest; after a reported loss, at their quickest again. A new port counts as
/// clean only [`CLEAN_PORT_PROBATION`] after its servers' first counters, and never
/// without them.
#[test]
fn the_growth_cap_covers_the_servers_usual_answer_on_a_port_clean_of_loss() {
    // A 1 Gbit/s port (125 bytes per us), 50 us of path, servers that answer in 50 or
    // 950 us in turn: the quickest first byte 100 us, the usual host time about 500 us.
    let (mut rx, t, k) = a_read_on_a_port_of(1_000_000_000, 64 * 1024, &Policy::default());
    let us = Duration::from_micros;
    let mut now = t;
    for i in 0..200 {
        now += us(100);
        let server = if i % 2 == 0 { us(50) } else { us(950) };
        let host = HostTime {
            server,
            ..HostTime::default()
        };
        rx.on_sample(now, k, us(50) + server, host);
    }
    let target = rx.config.target_delay.as_secs_f64();
    // 2 x 125 x (100 + 200) = 75 KB; 2 x 125 x (50 + ~500 + 200) = about 187 KB.
    let quickest = OVERCOMMIT * rx.bdp(now).unwrap();
    let host = rx.host_srtt.unwrap();
    assert!(host > us(400) && host < us(600), "{host:?}");
    let usual = OVERCOMMIT * 125e6 * ((us(50) + host).as_secs_f64() + target);
    let step = 1024;
    let grown = |rx: &mut Receiver, now: Instant| {
        rx.budget = rx.config.min_budget;
        for _ in 0..1000 {
            rx.grow(now, step);
        }
        rx.budget as f64
    };
    let near = |got: f64, want: f64| got >= want && got < want + step as f64;
    // No server has reported counters yet: nothing is known of the port's buffer.
    assert!(!rx.is_clean(now));
    let unknown = grown(&mut rx, now + CLEAN_PORT_WINDOW);
    assert!(near(unknown, quickest), "{unknown} for {quickest}");
    // The first counters, without loss: clean after the probation, not before.
    rx.on_loss(now, 0, 0);
    let new = grown(&mut rx, now + CLEAN_PORT_PROBATION - us(1));
    assert!(near(new, quickest), "{new} for {quickest}");
    now += CLEAN_PORT_PROBATION;
    assert!(rx.is_clean(now));
    let clean = grown(&mut rx, now);
    assert!(near(clean, usual), "{clean} for {usual}");
    // A server reports loss: the quickest answer bounds growth for CLEAN_PORT_WINDOW.
    rx.last_loss_report = Some(now);
    let lossy = grown(&mut rx, now + CLEAN_PORT_WINDOW - us(1));
    assert!(near(lossy, quickest), "{lossy} for {quickest}");
    assert!(grown(&mut rx, now + CLEAN_PORT_WINDOW) >= usual);
}

#[test]
fn a_standing_queue_at_the_floor_starts_competing_and_lifts_the_cap_to_a_round_trip() {
    // A 1 Gbit/s port (125 bytes per us) with a base RTT of 50 us: growth stops at two
    // bandwidth-delay products plus the target queue, 2 x 125 x (50 + 200) = 62.5 KB.
    let (mut rx, t, k) = a_read_on_a_port_of(1_000_000_000, 64 * 1024, &Policy::default());
    let us = Duration::from_micros;
    rx.on_sample(t, k, us(50), HostTime::default());
    let own_cap = OVERCOMMIT * rx.bdp(t).unwrap();
    // First bytes 2 ms above the base RTT (ten targets), the budget over twice its
    // floor: the reads' own queue may be that long, nothing changes.
    rx.budget = COMPETE_FLOOR_FACTOR * rx.config.min_budget + 1;
    let mut now = t;
    let mut sample = |rx: &mut Receiver, s: Duration| {
        now += us(100);
        rx.on_sample(now, k, s, HostTime::default());
        now
    };
    for _ in 0..COMPETE_SAMPLES {
        sample(&mut rx, us(2_050));
    }
    assert!(!rx.stats().competing);
    // Near the floor in slow start, the budget sits low because it started there (a
    // fresh client's first grants): nothing changes either.
    rx.budget = COMPETE_FLOOR_FACTOR * rx.config.min_budget;
    assert!(rx.slow_start);
    for _ in 0..2 * COMPETE_SAMPLES {
        sample(&mut rx, us(2_050));
    }
    assert!(!rx.stats().competing);
    // Brought near the floor by a decrease, the queue outlasts the smallest budgets:
    // after COMPETE_SAMPLES such samples in a row (not one fewer) the receiver competes.
    rx.slow_start = false;
    for _ in 1..COMPETE_SAMPLES {
        sample(&mut rx, us(2_050));
    }
    assert!(!rx.stats().competing);
    sample(&mut rx, us(2_050));
    let st = rx.stats();
    assert!(st.competing && st.competing_entries == 1, "{st:?}");
    assert!(!rx.queue_is_ours());
    // Competing, the budget may grow to one smoothed RTT (the standing queue included)
    // at the port's rate, past the cap of its own queue.
    let now = sample(&mut rx, us(2_050));
    let round_trip = 125e6 * rx.srtt.unwrap().as_secs_f64();
    assert!(round_trip > 2.0 * own_cap, "{round_trip} {own_cap}");
    for _ in 0..200 {
        rx.grow(now, 16 * 1024);
    }
    let b = rx.budget() as f64;
    assert!(
        b > 1.5 * own_cap && b <= round_trip + 16.0 * 1024.0,
        "{b} {own_cap} {round_trip}"
    );
    // The queue drains: COMPETE_SAMPLES samples at or under two targets end it, and the
    // budget grows no further (it is over its own queue's cap).
    for _ in 1..COMPETE_SAMPLES {
        sample(&mut rx, us(50 + 400));
    }
    assert!(rx.stats().competing, "one sample short");
    let now = sample(&mut rx, us(50 + 400));
    let b = rx.budget();
    rx.grow(now, 16 * 1024);
    assert_eq!(rx.budget(), b);
}

/// Makes the port's counter say, as of `now`, that the reads took `share` of its bytes
/// in each of its last samples.
fn counted(rx: &mut Receiver, now: Instant, share: f64) {
    for _ in 0..RATE_SAMPLE_MEDIAN {
        rx.counter_shares.push(share);
    }
    (rx.counter_share_at, rx.counter_at) = (Some(now), Some((now, 0, 0)));
}

/// A read of 8 x 64 KiB on a port of `rate_bps` with a base RTT of 200 us, whose counter
/// gives the reads `share` of its bytes; `floor` sets a fixed floor.
fn a_read_sharing(rate_bps: u64, share: f64, floor: Option<u64>) -> (Receiver, Instant, ReadKey) {
    let mut b = ReceiverConfig::builder().port_rate_bps(Some(rate_bps));
    if let Some(f) = floor {
        b = b.min_budget(f);
    }
    let mut rx = Receiver::new(b.build().unwrap());
    let t = Instant::now();
    let stripe = Stripe::fixed_sru("a", &servers(8), 64 * 1024).unwrap();
    let k = rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
    rx.on_sample(t, k, Duration::from_micros(200), HostTime::default());
    counted(&mut rx, t, share);
    (rx, t, k)
}

/// The budget of [`a_read_sharing`] after 40 loss windows, 1 ms apart, in which every
/// response lost.
fn budget_after_losses(rate_bps: u64, share: f64, floor: Option<u64>) -> u64 {
    let (mut rx, mut now, _) = a_read_sharing(rate_bps, share, floor);
    for _ in 0..40 {
        now += Duration::from_millis(1);
        rx.on_loss(now, 3, 0);
        rx.check_invariants().unwrap();
    }
    rx.budget()
}

#[test]
fn on_a_port_of_its_own_the_floor_follows_the_path() {
    // 100 Mbit/s (12.5 bytes per us), 200 us of base RTT and the 200 us target: the
    // product is 5,000 bytes, so the floor stops at MIN_PATH_FLOOR, under the default.
    assert_eq!(budget_after_losses(100_000_000, 0.95, None), MIN_PATH_FLOOR);
    // 200 Mbit/s: 25 x 400 = 10,000 bytes, between the two.
    assert_eq!(budget_after_losses(200_000_000, 0.95, None), 10_000);
    // The configured target counts, not a learnt one (a learnt 50 us would give 6,250).
    let (mut rx, t, _) = a_read_sharing(200_000_000, 0.95, None);
    rx.learnt_target = Some((MIN_TARGET_DELAY, t));
    assert_eq!(rx.loss_floor(), 10_000);
    // 1 Gbit/s: 50,000 bytes, over the default floor, which stands.
    assert_eq!(budget_after_losses(1_000_000_000, 0.95, None), DEFAULT_MIN_BUDGET);
    // Beside other traffic (the reads take 40% of the port, or 70%: their queue, but
    // not a port they fill) the default floor stands: their losses are not their budget's.
    assert_eq!(budget_after_losses(100_000_000, 0.4, None), DEFAULT_MIN_BUDGET);
    assert_eq!(budget_after_losses(100_000_000, 0.7, None), DEFAULT_MIN_BUDGET);
    // A floor the user set stands wherever.
    assert_eq!(budget_after_losses(100_000_000, 0.95, Some(12_000)), 12_000);
    let c = ReceiverConfig::builder().min_budget(12_000).build().unwrap();
    assert!(!c.floor_follows_path() && ReceiverConfig::default().floor_follows_path());
}

/// The receiver's stats and smoothed RTT after reads of 64 x 64 KiB on a 1 Gbit/s port
/// whose grants' first bytes come `late` after their issue (the first of all after
/// 50 us, with no host time), `host` of that the hosts' ([`Receiver::on_bytes_timed`]).
fn first_bytes_late(late: Duration, host: HostTime) -> (ReceiverStats, Option<Duration>) {
    let (mut rx, t, _) = a_read_on_a_port_of(1_000_000_000, 64 * 1024, &Policy::default());
    let us = Duration::from_micros;
    let mut now = t;
    let mut first = true;
    for _ in 0..200 {
        let grants = requests(&mut rx, now);
        if grants.is_empty() {
            break;
        }
        let (wait, host) = if first {
            (us(50), HostTime::default())
        } else {
            (late, host)
        };
        first = false;
        now += wait;
        for (k, g) in grants {
            rx.on_bytes_timed(now, k, g.id, g.len, host).unwrap();
            rx.on_done(now, k, g.id).unwrap();
        }
        rx.check_invariants().unwrap();
    }
    (rx.stats(), rx.srtt)
}

#[test]
fn host_time_is_not_the_ports_queue() {
    // First bytes 600 us over the base RTT: a queue three times the target, which holds
    // growth, unless the hosts spent that time (a server that held the request, a
    // client late to read its socket).
    let us = Duration::from_micros;
    let late = us(650);
    let (queue, srtt_queue) = first_bytes_late(late, HostTime::default());
    assert!(queue.delay_holds > 0, "{queue:?}");
    for host in [
        HostTime {
            server: us(600),
            client: Duration::ZERO,
            server_capped: false,
            store: None,
        },
        HostTime {
            server: us(300),
            client: us(300),
            server_capped: false,
            store: None,
        },
    ] {
        let (st, srtt) = first_bytes_late(late, host);
        assert_eq!(st.delay_holds, 0, "{host:?}: {st:?}");
        assert_eq!(st.delay_decreases, 0, "{st:?}");
        // The smoothed RTT, which times stalls, keeps the whole time (to within how far
        // its average converged: a server's hold lets the budget grow further on a
        // clean port, so the rounds of grants differ).
        let (a, b) = (srtt.unwrap(), srtt_queue.unwrap());
        assert!(a.abs_diff(b) < us(5), "{a:?} against {b:?}");
        assert!(a > us(500), "{a:?}");
    }
}

#[test]
fn a_servers_hold_counts_in_the_round_trip_the_budget_covers_and_the_clients_wait_does_not() {
    // Every first byte 2 ms after its grant, nearly all of it the hosts'. Servers that
    // take 2 ms to answer need 2 ms of the port's rate outstanding to keep it busy; a
    // client 2 ms late to read its sockets is the limit itself, and more bytes in flight
    // only add to its work.
    let us = Duration::from_micros;
    let late = us(2_050);
    let (server, _) = first_bytes_late(
        late,
        HostTime {
            server: us(2_000),
            client: Duration::ZERO,
            server_capped: false,
            store: None,
        },
    );
    let (client, _) = first_bytes_late(
        late,
        HostTime {
            server: Duration::ZERO,
            client: us(2_000),
            server_capped: false,
            store: None,
        },
    );
    assert_eq!(client.base_rtt, Some(us(50)), "{client:?}");
    assert_eq!(server.base_rtt, Some(us(50)), "the first byte of all had no host time");
    assert_eq!((server.delay_holds, client.delay_holds), (0, 0));
    // After the base's window the servers' hold is the base: it sizes the cap.
    let (mut rx, t, _) = a_read_on_a_port_of(1_000_000_000, 64 * 1024, &Policy::default());
    let mut now = t;
    for _ in 0..200 {
        let grants = requests(&mut rx, now);
        if grants.is_empty() {
            break;
        }
        now += late;
        for (k, g) in grants {
            let host = HostTime {
                server: us(2_000),
                client: Duration::ZERO,
                server_capped: false,
                store: None,
            };
            rx.on_bytes_timed(now, k, g.id, g.len, host).unwrap();
            rx.on_done(now, k, g.id).unwrap();
        }
    }
    let st = rx.stats();
    assert_eq!(st.base_rtt, Some(late), "{st:?}");
    // 2 x (125 MB/s x (2.05 ms + 200 us)) = 562 KB of cap, where the path's product
    // plus the target caps the client's case near 64 KiB.
    assert!(st.budget > 2 * client.budget, "{st:?}\n{client:?}");
}

#[test]
fn delay_alone_keeps_the_configured_floor() {
    // The same 100 Mbit/s port of the reads' own, first bytes 5 ms above the base RTT
    // (a 16 KiB floor queues 1.3 ms there): severe delay decreases stop at the default
    // floor, which the buffer holds without loss.
    let (mut rx, t, k) = a_read_sharing(100_000_000, 0.95, None);
    rx.budget = 4 * DEFAULT_MIN_BUDGET;
    let mut now = t;
    for _ in 0..40 {
        now += Duration::from_millis(1);
        rx.on_sample(now, k, Duration::from_micros(5_200), HostTime::default());
    }
    assert!(rx.stats().delay_decreases >= 2, "{:?}", rx.stats());
    assert_eq!(rx.budget(), DEFAULT_MIN_BUDGET);
}

#[test]
fn a_floor_that_rose_does_not_lift_the_budget() {
    // At the path's floor on a port of its own, then other traffic comes: the floor is
    // the default's again, the budget stays where it was, and growth takes it up.
    let (mut rx, t, _) = a_read_sharing(100_000_000, 0.95, None);
    rx.budget = MIN_PATH_FLOOR;
    counted(&mut rx, t, 0.4);
    assert_eq!(rx.loss_floor(), DEFAULT_MIN_BUDGET);
    rx.on_loss(t + Duration::from_millis(1), 3, 0);
    assert_eq!(rx.budget(), MIN_PATH_FLOOR);
    rx.check_invariants().unwrap();
    rx.grow(t + Duration::from_millis(2), 64 * 1024);
    assert!(rx.budget() > MIN_PATH_FLOOR);
}

#[test]
fn the_ports_counter_says_whose_queue_it_is() {
    // A 1 Gbit/s port, the budget brought near its floor by a decrease, and first bytes
    // 2 ms above the base RTT: by the rules without a counter the receiver competes.
    let (mut rx, t, k) = a_read_on_a_port_of(1_000_000_000, 64 * 1024, &Policy::default());
    let us = Duration::from_micros;
    rx.on_sample(t, k, us(50), HostTime::default());
    (rx.budget, rx.slow_start) = (COMPETE_FLOOR_FACTOR * rx.config.min_budget, false);
    // The reads' delivery rate says a fifth of the port (a host too busy to read).
    rx.rate = Some(25e6);
    assert!(!rx.queue_is_ours());
    let mut now = t;
    // The port's counter says the reads took 95% of its bytes: the queue is theirs,
    // whatever their rate, and they do not compete.
    counted(&mut rx, now, 0.95);
    assert!(rx.queue_is_ours());
    for _ in 0..2 * COMPETE_SAMPLES {
        now += us(100);
        rx.on_sample(now, k, us(2_050), HostTime::default());
    }
    assert!(!rx.stats().competing);
    assert!(rx.stats().delay_holds > 0);
    // It says 40%: other traffic shares the port, and after COMPETE_SAMPLES such
    // samples the receiver competes.
    counted(&mut rx, now, 0.4);
    assert!(!rx.queue_is_ours());
    for _ in 0..COMPETE_SAMPLES {
        now += us(100);
        rx.on_sample(now, k, us(2_050), HostTime::default());
    }
    let st = rx.stats();
    assert!(st.competing && st.competing_entries == 1, "{st:?}");
    // A share older than BASE_RTT_WINDOW is forgotten: the rate decides again.
    counted(&mut rx, now, 0.95);
    rx.counter_at = Some((now + BASE_RTT_WINDOW, 0, 0));
    assert_eq!(rx.counter_share(), None);
    rx.competing = false;
    assert!(!rx.queue_is_ours());
}

#[test]
fn a_queue_longer_than_the_whole_budget_starts_competing_above_the_floor() {
    // A 1 Gbit/s port (125 bytes per us), a base RTT of 50 us and a budget of three
    // floors, 48 KiB: it drains in 393 us, so the reads' own queue is at most that long.
    let (mut rx, t, k) = a_read_on_a_port_of(1_000_000_000, 64 * 1024, &Policy::default());
    let us = Duration::from_micros;
    rx.on_sample(t, k, us(50), HostTime::default());
    rx.budget = 48 * 1024;
    let threshold = 393 + 2 * 200;
    let mut now = t;
    let mut sample = |rx: &mut Receiver, delay_us: u64| {
        now += us(100);
        rx.on_sample(now, k, us(50 + delay_us), HostTime::default());
    };
    // The reads take the whole port: a long queue may be their own (a loaded host's
    // scheduling), and it does not count.
    rx.rate = Some(125e6);
    for _ in 0..2 * COMPETE_SAMPLES {
        sample(&mut rx, 3_000);
    }
    assert!(!rx.stats().competing);
    // A fifth of the port: a queue the whole budget could hold, plus the threshold,
    // does not count either (nor does it reset the count) ...
    rx.rate = Some(25e6);
    for _ in 0..2 * COMPETE_SAMPLES {
        sample(&mut rx, threshold - 10);
    }
    assert!(!rx.stats().competing);
    // ... a longer one does, COMPETE_SAMPLES in a row (not one fewer).
    for _ in 1..COMPETE_SAMPLES {
        sample(&mut rx, threshold + 10);
    }
    assert!(!rx.stats().competing);
    sample(&mut rx, threshold + 10);
    let st = rx.stats();
    assert!(st.competing && st.competing_entries == 1, "{st:?}");
    assert_eq!(st.budget, 48 * 1024, "no delay decrease on another's queue");
}

#[test]
fn a_slow_port_that_drains_between_reads_is_not_competed_for() {
    // A 100 Mbit/s port (12.5 bytes per us): the floor's own 16 KiB queue alone lasts
    // 1.3 ms, over twice the target, so near the floor the reads' own first bytes look
    // like another's standing queue.
    let (mut rx, t, k) = a_read_on_a_port_of(100_000_000, 64 * 1024, &Policy::default());
    let us = Duration::from_micros;
    // The read's first grant went out on an empty port: its first byte is such a
    // sample; the grants issued behind it are not.
    let gs = requests(&mut rx, t);
    assert!(gs.len() >= 2);
    rx.on_bytes(t + us(50), k, gs[0].1.id, 1).unwrap();
    rx.on_bytes(t + us(2_050), k, gs[1].1.id, 1).unwrap();
    assert_eq!(rx.empty_port_delays.taken(), 1);
    // One such sample decides nothing (the first one sets the base RTT).
    assert!(!rx.port_drains(t + us(2_050)));
    // At the floor after a decrease.
    rx.budget = rx.config.min_budget;
    rx.slow_start = false;
    let mut now = t + us(2_050);
    let mut sample = |rx: &mut Receiver, delay_us: u64, empty_port: bool| {
        now += us(100);
        rx.empty_port_armed = empty_port;
        rx.on_sample(now, k, us(50 + delay_us), HostTime::default());
        now
    };
    // Another read's first byte crossed the empty port within two targets ...
    sample(&mut rx, 300, true);
    // ... so first bytes 2 ms late at the floor (five targets) are the reads' own
    // queue.
    for _ in 0..2 * COMPETE_SAMPLES {
        sample(&mut rx, 2_000, false);
    }
    assert!(!rx.stats().competing);
    // One empty port's first byte over the threshold (a lost first byte, say) leaves
    // the median of the last three under it ...
    sample(&mut rx, 2_000, true);
    for _ in 0..2 * COMPETE_SAMPLES {
        sample(&mut rx, 2_000, false);
    }
    assert!(!rx.stats().competing);
    // ... two of them (a queue that stands) and the same samples start competing,
    // COMPETE_SAMPLES of them.
    sample(&mut rx, 2_000, true);
    for _ in 1..COMPETE_SAMPLES {
        sample(&mut rx, 2_000, false);
    }
    let st = rx.stats();
    assert!(st.competing && st.competing_entries == 1, "{st:?}");
    // The port drains again: two first bytes on an empty port within the threshold end
    // it at once, whatever the other samples say.
    sample(&mut rx, 100, true);
    assert!(rx.stats().competing, "one sample short");
    let now = sample(&mut rx, 100, true);
    assert!(!rx.stats().competing);
    assert!(rx.port_drains(now));
    // The verdict lapses with the base RTT's window.
    assert!(!rx.port_drains(now + BASE_RTT_WINDOW));
    // At 1 Gbit/s the floor queues 131 us, under the threshold: a long delay near the
    // floor is another's queue whatever the empty port said, as before.
    assert!(rx.floor_queue_passes_threshold());
    let (fast, _, _) = a_read_on_a_port_of(1_000_000_000, 64 * 1024, &Policy::default());
    assert!(!fast.floor_queue_passes_threshold());
}

/// Reads of 16 x 4 KiB, one at a time and 200 us apart, through a port of `rate` bytes
/// per second with a token bucket of `bucket` bytes (tbf's: it fills while the port idles
/// and lets that many bytes pass at once), for `ms` milliseconds, with no rate hint.
/// Servers answer 50 us after a grant; the client reads what passed every `tick_us`.
/// Returns the rate the receiver knows at the end.
fn rate_known_behind_a_bucket(rate: f64, bucket: f64, tick_us: u64, ms: u64) -> f64 {
    rate_known(rate, bucket, tick_us, ms, 0.0, false)
}

/// As [`rate_known_behind_a_bucket`], with other traffic that takes `others` of what the
/// port passes in every tick (bulk flows with a standing queue), and with `counter` the
/// port's receive counter, of both, read every tick ([`Receiver::on_port_bytes`]).
fn rate_known(rate: f64, bucket: f64, tick_us: u64, ms: u64, others: f64, counter: bool) -> f64 {
    let mut rx = Receiver::new(ReceiverConfig::default());
    let mut received = 0u64;
    let t = Instant::now();
    let stripe = Stripe::fixed_sru("a", &servers(16), 4 * 1024).unwrap();
    let (mut now, mut tokens) = (t, bucket);
    let mut next_read = Some(t);
    let mut read = None;
    // Grants in the order the port passes them: when their bytes are ready, and how
    // many of them passed.
    let mut queue: VecDeque<(ReadKey, crate::Grant, Instant, u64)> = VecDeque::new();
    let mut seed = 0;
    while now < t + Duration::from_millis(ms) {
        if next_read.is_some_and(|at| now >= at) {
            seed += 1;
            read = Some(rx.start_read(now, &stripe, &Policy::default(), seed, ReadOptions::default()));
            next_read = None;
        }
        let ready_at = now + Duration::from_micros(50);
        queue.extend(requests(&mut rx, now).into_iter().map(|(k, g)| (k, g, ready_at, 0)));
        now += Duration::from_micros(tick_us);
        let mut can = tokens + rate * tick_us as f64 / 1e6;
        let theirs = (can * others).floor();
        (can, received) = (can - theirs, received + theirs as u64);
        for (k, g, ready, got) in queue.iter_mut() {
            let n = (g.len - *got).min(can as u64);
            if *ready > now || n == 0 {
                break;
            }
            rx.on_bytes(now, *k, g.id, n).unwrap();
            (*got, can, received) = (*got + n, can - n as f64, received + n);
            if *got == g.len {
                rx.on_done(now, *k, g.id).unwrap();
            }
        }
        queue.retain(|(_, g, _, got)| *got < g.len);
        tokens = can.min(bucket);
        if counter {
            rx.on_port_bytes(now, received);
        }
        if let Some(k) = read.filter(|&k| rx.is_finished(k) == Some(true)) {
            rx.finish_read(k);
            read = None;
            next_read = Some(now + Duration::from_micros(200));
        }
    }
    rx.stats().link_rate_bytes_per_sec.expect("a rate")
}

#[test]
fn a_read_held_to_two_grants_still_samples_the_ports_counter() {
    // A 2 Gbit/s port where other traffic takes 85%, and a budget of two 4 KiB grants
    // whose bytes interleave at the port (two servers sending at once) and whose first
    // bytes come 300 us after their requests. Each pair ends before its replacements
    // are granted (the `End` frames come after the data), so the reads have nothing
    // outstanding for a round trip at every pair. The counter must still read the whole
    // port: on the testbed (2 bulk flows at 2 Gbit/s) such a read took no sample of it
    // in a whole row and knew the port at 149-285 Mbit/s.
    let rate = 250e6;
    let config = ReceiverConfig::builder()
        .initial_budget(8 * 1024)
        .min_budget(8 * 1024)
        .max_budget(8 * 1024)
        .build()
        .unwrap();
    let mut rx = Receiver::new(config);
    let t = Instant::now();
    let us = Duration::from_micros;
    let stripe = Stripe::fixed_sru("a", &servers(16), 1 << 20).unwrap();
    let k = rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
    let (mut now, mut next_reading) = (t, t);
    // The reads get 15% of the port: a 4 KiB pair in 218 us, in pieces of 512 bytes.
    let piece = 512u64;
    let per_piece = us((2 * piece * 1_000_000) / (rate as u64 * 15 / 100));
    while now < t + Duration::from_millis(300) {
        let grants: Vec<_> = requests(&mut rx, now).into_iter().map(|(_, g)| g).collect();
        assert!(!grants.is_empty(), "no grant at {:?}", now - t);
        now += us(300);
        let mut got = vec![0u64; grants.len()];
        while got.iter().zip(&grants).any(|(n, g)| *n < g.len) {
            for (n, g) in got.iter_mut().zip(&grants) {
                let m = piece.min(g.len - *n);
                if m > 0 {
                    rx.on_bytes(now, k, g.id, m).unwrap();
                    *n += m;
                }
            }
            now += per_piece;
            // The transport reads the counter as bytes arrive, at most once a millisecond.
            if now >= next_reading {
                rx.on_port_bytes(now, (rate * (now - t).as_secs_f64()) as u64);
                next_reading = now + Duration::from_millis(1);
            }
        }
        now += us(20);
        for g in &grants {
            rx.on_done(now, k, g.id).unwrap();
        }
    }
    let st = rx.stats();
    assert!(st.counter_samples > 0, "no sample of the counter");
    let known = st.link_rate_bytes_per_sec.unwrap();
    assert!((0.8 * rate..=1.1 * rate).contains(&known), "{known:.0} B/s");
}

/// One read over 4 servers on a port of `rate` bytes a second, ticks of 100 us; the
/// client counts `own` times the bytes that passed (above 1: bytes read late, counted
/// again), and with `counter` the port's receive counter counts what passed. Returns
/// the rate the receiver knows after 600 ms.
fn rate_known_read_late(rate: f64, own: f64, counter: bool) -> f64 {
    let mut rx = Receiver::new(ReceiverConfig::default());
    let t = Instant::now();
    let tick = Duration::from_micros(100);
    let stripe = Stripe::fixed_sru("a", &servers(4), 1 << 30).unwrap();
    let k = rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
    let mut queue: VecDeque<(crate::Grant, u64)> = VecDeque::new();
    let (mut now, mut received, mut again) = (t, 0u64, 0.0);
    while now < t + Duration::from_millis(600) {
        queue.extend(requests(&mut rx, now).into_iter().map(|(_, g)| (g, 0)));
        now += tick;
        let mut can = rate * tick.as_secs_f64();
        received += can as u64;
        again += can * (own - 1.0);
        for (g, got) in queue.iter_mut() {
            let n = (g.len - *got).min(can as u64);
            if n == 0 {
                break;
            }
            // Bytes counted twice are counted on a grant with room for them.
            let twice = (again as u64).min(g.len - *got - n);
            again -= twice as f64;
            rx.on_bytes(now, k, g.id, n + twice).unwrap();
            *got += n + twice;
            can -= n as f64;
            if *got == g.len {
                rx.on_done(now, k, g.id).unwrap();
            }
        }
        queue.retain(|(g, got)| *got < g.len);
        if counter {
            rx.on_port_bytes(now, received);
        }
    }
    rx.stats().link_rate_bytes_per_sec.expect("a rate")
}

#[test]
fn bytes_read_late_do_not_lift_the_port_past_its_counter() {
    // The reads count half again what passed the port (a client late to read its
    // sockets counts, in its busy time, bytes that passed before): their own measure
    // reads the port high, the counter holds it to its rate. With a 5 ms store on the
    // testbed the reads' own measure knew a 1 Gbit/s port at up to 2.04 Gbit/s.
    let rate = 125e6;
    let own = rate_known_read_late(rate, 1.5, false);
    assert!(own > 1.3 * rate, "own bytes alone: {own:.0} B/s");
    let counted = rate_known_read_late(rate, 1.5, true);
    assert!(
        (0.9 * rate..=1.1 * rate).contains(&counted),
        "with the counter: {counted:.0} B/s"
    );
}

#[test]
fn a_token_bucket_does_not_lift_the_ports_measured_rate() {
    // Ports with a 16 KiB bucket: every read that starts on an idle port gets its
    // first 16 KiB at once, and the rate the receiver keeps is the largest it measured
    // in its window. The smoothed rate of intervals of 500 us or one RTT reads these
    // ports at 0.8-3 times their rate (the testbed: 10 Mbit/s ports read as 28-51
    // Mbit/s); samples of busy time past each busy period's first round trip hold
    // them to their own.
    for (rate, tick_us) in [(12.5e6, 100), (12.5e6, 400), (1.25e6, 100), (125e6, 20)] {
        let known = rate_known_behind_a_bucket(rate, 16_384.0, tick_us, 3_000);
        assert!(
            (0.8 * rate..=1.15 * rate).contains(&known),
            "a port of {rate} B/s read every {tick_us} us measured at {known:.0} B/s"
        );
    }
}

#[test]
fn beside_other_traffic_the_ports_counter_knows_the_whole_port() {
    // Other traffic takes 60% of a 1 Gbit/s port: the reads' own bytes know 40% of it,
    // the port's receive counter all of it, and a token bucket's bursts lift neither.
    let rate = 125e6;
    let own = rate_known(rate, 16_384.0, 20, 3_000, 0.6, false);
    assert!((0.3 * rate..=0.5 * rate).contains(&own), "own bytes: {own:.0} B/s");
    let counted = rate_known(rate, 16_384.0, 20, 3_000, 0.6, true);
    assert!(
        (0.9 * rate..=1.1 * rate).contains(&counted),
        "counter: {counted:.0} B/s"
    );
    // Alone on the port, the counter reads its rate too, bucket and all.
    for (rate, tick_us) in [(12.5e6, 100), (1.25e6, 100), (125e6, 20)] {
        let known = rate_known(rate, 16_384.0, tick_us, 3_000, 0.0, true);
        assert!(
            (0.8 * rate..=1.15 * rate).contains(&known),
            "a port of {rate} B/s with its counter measured at {known:.0} B/s"
        );
    }
}

#[test]
fn the_ports_counter_takes_no_sample_while_the_port_idles_or_after_a_reset() {
    let mut rx = Receiver::new(ReceiverConfig::default());
    let t = Instant::now();
    let ms = Duration::from_millis;
    // Nothing outstanding: gigabytes counted while no read is busy are other traffic's
    // over an idle port of the receiver's, and say nothing of its busy time.
    for i in 0..50u64 {
        rx.on_port_bytes(t + ms(i), i * 1_000_000_000);
    }
    assert_eq!(
        (rx.stats().counter_samples, rx.stats().link_rate_bytes_per_sec),
        (0, None)
    );
    // A busy read, and a counter that goes backwards (an interface reset): no sample
    // from the step back, and none spans it.
    let stripe = Stripe::fixed_sru("a", &servers(1), 1 << 30).unwrap();
    let k = rx.start_read(t + ms(50), &stripe, &Policy::default(), 1, ReadOptions::default());
    let sent = requests(&mut rx, t + ms(50));
    let g = sent[0].1.clone();
    let mut counter = 1u64 << 40;
    for i in 51..200u64 {
        rx.on_bytes(t + ms(i), k, g.id, 1).unwrap();
        counter = if i == 120 { 0 } else { counter + 125_000 };
        rx.on_port_bytes(t + ms(i), counter);
    }
    let st = rx.stats();
    assert!(st.counter_samples > 0);
    let known = st.link_rate_bytes_per_sec.unwrap();
    assert!((0.9 * 125e6..=1.1 * 125e6).contains(&known), "{known:.0} B/s");
}

#[test]
fn a_read_on_a_frozen_server_does_not_starve_the_port() {
    // Read A's only server freezes with A's grants outstanding; its stalls shrink the
    // budget below what those grants hold. Read B, on a healthy server, must still get
    // the port within the silence bound, and the port's accounting must stay whole.
    let mut rx = Receiver::new(started_at(64 * 1024));
    let t = Instant::now();
    let frozen = Stripe::fixed_sru("a", &[ServerId(0)], 1 << 20).unwrap();
    let healthy = Stripe::fixed_sru("b", &[ServerId(1)], 64 * 1024).unwrap();
    let a = rx.start_read(t, &frozen, &Policy::default(), 1, ReadOptions::default());
    let sent = requests(&mut rx, t);
    assert!(sent.iter().all(|(k, _)| *k == a) && !sent.is_empty());
    let held = rx.stats().outstanding;
    // A server reported loss: the port is lossy, so A's stalls count as loss.
    rx.on_loss(t, 1, 0);
    // A's timers fire for a while: stalls, hedges on a spare lane, all silent.
    let mut now = t;
    while now < t + Duration::from_millis(50) {
        now = rx
            .poll_timeout()
            .unwrap_or(now + Duration::from_millis(1))
            .max(now + Duration::from_micros(100));
        rx.handle_timeout(now);
        requests(&mut rx, now);
    }
    assert!(
        rx.budget() < held,
        "budget {} should have shrunk below the frozen read's {held} bytes",
        rx.budget()
    );
    let b = rx.start_read(now, &healthy, &Policy::default(), 2, ReadOptions::default());
    let started = now;
    let mut got = Vec::new();
    while now < started + Duration::from_secs(5) && got.is_empty() {
        got = requests(&mut rx, now).into_iter().filter(|(k, _)| *k == b).collect();
        now = rx
            .poll_timeout()
            .unwrap_or(now + Duration::from_millis(1))
            .max(now + Duration::from_millis(1));
        rx.handle_timeout(now);
    }
    assert!(!got.is_empty(), "read b got no grant");
    assert!(
        now - started <= PORT_SILENCE + Duration::from_millis(50),
        "read b waited {:?}",
        now - started
    );
    // B's bytes arrive: the port is alive again, and B completes.
    while let Some((_, g)) = got.pop() {
        finish(&mut rx, now, b, &g);
        got.extend(requests(&mut rx, now).into_iter().filter(|(k, _)| *k == b));
    }
    assert_eq!(rx.is_finished(b), Some(true));
    assert!(rx.stats().stuck_discounts >= 1);
    rx.check_invariants().unwrap();
    // A still holds its bytes; when it ends, the port forgets them and its discount.
    rx.finish_read(a);
    rx.finish_read(b);
    assert_eq!(rx.stats().outstanding, 0);
    rx.check_invariants().unwrap();
}

#[test]
fn a_silent_server_does_not_hold_back_its_reads_other_fragments() {
    // Server 3 of a read over 8 servers never answers (no replica); the others answer
    // at 1 Gbit/s. Its grants and their hedges stay outstanding, and their stalls shrink
    // the budget below what they hold. Once the port is found silent, only those grants
    // stop counting: the other 7 fragments arrive, and a byte of theirs does not make
    // server 3's grants count again (when it did, the read went on in steps of
    // PORT_SILENCE).
    let mut rx = Receiver::new(ReceiverConfig::default());
    let t = Instant::now();
    let stripe = Stripe::fixed_sru("a", &servers(8), 256 * 1024).unwrap();
    let a = rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
    let mut wire: VecDeque<crate::Grant> = VecDeque::new();
    let mut now = t;
    let mut delivered = 0;
    let step = Duration::from_millis(1);
    while now < t + Duration::from_secs(2) && delivered < 7 * 256 * 1024 {
        wire.extend(
            requests(&mut rx, now)
                .into_iter()
                .map(|(_, g)| g)
                .filter(|g| g.server != ServerId(3)),
        );
        // 1 Gbit/s: 125,000 bytes a millisecond, first come first served.
        let mut room = 125_000u64;
        while let Some(g) = wire.front_mut() {
            let n = g.len.min(room);
            room -= n;
            if let Ok(Delivery::Write { .. }) = rx.on_bytes(now, a, g.id, n) {
                delivered += n;
            }
            g.len -= n;
            if g.len > 0 {
                break;
            }
            let g = wire.pop_front().expect("front");
            let _ = rx.on_done(now, a, g.id);
        }
        now += step;
        rx.handle_timeout(now);
    }
    assert_eq!(delivered, 7 * 256 * 1024, "after {:?}: {:?}", now - t, rx.stats());
    assert!(
        now - t <= PORT_SILENCE + Duration::from_millis(100),
        "the other fragments took {:?}: {:?}",
        now - t,
        rx.stats()
    );
    assert_eq!(rx.stats().stuck_discounts, 1, "{:?}", rx.stats());
    rx.check_invariants().unwrap();
}

#[test]
fn on_a_fast_port_a_fragment_that_fits_half_the_budget_is_one_grant() {
    // 10 Gbit/s: chunks grow to 125 KB (100 us at the port's rate), at most a quarter of
    // the budget. A 256 KiB fragment is one request when it fits half the budget, and
    // splits (into a chunk and the rest) when it does not.
    let stripe = Stripe::fixed_sru("a", &servers(4), 256 * 1024).unwrap();
    let t = Instant::now();
    let lens = |budget: u64| {
        let mut rx = at_rate(10_000_000_000, budget);
        rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
        let lens: Vec<u64> = requests(&mut rx, t).iter().map(|(_, g)| g.len).collect();
        rx.check_invariants().unwrap();
        lens
    };
    let whole = lens(1 << 20);
    assert!(whole.len() >= 2 && whole.iter().all(|&l| l == 256 * 1024), "{whole:?}");
    // A 400 KiB budget: chunks of a quarter of it (102,400 bytes), and the 159,744 bytes
    // left fit half of it, so each fragment is two grants.
    let split = lens(400 * 1024);
    assert_eq!(split.first(), Some(&(100 * 1024)), "{split:?}");
    assert!(split.iter().all(|&l| l == 100 * 1024 || l == 156 * 1024), "{split:?}");
}

#[test]
fn a_lone_fragment_on_a_fast_port_takes_the_room_in_one_grant() {
    // 10 Gbit/s: chunks grow to a quarter of the budget. One read of one 256 KiB fragment
    // alone on the port shares the budget with no one: it is one grant when it fits the
    // budget, else grants of half the budget.
    let t = Instant::now();
    let lens_after = |servers_n: u32, reads: usize, budget: u64, lossy: bool| {
        let mut rx = at_rate(10_000_000_000, budget);
        for r in 0..reads {
            let stripe = Stripe::fixed_sru(&format!("r{r}"), &servers(servers_n), 256 * 1024).unwrap();
            rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
        }
        if lossy {
            // A server reported a retransmit (a loss window of one response; the budget
            // is cut by the first `alpha`'s half).
            rx.on_loss(t, 1, 0);
        }
        let lens: Vec<u64> = requests(&mut rx, t).iter().map(|(_, g)| g.len).collect();
        rx.check_invariants().unwrap();
        (lens, rx.budget())
    };
    let lens = |servers_n, reads, budget| lens_after(servers_n, reads, budget, false).0;
    assert_eq!(lens(1, 1, 300 * 1024), [256 * 1024]);
    // Under the fragment: half the budget at a time (the rest waits for room).
    assert_eq!(lens(1, 1, 200 * 1024), [100 * 1024, 100 * 1024]);
    // Two reads share the port, or two fragments the read: quarter-budget chunks (the
    // last takes the runt along).
    let shared = [75 * 1024, 75 * 1024, 106 * 1024];
    assert_eq!(lens(1, 2, 300 * 1024), shared);
    assert_eq!(lens(2, 1, 300 * 1024), shared);
    // A port whose servers report loss: a larger grant is a larger burst, so the lone
    // read keeps the quarter-budget chunk (and takes the rest along where it fits half
    // the budget, as any read does).
    assert_eq!(lens(1, 1, 400 * 1024), [256 * 1024]);
    let (lossy, budget) = lens_after(1, 1, 400 * 1024, true);
    assert_eq!((lossy, budget), (vec![100 * 1024, 156 * 1024], 400 * 1024));
}

#[test]
fn paced_grants_share_the_port_rate_and_unpaced_carry_none() {
    let stripe = Stripe::fixed_sru("a", &servers(8), 64 * 1024).unwrap();
    let t = Instant::now();
    for pacing in [false, true] {
        let cfg = ReceiverConfig::builder()
            .port_rate_bps(Some(8_000_000_000))
            .pacing(pacing)
            .build()
            .unwrap();
        let mut rx = Receiver::new(cfg);
        rx.start_read(t, &stripe, &Policy::default(), 1, ReadOptions::default());
        let gs = requests(&mut rx, t);
        assert!(gs.len() >= 2);
        if !pacing {
            assert!(gs.iter().all(|(_, g)| g.pace.is_none()));
            continue;
        }
        // The first grant had the port to itself; each later one a shrinking share.
        let link = 1e9 * PACING_GAIN;
        let mut issued = 0;
        for (_, g) in &gs {
            issued += g.len;
            let want = link * g.len as f64 / issued as f64;
            let got = g.pace.expect("paced") as f64;
            assert!((got - want).abs() <= 1.0 + want * 1e-9, "{got} vs {want}");
        }
        let total: f64 = gs.iter().map(|(_, g)| g.len as f64).sum();
        let last = gs.last().unwrap().1.pace.unwrap() as f64;
        assert!(last <= link * (gs.last().unwrap().1.len as f64 / total) + 1.0);
    }
}

#[test]
fn config_ranges_are_checked() {
    assert!(ReceiverConfig::builder().min_budget(0).build().is_err());
    assert!(ReceiverConfig::builder().initial_budget(1).build().is_err());
    assert!(ReceiverConfig::builder().max_senders(0).build().is_err());
    assert!(ReceiverConfig::builder().hedge_fraction(1.5).build().is_err());
    assert!(ReceiverConfig::builder().target_delay(Duration::ZERO).build().is_err());
    assert!(ReceiverConfig::builder().port_rate_bps(Some(0)).build().is_err());
    assert!(ReceiverConfig::for_port(0, 32 * 1024).is_err());
    let c = ReceiverConfig::for_port(100_000_000_000, 12 << 20).unwrap();
    assert!(c.initial_budget() > DEFAULT_INITIAL_BUDGET);
}

/// A server whose store took 100 ms, longer than the transport's hold can say
/// (`server_capped`, at incast-rpc's cap of 32.767 ms), answers 100 ms and 50 us after its
/// request. Where the transport carried the store's part (`store`), the round trip that
/// sizes the port's rate samples is the path's 50 us; where it did not, the whole 100 ms
/// stays in it (and a port whose busy periods are shorter than that is never sampled), and
/// either way the delay rules take nothing from the sample.
#[test]
fn a_capped_hold_whose_store_part_is_known_leaves_the_path_to_the_rate_samples() {
    let hold = Duration::from_millis(100);
    let path = Duration::from_micros(50);
    for (store, rtt) in [
        (Some(hold), path),
        (None, hold + path),
        // A store's part under the cap does not say how long the rest of the hold was.
        (Some(Duration::from_millis(20)), hold + path),
    ] {
        let host = HostTime {
            server: Duration::from_micros(32_767),
            server_capped: true,
            store,
            ..HostTime::default()
        };
        let (rx, ..) = one_read_of_one_server(hold + path, host);
        assert_eq!(rx.rate_rtt(), rtt, "store {store:?}");
        assert_eq!(rx.path_base, None, "store {store:?}: the delay rules took the sample");
        rx.check_invariants().unwrap();
    }
}
