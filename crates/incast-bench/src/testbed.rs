//! The emulated shallow-buffered switch: three network namespaces on one Linux machine.
//!
//! ```text
//!  client ns                 switch ns                          servers ns
//!  incast-c 198.18.0.1 ── incast-swc ┐                 ┌ incast-sws ── incast-s 198.18.0.2
//!                          (tbf: rate, burst, limit)   │                (all servers, one port each)
//!                                    └── incast-br ────┘
//! ```
//!
//! Data flows from the servers to the client, so every response crosses the bridge and meets
//! in the one shaped queue: a `tbf` qdisc on the switch port toward the client, with `rate`
//! the link rate and `limit` the port buffer in bytes. That is the topology of
//! ../shared/TESTBED.md, which reproduced 200 ms incast stalls at 8 or more senders with a
//! 32 KiB buffer at 1 Gbit/s. The bottleneck is deliberately not on the servers' own
//! interface: drops there are local to the sender, and TCP reacts to them differently from
//! drops in a switch. TSO, GSO and GRO are off on every veth, so the queue holds MTU packets,
//! not 64 KB super-packets. The congestion control is set on every socket (TCP_CONGESTION)
//! and, where the kernel allows it, as the namespaces' default. `net.ipv4.tcp_no_metrics_save` is on in the client and server
//! namespaces, so a strategy that collapsed does not hand its cached ssthresh to the next one.
//!
//! Addresses come from the benchmarking range 198.18.0.0/15 (RFC 2544) and exist only inside
//! these namespaces. The namespaces are held by this process (see [`crate::netns`]) and
//! vanish with it, also after a crash or Ctrl-C.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::Duration;

use crate::netns::{CommandError, Netns};

/// Client address inside the testbed.
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Address every server listens on inside the testbed.
pub const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// The testbed's subnet.
pub const SUBNET: &str = "198.18.0.0/24";
/// Prefix of every namespace and interface the testbed creates.
pub const PREFIX: &str = "incast";
/// Names `testbed up` pins the namespaces under (in /run/netns).
pub const PINNED: [&str; 3] = ["incast-client", "incast-switch", "incast-servers"];
/// Default link rate (1 Gbit/s).
pub const DEFAULT_RATE_BPS: u64 = 1_000_000_000;
/// Default port buffer (32 KiB), the shallow buffer of the seeds' switches.
pub const DEFAULT_BUFFER: u64 = 32 * 1024;
/// Default tbf bucket (16 KiB).
pub const DEFAULT_BURST: u64 = 16 * 1024;
/// Default congestion control, set explicitly in both namespaces.
pub const DEFAULT_CC: &str = "cubic";

const CLIENT_IF: &str = "incast-c";
const SERVER_IF: &str = "incast-s";
/// The shaped switch port toward the client.
pub const SWITCH_CLIENT_PORT: &str = "incast-swc";
const SWITCH_SERVER_PORT: &str = "incast-sws";
const BRIDGE: &str = "incast-br";

/// How to build the testbed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TestbedConfig {
    /// Rate of the client's switch port in bit/s (tbf `rate`).
    pub rate_bps: u64,
    /// Bytes the port may queue (tbf `limit`).
    pub buffer_bytes: u64,
    /// Token bucket in bytes (tbf `burst`).
    pub burst_bytes: u64,
    /// Congestion control of both namespaces (`net.ipv4.tcp_congestion_control`).
    pub cc: String,
}

impl Default for TestbedConfig {
    fn default() -> Self {
        Self {
            rate_bps: DEFAULT_RATE_BPS,
            buffer_bytes: DEFAULT_BUFFER,
            burst_bytes: DEFAULT_BURST,
            cc: DEFAULT_CC.to_owned(),
        }
    }
}

