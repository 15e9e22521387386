//! Smoke test of the emulated cluster: build it (server hosts with their own NICs), check its
//! calibration (one sender reaches 90% of the port's payload capacity), read blocks through
//! it with `default`, `quic` and the reference `blocking` client, one read at a time and
//! several at once, with and without background flows (every byte is checked against the
//! pattern; a wrong byte fails the run), and check that nothing is left behind, also when the
//! process is killed mid-run.
//!
//! Needs Linux, root (or `unshare -rn`) and iproute2 (no ethtool binary: offloads go through
//! the kernel's ioctl). Without them it says why and skips, unless
//! `INCAST_REQUIRE_TESTBED=1` (set by `.ci/run`), where it fails instead.
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
    let tools = ["ip", "tc"].iter().all(|t| {
        ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
            .iter()
            .any(|d| Path::new(d).join(t).exists())
    });
    if root && tools {
        return true;
    }
    let why = format!("testbed needs root and ip/tc (root: {root}, tools: {tools})");
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

/// Testbed tests take turns: they measure, and a second testbed would take their CPU.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn sweep_json(args: &[&str]) -> Vec<serde_json::Value> {
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("incast-smoke-{}-{run}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("smoke.jsonl");
    let t = Instant::now();
    let out = Command::new(BIN)
        // Exactly --blocks blocks per configuration, as the assertions expect.
        .args(["sweep", "--testbed", "--quiet", "--min-time", "0s", "--json"])
        .arg(&json)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sweep {args:?} failed:\n{stdout}\n{stderr}");
    eprintln!("{stdout}(took {:?})", t.elapsed());
    let text = std::fs::read_to_string(&json).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn default_reads_every_byte_through_the_host_topology_and_leaves_nothing() {
    if !testbed_possible() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lines = sweep_json(&[
        "--senders",
        "8,32",
        "--sru",
        "32KiB",
        "--strategies",
        "default,quic,blocking",
        "--concurrency",
        "1,4",
        "--blocks",
        "20",
        "--warmup",
        "2",
        "--max-time",
        "20s",
    ]);
    // A header, then (default, quic, blocking) at R = 1 and (default, quic) at R = 4, for
    // each of two sender counts: `blocking` reads one block at a time.
    assert_eq!(lines.len(), 1 + 2 * 5, "{lines:?}");
    let h = &lines[0];
    assert_eq!(h["type"], "header");
    assert_eq!(h["network"], "testbed");
    assert_eq!(h["testbed"]["buffer_bytes"], 32768);
    // One host per sender of the widest read, each with a line-rate NIC.
    assert_eq!(h["testbed"]["hosts"], 32);
    assert_eq!(h["testbed"]["host_rate_bps"], 1_000_000_000u64);
    // Its 16 KiB bucket is half the 32 KiB port: GSO units keep the kernel's size.
    assert!(h["testbed"]["host_gso_max_bytes"].is_null(), "{h}");
    // Calibration: one sender streaming reaches 90% of what the port can carry.
    let capacity = h["port_payload_capacity_mbps"].as_f64().unwrap();
    assert!((950.0..960.0).contains(&capacity), "{h}");
    let of_capacity = h["line_rate_of_capacity"].as_f64().unwrap();
    // A hypervisor that takes the CPU measures the host, not the model (a CI machine whose
    // rows showed 7-25% steal reached 78%): the bound holds where no row saw steal over 5%.
    let steal = lines[1..]
        .iter()
        .map(|r| r["machine_cpu_steal"].as_f64().unwrap_or(0.0))
        .fold(0.0, f64::max);
    if steal <= 0.05 {
        assert!(
            of_capacity >= 0.9,
            "one sender reached only {:.1}% of the port's payload capacity: the host model is miscalibrated\n{h}",
            of_capacity * 100.0
        );
    } else {
        eprintln!(
            "calibration not judged: the hypervisor took up to {:.0}% of the CPU ({:.1}% of capacity)",
            steal * 100.0,
            of_capacity * 100.0
        );
    }
    let expected = [
        ("default", 8, 1),
        ("quic", 8, 1),
        ("blocking", 8, 1),
        ("default", 8, 4),
        ("quic", 8, 4),
        ("default", 32, 1),
        ("quic", 32, 1),
        ("blocking", 32, 1),
        ("default", 32, 4),
        ("quic", 32, 4),
    ];
    for (r, (strategy, n, conc)) in lines[1..].iter().zip(expected) {
        assert_eq!(r["strategy"], strategy, "{r}");
        assert_eq!(r["senders"], n);
        assert_eq!(r["concurrency"], conc);
        // QUIC through the switch: every request went over it, TCP's not at all.
        let quic_requests = r["quic_requests"].as_u64().unwrap();
        assert_eq!(quic_requests > 0, strategy == "quic", "{r}");
        assert_eq!(r["blocks"], 20);
        assert_eq!(r["failed_blocks"], 0, "{r}");
        assert_eq!(r["block_bytes"], 32768 * n);
        let goodput = r["goodput_mbps"].as_f64().unwrap();
        // The port was really in the path: it cannot carry more than its capacity.
        assert!(goodput > 0.0 && goodput < capacity, "{r}");
        let (mean, p50, p99, max) = (
            r["mean_ms"].as_f64().unwrap(),
            r["p50_ms"].as_f64().unwrap(),
            r["p99_ms"].as_f64().unwrap(),
            r["max_ms"].as_f64().unwrap(),
        );
        assert!(
            0.0 < p50 && p50 <= p99 && p99 <= max * 1.001 && mean <= max * 1.001,
            "{r}"
        );
        assert!(r["switch_drops"].is_u64());
        // The client's own RTOs are read from its namespace, apart from the hosts'.
        let client_rtos = r["client_rtos"]
            .as_u64()
            .unwrap_or_else(|| panic!("no client_rtos: {r}"));
        assert!(
            r["client_rtos_warmup"].as_u64().is_some_and(|w| w <= client_rtos),
            "{r}"
        );
        assert!(!r["histogram"].as_str().unwrap().is_empty());
    }
    assert_nothing_left();
}

#[test]
fn background_flows_share_the_port_with_the_reads() {
    if !testbed_possible() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lines = sweep_json(&[
        "--senders",
        "8",
        "--sru",
        "64KiB",
        "--strategies",
        "naive",
        "--background",
        "2",
        "--blocks",
        "30",
        "--warmup",
        "2",
        "--max-time",
        "15s",
    ]);
    assert_eq!(lines.len(), 2);
    let r = &lines[1];
    assert_eq!(r["background_flows"], 2);
    assert_eq!(r["failed_blocks"], 0, "{r}");
    let (reads, bulk) = (
        r["goodput_mbps"].as_f64().unwrap(),
        r["background_mbps"].as_f64().unwrap(),
    );
    // Both got something through the one port, and together no more than it carries.
    let capacity = lines[0]["port_payload_capacity_mbps"].as_f64().unwrap();
    assert!(reads > 0.0 && bulk > 0.0 && reads + bulk < capacity * 1.02, "{r}");
    assert_nothing_left();
}

/// The sweep's lines for 40 blocks of 8 x 64 KiB beside 4 x 4 KiB, 4 at once, `naive` and
/// `default`, with `extra` options: the line rate's, then one per strategy.
/// The header line, then a row per strategy (and per load of an open loop).
fn mixed_sweep(extra: &[&str], rows: usize) -> Vec<serde_json::Value> {
    let mut args = vec![
        "--senders",
        "8",
        "--sru",
        "64KiB",
        "--mix",
        "4x4KiB",
        "--concurrency",
        "4",
        "--strategies",
        "naive,default",
        "--blocks",
        "40",
        "--warmup",
        "1",
        "--max-time",
        "15s",
    ];
    args.extend_from_slice(extra);
    let lines = sweep_json(&args);
    assert_eq!(lines.len(), 1 + rows);
    lines
}

#[test]
fn mixed_reads_are_read_whole_and_reported_by_kind() {
    if !testbed_possible() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lines = mixed_sweep(&[], 2);
    let line_rate = lines[0]["line_rate_mbps"].as_f64().unwrap();
    for r in &lines[1..] {
        assert_eq!(r["failed_blocks"], 0, "{r}");
        assert_eq!(r["mix"], "4 x 4KiB", "{r}");
        assert_eq!(r["mix_block_bytes"], 16384, "{r}");
        // Every other reader of four reads the mixed shape: each of the two readers of each
        // kind read at least once (the faster kind reads more), and every read is of one
        // kind or the other.
        let (mixed, layout) = (r["mix_blocks"].as_u64().unwrap(), r["layout_blocks"].as_u64().unwrap());
        assert!(mixed >= 2 && layout >= 2, "{r}");
        assert_eq!(mixed + layout, r["blocks"].as_u64().unwrap(), "{r}");
        // A mixed read is half a layout read's fragments at a sixteenth of their size: its
        // ideal is a thirty-second of the layout's.
        let ideal = r["mix_ideal_ms"].as_f64().unwrap();
        assert!((ideal - 16384.0 * 8.0 / (line_rate * 1e3)).abs() < 1e-6, "{r}");
        assert!((r["ideal_ms"].as_f64().unwrap() / ideal - 32.0).abs() < 1e-6, "{r}");
        let (p99, max) = (r["mix_p99_ms"].as_f64().unwrap(), r["max_ms"].as_f64().unwrap());
        assert!(p99 > 0.0 && p99 <= max * 1.001, "{r}");
        assert!(r["layout_p99_ms"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert_nothing_left();
}

#[test]
fn an_open_loop_offers_its_load_and_alternates_the_kinds_by_number() {
    if !testbed_possible() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // A load curve of two points: each load a configuration of its own, loads innermost,
    // drawn as latency against load.
    let plot = std::env::temp_dir().join(format!("incast-smoke-load-{}.svg", std::process::id()));
    let lines = mixed_sweep(&["--load", "0.15,0.4", "--plot", plot.to_str().unwrap()], 4);
    let svg = std::fs::read_to_string(&plot).unwrap();
    std::fs::remove_file(&plot).unwrap();
    assert!(svg.contains("offered load") && svg.contains("small reads"), "{svg}");
    let mut fractions = [0.0; 4];
    let mut waited = [false; 4];
    for (i, r) in lines[1..].iter().enumerate() {
        assert_eq!(r["failed_blocks"], 0, "{r}");
        assert_eq!(r["load"], [0.15, 0.15, 0.4, 0.4][i], "{r}");
        // Reads arrive at that share of the line rate: a closed loop would read 0.9 or more
        // of it. 40 draws of the seeded process land within half of their mean. A strategy
        // whose reads waited for a place (all R in flight: `naive`'s 200 ms RTOs, 0.19 of the
        // line rate carried at 0.4 in one CI-like run) carries less than the load offered.
        let f = r["line_rate_fraction"].as_f64().unwrap();
        let load = r["load"].as_f64().unwrap();
        waited[i] = r["arrivals_queued"].as_u64().unwrap() > 0;
        assert!(f < 1.5 * load, "{r}");
        assert!(waited[i] || f >= 0.5 * load, "{r}");
        fractions[i] = f;
        // Every other read by number is of the mixed shape, whichever ends first.
        let (mixed, layout) = (r["mix_blocks"].as_u64().unwrap(), r["layout_blocks"].as_u64().unwrap());
        assert_eq!(mixed + layout, 40, "{r}");
        assert!(mixed.abs_diff(layout) <= 1, "{r}");
    }
    // The same seeds at both loads: the higher load's reads come faster, strategy by strategy
    // (where none waited for a place).
    for (low, high) in [(0, 2), (1, 3)] {
        assert!(
            waited[low] || waited[high] || fractions[high] > fractions[low],
            "{fractions:?} {waited:?}"
        );
    }
    // At the low load `default`'s reads never wait for a place, so its bounds were checked.
    assert!(!waited[1], "{waited:?}");
    assert_nothing_left();
}

#[test]
fn a_port_shallower_than_twice_a_hosts_bucket_gets_units_of_half_its_buffer() {
    if !testbed_possible() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // The testbed reads the hosts' gso_max_size back and fails the run if the kernel kept
    // another value, so a run that ends well applied it.
    let lines = sweep_json(&[
        "--buffer",
        "16KiB",
        "--senders",
        "2",
        "--sru",
        "64KiB",
        "--strategies",
        "naive",
        "--blocks",
        "10",
        "--warmup",
        "1",
        "--max-time",
        "10s",
    ]);
    assert_eq!(lines[0]["testbed"]["host_burst_bytes"], 16384, "{}", lines[0]);
    assert_eq!(lines[0]["testbed"]["host_gso_max_bytes"], 8192, "{}", lines[0]);
    assert_eq!(lines[1]["failed_blocks"], 0, "{}", lines[1]);
    assert_nothing_left();
}

#[test]
fn a_killed_run_leaves_no_namespace_behind() {
    if !testbed_possible() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut child = Command::new(BIN)
        .args([
            "sweep",
            "--testbed",
            "--senders",
            "16",
            "--hosts",
            "4",
            "--sru",
            "32KiB",
            "--strategies",
            "naive",
            "--background",
            "1",
        ])
        .args(["--blocks", "100000", "--max-time", "30s", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait until its namespaces exist and its servers run: namespaces other than ours that
    // its threads are in or its descriptors hold (client, switch and the 4 hosts), and a
    // thread in the client's namespace (the reads started).
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let theirs = loop {
        let mut found = Vec::new();
        let mut threads_inside = 0;
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for t in tasks.flatten() {
                if let Ok(l) = std::fs::read_link(t.path().join("ns/net")) {
                    if l != ours {
                        threads_inside += 1;
                        if !found.contains(&l) {
                            found.push(l);
                        }
                    }
                }
            }
        }
        if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            for fd in fds.flatten() {
                if let Ok(l) = std::fs::read_link(fd.path()) {
                    if l.to_string_lossy().starts_with("net:") && l != ours && !found.contains(&l) {
                        found.push(l);
                    }
                }
            }
        }
        if found.len() >= 6 && threads_inside >= 2 {
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
    for (flag, value, says) in [
        ("--hosts", "513", "testbed hosts is 513"),
        ("--host-rate", "10bit", "testbed host rate is 10 bit/s"),
        ("--host-gso-max", "1000", "testbed host gso max is 1000 B"),
        ("--concurrency", "0", "at least 1"),
        ("--server-delay", "11s", "a server delay is at most"),
    ] {
        let out = Command::new(BIN)
            .args(["sweep", "--testbed", "--sru", "32KiB", "--senders", "2", flag, value])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{flag} {value}: {stderr}");
    }
    let out = Command::new(BIN)
        .args(["sweep", "--loopback", "--sru", "32KiB", "--strategies", "rto-route"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("runs only with --testbed"));
}

#[test]
fn loopback_sweep_writes_json_csv_and_plot() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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
            "naive,capped,scheduled,chunked,hedged,default,quic,fallback,blocking",
        ])
        .args([
            "--blocks",
            "4",
            "--warmup",
            "1",
            "--min-time",
            "0s",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .arg("--csv")
        .arg(&csv)
        .arg("--plot")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let results = 2 * 2 * 9;
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
        2 * 9,
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

/// Runs `sweep --loopback --quiet` with `args` and returns its JSON lines (the header first).
fn loopback_json(tag: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let dir = std::env::temp_dir().join(format!("incast-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("r.jsonl");
    let out = Command::new(BIN)
        .args(["sweep", "--loopback", "--quiet", "--json"])
        .arg(&json)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&json).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn a_configuration_reads_past_its_blocks_until_the_minimum_time() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lines = loopback_json(
        "min-time",
        &[
            "--senders",
            "1",
            "--sru",
            "8KiB",
            "--strategies",
            "naive",
            "--blocks",
            "4",
            "--warmup",
            "1",
            "--min-time",
            "300ms",
        ],
    );
    assert_eq!(lines[0]["min_time_s"], 0.3);
    let r = &lines[1];
    // Four 8 KiB blocks take well under a millisecond on loopback: the rest is min-time's.
    assert!(r["blocks"].as_u64().unwrap() > 4, "{r}");
    assert!(r["elapsed_s"].as_f64().unwrap() >= 0.3, "{r}");
    assert_eq!(r["failed_blocks"], 0, "{r}");
}

#[test]
fn a_server_delay_holds_every_request() {
    // Servers whose store takes 25 ms a read: no block reads faster than that.
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lines = loopback_json(
        "server-delay",
        &[
            "--server-delay",
            "25ms",
            "--senders",
            "2",
            "--sru",
            "8KiB",
            "--strategies",
            "naive,default",
            "--blocks",
            "3",
            "--warmup",
            "0",
            "--min-time",
            "0s",
        ],
    );
    assert_eq!(lines.len(), 3, "{lines:?}");
    for r in &lines[1..] {
        assert_eq!(r["failed_blocks"], 0, "{r}");
        assert!(r["p50_ms"].as_f64().unwrap() >= 25.0, "{r}");
    }
}

#[test]
fn a_closed_stdout_ends_the_program_quietly() {
    // `incast-bench ... | head` closes the pipe early; println! would panic there.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(BIN)
        .args(["model"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

/// The short fault run of CI (issue 13): 1% loss both ways, a host frozen for 1 s at a time,
/// and a host killed mid-read, with concurrent reads whose every completed block is checked
/// byte for byte. No corrupt block, reads still complete under each fault (every fragment
/// has a replica), and nothing is left behind. Needs `nft` (Debian package `nftables`).
#[test]
fn the_short_fault_run_returns_no_corrupt_block() {
    if !testbed_possible() {
        return;
    }
    let nft = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join("nft").exists());
    if !nft {
        let required = std::env::var("INCAST_REQUIRE_TESTBED").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "INCAST_REQUIRE_TESTBED=1 but nft is missing: apt-get install -y nftables"
        );
        eprintln!("skipping: nft is missing (apt-get install -y nftables)");
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("incast-chaos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("chaos.jsonl");
    let t = Instant::now();
    let out = Command::new(BIN)
        .args([
            "chaos",
            "--duration",
            "24s",
            "--senders",
            "8",
            "--sru",
            "32KiB",
            "--concurrency",
            "4",
            "--faults",
            "loss-1,freeze-1s,kill",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chaos failed:\n{stdout}\n{stderr}");
    eprintln!("{stdout}(took {:?})", t.elapsed());
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&json)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    let faults: Vec<&str> = rows.iter().map(|r| r["fault"].as_str().unwrap()).collect();
    assert_eq!(faults, ["none", "loss-1", "freeze-1000ms", "kill"]);
    for r in &rows {
        assert_eq!(r["corrupt"], 0, "{r}");
        let (attempted, completed, failed) = (
            r["attempted"].as_u64().unwrap(),
            r["completed"].as_u64().unwrap(),
            r["failed"].as_u64().unwrap(),
        );
        assert_eq!(attempted, completed + failed, "{r}");
        // Every fragment has a replica: reads go on under each fault.
        assert!(completed > 0, "{r}");
    }
    assert_eq!(rows[0]["failed"], 0, "the baseline failed reads: {}", rows[0]);
    // Loss was really on the path: the nftables rules dropped frames (about 1% of them).
    assert!(
        rows[1]["attack"].as_u64().unwrap() > 100,
        "1% loss dropped nothing: {}",
        rows[1]
    );
    let kill = &rows[3];
    assert!(
        kill["failed_over"].as_u64().unwrap() > 0,
        "no read moved to a replica: {kill}"
    );
    assert_nothing_left();
}
