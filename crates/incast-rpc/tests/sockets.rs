//! Socket tuning, TCP_INFO and the timer, on loopback.

use std::time::{Duration, Instant};

use incast_rpc::{HrTimer, OptValue, SockOpt, SocketTuning, TcpInfo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (s, _) = l.accept().await.unwrap();
    (c, s)
}

#[tokio::test]
async fn every_option_is_reported_applied_or_refused() {
    let (c, _s) = pair().await;
    let t = SocketTuning {
        nodelay: Some(true),
        quickack: Some(true),
        recv_buffer: Some(64 * 1024),
        window_clamp: Some(16 * 1024),
        user_timeout: Some(Duration::from_secs(5)),
        rto_min: Some(Duration::from_micros(4001)),
        rto_max: Some(Duration::from_secs(2)),
        congestion: Some("reno".into()),
        max_pacing_rate: Some(125_000_000),
        notsent_lowat: Some(32 * 1024),
    };
    let r = t.apply(&c);
    assert_eq!(r.applied.len() + r.refused.len(), 10, "{r}");
    assert_eq!(r.kept(SockOpt::NoDelay), Some(&OptValue::Bool(true)));
    assert_eq!(r.kept(SockOpt::MaxPacingRate), Some(&OptValue::Rate(125_000_000)));
    // Linux doubles SO_RCVBUF for its own bookkeeping.
    assert_eq!(r.kept(SockOpt::RecvBuffer), Some(&OptValue::Bytes(128 * 1024)));
    assert_eq!(r.kept(SockOpt::Congestion), Some(&OptValue::Name("reno".into())));
    assert_eq!(
        r.kept(SockOpt::UserTimeout),
        Some(&OptValue::Duration(Duration::from_secs(5)))
    );
    match r.kept(SockOpt::RtoMin) {
        // Rounded up to whole jiffies: never below what was asked.
        Some(OptValue::Duration(d)) => assert!(*d >= Duration::from_micros(4001), "{d:?}"),
        other => {
            let refused = r.refused.iter().find(|x| x.option == SockOpt::RtoMin);
            assert!(refused.is_some(), "RTO_MIN neither kept nor refused: {other:?}");
        }
    }
    print!("{r}");
}

#[tokio::test]
async fn refusals_carry_the_errno() {
    let (c, _s) = pair().await;
    let t = SocketTuning {
        congestion: Some("no-such-cc".into()),
        rto_min: Some(Duration::from_micros(1000)), // below the kernel's 4001 us
        ..SocketTuning::default()
    };
    let r = t.apply(&c);
    assert!(r.applied.is_empty(), "{r}");
    let cc = r.refused.iter().find(|x| x.option == SockOpt::Congestion).unwrap();
    assert_eq!(cc.error.raw_os_error(), Some(ENOENT));
    let rto = r.refused.iter().find(|x| x.option == SockOpt::RtoMin).unwrap();
    // EINVAL where the option exists (Linux 6.15+), ENOPROTOOPT where it does not.
    assert!(
        matches!(rto.error.raw_os_error(), Some(EINVAL) | Some(ENOPROTOOPT)),
        "{}",
        rto.error
    );
    assert!(r.to_string().contains("TCP_CONGESTION: asked no-such-cc, refused"));
}

const ENOENT: i32 = 2;
const EINVAL: i32 = 22;
const ENOPROTOOPT: i32 = 92;

#[tokio::test]
async fn tcp_info_sees_the_traffic() {
    let (mut c, mut s) = pair().await;
    let before = TcpInfo::of(&s).unwrap();
    c.write_all(&[7u8; 100_000]).await.unwrap();
    let mut buf = vec![0u8; 100_000];
    s.read_exact(&mut buf).await.unwrap();
    let after = TcpInfo::of(&s).unwrap();
    assert_eq!(after.bytes_received - before.bytes_received, 100_000);
    assert!(
        after.rtt > Duration::ZERO && after.rto >= Duration::from_millis(200),
        "{after:?}"
    );
    assert!(after.kernel_len > 0);
    if after.kernel_len >= 248 {
        assert_eq!(after.total_rto, Some(0), "no timeouts on loopback");
    } else {
        assert_eq!(after.total_rto, None, "short struct: counters unknown, not zero");
    }
    let counters = after.counters();
    assert_eq!(counters.rtos, after.total_rto.unwrap_or(0));
}

#[tokio::test]
async fn timer_never_fires_early_and_disarmed_never_fires() {
    let mut t = HrTimer::new().unwrap();
    for us in [0u64, 50, 200, 1000] {
        let deadline = Instant::now() + Duration::from_micros(us);
        t.set(Some(deadline)).unwrap();
        t.fired().await.unwrap();
        assert!(Instant::now() >= deadline);
        assert_eq!(t.deadline(), None);
    }
    t.set(Some(Instant::now() + Duration::from_millis(1))).unwrap();
    t.set(None).unwrap();
    let r = tokio::time::timeout(Duration::from_millis(20), t.fired()).await;
    assert!(r.is_err(), "a disarmed timer fired");
    // Re-arming after a disarm works, and a past deadline fires at once.
    t.set(Some(Instant::now() - Duration::from_millis(1))).unwrap();
    tokio::time::timeout(Duration::from_millis(50), t.fired())
        .await
        .unwrap()
        .unwrap();
}