/// Why the testbed could not be built or changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestbedError {
    /// Network namespaces are a Linux feature.
    #[error("the testbed needs Linux network namespaces")]
    NotLinux,
    /// Creating a namespace was refused.
    #[error("cannot create a network namespace ({source}): run as root, or rootless inside `unshare -rn`")]
    NoPrivilege {
        /// The refusal.
        source: std::io::Error,
    },
    /// A tool the testbed runs is not installed.
    #[error("`{tool}` is not installed: install the `{package}` package (e.g. `apt-get install -y {package}`)")]
    MissingTool {
        /// The program.
        tool: &'static str,
        /// The Debian package that has it.
        package: &'static str,
    },
    /// A setting is out of range.
    #[error("testbed {what} is {value}: {allowed}")]
    BadConfig {
        /// Which setting.
        what: &'static str,
        /// Its value.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// A command failed.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// Any other I/O failure.
    #[error("testbed: {0}")]
    Io(#[from] std::io::Error),
}

/// Whether `tool` is an executable in PATH (or in /usr/sbin, /sbin, where iproute2 lives).
fn have_tool(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .any(|dir| dir.join(tool).is_file())
}

/// Checks that `ip`, `tc` and `ethtool` are installed.
pub fn check_tools() -> Result<(), TestbedError> {
    for (tool, package) in [("ip", "iproute2"), ("tc", "iproute2"), ("ethtool", "ethtool")] {
        if !have_tool(tool) {
            return Err(TestbedError::MissingTool { tool, package });
        }
    }
    Ok(())
}

/// Counters of the shaped port's queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct QdiscStats {
    /// Bytes the port sent.
    pub sent_bytes: u64,
    /// Packets it dropped (buffer full).
    pub dropped: u64,
}

impl QdiscStats {
    /// Counters accumulated since `before`.
    pub fn since(&self, before: &QdiscStats) -> QdiscStats {
        QdiscStats {
            sent_bytes: self.sent_bytes.saturating_sub(before.sent_bytes),
            dropped: self.dropped.saturating_sub(before.dropped),
        }
    }
}

/// A running testbed. Dropping it removes everything it built.
#[derive(Debug)]
pub struct Testbed {
    config: TestbedConfig,
    client: Netns,
    switch: Netns,
    servers: Netns,
}

impl Testbed {
    /// Builds the namespaces, links, bridge and shaped port.
    pub fn up(config: TestbedConfig) -> Result<Self, TestbedError> {
        if !cfg!(target_os = "linux") {
            return Err(TestbedError::NotLinux);
        }
        check_config(&config)?;
        check_tools()?;
        let ns = |name: &str| {
            Netns::new(name).map_err(|source| match source.kind() {
                std::io::ErrorKind::PermissionDenied => TestbedError::NoPrivilege { source },
                _ => TestbedError::Io(source),
            })
        };
        let tb = Self {
            client: ns("incast-client")?,
            switch: ns("incast-switch")?,
            servers: ns("incast-servers")?,
            config,
        };
        tb.wire()?;
        Ok(tb)
    }

