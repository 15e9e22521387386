//! Smoke test of the emulated switch: build it, read blocks through it with `default`
//! (every byte is checked against the pattern; a wrong byte fails the run), and check that
//! nothing is left behind, also when the process is killed mid-run.
//!
//! Needs Linux, root (or `unshare -rn`), iproute2 and ethtool. Without them it says why and
//! skips, unless `INCAST_REQUIRE_TESTBED=1` (set by `.ci/run`), where it fails instead.
//!
//! Run: `cargo test --release -p incast-bench --test testbed_smoke`

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_incast-bench");

fn testbed_possible() -> bool {
    let required = std::env::var("INCAST_REQUIRE_TESTBED").is_ok_and(|v| v == "1");
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    let tools = ["ip", "tc", "ethtool"].iter().all(|t| {
        ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
            .iter()
            .any(|d| Path::new(d).join(t).exists())
    });
    if root && tools {
        return true;
    }
    let why = format!("testbed needs root and ip/tc/ethtool (root: {root}, tools: {tools})");
    assert!(!required, "INCAST_REQUIRE_TESTBED=1 but {why}");
    eprintln!("skipping: {why}");
    false
}

/// `net:[inode]` links of every process and descriptor on the machine.
fn live_netns_links() -> Vec<String> {
    let mut v = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return v;
    };
    for p in procs.flatten() {
        let base = p.path();
        if let Ok(t) = std::fs::read_link(base.join("ns/net")) {
            v.push(t.to_string_lossy().into_owned());
        }
        if let Ok(tasks) = std::fs::read_dir(base.join("task")) {
            for t in tasks.flatten() {
                if let Ok(l) = std::fs::read_link(t.path().join("ns/net")) {
                    v.push(l.to_string_lossy().into_owned());
                }
            }
        }
        if let Ok(fds) = std::fs::read_dir(base.join("fd")) {
            for fd in fds.flatten() {
                if let Ok(l) = std::fs::read_link(fd.path()) {
                    let l = l.to_string_lossy().into_owned();
                    if l.starts_with("net:") {
                        v.push(l);
                    }
                }
            }
        }
    }
    v
}

fn assert_nothing_left() {
    let stray: Vec<String> = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("incast"))
        .collect();
    assert!(stray.is_empty(), "interfaces left behind: {stray:?}");
    let pinned: Vec<_> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("incast"))
                .collect()
        })
        .unwrap_or_default();
    assert!(pinned.is_empty(), "namespaces left pinned: {pinned:?}");
}

#[test]
fn default_reads_every_byte_through_the_switch_and_leaves_nothing() {
    if !testbed_possible() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("incast-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("smoke.jsonl");
    let t = Instant::now();
    let out = Command::new(BIN)
        .args([
            "sweep",
            "--testbed",
            "--senders",
            "8,32",
            "--sru",
            "32KiB",
            "--strategies",
            "default,quic",
        ])
        .args([
            "--blocks",
            "20",
            "--warmup",
            "2",
            "--max-time",
            "20s",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sweep failed:\n{stdout}\n{stderr}");
    eprintln!("{stdout}(took {:?})", t.elapsed());
    let text = std::fs::read_to_string(&json).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 5, "a header and four results:\n{text}");
    assert_eq!(lines[0]["type"], "header");
    assert_eq!(lines[0]["network"], "testbed");
    assert_eq!(lines[0]["testbed"]["buffer_bytes"], 32768);
    let expected = [("default", 8), ("quic", 8), ("default", 32), ("quic", 32)];
    for (r, (strategy, n)) in lines[1..].iter().zip(expected) {
        assert_eq!(r["strategy"], strategy);
        assert_eq!(r["senders"], n);
        // QUIC through the switch: every request went over it, TCP's not at all.
        let quic_requests = r["quic_requests"].as_u64().unwrap();
        assert_eq!(quic_requests > 0, strategy == "quic", "{r}");
        assert_eq!(r["blocks"], 20);
        assert_eq!(r["failed_blocks"], 0);
        assert_eq!(r["block_bytes"], 32768 * n);
        assert!(r["goodput_mbps"].as_f64().unwrap() > 0.0);
        // The testbed was really in the path: a 1 Gbit/s port cannot carry more.
        assert!(r["goodput_mbps"].as_f64().unwrap() < 1000.0, "{r}");
        assert!(r["switch_drops"].is_u64());
        assert!(!r["histogram"].as_str().unwrap().is_empty());
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert_nothing_left();
}

#[test]
fn a_killed_run_leaves_no_namespace_behind() {
    if !testbed_possible() {
        return;
    }
    let mut child = Command::new(BIN)
        .args([
            "sweep",
            "--testbed",
            "--senders",
            "16",
            "--sru",
            "32KiB",
            "--strategies",
            "naive",
        ])
        .args(["--blocks", "100000", "--max-time", "30s", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait until its namespaces exist: threads of the child in a network namespace other
    // than ours.
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let theirs = loop {
        let mut found = Vec::new();
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for t in tasks.flatten() {
                if let Ok(l) = std::fs::read_link(t.path().join("ns/net")) {
                    if l != ours && !found.contains(&l) {
                        found.push(l);
                    }
                }
            }
        }
        if found.len() >= 2 {
            break found;
        }
        assert!(Instant::now() < deadline, "the sweep never entered its namespaces");
        std::thread::sleep(Duration::from_millis(50));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    // The kernel frees a namespace asynchronously; nothing may still reference it.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let live = live_netns_links();
        let left: Vec<_> = theirs
            .iter()
            .filter(|ns| live.iter().any(|l| Path::new(l) == ns.as_path()))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "namespaces still referenced after kill: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_nothing_left();
}

#[test]
fn bad_testbed_settings_are_refused_before_anything_is_built() {
    let out = Command::new(BIN)
        .args([
            "sweep",
            "--testbed",
            "--buffer",
            "10",
            "--sru",
            "32KiB",
            "--senders",
            "2",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("testbed buffer is 10 B"), "{stderr}");
    let out = Command::new(BIN)
        .args(["sweep", "--loopback", "--sru", "32KiB", "--strategies", "rto-route"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("runs only with --testbed"));
}

#[test]
fn loopback_sweep_writes_json_csv_and_plot() {
    let dir = std::env::temp_dir().join(format!("incast-loopback-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, csv, svg) = (dir.join("r.jsonl"), dir.join("r.csv"), dir.join("r.svg"));
    let out = Command::new(BIN)
        .args([
            "sweep",
            "--loopback",
            "--senders",
            "1,4",
            "--block",
            "256KiB",
            "--sru",
            "8KiB",
        ])
        .args([
            "--strategies",
            "naive,capped,scheduled,chunked,hedged,default,quic,fallback",
        ])
        .args(["--blocks", "4", "--warmup", "1", "--quiet", "--json"])
        .arg(&json)
        .arg("--csv")
        .arg(&csv)
        .arg("--plot")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let results = 2 * 2 * 8;
    let text = std::fs::read_to_string(&json).unwrap();
    assert_eq!(text.lines().count(), 1 + results);
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(header["network"], "loopback");
    assert!(header["line_rate_mbps"].as_f64().unwrap() > 0.0);
    assert!(header["command"].as_str().unwrap().contains("--loopback"));
    assert_eq!(std::fs::read_to_string(&csv).unwrap().lines().count(), 1 + results);
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(
        plot.matches(r#"stroke-width="2""#).count(),
        2 * 8,
        "one segment per strategy and panel"
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        table.lines().filter(|l| l.starts_with("chunked")).count(),
        4,
        "two layouts by two sender counts"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
