//! The busy host of `incast-bench sweep --cpu-load`: its child process (`incast-bench spin`)
//! spins on the CPU, stops by itself at its time limit and when its parent's end of its
//! standard input closes, and bad thread counts are refused before anything starts.
//!
//! Run: `cargo test --release -p incast-bench --test cpu_load`

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_incast-bench");

/// Waits for `child` to end, at most `limit`; kills it (by its PID) and fails if it does not.
fn ends_within(mut child: Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The CPU time (user and system) a process used so far, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which ends with the last ')': utime and stime are the
    // 14th and 15th fields of the line, the 12th and 13th after the name.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|x| x.parse().unwrap())
        .collect();
    f[0] + f[1]
}

#[test]
fn the_load_spins_and_stops_when_its_parent_closes_its_input() {
    let mut child = Command::new(BIN)
        .args(["spin", "--threads", "1", "--max-time", "60s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let ticks = cpu_ticks(child.id());
    // Writing to its input does not stop it; closing it does.
    child.stdin.as_mut().unwrap().write_all(b"keep going\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(child.try_wait().unwrap().is_none(), "stopped before its input closed");
    drop(child.stdin.take());
    let status = ends_within(child, Duration::from_secs(10), "spin after its input closed");
    assert!(status.success(), "spin failed: {status}");
    // One spinning thread for 0.6 s is about 60 ticks at 100 Hz on an idle machine; a tenth of
    // that still shows it spun and did not sleep.
    assert!(ticks >= 6, "the load used only {ticks} ticks of CPU in 0.6 s");
}

#[test]
fn the_load_stops_at_its_time_limit_with_its_input_open() {
    let child = Command::new(BIN)
        .args(["spin", "--threads", "2", "--max-time", "300ms"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Its input stays open (the child's handle is dropped only after it ended).
    let status = ends_within(child, Duration::from_secs(10), "spin with a 300 ms limit");
    assert!(status.success(), "spin failed: {status}");
}

#[test]
fn thread_counts_out_of_range_are_refused() {
    for args in [
        &["spin", "--threads", "0", "--max-time", "1s"][..],
        &["spin", "--threads", "65", "--max-time", "1s"][..],
        &["sweep", "--loopback", "--cpu-load", "65", "--sru", "1KiB"][..],
        &["sweep", "--loopback", "--cpu-load", "many", "--sru", "1KiB"][..],
    ] {
        let out = Command::new(BIN).args(args).stdin(Stdio::null()).output().unwrap();
        assert!(!out.status.success(), "{args:?} was taken");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("threads") || err.contains("invalid"),
            "{args:?}: no reason given: {err}"
        );
    }
}