    fn wire(&self) -> Result<(), TestbedError> {
        let (sw, c, s) = (&self.switch, &self.client, &self.servers);
        let (cp, sp) = (c.path(), s.path());
        sw.command("ip", &["link", "add", BRIDGE, "type", "bridge"])?;
        sw.command(
            "ip",
            &[
                "link",
                "add",
                SWITCH_CLIENT_PORT,
                "type",
                "veth",
                "peer",
                "name",
                CLIENT_IF,
                "netns",
                &cp,
            ],
        )?;
        sw.command(
            "ip",
            &[
                "link",
                "add",
                SWITCH_SERVER_PORT,
                "type",
                "veth",
                "peer",
                "name",
                SERVER_IF,
                "netns",
                &sp,
            ],
        )?;
        for port in [SWITCH_CLIENT_PORT, SWITCH_SERVER_PORT] {
            sw.command("ip", &["link", "set", port, "master", BRIDGE])?;
        }
        for (ns, dev, addr) in [(c, CLIENT_IF, CLIENT_ADDR), (s, SERVER_IF, SERVER_ADDR)] {
            // IPv6 would only add router solicitations to the shaped queue.
            let _ = ns.sysctl("net/ipv6/conf/all/disable_ipv6", "1");
            // A namespace other than the initial one may only default to an algorithm in
            // net.ipv4.tcp_allowed_congestion_control (EPERM otherwise); the servers and the
            // client also set it per socket (TCP_CONGESTION), which root may always do.
            let _ = ns.sysctl("net/ipv4/tcp_congestion_control", &self.config.cc);
            ns.sysctl("net/ipv4/tcp_no_metrics_save", "1")?;
            ns.command("ip", &["addr", "add", &format!("{addr}/24"), "dev", dev])?;
            ns.command("ethtool", &["-K", dev, "tso", "off", "gso", "off", "gro", "off"])?;
            ns.command("ip", &["link", "set", "lo", "up"])?;
            ns.command("ip", &["link", "set", dev, "up"])?;
        }
        let _ = sw.sysctl("net/ipv6/conf/all/disable_ipv6", "1");
        for dev in [SWITCH_CLIENT_PORT, SWITCH_SERVER_PORT] {
            sw.command("ethtool", &["-K", dev, "tso", "off", "gso", "off", "gro", "off"])?;
            sw.command("ip", &["link", "set", dev, "up"])?;
        }
        sw.command("ip", &["link", "set", BRIDGE, "up"])?;
        let cfg = &self.config;
        sw.command(
            "tc",
            &[
                "qdisc",
                "replace",
                "dev",
                SWITCH_CLIENT_PORT,
                "root",
                "tbf",
                "rate",
                &format!("{}bit", cfg.rate_bps),
                "burst",
                &cfg.burst_bytes.to_string(),
                "limit",
                &cfg.buffer_bytes.to_string(),
            ],
        )?;
        Ok(())
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &TestbedConfig {
        &self.config
    }

    /// The client's namespace.
    pub fn client(&self) -> &Netns {
        &self.client
    }

    /// The servers' namespace.
    pub fn servers(&self) -> &Netns {
        &self.servers
    }

    /// Address of the servers.
    pub fn server_ip(&self) -> IpAddr {
        IpAddr::V4(SERVER_ADDR)
    }

    /// Sets (`Some`) or removes (`None`) the per-route `rto_min` on the servers' route to the
    /// client: the kernel-level fix of the literature, for reference. New connections take it.
    pub fn set_route_rto_min(&self, rto_min: Option<Duration>) -> Result<(), TestbedError> {
        let mut args = vec![
            "route".to_owned(),
            "replace".into(),
            SUBNET.into(),
            "dev".into(),
            SERVER_IF.into(),
            "src".into(),
            SERVER_ADDR.to_string(),
        ];
        if let Some(d) = rto_min {
            // iproute2 6.1 takes whole milliseconds here ("1000us" is rejected).
            args.extend(["rto_min".into(), format!("{}ms", d.as_millis().max(1))]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.servers.command("ip", &args)?;
        Ok(())
    }

    /// Counters of the shaped port.
    pub fn qdisc_stats(&self) -> Result<QdiscStats, TestbedError> {
        let out = self
            .switch
            .command("tc", &["-s", "qdisc", "show", "dev", SWITCH_CLIENT_PORT])?;
        Ok(parse_qdisc_stats(&out))
    }

    /// Pins the namespaces by name (`ip netns attach`, under /run/netns) so that they outlive
    /// this process; `incast-bench testbed down` removes them.
    pub fn pin(&self) -> Result<(), TestbedError> {
        for (ns, name) in [&self.client, &self.switch, &self.servers].into_iter().zip(PINNED) {
            let name = name.to_owned();
            // A thread inside the namespace names itself; `ip netns attach` bind-mounts it.
            let out = ns.run(move || -> std::io::Result<std::process::Output> {
                let me = std::fs::read_link("/proc/thread-self")?;
                let tid = me
                    .file_name()
                    .and_then(|t| t.to_str())
                    .ok_or_else(|| std::io::Error::other("cannot read /proc/thread-self"))?
                    .to_owned();
                std::process::Command::new("ip")
                    .args(["netns", "attach", &name, &tid])
                    .output()
            })??;
            if !out.status.success() {
                return Err(TestbedError::Command(CommandError::Failed {
                    line: "ip netns attach".into(),
                    ns: ns.name().into(),
                    status: out.status.to_string(),
                    stderr: String::from_utf8_lossy(&out.stderr).trim().into(),
                }));
            }
        }
        Ok(())
    }
}

fn check_config(c: &TestbedConfig) -> Result<(), TestbedError> {
    let bad = |what, value: String, allowed| Err(TestbedError::BadConfig { what, value, allowed });
    if !(1_000_000..=100_000_000_000).contains(&c.rate_bps) {
        return bad(
            "rate",
            format!("{} bit/s", c.rate_bps),
            "allowed 1 Mbit/s ..= 100 Gbit/s",
        );
    }
    if !(3_000..=1 << 30).contains(&c.buffer_bytes) {
        return bad("buffer", format!("{} B", c.buffer_bytes), "allowed 3000 B ..= 1 GiB");
    }
    if !(1_600..=1 << 30).contains(&c.burst_bytes) {
        return bad(
            "burst",
            format!("{} B", c.burst_bytes),
            "allowed 1600 B ..= 1 GiB (at least one MTU)",
        );
    }
    if !["cubic", "reno", "bbr"].contains(&c.cc.as_str()) {
        return bad("congestion control", c.cc.clone(), "one of cubic, reno, bbr");
    }
    Ok(())
}

/// Reads `Sent N bytes M pkt (dropped D, ...` from `tc -s qdisc show`.
fn parse_qdisc_stats(out: &str) -> QdiscStats {
    let mut st = QdiscStats::default();
    let words: Vec<&str> = out.split_whitespace().collect();
    for (i, w) in words.iter().enumerate() {
        if *w == "Sent" {
            st.sent_bytes = words.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or(0);
        }
        if *w == "(dropped" {
            st.dropped = words
                .get(i + 1)
                .and_then(|v| v.trim_end_matches(',').parse().ok())
                .unwrap_or(0);
        }
    }
    st
}

/// The pinned testbed namespaces that exist now.
pub fn pinned() -> Vec<String> {
    PINNED
        .iter()
        .filter(|n| Path::new("/run/netns").join(n).exists())
        .map(|n| (*n).to_owned())
        .collect()
}

/// Removes the pinned namespaces (and with them every testbed interface).
pub fn down() -> Result<Vec<String>, TestbedError> {
    let mut removed = Vec::new();
    for name in pinned() {
        let out = std::process::Command::new("ip")
            .args(["netns", "delete", &name])
            .output()?;
        if !out.status.success() {
            return Err(TestbedError::Command(CommandError::Failed {
                line: format!("ip netns delete {name}"),
                ns: "(root)".into(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().into(),
            }));
        }
        removed.push(name);
    }
    Ok(removed)
}

/// Interfaces named with the project prefix in the calling thread's namespace; a testbed
/// that cleaned up leaves none here.
pub fn leftover_interfaces() -> std::io::Result<Vec<String>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/sys/class/net")? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if name.starts_with(PREFIX) {
            v.push(name);
        }
    }
    Ok(v)
}

impl fmt::Display for TestbedConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tbf rate {} Mbit/s, buffer {} B, burst {} B, {}",
            self.rate_bps / 1_000_000,
            self.buffer_bytes,
            self.burst_bytes,
            self.cc
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tc_counters() {
        let out = "qdisc tbf 8001: root refcnt 2 rate 1Gbit burst 16Kb lat 0us\n \
                   Sent 123456 bytes 99 pkt (dropped 7, overlimits 3 requeues 0)\n backlog 0b 0p requeues 0\n";
        assert_eq!(
            parse_qdisc_stats(out),
            QdiscStats {
                sent_bytes: 123456,
                dropped: 7
            }
        );
        assert_eq!(parse_qdisc_stats("garbage"), QdiscStats::default());
    }

    #[test]
    fn rejects_bad_config() {
        let c = TestbedConfig {
            cc: "vegas".into(),
            ..TestbedConfig::default()
        };
        assert!(matches!(check_config(&c), Err(TestbedError::BadConfig { .. })));
        let c = TestbedConfig {
            buffer_bytes: 10,
            ..TestbedConfig::default()
        };
        assert!(matches!(
            check_config(&c),
            Err(TestbedError::BadConfig { what: "buffer", .. })
        ));
        assert!(check_config(&TestbedConfig::default()).is_ok());
    }
}
